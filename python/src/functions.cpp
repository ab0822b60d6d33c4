// Python functions as the KBC functions the tracer reads them through
// (never run: CPython runs the program), their globals mirrored live; the
// settings and reports kiln.compile's frame hook shares.
//
// A Python function's code is translated to KBC once (kiln/_frontend.py);
// the KBC function reads its globals from a GlobalsObj that mirrors the
// Python module dict. The mirror is refreshed before each compiled call,
// only when the dict changed (CPython 3.11's dict version tag: one
// comparison when nothing changed), and only for the names translated code
// reads. A name keeps its Value while it names the same Python object, so a
// guard on a global's identity holds until the program rebinds it.
#include <pybind11/stl.h>

#include <algorithm>
#include <unordered_map>

#include "python/src/functions.h"

#include "codegen/llvm_backend.h"
#include "interpreter/assembler.h"
#include "interpreter/convert_frame.h"
#include "interpreter/kiln_api.h"
#include "output_graph/backend.h"
#include "output_graph/graph.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/foreign.h"
#include "python/src/function_origins.h"
#include "python/src/namespaces.h"
#include "python/src/python_vm.h"
#include "python/src/tensor_identity.h"
#include "python/src/torch_interop.h"
#include "python/src/torch_modules.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/name_map.h"

namespace kiln::python {

using runtime::Kind;
using runtime::Ref;
using runtime::Value;

namespace {

// Python's builtin of that name (borrowed), or null.
PyObject* python_builtin(const py::object& name) {
  static PyObject* dict = [] {
    py::object d = py::module_::import("builtins").attr("__dict__");
    return d.release().ptr();  // kept for the process
  }();
  PyObject* o = PyDict_GetItemWithError(dict, name.ptr());
  if (!o && PyErr_Occurred()) throw py::error_already_set();
  return o;
}

struct Mirror {
  py::dict dict;
  Ref<runtime::GlobalsObj> globals = [] {
    auto g = runtime::make_ref<runtime::GlobalsObj>();
    g->builtins = &runtime::python_builtins();  // Python's namespace, not KBC's registry ops
    return g;
  }();
  uint64_t version = ~uint64_t(0);
  // Names translated code reads, each with the object it was converted from
  // (a strong reference: its identity is what keeps the Value) and the
  // name as a Python str made once: any store into the module's dict (a
  // module-level loop's variable) re-reads every name, and building a str
  // per read cost more than the rest of a compiled call's dispatch.
  struct Name {
    py::object key;
    py::object seen;
    py::object code;  // a function's __code__ when seen: f.__code__ = g.__code__ makes it new
  };
  std::unordered_map<std::string, Name> names;
  // Entries of `names` are never erased, and a node-based map keeps their
  // addresses through rehashing: the per-call lists below point at them,
  // so the sync of every compiled call does no string hashing or compares
  // (it did, and it was a tenth of a breaking frame's cached call).
  using Entry = std::pair<const std::string, Name>;
  // Globals holding a torch tensor: torch can swap its storage under the
  // same object (x.data = y, set_, resize_) without touching the dict, so
  // each is compared with its kiln tensor on every sync.
  std::vector<Entry*> torch_names;
  // Globals holding a Python function: the program may replace its
  // __code__ without touching the dict, so each is compared on every sync.
  // A flat array of the two pointers compared, borrowed from the entry's
  // `seen` and `code` (watch() keeps it in step with every change to
  // them), so the per-call compare reads the function object alone, not
  // its map node first: the whole sync was 7% of a breaking frame's cached
  // call (perf, two syncs of 3 mirrors, 15 functions).
  struct FunctionWatch {
    Entry* e;
    PyObject* fn;
    PyObject* code;
  };
  std::vector<FunctionWatch> function_names;

  // After any change to e's `seen` or `code`.
  void watch(Entry& e) {
    Name& n = e.second;
    auto it = std::find_if(function_names.begin(), function_names.end(),
                           [&](const FunctionWatch& w) { return w.e == &e; });
    if (!n.seen || !PyFunction_Check(n.seen.ptr())) {
      if (it != function_names.end()) function_names.erase(it);
      return;
    }
    if (n.code.ptr() != PyFunction_GET_CODE(n.seen.ptr()))
      n.code = py::reinterpret_borrow<py::object>(PyFunction_GET_CODE(n.seen.ptr()));
    if (it == function_names.end()) it = function_names.insert(function_names.end(), FunctionWatch{&e, nullptr, nullptr});
    it->fn = n.seen.ptr();
    it->code = n.code.ptr();
  }

  void add_name(const std::string& name) {
    if (!names.count(name)) names.emplace(name, Name{py::str(name), py::object()});
  }

  void sync() {
    for (Entry* e : torch_names) {
      Name& n = e->second;
      if (!n.seen || !is_torch_tensor(n.seen.ptr())) continue;
      const Value* now = globals->map.find(e->first);
      if (now && now->is(Kind::Tensor) && !torch_tensor_matches(n.seen.ptr(), now->as_tensor()))
        globals->map.set(e->first, to_value_shared(n.seen));
    }
    // By index: converting a function may translate it, which may add names.
    for (size_t i = 0; i < function_names.size(); ++i) {
      FunctionWatch& w = function_names[i];
      PyObject* code = PyFunction_GET_CODE(w.fn);
      if (code == w.code) continue;
      Entry* e = w.e;
      e->second.code = py::reinterpret_borrow<py::object>(code);
      w.code = code;
      globals->map.set(e->first, to_value_shared(e->second.seen));  // a new KBC function: guards on it fail
    }
    const uint64_t v = dict_version(dict.ptr());
    if (v == version) return;
    version = v;
    // Converting a global may translate another function of this module,
    // which adds names here: walk a snapshot, then the names added meanwhile.
    // (Element pointers survive the map's rehashing; iterators do not.)
    size_t done = 0;
    std::vector<Entry*> todo;
    do {
      todo.clear();
      for (auto& kv : names) todo.push_back(&kv);
      done = todo.size();
      for (Entry* entry : todo) sync_name(*entry);
    } while (names.size() != done);
  }

  void sync_name(Entry& e) {
    const std::string& name = e.first;
    Name& n = e.second;
    PyObject* now = PyDict_GetItemWithError(dict.ptr(), n.key.ptr());  // borrowed; str keys cannot raise
    if (now == n.seen.ptr() && now) return;
    if (!now) {
      // Not a module global: a builtin. kiln's where it has one (len,
      // range, ...: the VM resolves those in python_builtins()); otherwise Python's own
      // function or class (id, open, UnicodeError, ...), called through the
      // foreign seam (runtime/semantics/builtins.def says how the tracer treats it);
      // otherwise a NameError the VM raises.
      PyObject* py_builtin = runtime::python_builtins().find(name) ? nullptr : python_builtin(n.key);
      if (py_builtin) {
        if (n.seen.ptr() != py_builtin) {
          n.seen = py::reinterpret_borrow<py::object>(py_builtin);
          watch(e);
          globals->map.set(name, to_value_shared(n.seen));
        }
        return;
      }
      globals->map.erase(runtime::intern(name).get());
      n.seen = py::object();
      watch(e);
      return;
    }
    n.seen = py::reinterpret_borrow<py::object>(now);
    watch(e);
    globals->map.set(name, to_value_shared(py::handle(now)));
    if (is_torch_tensor(now) && std::find(torch_names.begin(), torch_names.end(), &e) == torch_names.end())
      torch_names.push_back(&e);
  }

  // STORE_GLOBAL in translated code (GlobalsObj::on_store): the module dict
  // gets the value, so Python sees the assignment. The mirror keeps kiln's
  // Value and remembers the object it became, so the next sync does not
  // convert it back.
  static void store(runtime::GlobalsObj* g, const runtime::StrObj* name, const Value& value) {
    auto* self = static_cast<Mirror*>(g->owner);
    try {
      py::gil_scoped_acquire gil;
      const bool current = dict_version(self->dict.ptr()) == self->version;
      self->add_name(name->s);
      Name& n = self->names.at(name->s);
      py::object obj = to_py(value);
      if (PyDict_SetItem(self->dict.ptr(), n.key.ptr(), obj.ptr()) < 0) throw py::error_already_set();
      n.seen = obj;
      self->watch(*self->names.find(name->s));
      if (current) self->version = dict_version(self->dict.ptr());  // nothing else changed meanwhile
    } catch (py::error_already_set& e) {
      rethrow_as_kiln(e);
    }
  }
};

std::unordered_map<PyObject*, std::unique_ptr<Mirror>>& mirrors() {
  static auto* m = new std::unordered_map<PyObject*, std::unique_ptr<Mirror>>();
  return *m;
}

Mirror& mirror_for(const py::dict& d) {
  auto& m = mirrors()[d.ptr()];
  if (!m) {
    m = std::make_unique<Mirror>();
    m->dict = d;
    m->globals->owner = m.get();
    m->globals->on_store = &Mirror::store;
  }
  return *m;
}

}  // namespace

namespace {

// Python closure cells that translated functions read: one kiln cell per
// Python cell, however many functions close over it (two methods of a class
// made in a function share its variables). Python stays the truth: before
// kiln runs (sync_python_state) each kiln cell takes its Python cell's
// contents if they changed (a `nonlocal` rebinding in Python code), and a
// store by the VM goes to the Python cell (store_host_cell). Before, each
// function got a snapshot of the cell when translated: a kiln.nn class
// defined in a function kept the value its closure variable had then.
struct HostCell {
  py::object cell;
  Ref<runtime::CellObj> kiln;
  // What the cell held when last read, held: an identity test against a
  // borrowed pointer is fooled once the cell is rebound, the old value
  // freed and a new one (an int from the same pool) made at its address:
  // the kiln cell then kept the stale value (progen seed 1056844, a
  // closure's `nonlocal n += p`).
  py::object seen;
  py::object code;  // a function's __code__ when seen (replaced: converted anew)
};
std::vector<HostCell>& host_cells() {
  static auto* v = new std::vector<HostCell>();
  return *v;
}
std::unordered_map<PyObject*, size_t>& host_cell_index() {
  static auto* m = new std::unordered_map<PyObject*, size_t>();
  return *m;
}

void store_host_cell(runtime::CellObj* c) {
  auto it = host_cell_index().find(static_cast<PyObject*>(c->host));
  if (it == host_cell_index().end()) return;
  HostCell& h = host_cells()[it->second];
  py::gil_scoped_acquire gil;
  py::object obj = c->v.is_null() ? py::object() : to_py(c->v);
  if (PyCell_Set(h.cell.ptr(), obj.ptr()) != 0) throw py::error_already_set();
  h.seen = obj;
}

Ref<runtime::CellObj> host_cell_for(py::handle cell) {
  auto& index = host_cell_index();
  if (auto it = index.find(cell.ptr()); it != index.end()) return host_cells()[it->second].kiln;
  if (host_cells().empty()) runtime::set_host_cell_store_hook(store_host_cell);
  auto c = runtime::make_ref<runtime::CellObj>();
  PyObject* contents = PyCell_GET(cell.ptr());
  c->v = contents ? to_value_shared(contents) : Value::null();
  c->host = cell.ptr();
  index.emplace(cell.ptr(), host_cells().size());
  host_cells().push_back({py::reinterpret_borrow<py::object>(cell), c, py::reinterpret_borrow<py::object>(contents),
                          contents && PyFunction_Check(contents)
                              ? py::reinterpret_borrow<py::object>(PyFunction_GET_CODE(contents))
                              : py::object()});
  return c;
}

// The changed Python cells into their kiln cells; cells only this registry
// still holds are let go.
void sync_host_cells() {
  auto& cells = host_cells();
  auto& index = host_cell_index();
  for (size_t i = 0; i < cells.size();) {
    HostCell& h = cells[i];
    if (h.kiln->refcount() == 1) {
      h.kiln->host = nullptr;
      index.erase(h.cell.ptr());
      if (i + 1 != cells.size()) {
        cells[i] = std::move(cells.back());
        index[cells[i].cell.ptr()] = i;
      }
      cells.pop_back();
      continue;
    }
    PyObject* now = PyCell_GET(h.cell.ptr());
    // The same torch tensor with its storage swapped is a new value.
    const bool same = now == h.seen.ptr() && !(now && is_torch_tensor(now) && h.kiln->v.is(Kind::Tensor) &&
                                         !torch_tensor_matches(now, h.kiln->v.as_tensor())) &&
                      !(now && PyFunction_Check(now) && PyFunction_GET_CODE(now) != h.code.ptr());
    if (!same) {
      h.seen = py::reinterpret_borrow<py::object>(now);
      h.code = now && PyFunction_Check(now) ? py::reinterpret_borrow<py::object>(PyFunction_GET_CODE(now)) : py::object();
      h.kiln->v = now ? to_value_shared(py::handle(now)) : Value::null();
    }
    ++i;
  }
}

}  // namespace

Value make_kbc_function(const std::string& text, const std::string& entry, const std::string& filename,
                        const py::dict& globals, const std::vector<std::string>& globals_used,
                        const py::object& defaults, const py::object& kwdefaults, const py::object& closure,
                        const py::object& origin, const py::dict& nested_codes) {
  interpreter::Program program = interpreter::assemble(text, filename);
  Mirror& m = mirror_for(globals);
  // The translation's own functions (comprehensions, nested defs) live in
  // the mirror under their unique KBC names; every function reads globals
  // from the mirror, not from the Program (which empties its namespace
  // when it goes).
  Value fn;
  for (const auto& item : program.items) {
    if (!item.function) continue;
    item.function->globals = m.globals;
    if (item.function->code->name == entry) {
      fn = Value::object(Kind::Function, item.function);
      continue;
    }
    m.globals->map.set(item.function->code->name, Value::object(Kind::Function, item.function));
    py::str kbc_name(item.function->code->name);
    if (nested_codes.contains(kbc_name)) remember_code_origin(item.function->code, nested_codes[kbc_name], globals);
  }
  if (fn.is_none()) throw_error(ErrorKind::ValueError, "translated KBC has no function '" + entry + "'");
  for (const auto& name : globals_used) m.add_name(name);
  // The module's name, for CPython's "mod.f() got multiple values for
  // keyword argument" (runtime/semantics/kwargs.h): never read by translated code.
  m.add_name("__name__");
  m.version = ~uint64_t(0);  // new names: read at the next sync_python_state (not here:
                             // the caller caches this function first, so a
                             // function that names itself finds it)

  auto* f = fn.as<runtime::FunctionObj>();
  f->defaults.clear();
  if (!defaults.is_none())
    for (py::handle d : defaults) f->defaults.push_back(to_value_shared(d));  // Python's one shared default
  const runtime::Code& code = *f->code;
  f->kwdefaults.assign(size_t(code.kwonlyargcount), Value::null());
  if (!kwdefaults.is_none()) {
    py::dict kw = kwdefaults;
    for (int i = 0; i < code.kwonlyargcount; ++i) {
      const std::string& pname = code.varnames[size_t(code.argcount + i)];
      if (kw.contains(pname)) f->kwdefaults[size_t(i)] = to_value_shared(kw[py::str(pname)]);
    }
  }
  set_kbc_closure(fn, closure);
  remember_origin(fn, origin);
  return fn;
}

void set_kbc_closure(const Value& fn, const py::object& closure) {
  // Free variables: the kiln cell of each Python cell (host_cell_for).
  auto* f = fn.as<runtime::FunctionObj>();
  f->closure.clear();
  if (!closure.is_none())
    for (py::handle cell : closure) f->closure.push_back(host_cell_for(cell));
}

void sync_python_state() {
  // Every mirror, not only the called function's: an inlined function of
  // another module reads (and its guards check) that module's mirror.
  for (auto& [dict, m] : mirrors()) m->sync();
  sync_namespaces();
  sync_host_cells();
  sync_torch_modules();
}

}  // namespace kiln::python

namespace kiln::python {

// kiln.config's collective settings (kiln/_compile.py sets them before
// each compile).
struct CollectiveSettings {
  bool compiler = false, guards = false;
  double timeout_s = 60;
};
CollectiveSettings& collective_settings() {
  static CollectiveSettings s;
  return s;
}

Options options_from(const std::string& backend, bool fullgraph, const py::object& dynamic, int cache_size_limit) {
  Options o;
  o.enable_compiler_collectives = collective_settings().compiler;
  o.enable_guard_collectives = collective_settings().guards;
  o.collective_timeout_s = collective_settings().timeout_s;
  o.backend = backend;
  o.fullgraph = fullgraph;
  if (!dynamic.is_none()) o.dynamic = dynamic.cast<bool>();
  o.cache_size_limit = cache_size_limit;
  o.stdout_sink = write_python_stdout;
  return o;
}

py::object report_to_py(const ExplainReport& r) {
  py::dict d;
  d["graph_count"] = r.graph_count;
  d["graph_break_count"] = r.graph_break_count;
  py::list breaks;
  for (const auto& b : r.breaks) {
    py::dict e;
    e["id"] = b.id;
    e["reason"] = b.reason;
    e["function"] = b.function;
    e["file"] = b.file;
    e["line"] = b.line;
    e["hint"] = b.hint;
    breaks.append(e);
  }
  d["breaks"] = breaks;
  d["ops_per_graph"] = py::cast(r.ops_per_graph);
  d["autograd_per_graph"] = py::cast(r.autograd_per_graph);
  d["graphs"] = py::cast(r.graphs);
  py::list graph_objects;
  for (const auto& g : r.graph_objects) graph_objects.append(py::cast(g));  // kiln._C.FxGraph (fx.cpp)
  d["graph_objects"] = graph_objects;
  d["guards"] = py::cast(r.guards);
  d["recompile_reasons"] = py::cast(r.recompile_reasons);
  d["result"] = to_py(r.result);
  d["error"] = r.error;
  d["text"] = r.str();
  return d;
}


void bind_functions(py::module_& m) {
  m.def("make_kbc_function", &make_kbc_function, py::arg("text"), py::arg("entry"), py::arg("filename"),
        py::arg("globals"), py::arg("globals_used"), py::arg("defaults"), py::arg("kwdefaults"), py::arg("closure"),
        py::arg("origin") = py::none(), py::arg("nested_codes") = py::dict(),
        "The KBC function of a translation, reading the Python module's globals live.");
  m.def("set_kbc_closure", [](const Value& fn, py::object closure) {
    guarded([&] {
      if (!fn.is(Kind::Function)) throw_error(ErrorKind::TypeError, "set_kbc_closure: expected a KBC function");
      set_kbc_closure(fn, closure);
    });
  }, "Gives a KBC function the kiln cells of a Python function's closure.");
  m.def("sync_python_state", [] { guarded([&] { sync_python_state(); }); },
        "Brings every module mirror and namespace up to date (one comparison per module when nothing changed).");
  // backend=<a Python callable>: (gm: kiln.fx.GraphModule, example_inputs)
  // -> a callable taking the graph's inputs and returning its outputs (a
  // list or tuple, or the one output), as torch.compile's backends are.
  m.def("register_python_backend", [](const std::string& name, py::object fn) {
    auto hold = [](py::object o) {  // released with the GIL held, whoever drops the last copy
      return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
        py::gil_scoped_acquire gil;
        delete p;
      });
    };
    output_graph::register_backend(name, [fn = hold(fn), hold](std::shared_ptr<const output_graph::Graph> graph,
                                                               const std::vector<Value>& examples) {
      py::gil_scoped_acquire gil;
      try {
        py::object gm = py::module_::import("kiln.fx").attr("_captured")(
            py::cast(std::const_pointer_cast<output_graph::Graph>(graph)));
        py::list ex;
        for (const Value& v : examples) ex.append(to_py(v));
        py::object compiled;
        try {
          compiled = (*fn)(gm, ex);
        } catch (py::error_already_set& e) {
          // The user's backend raised: the program's error, raised on the
          // frames path too (not a kiln failure it would hide).
          try {
            rethrow_as_kiln(e);
          } catch (const Error& k) {
            throw interpreter::ProgramError(k);
          }
        }
        if (!PyCallable_Check(compiled.ptr()))
          throw_error(ErrorKind::TypeError, "the backend " + std::string(py::repr(*fn)) +
                                                " returned " + std::string(py::repr(compiled)) + ", not a callable");
        return output_graph::CompiledGraph(
            [run = hold(compiled)](runtime::CallContext&, const std::vector<Value>& inputs) {
              py::gil_scoped_acquire gil;
              try {
                py::tuple args(inputs.size());
                for (size_t i = 0; i < inputs.size(); ++i) args[i] = to_py(inputs[i]);
                py::object r = (*run)(*args);
                std::vector<Value> out;
                if (py::isinstance<py::list>(r) || py::isinstance<py::tuple>(r))
                  for (py::handle x : r) out.push_back(to_value(x));
                else
                  out.push_back(to_value(r));
                return out;
              } catch (py::error_already_set& e) {
                rethrow_as_kiln(e);
              }
            });
      } catch (py::error_already_set& e) {
        rethrow_as_kiln(e);
      }
    });
  }, "Registers a Python backend (gm, example_inputs) -> callable under `name`.");
  m.def("reset", [] {
    kiln::reset();
    torch_modules_walk_next();
  });
  // Why kiln does not take this torch tensor as a kiln tensor ("" when it
  // does; None when torch is not loaded): what explain's break reasons say.
  m.def("_torch_refusal", [](py::handle t) -> py::object {
    if (!torch_seen()) return py::none();
    return py::str(torch_tensor_refusal(t.ptr()));
  });
  m.def("_environ_mapping", [](py::handle environ) { guarded([&] { environ_mapping(environ); }); },
        "environ is os.environ: compiled code reads its variables under a guard on each.");
  m.def("_fold_at_trace_time", [](py::handle fn) { guarded([&] { fold_at_trace_time(fn); }); },
        "fn reached by compiled code is called at trace time and its immutable answer kept (inspect.signature).");
  m.def("_torch_direct_reads", [] {
    py::dict d;
    if (torch_seen())
      for (const auto& [what, direct] : torch_direct_reads()) d[py::str(what)] = direct;
    return d;
  }, "Which torch answers kiln reads from torch's C++ directly (empty before torch is loaded).");
  m.def("_set_collectives", [](bool compiler, bool guards, double timeout_s) {
    collective_settings() = {compiler, guards, timeout_s};
  });
  m.def("distributed_init", [] {
    return guarded([&] {
      auto g = kiln::distributed::init();
      return py::make_tuple(g->rank(), g->size(), g->name());
    });
  }, "Joins the MPI world (or stays a single rank without mpirun): (rank, size, name).");
  m.def("mark_dynamic", [](py::handle t, int64_t dim) { guarded([&] { kiln::mark_dynamic(to_value(t), dim); }); });
  m.def("cache_entries", [](const Value& fn) { return kiln::cache_entries(fn); });
  // What the llvm backend made of the last graph it compiled in this thread
  // (tests and benchmarks: whether it fell back, its kernels and eager steps).
  m.def("llvm_report", [] {
    const codegen::BackendReport& r = codegen::last_report();
    py::dict d;
    d["fell_back"] = r.fell_back;
    d["reason"] = r.reason;
    d["kernels"] = r.kernels;
    d["kernels_distinct"] = r.kernels_distinct;
    d["gemms"] = r.gemms;
    d["eager_steps"] = r.eager_steps;
    d["summary"] = r.summary;
    d["cache"] = r.cache;
    d["compile_ms"] = r.compile_ms;
    return d;
  });
  m.def("_set_function_converter", [](py::object f) { set_function_converter(std::move(f)); });
}

}  // namespace kiln::python

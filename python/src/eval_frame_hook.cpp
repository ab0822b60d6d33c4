// The frame-evaluation hook (PEP 523) for CPython 3.11.
//
// kiln.compile(fn) returns a FrameCompiled: calling it marks this thread
// active (its Options) and calls fn itself, so CPython runs fn's frame. The
// hook sees every frame CPython starts while a thread is active:
//
//   * a frame of code kiln skips (kiln's own package, the standard
//     library, torch and numpy, generators and coroutines, code kiln cannot
//     translate, the CPython code kiln made itself) runs unchanged;
//   * any other frame is traced (the tracer reads the frame's parameters,
//     converted once, through its usual Sources and guards) and the cache
//     entry its guards pick runs instead: a graph alone (FastPath), or a
//     CPython code object made from the entry's residual by
//     kiln/_frames.py: the residual's KBC (graph call, values rebuilt, side
//     effects replayed) translated to CPython bytecode, then, after a
//     break, a jump into a copy of the frame's own bytecode at the breaking
//     instruction. Everything outside graphs is CPython's, on the program's
//     objects, and calls it makes come back to this hook as frames of their
//     own (a break deep in a model costs one break, not the rest of it).
//
// Never worse than eager: anything kiln fails at while translating,
// tracing or compiling a frame leaves that frame to CPython, unchanged,
// with the reason logged (KILN_LOGS=frames) and kept for explain; with
// kiln.config.strict the failure raises instead.
//
// The frame protocol this file relies on (per version: frame_access.h):
// the caller of the eval function made the frame, with the bound
// arguments in place and none of the code run, and unmakes it after the
// eval function returns, whatever it did with it; with an eval function
// installed, CPython does not inline Python-to-Python calls, so every frame
// comes here.
#include "python/src/eval_frame_hook.h"

#include "python/src/frame_access.h"
#include "python/src/python_compat.h"

#include <pybind11/stl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "interpreter/frame_cache.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/function_origins.h"
#include "python/src/functions.h"
#include "python/src/python_vm.h"
#include "python/src/tensor_identity.h"
#include "python/src/torch_interop.h"
#include "runtime/base/fault_injection.h"
#include "runtime/base/log.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/super.h"
#include "runtime/value/code.h"
#include "runtime/value/name_map.h"

namespace kiln::python {

using interpreter::CacheEntry;
using runtime::FunctionObj;
using runtime::Kind;
using runtime::Ref;
using runtime::Value;

namespace {

// What one kiln.compile(fn) call sets for the frames it reaches.
struct FrameOptions {
  Options options;
  bool strict = false;
  PyObject* root = nullptr;  // what kiln.compile was given (borrowed: FrameCompiled holds it)
  // The same with Options::random_is_hosts off: for frames over kiln's own
  // tensors and modules alone (kiln_eval_frame decides per frame).
  Options kiln_random;
  FrameOptions(Options o, bool strict) : options(std::move(o)), strict(strict), kiln_random(options) {
    kiln_random.random_is_hosts = false;
  }
};

// The active kiln.compile call on this thread (null: the hook lets every
// frame through at the cost of one test).
thread_local const FrameOptions* active = nullptr;

// A torch tensor, or a tuple, list or dict that holds one itself: a
// wrapper's `*args` / `**kwargs` (transformers' decorators) carry the
// model's tensors one level down. Deeper nesting is not looked at: this
// runs on every call of every frame the hook sees.
bool holds_torch_tensor(PyObject* o) {
  if (is_torch_tensor(o)) return true;
  if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject** items = PySequence_Fast_ITEMS(o);
    for (Py_ssize_t i = 0; i < n; ++i)
      if (is_torch_tensor(items[i])) return true;
  } else if (PyDict_CheckExact(o)) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(o, &pos, &key, &value))
      if (is_torch_tensor(value)) return true;
  }
  return false;
}

// kiln/_frames.py's callbacks, set once at import.
struct Callbacks {
  py::object classify;  // code -> None (trace it), "root module call" / "module forward" (CodeState) or why not
  py::object kbc;       // function -> its KBC function, or None
  py::object build;     // (code, residual info) -> (CPython code object, note or None), or why not (a str)
  py::object uses_torch;  // function -> whether it reads torch (its tensors then leave as torch's)
};
Callbacks& callbacks() {
  static auto* c = new Callbacks();  // never destroyed: Python objects outlive no interpreter
  return *c;
}

// Per code object (co_extra): what the hook does with its frames.
// kiln.reset() advances it: a code's state from before (a frame left to
// CPython after a failure) is classified afresh.
uint64_t reset_epoch = 0;

struct CodeState {
  enum class Mode : uint8_t { Trace, Skip } mode = Mode::Skip;
  uint64_t epoch = reset_epoch;
  bool kilns_own = false;  // code kiln made (an entry's CPython code): skipped whatever the epoch
  // Library code (the standard library, torch, numpy, kiln itself) and
  // kiln.disable'd functions: what they call is left to CPython too.
  bool recursive = false;
  std::string skip_reason;
  // The KBC functions the tracer reads this code's functions through: one
  // code serves many function objects (closures, defaults), each its own
  // KBC function. A few are kept, newest first: the methods one decorator
  // wraps share its wrapper's code, and a single slot made every call of
  // the next wrapped method translate and compile it again (a transformers
  // forward's deprecate_kwarg wrappers did, on every call).
  struct Translation {
    PyObject* func_ref = nullptr;  // a weakref to the function translated
    Value kbc;
    // It reads torch: tensors it makes leave as torch tensors, even when
    // none came in (torch.arange(5) is torch's, as in eager).
    bool torch_out = false;
    // kbc also serves every other function of this code over these globals
    // without defaults whose closure holds these very cells (none: a plain
    // function). The resume function a residual makes per call is such a
    // function: new each call, its closure a new tuple of the frame's cells.
    PyObject* globals = nullptr;  // null: kbc serves its own function only
    std::vector<py::object> cells;
    Translation() = default;
    Translation(Translation&& o) noexcept
        : func_ref(std::exchange(o.func_ref, nullptr)), kbc(std::move(o.kbc)), torch_out(o.torch_out),
          globals(o.globals), cells(std::move(o.cells)) {}
    Translation& operator=(Translation&& o) noexcept {
      std::swap(func_ref, o.func_ref);
      kbc = std::move(o.kbc);
      torch_out = o.torch_out;
      globals = o.globals;
      cells = std::move(o.cells);
      return *this;
    }
    ~Translation() { Py_XDECREF(func_ref); }
  };
  static constexpr size_t kTranslations = 8;
  std::vector<Translation> translations;
  // The translation kbc_for returned last: what the frame being evaluated
  // runs (its varnames size the residual's locals).
  Value kbc = Value::null();
  bool torch_out = false;
  // kiln.nn.Module.__call__: traced only as the compiled module's own call
  // (its first argument is FrameOptions::root). Called by CPython for any
  // other module, it runs unchanged and its hooks and forward are frames of
  // their own: a break there is the forward's, not reported twice.
  bool root_only = false;
  // The forward of a module class whose forward is kiln's (kiln/_frames.py
  // _builtin_forwards): traced as `self.forward(...)`, which is this code
  // only when the module's class resolves forward to it. Reached through a
  // subclass's super().forward(x), it runs unchanged (its native kernel, or
  // torch's own): tracing it as the subclass's forward would run that.
  bool own_forward_only = false;
};

Py_ssize_t extra_index = -1;

void free_code_state(void* p) { delete static_cast<CodeState*>(p); }

CodeState* state_of(PyCodeObject* code) {
  void* p = nullptr;
  if (code_get_extra(reinterpret_cast<PyObject*>(code), extra_index, &p) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  return static_cast<CodeState*>(p);
}

CodeState* set_state(PyCodeObject* code, CodeState* st) {
  if (code_set_extra(reinterpret_cast<PyObject*>(code), extra_index, st) < 0) {
    PyErr_Clear();
    delete st;
    return nullptr;
  }
  return st;
}

spdlog::logger* frames_log() { return kiln::log::get("frames"); }

// Runs kiln's own Python (the callbacks) with the hook switched off for
// this thread: the frontend's frames are never traced.
struct Inactive {
  const FrameOptions* saved = active;
  Inactive() { active = nullptr; }
  ~Inactive() { active = saved; }
};

// The code's state, classified on first sight.
CodeState* classify(PyCodeObject* code) {
  if (CodeState* st = state_of(code); st && (st->epoch == reset_epoch || st->kilns_own)) return st;
  auto* st = new CodeState();
  if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) {
    st->skip_reason = "a generator or coroutine";
  } else if (!callbacks().classify) {
    st->skip_reason = "kiln._frames is not loaded";
  } else {
    Inactive off;
    try {
      py::object why = callbacks().classify(py::handle(reinterpret_cast<PyObject*>(code)));
      if (why.is_none()) {
        st->mode = CodeState::Mode::Trace;
      } else if (py::isinstance<py::str>(why)) {  // "root module call" or "module forward"
        st->mode = CodeState::Mode::Trace;
        (py::cast<std::string>(why) == "root module call" ? st->root_only : st->own_forward_only) = true;
      } else {
        py::tuple t = why;  // (reason, recursive)
        st->skip_reason = py::str(t[0]);
        st->recursive = py::cast<bool>(t[1]);
      }
    } catch (py::error_already_set& e) {
      st->skip_reason = std::string("kiln could not classify it: ") + e.what();
    }
  }
  return set_state(code, st);
}

// Frames left to CPython during a frames_explain call: (function, where, why).
struct LeftToCPython {
  std::string function, where, reason;
  bool whole_frame = true;  // false: CPython runs the frame's rest after a break
};
thread_local std::vector<LeftToCPython>* left_log = nullptr;

void left_to_cpython(PyCodeObject* code, const std::string& why, bool whole_frame = true) {
  if (auto* log = frames_log())
    log->info("{}{}: {}", PyUnicode_AsUTF8(code_qualname(code)), whole_frame ? " runs on CPython" : "", why);
  if (left_log)
    left_log->push_back({PyUnicode_AsUTF8(code_qualname(code)),
                         std::string(PyUnicode_AsUTF8(code->co_filename)) + ":" + std::to_string(code->co_firstlineno),
                         why, whole_frame});
}

void skip(PyCodeObject* code, CodeState* st, const std::string& why) {
  st->mode = CodeState::Mode::Skip;
  st->skip_reason = why;
  st->kbc = Value::null();
  st->translations.clear();
  left_to_cpython(code, why);
}

// Whether `self`'s class resolves `forward` to a function of `code`.
bool forward_is(PyObject* self, PyCodeObject* code) {
  static PyObject* name = PyUnicode_InternFromString("forward");
  PyObject* fwd = self ? _PyType_Lookup(Py_TYPE(self), name) : nullptr;  // borrowed; the type's method cache
  return fwd && PyFunction_Check(fwd) && PyFunction_GET_CODE(fwd) == reinterpret_cast<PyObject*>(code);
}

// A frame's argument as the tracer reads it. A bound method of a module
// (what a resume function receives when a break splits `self.m(...)`: it
// binds LOAD_METHOD's pair, kiln/_frames.py `_bind`) is read as the method
// it is, a function bound to the module, so the call after the break is
// inlined (builder.cpp guards its __func__ and __self__); any other bound
// method stays Python's.
Value frame_local_value(PyObject* o) {
  if (PyMethod_Check(o)) {
    py::handle self(PyMethod_GET_SELF(o));
    py::handle func(PyMethod_GET_FUNCTION(o));
    Value s = to_value(self);
    if (s.is(Kind::Module)) {
      Value fn = to_value(func);
      if (fn.is(Kind::Function)) {
        auto bm = runtime::make_ref<runtime::BoundMethodObj>();
        bm->func = std::move(fn);
        bm->self = std::move(s);
        return Value::object(Kind::BoundMethod, bm);
      }
    }
  }
  return to_value_shared(o);
}

// The KBC function of `func` (the tracer's view of it); null when kiln
// cannot translate it.
Value kbc_for(CodeState* st, PyObject* func) {
  auto* fo = reinterpret_cast<PyFunctionObject*>(func);
  const bool shareable = !fo->func_defaults && !fo->func_kwdefaults;
  const Py_ssize_t ncells = fo->func_closure ? PyTuple_GET_SIZE(fo->func_closure) : 0;
  auto serves = [&](const CodeState::Translation& t) {
    if (t.func_ref && weakref_is(t.func_ref, func)) return true;
    if (!shareable || !t.globals || t.globals != fo->func_globals || size_t(ncells) != t.cells.size()) return false;
    for (Py_ssize_t i = 0; i < ncells; ++i)
      if (PyTuple_GET_ITEM(fo->func_closure, i) != t.cells[size_t(i)].ptr()) return false;
    return true;
  };
  for (size_t i = 0; i < st->translations.size(); ++i) {
    if (!serves(st->translations[i])) continue;
    if (i) std::rotate(st->translations.begin(), st->translations.begin() + ptrdiff_t(i),
                       st->translations.begin() + ptrdiff_t(i) + 1);
    st->kbc = st->translations[0].kbc;
    st->torch_out = st->translations[0].torch_out;
    return st->kbc;
  }
  Inactive off;
  st->kbc = Value::null();
  py::object kbc = callbacks().kbc(py::handle(func));
  if (kbc.is_none()) return Value::null();
  CodeState::Translation t;
  t.func_ref = PyWeakref_NewRef(func, nullptr);
  if (!t.func_ref) throw py::error_already_set();
  t.kbc = py::cast<Value>(kbc);
  t.torch_out = py::cast<bool>(callbacks().uses_torch(py::handle(func)));
  // (the KBC function's globals mirror holds the dict: its address is not reused)
  if (shareable) {
    t.globals = fo->func_globals;
    for (Py_ssize_t i = 0; i < ncells; ++i)
      t.cells.push_back(py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(fo->func_closure, i)));
  }
  st->translations.insert(st->translations.begin(), std::move(t));
  if (st->translations.size() > CodeState::kTranslations) st->translations.pop_back();
  st->kbc = st->translations[0].kbc;
  st->torch_out = st->translations[0].torch_out;
  return st->kbc;
}

// The CPython code an entry runs (kiln/_frames.py builds it from the
// residual once); null when it has none (a fast path) or none could be
// made (the frame then runs unchanged).
struct HostCode {
  PyObject* code = nullptr;  // strong
  // The function run_code calls for frames without a closure, made once
  // (the entry's globals are fixed): no function object per call.
  mutable PyObject* plain_fn = nullptr;  // strong
  std::string refused;  // why there is none: a construct the translation does not handle ...
  std::string failed;   // ... or kiln failed at it (kiln.config.strict raises this)
  ~HostCode() {
    if ((code || plain_fn) && Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      Py_XDECREF(code);
      Py_XDECREF(plain_fn);
    }
  }
};

// A kiln callable the residual's CPython code calls (the compiled graph, a
// namespace reader): a builtin function over CPython's vectorcall
// convention, bound to the callable's Python handle (kiln._C.Object),
// without pybind11's dispatcher and its args tuple and kwargs dict: the
// graph call is on every cached call of a frame that breaks.
PyObject* native_fastcall(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  try {
    const Value* v = exact_instance<Value>(self);
    if (!v) throw py::type_error("kiln: a residual callable lost its kiln value");
    return guarded([&] {
      PyArgs a(args, size_t(nargs), kwnames);
      return to_py(python_vm().call(*v, a.call_args()));
    }).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

py::object native_callable(const Value& v) {
  static PyMethodDef def = {"kiln_native", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&native_fastcall)),
                            METH_FASTCALL | METH_KEYWORDS, "A kiln callable, called by a residual's CPython code."};
  py::object handle = py::cast(v);
  return py::reinterpret_steal<py::object>(PyCFunction_NewEx(&def, handle.ptr(), nullptr));
}

// A residual constant as CPython code holds it. kiln's own builtins that
// stand for Python's (iter, set, getattr, ...: the residual rebuilds
// values with them) become Python's very objects, so everything the code
// makes is a CPython object; any other kiln callable (the compiled graph,
// a namespace reader) is called through its Python wrapper.
py::object residual_const(const Value& v) {
  if (v.is(Kind::Builtin)) {
    const std::string& name = v.as<runtime::BuiltinObj>()->name;
    const Value* py_meaning = runtime::python_builtins().find(name);
    const Value* kbc_meaning = runtime::builtins().find(name);
    if ((py_meaning && v.is_same(*py_meaning)) || (kbc_meaning && v.is_same(*kbc_meaning))) {
      static py::dict builtins = py::module_::import("builtins").attr("__dict__");
      if (builtins.contains(name.c_str())) return builtins[name.c_str()];
    }
    if (v.is_same(runtime::method_type())) {
      static PyObject* const method_type = py::object(py::module_::import("types").attr("MethodType")).release().ptr();  // kept
      return py::reinterpret_borrow<py::object>(method_type);
    }
    // object.__getattribute__ / __setattr__'s stand-ins (runtime/semantics/super.h).
    if (v.is_same(runtime::object_getattribute()) || v.is_same(runtime::object_setattr()))
      return py::reinterpret_borrow<py::object>(
          PyDict_GetItemString(type_dict(&PyBaseObject_Type), name.substr(std::string_view("object.").size()).c_str()));
    if (const int m = runtime::object_method_index(v); m >= 0)
      return py::reinterpret_borrow<py::object>(PyDict_GetItemString(type_dict(&PyBaseObject_Type), runtime::kObjectMethods[m]));
    if (v.is_same(runtime::copyreg_newobj())) return py::module_::import("copyreg").attr("__newobj__");
    if (const int init = runtime::host_init_index(v); init >= 0) {
      static const char* const types[] = {"builtins.object", "builtins.dict", "collections.OrderedDict"};
      const std::string path = types[init];
      const size_t dot = path.rfind('.');
      return py::module_::import(path.substr(0, dot).c_str()).attr(path.substr(dot + 1).c_str()).attr("__init__");
    }
    // A built-in type's method (the residual's `s.update(...)` at a break
    // is the pair set.update, s): Python's own method descriptor. kiln's
    // would convert the real set it is given into a kiln copy and update that.
    if (const size_t dot = name.find('.'); dot != std::string::npos) {
      const std::string type = name.substr(0, dot);
      const Value* kiln_type = runtime::builtins().find(type);
      static py::dict builtins = py::module_::import("builtins").attr("__dict__");
      if (kiln_type && kiln_type->is(Kind::Builtin) && builtins.contains(type.c_str()) &&
          v.is_same(runtime::type_method(kiln_type->as<runtime::BuiltinObj>()->type_of,
                                         runtime::intern(name.substr(dot + 1)).get()))) {
        // Only a plain method (a method_descriptor, called with self first);
        // dict.fromkeys is a classmethod, whose (self, ...) form kiln's takes.
        py::object method = builtins[type.c_str()].attr("__dict__").attr("get")(name.substr(dot + 1));
        if (PyObject_TypeCheck(method.ptr(), &PyMethodDescr_Type)) return method;
      }
    }
    py::object o = to_py(v);
    // Still kiln's handle (not a Python type or exception class it stands for).
    if (exact_instance<Value>(o.ptr())) return native_callable(v);
    return o;
  }
  return to_py(v);
}

// `nlocals`: how many of the residual's locals are the traced function's
// own (its parameters and locals, in the same slots); the rest are the
// residual's temporaries.
py::dict residual_info(const CacheEntry& e, size_t nlocals) {
  const runtime::Code& rc = *e.residual.as<FunctionObj>()->code;
  py::dict d;
  d["nlocals"] = nlocals;
  py::list instrs;
  for (const runtime::Instr& in : rc.instrs) {
    // BINARY_OP and COMPARE_OP carry their operator by its symbol ("+", "is not").
    const runtime::OperandKind k = runtime::opcode_info(in.op).a;
    const char* sym = k == runtime::OperandKind::BinOp   ? runtime::binop_symbol(runtime::BinOp(in.a))
                      : k == runtime::OperandKind::CmpOp ? runtime::cmpop_symbol(runtime::CmpOp(in.a))
                                                         : "";
    instrs.append(py::make_tuple(runtime::opcode_info(in.op).name, in.a, in.b, sym, in.line));
  }
  d["instrs"] = instrs;
  py::list consts, const_is_code;
  py::dict code_globals;
  for (const Value& v : rc.consts) {
    // Code objects (MAKE_FUNCTION of a closure the trace made): the
    // CPython code it was translated from, with the globals of the frame
    // that made it (the builder checks they are this frame's); without
    // one, the builder refuses the residual that needs it.
    if (v.is(Kind::Code)) {
      auto [pycode, globals] = python_code_of(v.as<runtime::Code>());
      if (pycode) code_globals[py::int_(py::len(consts))] = globals;
      const_is_code.append(!pycode);
      consts.append(pycode ? pycode : py::none());
      continue;
    }
    consts.append(residual_const(v));
    const_is_code.append(false);
  }
  d["consts"] = consts;
  d["const_is_code"] = const_is_code;
  d["code_globals"] = code_globals;
  py::list names;
  for (const auto& n : rc.names) names.append(py::str(n->s));
  d["names"] = names;
  d["varnames"] = py::cast(rc.varnames);
  d["cellvars"] = py::cast(rc.cellvars);
  d["freevars"] = py::cast(rc.freevars);
  if (e.continuation) {
    py::dict c;
    c["pc"] = e.continuation->pc;
    c["stack"] = py::cast(e.continuation->stack);
    c["live_names"] = py::cast(e.continuation->live_names);
    c["live_temps"] = py::cast(e.continuation->live_temps);
    d["continuation"] = c;
  } else {
    d["continuation"] = py::none();
  }
  return d;
}

// `globals`: the frame's (an entry serves one globals dict: the KBC function
// it was traced through mirrors that dict).
const HostCode& host_code(const CacheEntry& e, PyCodeObject* code, size_t nlocals, PyObject* globals) {
  if (e.host) return *static_cast<const HostCode*>(e.host.get());
  auto hc = std::make_shared<HostCode>();
  try {
    Inactive off;
    py::dict info = residual_info(e, nlocals);
    info["globals"] = py::handle(globals);
    py::object built = callbacks().build(py::handle(reinterpret_cast<PyObject*>(code)), info);
    if (py::isinstance<py::str>(built)) {
      hc->refused = py::str(built);  // a construct not made CPython code yet: explained, never raised
    } else if (py::isinstance<py::tuple>(built) && py::len(built) == 2 && PyCode_Check(built[py::int_(0)].ptr())) {
      // (code, note): the note says CPython runs the frame's rest unchanged
      // (the break is inside a try block, ...): explain lists it.
      if (py::object note = built[py::int_(1)]; !note.is_none()) left_to_cpython(code, py::str(note), false);
      hc->code = py::object(built[py::int_(0)]).release().ptr();
      // The code kiln made runs as it is when CPython starts its frame.
      auto* st = new CodeState();
      st->skip_reason = "kiln's own residual code";
      st->kilns_own = true;
      set_state(reinterpret_cast<PyCodeObject*>(hc->code), st);
    } else {
      hc->failed = "kiln/_frames.py's build returned " + std::string(py::repr(built));
    }
  } catch (py::error_already_set& e2) {
    hc->failed = std::string("the residual could not be made CPython code: ") + e2.what();
  }
  e.host = hc;
  return *hc;
}

// A fast path's result as the program's objects: a parameter is the very
// object the caller passed (its identity, a set's own table), not one
// converted back from kiln's copy of it.
py::object fast_result(const interpreter::ResultTemplate& t, const std::vector<Value>& outputs, PyObject* const* params) {
  using K = interpreter::ResultTemplate::Kind;
  switch (t.kind) {
    case K::Output: return to_py(outputs[t.index]);
    case K::Param: return py::reinterpret_borrow<py::object>(params[t.index]);
    case K::Const: return to_py(t.value);
    case K::Tuple:
    case K::List: {
      py::list items;
      for (const auto& x : t.items) items.append(fast_result(x, outputs, params));
      if (t.kind == K::List) return items;
      return py::tuple(items);
    }
  }
  return py::none();
}

Py_ssize_t nparams_of(PyCodeObject* co) {
  return co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) ? 1 : 0) +
         ((co->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

// Calls `code` as a function of the frame's globals and closure with the
// frame's bound parameters (its signature is theirs, all positional).
PyObject* run_code(const HostCode& hc, PyObject* func, EvalFrame* f, const FrameParams& params, Py_ssize_t nparams) {
  PyObject* closure = reinterpret_cast<PyFunctionObject*>(func)->func_closure;
  if (!closure) {
    if (!hc.plain_fn && !(hc.plain_fn = PyFunction_New(hc.code, frame_globals(f)))) return nullptr;
    return PyObject_Vectorcall(hc.plain_fn, params.data(), size_t(nparams), nullptr);
  }
  PyObject* fn = PyFunction_New(hc.code, frame_globals(f));
  if (!fn) return nullptr;
  if (PyFunction_SetClosure(fn, closure) < 0) {
    Py_DECREF(fn);
    return nullptr;
  }
  PyObject* r = PyObject_Vectorcall(fn, params.data(), size_t(nparams), nullptr);
  Py_DECREF(fn);
  return r;
}

// A kiln error that is the program's (a graph's kernel check, a break under
// fullgraph, a user backend's exception) as the pending Python exception.
void set_python_error(const kiln::Error& e) {
  try {
    raise_python(e);
  } catch (py::error_already_set& raised) {
    raised.restore();
  }
}

// Why kiln failed at the frame, in one line, for the log and explain.
template <class F>
bool kiln_failed(F&& attempt, std::string& why) {
  try {
    attempt();
    return false;
  } catch (const interpreter::ProgramError&) {
    throw;  // the program's: the caller raises it
  } catch (py::error_already_set& e) {
    why = e.what();
  } catch (const kiln::Error& e) {
    why = e.what();
  } catch (const std::exception& e) {
    why = std::string("internal error: ") + e.what();
  }
  return true;
}

// The frames kiln's own Python needs below the recursion limit to trace
// and compile a frame.
constexpr int64_t kTraceHeadroom = 100;

PyObject* eval_default(PyThreadState* ts, EvalFrame* f, int throw_flag) {
  return _PyEval_EvalFrameDefault(ts, f, throw_flag);
}

// A frame's graph raised (an index out of bounds, a kernel's check): the
// frame's own code runs instead, from its start, so the program meets
// the error where eager does, after the effects before it (which the
// residual would only have replayed after the graph). Nothing of the frame
// has happened yet: its parameters are untouched (run_code passes them,
// the frame never started), the graph's own effects are none. Only an
// Exception: an interrupt goes on up.
PyObject* rerun_after_graph_error(PyThreadState* ts, EvalFrame* f, int throw_flag) {
  if (!PyErr_ExceptionMatches(PyExc_Exception)) return frame_done(ts, f, nullptr);
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (auto* log = frames_log()) {
    PyObject* text = value ? PyObject_Str(value) : nullptr;
    log->info("{}: its graph raised ({}); CPython runs the frame", PyUnicode_AsUTF8(code_qualname(frame_code(f))),
              text ? PyUnicode_AsUTF8(text) : "?");
    Py_XDECREF(text);
    PyErr_Clear();
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return eval_default(ts, f, throw_flag);
}

// The hook is installed only while some thread is inside a compiled call
// (as Dynamo does): with an eval function set, CPython 3.11 stops inlining
// Python-to-Python calls, so code outside compiled calls would pay for a
// hook it never uses. Counted under the GIL.
int active_calls = 0;
bool hook_installed = false;
PyObject* kiln_eval_frame(PyThreadState* ts, EvalFrame* f, int throw_flag);

void set_hook(bool on) {
  if (on == hook_installed) return;
  _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), on ? kiln_eval_frame : _PyEval_EvalFrameDefault);
  hook_installed = on;
}

// A frame of library code (recursive skip) runs with the hook off for this
// thread and, when no other thread is inside a compiled call, off for the
// interpreter: its own calls are inlined again, so code kiln never compiles
// costs what it costs without kiln. A compiled call it makes switches the
// hook on again for its duration.
PyObject* eval_skipped_recursively(PyThreadState* ts, EvalFrame* f, int throw_flag);

PyObject* kiln_eval_frame(PyThreadState* ts, EvalFrame* f, int throw_flag) {
  const FrameOptions* opts = active;
  if (!opts || throw_flag) return eval_default(ts, f, throw_flag);
  PyCodeObject* code = frame_code(f);
  CodeState* st = classify(code);
  if (st && st->mode == CodeState::Mode::Skip && st->recursive) return eval_skipped_recursively(ts, f, throw_flag);
  if (!st || st->mode != CodeState::Mode::Trace) return eval_default(ts, f, throw_flag);
  const Py_ssize_t nparams = nparams_of(code);
  const FrameParams params(f, nparams);
  if (st->root_only && params[0] != opts->root) return eval_default(ts, f, throw_flag);
  if (st->own_forward_only && !forward_is(params[0], code)) return eval_default(ts, f, throw_flag);
  const py::object func = frame_function(f);
  if (!func) return eval_default(ts, f, throw_flag);
  // State, not code: checked on every call, the frame compiled again once
  // autocast is off (a with-block kiln traces as nothing is one made with
  // enabled=False, torch_values.cpp).
  if (torch_autocast_on()) {
    left_to_cpython(code, "torch.autocast is on: its dtypes are not kiln's kernels'");
    return eval_default(ts, f, throw_flag);
  }

  // Near the recursion limit kiln's own Python (the frontend, the
  // callbacks the tracer makes) could raise RecursionError itself, which
  // would leave the code to CPython for good: this one frame runs on
  // CPython instead, as eager would run it.
  if (recursion_headroom(ts) < kTraceHeadroom) return eval_default(ts, f, throw_flag);

  std::shared_ptr<const CacheEntry> entry;
  std::vector<Value> locals;
  TensorIdentityScope identity;
  std::string why;
  bool failed = false;
  try {
  failed = kiln_failed(
      [&] {
        // Python that kiln runs meanwhile (the frontend, a mirror's
        // reads, a property the tracer calls) is not traced as frames.
        Inactive off;
        NumpyStaysPython numpy_arrays;
        Value kbc = kbc_for(st, func.ptr());
        if (kbc.is_null()) {
          why = "kiln cannot translate it";
          return;
        }
        if (st->torch_out) identity.torch_out = true;
        // A torch program's frame: it reads torch, or a torch tensor or
        // module comes in. Its random ops are torch's (Options::random_is_hosts).
        bool torch_frame = st->torch_out;
        locals.reserve(size_t(nparams));
        for (Py_ssize_t i = 0; i < nparams; ++i) {
          PyObject* o = params[i];
          locals.push_back(o ? frame_local_value(o) : Value::null());
          torch_frame = torch_frame || (o && (holds_torch_tensor(o) || (locals.back().is(Kind::Module) &&
                                                                         locals.back().as<runtime::ModuleObj>()->host)));
        }
        sync_python_state();
        entry = interpreter::lookup_or_compile(python_vm(), Ref<FunctionObj>(kbc.as<FunctionObj>()), locals.data(),
                                               torch_frame ? opts->options : opts->kiln_random);
      },
      why);
  } catch (const interpreter::ProgramError& e) {
    set_python_error(e);
    return frame_done(ts, f, nullptr);
  }
  if (failed && opts->strict) {
    PyErr_Format(PyExc_RuntimeError, "kiln (strict) failed at %U: %s", code_qualname(code), why.c_str());
    return frame_done(ts, f, nullptr);
  }
  if (failed || (!entry && !why.empty())) {
    skip(code, st, why);
    return eval_default(ts, f, throw_flag);
  }
  if (!entry || entry->runs_original) return eval_default(ts, f, throw_flag);
  if (!interpreter::room_for(*entry, recursion_headroom(ts))) {
    // Its graph stands for frames this call has no room for: CPython runs
    // the frame, and raises RecursionError where eager does.
    if (auto* log = frames_log())
      log->info("{}: {} frames from the recursion limit; CPython runs the frame", PyUnicode_AsUTF8(code_qualname(code)),
                recursion_headroom(ts));
    return eval_default(ts, f, throw_flag);
  }
  if (entry->fast) {
    // The graph alone; what it raises, CPython meets by running the frame
    // (rerun_after_graph_error).
    try {
      const std::vector<Value> outputs = interpreter::run_fast_graph(python_vm(), *entry->fast, locals.data());
      PyObject* r = fast_result(entry->fast->result, outputs, params.data()).release().ptr();
      return frame_done(ts, f, r);
    } catch (py::error_already_set& e) {
      e.restore();
    } catch (const kiln::Error& e) {
      set_python_error(e);
    }
    return rerun_after_graph_error(ts, f, throw_flag);
  }
  const HostCode& hc = host_code(*entry, code, st->kbc.as<FunctionObj>()->code->varnames.size(), frame_globals(f));
  if (!hc.code) {
    if (opts->strict && !hc.failed.empty()) {
      PyErr_Format(PyExc_RuntimeError, "kiln (strict): %s", hc.failed.c_str());
      return frame_done(ts, f, nullptr);
    }
    left_to_cpython(code, hc.failed.empty() ? hc.refused : hc.failed);
    return eval_default(ts, f, throw_flag);
  }
  interpreter::graph_call_failed() = false;
  if (PyObject* r = run_code(hc, func.ptr(), f, params, nparams)) return frame_done(ts, f, r);
  if (!std::exchange(interpreter::graph_call_failed(), false)) {
    return frame_done(ts, f, nullptr);  // the code after the graph raised
  }
  return rerun_after_graph_error(ts, f, throw_flag);
}

void init() {
  if (extra_index >= 0) return;
  extra_index = code_extra_index(free_code_state);
  if (extra_index < 0) throw py::error_already_set();
}

// Threads inside a compiled call, and on this thread the calls whose
// frames the hook serves (a recursively skipped frame suspends them).
int active_threads = 0;
thread_local int thread_calls = 0;

struct ActiveCall {
  const FrameOptions* saved = active;
  const bool was_installed = hook_installed;
  explicit ActiveCall(const FrameOptions* o) {
    if (thread_calls++ == 0) ++active_threads;
    ++active_calls;
    set_hook(true);
    active = o;
  }
  ~ActiveCall() {
    active = saved;
    --active_calls;
    if (--thread_calls == 0) --active_threads;
    set_hook(was_installed && active_calls > 0);
  }
};

PyObject* eval_skipped_recursively(PyThreadState* ts, EvalFrame* f, int throw_flag) {
  Inactive off;  // (the hook, if another thread keeps it on, lets this thread's frames through)
  const bool alone = active_threads <= 1;
  if (alone) set_hook(false);
  PyObject* r = eval_default(ts, f, throw_flag);
  if (alone) set_hook(active_calls > 0);
  return r;
}

// What kiln.compile returns for a Python function when frames are on.
class FrameCompiled {
 public:
  FrameCompiled(py::object fn, FrameOptions options) : fn_(std::move(fn)), options_(std::move(options)) {
    options_.root = fn_.ptr();
    init();
  }

  // CPython's vectorcall convention; a new reference, or null with the
  // error set.
  static PyObject* fastcall(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    FrameCompiled* c = exact_instance<FrameCompiled>(self);
    if (!c) {
      PyErr_SetString(PyExc_TypeError, "FrameCompiled.fastcall: not bound to a FrameCompiled");
      return nullptr;
    }
    return c->call(args, size_t(nargs), kwnames);
  }

  PyObject* call(PyObject* const* args, size_t nargs, PyObject* kwnames) {
    ActiveCall on(&options_);
    return PyObject_Vectorcall(fn_.ptr(), args, nargs, kwnames);
  }

  const py::object& fn() const { return fn_; }

 private:
  py::object fn_;
  FrameOptions options_;
};

}  // namespace

void bind_eval_frame_hook(py::module_& m) {
  m.def("frames_set_own_code_dir", [](std::string dir) { interpreter::set_own_code_dir(std::move(dir)); },
        "kiln's own Python (kiln/): a break inside an inlined call of it is the call's own break.");
  m.def("frames_set_callbacks", [](py::object classify, py::object kbc, py::object build, py::object uses_torch) {
    callbacks() = Callbacks{std::move(classify), std::move(kbc), std::move(build), std::move(uses_torch)};
  });
  static PyMethodDef fastcall_def = {
      "fastcall", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&FrameCompiled::fastcall)),
      METH_FASTCALL | METH_KEYWORDS, "Calls the function with kiln compiling its frames."};
  py::class_<FrameCompiled>(m, "FrameCompiled")
      .def(py::init([](py::object fn, const std::string& backend, bool fullgraph, py::object dynamic,
                       int cache_size_limit, bool strict) {
             Options options = options_from(backend, fullgraph, dynamic, cache_size_limit);
             options.python_frames = true;
             return std::make_unique<FrameCompiled>(std::move(fn), FrameOptions(std::move(options), strict));
           }),
           py::arg("fn"), py::arg("backend"), py::arg("fullgraph"), py::arg("dynamic"), py::arg("cache_size_limit"),
           py::arg("strict"))
      .def("__call__", [](py::handle self, py::args args, py::kwargs kwargs) {
        // (the slow path; kiln.compile's wrapper calls fastcall)
        py::object fn = py::getattr(self, "fastcall");
        return fn(*args, **kwargs);
      })
      .def_property_readonly("fn", &FrameCompiled::fn)
      // The KBC function whose cache holds the entries of fn's own frames.
      .def_property_readonly("kbc", [](const FrameCompiled& c) { return callbacks().kbc(c.fn()); })
      .def_property_readonly("fastcall", [](py::handle self) {
        return py::reinterpret_steal<py::object>(PyCFunction_NewEx(&fastcall_def, self.ptr(), nullptr));
      });
  m.def("frames_reset", [] { ++reset_epoch; }, "Every code object's frames are classified afresh (kiln.reset).");
  m.def("set_fault_points", [](const std::string& points) { runtime::set_fault_points(points); },
        "Debug switch (tests): kiln raises an internal error at these points (frontend, tracer, backend, codegen, "
        "residual), comma-separated; '' for none. KILN_FAULT sets it at start.");
  m.def("fault_enabled", [](const std::string& point) { return runtime::fault_enabled(point); });
  // One call with every frame's compile reported: graphs, breaks, guards.
  m.def("frames_explain", [](py::handle compiled, py::args args, py::kwargs kwargs) {
    ExplainReport report;
    ExplainReport* saved = interpreter::set_explain_recording(&report);
    std::vector<LeftToCPython> left;
    std::vector<LeftToCPython>* saved_left = left_log;
    left_log = &left;
    py::object result;
    try {
      result = py::getattr(compiled, "fastcall")(*args, **kwargs);
    } catch (py::error_already_set& e) {
      report.error = e.what();
    }
    interpreter::set_explain_recording(saved);
    left_log = saved_left;
    // The hints name who runs what the graph leaves: CPython on this path
    // (graph_breaks.def says "the VM", the KBC path's runner).
    for (GraphBreak& b : report.breaks)
      for (size_t at; (at = b.hint.find("the VM")) != std::string::npos;) b.hint.replace(at, 6, "CPython");
    py::object d = report_to_py(report);
    d["result"] = result ? result : py::none();
    py::list l;
    for (const auto& x : left) {
      py::dict e;
      e["function"] = x.function;
      e["where"] = x.where;
      e["reason"] = x.reason;
      e["whole_frame"] = x.whole_frame;
      l.append(e);
    }
    d["left_to_cpython"] = l;
    return d;
  });
  // Why the hook leaves this code's frames to CPython (None: it traces
  // them), classifying it now if it has not seen it (a generator function's
  // call runs no frame).
  m.def("frames_skip_reason", [](py::handle code) -> py::object {
    if (!PyCode_Check(code.ptr()) || extra_index < 0) return py::none();
    CodeState* st = classify(reinterpret_cast<PyCodeObject*>(code.ptr()));
    if (!st || st->mode == CodeState::Mode::Trace) return py::none();
    return py::str(st->skip_reason);
  });
}

}  // namespace kiln::python

#include "python/src/convert.h"

#include "python/src/container_mirror.h"

#include "interpreter/vm.h"
#include "python/src/nn.h"
#include "python/src/set_layout.h"
#include "python/src/torch_autograd.h"
#include "python/src/torch_interop.h"
#include "python/src/torch_modules.h"

#include <pybind11/numpy.h>

#include "runtime/module.h"
#include "runtime/ops.h"
#include "runtime/tensor_index.h"
#include "runtime/builtins.h"
#include "runtime/exceptions.h"
#include "runtime/value_ops.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>

namespace kiln::python {

using runtime::Kind;
using runtime::Tensor;
using runtime::Value;

namespace {

// ------------------------------------------------------------ exceptions --

PyObject* exception_type(ErrorKind k) {
  switch (k) {
#define KILN_ERROR_PY(kind, py, base) \
  case ErrorKind::kind: return PyExc_##py;
    KILN_ERROR_KINDS(KILN_ERROR_PY)
#undef KILN_ERROR_PY
  }
  return PyExc_RuntimeError;
}

// Python's built-in exception class -> its kind (VerifyError has none).
const std::unordered_map<PyObject*, ErrorKind>& kinds_by_type() {
  static const auto* m = [] {
    auto* t = new std::unordered_map<PyObject*, ErrorKind>();
#define KILN_ERROR_TYPE(kind, py, base) \
  if (ErrorKind::kind != ErrorKind::VerifyError) t->emplace(PyExc_##py, ErrorKind::kind);
    KILN_ERROR_KINDS(KILN_ERROR_TYPE)
#undef KILN_ERROR_TYPE
    return t;
  }();
  return *m;
}

// The kind of a Python exception class: its first built-in class in MRO
// order (a user's `class E(KeyError)` is a KeyError to kiln; its origin
// keeps it exact).
ErrorKind error_kind_of(PyObject* type) {
  if (PyType_Check(type)) {
    PyObject* mro = reinterpret_cast<PyTypeObject*>(type)->tp_mro;
    if (mro && PyTuple_Check(mro))
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i)
        if (auto it = kinds_by_type().find(PyTuple_GET_ITEM(mro, i)); it != kinds_by_type().end()) return it->second;
  }
  return ErrorKind::Exception;
}

// A Python exception object as a kiln exception: its kind, its str(), and
// the object itself (matching, attributes and str() go to it; it surfaces
// in Python as itself).
Value exception_from_py(py::handle obj) {
  Value exc = runtime::make_exception(error_kind_of(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))), {});
  runtime::ExceptionData* d = runtime::exception_data(exc);
  PyObject* text = PyObject_Str(obj.ptr());
  if (text) {
    d->message = py::reinterpret_steal<py::str>(text);
  } else {
    PyErr_Clear();
    d->message = "<exception str() failed>";
  }
  auto* held = new py::object(py::reinterpret_borrow<py::object>(obj));
  d->origin = std::shared_ptr<void>(held, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  d->foreign = foreign(obj);
  return exc;
}

// The kiln Error of a Python exception object being raised.
[[noreturn]] void throw_py_exception(py::handle obj) {
  Value exc = exception_from_py(obj);
  runtime::ExceptionData* d = runtime::exception_data(exc);
  Error err(d->kind, d->message);
  err.origin = d->origin;
  err.exception = runtime::Ref<runtime::Object>(exc.obj());
  throw err;
}

}  // namespace

// A Python exception raised inside a Foreign call, as a kiln Error whose
// origin is the exception itself (raise_python re-raises that object).
[[noreturn]] void rethrow_as_kiln(py::error_already_set& e) {
  e.restore();
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb) PyException_SetTraceback(value, tb);
  py::object v = py::reinterpret_steal<py::object>(value);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  throw_py_exception(v);
}

namespace {

void pull_after_error() {
  try {
    mirrors_pull();
  } catch (...) {
    PyErr_Clear();  // the error being raised wins
  }
}

// Every call into Python: kiln containers Python holds are brought up to
// date first, and kiln's read back after (container_mirror.h).
template <class F>
auto calling_python(F&& f) -> decltype(f()) {
  try {
    mirrors_push();
    auto r = f();
    mirrors_pull();
    return r;
  } catch (py::error_already_set& e) {
    pull_after_error();
    rethrow_as_kiln(e);
  } catch (...) {
    pull_after_error();
    throw;
  }
}

// ---------------------------------------------------------------- foreign --

PyObject* handle_of(void* h) { return static_cast<PyObject*>(h); }

Value foreign_getattr(void* h, std::string_view name) {
  return calling_python([&] { return to_value_shared(py::handle(handle_of(h)).attr(py::str(std::string(name)))); });
}
void foreign_setattr(void* h, std::string_view name, const Value& v) {
  calling_python([&] {
    if (v.is_null()) {  // the seam's convention for `del obj.name`
      if (PyObject_DelAttr(handle_of(h), py::str(std::string(name)).ptr()) != 0) throw py::error_already_set();
      return 0;
    }
    py::handle(handle_of(h)).attr(py::str(std::string(name))) = to_py(v);
    return 0;
  });
}
Value foreign_call(void* h, const runtime::CallArgs& args) {
  return calling_python([&] {
    const size_t nkw = args.nkw(), npos = args.npos();
    py::tuple pos(npos);
    for (size_t i = 0; i < npos; ++i) pos[i] = to_py(args[i]);
    py::dict kw;
    for (size_t i = 0; i < nkw; ++i)
      kw[py::str(args.kwnames->items[i].as_str())] = to_py(args[npos + i]);
    return to_value_shared(py::handle(handle_of(h))(*pos, **kw));
  });
}
Value foreign_binary(void* h, int op, const Value& other, bool reflected, bool inplace) {
  static const char* names[] = {
#define KILN_BINOP(E, SYM, T) #E,
#include "runtime/operators.def"
#undef KILN_BINOP
  };
  static const std::pair<const char*, const char*> py_ops[] = {
      {"ADD", "add"},   {"SUB", "sub"},          {"MUL", "mul"}, {"TRUEDIV", "truediv"}, {"FLOORDIV", "floordiv"},
      {"MOD", "mod"},   {"POW", "pow"},          {"MATMUL", "matmul"}, {"AND", "and_"},  {"OR", "or_"},
      {"XOR", "xor"},   {"LSHIFT", "lshift"},    {"RSHIFT", "rshift"}};
  return calling_python([&] {
    const char* fn = nullptr;
    for (const auto& [k, v] : py_ops)
      if (std::string_view(k) == names[op]) fn = v;
    py::object opmod = py::module_::import("operator");
    py::object self = py::reinterpret_borrow<py::object>(handle_of(h));
    py::object o = to_py(other);
    if (inplace && !reflected) {
      // operator.isub & co.: the object's own __isub__ (a caller's set or
      // dict is mutated, and the result is that very object)
      std::string name(fn);
      if (name.back() == '_') name.pop_back();
      return to_value_shared(opmod.attr(("i" + name).c_str())(self, o));
    }
    return to_value(reflected ? opmod.attr(fn)(o, self) : opmod.attr(fn)(self, o));
  });
}
// compare_op answers is / is not / in / not in itself (identity, and the
// container protocol's `contains`): only < <= == != > >= come here.
Value foreign_compare(void* h, int op, const Value& other) {
  static const char* py_ops[] = {"lt", "le", "eq", "ne", "gt", "ge"};
  if (op < 0 || op >= int(std::size(py_ops))) throw_error(ErrorKind::TypeError, "unsupported comparison");
  return calling_python([&] {
    py::object opmod = py::module_::import("operator");
    py::object self = py::reinterpret_borrow<py::object>(handle_of(h));
    return to_value(opmod.attr(py_ops[op])(self, to_py(other)));
  });
}
bool foreign_truth(void* h) {
  return calling_python([&] { return PyObject_IsTrue(handle_of(h)) == 1 ? true : (PyErr_Occurred() ? throw py::error_already_set() : false); });
}
std::string foreign_repr(void* h) {
  return calling_python([&] { return std::string(py::repr(py::handle(handle_of(h)))); });
}
size_t foreign_hash(void* h) {
  return calling_python([&] { return size_t(py::hash(py::handle(handle_of(h)))); });
}
std::string foreign_format(void* h, std::string_view spec) {
  return calling_python([&] {
    py::str text = py::reinterpret_steal<py::str>(
        PyObject_Format(handle_of(h), py::str(spec.data(), spec.size()).ptr()));
    if (!text) throw py::error_already_set();
    return std::string(text);
  });
}
// The container protocol: the caller's own list, dict or set, worked on in
// place (ForeignVTable in runtime/value.h). Items read out stay shared.
runtime::Kind foreign_container(void* h) {
  PyObject* o = handle_of(h);
  if (PyList_CheckExact(o)) return Kind::List;
  if (PyDict_CheckExact(o)) return Kind::Dict;
  if (PySet_CheckExact(o)) return Kind::Set;
  return Kind::Null;
}
int64_t foreign_length(void* h) {
  return calling_python([&] {
    const Py_ssize_t n = PyObject_Size(handle_of(h));
    if (n < 0) throw py::error_already_set();
    return int64_t(n);
  });
}
Value foreign_getitem(void* h, const Value& key) {
  return calling_python([&] {
    PyObject* item = PyObject_GetItem(handle_of(h), to_py(key).ptr());
    if (!item) throw py::error_already_set();
    return to_value_shared(py::reinterpret_steal<py::object>(item));
  });
}
void foreign_setitem(void* h, const Value& key, const Value& value) {
  calling_python([&] {
    const int rc = value.is_null() ? PyObject_DelItem(handle_of(h), to_py(key).ptr())
                                   : PyObject_SetItem(handle_of(h), to_py(key).ptr(), to_py(value).ptr());
    if (rc < 0) throw py::error_already_set();
    return 0;
  });
}
// A Python iterator driven from kiln (for loops, unpacking, list(), ...).
struct PyIterator final : runtime::IteratorObj {
  py::object it;
  ~PyIterator() override {
    if (!Py_IsInitialized()) {
      it.release();  // the interpreter is gone: nothing to release
      return;
    }
    py::gil_scoped_acquire gil;
    it = py::object();
  }
  bool next(Value& out) override {
    return calling_python([&] {
      PyObject* item = PyIter_Next(it.ptr());
      if (!item) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return false;
      }
      out = to_value_shared(py::reinterpret_steal<py::object>(item));
      return true;
    });
  }
  void traverse(runtime::Visitor&) const override {}  // a Python object: Python's to track
};
Value foreign_iter(void* h) {
  return calling_python([&] {
    PyObject* it = PyObject_GetIter(handle_of(h));
    if (!it) throw py::error_already_set();
    auto obj = runtime::make_ref<PyIterator>();
    obj->it = py::reinterpret_steal<py::object>(it);
    return Value::object(Kind::Iterator, static_cast<runtime::Object*>(obj.get()));
  });
}
bool foreign_contains(void* h, const Value& item) {
  return calling_python([&] {
    const int rc = PySequence_Contains(handle_of(h), to_py(item).ptr());
    if (rc < 0) throw py::error_already_set();
    return rc == 1;
  });
}
std::string foreign_type_name(void* h) { return Py_TYPE(handle_of(h))->tp_name; }
// The caller's set read with its table (set_layout.h), or Null when that
// table is not kiln's: what it holds stays shared.
Value foreign_set_snapshot(void* h) {
  return calling_python([&] {
    PySetTable table = read_py_set(handle_of(h), [](py::handle i) { return to_value_shared(i); });
    if (!table.exact) return Value::null();
    Value s = runtime::make_set(false);
    assign_py_set(*s.as<runtime::SetObj>(), std::move(table));
    return s;
  });
}
// Pure functions the tracer may call on known values: Python's math
// module, and Python's own builtins whose row in runtime/builtins.def says
// Fold (hash, bytes, complex, ...).
bool foreign_pure(void* h) {
  PyObject* o = handle_of(h);
  const char* builtin_name = nullptr;
  if (PyCFunction_Check(o)) {
    auto* f = reinterpret_cast<PyCFunctionObject*>(o);
    PyObject* module = f->m_module;  // the module's name (a str) for a module function
    if (module && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "math") == 0) return true;
    if (module && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "builtins") == 0)
      builtin_name = f->m_ml->ml_name;
  } else if (PyType_Check(o)) {
    builtin_name = reinterpret_cast<PyTypeObject*>(o)->tp_name;  // a builtin type's tp_name is its bare name
  }
  if (!builtin_name) return false;
  const runtime::BuiltinRow* row = runtime::find_builtin_row(builtin_name);
  if (!row || row->how != runtime::BuiltinHow::Fold) return false;
  // The real builtin of that name, not a look-alike: a C extension's type
  // may have a bare tp_name too.
  return PyDict_GetItemString(PyEval_GetBuiltins(), builtin_name) == o;
}
bool foreign_instance_check(void* h, const Value& obj, bool subclass) {
  return calling_python([&] {
    const int rc = subclass ? PyObject_IsSubclass(to_py(obj).ptr(), handle_of(h))
                            : PyObject_IsInstance(to_py(obj).ptr(), handle_of(h));
    if (rc < 0) throw py::error_already_set();
    return rc == 1;
  });
}
// An attribute read that runs no user code: the object's type keeps
// Python's default lookup, and the name is an instance __dict__ entry, a
// __slots__ member or a class attribute that is no descriptor. Properties,
// __getattr__/__getattribute__ overrides, methods and other descriptors
// answer false (the tracer leaves those to Python).
bool foreign_plain_attr(void* h, std::string_view name, Value& out) {
  PyObject* o = handle_of(h);
  PyTypeObject* tp = Py_TYPE(o);
  if (tp->tp_getattro != PyObject_GenericGetAttr || PyType_Check(o) || PyModule_Check(o)) return false;
  return calling_python([&] {
    py::str key(name.data(), name.size());
    PyObject* descr = _PyType_Lookup(tp, key.ptr());  // borrowed; no user code
    if (descr && Py_TYPE(descr) == &PyMemberDescr_Type) {
      PyObject* v = PyObject_GenericGetAttr(o, key.ptr());
      if (!v) {
        PyErr_Clear();
        return false;
      }
      out = to_value_shared(py::reinterpret_steal<py::object>(v));
      return true;
    }
    if (descr && Py_TYPE(descr)->tp_descr_set) return false;  // a data descriptor (property) wins: user code
    if (PyObject** dict = _PyObject_GetDictPtr(o); dict && *dict) {
      PyObject* v = PyDict_GetItemWithError(*dict, key.ptr());  // borrowed; str keys run no user code
      if (v) {
        out = to_value_shared(py::handle(v));
        return true;
      }
      if (PyErr_Occurred()) throw py::error_already_set();
    }
    if (!descr || Py_TYPE(descr)->tp_descr_get) return false;  // missing, or a method/classmethod/...
    out = to_value_shared(py::handle(descr));
    return true;
  });
}

// `raise obj` for a Python object: a class is instantiated, an instance
// raised as itself; anything else is CPython's TypeError.
void foreign_raise(void* h) {
  py::object inst = calling_python([&] {
    py::handle o(handle_of(h));
    if (PyExceptionClass_Check(o.ptr())) return o();
    return py::reinterpret_borrow<py::object>(o);
  });
  if (!PyExceptionInstance_Check(inst.ptr()))
    throw_error(ErrorKind::TypeError, "exceptions must derive from BaseException");
  throw_py_exception(inst);
}
bool foreign_exception_match(void*, const Value& exc, const Value& cls) {
  return calling_python([&] {
    py::object e = to_py(exc), c = to_py(cls);
    auto ok = [](PyObject* k) { return PyExceptionClass_Check(k); };
    bool valid = ok(c.ptr());
    if (PyTuple_Check(c.ptr())) {
      valid = true;
      for (py::handle k : c) valid = valid && ok(k.ptr());
    }
    if (!valid)
      throw_error(ErrorKind::TypeError, "catching classes that do not inherit from BaseException is not allowed");
    return PyErr_GivenExceptionMatches(e.ptr(), c.ptr()) != 0;
  });
}

void foreign_destroy(void* h) {
  if (!Py_IsInitialized()) return;  // interpreter gone: nothing to release
  py::gil_scoped_acquire gil;
  Py_DECREF(handle_of(h));
}

Value foreign_unary(void* h, int op) {
  return calling_python([&] {
    PyObject* o = handle_of(h);
    PyObject* r = op == int(runtime::UnOp::NEG)   ? PyNumber_Negative(o)
                  : op == int(runtime::UnOp::POS) ? PyNumber_Positive(o)
                                                  : PyNumber_Invert(o);
    if (!r) throw py::error_already_set();
    return to_value(py::reinterpret_steal<py::object>(r));
  });
}

const runtime::ForeignVTable kPyObjectVTable = {
    "PyObject",        foreign_destroy, foreign_getattr, foreign_setattr, foreign_call,   foreign_binary,
    foreign_compare,   foreign_truth,   foreign_repr,    foreign_hash,    nullptr,        foreign_format,
    foreign_container, foreign_length,  foreign_getitem, foreign_setitem, foreign_iter,   foreign_contains,
    foreign_type_name,
    foreign_raise,     foreign_exception_match, foreign_pure,   foreign_instance_check, foreign_plain_attr, foreign_unary,
    foreign_set_snapshot,
};

// A torch tensor kiln does not take, and a torch function kiln has no
// lowering for: Python objects like any other (their operations are
// torch's), whose use in a trace names why it breaks.
std::string torch_tensor_reason(void* h) {
  return "a torch tensor kiln does not take: " + torch_tensor_refusal(handle_of(h));
}
std::string torch_function_reason(void* h) {
  PyObject* o = handle_of(h);
  std::string name = "torch function";
  PyObject* mod = PyObject_GetAttrString(o, "__module__");
  // A builtin's __qualname__ is its C class's (_VariableFunctionsClass.erf):
  // its __name__ is what the program wrote.
  PyObject* qual = PyObject_GetAttrString(o, PyCFunction_Check(o) ? "__name__" : "__qualname__");
  PyErr_Clear();
  if (mod && qual && PyUnicode_Check(mod) && PyUnicode_Check(qual)) {
    std::string m = PyUnicode_AsUTF8(mod);
    // torch's builtins report their C home (torch._C._nn): name them as
    // the program reaches them.
    if (m == "torch._C._nn" || m == "torch._C._VariableFunctions" || m == "torch._C") m = "torch";
    name = m + "." + PyUnicode_AsUTF8(qual);
  }
  Py_XDECREF(mod);
  Py_XDECREF(qual);
  return name + " has no kiln lowering";
}
// Calling torch: kiln tensors go as torch tensors over their memory, so a
// torch function gets what it takes whatever the caller passed.
Value torch_call(void* h, const runtime::CallArgs& args) {
  return calling_python([&] {
    const size_t nkw = args.nkw(), npos = args.npos();
    auto arg = [](const Value& v) {
      if (v.is(Kind::Tensor)) {
        if (TensorIdentityScope* scope = TensorIdentityScope::active())
          if (PyObject* o = scope->find(v.as_tensor().impl()); o && is_torch_tensor(o))
            return py::reinterpret_borrow<py::object>(o);
        return tensor_to_torch(v.as_tensor());
      }
      return to_py(v);
    };
    py::tuple pos(npos);
    for (size_t i = 0; i < npos; ++i) pos[i] = arg(args[i]);
    py::dict kw;
    for (size_t i = 0; i < nkw; ++i) kw[py::str(args.kwnames->items[i].as_str())] = arg(args[npos + i]);
    return to_value_shared(py::handle(handle_of(h))(*pos, **kw));
  });
}

// A torch module holding a tensor kiln does not take: torch runs it.
std::string torch_module_reason(void* h) {
  std::string who = Py_TYPE(handle_of(h))->tp_name, why = "it holds a torch tensor kiln does not take";
  try {
    for (py::handle item : py::handle(handle_of(h)).attr("named_parameters")()) {
      py::tuple kv = py::reinterpret_borrow<py::tuple>(item);
      std::string r = torch_tensor_refusal(kv[1].ptr());
      if (!r.empty()) {
        why = "its parameter " + py::cast<std::string>(kv[0]) + " is " + r;
        break;
      }
    }
  } catch (py::error_already_set&) {
    PyErr_Clear();
  }
  return "torch runs the " + who + " module: " + why;
}

// A registry op reached with a torch tensor kiln does not take (a float16
// tensor, one that requires grad under grad mode): torch's function of the
// op's name runs it, as the program would have run it without kiln.
bool torch_op_hook(runtime::OpId id, const runtime::CallArgs& args, Value& out) {
  auto torch_object = [](const Value& v) {
    PyObject* o = foreign_object(v);
    return o && torch_types::tensor && PyObject_TypeCheck(o, torch_types::tensor);
  };
  bool any = false;
  for (size_t i = 0; i < args.nargs && !any; ++i) {
    const Value& v = args[i];
    any = torch_object(v);
    if (v.is(Kind::List) || v.is(Kind::Tuple))
      for (const Value& x : v.is(Kind::List) ? v.as<runtime::ListObj>()->items : v.as<runtime::TupleObj>()->items)
        any = any || torch_object(x);
  }
  if (!any) return false;
  // torch's form of the op, read off kiln/_torch_api.py's table
  // (torch_autograd.h): the same one graphs that record gradients run.
  PyObject* fn = torch_lowering(id);
  if (!fn) return false;
  out = calling_python([&] {
    const size_t nkw = args.nkw(), npos = args.npos();
    py::tuple pos(npos);
    for (size_t i = 0; i < npos; ++i) pos[i] = torch_argument(args[i]);
    py::dict kw;
    for (size_t i = 0; i < nkw; ++i) kw[py::str(args.kwnames->items[i].as_str())] = torch_argument(args[npos + i]);
    return to_value_shared(py::handle(fn)(*pos, **kw));
  });
  return true;
}

runtime::ForeignVTable with_reason(runtime::ForeignVTable vt, std::string (*why)(void*)) {
  vt.untraced_reason = why;
  return vt;
}
// A torch tensor that requires grad (and that kiln would otherwise take):
// its kiln view for the tracer (a mirrored parameter's one view, else one
// made now), whatever the grad mode; null for any other refused tensor.
runtime::Tensor torch_grad_tensor(void* h) {
  PyObject* o = handle_of(h);
  if (runtime::Tensor view = torch_held_grad_view(o); view.defined()) return view;
  if (!is_torch_tensor(o) || !torch_tensor_refusal_except_grad(o).empty() || !torch_requires_grad(o))
    return runtime::Tensor();
  return tensor_from_torch(o);
}
const runtime::ForeignVTable kTorchTensorVTable = [] {
  runtime::ForeignVTable vt = with_reason(kPyObjectVTable, torch_tensor_reason);
  vt.grad_tensor = torch_grad_tensor;
  return vt;
}();
const runtime::ForeignVTable kTorchFunctionVTable = [] {
  runtime::ForeignVTable vt = with_reason(kPyObjectVTable, torch_function_reason);
  vt.call = torch_call;
  vt.pure = nullptr;
  return vt;
}();
// torch.no_grad() & co.: the tracer traces their with-blocks as doing
// nothing; the classes (and a decorator's `clone`) are pure: calling them
// only makes such an object.
bool grad_mode_null_context(void*) { return true; }
bool grad_mode_pure(void*) { return true; }
const runtime::ForeignVTable kTorchGradModeVTable = [] {
  runtime::ForeignVTable vt = kPyObjectVTable;
  vt.null_context = grad_mode_null_context;
  return vt;
}();
const runtime::ForeignVTable kTorchGradModeFactoryVTable = [] {
  runtime::ForeignVTable vt = kPyObjectVTable;
  vt.pure = grad_mode_pure;
  return vt;
}();
const runtime::ForeignVTable kTorchModuleVTable = [] {
  runtime::ForeignVTable vt = with_reason(kPyObjectVTable, torch_module_reason);
  vt.call = torch_call;
  return vt;
}();

// ---------------------------------------------------------- namespaces --
//
// A Python module (kiln, math, a user's helpers module) is a namespace the
// tracer reads attributes of: kiln.softmax becomes the registry op, a
// helper function its KBC form, each guarded at its source. Values are
// converted on first read and kept at stable addresses; before each
// compiled call, sync_namespaces() re-reads the names of every module
// whose dict changed (CPython 3.11's dict version tag).

struct Namespace {
  py::object dict;  // the module's __dict__ (py::object: a default py::dict would be a new empty dict)
  uint64_t version = 0;
  struct Slot {
    py::object key;   // the name as a Python str, made once (see Mirror::Name in functions.cpp)
    py::object seen;  // the object the value was converted from
    std::unique_ptr<Value> value;  // stable address handed to the tracer and the guards
  };
  std::unordered_map<std::string, Slot> slots;
};

std::unordered_map<PyObject*, Namespace>& namespaces() {
  static auto* m = new std::unordered_map<PyObject*, Namespace>();  // modules live for the process
  return *m;
}

}  // namespace

uint64_t dict_version(PyObject* d) {
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wdeprecated-declarations\"")
  return reinterpret_cast<PyDictObject*>(d)->ma_version_tag;
  _Pragma("GCC diagnostic pop")
}

namespace {

const Value* namespace_find(void* h, const runtime::StrObj* name) {
  auto it = namespaces().find(handle_of(h));
  if (it == namespaces().end()) return nullptr;
  Namespace& ns = it->second;
  auto slot = ns.slots.find(name->s);
  if (slot != ns.slots.end()) return slot->second.seen ? slot->second.value.get() : nullptr;
  Namespace::Slot s;
  s.key = py::str(name->s);
  PyObject* obj = PyDict_GetItemWithError(ns.dict.ptr(), s.key.ptr());  // borrowed
  if (!obj) return nullptr;
  s.seen = py::reinterpret_borrow<py::object>(obj);
  s.value = std::make_unique<Value>(calling_python([&] { return to_value_shared(s.seen); }));
  return ns.slots.emplace(name->s, std::move(s)).first->second.value.get();
}

const runtime::ForeignVTable kPyModuleVTable = {
    "module",        foreign_destroy, foreign_getattr, foreign_setattr, foreign_call,   foreign_binary,
    foreign_compare, foreign_truth,   foreign_repr,    foreign_hash,    namespace_find, foreign_format,
};

std::unordered_map<PyObject*, Value>& op_functions() {
  static auto* m = new std::unordered_map<PyObject*, Value>();
  return *m;
}

runtime::DType dtype_of_numpy(const py::dtype& dt, bool& ok) {
  ok = true;
  const char kind = dt.kind();
  const size_t size = size_t(dt.itemsize());
  if (kind == 'f' && size == 4) return runtime::DType::Float32;
  if (kind == 'f' && size == 8) return runtime::DType::Float64;
  if (kind == 'i' && size == 8) return runtime::DType::Int64;
  if (kind == 'b' && size == 1) return runtime::DType::Bool;
  ok = false;
  return runtime::DType::Float32;
}

py::object& function_converter() {
  static auto* f = new py::object();  // never destroyed: the interpreter may be gone at exit
  return *f;
}

}  // namespace

void set_function_converter(py::object f) { function_converter() = std::move(f); }

// ------------------------------------------------------------- big ints --
// An int operation beyond int64 is Python's: exact, a Python int (a
// Foreign value, every later operation on it Python's too), back to a
// kiln Int whenever a result fits again (to_value).
namespace {
Value bigint_binary(runtime::BinOp op, int64_t x, int64_t y) {
  return calling_python([&] {
    py::int_ a(x), b(y);
    PyObject* r = nullptr;
    switch (op) {
      case runtime::BinOp::ADD: r = PyNumber_Add(a.ptr(), b.ptr()); break;
      case runtime::BinOp::SUB: r = PyNumber_Subtract(a.ptr(), b.ptr()); break;
      case runtime::BinOp::MUL: r = PyNumber_Multiply(a.ptr(), b.ptr()); break;
      case runtime::BinOp::FLOORDIV: r = PyNumber_FloorDivide(a.ptr(), b.ptr()); break;
      case runtime::BinOp::POW: r = PyNumber_Power(a.ptr(), b.ptr(), Py_None); break;
      case runtime::BinOp::LSHIFT: r = PyNumber_Lshift(a.ptr(), b.ptr()); break;
      default: throw_error(ErrorKind::OverflowError, "integer overflow");
    }
    if (!r) throw py::error_already_set();
    return to_value(py::reinterpret_steal<py::object>(r));
  });
}
Value bigint_from_double(double d) {
  return calling_python([&] {
    PyObject* r = PyLong_FromDouble(d);
    if (!r) throw py::error_already_set();
    return to_value(py::reinterpret_steal<py::object>(r));
  });
}
Value bigint_call_builtin(const std::string& name, const runtime::CallArgs& args) {
  return calling_python([&] {
    PyObject* fn = PyDict_GetItemString(PyEval_GetBuiltins(), name.c_str());  // borrowed
    if (!fn) return Value::null();
    const size_t nkw = args.nkw(), npos = args.npos();
    py::tuple pos(npos);
    for (size_t i = 0; i < npos; ++i) pos[i] = to_py(args[i]);
    py::dict kw;
    for (size_t i = 0; i < nkw; ++i) kw[py::str(args.kwnames->items[i].as_str())] = to_py(args[npos + i]);
    return to_value_shared(py::handle(fn)(*pos, **kw));
  });
}
bool bigint_is_big(const Value& v) {
  PyObject* o = foreign_object(v);
  return o && PyLong_CheckExact(o);
}
const runtime::BigIntHooks kPythonInts = {bigint_binary, bigint_from_double, bigint_call_builtin, bigint_is_big};
}  // namespace

void install_python_ints() { runtime::set_bigint_hooks(&kPythonInts); }

PyArgs::PyArgs(const py::args& args, const py::kwargs& kwargs, py::handle self, ArgConversion conv) {
  auto convert = conv == ArgConversion::Shared ? to_value_shared : to_value;
  if (self) values.push_back(convert(self));
  for (py::handle a : args) values.push_back(convert(a));
  std::vector<Value> names;
  for (auto [k, v] : kwargs) {
    names.push_back(runtime::intern_value(py::cast<std::string>(k)));
    values.push_back(convert(v));
  }
  if (!names.empty()) kwnames = runtime::make_tuple(std::move(names));
}

PyArgs::PyArgs(PyObject* const* args, size_t nargs, PyObject* kwnames) {
  const size_t nkw = kwnames ? size_t(PyTuple_GET_SIZE(kwnames)) : 0;
  values.reserve(nargs + nkw);
  for (size_t i = 0; i < nargs + nkw; ++i) values.push_back(to_value_shared(args[i]));
  if (nkw) {
    std::vector<Value> names;
    for (size_t i = 0; i < nkw; ++i)
      names.push_back(runtime::intern_value(py::cast<std::string>(PyTuple_GET_ITEM(kwnames, Py_ssize_t(i)))));
    this->kwnames = runtime::make_tuple(std::move(names));
  }
}

void write_python_stdout(std::string_view text) {
  py::module_::import("sys").attr("stdout").attr("write")(py::str(text.data(), text.size()));
}

runtime::CallContext& python_vm() {
  // Python's recursion limit (as set when this thread first calls into
  // kiln), so a deep module chain that Python itself could call is not cut
  // short at kiln's default; the VM's C++-stack check still stops a real
  // overflow.
  thread_local interpreter::VM vm([] {
    interpreter::VMOptions o;
    o.recursion_limit = std::max(o.recursion_limit, Py_GetRecursionLimit());
    o.stdout_sink = write_python_stdout;
    return o;
  }());
  return vm;
}

// CPython's (exported, private) helper that appends a synthetic frame to
// the traceback of the exception being raised: how Cython puts its source
// lines in Python tracebacks. kiln does the same with its frames (the
// user's Python file and line, from the KBC translation), so the user's
// line is where a Python traceback puts the raising line: last.
extern "C" void _PyTraceback_Add(const char* funcname, const char* filename, int lineno);

// The Python exception object for a kiln exception: the Python object it
// came from, or a new instance of its built-in class made from its args
// (kept, so the object stays one object however often it crosses).
py::object exception_to_py(const Value& exc) {
  runtime::ExceptionData* d = runtime::exception_data(exc);
  if (d->origin) return *static_cast<py::object*>(d->origin.get());
  py::object obj;
  if (d->from_message) {
    obj = py::reinterpret_borrow<py::object>(exception_type(d->kind))(py::str(d->message));
  } else {
    py::tuple args(d->args.size());
    for (size_t i = 0; i < d->args.size(); ++i) args[i] = to_py(d->args[i]);
    obj = py::reinterpret_borrow<py::object>(exception_type(d->kind))(*args);
  }
  if (!d->cause.is_none()) PyException_SetCause(obj.ptr(), to_py(d->cause).release().ptr());
  for (const auto& [k, v] : d->attrs) {
    // An attribute the constructor left unset reads None, and setting it
    // to None is not the same: OSError's str() shows a filename slot that
    // is set, even to None ("[Errno 2] msg: None -> None").
    py::object value = to_py(v);
    if (value.is_none() && py::hasattr(obj, k.c_str()) && obj.attr(k.c_str()).is_none()) continue;
    obj.attr(py::str(k)) = value;
  }
  auto* held = new py::object(obj);
  d->origin = std::shared_ptr<void>(held, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  d->foreign = foreign(obj);
  return obj;
}

void raise_python(const Error& e) {
  const Value exc = e.exception ? Value::object(Kind::Foreign, e.exception.get()) : Value::null();
  if (!exc.is_null() && runtime::is_exception(exc)) {
    py::object obj = exception_to_py(exc);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())), obj.ptr());
  } else if (e.origin) {
    auto* original = static_cast<py::object*>(e.origin.get());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(original->ptr())), original->ptr());
  } else {
    PyErr_SetString(exception_type(e.kind()), e.message().c_str());
  }
  // Each added frame goes outside the ones before (as when an exception
  // propagates out of nested calls): innermost first, as kiln keeps them.
  for (const TracebackEntry& f : e.traceback()) _PyTraceback_Add(f.function.c_str(), f.file.c_str(), f.line);
  throw py::error_already_set();
}

void sync_namespaces() {
  for (auto& [mod, ns] : namespaces()) {
    const uint64_t v = dict_version(ns.dict.ptr());
    if (v == ns.version) continue;
    ns.version = v;
    for (auto& [name, slot] : ns.slots) {
      PyObject* now = PyDict_GetItemWithError(ns.dict.ptr(), slot.key.ptr());
      if (now == slot.seen.ptr()) continue;
      slot.seen = now ? py::reinterpret_borrow<py::object>(now) : py::object();
      *slot.value = now ? to_value_shared(py::handle(now)) : Value::null();
    }
  }
}

void register_op_function(py::handle fn, const Value& op) { op_functions()[fn.ptr()] = op; }

int visit_python_refs(const Value& v, visitproc visit, void* arg) {
  if (PyObject* o = foreign_object(v)) return visit(o, arg);
  if (!v.is_heap() || v.obj()->refcount() != 1) return 0;
  auto each = [&](const std::vector<Value>& items) {
    for (const Value& x : items)
      if (int rc = visit_python_refs(x, visit, arg)) return rc;
    return 0;
  };
  switch (v.kind()) {
    case Kind::List: return each(v.as<runtime::ListObj>()->items);
    case Kind::Tuple: return each(v.as<runtime::TupleObj>()->items);
    case Kind::Dict:
      for (const auto& [k, x] : v.as<runtime::DictObj>()->entries) {
        if (int rc = visit_python_refs(k, visit, arg)) return rc;
        if (int rc = visit_python_refs(x, visit, arg)) return rc;
      }
      return 0;
    case Kind::Module: {
      auto* m = v.as<runtime::ModuleObj>();
      for (const runtime::NameMap* map : {&m->attrs, &m->modules})
        for (const auto& [name, x] : map->entries())
          if (int rc = visit_python_refs(x, visit, arg)) return rc;
      for (const auto* hooks : {&m->forward_pre_hooks, &m->forward_hooks})
        for (const runtime::Hook& h : *hooks)
          if (int rc = visit_python_refs(h.fn, visit, arg)) return rc;
      return 0;
    }
    default: return 0;
  }
}

Value foreign(py::handle obj) {
  Py_INCREF(obj.ptr());
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kPyObjectVTable, obj.ptr()));
}

PyObject* foreign_object(const Value& v) {
  if (!v.is(Kind::Foreign)) return nullptr;
  auto* f = v.as<runtime::ForeignObj>();
  return f->vt == &kPyObjectVTable || f->vt == &kPyModuleVTable || f->vt == &kTorchTensorVTable ||
                 f->vt == &kTorchFunctionVTable || f->vt == &kTorchModuleVTable || f->vt == &kTorchGradModeVTable ||
                 f->vt == &kTorchGradModeFactoryVTable
             ? handle_of(f->handle)
             : nullptr;
}

// A torch tensor kiln does not take: Foreign, its operations torch's own
// (the program still runs, on torch), its use in a trace a break naming why.
Value torch_tensor_foreign(py::handle obj) {
  Py_INCREF(obj.ptr());
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kTorchTensorVTable, obj.ptr()));
}

Value torch_refused_module(py::handle obj) {
  Py_INCREF(obj.ptr());
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kTorchModuleVTable, obj.ptr()));
}

static Value torch_function(py::handle obj) {
  Py_INCREF(obj.ptr());
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kTorchFunctionVTable, obj.ptr()));
}

thread_local bool NumpyStaysPython::active = false;

Tensor tensor_from_numpy(py::handle obj) {
  py::array a = py::reinterpret_borrow<py::array>(obj);
  bool ok;
  const runtime::DType dt = dtype_of_numpy(a.dtype(), ok);
  if (!ok)
    throw_error(ErrorKind::TypeError, "kiln supports NumPy arrays of float32, float64, int64 and bool, not " +
                                          std::string(py::str(a.dtype())));
  runtime::Shape sizes(size_t(a.ndim())), strides(size_t(a.ndim()));
  const auto isz = py::ssize_t(runtime::itemsize(dt));
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    sizes[size_t(d)] = a.shape(d);
    if (a.strides(d) % isz != 0)
      throw_error(ErrorKind::ValueError, "a NumPy array whose strides are not whole elements cannot be shared");
    strides[size_t(d)] = a.strides(d) / isz;
  }
  // The tensor keeps the array alive; the GIL is taken to let it go.
  a.inc_ref();
  PyObject* owner = a.ptr();
  return Tensor::from_blob(const_cast<void*>(a.data()), sizes, strides, dt, [owner](void*) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    Py_DECREF(owner);
  });
}


namespace {
// Not thread_local: every scope is made and used with the GIL held, which
// serializes them; a thread_local in a shared library costs a
// __tls_get_addr call per access, on the path of every compiled call.
TensorIdentityScope* active_identity_scope = nullptr;
}

TensorIdentityScope::TensorIdentityScope() : outer_(active_identity_scope) { active_identity_scope = this; }
TensorIdentityScope::~TensorIdentityScope() {
  active_identity_scope = outer_;
  auto release = [](const Seen& s) {
    if (s.torch) static_cast<runtime::Object*>(const_cast<runtime::TensorImpl*>(static_cast<const runtime::TensorImpl*>(s.impl)))->decref();
    Py_DECREF(s.obj);
  };
  for (size_t i = 0; i < n_ && i < kInline; ++i) release(inline_[i]);
  for (const Seen& s : more_) release(s);
}
TensorIdentityScope* TensorIdentityScope::active() { return active_identity_scope; }

void TensorIdentityScope::remember(const void* impl, PyObject* obj) {
  // No search for an earlier entry: a repeat is harmless (find() takes the
  // first), and a call's arguments are remembered without a quadratic scan.
  Py_INCREF(obj);
  if (n_ < kInline) inline_[n_] = {impl, obj, false};
  else more_.push_back({impl, obj, false});
  ++n_;
}

PyObject* TensorIdentityScope::find(const void* impl) const {
  for (size_t i = 0; i < n_ && i < kInline; ++i)
    if (inline_[i].impl == impl) return inline_[i].obj;
  for (const Seen& s : more_)
    if (s.impl == impl) return s.obj;
  return nullptr;
}

void TensorIdentityScope::remember_torch(runtime::TensorImpl* impl, PyObject* obj) {
  Py_INCREF(obj);
  impl->incref();
  if (n_ < kInline) inline_[n_] = {impl, obj, true};
  else more_.push_back({impl, obj, true});
  ++n_;
}

runtime::TensorImpl* TensorIdentityScope::find_torch(PyObject* obj) const {
  for (size_t i = 0; i < n_ && i < kInline; ++i)
    if (inline_[i].obj == obj && inline_[i].torch) return const_cast<runtime::TensorImpl*>(static_cast<const runtime::TensorImpl*>(inline_[i].impl));
  for (const Seen& s : more_)
    if (s.obj == obj && s.torch) return const_cast<runtime::TensorImpl*>(static_cast<const runtime::TensorImpl*>(s.impl));
  return nullptr;
}

// A torch tensor as a Value: a kiln tensor over its memory, remembered for
// its identity, or the torch object itself (Foreign) when kiln cannot take
// it (torch_interop.h says why).
static Value torch_tensor_value(py::handle obj) {
  PyObject* o = obj.ptr();
  TensorIdentityScope* scope = active_identity_scope;
  if (scope) {
    scope->torch_out = true;
    if (runtime::TensorImpl* impl = scope->find_torch(o)) return Value::tensor(Tensor(runtime::Ref<runtime::TensorImpl>(impl)));
  }
  if (!torch_tensor_refusal(o).empty()) return torch_tensor_foreign(obj);
  Tensor t = tensor_from_torch(o);
  if (scope) scope->remember_torch(t.impl(), o);
  return Value::tensor(t);
}

Value torch_tensor_unscoped(py::handle obj) {
  if (!torch_tensor_refusal(obj.ptr()).empty()) return torch_tensor_foreign(obj);
  return Value::tensor(tensor_from_torch(obj.ptr()));
}

// The rest of torch once torch is seen (to_value's slow path): a torch
// tensor subclass stays torch's; a torch function kiln has no lowering for
// stays torch's too, and says so when traced. Null: not torch's.
static Value torch_object_value(py::handle obj) {
  PyObject* o = obj.ptr();
  if (!torch_seen()) return Value::null();
  // Seeing torch just now installed kiln/_torch_api.py's table.
  if (auto it = op_functions().find(o); it != op_functions().end()) return it->second;
  if (is_torch_tensor(o)) return torch_tensor_value(obj);
  if (PyObject_TypeCheck(o, torch_types::tensor)) return torch_tensor_foreign(obj);
  for (PyTypeObject* mode : torch_types::grad_modes) {
    auto with_vt = [&](const runtime::ForeignVTable* vt) {
      Py_INCREF(o);
      return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(vt, o));
    };
    if (Py_TYPE(o) == mode) return with_vt(&kTorchGradModeVTable);
    if (o == reinterpret_cast<PyObject*>(mode)) return with_vt(&kTorchGradModeFactoryVTable);
    // @torch.no_grad() on a function: torch's wrapper calls self.clone()
    // for a fresh manager each call.
    if (PyMethod_Check(o) && Py_TYPE(PyMethod_GET_SELF(o)) == mode) {
      PyObject* fn = PyMethod_GET_FUNCTION(o);
      if (PyFunction_Check(fn) &&
          PyUnicode_CompareWithASCIIString(reinterpret_cast<PyFunctionObject*>(fn)->func_name, "clone") == 0)
        return with_vt(&kTorchGradModeFactoryVTable);
    }
  }
  // A module-level function or builtin of torch (torch.*, torch.nn.functional.*,
  // torch._C._nn.*): never translated (torch's Python internals are not the
  // program), called as torch's own. Methods (a torch module's forward) are
  // the program's and are translated as any Python function.
  if (PyFunction_Check(o) || PyCFunction_Check(o)) {
    PyObject* mod = PyFunction_Check(o) ? reinterpret_cast<PyFunctionObject*>(o)->func_module
                                        : reinterpret_cast<PyCFunctionObject*>(o)->m_module;
    PyObject* qual = PyFunction_Check(o) ? reinterpret_cast<PyFunctionObject*>(o)->func_qualname : nullptr;
    const bool method = qual && PyUnicode_Check(qual) && PyUnicode_FindChar(qual, '.', 0, PyUnicode_GET_LENGTH(qual), 1) >= 0;
    if (PyCFunction_Check(o) && !(mod && PyUnicode_Check(mod))) {
      // torch's builtins carry no module name: their self is torch's module object.
      PyObject* self = reinterpret_cast<PyCFunctionObject*>(o)->m_self;
      mod = self && PyModule_Check(self) ? PyModule_GetNameObject(self) : nullptr;
      if (mod) Py_DECREF(mod);  // a module's name lives as long as the module
      else PyErr_Clear();
    }
    if (!method && mod && PyUnicode_Check(mod)) {
      const char* m = PyUnicode_AsUTF8(mod);
      if (m && (std::strncmp(m, "torch.", 6) == 0 || std::strcmp(m, "torch") == 0)) return torch_function(obj);
    }
  }
  return Value::null();
}

// A kiln.Tensor object as a Value, remembered for its identity (above).
static Value tensor_value(const Tensor& t, PyObject* o) {
  if (TensorIdentityScope* scope = active_identity_scope) scope->remember(t.impl(), o);
  return Value::tensor(t);
}

// Python's built-in types and kiln's type objects of the same name (what
// `int`, `list`, ... and type(x) are in KBC): one converts to the other, so
// `type(x) is int` holds on both sides of the seam.
const std::pair<Kind, PyTypeObject*> kBuiltinTypes[] = {
    {Kind::Bool, &PyBool_Type},       {Kind::Int, &PyLong_Type},        {Kind::Float, &PyFloat_Type},
    {Kind::Str, &PyUnicode_Type},     {Kind::Tuple, &PyTuple_Type},     {Kind::List, &PyList_Type},
    {Kind::Dict, &PyDict_Type},       {Kind::Set, &PySet_Type},         {Kind::FrozenSet, &PyFrozenSet_Type},
    {Kind::Slice, &PySlice_Type},     {Kind::Range, &PyRange_Type},
};

Value to_value(py::handle obj) {
  PyObject* o = obj.ptr();
  if (PyType_Check(o)) {
    for (const auto& [kind, type] : kBuiltinTypes)
      if (o == reinterpret_cast<PyObject*>(type)) return *runtime::builtins().find(runtime::kind_name(kind));
    if (const py::detail::type_info* ti = type_info_of<Tensor>(); ti && o == reinterpret_cast<PyObject*>(ti->type))
      return *runtime::builtins().find("Tensor");
  }
  if (const Tensor* t = exact_instance<Tensor>(o)) return tensor_value(*t, o);
  if (is_torch_tensor(o)) return torch_tensor_value(obj);
  if (o == Py_None) return Value::none();
  if (PyBool_Check(o)) return Value::boolean(o == Py_True);
  if (PyLong_CheckExact(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return foreign(obj);  // beyond int64: Python's own int (bigint_hooks)
    return Value::integer(v);
  }
  if (PyFloat_CheckExact(o)) return Value::floating(PyFloat_AS_DOUBLE(o));
  if (PyUnicode_CheckExact(o)) return Value::str(py::cast<std::string>(obj));
  if (py::isinstance<Tensor>(obj)) {  // a subclass, or not constructed
    const Tensor* t = constructed_instance<const Tensor>(o, type_info_of<Tensor>());
    if (!t) throw_error(ErrorKind::TypeError, "a kiln.Tensor whose __init__ has not run");
    return Value::tensor(*t);
  }
  if (py::isinstance<Value>(obj)) return py::cast<Value>(obj);
  if (Value m = module_from_py(obj); !m.is_null()) return m;  // a kiln.nn module: its ModuleObj
  if (Value m = torch_module_value(obj); !m.is_null()) return m;  // a torch.nn.Module: its mirror
  if (PyType_Check(o)) {
    if (Value c = class_from_py(obj); !c.is_null()) return c;  // a kiln.nn.Module subclass: its kiln class
    if (Value c = torch_class_value(obj); !c.is_null()) return c;  // a torch.nn.Module subclass: its kiln class
  }
  if (PyTuple_CheckExact(o)) {
    std::vector<Value> items;
    for (py::handle i : py::reinterpret_borrow<py::tuple>(obj)) items.push_back(to_value(i));
    return runtime::make_tuple(std::move(items));
  }
  if (PyList_CheckExact(o) || PyDict_CheckExact(o) || PySet_CheckExact(o))
    if (Value native = mirror_from_py(o); !native.is_null()) return native;  // kiln's own container
  if (PyList_CheckExact(o)) {
    std::vector<Value> items;
    for (py::handle i : py::reinterpret_borrow<py::list>(obj)) items.push_back(to_value(i));
    return runtime::make_list(std::move(items));
  }
  if (PyDict_CheckExact(o)) {
    Value d = runtime::make_dict();
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(obj)) runtime::set_item(d, to_value(k), to_value(v));
    return d;
  }
  if (PyAnySet_CheckExact(o)) {  // with the same table (set_layout.h)
    PySetTable table = read_py_set(o, [](py::handle i) { return to_value(i); });
    // No kiln table gives its order (an element hashed by its address):
    // Python's own object, iterated by Python.
    if (!table.exact) return foreign(obj);
    Value s = runtime::make_set(PyFrozenSet_CheckExact(o));
    assign_py_set(*s.as<runtime::SetObj>(), std::move(table));
    return s;
  }
  if (py::isinstance<py::array>(obj))
    return NumpyStaysPython::active ? foreign(obj) : Value::tensor(tensor_from_numpy(obj));
  if (o == Py_Ellipsis) return runtime::ellipsis();
  if (PySlice_Check(o)) {
    auto* sl = reinterpret_cast<PySliceObject*>(o);
    return runtime::make_slice(to_value(sl->start), to_value(sl->stop), to_value(sl->step));
  }
  if (PyModule_Check(o)) {
    Namespace& ns = namespaces()[o];
    if (!ns.dict) {
      ns.dict = py::reinterpret_borrow<py::object>(PyModule_GetDict(o));
      ns.version = dict_version(ns.dict.ptr());
    }
    Py_INCREF(o);
    return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kPyModuleVTable, o));
  }
  if (auto it = op_functions().find(o); it != op_functions().end()) return it->second;
  if (Value t = torch_object_value(obj); !t.is_null()) return t;
  // Python's built-in exception classes are kiln's; an exception object is
  // a kiln exception over the Python object.
  if (PyExceptionClass_Check(o))
    if (auto it = kinds_by_type().find(o); it != kinds_by_type().end()) return runtime::exception_class(it->second);
  if (PyExceptionInstance_Check(o)) return exception_from_py(obj);
  if (PyFunction_Check(o) && function_converter()) {
    py::object kbc = function_converter()(obj);
    if (!kbc.is_none()) return py::cast<Value>(kbc);
    // A torch method kiln leaves to Python (a torch module class's forward
    // without a kiln lowering): called as torch's, with torch tensors.
    PyObject* mod = reinterpret_cast<PyFunctionObject*>(o)->func_module;
    if (torch_types::tensor && mod && PyUnicode_Check(mod)) {
      const char* m = PyUnicode_AsUTF8(mod);
      if (m && std::strncmp(m, "torch.", 6) == 0) return torch_function(obj);
    }
  }
  return foreign(obj);
}

Value to_value_shared(py::handle obj) {
  PyObject* o = obj.ptr();
  if (const Tensor* t = exact_instance<Tensor>(o)) return tensor_value(*t, o);  // the common argument first
  if (is_torch_tensor(o)) return torch_tensor_value(obj);  // two pointer tests; false until torch is seen
  if (PyList_CheckExact(o) || PyDict_CheckExact(o) || PySet_CheckExact(o)) {
    if (Value native = mirror_from_py(o); !native.is_null()) return native;  // kiln's own container
    return foreign(obj);
  }
  if (PyTuple_CheckExact(o)) {  // immutable, so read natively; what it holds stays shared
    std::vector<Value> items;
    items.reserve(size_t(PyTuple_GET_SIZE(o)));
    for (py::handle i : py::reinterpret_borrow<py::tuple>(obj)) items.push_back(to_value_shared(i));
    return runtime::make_tuple(std::move(items));
  }
  return to_value(obj);
}

py::object tensor_to_py(const Tensor& t) {
  if (TensorIdentityScope* scope = active_identity_scope) {
    if (PyObject* o = scope->find(t.impl())) return py::reinterpret_borrow<py::object>(o);
    if (scope->torch_out) {
      if (PyObject* o = torch_held_object(t.impl())) return py::reinterpret_borrow<py::object>(o);
      return tensor_to_torch(t);
    }
  }
  if (PyObject* o = torch_held_object(t.impl())) return py::reinterpret_borrow<py::object>(o);
  if (const py::detail::type_info* ti = type_info_of<Tensor>())
    return py::reinterpret_steal<py::object>(py::detail::type_caster_generic::cast(
        &t, py::return_value_policy::copy, py::handle(), ti,
        [](const void* p) -> void* { return new Tensor(*static_cast<const Tensor*>(p)); }, nullptr));
  return py::cast(t);
}

py::object to_py(const Value& v) {
  switch (v.kind()) {
    case Kind::None: return py::none();
    case Kind::Bool: return py::bool_(v.as_bool());
    case Kind::Int: return py::int_(v.as_int());
    case Kind::Float: return py::float_(v.as_float());
    case Kind::Str: return py::str(v.as_str());
    case Kind::Tensor: return tensor_to_py(v.as_tensor());
    case Kind::Tuple: {
      const auto& items = v.as<runtime::TupleObj>()->items;
      py::tuple t(items.size());
      for (size_t i = 0; i < items.size(); ++i) t[i] = to_py(items[i]);
      return t;
    }
    case Kind::List: {
      if (py::object mirrored = mirror_to_py(v)) return mirrored;
      py::list l;
      for (const Value& i : v.as<runtime::ListObj>()->items) l.append(to_py(i));
      return l;
    }
    case Kind::Dict: {
      if (py::object mirrored = mirror_to_py(v)) return mirrored;
      py::dict d;
      for (const auto& [k, x] : v.as<runtime::DictObj>()->entries) d[to_py(k)] = to_py(x);
      return d;
    }
    case Kind::Set:
    case Kind::FrozenSet: {
      if (v.is(Kind::Set))
        if (py::object mirrored = mirror_to_py(v)) return mirrored;
      // With the same table (set_layout.h).
      const auto* s = v.as<runtime::SetObj>();
      std::vector<py::object> keys(size_t(s->capacity()));
      for (int64_t i = 0; i < s->capacity(); ++i)
        if (s->table()[i].active()) {
          keys[size_t(i)] = to_py(s->table()[i].key);
          // Interned now: a code object made with this set among its
          // constants (the frames path's residual code) interns its str
          // elements and, when that replaces one, rebuilds the frozenset
          // element by element: another table, another order.
          if (PyUnicode_CheckExact(keys[size_t(i)].ptr())) {
            PyObject* k = keys[size_t(i)].release().ptr();
            PyUnicode_InternInPlace(&k);
            keys[size_t(i)] = py::reinterpret_steal<py::object>(k);
          }
        }
      PyObject* set = v.is(Kind::FrozenSet) ? PyFrozenSet_New(nullptr) : PySet_New(nullptr);
      if (!set) throw py::error_already_set();
      py::object out = py::reinterpret_steal<py::object>(set);
      write_py_set(set, *s, keys);
      return out;
    }
    case Kind::Foreign:
      if (PyObject* o = foreign_object(v)) return py::reinterpret_borrow<py::object>(o);
      if (runtime::is_exception(v)) return exception_to_py(v);
      break;
    case Kind::Builtin: {
      if (auto k = runtime::exception_class_kind(v)) return py::reinterpret_borrow<py::object>(exception_type(*k));
      if (runtime::is_ellipsis(v)) return py::ellipsis();
      const Kind type_of = v.as<runtime::BuiltinObj>()->type_of;
      for (const auto& [kind, type] : kBuiltinTypes)
        if (kind == type_of && v.is_same(*runtime::builtins().find(runtime::kind_name(kind))))
          return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(type));
      if (type_of == Kind::None) return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(Py_None)));
      if (type_of == Kind::Class) return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type));
      if (type_of == Kind::Tensor && v.is_same(*runtime::builtins().find("Tensor")))
        if (const py::detail::type_info* ti = type_info_of<Tensor>())
          return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(ti->type));
      break;
    }
    case Kind::Module: return module_to_py(v);
    case Kind::Class:
      if (py::object c = class_to_py(v)) return c;
      break;
    case Kind::Slice: {
      auto* sl = v.as<runtime::SliceObj>();
      PyObject* o = PySlice_New(to_py(sl->start).ptr(), to_py(sl->stop).ptr(), to_py(sl->step).ptr());
      if (!o) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(o);
    }
    case Kind::Range: {
      auto* r = v.as<runtime::RangeObj>();
      return py::module_::import("builtins").attr("range")(r->start, r->stop, r->step);
    }
    default: break;
  }
  // Functions, modules, classes of KBC: an opaque handle Python can pass back.
  return py::cast(v);
}

void install_torch_op_hook() { runtime::set_foreign_op_hook(torch_op_hook); }

void bind_torch(py::module_& m) {
  m.def("_map_torch", [](py::handle torch_obj, py::handle target) {
    guarded([&] { op_functions()[torch_obj.ptr()] = to_value(target); });
    torch_obj.inc_ref();  // the table's key: torch's objects live for the process anyway
  }, "kiln/_torch_api.py's rows: compiled code reaching torch_obj gets target's kiln value.");
  m.def("_register_tensor_method", [](const std::string& name, py::handle fn) {
    guarded([&] { runtime::register_tensor_method(name, to_value(fn)); });
  }, "A tensor method kiln code finds before the registry op of that name (kiln/_torch_api.py).");
  m.def("_raw_torch", [](py::handle fn) { return torch_function(fn); },
        "torch's own function as a kiln value (called as torch's, never mapped by the table).");
}

}  // namespace kiln::python

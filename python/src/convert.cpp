#include "python/src/convert.h"
#include "python/src/function_origins.h"

#include <pybind11/numpy.h>

#include <cstring>
#include <optional>
#include <unordered_map>

#include "python/src/container_mirror.h"
#include "python/src/errors.h"
#include "python/src/foreign.h"
#include "python/src/namespaces.h"
#include "python/src/nn.h"
#include "python/src/set_layout.h"
#include "python/src/tensor_identity.h"
#include "python/src/torch_interop.h"
#include "python/src/torch_modules.h"
#include "python/src/torch_values.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::python {

using runtime::Kind;
using runtime::Tensor;
using runtime::Value;

namespace {

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
  if (kind == 'i' && size == 4) return runtime::DType::Int32;
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

void register_op_function(py::handle fn, const Value& op) { op_functions()[fn.ptr()] = op; }

const Value* op_function(PyObject* fn) {
  auto it = op_functions().find(fn);
  return it != op_functions().end() ? &it->second : nullptr;
}

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

// A kiln.Tensor object as a Value, remembered for its identity
// (TensorIdentityScope).
static Value tensor_value(const Tensor& t, PyObject* o) {
  if (TensorIdentityScope* scope = TensorIdentityScope::active()) scope->remember(t.impl(), o);
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
  if (PyModule_Check(o)) return module_namespace(obj);
  if (auto it = op_functions().find(o); it != op_functions().end()) return it->second;
  if (Value t = torch_object_value(obj); !t.is_null()) return t;
  // Python's built-in exception classes are kiln's; an exception object is
  // a kiln exception over the Python object.
  if (PyExceptionClass_Check(o))
    if (std::optional<ErrorKind> kind = builtin_exception_kind(o)) return runtime::exception_class(*kind);
  if (PyExceptionInstance_Check(o)) return exception_from_py(obj);
  if (PyFunction_Check(o) && function_converter()) {
    py::object kbc = function_converter()(obj);
    if (!kbc.is_none()) return py::cast<Value>(kbc);
    // A torch method kiln leaves to Python (a torch module class's forward
    // without a kiln lowering): called as torch's, with torch tensors.
    PyObject* mod = reinterpret_cast<PyFunctionObject*>(o)->func_module;
    if (torch_types::tensor && mod && PyUnicode_Check(mod)) {
      const char* m = PyUnicode_AsUTF8(mod);
      if (m && std::strncmp(m, "torch.", 6) == 0) return torch_function_foreign(obj);
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
  if (TensorIdentityScope* scope = TensorIdentityScope::active()) {
    if (PyObject* o = scope->find(t.impl())) return py::reinterpret_borrow<py::object>(o);
    if (scope->torch_out) {
      if (PyObject* o = torch_held_object(t.impl())) return py::reinterpret_borrow<py::object>(o);
      // Remembered both ways: the same kiln tensor leaves as one torch
      // object (`return y, y`), and that object coming back in (a resume
      // function's argument, in a nested scope) is this kiln tensor again.
      py::object out = tensor_to_torch(t);
      scope->remember_torch(t.impl(), out.ptr());
      return out;
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
      if (type_of == Kind::Class || runtime::is_type_builtin(v))
        return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type));
      if (type_of == Kind::Tensor && v.is_same(*runtime::builtins().find("Tensor")))
        if (const py::detail::type_info* ti = type_info_of<Tensor>())
          return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(ti->type));
      break;
    }
    case Kind::Module: return module_to_py(v);
    case Kind::BoundMethod: {  // a Python function bound to a Python object: CPython's bound method
      const auto* bm = v.as<runtime::BoundMethodObj>();
      if (py::object f = bm->func.is(Kind::Function) ? python_function_of(bm->func) : py::object())
        return py::reinterpret_steal<py::object>(PyMethod_New(f.ptr(), to_py(bm->self).ptr()));
      break;
    }
    case Kind::Function:
      if (py::object f = python_function_of(v)) return f;
      break;
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

}  // namespace kiln::python

// Python objects <-> kiln Values.
//
// Plain data (None, bool, int, float, str, tuple, list, dict) becomes native
// Values; kiln tensors are native; NumPy arrays of a kiln dtype become
// tensors over the array's memory (zero-copy, the array kept alive). A
// Python module becomes a namespace (namespaces.h), torch's objects what
// torch_values.h says, and any other object a Foreign value whose vtable
// calls back into Python (foreign.h: the seam DESIGN.md describes; the core
// never includes Python).
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "runtime/value/tensor.h"
#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

runtime::Value to_value(py::handle obj);
// For state kiln code shares with Python (globals, closure cells, module
// attributes): a list or dict stays the Python object (Foreign), so an
// append in kiln code is an append Python sees; everything else as to_value.
runtime::Value to_value_shared(py::handle obj);
py::object to_py(const runtime::Value& v);

// A kiln tensor as Python sees it: the caller's own object when it is one
// (TensorIdentityScope), a torch tensor over its memory when the call got
// torch tensors, else a kiln.Tensor.
py::object tensor_to_py(const runtime::Tensor& t);

// While one is alive on this thread, an ndarray converts to itself (a
// Foreign value) instead of a tensor over its memory: the frame hook's
// frames keep the program's arrays (isinstance(a, np.ndarray) holds, numpy
// computes numpy's results).
struct NumpyStaysPython {
  static thread_local bool active;
  bool saved = active;
  NumpyStaysPython() { active = true; }
  ~NumpyStaysPython() { active = saved; }
};

// An ndarray of float32/float64/int64/bool as a tensor sharing its memory;
// TypeError for other dtypes or strides that are not whole elements.
runtime::Tensor tensor_from_numpy(py::handle array);

// Python functions passed to or read by compiled code become KBC functions
// through this callable (kiln/_functions.py sets it): f -> KBC function, or
// None to keep f a Foreign callable (untranslatable, kiln.disable).
void set_function_converter(py::object f);

// kiln.<op> (a pybind11 function) converts to the registry op itself, so
// traced code calling kiln.softmax records the op.
void register_op_function(py::handle fn, const runtime::Value& op);

// The registry op a Python object converts to (kiln.<op>, a torch object
// kiln/_torch_api.py maps), or nullptr.
const runtime::Value* op_function(PyObject* fn);

// Python's (*args, **kwargs) as a vectorcall-style argument list (values,
// then keyword values; kwnames the interned keyword names).
//
// Arguments of kiln code (compiled functions, module calls) are the
// caller's objects: a list or dict argument stays the Python object
// (`Shared`, to_value_shared), so `acc.append(1)` is the caller's append.
// Arguments of a registry op are only read, so they may be `Copied` into
// native values at once (faster for nested lists of numbers).
enum class ArgConversion { Shared, Copied };
struct PyArgs {
  std::vector<runtime::Value> values;
  runtime::Value kwnames;
  PyArgs(const py::args& args, const py::kwargs& kwargs, py::handle self = py::handle(),
         ArgConversion conv = ArgConversion::Shared);
  // From CPython's vectorcall convention (keyword values follow the
  // positional ones in `args`; their names are the tuple `kwnames`).
  PyArgs(PyObject* const* args, size_t nargs, PyObject* kwnames);
  runtime::CallArgs call_args() const {
    return runtime::CallArgs{values.data(), values.size(),
                             kwnames.is_none() ? nullptr : kwnames.as<runtime::TupleObj>()};
  }
};

// The C++ object inside a pybind11 instance of exactly type T whose
// __init__ has run; null for anything else (a subclass, another type, an
// instance made by __new__ alone), which the caller sends down pybind11's
// own path. pybind11's casts look the registered type up by hashing the
// C++ type's mangled name on every call; this looks it up once.
template <class T>
const py::detail::type_info* type_info_of() {
  static const py::detail::type_info* ti = nullptr;
  if (!ti) ti = py::detail::get_type_info(typeid(T));  // null until the module has registered T
  return ti;
}
// The T inside `o`, an instance of T's Python type or a subclass (`ti`),
// or null when its __init__ has not run. Trap: __new__ alone leaves a value
// pointer to storage that holds no T; only the constructed holder says so.
template <class T>
T* constructed_instance(PyObject* o, const py::detail::type_info* ti) {
  auto* inst = reinterpret_cast<py::detail::instance*>(o);
  const py::detail::value_and_holder vh = inst->get_value_and_holder(ti, /*throw_if_missing=*/false);
  return vh.inst && vh.holder_constructed() ? static_cast<T*>(vh.value_ptr()) : nullptr;
}
template <class T>
T* exact_instance(PyObject* o) {
  const py::detail::type_info* ti = type_info_of<T>();
  return ti && Py_TYPE(o) == ti->type ? constructed_instance<T>(o, ti) : nullptr;
}

}  // namespace kiln::python

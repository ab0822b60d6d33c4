// Python objects <-> kiln Values, and kiln errors -> Python exceptions.
//
// Plain data (None, bool, int, float, str, tuple, list, dict) becomes native
// Values; kiln tensors are native; NumPy arrays of a kiln dtype become
// tensors over the array's memory (zero-copy, the array kept alive); any
// other object is a Foreign value whose vtable calls back into Python (the
// seam DESIGN.md describes: the core never includes Python).
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "python/src/container_mirror.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/value.h"

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

// Python's cycle collector and kiln values: the Python objects a kiln value
// holds, for tp_traverse of the Python object that owns the value. Only
// kiln objects owned by this path alone (reference count 1) are entered:
// what something else in kiln also holds is reachable from there, so it is
// not reported (a cycle through it is kept, never collected half-alive).
// A module whose attribute holds a Python list that holds the module's
// wrapper (`m.me = [m]`) is then garbage Python can see.
int visit_python_refs(const runtime::Value& v, visitproc visit, void* arg);

// The Foreign value wrapping obj (a new reference held by the value).
runtime::Value foreign(py::handle obj);
// obj when v is a Foreign made by this module, else nullptr.
PyObject* foreign_object(const runtime::Value& v);

// Python functions passed to or read by compiled code become KBC functions
// through this callable (kiln/_compile.py sets it): f -> KBC function, or
// None to keep f a Foreign callable (untranslatable, kiln.disable).
void set_function_converter(py::object f);

// Ints beyond int64 are Python's own (runtime::BigIntHooks): installed
// when the module loads.
void install_python_ints();

// CPython 3.11's dict version tag (PEP 509): changes on every mutation, so
// an unchanged tag means nothing to re-read.
uint64_t dict_version(PyObject* dict);

// Re-reads the attributes kiln has read of every Python module whose dict
// changed since (one comparison per module otherwise). Before each
// compiled call, so guards see current values.
void sync_namespaces();
// kiln.<op> (a pybind11 function) converts to the registry op itself, so
// traced code calling kiln.softmax records the op.
void register_op_function(py::handle fn, const runtime::Value& op);

// A torch tensor as a Value outside any identity scope (a mirrored
// module's parameter: not an argument of the call in progress).
runtime::Value torch_tensor_unscoped(py::handle obj);

// A torch tensor as torch's object (Foreign): its operations are torch's,
// a trace reads it only if it requires grad (ForeignVTable::grad_tensor).
runtime::Value torch_tensor_foreign(py::handle obj);

// A torch module torch must run (torch_modules.h): Foreign, called as
// torch's, a traced call a break naming why.
runtime::Value torch_refused_module(py::handle obj);

// Registry ops reached with torch tensors kiln does not take run as
// torch's functions of the same name (runtime::set_foreign_op_hook).
void install_torch_op_hook();

// kiln._C's torch-table bindings (_map_torch, _register_tensor_method,
// _raw_torch: kiln/_torch_api.py).
void bind_torch(py::module_& m);

// Python tensor objects keep their identity through kiln code. While a
// scope is active (a compiled call, a module call from Python), each
// kiln.Tensor object converted to a Value is remembered, and a Value
// holding that same tensor converts back to that very object: `return x`
// gives the caller's x, `acc.append(x)` appends the caller's x. Scopes
// nest (a Python callback calling compiled code); the innermost is used.
class TensorIdentityScope {
 public:
  TensorIdentityScope();
  ~TensorIdentityScope();
  TensorIdentityScope(const TensorIdentityScope&) = delete;
  TensorIdentityScope& operator=(const TensorIdentityScope&) = delete;

  static TensorIdentityScope* active();
  void remember(const void* impl, PyObject* obj);
  PyObject* find(const void* impl) const;  // borrowed, or nullptr
  // A torch tensor's kiln tensor exists only while kiln code holds it, so
  // the scope keeps it (an impl freed and reused at the same address would
  // otherwise take the torch object's identity). The same torch object
  // converted twice in a scope is the same kiln tensor (f(x, x)).
  void remember_torch(runtime::TensorImpl* impl, PyObject* obj);
  runtime::TensorImpl* find_torch(PyObject* obj) const;  // borrowed, or nullptr
  // Set once a torch tensor entered: kiln tensors then leave as torch
  // tensors (a call that got torch tensors returns torch tensors).
  bool torch_out = false;

 private:
  TensorIdentityScope* outer_;
  // Strong references: a replayed mutation may drop the caller's last
  // reference to an object before the result is converted. The first few
  // live inline: a compiled call's tensors must cost no allocation.
  struct Seen {
    const void* impl;
    PyObject* obj;  // a strong reference
    bool torch;     // impl is a strong reference too (remember_torch)
  };
  // Kiln containers reaching Python keep their identity for the scope's
  // duration (container_mirror.h).
  MirrorScope mirrors_;
  static constexpr size_t kInline = 8;
  Seen inline_[kInline];
  size_t n_ = 0;
  std::vector<Seen> more_;
};

// print() in kiln code run from Python writes where Python's print would:
// sys.stdout as it is at the time (a redirect, pytest's capture).
void write_python_stdout(std::string_view text);

// The VM that runs kiln code called from Python on this thread (module
// calls, KBC functions, attribute reads that may run user code).
runtime::CallContext& python_vm();

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

// The Python exception being handled as a kiln Error whose origin is the
// exception itself (it reaches Python again as that very object).
[[noreturn]] void rethrow_as_kiln(py::error_already_set& e);

// Raises the Python exception matching a kiln error (same type, same text).
[[noreturn]] void raise_python(const Error& e);

// Runs f, turning kiln errors into Python exceptions.
template <class F>
decltype(auto) guarded(F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    raise_python(e);
  }
}

}  // namespace kiln::python

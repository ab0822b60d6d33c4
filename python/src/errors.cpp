#include "python/src/errors.h"

#include <memory>
#include <unordered_map>

#include "python/src/convert.h"
#include "python/src/foreign.h"
#include "runtime/semantics/exceptions.h"

namespace kiln::python {

using runtime::Kind;
using runtime::Value;

namespace {

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

}  // namespace

PyObject* exception_type(ErrorKind k) {
  switch (k) {
#define KILN_ERROR_PY(kind, py, base) \
  case ErrorKind::kind: return PyExc_##py;
    KILN_ERROR_KINDS(KILN_ERROR_PY)
#undef KILN_ERROR_PY
  }
  return PyExc_RuntimeError;
}

std::optional<ErrorKind> builtin_exception_kind(PyObject* type) {
  if (auto it = kinds_by_type().find(type); it != kinds_by_type().end()) return it->second;
  return std::nullopt;
}

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

[[noreturn]] void throw_py_exception(py::handle obj) {
  Value exc = exception_from_py(obj);
  runtime::ExceptionData* d = runtime::exception_data(exc);
  Error err(d->kind, d->message);
  err.origin = d->origin;
  err.exception = runtime::Ref<runtime::Object>(exc.obj());
  throw err;
}

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

// CPython's (exported, private) helper that appends a synthetic frame to
// the traceback of the exception being raised: how Cython puts its source
// lines in Python tracebacks. kiln does the same with its frames (the
// user's Python file and line, from the KBC translation), so the user's
// line is where a Python traceback puts the raising line: last.
extern "C" void _PyTraceback_Add(const char* funcname, const char* filename, int lineno);

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

}  // namespace kiln::python

// kiln errors <-> Python exceptions, with kiln's frames in the traceback.
//
// A kiln Error reaching Python is raised as the Python exception of the
// same type and text (or as the very Python object it came from), with
// the user's file, line and function of each kiln frame appended to the
// Python traceback. A Python exception raised inside a call from kiln comes
// back as a kiln Error whose origin is that exception, so it reaches Python
// again as itself and translated code catches it by its Python class.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "runtime/base/error.h"
#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// Python's built-in exception class of a kiln error kind.
PyObject* exception_type(ErrorKind k);
// The kind of one of Python's built-in exception classes (exactly that
// class, not a subclass); nullopt for any other object.
std::optional<ErrorKind> builtin_exception_kind(PyObject* type);

// A Python exception object as a kiln exception: its kind, its str(), and
// the object itself (matching, attributes and str() go to it; it surfaces
// in Python as itself).
runtime::Value exception_from_py(py::handle obj);
// The Python exception object for a kiln exception: the Python object it
// came from, or a new instance of its built-in class made from its args
// (kept, so the object stays one object however often it crosses).
py::object exception_to_py(const runtime::Value& exc);

// Throws the kiln Error of a Python exception object being raised.
[[noreturn]] void throw_py_exception(py::handle obj);

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

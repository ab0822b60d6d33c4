// Python objects <-> kiln Values, and kiln errors -> Python exceptions.
//
// Plain data (None, bool, int, float, str, tuple, list, dict) becomes native
// Values; kiln tensors are native; NumPy arrays of a kiln dtype become
// tensors over the array's memory (zero-copy, the array kept alive); any
// other object is a Foreign value whose vtable calls back into Python (the
// seam DESIGN.md describes: the core never includes Python).
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/value.h"

namespace kiln::python {

namespace py = pybind11;

runtime::Value to_value(py::handle obj);
py::object to_py(const runtime::Value& v);

// An ndarray of float32/float64/int64/bool as a tensor sharing its memory;
// TypeError for other dtypes or strides that are not whole elements.
runtime::Tensor tensor_from_numpy(py::handle array);

// The Foreign value wrapping obj (a new reference held by the value).
runtime::Value foreign(py::handle obj);
// obj when v is a Foreign made by this module, else nullptr.
PyObject* foreign_object(const runtime::Value& v);

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

// kiln.nn's C++ side (nn.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/value.h"

namespace kiln::python {

namespace py = pybind11;

// A ModuleObj as its Python wrapper (the kiln.nn object that owns it, or a
// new wrapper of the matching class).
py::object module_to_py(const runtime::Value& module);
// The ModuleObj behind a kiln.nn object; Null when obj is not one.
runtime::Value module_from_py(py::handle obj);

void bind_nn(py::module_& m);

}  // namespace kiln::python

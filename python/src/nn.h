// kiln.nn's C++ side (nn.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// A ModuleObj as its Python wrapper (the kiln.nn object that owns it, or a
// new wrapper of the matching class).
py::object module_to_py(const runtime::Value& module);
// The ModuleObj behind a kiln.nn object; Null when obj is not one.
runtime::Value module_from_py(py::handle obj);

// A kiln.nn.Module subclass and its kiln class are one class seen from
// either side: to_value gives the kiln class (so KBC's isinstance, super,
// m.__class__ and classmethods see a class), to_py the Python class again.
// Null / an empty object when the class has no counterpart (yet).
runtime::Value class_from_py(py::handle cls);
py::object class_to_py(const runtime::Value& cls);

void bind_nn(py::module_& m);

}  // namespace kiln::python

// Which Python function a KBC function was made from (function_origins.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// Records that `fn` (a KBC function) was made from the Python function
// `origin` (none: nothing to record). Weak: the record goes with `origin`.
void remember_origin(const runtime::Value& fn, const py::object& origin);

// The Python function `fn` was made from, while it lives; a null object for
// KBC's own functions. What CPython gets for `fn`: kiln never hands a
// Python caller its copy of the program's function.
py::object python_function_of(const runtime::Value& fn);

// Records that KBC code `kbc` (a nested function of a translation) was
// translated from CPython code `pycode`, made by a frame over `globals`:
// a residual that makes that function again (a closure alive across a
// graph break) makes it on CPython from `pycode` (kiln/_frames.py).
void remember_code_origin(const runtime::Ref<runtime::Code>& kbc, const py::object& pycode, const py::object& globals);

// The CPython code and globals `kbc` was translated from (null objects
// when none was recorded).
std::pair<py::object, py::object> python_code_of(const runtime::Code* kbc);

// Makes the tracer and the guards read a translated function's attributes
// off the Python function it was made from (runtime::host_function_attr).
void install_function_origin_attrs();

}  // namespace kiln::python

// Which Python function a KBC function was made from (function_origins.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/value.h"

namespace kiln::python {

namespace py = pybind11;

// Records that `fn` (a KBC function) was made from the Python function
// `origin` (none: nothing to record). Weak: the record goes with `origin`.
void remember_origin(const runtime::Value& fn, const py::object& origin);

// The Python function `fn` was made from, while it lives; a null object for
// KBC's own functions. What CPython gets for `fn`: kiln never hands a
// Python caller its copy of the program's function.
py::object python_function_of(const runtime::Value& fn);

// Makes the tracer and the guards read a translated function's attributes
// off the Python function it was made from (runtime::host_function_attr).
void install_function_origin_attrs();

}  // namespace kiln::python

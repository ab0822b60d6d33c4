// Python functions as KBC functions (functions.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "runtime/value.h"

namespace kiln::python {

namespace py = pybind11;

// The KBC function `entry` of an assembled translation, its globals a live
// mirror of `globals` (the Python module dict), its defaults, keyword
// defaults and closure cells from the Python function's.
runtime::Value make_kbc_function(const std::string& text, const std::string& entry, const std::string& filename,
                                 const py::dict& globals, const std::vector<std::string>& globals_used,
                                 const py::object& defaults, const py::object& kwdefaults, const py::object& closure);

// Brings every globals mirror and module namespace up to date with its
// Python dict (one comparison per module when nothing changed): before any
// call into compiled or traced code.
void sync_python_state();

// kiln._C.make_kbc_function, compile, explain, reset, ...
void bind_functions(py::module_& m);

}  // namespace kiln::python

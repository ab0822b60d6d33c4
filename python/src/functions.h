// Python functions as KBC functions (functions.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "interpreter/kiln_api.h"
#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// The KBC function `entry` of an assembled translation, its globals a live
// mirror of `globals` (the Python module dict), its defaults, keyword
// defaults and closure cells from the Python function's; `origin` is that
// Python function (function_origins.h: what CPython gets back for it);
// `nested_codes` maps KBC names of its nested functions to their CPython
// code (remember_code_origin).
runtime::Value make_kbc_function(const std::string& text, const std::string& entry, const std::string& filename,
                                 const py::dict& globals, const std::vector<std::string>& globals_used,
                                 const py::object& defaults, const py::object& kwdefaults, const py::object& closure,
                                 const py::object& origin, const py::dict& nested_codes);

// A KBC function's closure: the kiln cell of each Python cell of
// `closure` (None: none). Separate from make_kbc_function so a function
// whose closure holds the function itself (a wrapper that compares
// type(self).forward with itself) is cached before its cells are read.
void set_kbc_closure(const runtime::Value& fn, const py::object& closure);

// Brings every globals mirror and module namespace up to date with its
// Python dict (one comparison per module when nothing changed): before any
// call into compiled or traced code.
void sync_python_state();

// The Options of a compile from Python: kiln.config's collective settings,
// print() to sys.stdout.
Options options_from(const std::string& backend, bool fullgraph, const py::object& dynamic, int cache_size_limit);

// An ExplainReport as the dict kiln.explain reads.
py::object report_to_py(const ExplainReport& r);

// kiln._C.make_kbc_function, register_python_backend, reset, ...
void bind_functions(py::module_& m);

}  // namespace kiln::python

// kiln.fx's C++ side (fx.cpp): the Graph IR's nodes as Python objects, and
// symbolic_trace under a Tracer policy whose is_leaf_module /
// path_of_module may be Python overrides.
#pragma once

#include <pybind11/pybind11.h>

namespace kiln::python {

namespace py = pybind11;

// kiln._C.FxGraph, FxNode, FxTracer, FxRunner, fx_trace, fx_rebind, ...
void bind_fx(py::module_& m);

}  // namespace kiln::python

// Graphs that record gradients run through torch's own ops (issue 13,
// "Autograd").
//
// Under grad mode, a torch tensor that requires grad (an argument, a
// mirrored module's parameter) stays torch's object wherever the program
// runs (Foreign), but the tracer reads it as a tensor through its kiln view
// (ForeignVTable::grad_tensor): the trace is captured as usual, one graph
// with the same guards, and the graph's nodes that depend on such a tensor
// are marked (output_graph Node::requires_grad). Such a graph is compiled by
// the `autograd` backend here instead of kiln's: it walks the graph node by
// node, calling for each marked node torch's own function of that op on
// the torch objects themselves (parameters by identity), so torch's
// autograd records every step and `loss.backward()` fills the same .grad as
// eager. Nodes that do not depend on such a tensor (masks, positions) run on
// kiln's kernels, their results handed to torch without a copy.
//
// kiln op -> torch callable is read backwards off the one torch-API table
// (kiln/_torch_api.py: autograd_lowerings); the tracer breaks, naming the
// op, before an op without a lowering takes a tensor that requires grad
// (output_graph::autograd_lowers). The same mapping runs registry ops the
// VM meets with torch tensors kiln does not take (runtime's foreign op hook).
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/tensor/ops.h"

namespace kiln::python {

namespace py = pybind11;

// Once torch is seen: reads the lowerings off the table, registers the
// `autograd` backend and the grad-mode hook guards read.
void install_torch_autograd(py::handle torch);

// torch's callable for `op` (borrowed), or nullptr when the table has none.
PyObject* torch_lowering(runtime::OpId op);

// A Value as a torch call's argument: a torch object as itself, a kiln
// tensor as the torch tensor it stands for (a mirrored parameter, the
// caller's own) or one over its memory, a kiln dtype name as torch's dtype,
// lists and tuples item by item.
py::object torch_argument(const runtime::Value& v);

}  // namespace kiln::python

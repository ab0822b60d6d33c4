// The tracker-level doors into OutputGraph, so output_graph/ never needs
// to know a VariableTracker (DESIGN.md's one-way rule).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "output_graph/output_graph.h"
#include "variables/variable_tracker.h"

namespace kiln::variables {

// A call_function node for `op` (typed by the op's shape rule), wrapped as
// a TensorVariable. Shape errors are kiln::Error, raised at trace time.
VT wrap_fx_proxy(output_graph::OutputGraph& out, runtime::OpId op, std::vector<output_graph::Arg> args,
                 std::vector<std::pair<std::string, output_graph::Arg>> kwargs = {});

// A module's parameter, buffer or submodule reached at qualified `path`
// (from `source`): a tensor becomes a get_attr node registered once per
// tensor identity (two paths to one tensor give one node); a module becomes
// an NNModuleVariable whose structure is guarded by its version (or, if
// traced_unspecialized, an UnspecializedNNModuleVariable guarded by
// identity); None stays None.
// `owner` and `name` give the path lazily: it is built only for a tensor
// (whose get_attr target is that path).
// The kiln view of the embedder's tensor that requires grad
// (ForeignVTable::grad_tensor), or a null Tensor when v is none.
runtime::Tensor grad_tensor_view(const runtime::Value& v);

// `value` may also be such a tensor (grad_tensor_view): a get_attr over
// its view, recording gradients when grad mode is on.
VT register_attr_or_module(output_graph::OutputGraph& out, const runtime::Value& value, const VT& owner,
                           const std::string& name, const SourceRef& source);

}  // namespace kiln::variables

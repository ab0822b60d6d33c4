// symbolic_trace: torch.fx's symbolic_trace on kiln's translator. The
// root module is called on example inputs (their metadata types the graph;
// their values are not used), with the Tracer policy deciding which modules
// stay leaves. The result is a GraphModule: the root, the graph, its code,
// and a callable that runs the graph (eager backend).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "output_graph/backend.h"
#include "output_graph/graph.h"
#include "output_graph/tracer_policy.h"
#include "runtime/value/value.h"

namespace kiln::interpreter {

struct GraphModule {
  runtime::Value root;
  std::shared_ptr<output_graph::Graph> graph;
  output_graph::CompiledGraph run;  // the graph's inputs are the root's tensor arguments
  // The Python-like code view, rendered on request (for a deep chain it is
  // O(depth^2) text, which tracing itself should not pay for).
  std::string code() const { return graph->code(); }
};

// `tracer`: the policy (default: output_graph::Tracer over `root`).
// Python-level control flow is evaluated on the examples' metadata; a data-
// dependent branch, print or other graph break is an error naming it.
// `make_runner`: also prepare GraphModule::run (the eager backend's plan).
// `dynamic`: every dimension of size >= 2 enters as a symbol (the examples'
// sizes are its hints), so the graph serves every size its shape_guards
// admit; otherwise the graph is typed with the examples' sizes.
GraphModule symbolic_trace(const runtime::Value& root, const std::vector<runtime::Value>& example_inputs,
                           output_graph::Tracer* tracer = nullptr, bool make_runner = true, bool dynamic = false);

// symbolic_trace with no example inputs, as torch.fx allows: forward's
// `num_inputs` tensors are of symbolic size. What the model does fixes what
// they are: the rank is the smallest that traces (an unpacking of size(),
// a convolution, a view fix it), a size an op requires is learned (a
// Linear's in_features, a matmul's contraction against another input), and
// an input used as indices is int64. Sizes learned equal to a number are
// static in the graph; the rest stay symbols with the trace's relations in
// Graph::shape_guards. A graph break (a branch on a tensor's value, print)
// is an error naming it; so is a model no guess satisfies.
GraphModule symbolic_trace_without_examples(const runtime::Value& root, size_t num_inputs,
                                            output_graph::Tracer* tracer = nullptr, bool make_runner = true);

// Why `inputs` are not what `graph` was traced for (empty: they are): a
// count, a dtype, a rank or a static size that differs, a size 0 or 1 where
// the graph has a symbol, or a relation of Graph::shape_guards that fails.
std::string input_mismatch(const output_graph::Graph& graph, const std::vector<runtime::Value>& inputs);

}  // namespace kiln::interpreter

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
#include "runtime/value.h"

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
GraphModule symbolic_trace(const runtime::Value& root, const std::vector<runtime::Value>& example_inputs,
                           output_graph::Tracer* tracer = nullptr, bool make_runner = true);

}  // namespace kiln::interpreter

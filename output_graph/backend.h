// Backends: name -> (Graph, example inputs) -> compiled callable. `eager`
// (the reference: runs each node with the registry's eager kernels) is
// always registered; codegen registers `llvm` from its own folder; a user
// passes any callable of this shape.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "output_graph/graph.h"

namespace kiln::output_graph {

// Runs the graph: one Value per placeholder, in order; returns one Value per
// output argument. `ctx` lets call_module / call_method nodes call back
// into modules (built-in modules forward through it).
using CompiledGraph =
    std::function<std::vector<Value>(runtime::CallContext& ctx, const std::vector<Value>& inputs)>;
using Backend = std::function<CompiledGraph(std::shared_ptr<const Graph> graph,
                                            const std::vector<Value>& example_inputs)>;

void register_backend(const std::string& name, Backend backend);
// nullptr when no backend of that name is registered.
const Backend* find_backend(const std::string& name);
std::vector<std::string> backend_names();

// The reference backend, also callable directly.
CompiledGraph eager_backend(std::shared_ptr<const Graph> graph, const std::vector<Value>& example_inputs);

}  // namespace kiln::output_graph

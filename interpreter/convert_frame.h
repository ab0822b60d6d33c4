// convert_frame: traces one call of a function and builds what the cache
// runs instead of it: residual KBC code that calls the compiled graph,
// replays side effects, runs a breaking instruction on the VM and continues
// in a resume function (itself compiled on demand).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "interpreter/kiln_api.h"
#include "output_graph/guards.h"
#include "runtime/code.h"

namespace kiln::interpreter {

struct TraceOutcome {
  runtime::Ref<runtime::FunctionObj> residual;  // called with the frame's own arguments
  output_graph::GuardSet guards;
  int graph_ops = 0;         // 0: no graph was compiled
  std::string graph_code;    // the graph's code view
  std::optional<GraphBreak> graph_break;
};

// `locals` holds the frame's bound parameters (bind_arguments' output).
TraceOutcome convert_frame(const runtime::Ref<runtime::FunctionObj>& fn, const std::vector<runtime::Value>& locals,
                           const Options& options, runtime::CallContext& vm);

// A function's compiled form as a callable Value (eval_frame.cpp).
runtime::Value compiled_value(const runtime::Ref<runtime::FunctionObj>& fn, const Options& options);

// Drops the cached resume functions (kiln::reset).
void reset_resume_functions();

}  // namespace kiln::interpreter

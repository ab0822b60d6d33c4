// convert_frame: traces one call of a function and builds what the cache
// runs instead of it: residual KBC code that calls the compiled graph,
// replays side effects, runs a breaking instruction on the VM and continues
// in a resume function (itself compiled on demand).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "interpreter/kiln_api.h"
#include "output_graph/backend.h"
#include "output_graph/compiler_collective.h"
#include "output_graph/guards.h"
#include "runtime/value/code.h"

namespace kiln::interpreter {

// An error that is the program's, not kiln's failing: a graph break under
// fullgraph=True (asked for), an exception a user's backend callable
// raised. The VM path raises every error anyway; the frames path, which
// otherwise leaves a frame kiln failed at to CPython, raises these.
class ProgramError : public Error {
 public:
  using Error::Error;
  explicit ProgramError(const Error& e) : Error(e) {}
};

// How to build a frame's result from its graph's outputs, its parameters
// and constants, without running residual code (the fast path of a cache
// hit for a trace that ends in a plain return with no side effects).
struct ResultTemplate {
  enum class Kind : uint8_t { Output, Param, Const, Tuple, List } kind = Kind::Const;
  size_t index = 0;  // Output: graph output; Param: bound parameter
  runtime::Value value;
  std::vector<ResultTemplate> items;
};

// Where a fast path's graph input is: a bound parameter, or an item of one
// at a constant index (a varargs tuple's: kiln.nn's Module.__call__(self,
// *args) reads its input as args[0]; the entry's guards fixed the
// container's type and length, so the read cannot fail).
struct FastInput {
  size_t param = 0;
  int64_t item = -1;  // >= 0: params[param][item]
};

struct FastPath {
  output_graph::CompiledGraph graph;  // empty when the trace made no graph
  std::vector<FastInput> inputs;      // the bound parameter behind each graph input
  ResultTemplate result;
};

// Options::python_frames, a trace that stopped at a break: the residual
// ends after the side effects with the frame's state in its temporaries,
// and CPython goes on at the breaking instruction of the original code.
struct Continuation {
  size_t pc = 0;                    // the KBC instruction the trace stopped before
  std::vector<int32_t> stack;       // per KBC stack slot, bottom first: the residual local holding it; -1 a NULL
  std::vector<std::string> live_names;  // the frame's locals that are bound there ...
  std::vector<int32_t> live_temps;      // ... and the residual locals holding their values
};

struct TraceOutcome {
  runtime::Ref<runtime::FunctionObj> residual;  // called with the frame's own arguments
  output_graph::GuardSet guards;
  int graph_ops = 0;         // 0: no graph was compiled
  int inline_depth = 0;      // TraceContext::max_inline_depth of the trace kept (CacheEntry::inline_depth)
  std::shared_ptr<output_graph::Graph> graph;  // the graph itself (explain hands it to Python's kiln.fx)
  std::optional<GraphBreak> graph_break;
  std::optional<FastPath> fast;
  std::optional<Continuation> continuation;  // python_frames and a break
  // The compiler collective, when it ran: the dimensions all ranks agreed
  // to make dynamic (the cache keeps them for later compiles) and whether
  // the analysis had to restart to apply them.
  output_graph::DynamicDims agreed_dynamic_dims;
  bool collective_restarted = false;
};

// `locals` holds the frame's bound parameters (bind_arguments' output).
// `dynamic_dims`: per source path, the dimensions earlier recompiles
// found changing (automatic dynamic shapes). `distributed` (null: off): run
// the compiler collective after the first analysis and restart it with the
// dimensions the ranks agreed on (output_graph/compiler_collective.h).
TraceOutcome convert_frame(const runtime::Ref<runtime::FunctionObj>& fn, const std::vector<runtime::Value>& locals,
                           const Options& options, runtime::CallContext& vm,
                           const std::map<std::string, std::vector<bool>>& dynamic_dims = {},
                           output_graph::DistributedState* distributed = nullptr);

// A function's compiled form as a callable Value (eval_frame.cpp).
runtime::Value compiled_value(const runtime::Ref<runtime::FunctionObj>& fn, const Options& options);

}  // namespace kiln::interpreter

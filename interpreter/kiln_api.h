// kiln's C++ embedding API (public through include/kiln/kiln.h): assemble or build KBC, compile a function, call
// it with Values, explain what the tracer did.
//
//   auto program = kiln::assemble(text, "model.kbc");
//   kiln::CompiledFunction f = kiln::compile(program.global("forward"));
//   kiln::Value y = f({x});
//   std::cout << kiln::explain(program.global("forward"), {x}).str();
//
// Under mpirun (issue 7): call kiln::distributed::init() first, then turn on
// Options::enable_compiler_collectives / enable_guard_collectives (or
// KILN_COMPILER_COLLECTIVES=1 / KILN_GUARD_COLLECTIVES=1) so every rank
// compiles the same graphs with the same guards at the same calls.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <optional>
#include <string>
#include <vector>

#include "collectives/distributed.h"
#include "collectives/errors.h"
#include "collectives/process_group.h"
#include "interpreter/assembler.h"
#include "interpreter/code_builder.h"
#include "interpreter/program.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/value.h"

namespace kiln {
namespace output_graph {
class Graph;
}


using runtime::Tensor;
using runtime::Value;
using interpreter::assemble;
using interpreter::assemble_file;
using interpreter::Program;

namespace options_env {
// Options' defaults from the environment. A flag is "1" (on), "0" or unset
// (off); anything else, like a timeout that is not a positive number of
// seconds, is a ValueError rather than silently the default.
bool flag(const char* name);
bool flag_or(const char* name, bool unset);  // the same, with a default for an unset or empty variable
double collective_timeout_s();  // KILN_COLLECTIVE_TIMEOUT_S, default 60
}  // namespace options_env

namespace distributed {
// Starts the multi-rank mode and returns the world group: under mpirun it
// initialises MPI (or adopts an MPI the program already initialised);
// otherwise the single-rank group, without any MPI call. Idempotent. Call it
// before making Options, whose compile_group defaults to this group.
std::shared_ptr<collectives::ProcessGroup> init();
// This process's rank in the world group and the number of ranks (0 and 1
// without mpirun); call init() first.
int rank();
int world_size();
}  // namespace distributed

struct Options {
  // "llvm" (fused native kernels; registered by linking kiln_core), "eager"
  // (the reference: the registry's kernels node by node), or a registered name.
  std::string backend = "llvm";
  bool fullgraph = false;            // the first graph break is an error instead
  // unset: automatic (a dimension whose size change forces a recompile
  // becomes dynamic); true: every dimension dynamic from the first trace;
  // false: never. A trace that reads a shape into Python (x.shape, size(),
  // len(), iteration) specializes all dimensions again: kiln has no
  // symbolic sizes yet, so that is the only sound choice.
  std::optional<bool> dynamic;
  int cache_size_limit = 8;          // compiled entries per code object before falling back to the VM
  // The frames are a Python program's (python/'s frame hook): CPython, not
  // the VM, runs everything outside the graphs. A break's residual ends
  // after the side effects (interpreter::Continuation) and the embedder
  // continues the frame in its original bytecode; a frame kiln cannot
  // trace is left to the embedder unchanged (lookup_or_compile's null).
  bool python_frames = false;
  // python_frames: the program's random ops draw from the host's generator
  // (torch's: its seed, its saved and restored states), so CPython runs
  // them (a break). False for a frame over kiln's own tensors and modules
  // alone, whose random ops draw from kiln's generator in eager code too:
  // they stay in the graph.
  bool random_is_hosts = true;
  // Where print() in the compiled function writes (stdout when empty).
  std::function<void(std::string_view)> stdout_sink;

  // Multi-rank compiles. Both collectives need every rank of compile_group
  // to run the same compiled functions in the same order (the usual SPMD
  // program); a rank that does not arrive makes the others raise
  // collectives::CollectiveTimeout after collective_timeout_s, and ranks in
  // different compiles raise collectives::CollectiveMismatch, never a hang.
  // With one rank in the group neither does anything.
  //
  // The compiler collective: after the first analysis of a frame, ranks
  // all-gather the sizes they saw per input; a dimension that differs on
  // any rank becomes dynamic on all, so all compile the same graph and
  // guards.
  bool enable_compiler_collectives = options_env::flag("KILN_COMPILER_COLLECTIVES");
  // Guard collectives: at each cached call the ranks agree whether any
  // missed; if one did, all recompile together (needed whenever a rank can
  // miss alone, or its compiler collective would wait for the others).
  bool enable_guard_collectives = options_env::flag("KILN_GUARD_COLLECTIVES");
  double collective_timeout_s = options_env::collective_timeout_s();
  // Shared compile work (with the compiler collective on, the llvm backend
  // and two or more ranks): the kernels of each graph are split across the
  // ranks, each compiles its share, and the object code is all-gathered
  // (verified before it is linked), so every rank has every kernel and the
  // disk cache gets one entry. KILN_SHARE_COMPILE_WORK=0 turns it off.
  bool share_compile_work = options_env::flag_or("KILN_SHARE_COMPILE_WORK", true);
  // The ranks that compile together: the world after distributed::init(),
  // else the single-rank group. Null: no collectives.
  std::shared_ptr<collectives::ProcessGroup> compile_group = collectives::default_group();
};

struct GraphBreak {
  std::string id;        // the reason's id in interpreter/graph_breaks.def
  std::string reason;    // plain words: "call to print() (a side effect the graph cannot hold)"
  std::string function;  // qualname of the frame that broke
  std::string file;
  int line = 0;          // the user's source line
  std::string hint;      // what to change to avoid it
};

struct ExplainReport {
  int graph_count = 0;
  int graph_break_count = 0;
  std::vector<GraphBreak> breaks;
  std::vector<int> ops_per_graph;
  // Per graph: why it runs through the embedder's autograd (its own ops,
  // so gradients flow: "parameter fc.weight requires grad"), or "" when it
  // runs on kiln's kernels (output_graph::Graph::autograd).
  std::vector<std::string> autograd_per_graph;
  std::vector<std::string> graphs;           // each graph's code view
  std::vector<std::shared_ptr<output_graph::Graph>> graph_objects;  // the graphs themselves, in the same order
  std::vector<std::string> guards;           // each cache entry's guards, one string per entry
  std::vector<std::string> recompile_reasons;
  // Time in the compiler collective's exchanges (waiting for the slowest
  // rank included), how many ran and how many made the analysis restart;
  // and the guard collectives at cache lookups. All zero on a single rank.
  double collective_ms = 0;
  int collective_count = 0;
  int collective_restarts = 0;
  double guard_collective_ms = 0;
  int guard_collective_count = 0;
  Value result;        // what the call returned (None if it raised)
  std::string error;   // the error the call raised (with its traceback), or empty
  std::string str() const;
};

class CompiledFunction {
 public:
  Value operator()(const std::vector<Value>& args) const;
  Value call(const runtime::CallArgs& args) const;
  // The Value form (a Builtin wrapping this), usable wherever a callable is.
  Value as_value() const;

  struct State;
  explicit CompiledFunction(std::shared_ptr<State> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<State> state_;
};

CompiledFunction compile(const Value& fn, Options options = {});
// Compiles `fn` afresh, calls it once with `args`, and reports. An error
// raised by the call is reported (ExplainReport::error), not thrown.
ExplainReport explain(const Value& fn, const std::vector<Value>& args, Options options = {});
// Drops every compiled entry and cached resume function.
void reset();
// Asks the tracer to treat dimension `dim` of `tensor` as dynamic from the
// first trace (a compiled entry then accepts any size there).
void mark_dynamic(const Value& tensor, int64_t dim);
// How many compiled entries (traces) the cache holds for fn's code.
size_t cache_entries(const Value& fn);

}  // namespace kiln

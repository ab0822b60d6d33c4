// The compiler collective (Dynamo's run_compiler_collective): when ranks of
// one program trace the same frame with different input sizes, each would
// specialise on its own sizes and compile different graphs with different
// guards, and a later collective of their own program would deadlock when
// one rank recompiles and another does not. So after the first analysis of
// a frame, the ranks of the compile group all-gather the sizes each saw per
// graph input source; every rank merges them in rank order, making dynamic
// each dimension that differs on any rank (or that any rank already treats
// as dynamic), and the analysis restarts with those dimensions. Every rank
// then holds the same graph and the same guards.
//
// The exchange happens once per compile, whatever the trace produced: a
// frame with no graph, or one that runs on the VM, still takes part, or
// the ranks that did compile a graph would wait for it forever.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/messages.h"
#include "collectives/process_group.h"
#include "output_graph/guards.h"

namespace kiln::output_graph {

// Per source path, the dimensions that are dynamic: the form of the cache's
// automatic dynamic dims and of VariableBuilder::dynamic_dims.
using DynamicDims = std::map<std::string, std::vector<bool>>;

// One compile's part in the collective. `all_states` empty: the exchange has
// not run yet (the first analysis); set: every rank's state, in rank order.
struct DistributedState {
  std::shared_ptr<collectives::ProcessGroup> group;
  // Frame id and compile sequence number. The graph hash stays zero: the
  // first analysis's graph is exactly what is allowed to differ per rank.
  collectives::CollectiveHeader header;
  double timeout_s = 60.0;
  std::optional<std::vector<collectives::CompilerLocalState>> all_states;
  double exchange_ms = 0;  // wall time of the all-gather (waiting for the slowest rank included)

  // Shared compile work (output_graph/shared_compile.h): set by the caller
  // when this compile may split its kernels across the group. Then exactly
  // one KernelPlan exchange runs per compile, from the backend or, when the
  // backend never asked (no graph, no kernels, another backend), from
  // finish_shared_compile().
  bool share_compile = false;
  bool kernel_plan_done = false;
  bool kernels_shared = false;       // the plan said: split the kernels
  double kernel_exchange_ms = 0;     // both exchanges, waiting included
  size_t kernel_bytes_sent = 0, kernel_bytes_received = 0;  // object code, this rank's share / all ranks'
};

// What this rank saw: every tensor the trace wrapped (one TensorMatch guard
// each, in the order they were wrapped) with its sizes; a dimension the
// trace already made dynamic is sent as -1.
collectives::CompilerLocalState compiler_local_state(const GuardSet& guards, const std::string& frame_id);

// All-gathers compiler_local_state(guards) over ds.group and stores every
// rank's state in ds.all_states. Raises CollectiveMismatch / CollectiveTimeout
// (on every rank that arrived) when the ranks are not in the same compile.
void run_compiler_collective(const GuardSet& guards, DistributedState& ds);

// Every rank's states merged in rank order: for each source, the dimensions
// where a rank sent -1 or a size other than the first rank's that saw it.
// A source whose rank (number of dims) differs between ranks cannot be made
// to agree by dynamic dims; it is left to its guards (logged). Every rank
// computes this from the same gathered states, so every rank gets the same.
DynamicDims merge_compiler_states(const std::vector<collectives::CompilerLocalState>& states);

// Whether `merged` makes dynamic a dimension the traced `guards` held
// static: only then does a restarted analysis trace anything different.
bool compiler_collective_changes_trace(const GuardSet& guards, const DynamicDims& merged);

}  // namespace kiln::output_graph

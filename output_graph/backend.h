// Backends: name -> (Graph, example inputs) -> compiled callable. `eager`
// (the reference: runs each node with the registry's eager kernels) is
// always registered; codegen registers `llvm` from its own folder; a user
// passes any callable of this shape.
#pragma once

#include <cstdint>
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

// Shared compile work (issue 7): while a backend compiles a graph for a
// multi-rank compile group (compiler collectives on, two or more ranks),
// this is its channel to the other ranks. It is plain data and functions, so
// a backend (codegen/) uses it without seeing collectives/; output_graph's
// shared_compile.cpp implements it with the KernelPlan / KernelBlob
// messages. Every rank compiles the same graphs when the compiler collective
// did its job, but nothing here relies on it: ranks whose programs differ
// simply compile alone.
struct KernelPart {
  uint32_t begin = 0, end = 0;  // kernels [begin, end) of the program
  std::string object;           // their object code (empty when the range is)
};
struct SharedCompile {
  int rank = 0, size = 1;
  // Step 1, at most once per compile, on every rank: the program this rank
  // is about to compile (a 128-bit content key that also names the target
  // CPU, and its number of kernels) and whether it already has their code.
  // When every rank named the same program and some rank lacks it: the
  // lowest such rank (the one that writes the result to its disk cache),
  // and every rank calls exchange() once, next. -1: each rank goes on alone
  // (all have it, or the ranks' programs differ).
  std::function<int(uint64_t key_hi, uint64_t key_lo, uint32_t kernels, bool have)> agree;
  // Step 2: this rank's share out, every rank's share back in rank order,
  // each one's checksum and program key verified first (a ValueError naming
  // the rank otherwise: its code is never linked).
  std::function<std::vector<KernelPart>(const KernelPart& mine)> exchange;
};
// The shared compile of the backend call running on this thread; null when
// there is none (one rank, collectives off, or outside a compile).
SharedCompile* current_shared_compile();
// Installs `sc` as current_shared_compile() for this thread while alive.
class SharedCompileScope {
 public:
  explicit SharedCompileScope(SharedCompile* sc);
  ~SharedCompileScope();
  SharedCompileScope(const SharedCompileScope&) = delete;
  SharedCompileScope& operator=(const SharedCompileScope&) = delete;

 private:
  SharedCompile* prev_;
};

// The backend a graph with Graph::autograd set compiles with, whatever
// backend was asked for: the embedder's (python/: torch's own ops, so its
// autograd records them). `autograd_lowers(op)`: whether it can run `op`
// on tensors that require grad (the tracer breaks before any other op).
constexpr const char* kAutogradBackend = "autograd";
void set_autograd_lowerings(std::vector<bool> lowered);  // indexed by OpId
bool autograd_lowers(runtime::OpId op);

// A node argument's value for one call: `env` holds each node's value by
// its index, `syms` the graph's symbols' values (Graph::symbol_values);
// a list becomes a tuple. Shared by the backends that walk a graph.
Value eval_arg(const Arg& a, const std::vector<Value>& env, const std::vector<int64_t>& syms);

// The reference backend, also callable directly.
CompiledGraph eager_backend(std::shared_ptr<const Graph> graph, const std::vector<Value>& example_inputs);

}  // namespace kiln::output_graph

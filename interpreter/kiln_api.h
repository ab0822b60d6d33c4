// kiln's C++ embedding API (public through include/kiln/kiln.h): assemble or build KBC, compile a function, call
// it with Values, explain what the tracer did.
//
//   auto program = kiln::assemble(text, "model.kbc");
//   kiln::CompiledFunction f = kiln::compile(program.global("forward"));
//   kiln::Value y = f({x});
//   std::cout << kiln::explain(program.global("forward"), {x}).str();
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <optional>
#include <string>
#include <vector>

#include "interpreter/assembler.h"
#include "interpreter/code_builder.h"
#include "interpreter/program.h"
#include "runtime/value.h"
#include "runtime/value_ops.h"

namespace kiln {

using runtime::Tensor;
using runtime::Value;
using interpreter::assemble;
using interpreter::assemble_file;
using interpreter::Program;

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
  // Where print() in the compiled function writes (stdout when empty).
  std::function<void(std::string_view)> stdout_sink;
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
  std::vector<std::string> graphs;           // each graph's code view
  std::vector<std::string> guards;           // each cache entry's guards, one string per entry
  std::vector<std::string> recompile_reasons;
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

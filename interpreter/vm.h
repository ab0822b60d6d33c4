// The KBC virtual machine: the reference semantics of everything kiln does.
// Compiled code must agree with it; every differential test compares
// against it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "interpreter/program.h"
#include "interpreter/stack_effects.h"
#include "runtime/value/code.h"
#include "runtime/value/value.h"

namespace spdlog { class logger; }

namespace kiln::interpreter {

using runtime::CallArgs;
using runtime::Value;

struct VMOptions {
  int recursion_limit = 1000;
  // Where print() writes; stdout when empty.
  std::function<void(std::string_view)> stdout_sink;
  // Count executed instructions (for the dispatch benchmark); off by
  // default, and then the counting code is not in the loop at all.
  bool count_instructions = false;
  // Check each instruction's stack effect against runtime/value/opcodes.def
  // (interpreter/stack_effects.h): off unless the process turned the
  // checks on (KILN_CHECK_STACK_EFFECTS=1, or a test). Like counting, it
  // runs a loop of its own (vm_checked.cpp); the default loop has no check.
  bool check_stack_effects = stack_effects::enabled();
};

class VM final : public runtime::CallContext {
 public:
  explicit VM(VMOptions options = {});
  ~VM() override;
  VM(const VM&) = delete;
  VM& operator=(const VM&) = delete;

  // Calls any callable Value (function, bound method, builtin, class,
  // module, foreign) with Python's semantics.
  Value call(const Value& callee, const CallArgs& args) override;
  using runtime::CallContext::call;
  void write_stdout(std::string_view text) override;
  // super() with no arguments, called from the innermost running frame.
  void zero_arg_super(Value& type, Value& obj) override;

  // Calls the global `entry` of `program` with positional `args`.
  Value run(const Program& program, std::string_view entry, const std::vector<Value>& args = {});

  uint64_t instructions_executed() const { return executed_; }
  int depth() const { return depth_; }
  int64_t recursion_headroom() const override { return int64_t(options_.recursion_limit) - depth_; }

 private:
  Value call_function(runtime::FunctionObj* fn, const CallArgs& args);
  // The instantiations of the loop, chosen once per VM from its options:
  // Plain (every VM's unless they ask for more) has the code of neither
  // counting nor checking; Checked is compiled in vm_checked.cpp.
  // On a cache line: the loop's speed depends on where its handlers fall
  // in lines (the same machine code 16 bytes off one took 20% longer per
  // instruction on benchmarks/programs/dispatch.kbc), which code linked
  // before it must not decide.
  enum class Loop : uint8_t { Plain, Counting, Checked };
  template <Loop kLoop>
  [[gnu::aligned(64)]] Value execute(runtime::FunctionObj* fn, Value* locals, Value* stack,
                                     runtime::Ref<runtime::CellObj>* cells);

  struct Arena;  // frame slots (locals + value stack), LIFO, chunked
  // The KBC frames running, innermost first: what a builtin that reads its
  // caller's frame (zero-argument super()) sees.
  struct ActiveFrame {
    const runtime::FunctionObj* fn;
    const Value* locals;
    runtime::Ref<runtime::CellObj>* cells;
    const ActiveFrame* caller;
  };
  const ActiveFrame* frame_ = nullptr;
  std::unique_ptr<Arena> arena_;
  VMOptions options_;
  Loop loop_;  // from options_, once
  int depth_ = 0;
  // The exception being handled (CPython's exc_info): what PUSH_EXC_INFO
  // saves and replaces, POP_EXCEPT restores and a bare `raise` re-raises.
  // None outside any handler.
  runtime::Value handled_;
  uint64_t executed_ = 0;
  spdlog::logger* log_ = nullptr;
};

// Binds call arguments to a function's parameters with Python's rules
// (positional, keywords, defaults, *args, **kwargs), writing the first
// code->nparams() locals. Errors name the callee.
void bind_arguments(const runtime::FunctionObj* fn, const CallArgs& args, Value* locals);

}  // namespace kiln::interpreter

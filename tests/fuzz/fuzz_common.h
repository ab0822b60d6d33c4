// What the KBC fuzz targets share: turning an input into a program, running
// it on the VM under a budget (runtime/budget.h), and the outcome every run
// is compared by.
//
// An input is KBC text. A program with `inputs()` and `f(...)` (the tracer
// corpus's convention) runs f(*inputs()); one with a parameterless `main()`
// runs main(). inputs() runs again before every run of f, with the random
// seed reset, so each run starts from equal arguments.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "interpreter/assembler.h"
#include "interpreter/kiln_api.h"
#include "interpreter/vm.h"
#include "runtime/budget.h"
#include "runtime/error.h"
#include "runtime/ops.h"
#include "runtime/value_ops.h"

namespace kiln_fuzz {

using kiln::Program;
using kiln::runtime::Value;

// The budget of one VM run: enough for every corpus program, small enough
// that libFuzzer keeps thousands of runs a second on small inputs.
inline constexpr uint64_t kVmSteps = 20000;
inline constexpr size_t kMaxAllocBytes = size_t(64) << 20;

// A crash with a message: libFuzzer saves the input (abort is a crash).
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "\n*** kiln fuzz invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline std::optional<Program> assemble_input(const uint8_t* data, size_t size) {
  try {
    return kiln::assemble(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.kbc");
  } catch (const kiln::Error& e) {
    // The text's own fault: a SyntaxError or VerifyError, nothing else.
    if (e.kind() != kiln::ErrorKind::SyntaxError && e.kind() != kiln::ErrorKind::VerifyError)
      fail(std::string("assemble raised ") + e.what());
    return std::nullopt;
  }
}

struct Entry {
  Value fn;
  Value inputs;  // null: main() takes no arguments
};

inline std::optional<Entry> entry_of(const Program& p) {
  Value f = p.global("f"), inputs = p.global("inputs"), main = p.global("main");
  auto is_fn = [](const Value& v) { return !v.is_null() && v.is(kiln::runtime::Kind::Function); };
  if (is_fn(f) && is_fn(inputs)) return Entry{f, inputs};
  if (is_fn(main)) return Entry{main, Value::null()};
  return std::nullopt;
}

// What a run shows: its result or error, what it printed, and its arguments
// afterwards (a mutation the compiled code lost shows there).
struct Outcome {
  std::string result, error, out, args;
  bool exhausted = false;  // the budget ran out: nothing to compare
};

inline std::string describe(const Outcome& o) {
  return "result=" + o.result + " error=" + o.error + " stdout=" + o.out + " args=" + o.args;
}

// Runs `call(args)` after making the arguments; everything under one budget.
template <class Call>
Outcome run_entry(kiln::interpreter::VM& vm, const Entry& e, uint64_t steps, Call&& call,
                  uint64_t* used = nullptr) {
  Outcome o;
  kiln::runtime::ScopedBudget budget(steps, kMaxAllocBytes);
  try {
    kiln::runtime::manual_seed(0);
    std::vector<Value> args;
    if (!e.inputs.is_null()) {
      try {
        args = kiln::runtime::to_vector(vm.call(e.inputs, kiln::runtime::CallArgs{nullptr, 0, nullptr}));
      } catch (const kiln::Error&) {
        o.exhausted = true;  // no arguments to run with: nothing to compare
        return o;
      }
    }
    try {
      o.result = kiln::runtime::repr(call(args));
    } catch (const kiln::Error& err) {
      o.error = err.what();
    }
    Value tuple = kiln::runtime::make_tuple(args);
    o.args = kiln::runtime::repr(tuple);
  } catch (const kiln::runtime::BudgetExceeded&) {
    o.exhausted = true;
  }
  if (used) *used = budget.steps_used();
  return o;
}

}  // namespace kiln_fuzz

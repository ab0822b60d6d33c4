// What the KBC fuzz targets share: turning an input into a program, running
// it on the VM under a budget (runtime/base/budget.h), and the outcome every run
// is compared by.
//
// An input is KBC text. A program with `inputs()` and `f(...)` (the tracer
// corpus's convention) runs f(*inputs()); one with a parameterless `main()`
// runs main(). inputs() runs again before every run of f, with the random
// seed reset, so each run starts from equal arguments.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <regex>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "interpreter/assembler.h"
#include "interpreter/kiln_api.h"
#include "interpreter/vm.h"
#include "runtime/base/budget.h"
#include "runtime/base/error.h"
#include "runtime/semantics/census.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

namespace kiln_fuzz {

using kiln::Program;
using kiln::runtime::Value;

// The budget of one VM run: enough for every corpus program, small enough
// that libFuzzer keeps thousands of runs a second on small inputs. The
// byte bound also bounds the work one step can do: a str doubled by repr
// in a loop (tests/corpus/fuzz/repr_doubling_slow.kbc) does work linear
// in its size per step, and at 64 MiB the four runs of one input (VM and
// compiled, twice) took 35 s under the sanitizers, past libFuzzer's
// timeout on a busy machine; at 8 MiB they take a few seconds.
inline constexpr uint64_t kVmSteps = 20000;
inline constexpr size_t kMaxAllocBytes = size_t(8) << 20;
// What one run may allocate in all (runtime/base/budget.h): a loop keeping every
// version of a growing str alive held 3 GB within the step budget
// (tests/corpus/fuzz/str_chain_total_memory.kbc, finding 33).
inline constexpr size_t kMaxTotalBytes = size_t(256) << 20;

// A crash with a message: libFuzzer saves the input (abort is a crash).
// KILN_FUZZ_KEEP_GOING (tests/fuzz/coverage.sh, replaying a corpus for its
// coverage) reports and goes on instead.
inline void fail(const std::string& what) {
  std::fprintf(stderr, "\n*** kiln fuzz invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  static const bool keep_going = std::getenv("KILN_FUZZ_KEEP_GOING") != nullptr;
  if (!keep_going) std::abort();
}

// The leak check of the targets that run programs (runtime/semantics/census.h): the
// objects made since `since` must be freed, or alive only in garbage cycles
// of the program's own, once the caller has dropped every reference it held
// (program, VM, compiled function, results) and kiln::reset() has dropped
// the compile caches. A run before the mark (the first of the two every
// target makes) has built what kiln builds lazily and keeps (method tables).
// The cycles are freed now and then (census::collect clears them), so a
// long run does not grow.
inline void check_leaks(uint64_t since, const std::string& what) {
  namespace census = kiln::runtime::census;
  kiln::reset();
  const census::Report r = census::check(since);
  if (!r.ok()) fail(what + " leaked:\n" + r.text());
  static size_t after_collect = 0;
  if (census::live() > after_collect + 5000) {
    census::collect();
    after_collect = census::live();
  }
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
  std::string traceback;   // the error's, for the report only: frames differ by design
  bool exhausted = false;  // the budget ran out: nothing to compare
};

// A set's items in a canonical order. The order of a set of objects hashed
// by identity (tensors, iterators) depends on their addresses, in CPython as
// in kiln: two runs, or the VM's run and the compiled one, make other
// objects and may print them in another order. Sets compare unordered.
inline std::string unordered_sets(const std::string& s) {
  std::string out;
  size_t i = 0;
  std::function<std::string(size_t&, char)> group = [&](size_t& k, char close) {
    // s[k] is just after an opener; returns the group's text up to and
    // including `close`, its own set items sorted when it is a set.
    std::vector<std::string> items(1);
    bool dict = false;
    char quote = 0;
    for (; k < s.size(); ++k) {
      const char c = s[k];
      if (quote) {
        items.back() += c;
        if (c == '\\' && k + 1 < s.size()) items.back() += s[++k];
        else if (c == quote) quote = 0;
        continue;
      }
      if (c == '\'' || c == '"') {
        quote = c;
        items.back() += c;
      } else if (c == '{' || c == '[' || c == '(') {
        ++k;
        items.back() += c + group(k, c == '{' ? '}' : c == '[' ? ']' : ')');
      } else if (c == close) {
        break;
      } else if (c == ',' && close == '}') {
        items.emplace_back();
        if (k + 1 < s.size() && s[k + 1] == ' ') ++k;
      } else {
        if (c == ':' && close == '}') dict = true;
        items.back() += c;
      }
    }
    if (close == '}' && !dict) std::sort(items.begin(), items.end());
    std::string text;
    for (size_t j = 0; j < items.size(); ++j) text += (j ? (close == '}' ? ", " : "") : "") + items[j];
    return text + (k < s.size() ? std::string(1, close) : std::string());
  };
  for (; i < s.size(); ++i) {
    if (s[i] == '{') {
      size_t k = i + 1;
      out += '{' + group(k, '}');
      i = k;
    } else {
      out += s[i];
    }
  }
  return out;
}

// What a repr may show that differs between runs by design: a hook
// handle's id (a process-wide counter) and object addresses.
inline std::string without_ids(const std::string& s) {
  static const std::regex ids(R"(id=\d+|0x[0-9a-fA-F]+)");
  return std::regex_replace(s, ids, "#");
}

inline std::string describe(const Outcome& o) {
  return without_ids(unordered_sets("result=" + o.result + " error=" + o.error + " stdout=" + o.out + " args=" + o.args));
}

// Runs `call(args)` after making the arguments; everything under one budget.
template <class Call>
Outcome run_entry(kiln::interpreter::VM& vm, const Entry& e, uint64_t steps, Call&& call,
                  uint64_t* used = nullptr) {
  Outcome o;
  kiln::runtime::ScopedBudget budget(steps, kMaxAllocBytes, kMaxTotalBytes);
  try {
    kiln::runtime::manual_seed(0);
    std::vector<Value> args;
    if (!e.inputs.is_null()) {
      try {
        Value in = vm.call(e.inputs, kiln::runtime::CallArgs{nullptr, 0, nullptr});
        // Arguments in an order of their own: a set's follows its items'
        // addresses (tensors hash by identity), so two runs would not get
        // equal arguments.
        if (!in.is(kiln::runtime::Kind::Tuple) && !in.is(kiln::runtime::Kind::List)) {
          o.exhausted = true;
          return o;
        }
        args = kiln::runtime::to_vector(in);
      } catch (const kiln::Error&) {
        o.exhausted = true;  // no arguments to run with: nothing to compare
        return o;
      }
    }
    try {
      o.result = kiln::runtime::repr(call(args));
    } catch (const kiln::Error& err) {
      o.error = err.what();
      o.traceback = err.full();
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

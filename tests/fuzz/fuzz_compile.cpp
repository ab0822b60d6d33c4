// The translator and a backend (KILN_FUZZ_BACKEND: "eager" or "llvm") on
// verified programs, against the VM.
//
// Invariant (issue 15): for a program the VM runs within its budget, the
// compiled function, on its first (traced) and second (cached) call, gives
// the VM's result, or the VM's exact error (type and message), prints what
// the VM prints and leaves the arguments as the VM leaves them. A graph
// break is fine (the VM runs the rest); a crash, a sanitizer report, a run
// far past the VM's budget or a different outcome is not. Results compare
// bit for bit on the eager backend (the VM's own kernels), and number by
// number within float32 tolerance on llvm.
#include <cmath>
#include <regex>

#include "fuzz_common.h"
#include "kbc_mutator.h"

#ifndef KILN_FUZZ_BACKEND
#error "KILN_FUZZ_BACKEND must name the backend"
#endif

namespace {

bool close(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  if (std::isinf(x) || std::isinf(y)) return x == y;
  return std::abs(x - y) <= 1e-4 + 1e-3 * std::abs(y);  // printed with 4 digits
}

// Equal, or on llvm equal apart from numbers that are close.
bool texts_close(const std::string& a, const std::string& b) {
  if (a == b) return true;
  if (std::string_view(KILN_FUZZ_BACKEND) != "llvm") return false;
  static const std::regex number(R"([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|nan|inf)");
  auto split = [](const std::string& s, std::vector<std::string>& words, std::vector<double>& nums) {
    size_t last = 0;
    for (auto it = std::sregex_iterator(s.begin(), s.end(), number); it != std::sregex_iterator(); ++it) {
      words.push_back(s.substr(last, size_t(it->position()) - last));
      nums.push_back(std::strtod(it->str().c_str(), nullptr));
      last = size_t(it->position() + it->length());
    }
    words.push_back(s.substr(last));
  };
  std::vector<std::string> wa, wb;
  std::vector<double> na, nb;
  split(a, wa, na);
  split(b, wb, nb);
  if (wa != wb || na.size() != nb.size()) return false;
  for (size_t i = 0; i < na.size(); ++i)
    if (!close(na[i], nb[i])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("KILN_CACHE_DIR", "off", 1);  // kernels in memory only: no disk state between inputs
  return 0;
}

// A program's runs change its own state (globals, class attributes): the VM
// and the compiled function each get their own instance of the program, and
// their first calls compare, then their second calls. Returns whether the
// compiled runs happened; `mark` is the census's mark before them.
static bool differential(const uint8_t* data, size_t size, uint64_t& mark) {
  std::optional<kiln::Program> p_vm = kiln_fuzz::assemble_input(data, size);
  if (!p_vm) return false;
  std::optional<kiln_fuzz::Entry> e_vm = kiln_fuzz::entry_of(*p_vm);
  if (!e_vm) return false;
  std::string out;
  kiln::interpreter::VMOptions vo;
  vo.stdout_sink = [&out](std::string_view s) {
    if (out.size() < (1u << 20)) out += s;
  };
  kiln::interpreter::VM vm(vo);
  kiln_fuzz::Outcome expected[2];
  uint64_t used[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    expected[k] = kiln_fuzz::run_entry(
        vm, *e_vm, kiln_fuzz::kVmSteps,
        [&](const std::vector<kiln::Value>& args) {
          return vm.call(e_vm->fn, kiln::runtime::CallArgs{args.data(), args.size(), nullptr});
        },
        &used[k]);
    expected[k].out = std::move(out);
    out.clear();
    if (expected[k].exhausted) return false;
  }

  // The VM's runs have built what kiln builds lazily: from here on, what is
  // made is the compiled program's and the compiler's (fuzz_vm checks the
  // VM's own runs).
  kiln::reset();
  mark = kiln::runtime::census::mark();
  std::optional<kiln::Program> p_c = kiln_fuzz::assemble_input(data, size);
  std::optional<kiln_fuzz::Entry> e_c = kiln_fuzz::entry_of(*p_c);
  kiln::Options options;
  options.backend = KILN_FUZZ_BACKEND;
  options.stdout_sink = vo.stdout_sink;
  kiln::CompiledFunction compiled = kiln::compile(e_c->fn, options);
  const char* which[2] = {"first (traced) call", "second (cached) call"};
  for (int k = 0; k < 2; ++k) {
    // Tracing walks the code like the VM does, once per attempt and per
    // resume function: a generous multiple of the VM's steps, never unbounded.
    const uint64_t steps = 50 * used[k] + 50000;
    kiln_fuzz::Outcome got = kiln_fuzz::run_entry(vm, *e_c, steps, [&](const std::vector<kiln::Value>& args) {
      return compiled(args);
    });
    got.out = std::move(out);
    out.clear();
    if (got.exhausted)
      kiln_fuzz::fail(std::string(which[k]) + " ran past " + std::to_string(steps) + " steps; the VM took " +
                      std::to_string(used[k]));
    // Sets compare unordered, hook-handle ids and addresses not at all.
    auto unordered_sets = [](const std::string& t) { return kiln_fuzz::without_ids(kiln_fuzz::unordered_sets(t)); };
    const kiln_fuzz::Outcome& want = expected[k];
    if (got.error != want.error || !texts_close(unordered_sets(got.result), unordered_sets(want.result)) ||
        !texts_close(unordered_sets(got.out), unordered_sets(want.out)) ||
        !texts_close(unordered_sets(got.args), unordered_sets(want.args)))
      kiln_fuzz::fail(std::string(which[k]) + " on " KILN_FUZZ_BACKEND " differs from the VM:\nVM:       " +
                      kiln_fuzz::describe(want) + "\ncompiled: " + kiln_fuzz::describe(got) +
                      "\nVM traceback:\n" + want.traceback + "\ncompiled traceback:\n" + got.traceback);
  }
  return true;
}

// After the differential runs, with everything they held dropped: the
// compiled runs must not leak (fuzz_common.h, check_leaks).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t mark = 0;
  if (differential(data, size, mark)) kiln_fuzz::check_leaks(mark, "the compiled runs on " KILN_FUZZ_BACKEND);
  return 0;
}

// An optional bound on the work and the memory a run of KBC may take, for
// running programs nobody vetted (the fuzz targets under tests/fuzz/).
//
// Off by default, and then it costs one load and branch at each backward
// jump, call and translator step. When on:
//   - steps: every VM call, backward jump and translator step spends one;
//     the run is stopped with BudgetExceeded when none are left. Straight
//     code between them is bounded by its length, so a program cannot run
//     unboundedly without spending steps (native loops inside one builtin
//     are bounded by the memory budget, or are the builtin's own defect).
//   - bytes: one allocation (a tensor's storage, a repeated sequence) larger
//     than this raises MemoryError, as Python does for what it cannot
//     allocate, instead of asking the allocator for it.
//   - total bytes: what the run's strs, tensors and repeated sequences
//     allocate, added up (freed or not); past it the run is stopped with
//     BudgetExceeded. Each step's allocation is bounded above, but a loop
//     that keeps every version of a growing str alive (through a chain of
//     tuples) holds the sum of them: quadratic in the steps, gigabytes at
//     the fuzz budget (fuzz finding: tests/fuzz/README.md, finding 33).
//
// BudgetExceeded is deliberately not a kiln::Error: no KBC exception handler
// (`except Exception`) can catch it and loop on, it unwinds to whoever set
// the budget. The budget is per thread; the flag that it is on is global so
// the check is one plain load in the VM's loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>

namespace kiln::runtime {

struct BudgetExceeded : std::exception {
  const char* what() const noexcept override { return "kiln: step budget exhausted"; }
};

namespace budget_detail {
extern bool g_on;  // any thread has a budget
[[noreturn]] void exhausted();
bool spend_slow();  // false when the calling thread's steps are used up
void charge_slow(size_t bytes);  // throws BudgetExceeded past the total
}  // namespace budget_detail

// Installs a budget on this thread for its lifetime (0 = no limit of that kind).
class ScopedBudget {
 public:
  ScopedBudget(uint64_t steps, size_t max_alloc_bytes, size_t max_total_bytes = 0);
  ~ScopedBudget();
  ScopedBudget(const ScopedBudget&) = delete;
  ScopedBudget& operator=(const ScopedBudget&) = delete;
  uint64_t steps_used() const;
};

// One step of work (see above). Throws BudgetExceeded when none are left.
inline void spend_step() {
  if (budget_detail::g_on) [[unlikely]]
    if (!budget_detail::spend_slow()) budget_detail::exhausted();
}

// An allocation of `bytes` for `what`: MemoryError past the byte budget;
// it counts toward the total.
void check_allocation(size_t bytes, const char* what);

// `bytes` more toward the total (a str made). Throws BudgetExceeded when
// the total is used up.
inline void charge_bytes(size_t bytes) {
  if (budget_detail::g_on) [[unlikely]]
    budget_detail::charge_slow(bytes);
}

}  // namespace kiln::runtime

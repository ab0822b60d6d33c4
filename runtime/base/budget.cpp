#include "runtime/base/budget.h"

#include <string>

#include "runtime/base/error.h"

namespace kiln::runtime {

namespace {
struct ThreadBudget {
  bool on = false;
  uint64_t steps_limit = 0, steps_used = 0;
  size_t max_alloc = 0;
  size_t total_limit = 0, total_used = 0;
};
thread_local ThreadBudget t_budget;
}  // namespace

namespace budget_detail {
bool g_on = false;
void exhausted() { throw BudgetExceeded(); }
bool spend_slow() {
  ThreadBudget& b = t_budget;
  if (!b.on || !b.steps_limit) return true;
  return ++b.steps_used <= b.steps_limit;
}
void charge_slow(size_t bytes) {
  ThreadBudget& b = t_budget;
  if (!b.on || !b.total_limit) return;
  b.total_used += bytes;
  if (b.total_used > b.total_limit) exhausted();
}
}  // namespace budget_detail

ScopedBudget::ScopedBudget(uint64_t steps, size_t max_alloc_bytes, size_t max_total_bytes) {
  t_budget = ThreadBudget{true, steps, 0, max_alloc_bytes, max_total_bytes, 0};
  budget_detail::g_on = true;
}
// The global flag stays on: another thread may still have a budget, and a
// stale flag only costs the slow path's thread-local test.
ScopedBudget::~ScopedBudget() { t_budget = ThreadBudget{}; }
uint64_t ScopedBudget::steps_used() const { return t_budget.steps_used; }

void check_allocation(size_t bytes, const char* what) {
  const ThreadBudget& b = t_budget;
  if (b.on && b.max_alloc && bytes > b.max_alloc)
    throw_error(ErrorKind::MemoryError, std::string(what) + " of " + std::to_string(bytes) +
                                            " bytes is over this run's memory budget of " + std::to_string(b.max_alloc));
  charge_bytes(bytes);
}

}  // namespace kiln::runtime

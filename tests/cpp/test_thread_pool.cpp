// runtime/base/thread_pool.h: the pool runs on as many threads as its source
// says at each parallel_for (issue 28: torch's count, followed when the
// user changes it), growing and shrinking between calls.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "runtime/base/thread_pool.h"

namespace {

using kiln::runtime::num_threads;
using kiln::runtime::parallel_for;
using kiln::runtime::set_thread_count_source;

std::atomic<int> wanted{1};
int source() { return wanted.load(); }

// The distinct threads that ran chunks of one parallel_for over 64 items.
// Each chunk waits (500 ms at most, in all) until `expect` threads have joined, so a pool
// of that many threads shows all of them even on a busy machine.
size_t threads_used(int expect) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> joined{0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  parallel_for(64, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (ids.insert(std::this_thread::get_id()).second) ++joined;
    }
    while (joined.load() < expect && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  });
  return ids.size();
}

}  // namespace

TEST_CASE("thread pool: the source sets the threads of each parallel_for") {
  if (std::getenv("KILN_NUM_THREADS")) SUCCEED("KILN_NUM_THREADS overrides the source: nothing to test");
  else {
    set_thread_count_source(&source);
    wanted = 1;
    CHECK(num_threads() == 1);
    CHECK(threads_used(1) == 1);
    wanted = 3;  // more than this machine may have: the pool grows anyway
    CHECK(num_threads() == 3);
    CHECK(threads_used(3) == 3);
    wanted = 2;  // shrinks: the third thread sleeps
    CHECK(num_threads() == 2);
    CHECK(threads_used(3) == 2);
    wanted = 1;
    CHECK(threads_used(2) == 1);
    wanted = 0;  // nonsense counts as one
    CHECK(num_threads() == 1);
    set_thread_count_source(nullptr);
    CHECK(num_threads() == int(std::max(1u, std::thread::hardware_concurrency())));
  }
}

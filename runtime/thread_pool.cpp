#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::runtime {
namespace {

thread_local bool in_pool_task = false;

// Workers poll briefly for the next job, then sleep on a condition
// variable. OpenBLAS runs single-threaded, its calls split over this pool
// (runtime/blas.cpp), so no other library's threads compete with a polling
// worker for the cores. A job is a range cut
// into chunks that workers and the caller claim with one atomic counter, so
// uneven chunks balance themselves. Each job is its own object: a worker
// that wakes late only ever claims from the job it picked up, never from
// the next one (whose chunks it would count wrong).
struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n, chunk;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> pending;
  Job(const std::function<void(int64_t, int64_t)>* f, int64_t n_, int64_t c)
      : fn(f), n(n_), chunk(c), pending((n_ + c - 1) / c) {}
};

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int threads() const { return int(workers_.size()) + 1; }

  void run(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard<std::mutex> one_job(job_mu_);  // other callers wait their turn
    auto job = std::make_shared<Job>(&fn, n, chunk);
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    claim(*job);
    // The workers' last chunks usually end within microseconds: wait for
    // them spinning first, sleeping only after that (a wake-up costs more).
    spin_until([&] { return job->pending.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return job->pending.load() == 0; });
    job_.reset();
  }

 private:
  void claim(Job& job) {
    in_pool_task = true;
    for (;;) {
      const int64_t b = job.next.fetch_add(job.chunk);
      if (b >= job.n) break;
      (*job.fn)(b, std::min(job.n, b + job.chunk));
      if (job.pending.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> l(mu_);
        done_cv_.notify_all();
      }
    }
    in_pool_task = false;
  }
  void work() {
    std::shared_ptr<Job> last;
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || (job_ && job_ != last); });
        seen = generation_.load();
        if (stop_) return;
        job = last = job_;
      }
      claim(*job);
    }
  }

  // Polls `done` for about kSpin before the caller falls back to sleeping.
  // A compiled graph starts its kernels (and BLAS calls, which run on this
  // pool too: runtime/blas.cpp) microseconds apart; a sleeping worker takes
  // ~6 us to wake on the machines kiln is measured on, longer than many
  // kernels, so workers poll for the next job this long before they sleep.
  template <class Done>
  static void spin_until(Done done) {
    constexpr auto kSpin = std::chrono::microseconds(50);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
      if (done()) return;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return;
    }
  }

  std::atomic<uint64_t> generation_{0};  // jobs started; workers poll it
  std::vector<std::thread> workers_;
  std::mutex mu_, job_mu_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
  std::shared_ptr<Job> job_;
};

}  // namespace

namespace {

int configured_threads() {
  if (const char* e = std::getenv("KILN_NUM_THREADS")) {
    const int v = std::atoi(e);
    if (v > 0) return v;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

Pool& pool() {
  static Pool* p = new Pool(configured_threads());  // never destroyed: kernels may run during exit
  return *p;
}

}  // namespace

int num_threads() { return pool().threads(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain || in_pool_task || num_threads() == 1) {
    fn(0, n);
    return;
  }
  // About four chunks per thread, never below the grain.
  const int64_t chunk = std::max(grain, (n + 4 * num_threads() - 1) / (4 * num_threads()));
  if (chunk >= n) {
    fn(0, n);
    return;
  }
  pool().run(n, chunk, fn);
}

}  // namespace kiln::runtime

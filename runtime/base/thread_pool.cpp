#include "runtime/base/thread_pool.h"

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
// (runtime/kernels/blas.cpp), so no other library's threads compete with a polling
// worker for the cores. A job is a range cut
// into chunks that workers and the caller claim with one atomic counter, so
// uneven chunks balance themselves. Each job is its own object: a worker
// that wakes late only ever claims from the job it picked up, never from
// the next one (whose chunks it would count wrong).
struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n, chunk;
  int workers;  // pool workers that take part: indices [0, workers)
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> pending;
  Job(const std::function<void(int64_t, int64_t)>* f, int64_t n_, int64_t c, int w)
      : fn(f), n(n_), chunk(c), workers(w), pending((n_ + c - 1) / c) {}
};

// Workers are started on demand, as the thread count grows (it follows
// torch's, which the user may raise later), and never stopped: when the
// count shrinks, a job names how many take part and the others sleep
// (they neither claim chunks nor poll: a polling worker on a core the
// user did not give kiln would slow whatever runs there).
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(int64_t n, int64_t chunk, int threads, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard<std::mutex> one_job(job_mu_);  // other callers wait their turn
    while (int(workers_.size()) < threads - 1) {
      const int index = int(workers_.size());
      workers_.emplace_back([this, index] { work(index); });
    }
    active_.store(threads - 1, std::memory_order_relaxed);
    auto job = std::make_shared<Job>(&fn, n, chunk, threads - 1);
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
  void work(int index) {
    std::shared_ptr<Job> last;
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      // Only a worker of the latest job polls for the next one.
      if (index < active_.load(std::memory_order_relaxed))
        spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || (job_ && job_ != last && index < job_->workers); });
        seen = generation_.load();
        if (stop_) return;
        job = last = job_;
      }
      claim(*job);
    }
  }

  // Polls `done` for about kSpin before the caller falls back to sleeping.
  // A compiled graph starts its kernels (and BLAS calls, which run on this
  // pool too: runtime/kernels/blas.cpp) microseconds apart; a sleeping worker takes
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
  std::atomic<int> active_{0};           // workers of the latest job
  std::vector<std::thread> workers_;     // grown under job_mu_
  std::mutex mu_, job_mu_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
  std::shared_ptr<Job> job_;
};

}  // namespace

namespace {

// More threads than this is a mistake in the source, not a machine.
constexpr int kMaxThreads = 1024;

// KILN_NUM_THREADS, 0 when unset or not a positive number.
int env_threads() {
  static const int v = [] {
    const char* e = std::getenv("KILN_NUM_THREADS");
    const int n = e ? std::atoi(e) : 0;
    return n > 0 ? std::min(n, kMaxThreads) : 0;
  }();
  return v;
}

std::atomic<ThreadCountSource> source{nullptr};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: kernels may run during exit
  return *p;
}

}  // namespace

void set_thread_count_source(ThreadCountSource s) { source.store(s, std::memory_order_release); }

// The source's last answer: what a pool worker sees (a kernel asking from
// inside a task, which runs inline anyway). Workers never call the source:
// torch's at::get_num_threads initializes per-thread state on a thread's
// first call, and kiln's workers are not torch's to initialize.
std::atomic<int> last_from_source{1};

int num_threads() {
  if (const int e = env_threads()) return e;
  if (const ThreadCountSource s = source.load(std::memory_order_acquire)) {
    if (in_pool_task) return last_from_source.load(std::memory_order_relaxed);
    const int n = std::clamp(s(), 1, kMaxThreads);
    last_from_source.store(n, std::memory_order_relaxed);
    return n;
  }
  static const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return cores;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  // in_pool_task first: a nested call runs inline without asking the source.
  if (n <= grain || in_pool_task) {
    fn(0, n);
    return;
  }
  const int threads = num_threads();
  if (threads == 1) {
    fn(0, n);
    return;
  }
  // About four chunks per thread, never below the grain.
  const int64_t chunk = std::max(grain, (n + 4 * threads - 1) / (4 * threads));
  if (chunk >= n) {
    fn(0, n);
    return;
  }
  pool().run(n, chunk, threads, fn);
}

}  // namespace kiln::runtime

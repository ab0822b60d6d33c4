// One pool of worker threads per process, as many as num_threads() asks for
// (the caller's thread works too): kernels split their outer loop over it. Not a
// pool per call: thread start-up would cost more than most kernels.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln::runtime {

// Runs fn(begin, end) over [0, n) in chunks of at least `grain`, on the pool
// and the calling thread; returns when every chunk is done. Runs inline when
// one chunk covers it or when called from inside a pool task (no nesting).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Threads that take part in the next parallel_for (workers + the caller):
// KILN_NUM_THREADS if set; else the thread-count source if one is set (the
// Python layer sets torch's, so kiln runs on the cores the user gave torch
// and follows later torch.set_num_threads calls); else every core. Read on
// every parallel_for, so a change applies to the next kernel: the pool
// starts workers as the count grows and leaves the extra ones asleep when
// it shrinks.
int num_threads();

// The source of the thread count when KILN_NUM_THREADS is unset: a plain
// function called on the thread that calls parallel_for (torch's
// at::get_num_threads is per thread too), so it must be cheap and safe to
// call from any thread. nullptr: every core again. Values < 1 count as 1.
using ThreadCountSource = int (*)();
void set_thread_count_source(ThreadCountSource source);

}  // namespace kiln::runtime

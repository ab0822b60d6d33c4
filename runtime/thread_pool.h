// One fixed pool of worker threads per process, sized to the cores (the
// caller's thread works too): kernels split their outer loop over it. Not a
// pool per call: thread start-up would cost more than most kernels.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln::runtime {

// Runs fn(begin, end) over [0, n) in chunks of at least `grain`, on the pool
// and the calling thread; returns when every chunk is done. Runs inline when
// one chunk covers it or when called from inside a pool task (no nesting).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Threads that take part (workers + the caller). KILN_NUM_THREADS overrides.
int num_threads();

}  // namespace kiln::runtime

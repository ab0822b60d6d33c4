#include "runtime/blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "runtime/error.h"

namespace kiln::runtime {
namespace {

// CBLAS's enums, as the C ABI defines them (cblas.h is not included so the
// library stays unlinked).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using DgemmFn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                         double*, int);

struct Blas {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  std::string info;
};

// The core type OpenBLAS should use on this CPU, from CPUID, or "" to let it
// decide. Only claims what the CPU certainly has.
std::string core_type_for_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

// How long (log2 of TSC cycles) OpenBLAS's worker threads keep polling for
// the next call before they sleep. Its default, 2^28 cycles (~0.1 s), keeps
// each worker runnable in a sched_yield loop long after a gemm returns, so
// kiln's own kernels, which run on every core between BLAS calls, share a
// core with it: the scheduler counts a yielding spinner as a task to share
// with, and in the MLP benchmark on 2 cores the calling thread did 10-20%
// of each kernel's chunks instead of half (kiln's pool worker did the rest
// alone). 2^14 cycles (a few microseconds) still covers back-to-back BLAS
// calls; a call that comes later wakes the workers (~10 us), which only a
// threaded gemm of a few tens of microseconds would notice. The user's own
// OPENBLAS_THREAD_TIMEOUT wins.
constexpr const char* kThreadTimeout = "14";

const Blas& blas() {
  static const Blas b = [] {
    Blas out;
    std::string timeout = std::string("workers sleep after 2^") + kThreadTimeout + " cycles, set by kiln";
    if (const char* t = std::getenv("OPENBLAS_THREAD_TIMEOUT")) timeout = std::string("OPENBLAS_THREAD_TIMEOUT=") + t;
    else setenv("OPENBLAS_THREAD_TIMEOUT", kThreadTimeout, 0);
    // One knob for kiln's threads: KILN_NUM_THREADS sizes kiln's kernel
    // pool (codegen/thread_pool.cpp) and, unless the user set OpenBLAS's own
    // variables, OpenBLAS's. Left alone, OpenBLAS starts a thread per core
    // whatever kiln was told: with KILN_NUM_THREADS=1 on a busy 2-core
    // machine a GPT forward took 13.7 ms instead of 0.5 (its threads
    // yielding to each other in every small gemm; benchmarks/generation.py).
    std::string threads = "threads: OpenBLAS's default";
    if (std::getenv("OPENBLAS_NUM_THREADS") || std::getenv("OMP_NUM_THREADS")) {
      threads = "threads: from OPENBLAS_NUM_THREADS/OMP_NUM_THREADS";
    } else if (const char* k = std::getenv("KILN_NUM_THREADS")) {
      setenv("OPENBLAS_NUM_THREADS", k, 0);
      threads = std::string("threads: ") + k + ", from KILN_NUM_THREADS";
    }
    std::string chosen = "detected by OpenBLAS";
    if (!std::getenv("OPENBLAS_CORETYPE")) {
      const std::string core = core_type_for_cpu();
      if (!core.empty()) {
        setenv("OPENBLAS_CORETYPE", core.c_str(), 0);
        chosen = core + " kernels, chosen by kiln from CPUID";
      }
    } else {
      chosen = std::string(std::getenv("OPENBLAS_CORETYPE")) + " kernels, from OPENBLAS_CORETYPE";
    }
    void* lib = nullptr;
    for (const char* name : {"libopenblas.so.0", "libopenblas.so", "libblas.so.3"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
        out.info = name;
        break;
      }
    if (!lib)
      throw_error(ErrorKind::RuntimeError,
                  "cannot load OpenBLAS (libopenblas.so.0, Debian's libopenblas0): " + std::string(dlerror()));
    out.sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
    out.dgemm = reinterpret_cast<DgemmFn>(dlsym(lib, "cblas_dgemm"));
    if (!out.sgemm || !out.dgemm) throw_error(ErrorKind::RuntimeError, out.info + " has no cblas_sgemm/cblas_dgemm");
    using CoreFn = char* (*)();
    if (auto core = reinterpret_cast<CoreFn>(dlsym(lib, "openblas_get_corename"))) chosen += std::string(": ") + core();
    out.info += " (" + chosen + "; " + timeout + "; " + threads + ")";
    return out;
  }();
  return b;
}

}  // namespace

void gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
              int64_t ldb, float* c, int64_t ldc) {
  blas().sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, int(m), int(n), int(k), 1.0f, a, int(lda),
               b, int(ldb), 0.0f, c, int(ldc));
}

void gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
              int64_t ldb, double* c, int64_t ldc) {
  blas().dgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, int(m), int(n), int(k), 1.0, a, int(lda),
               b, int(ldb), 0.0, c, int(ldc));
}

std::string blas_info() { return blas().info; }

}  // namespace kiln::runtime

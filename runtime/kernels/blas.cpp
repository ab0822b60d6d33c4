#include "runtime/kernels/blas.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/thread_pool.h"
#include "runtime/kernels/gemm_avx512.h"

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
  bool split = true;  // kiln splits calls over its pool (OpenBLAS single-threaded)
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

// OpenBLAS runs single-threaded and kiln splits each large call over its
// own pool (runtime/base/thread_pool.h). OpenBLAS's own workers, left on, poll
// for ~0.1 s after every call (sched_yield loops): on a 2-core machine they
// took the cores from kiln's kernels between BLAS calls, and once told to
// sleep sooner they took ~10-30 us to wake for each of a convolution's
// small GEMMs (a 32x512x288 GEMM inside a convolution: 80 us, against 47 us
// back to back). One pool for both means one set of threads, polling only
// while there is work. A user who sets OPENBLAS_NUM_THREADS or
// OMP_NUM_THREADS gets OpenBLAS's threads as they asked, and no split.
const Blas& blas() {
  static const Blas b = [] {
    Blas out;
    // One knob for kiln's threads: KILN_NUM_THREADS sizes kiln's pool, which
    // BLAS calls are split over.
    std::string threads = "single-threaded, calls split over kiln's pool";
    if (std::getenv("OPENBLAS_NUM_THREADS") || std::getenv("OMP_NUM_THREADS")) {
      threads = "threads: from OPENBLAS_NUM_THREADS/OMP_NUM_THREADS";
      out.split = false;
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
    // OpenBLAS starts its threads when it loads, from OPENBLAS_NUM_THREADS;
    // started and never used they poll with sched_yield for a while, which
    // on 2 cores slowed torch's own OpenMP threads 100x for seconds. So the
    // variable is 1 while kiln loads the library and restored right after
    // (a numpy loaded later reads it too). A library someone else already
    // loaded keeps its threads: kiln then does not split calls either.
    void* lib = nullptr;
    for (const char* name : {"libopenblas.so.0", "libopenblas.so", "libblas.so.3"}) {
      if (void* loaded = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) {
        lib = loaded;
        if (out.split) out.split = false, threads = "threads: the library's own (it was loaded before kiln)";
      } else if (out.split) {
        setenv("OPENBLAS_NUM_THREADS", "1", 1);  // unset before: out.split says so
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        unsetenv("OPENBLAS_NUM_THREADS");
      } else {
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      }
      if (lib) {
        out.info = name;
        break;
      }
    }
    if (!lib)
      throw_error(ErrorKind::RuntimeError,
                  "cannot load OpenBLAS (libopenblas.so.0, Debian's libopenblas0): " + std::string(dlerror()));
    out.sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
    out.dgemm = reinterpret_cast<DgemmFn>(dlsym(lib, "cblas_dgemm"));
    if (!out.sgemm || !out.dgemm) throw_error(ErrorKind::RuntimeError, out.info + " has no cblas_sgemm/cblas_dgemm");
    if (out.split) {
      using SetThreadsFn = void (*)(int);
      if (auto set = reinterpret_cast<SetThreadsFn>(dlsym(lib, "openblas_set_num_threads"))) set(1);
      else out.split = false, threads = "threads: the library's own (no openblas_set_num_threads)";
    }
    using CoreFn = char* (*)();
    if (auto core = reinterpret_cast<CoreFn>(dlsym(lib, "openblas_get_corename"))) chosen += std::string(": ") + core();
    out.info += " (" + chosen + "; " + threads + ")";
    return out;
  }();
  return b;
}

// Below this many multiply-adds one call on one thread is faster than
// splitting (OpenBLAS's own threshold is of the same order).
constexpr int64_t kSplitWork = int64_t(1) << 18;

// C = op(A) op(B) cut into at most one part per thread, along the longer
// of C's dimensions, in whole register tiles (`col_unit` columns or
// `row_unit` rows); `call` computes one part given its rows [i0, i1) and
// columns [j0, j1).
template <class Call>
void split_gemm(bool may_split, int64_t m, int64_t n, int64_t k, int64_t col_unit, int64_t row_unit, Call call) {
  const int threads = num_threads();
  if (!may_split || threads == 1 || m * n * k < kSplitWork) return call(0, m, 0, n);
  const bool by_cols = n >= m;
  const int64_t len = by_cols ? n : m, unit = by_cols ? col_unit : row_unit;
  const int64_t parts = std::min<int64_t>(threads, (len + unit - 1) / unit);
  const int64_t step = ((len + parts - 1) / parts + unit - 1) / unit * unit;
  parallel_for((len + step - 1) / step, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t b = p * step, e = std::min(len, b + step);
      if (by_cols) call(0, m, b, e);
      else call(b, e, 0, n);
    }
  });
}

template <class T, class Fn>
void gemm_split(Fn fn, T one, T zero, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                const T* b, int64_t ldb, T* c, int64_t ldc) {
  // Whole blocks of OpenBLAS's kernels: 16 columns, 8 rows.
  split_gemm(blas().split, m, n, k, 16, 8, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const T* ap = ta ? a + i0 : a + i0 * lda;  // rows of op(A)
    const T* bp = tb ? b + j0 * ldb : b + j0;  // columns of op(B)
    fn(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, int(i1 - i0), int(j1 - j0), int(k), one, ap,
       int(lda), bp, int(ldb), zero, c + i0 * ldc + j0, int(ldc));
  });
}

}  // namespace

// On CPUs that have AVX-512, unless KILN_GEMM=blas.
bool own_gemm_f32() {
  static const bool yes = [] {
    const char* e = std::getenv("KILN_GEMM");
    return has_avx512() && !(e && std::string(e) == "blas");
  }();
  return yes;
}

void gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
              int64_t ldb, float* c, int64_t ldc) {
  if (!own_gemm_f32() || ta) return gemm_split(blas().sgemm, 1.0f, 0.0f, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  if (tb && m <= kNtRowsLimit) {
    // Whole blocks of 4 rows of B per part.
    return split_gemm(true, m, n, k, 4, 4, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
      gemm_f32_avx512_nt(i1 - i0, j1 - j0, k, a + i0 * lda, lda, b + j0 * ldb, ldb, c + i0 * ldc + j0, ldc);
    });
  }
  // B^T (a Linear's weight): its panels gathered as the tiles need them.
  if (tb && ldb * 32 < int64_t(INT32_MAX)) {
    return split_gemm(true, m, n, k, 32, 8, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
      gemm_f32_avx512_t(i1 - i0, j1 - j0, k, a + i0 * lda, lda, b + j0 * ldb, ldb, c + i0 * ldc + j0, ldc);
    });
  }
  // A copy of B with a row stride off 4 KiB (B^T too, with a stride past
  // the gather's reach). The copy costs n*k against the product's m*n*k.
  thread_local std::vector<float> bt;
  if (tb || (ldb * 4) % 4096 == 0) {
    const int64_t ld = gemm_padded_ld(n);
    if (bt.size() < size_t(k * ld)) bt.resize(size_t(k * ld));
    float* d = bt.data();
    if (tb) {
      for (int64_t j0 = 0; j0 < n; j0 += 16)  // blocks of 16 rows of B^T: each read row stays in cache
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = j0; j < std::min(n, j0 + 16); ++j) d[p * ld + j] = b[j * ldb + p];
    } else {
      for (int64_t p = 0; p < k; ++p) std::copy(b + p * ldb, b + p * ldb + n, d + p * ld);
    }
    b = d;
    ldb = ld;
  }
  split_gemm(true, m, n, k, 32, 8, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    gemm_f32_avx512(i1 - i0, j1 - j0, k, a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc);
  });
}

void gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
              int64_t ldb, double* c, int64_t ldc) {
  gemm_split(blas().dgemm, 1.0, 0.0, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}

const char* gemm_impl(bool f64) { return !f64 && own_gemm_f32() ? "kiln AVX-512" : "OpenBLAS"; }

std::string blas_info() {
  return blas().info + (own_gemm_f32() ? "; float32 GEMMs: kiln's AVX-512 kernel" : "");
}

}  // namespace kiln::runtime

// The BLAS kiln calls (OpenBLAS), loaded on first use.
//
// Why not link it: OpenBLAS picks its kernels once, when it is loaded, from
// the CPU model it recognises, and it does not recognise every CPU that
// has AVX-512 (on the machines kiln is built on it falls back to its
// Prescott/SSE3 kernels, 4x slower). It honours OPENBLAS_CORETYPE, but only
// if that is set before it loads. So kiln loads it itself: when the user
// has not set OPENBLAS_CORETYPE, kiln sets it from the CPU's features
// (SkylakeX for AVX-512 F/BW/DQ/VL, Haswell for AVX2+FMA) and then dlopens
// the library. OpenBLAS then runs single-threaded and kiln splits large
// calls over its own thread pool (blas.cpp says why), unless the user set
// OPENBLAS_NUM_THREADS or OMP_NUM_THREADS. `blas_info()` says what was
// chosen.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::runtime {

// Row-major C = A(m x k, op a) * B(k x n, op b) with alpha 1 and beta 0;
// lda/ldb/ldc in elements.
void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* b, int64_t ldb, float* c, int64_t ldc);
void gemm_f64(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
              const double* b, int64_t ldb, double* c, int64_t ldc);

// "OpenBLAS 0.3.21 (SkylakeX kernels, chosen by kiln)" and the like.
std::string blas_info();

// Which code runs gemm_f32/gemm_f64 (without a transposed A): "kiln
// AVX-512" or "OpenBLAS". For program summaries.
const char* gemm_impl(bool f64);
// Whether float32 GEMMs run kiln's AVX-512 kernel (runtime/kernels/gemm_avx512.h).
bool own_gemm_f32();

}  // namespace kiln::runtime

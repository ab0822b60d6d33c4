// kiln's own float32 GEMM for AVX-512 CPUs, for the shapes convolutions
// make: C[m, n] = A[m, k] B[k, n], all row-major, m (output channels) and
// k (channels x taps) in the tens to a thousand, n (positions) anywhere.
//
// Why not BLAS: the OpenBLAS kiln loads may be told to use its AVX2
// kernels (OPENBLAS_CORETYPE, which machines set where older OpenBLAS
// builds miscompute with their AVX-512 kernels), and on a core with a full
// 512-bit datapath those run at half its peak: torch's oneDNN convolutions
// were ~1.8x kiln's im2col + OpenBLAS on a ResNet's 16-channel stages.
// Here one register tile of 8 rows x 32 columns (16 zmm accumulators)
// keeps both FMA pipes busy: per k two loads of B and 8 broadcasts of A.
#pragma once

#include <cstdint>

namespace kiln::runtime {

// True when this CPU runs gemm_f32_avx512 (AVX-512 F, checked once).
bool has_avx512();

// C = A * B (no alpha/beta: C is overwritten). Single-threaded; callers
// split the work (a convolution runs one per group of samples). B's row
// stride ldb should not be a multiple of 4 KiB (the 8 rows of a panel
// would fall in one cache set): conv pads it. Requires has_avx512().
void gemm_f32_avx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                     float* c, int64_t ldc);

// The same with row p of B at b + row_offset[p] (rows anywhere: a
// convolution's taps are shifted windows of one padded input, so its B
// needs no im2col copy). Each row must have n readable floats.
void gemm_f32_avx512_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                          const int64_t* row_offset, float* c, int64_t ldc);

// The same with row p of B the run b + row_offset[p] + j read under a
// lane mask: column j (counted from j0, which must be a multiple of 32)
// is that element where bit j % 16 of tap_mask[(j / 16) * taps +
// row_tap[p]] is set and 0 where it is clear, the element never read (a
// 'same' convolution's taps over its unpadded input, SameTaps in
// conv_phases.h: an implicit im2col, made panel by panel in L1). C's
// columns are this call's n, from c.
void gemm_f32_avx512_masked(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                            const int64_t* row_offset, const int32_t* row_tap, const uint16_t* tap_mask, int64_t taps,
                            int64_t j0, float* c, int64_t ldc);

// C = A * B^T with B given as its [n][k] rows (a Linear's weight), read in
// place: dot products along k, where both are contiguous, 4 rows of A
// against 4 rows of B per step, over blocks of B's rows that stay in L2.
// For few rows of A (a classifier head, one decoding step of a language
// model, a ConvNeXt's last stage) a transposed copy of B, which the 8x32
// tiles need, costs more than the product.
void gemm_f32_avx512_nt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                        float* c, int64_t ldc);
// C = A * B^T with B as its [n][k] rows, by the 8x32 tiles of
// gemm_f32_avx512: each kKC x 32 panel of B^T is gathered from 32 rows of
// B into L1 as it is needed, instead of a transposed copy of all of B made
// in memory and read back on every call (ViT-H's MLP weights: 26 MB each).
// 16 * ldb must fit in an int32 (the gather's offsets).
void gemm_f32_avx512_t(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                       float* c, int64_t ldc);
// Up to this many rows of A, gemm_f32 takes gemm_f32_avx512_nt for a
// transposed B. Measured on Linears of 256-1536 in and 768-6144 out, one
// thread (benchmarks/RESULTS.md, "Linear on few rows"): at 16 rows it is
// 1.6x faster than copying B^T, at 32 even, at 64 and beyond the copy
// wins by 1.7-3x (it runs 2.5-3x nearer the FMA peak).
constexpr int64_t kNtRowsLimit = 16;

// A row stride for B of n columns that is not a multiple of 4 KiB.
inline int64_t gemm_padded_ld(int64_t n) { return (n * 4) % 4096 == 0 ? n + 16 : n; }

}  // namespace kiln::runtime

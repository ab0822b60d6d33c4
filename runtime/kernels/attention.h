// Tiled ("flash") attention: softmax(q @ k^T * scale + mask) @ v computed a
// block of queries at a time against a tile of keys, with an online softmax
// (running row max and row sum, the accumulator rescaled when the max
// grows), so no more than one tile of the [L, S] score matrix ever exists.
// Runs over the thread pool (runtime/base/thread_pool.h), split over (batch index
// x query block); calls no BLAS.
#pragma once

#include <cstdint>

#include "runtime/value/tensor.h"

namespace kiln::runtime {

// out = softmax(q @ k^T * scale + mask) @ v over the last two dims, never
// materializing more than a tile of the [L, S] score matrix.
// q: [..., L, E], k: [..., S, E], v: [..., S, Ev], out: [..., L, Ev] (preallocated,
// same dtype). The leading dims of q, k, v and out are equal in number and
// size (the caller has broadcast them); every operand, out included, is read
// or written through its strides (0 strides, transposed and permuted views
// are fine; out must not overlap q, k, v or mask).
// mask: undefined (Tensor()) for none; else bool (true = keep, false = -inf) or
// q's dtype (added to the scores, may hold -inf), with dims broadcastable to
// [..., L, S] (fewer dims, size-1 dims and 0 strides allowed).
// causal: key j is masked for query i when j > i (top-left aligned, as torch's
// is_causal; with L != S still j > i), combined with mask if both are given.
// A query row whose every score is masked (and every row when S = 0) gives a
// row of zeros (not NaN).
// dtypes: float32 and float64 (the same for q, k, v, out; a float mask too).
// Bad arguments raise RuntimeError naming scaled_dot_product_attention.
// The result's sizes, [..., L, Ev], after every check flash_attention
// makes of q, k, v and the mask (meta tensors welcome): the op's shape
// rule, so a bad call raises when it is traced, as torch's does.
Shape attention_result_sizes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask);

// What a hand-written softmax(q @ k^T * scale + mask) @ v means where it
// differs from scaled_dot_product_attention (codegen's scheduler finds that
// pattern and calls the kernel with these):
struct AttentionOptions {
  bool mask_drops = false;      // a bool mask marks what to drop (masked_fill's), not what to keep
  bool empty_rows_nan = false;  // a fully masked row is NaN (softmax over all -inf), not zeros
};
void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                     double scale, const Tensor& out, const AttentionOptions& options = {});

// The kernel's exp (a vectorizable polynomial, not libm), over n elements:
// y[i] = exp(x[i]). Exposed for the accuracy tests. Exact 0 below the
// smallest subnormal (and for -inf), +inf above the largest finite result;
// float32 within a few ULP of exp (subnormal results included), float64
// within ~1e-15 relative.
void attention_exp(const float* x, float* y, int64_t n);
void attention_exp(const double* x, double* y, int64_t n);

// The instruction set the kernel (and attention_exp) runs with: 0 baseline
// (16-byte vectors), 1 AVX2+FMA (32), 2 AVX-512 (64); the highest the CPU
// has, capped by set_attention_simd_limit (for tests and benchmarks, to run
// the lower builds on a machine that has the higher; returns the old cap).
int attention_simd_level();
int set_attention_simd_limit(int level);

}  // namespace kiln::runtime

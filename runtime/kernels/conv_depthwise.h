// Depthwise convolution (one input channel per group: MobileNet's,
// EfficientNet's, ConvNeXt's 3x3, 5x5 and 7x7 layers), float32 and float64,
// NCHW, any stride, dilation and padding (issue 28).
//
// Why its own kernel: as a grouped convolution it was one GEMM of
// [1 x taps] x [taps x positions] per channel after an im2col copy, so the
// copy and the per-call cost were all of it (C=144 at 56x56: 4.07 ms against
// torch eager's 0.75). Four paths, by the plane's shape (float32 on
// AVX-512 CPUs; the last is also the portable one, float64 included):
// - 7x7 windows on 7x7 and 14x14 planes (ConvNeXt's late stages), unit
//   stride and dilation: vectors over 16 channels (transposed in and out
//   16 x 16 at a time in registers), one output row's accumulators and a
//   window row's weights in registers, each input vector feeding up to 7
//   FMAs.
// - stride 1, output rows of 16 or more: vectors along the output rows,
//   4 rows x up to 4 column blocks accumulated at once, so one load of an
//   input row feeds every output row that reads it (the loads, not the
//   FMAs, bound a depthwise kernel); padding by masked loads. 3x3 and 5x5
//   windows (unit dilation) keep all their weights in registers too, and
//   take this path from 8 columns; 7x7 ones (ConvNeXt's 56x56) run the
//   same unrolled code with their weights broadcast from memory.
// - stride 1, other narrower 'same' planes (7x7): vectors over the whole
//   plane's positions q = oi * W + oj, each tap one shifted run of the
//   plane itself with the padding masked off (one mask table for every
//   plane): full vectors however narrow the rows.
// - otherwise (strides > 1): each plane copied once into zero-padded
//   "phase planes" (split by the stride's row and column phase, so every
//   tap of any stride and dilation is a contiguous run), computed over
//   their extended positions q = oi * L + oj, the columns past ow dropped.
// Bias is added in the same pass, and the epilogue (an evaluation
// BatchNorm's per-channel affine map and an activation: conv_epilogue.h)
// right after each output plane is written. Planes are split over the thread pool by
// their cost (taps x positions), so a small layer stays on one thread.
#pragma once

#include <cstdint>

#include "runtime/kernels/conv_epilogue.h"
#include "runtime/kernels/conv_phases.h"

namespace kiln::runtime {

// The input is [N, C, H, W], contiguous (H, W and the window: ConvWindow).
struct DepthwiseShape : ConvWindow {
  int64_t N = 1, C = 0;
  int64_t cout = 0;  // a multiple of C: output channel o reads input channel o / (cout / C)
};

// out[N, cout, oh, ow] (contiguous) = the convolution of in with weight
// [cout, 1, kh, kw] (contiguous), plus bias[cout] when not null, then
// `epi`. Splits the planes over the thread pool by their cost.
void depthwise_conv2d(const DepthwiseShape& s, const float* in, const float* weight, const float* bias, float* out,
                      const ConvEpilogue<float>& epi = {});
void depthwise_conv2d(const DepthwiseShape& s, const double* in, const double* weight, const double* bias,
                      double* out, const ConvEpilogue<double>& epi = {});

}  // namespace kiln::runtime

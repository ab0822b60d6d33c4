// Depthwise convolution (one input channel per group: MobileNet's,
// EfficientNet's, ConvNeXt's 3x3, 5x5 and 7x7 layers), float32 and float64,
// NCHW, any stride, dilation and padding (issue 28).
//
// Why its own kernel: as a grouped convolution it was one GEMM of
// [1 x taps] x [taps x positions] per channel after an im2col copy, so the
// copy and the per-call cost were all of it (C=144 at 56x56: 4.07 ms against
// torch eager's 0.75). Here each plane is copied once into zero-padded
// "phase planes" (the padded plane split by row and column phase of the
// stride, so every tap is a contiguous run for any stride and dilation),
// and the output is computed over "extended" positions q = oi * L + oj of
// those planes' row length L: every tap is then one shifted contiguous
// load for the whole plane, so vectors stay full however narrow the plane
// (a 7x7 plane fills them as well as a 56x56). The columns oj >= ow of the
// extended rows are computed and dropped when the plane is written out.
#pragma once

#include <cstdint>

namespace kiln::runtime {

struct DepthwiseShape {
  int64_t N = 1, C = 0, H = 1, W = 1;  // input [N, C, H, W], contiguous
  int64_t cout = 0;                    // a multiple of C: output channel o reads input channel o / (cout / C)
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t ph = 0, pw = 0;  // padding before the first row / column (the far side follows from oh, ow)
  int64_t oh = 1, ow = 1;
};

// out[N, cout, oh, ow] (contiguous) = the convolution of in with weight
// [cout, 1, kh, kw] (contiguous), plus bias[cout] when not null. Splits the
// planes over the thread pool by their cost.
void depthwise_conv2d(const DepthwiseShape& s, const float* in, const float* weight, const float* bias, float* out);
void depthwise_conv2d(const DepthwiseShape& s, const double* in, const double* weight, const double* bias,
                      double* out);

}  // namespace kiln::runtime

// Grouped convolution of small group width (ResNeXt's 4 to 32 channels a
// group, RegNet's 8 to 24, ...), float32 on AVX-512 CPUs, NCHW, any
// stride, dilation and padding (issue 28).
//
// Why its own kernel: as one GEMM per group (im2col, or the padded planes
// of conv_direct_f32) each product has 4-16 rows, so the GEMM's 8-row tile
// idled, and the per-group copy, scratch and call cost was paid 32-55
// times a layer (RegNetY-400MF's 440x7x7 layer: 1.9x torch eager). Here
// one pass runs every (sample, group, block of up to 8 output channels) as
// a register tile of those channels x up to 4 vectors of 16 positions:
// per (input channel, tap) one load of each position vector feeds every
// channel of the tile (a broadcast weight each). Two ways to address the
// input, by the layer's shape:
// - stride 1 with the output as large as the input ('same' padding, the
//   grouped 3x3 layers): positions q = oi * W + oj over the whole plane,
//   each tap one shifted run of the input plane itself with the padding
//   and the row wrap-around masked off (one mask table for every plane):
//   no copy, full vectors however narrow the rows.
// - otherwise (strides > 1, other padding): the group's input planes are
//   copied once into phase planes (conv_phases.h), the tile computed over
//   their extended positions, and the columns past ow dropped on the way
//   out.
// Bias is added in the same pass; the work is split over the thread pool
// by its cost.
#pragma once

#include <cstdint>

#include "runtime/kernels/conv_phases.h"

namespace kiln::runtime {

// The input is [N, C, H, W], contiguous (H, W and the window: ConvWindow);
// the weight [cout, C / groups, kh, kw], contiguous.
struct GroupedShape : ConvWindow {
  int64_t N = 1, C = 0, cout = 0, groups = 1;
};

// Whether grouped_conv2d runs this layer: an AVX-512 CPU, more than one
// group, and groups narrow enough that one GEMM per group loses.
bool grouped_conv2d_applies(const GroupedShape& s);

// out[N, cout, oh, ow] (contiguous) = the grouped convolution of in with
// weight, plus bias[cout] when not null. Requires grouped_conv2d_applies.
void grouped_conv2d(const GroupedShape& s, const float* in, const float* weight, const float* bias, float* out);

}  // namespace kiln::runtime

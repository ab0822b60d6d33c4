// A strided convolution (a ResNet's stride-2 3x3 layers) as one GEMM over
// phase planes, float32 on kiln's AVX-512 GEMM, without im2col (issue 28).
//
// One sample at a time: its group's planes are split once into phase
// planes (conv_phases.h), where every tap is one contiguous run over the
// extended positions q = oi * L + oj, and row (c, tap) of the GEMM's B is
// channel c's phase planes from the tap's offset on
// (gemm_f32_avx512_rows). The columns past ow are computed and dropped,
// so it is for rows of 8 or more (at 56 -> 28, 29 columns for 28). The
// im2col it replaces copied each input element once per tap, with a
// strided scalar read: 9 times for a 3x3 window, against once here.
#pragma once

#include <cstdint>

#include "runtime/kernels/conv_phases.h"

namespace kiln::runtime {

// out[cout][oh * ow] = the convolution of `sample` ([cin][H][W]) with w
// ([cout][cin * kh * kw]), plus bias[cout] when not null. With
// inner_parallel the copy, the GEMM's column panels and the write-out are
// split over the thread pool; otherwise it runs on the calling thread.
// Requires has_avx512().
void conv2d_phases_f32(const ConvWindow& win, const float* sample, int64_t cin, const float* w, int64_t cout,
                       const float* bias, float* out, bool inner_parallel);

}  // namespace kiln::runtime

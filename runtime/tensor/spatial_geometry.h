// The 2-d spatial layout convolution and pooling share (ops_conv.cpp,
// ops_pool.cpp): input [N, C, H, W] (a 1-d op and an unbatched input add
// size-1 dims), window, stride, padding, dilation, and the argument
// readers that give torch's words when an argument is wrong.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor/ops.h"

namespace kiln::runtime::spatial {

// Spatial rank of a row: 1 for *1d, 2 for *2d.
int spatial_rank(const OpArgs& args);

// v's items joined by sep ("2x3").
std::string join(const std::vector<int64_t>& v, const char* sep);

// An int, or a tuple/list of R ints (torch's _pair / _single).
std::vector<int64_t> spatial_arg(const OpArgs& args, size_t i, int R);

struct Geometry {
  int R = 2;
  bool batched = true;
  int64_t N = 1, C = 0, H = 1, W = 1;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t ph_lo = 0, ph_hi = 0, pw_lo = 0, pw_hi = 0;
  int64_t oh = 1, ow = 1;
  // The result's sizes with channels `c` (batched / unbatched, 1-d / 2-d).
  Shape out_sizes(int64_t c) const {
    Shape s;
    if (batched) s.push_back(N);
    s.push_back(c);
    if (R == 2) s.push_back(oh);
    s.push_back(ow);
    return s;
  }
};

// Reads input dims into g; the input must be (C, *spatial) or (N, C, *spatial).
void read_input(const OpArgs& args, const Tensor& x, Geometry& g);

// The input as a contiguous [N, C, H, W] tensor.
Tensor as_nchw(const Tensor& x, const Geometry& g, DType dt);

// The window offsets k in [lo, hi) whose input index o*stride - pad + k*dil
// lies in [0, n): the rest of the window is padding.
// (inline: called per output position in the pooling loops)
inline void window_in_range(int64_t o, int64_t stride, int64_t pad, int64_t dil, int64_t k, int64_t n, int64_t& lo,
                            int64_t& hi) {
  const int64_t base = o * stride - pad;
  lo = base >= 0 ? 0 : (-base + dil - 1) / dil;
  hi = n - 1 - base < 0 ? 0 : std::min(k, (n - 1 - base) / dil + 1);
  if (hi < lo) hi = lo;
}

// The output columns [lo, hi) whose tap at input offset `off` (the input
// column is oj*stride + off) lies in [0, n): the other columns see padding.
inline void columns_in_range(int64_t off, int64_t stride, int64_t n, int64_t n_out, int64_t& lo, int64_t& hi) {
  lo = std::min(n_out, off >= 0 ? 0 : (-off + stride - 1) / stride);
  hi = std::max(lo, n - 1 - off < 0 ? 0 : std::min(n_out, (n - 1 - off) / stride + 1));
}

// torch's RuntimeError for an integer input.
void check_floating(const OpArgs& args, const Tensor& x);

}  // namespace kiln::runtime::spatial

// The convolution kernels of runtime/kernels/ called directly against a
// naive float64 reference: the grouped kernel (conv_grouped.h: its 'same'
// path read in place under masks, its phase-plane path for strides and
// other padding, every channel-tile width 1..8 and position-vector count
// 1..4) and the depthwise kernel (conv_depthwise.h, float32 and float64),
// over generated shapes, strides, padding, dilation and group widths,
// odd sizes included; and the GEMM's masked rows (gemm_avx512.h), a
// 'same' convolution as an implicit GEMM.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "runtime/kernels/conv_depthwise.h"
#include "runtime/kernels/conv_grouped.h"
#include "runtime/kernels/gemm_avx512.h"

namespace {

using namespace kiln::runtime;

struct Geo {
  int64_t N, C, H, W, cout, groups, kh, kw, sh, sw, dh, dw, ph, pw;
  int64_t oh() const { return (H + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t ow() const { return (W + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
  template <class S>
  void fill(S& s) const {
    if constexpr (!std::is_same_v<S, ConvWindow>) s.N = N, s.C = C, s.cout = cout;
    s.H = H, s.W = W;
    s.kh = kh, s.kw = kw, s.sh = sh, s.sw = sw, s.dh = dh, s.dw = dw, s.ph = ph, s.pw = pw;
    s.oh = oh(), s.ow = ow();
  }
};

// torch's conv2d with symmetric padding, in float64.
template <class T>
std::vector<double> reference(const Geo& g, const std::vector<T>& x, const std::vector<T>& w, const T* bias) {
  const int64_t cin = g.C / g.groups, cout_g = g.cout / g.groups, oh = g.oh(), ow = g.ow();
  std::vector<double> out(size_t(g.N * g.cout * oh * ow));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t o = 0; o < g.cout; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bias ? double(bias[o]) : 0.0;
          for (int64_t c = 0; c < cin; ++c)
            for (int64_t ki = 0; ki < g.kh; ++ki)
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t ii = i * g.sh - g.ph + ki * g.dh, jj = j * g.sw - g.pw + kj * g.dw;
                if (ii < 0 || ii >= g.H || jj < 0 || jj >= g.W) continue;
                const int64_t ic = (o / cout_g) * cin + c;
                acc += double(x[size_t(((n * g.C + ic) * g.H + ii) * g.W + jj)]) *
                       double(w[size_t(((o * cin + c) * g.kh + ki) * g.kw + kj)]);
              }
          out[size_t(((n * g.cout + o) * oh + i) * ow + j)] = acc;
        }
  return out;
}

// Runs `kernel(in, w, bias, out)` with and without bias; checks every
// output element (out starts as NaN) against the reference.
template <class T, class Kernel>
void check(const Geo& g, std::mt19937& rng, double tol, Kernel kernel) {
  CAPTURE(g.N, g.C, g.H, g.W, g.cout, g.groups, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw);
  std::uniform_real_distribution<double> val(-1, 1);
  std::vector<T> x(size_t(g.N * g.C * g.H * g.W)), w(size_t(g.cout * (g.C / g.groups) * g.kh * g.kw)),
      b(size_t(g.cout));
  for (T& v : x) v = T(val(rng));
  for (T& v : w) v = T(val(rng));
  for (T& v : b) v = T(val(rng));
  for (const T* bias : {static_cast<const T*>(b.data()), static_cast<const T*>(nullptr)}) {
    const std::vector<double> want = reference(g, x, w, bias);
    std::vector<T> got(want.size(), T(NAN));
    kernel(x.data(), w.data(), bias, got.data());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / (1 + std::fabs(want[i])));
    CHECK(worst < tol);  // a NaN (an element never written) fails too
  }
}

// Shapes for a kernel: the backbones' odd corners first, then generated
// ones. `groups_for(C)` picks the group count.
template <class GroupsFor>
std::vector<Geo> geometries(std::mt19937& rng, int count, GroupsFor groups_for, int64_t max_cin, int64_t max_cout) {
  std::vector<Geo> out;
  std::uniform_int_distribution<int64_t> d(0, 1 << 20);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + d(rng) % (hi - lo + 1); };
  while (int(out.size()) < count) {
    Geo g{};
    g.N = pick(1, 3);
    const int64_t cin = pick(1, max_cin), groups = groups_for(pick(1, 6));
    g.groups = groups, g.C = cin * groups, g.cout = pick(1, max_cout) * groups;
    g.H = pick(1, 37), g.W = pick(1, 37), g.kh = pick(1, 5), g.kw = pick(1, 5);
    g.sh = pick(1, 3), g.sw = pick(1, 3), g.dh = pick(1, 2), g.dw = pick(1, 2);
    const bool same = pick(0, 2) == 0;  // 'same' padding at unit stride: the in-place path
    if (same) {
      g.sh = g.sw = 1, g.kh = 2 * pick(0, 2) + 1, g.kw = 2 * pick(0, 2) + 1;
      g.ph = g.dh * (g.kh - 1) / 2, g.pw = g.dw * (g.kw - 1) / 2;
    } else {
      g.ph = pick(0, g.kh - 1), g.pw = pick(0, g.kw - 1);
    }
    if (g.H + 2 * g.ph < g.dh * (g.kh - 1) + 1 || g.W + 2 * g.pw < g.dw * (g.kw - 1) + 1) continue;
    out.push_back(g);
  }
  return out;
}

}  // namespace

TEST_CASE("grouped_conv2d equals a naive reference over shapes, strides, padding, dilation and group widths",
          "[conv_kernels]") {
  if (!has_avx512()) return;  // the kernel is AVX-512 only; elsewhere the GEMM path runs
  std::mt19937 rng(28);
  // The backbones' layers (ResNeXt 32x4d and 32x8d, RegNet's group widths
  // 8 and 16, a stride-2 first block), smaller planes so the reference is quick.
  std::vector<Geo> geos = {
      {2, 128, 14, 14, 128, 32, 3, 3, 1, 1, 1, 1, 1, 1}, {1, 256, 12, 12, 256, 32, 3, 3, 2, 2, 1, 1, 1, 1},
      {2, 48, 9, 9, 48, 6, 3, 3, 1, 1, 1, 1, 1, 1},      {2, 64, 7, 7, 64, 4, 3, 3, 1, 1, 1, 1, 1, 1},
      {1, 104, 11, 11, 104, 13, 3, 3, 2, 2, 1, 1, 1, 1}, {1, 12, 6, 5, 40, 2, 3, 3, 1, 1, 1, 1, 1, 1},  // 20 a group: 7+7+6
  };
  // Every output-group width 1..20 (channel tiles of 1..8, split evenly).
  for (int64_t co = 1; co <= 20; ++co) geos.push_back({1, 6, 8, 21, 3 * co, 3, 3, 3, 1, 1, 1, 1, 1, 1});
  auto more = geometries(rng, 150, [](int64_t g) { return g + 1; }, 9, 10);
  geos.insert(geos.end(), more.begin(), more.end());
  int ran = 0;
  for (const Geo& g : geos) {
    GroupedShape s;
    g.fill(s);
    s.groups = g.groups;
    if (!grouped_conv2d_applies(s)) continue;
    ++ran;
    check<float>(g, rng, 1e-5, [&](const float* x, const float* w, const float* b, float* y) { grouped_conv2d(s, x, w, b, y); });
  }
  CHECK(ran > 150);
}

TEST_CASE("depthwise_conv2d equals a naive reference in float32 and float64", "[conv_kernels]") {
  std::mt19937 rng(29);
  std::vector<Geo> geos = {
      {2, 32, 14, 14, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1}, {1, 24, 15, 17, 24, 24, 3, 3, 2, 2, 1, 1, 1, 1},
      {1, 16, 14, 14, 16, 16, 5, 5, 1, 1, 1, 1, 2, 2}, {1, 32, 7, 7, 32, 32, 7, 7, 1, 1, 1, 1, 3, 3},
      {1, 17, 14, 14, 17, 17, 7, 7, 1, 1, 1, 1, 3, 3}, {1, 8, 20, 33, 16, 8, 3, 3, 1, 1, 1, 1, 1, 1},  // multiplier 2
      // 7x7 on rows of 16 or more (ConvNeXt's 56x56): a partial row group
      // and column block, padding short of the window and none.
      {1, 5, 23, 37, 5, 5, 7, 7, 1, 1, 1, 1, 3, 3}, {2, 3, 18, 22, 6, 3, 7, 7, 1, 1, 1, 1, 1, 2},
      {1, 4, 12, 40, 4, 4, 7, 7, 1, 1, 1, 1, 0, 0},
      // 7x7 on 7- and 14-column outputs (channels in vectors, transposed in
      // registers): input rows wider than 16, one whole block, a partial one.
      {1, 20, 9, 20, 20, 20, 7, 7, 1, 1, 1, 1, 0, 0}, {2, 16, 10, 11, 16, 16, 7, 7, 1, 1, 1, 1, 2, 1},
      {1, 40, 7, 7, 40, 40, 7, 7, 1, 1, 1, 1, 3, 3},
  };
  auto more = geometries(rng, 80, [](int64_t g) { return g; }, 1, 2);
  geos.insert(geos.end(), more.begin(), more.end());
  for (const Geo& g0 : geos) {
    Geo g = g0;
    g.groups = g.C;  // one input channel a group
    DepthwiseShape s;
    g.fill(s);
    check<float>(g, rng, 1e-5, [&](const float* x, const float* w, const float* b, float* y) { depthwise_conv2d(s, x, w, b, y); });
    check<double>(g, rng, 1e-12, [&](const double* x, const double* w, const double* b, double* y) { depthwise_conv2d(s, x, w, b, y); });
  }
}

TEST_CASE("gemm_f32_avx512_masked: a 'same' convolution as an implicit GEMM equals a naive reference",
          "[conv_kernels]") {
  if (!has_avx512()) return;
  std::mt19937 rng(30);
  // (C, H, W, cout, k, dilation): ResNet's 3x3 at small planes, odd sizes,
  // planes narrower than a vector, 5x5 and dilated windows, K past one k
  // pass (256), output channels past one row tile and with a remainder.
  const std::vector<std::vector<int64_t>> shapes = {
      {64, 7, 7, 40, 3, 1}, {30, 14, 14, 9, 3, 1}, {3, 5, 37, 17, 3, 1}, {7, 11, 9, 33, 5, 1},
      {5, 16, 16, 8, 3, 2}, {2, 1, 1, 3, 3, 1},   {1, 33, 2, 2, 3, 1},
  };
  for (const auto& v : shapes) {
    Geo g{1, v[0], v[1], v[2], v[3], 1, v[4], v[4], 1, 1, v[5], v[5], v[5] * (v[4] - 1) / 2, v[5] * (v[4] - 1) / 2};
    ConvWindow win;
    g.fill(win);
    const SameTaps same = same_taps(win);
    const int64_t kk = g.kh * g.kw, K = g.C * kk, P = g.H * g.W;
    std::vector<int64_t> offset;
    std::vector<int32_t> tap;
    for (int64_t k = 0; k < K; ++k) {
      offset.push_back((k / kk) * P + same.offset[size_t(k % kk)]);
      tap.push_back(int32_t(k % kk));
    }
    check<float>(g, rng, 1e-5, [&](const float* x, const float* w, const float* b, float* y) {
      // Two calls, split at a multiple of 32 columns (as the threads split it).
      const int64_t split = std::min<int64_t>(P, 32);
      gemm_f32_avx512_masked(g.cout, split, K, w, K, x, offset.data(), tap.data(), same.mask.data(), kk, 0, y, P);
      if (split < P)
        gemm_f32_avx512_masked(g.cout, P - split, K, w, K, x, offset.data(), tap.data(), same.mask.data(), kk, split,
                               y + split, P);
      if (b)
        for (int64_t o = 0; o < g.cout; ++o)
          for (int64_t q = 0; q < P; ++q) y[o * P + q] += b[o];
    });
  }
}

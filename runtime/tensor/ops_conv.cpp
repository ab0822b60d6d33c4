// Convolutions (conv1d, conv2d, and _conv2d_act: a convolution with its
// BatchNorm, residual and activation applied in its own pass), torch's
// semantics and output sizes, on the 2-d layout of spatial_geometry.h (a
// 1-d op is the 2-d one with a height of 1). Pooling: ops_pool.cpp.
//
// Convolution is im2col + BLAS: per sample and group, the input patches
// become a [C_in/groups * kernel, out positions] matrix multiplied by the
// group's weight rows, straight into the output (OpenBLAS for float32 and
// float64); a 1x1 unit-stride convolution multiplies the input itself; a
// depthwise one has its own kernel (kernels/conv_depthwise.h), and so do
// narrow groups in float32 (kernels/conv_grouped.h). With kiln's float32
// GEMM there is no im2col copy: 'same' layers are an implicit GEMM over
// the input under the taps' masks (gemm_f32_avx512_masked), other unit
// strides read zero-padded planes, strided windows phase planes
// (kernels/conv_strided.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/base/thread_pool.h"
#include "runtime/kernels/blas.h"
#include "runtime/kernels/conv_depthwise.h"
#include "runtime/kernels/conv_grouped.h"
#include "runtime/kernels/conv_phases.h"
#include "runtime/kernels/conv_strided.h"
#include "runtime/kernels/gemm_avx512.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/tensor/spatial_geometry.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {
namespace {

using namespace spatial;

// ----- convolution ----------------------------------------------------------------

struct ConvPlan {
  Geometry g;
  int64_t cout = 0, groups = 1;
  DType dtype;
};

ConvPlan plan_conv(const OpArgs& args) {
  ConvPlan p;
  Geometry& g = p.g;
  g.R = spatial_rank(args);
  const int R = g.R;
  const std::string op = args.op->name;
  const Tensor x = args.tensor(0), w = args.tensor(1);
  read_input(args, x, g);
  if (w.dim() != R + 2)
    throw_error(ErrorKind::RuntimeError, op + "(): weight must be " + std::to_string(R + 2) +
                                             "-D (out_channels, in_channels / groups, kernel...), got shape " +
                                             shape_str(w.sizes()));
  p.groups = args.integer(6);
  if (p.groups <= 0) throw_error(ErrorKind::RuntimeError, op + "(): non-positive groups is not supported");
  p.cout = w.sizes()[0];
  if (p.cout % p.groups != 0)
    throw_error(ErrorKind::RuntimeError, "Given groups=" + std::to_string(p.groups) + ", expected weight to be divisible by " +
                                             std::to_string(p.groups) + " at dimension 0, but got weight of size " +
                                             shape_str(w.sizes()) + " instead");
  if (w.sizes()[1] * p.groups != g.C)
    throw_error(ErrorKind::RuntimeError, "Given groups=" + std::to_string(p.groups) + ", weight of size " +
                                             shape_str(w.sizes()) + ", expected input" + shape_str(x.sizes()) +
                                             " to have " + std::to_string(w.sizes()[1] * p.groups) +
                                             " channels, but got " + std::to_string(g.C) + " channels instead");
  if (!args.is_none(2)) {
    const Tensor b = args.tensor(2);
    if (b.dim() != 1 || b.sizes()[0] != p.cout)
      throw_error(ErrorKind::RuntimeError, "Given weight of size " + shape_str(w.sizes()) +
                                               ", expected bias to be 1-dimensional with " + std::to_string(p.cout) +
                                               " elements, but got bias of size " + shape_str(b.sizes()) + " instead");
  }
  p.dtype = x.dtype();
  check_floating(args, x);
  for (size_t i : {size_t(1), size_t(2)}) {
    if (i == 2 && args.is_none(2)) continue;
    const DType d = args.tensor(i).dtype();
    if (d != p.dtype)
      throw_error(ErrorKind::RuntimeError, op + "(): input (" + dtype_name(p.dtype) + ") and " + args.param_name(i) +
                                               " (" + dtype_name(d) + ") must have the same dtype");
  }
  const std::vector<int64_t> stride = spatial_arg(args, 3, R), dil = spatial_arg(args, 5, R);
  std::vector<int64_t> k(w.sizes().begin() + 2, w.sizes().end());
  for (int64_t s : stride)
    if (s <= 0) throw_error(ErrorKind::RuntimeError, op + "(): non-positive stride is not supported");
  for (int64_t d : dil)
    if (d <= 0) throw_error(ErrorKind::RuntimeError, op + "(): dilation should be greater than zero");
  std::vector<int64_t> lo(size_t(R), 0), hi(size_t(R), 0);
  if (args[4].is(Kind::Str)) {
    const std::string mode = args[4].as_str();
    if (mode == "same") {
      for (int64_t s : stride)
        if (s != 1) throw_error(ErrorKind::RuntimeError, op + "(): padding='same' is not supported for strided convolutions");
      // torch pads the extra element of an odd total on the right.
      for (int r = 0; r < R; ++r) {
        const int64_t total = dil[size_t(r)] * (k[size_t(r)] - 1);
        lo[size_t(r)] = total / 2;
        hi[size_t(r)] = total - total / 2;
      }
    } else if (mode != "valid") {
      throw_error(ErrorKind::RuntimeError, op + "(): invalid padding string '" + mode + "' (expected 'same' or 'valid')");
    }
  } else {
    lo = hi = spatial_arg(args, 4, R);
    for (int64_t v : lo)
      if (v < 0) throw_error(ErrorKind::RuntimeError, op + "(): negative padding is not supported");
  }
  // 2-d: entry 0 is the height, 1 the width; 1-d: the one entry is the width.
  auto h = [&](const std::vector<int64_t>& v, int64_t dflt) { return R == 2 ? v[0] : dflt; };
  g.kh = h(k, 1), g.kw = k.back(), g.sh = h(stride, 1), g.sw = stride.back(), g.dh = h(dil, 1), g.dw = dil.back();
  g.ph_lo = h(lo, 0), g.ph_hi = h(hi, 0), g.pw_lo = lo.back(), g.pw_hi = hi.back();
  const int64_t eh = g.dh * (g.kh - 1) + 1, ew = g.dw * (g.kw - 1) + 1;  // effective kernel
  const int64_t ih = g.H + g.ph_lo + g.ph_hi, iw = g.W + g.pw_lo + g.pw_hi;
  if (ih < eh || iw < ew) {
    std::vector<int64_t> in{ih, iw}, ke{eh, ew};
    if (R == 1) in = {iw}, ke = {ew};
    throw_error(ErrorKind::RuntimeError, "Calculated padded input size per channel: (" + join(in, " x ") +
                                             "). Kernel size: (" + join(ke, " x ") +
                                             "). Kernel size can't be greater than actual input size");
  }
  g.oh = (ih - eh) / g.sh + 1;
  g.ow = (iw - ew) / g.sw + 1;
  return p;
}

// C[m, n] = A[m, k] B[k, n] with B's rows ldb apart.
void gemm(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, int64_t ldb) {
  gemm_f32(false, false, m, n, k, a, k, b, ldb, c, n);
}
void gemm(const double* a, const double* b, double* c, int64_t m, int64_t n, int64_t k, int64_t ldb) {
  gemm_f64(false, false, m, n, k, a, k, b, ldb, c, n);
}

// Rows [k_lo, k_hi) of the im2col matrix `cols` ([K][ld]: row k = (c, ki,
// kj), sample s's output positions at columns [s * P, (s + 1) * P)): the
// input under that kernel tap for every output position, 0 on padding.
// The trap is the cost per row, not per element: a ResNet's late layers
// have output rows of 2-8 positions, so a call per row (memcpy, fill) cost
// more than the GEMM. With unit strides and an output as wide as the input
// (a 'same' convolution) the valid rows of a tap are one shifted block of
// the plane: one copy, then the few wrapped-around columns zeroed.
template <class T>
void im2col_rows(const Geometry& g, const T* sample0, int64_t sample_stride, int64_t nn, int64_t k_lo, int64_t k_hi,
                 T* cols, int64_t ld) {
  const int64_t kk = g.kh * g.kw, P = g.oh * g.ow, HW = g.H * g.W;
  const bool block = g.sh == 1 && g.sw == 1 && g.ow == g.W;
  for (int64_t k = k_lo; k < k_hi; ++k) {
    const int64_t c = k / kk, ki = (k % kk) / g.kw, kj = k % g.kw;
    const int64_t off = kj * g.dw - g.pw_lo, row_off = ki * g.dh - g.ph_lo;
    int64_t oj_lo = 0, oj_hi = 0, oi_lo = 0, oi_hi = 0;
    columns_in_range(off, g.sw, g.W, g.ow, oj_lo, oj_hi);
    columns_in_range(row_off, g.sh, g.H, g.oh, oi_lo, oi_hi);
    if (oj_lo == oj_hi) oi_hi = oi_lo;  // every column is padding
    for (int64_t s = 0; s < nn; ++s) {
      const T* plane = sample0 + s * sample_stride + c * HW;
      T* dst = cols + k * ld + s * P;
      for (int64_t q = 0; q < oi_lo * g.ow; ++q) dst[q] = T(0);
      for (int64_t q = oi_hi * g.ow; q < P; ++q) dst[q] = T(0);
      if (oi_lo == oi_hi) continue;
      if (block) {
        // dst[oi * W + oj] = plane[(oi + row_off) * W + oj + off]: one
        // range from the first valid element to the last.
        const int64_t q0 = oi_lo * g.W + oj_lo, q1 = (oi_hi - 1) * g.W + oj_hi;
        const T* src = plane + row_off * g.W + off;
        std::memcpy(dst + q0, src + q0, size_t(q1 - q0) * sizeof(T));
        for (int64_t oi = oi_lo; oi < oi_hi; ++oi) {
          T* r = dst + oi * g.W;
          for (int64_t oj = 0; oj < oj_lo; ++oj) r[oj] = T(0);
          for (int64_t oj = oj_hi; oj < g.ow; ++oj) r[oj] = T(0);
        }
        continue;
      }
      for (int64_t oi = oi_lo; oi < oi_hi; ++oi) {
        T* r = dst + oi * g.ow;
        const T* src = plane + (oi * g.sh + row_off) * g.W + off;
        for (int64_t oj = 0; oj < oj_lo; ++oj) r[oj] = T(0);
        if (g.sw == 1)
          for (int64_t oj = oj_lo; oj < oj_hi; ++oj) r[oj] = src[oj];
        else
          for (int64_t oj = oj_lo; oj < oj_hi; ++oj) r[oj] = src[oj * g.sw];
        for (int64_t oj = oj_hi; oj < g.ow; ++oj) r[oj] = T(0);
      }
    }
  }
}

// im2col for short output rows (fewer than 16 positions, a ResNet's late
// stages): a call or loop per row would cost more than the GEMM, so each
// tap gathers its whole row of `cols` through a table instead. The group's
// planes are first copied with one 0 after each (`planes`: [nn][cin][HW + 1]),
// and a tap's table entry on padding points at its plane's 0, so the gather
// has no branch. Rows [k_lo, k_hi) of cols ([K][ld], n = nn * P columns).
template <class T>
void im2col_gather(const Geometry& g, const T* planes, const int32_t* table, int64_t n, int64_t k_lo, int64_t k_hi,
                   T* cols, int64_t ld) {
  const int64_t kk = g.kh * g.kw, HW1 = g.H * g.W + 1;
  for (int64_t k = k_lo; k < k_hi; ++k) {
    const T* base = planes + (k / kk) * HW1;
    const int32_t* t = table + (k % kk) * n;
    T* dst = cols + k * ld;
    for (int64_t j = 0; j < n; ++j) dst[j] = base[t[j]];
  }
}

// The gather tables of im2col_gather for nn samples: entry [tap][s * P + p]
// is the element of sample s's copied planes under that tap at output
// position p, relative to channel 0 (a channel adds c * (HW + 1)).
void gather_table(const Geometry& g, int64_t nn, int64_t cin, std::vector<int32_t>& table) {
  const int64_t P = g.oh * g.ow, HW = g.H * g.W, ld = nn * P;
  table.resize(size_t(g.kh * g.kw * ld));
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj)
      for (int64_t s = 0; s < nn; ++s)
        for (int64_t oi = 0; oi < g.oh; ++oi)
          for (int64_t oj = 0; oj < g.ow; ++oj) {
            const int64_t ii = oi * g.sh - g.ph_lo + ki * g.dh, jj = oj * g.sw - g.pw_lo + kj * g.dw;
            const bool in = ii >= 0 && ii < g.H && jj >= 0 && jj < g.W;
            table[size_t((ki * g.kw + kj) * ld + s * P + oi * g.ow + oj)] =
                int32_t(s * cin * (HW + 1) + (in ? ii * g.W + jj : HW));
          }
}

// A unit-stride convolution without im2col, for kiln's float32 GEMM: the
// group's samples are copied once into zero-padded planes, [cin][nn][Hp][Wp],
// and row (c, ki, kj) of the GEMM's B is that buffer from the tap's offset
// on, read over "extended" positions q = s*Hp*Wp + oi*Wp + oj that also
// cover the padding columns and rows (their results are dropped). A valid
// position's reads stay in its own sample's plane; the others read into the
// next plane or a zero tail. Worth it while most extended positions are
// real: the caller requires oh*ow >= 60% of Hp*Wp.
void conv_direct_f32(const Geometry& g, const float* sample0, int64_t cin, int64_t nn, const float* w, int64_t cout,
                     const float* bias, float* out, int64_t out_sample_stride, bool inner_parallel,
                     const ConvEpilogue<float>& epi, int64_t c_base) {
  const int64_t Hp = g.H + g.ph_lo + g.ph_hi, Wp = g.W + g.pw_lo + g.pw_hi, plane = Hp * Wp;
  const int64_t n_ext = nn * plane, kk = g.kh * g.kw, K = cin * kk;
  const int64_t tail = (g.kh - 1) * g.dh * Wp + (g.kw - 1) * g.dw + 32;
  thread_local std::vector<float> padded, ext;
  thread_local std::vector<int64_t> offsets;
  padded.assign(size_t(cin * n_ext + tail), 0.0f);
  for (int64_t c = 0; c < cin; ++c)
    for (int64_t s = 0; s < nn; ++s) {
      const float* src = sample0 + s * g.C * g.H * g.W + c * g.H * g.W;
      float* dst = padded.data() + (c * nn + s) * plane + g.ph_lo * Wp + g.pw_lo;
      for (int64_t i = 0; i < g.H; ++i) std::copy(src + i * g.W, src + (i + 1) * g.W, dst + i * Wp);
    }
  offsets.resize(size_t(K));
  for (int64_t k = 0; k < K; ++k) {
    const int64_t c = k / kk, ki = (k % kk) / g.kw, kj = k % g.kw;
    offsets[size_t(k)] = c * n_ext + ki * g.dh * Wp + kj * g.dw;
  }
  if (ext.size() < size_t(cout * n_ext)) ext.resize(size_t(cout * n_ext));
  const float* b = padded.data();
  const int64_t* off = offsets.data();
  float* e = ext.data();
  auto columns = [&](int64_t lo, int64_t hi) {  // in units of 32 columns
    const int64_t j0 = lo * 32, j1 = std::min(n_ext, hi * 32);
    gemm_f32_avx512_rows(cout, j1 - j0, K, w, K, b + j0, off, e + j0, n_ext);
  };
  const int64_t panels = (n_ext + 31) / 32;
  if (inner_parallel) parallel_for(panels, 1, columns);
  else columns(0, panels);
  auto finish = [&](int64_t lo, int64_t hi) {  // rows (s, c) of the output, bias added, then the epilogue
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t s = r / cout, c = r % cout;
      const float add = bias ? bias[c] : 0.0f;
      const float* src = e + c * n_ext + s * plane;
      float* dst = out + s * out_sample_stride + c * g.oh * g.ow;
      for (int64_t oi = 0; oi < g.oh; ++oi)
        for (int64_t oj = 0; oj < g.ow; ++oj) dst[oi * g.ow + oj] = src[oi * Wp + oj] + add;
      epi.apply(c_base + c, dst, g.oh * g.ow);
    }
  };
  if (inner_parallel) parallel_for(nn * cout, std::max<int64_t>(1, 4096 / (g.oh * g.ow)), finish);
  else finish(0, nn * cout);
}

// A 'same' unit-stride convolution of one sample's group as an implicit
// GEMM (gemm_f32_avx512_masked): row k = (c, t) of B is input plane c
// (x + tap_offset[k], which holds c * P) under tap t = tap_index[k]'s
// masks. out[cout][P] = w x B + bias; with inner_parallel the column
// panels are split over the pool.
void conv_same_f32(const SameTaps& same, const std::vector<int64_t>& tap_offset, const std::vector<int32_t>& tap_index,
                   int64_t P, const float* x, const float* w, int64_t cout, const float* bias, float* out,
                   bool inner_parallel) {
  const int64_t K = int64_t(tap_offset.size()), taps = int64_t(same.offset.size());
  auto columns = [&](int64_t lo, int64_t hi) {  // in units of 32 columns, the bias while they are in cache
    const int64_t j0 = lo * 32, j1 = std::min(P, hi * 32);
    gemm_f32_avx512_masked(cout, j1 - j0, K, w, K, x, tap_offset.data(), tap_index.data(), same.mask.data(), taps, j0,
                           out + j0, P);
    if (bias)
      for (int64_t c = 0; c < cout; ++c)
        for (int64_t j = j0; j < j1; ++j) out[c * P + j] += bias[c];
  };
  const int64_t panels = (P + 31) / 32;
  if (inner_parallel) parallel_for(panels, 1, columns);
  else columns(0, panels);
}

// `epi` (conv_epilogue.h) is applied to each output plane as soon as it is
// final: per plane of the depthwise kernel, per (sample, channel) row of a
// GEMM's output while the GEMM's block is still in cache.
template <class T>
void conv_run(const ConvPlan& p, const Tensor& x4, const Tensor& w, const Tensor& bias, const Tensor& out,
              const ConvEpilogue<T>& epi) {
  const Geometry& g = p.g;
  const int64_t cin_g = g.C / p.groups, cout_g = p.cout / p.groups;
  const int64_t kk = g.kh * g.kw, P = g.oh * g.ow, K = cin_g * kk;
  const T* in = x4.data<T>();
  T* o = out.data<T>();
  const Tensor wc = w.contiguous();  // [groups][cout_g, K]
  const T* wp = wc.data<T>();
  const Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  const T* bp = bias.defined() ? bc.data<T>() : nullptr;
  if (K == 0) {
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = bp ? bp[(i / P) % p.cout] : T(0);
    for (int64_t r = 0; r < g.N * p.cout; ++r) epi.apply(r % p.cout, o + r * P, P);
    return;
  }
  // Depthwise (one input channel per group, any channel multiplier): its
  // own kernel (runtime/kernels/conv_depthwise.h); as groups of GEMMs each would
  // be a 1-row matrix product.
  if (p.groups > 1 && cin_g == 1) {
    DepthwiseShape s;
    s.N = g.N, s.C = g.C, s.H = g.H, s.W = g.W, s.cout = p.cout;
    s.kh = g.kh, s.kw = g.kw, s.sh = g.sh, s.sw = g.sw, s.dh = g.dh, s.dw = g.dw;
    s.ph = g.ph_lo, s.pw = g.pw_lo, s.oh = g.oh, s.ow = g.ow;
    depthwise_conv2d(s, in, wp, bp, o, epi);
    return;
  }
  // Narrow groups (ResNeXt's, RegNet's), float32 on AVX-512: one batched
  // kernel over every group (runtime/kernels/conv_grouped.h); as one GEMM
  // per group each product would have a handful of rows.
  if constexpr (std::is_same_v<T, float>) {
    GroupedShape s;
    s.N = g.N, s.C = g.C, s.H = g.H, s.W = g.W, s.cout = p.cout, s.groups = p.groups;
    s.kh = g.kh, s.kw = g.kw, s.sh = g.sh, s.sw = g.sw, s.dh = g.dh, s.dw = g.dw;
    s.ph = g.ph_lo, s.pw = g.pw_lo, s.oh = g.oh, s.ow = g.ow;
    if (grouped_conv2d_applies(s)) {
      grouped_conv2d(s, in, wp, bp, o);
      // (the batched kernel has no epilogue of its own: one pass after it)
      if (epi.active())
        parallel_for(g.N * p.cout, std::max<int64_t>(1, 4096 / P),
                     [&](int64_t lo, int64_t hi) {
                       for (int64_t r = lo; r < hi; ++r) epi.apply(r % p.cout, o + r * P, P);
                     });
      return;
    }
  }
  // A 1x1 window, unit stride, no padding: each sample's input planes are
  // the matrix, one GEMM per sample straight into the output.
  const bool pointwise = kk == 1 && g.sh == 1 && g.sw == 1 && g.ph_lo == 0 && g.ph_hi == 0 && g.pw_lo == 0 &&
                         g.pw_hi == 0 && P == g.H * g.W;
  if (pointwise) {
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t grp = 0; grp < p.groups; ++grp) {
        T* og = o + (n * p.cout + grp * cout_g) * P;
        gemm(wp + grp * cout_g * K, in + ((n * g.C) + grp * cin_g) * g.H * g.W, og, cout_g, P, K, P);
        if (!bp && !epi.active()) continue;
        // The bias and the epilogue while this GEMM's output is in cache.
        for (int64_t c = 0; c < cout_g; ++c) {
          T* dst = og + c * P;
          if (bp)
            for (int64_t i = 0; i < P; ++i) dst[i] += bp[grp * cout_g + c];
          epi.apply(grp * cout_g + c, dst, P);
        }
      }
    return;
  }
  // Otherwise im2col and one GEMM per group of samples: the group's patches
  // side by side ([K, nn * P]), enough samples that the GEMM has a few
  // hundred columns (a ResNet's last stages have P of 4 or 16, and a GEMM
  // that small is mostly call overhead). Groups run in parallel, each on one
  // thread with its own scratch; with fewer groups than threads, one group
  // at a time with the im2col and the GEMM split over the pool instead.
  const int64_t per_group =
      std::max<int64_t>(1, std::min<int64_t>(g.N, std::min<int64_t>(256 / P + (256 % P != 0), (int64_t(1) << 22) / (K * P))));
  const int64_t n_groups = (g.N + per_group - 1) / per_group;
  // Unit strides and mostly real positions in the padded planes: no im2col
  // (conv_direct_f32). Fewer than 8 columns a row: the gather below wins.
  const int64_t Hp = g.H + g.ph_lo + g.ph_hi, Wp = g.W + g.pw_lo + g.pw_hi;
  bool direct = false, phased = false, implicit = false;
  if constexpr (std::is_same_v<T, float>) {
    direct = own_gemm_f32() && g.sh == 1 && g.sw == 1 && g.ow >= 8 && 10 * P >= 6 * Hp * Wp;
    // 'same' layers: the GEMM packs its B panels from the unpadded input
    // under the taps' masks (an implicit im2col: no padded copy, no
    // padding columns computed, no copy out). Every panel is packed, which
    // pays from 32 output channels (4 row tiles a panel); with 16
    // (RegNetX's 16-wide groups at 28x28) the padded planes were 1.1x faster.
    implicit = own_gemm_f32() && g.sh == 1 && g.sw == 1 && g.oh == g.H && g.ow == g.W && cout_g >= 32;
    // Strided windows on rows of 8 or more: phase planes (kernels/conv_strided.h).
    // Not a 1x1 window: it reads one phase of the sh * sw the copy makes.
    phased = own_gemm_f32() && (g.sh > 1 || g.sw > 1) && kk > 1 && g.ow >= 8;
  }
  ConvWindow win;
  win.H = g.H, win.W = g.W, win.kh = g.kh, win.kw = g.kw, win.sh = g.sh, win.sw = g.sw, win.dh = g.dh, win.dw = g.dw;
  win.ph = g.ph_lo, win.pw = g.pw_lo, win.oh = g.oh, win.ow = g.ow;
  SameTaps same;
  std::vector<int64_t> tap_offset;
  std::vector<int32_t> tap_index;
  if (implicit) {
    same = same_taps(win);
    for (int64_t k = 0; k < K; ++k) {
      tap_offset.push_back((k / kk) * g.H * g.W + same.offset[size_t(k % kk)]);
      tap_index.push_back(int32_t(k % kk));
    }
  }
  auto run_group = [&](int64_t n0, int64_t nn, bool inner_parallel) {
    if constexpr (std::is_same_v<T, float>) {
      // The epilogue of one sample's group, right after its GEMM: those
      // cout_g planes are still in cache.
      auto epilogue = [&](int64_t smp, int64_t grp) {
        if (!epi.active()) return;
        T* og = o + (smp * p.cout + grp * cout_g) * P;
        for (int64_t c = 0; c < cout_g; ++c) epi.apply(grp * cout_g + c, og + c * P, P);
      };
      if (implicit) {
        for (int64_t smp = n0; smp < n0 + nn; ++smp)
          for (int64_t grp = 0; grp < p.groups; ++grp) {
            conv_same_f32(same, tap_offset, tap_index, P, in + ((smp * g.C) + grp * cin_g) * g.H * g.W,
                          wp + grp * cout_g * K, cout_g, bp ? bp + grp * cout_g : nullptr,
                          o + (smp * p.cout + grp * cout_g) * P, inner_parallel);
            epilogue(smp, grp);
          }
        return;
      }
      if (phased) {
        for (int64_t smp = n0; smp < n0 + nn; ++smp)
          for (int64_t grp = 0; grp < p.groups; ++grp) {
            conv2d_phases_f32(win, in + ((smp * g.C) + grp * cin_g) * g.H * g.W, cin_g, wp + grp * cout_g * K, cout_g,
                              bp ? bp + grp * cout_g : nullptr, o + (smp * p.cout + grp * cout_g) * P, inner_parallel);
            epilogue(smp, grp);
          }
        return;
      }
      if (direct) {
        for (int64_t grp = 0; grp < p.groups; ++grp)
          conv_direct_f32(g, in + ((n0 * g.C) + grp * cin_g) * g.H * g.W, cin_g, nn, wp + grp * cout_g * K, cout_g,
                          bp ? bp + grp * cout_g : nullptr, o + (n0 * p.cout + grp * cout_g) * P, p.cout * P,
                          inner_parallel, epi, grp * cout_g);
        return;
      }
    }
    // Per-thread scratch, kept between calls (allocating it per call costs
    // page faults every time: glibc returns blocks this size to the OS).
    thread_local std::vector<T> scratch;
    const int64_t ld = gemm_padded_ld(nn * P);  // cols' row stride
    const size_t need = size_t(K * ld + (nn > 1 ? cout_g * nn * P : 0));
    if (scratch.size() < need) scratch.resize(need);
    T* cp = scratch.data();
    T* rp = cp + K * ld;
    // Measured on a ResNet's stages: the gather beats row copies below 16
    // positions a row, and the shifted block of a 'same' convolution from 8.
    const bool gather = g.ow < 16 && !(g.ow >= 8 && g.sh == 1 && g.sw == 1 && g.ow == g.W);
    thread_local std::vector<T> planes;
    thread_local std::vector<int32_t> table;
    if (gather) {
      planes.resize(size_t(nn * cin_g * (g.H * g.W + 1)));
      gather_table(g, nn, cin_g, table);
    }
    // Pointers, not the thread_locals: the im2col below may run on workers.
    T* const pl = planes.data();
    const int32_t* const tb = table.data();
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      const T* sample0 = in + ((n0 * g.C) + grp * cin_g) * g.H * g.W;
      const int64_t HW = g.H * g.W;
      if (gather) {  // the group's planes, each followed by a 0 (im2col_gather)
        for (int64_t smp = 0; smp < nn; ++smp)
          for (int64_t c = 0; c < cin_g; ++c) {
            const T* src = sample0 + smp * g.C * HW + c * HW;
            T* dst = pl + (smp * cin_g + c) * (HW + 1);
            std::copy(src, src + HW, dst);
            dst[HW] = T(0);
          }
      }
      auto im2col = [&](int64_t lo, int64_t hi) {
        if (gather) im2col_gather(g, pl, tb, nn * P, lo, hi, cp, ld);
        else im2col_rows(g, sample0, g.C * HW, nn, lo, hi, cp, ld);
      };
      if (inner_parallel) parallel_for(K, std::max<int64_t>(1, 8192 / (nn * P)), im2col);
      else im2col(0, K);
      const T* wg = wp + grp * cout_g * K;
      T* og = o + (n0 * p.cout + grp * cout_g) * P;
      auto finish = [&](int64_t lo, int64_t hi) {  // rows (s, c) of the group's output, bias added, then the epilogue
        for (int64_t r = lo; r < hi; ++r) {
          const int64_t smp = r / cout_g, c = r % cout_g;
          T* dst = og + (smp * p.cout + c) * P;
          const T add = bp ? bp[grp * cout_g + c] : T(0);
          if (nn > 1) {
            const T* src = rp + c * (nn * P) + smp * P;
            for (int64_t i = 0; i < P; ++i) dst[i] = src[i] + add;
          } else if (bp) {
            for (int64_t i = 0; i < P; ++i) dst[i] += add;
          }
          epi.apply(grp * cout_g + c, dst, P);
        }
      };
      gemm(wg, cp, nn > 1 ? rp : og, cout_g, nn * P, K, ld);  // [cout_g, K] x [K, nn * P]
      if (nn == 1 && !bp && !epi.active()) continue;
      if (inner_parallel) parallel_for(nn * cout_g, std::max<int64_t>(1, 4096 / P), finish);
      else finish(0, nn * cout_g);
    }
  };
  if (n_groups >= num_threads()) {
    parallel_for(n_groups, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t gi = lo; gi < hi; ++gi)
        run_group(gi * per_group, std::min(per_group, g.N - gi * per_group), false);
    });
  } else {
    for (int64_t n0 = 0; n0 < g.N; n0 += per_group) run_group(n0, std::min(per_group, g.N - n0), true);
  }
}

}  // namespace

Tensor conv_shape(const OpArgs& args) {
  const ConvPlan p = plan_conv(args);
  return Tensor::meta(p.g.out_sizes(p.cout), p.dtype);
}

namespace {

// conv2d's output with an epilogue: what conv_eager computes when `epi` is
// empty. The per-channel tensors are made contiguous in the conv's dtype.
Value conv_with_epilogue(const OpArgs& args, const Tensor& scale, const Tensor& shift, const Tensor& residual,
                         ConvActivation act) {
  const ConvPlan p = plan_conv(args);
  Tensor out = Tensor::uninitialized(p.g.out_sizes(p.cout), p.dtype);
  if (out.numel() == 0) return Value::tensor(out);
  const Tensor x4 = as_nchw(args.tensor(0), p.g, p.dtype);
  const Tensor bias = args.is_none(2) ? Tensor() : args.tensor(2);
  const Tensor sc = scale.defined() ? scale.contiguous() : Tensor(), sh = shift.defined() ? shift.contiguous() : Tensor();
  const Tensor res = residual.defined() ? residual.contiguous() : Tensor();
  auto run = [&](auto zero) {
    using T = decltype(zero);
    ConvEpilogue<T> epi;
    epi.scale = sc.defined() ? sc.data<T>() : nullptr;
    epi.shift = sh.defined() ? sh.data<T>() : nullptr;
    epi.residual = res.defined() ? res.data<T>() : nullptr;
    epi.out = out.data<T>();
    epi.act = act;
    conv_run<T>(p, x4, args.tensor(1), bias, out, epi);
  };
  if (p.dtype == DType::Float32) run(0.0f);
  else run(0.0);
  return Value::tensor(out);
}

}  // namespace

Value conv_eager(const OpArgs& args) {
  return conv_with_epilogue(args, Tensor(), Tensor(), Tensor(), ConvActivation::None);
}

Tensor conv_act_shape(const OpArgs& args) {
  const ConvPlan p = plan_conv(args);
  if (p.g.R != 2 || args.tensor(0).dim() != 4)
    throw_error(ErrorKind::RuntimeError, "_conv2d_act(): input must be 4-D (N, C, H, W), got shape " +
                                             shape_str(args.tensor(0).sizes()));
  for (size_t i : {size_t(7), size_t(8)}) {
    if (args.is_none(i)) continue;
    const Tensor t = args.tensor(i);
    if (t.dim() != 1 || t.sizes()[0] != p.cout || t.dtype() != p.dtype)
      throw_error(ErrorKind::RuntimeError, "_conv2d_act(): " + args.param_name(i) + " must be " +
                                               dtype_name(p.dtype) + "[" + std::to_string(p.cout) + "], got " +
                                               dtype_name(t.dtype()) + shape_str(t.sizes()));
  }
  ConvActivation act;
  if (!args[9].is(Kind::Str) || !parse_conv_activation(args[9].as_str(), act))
    throw_error(ErrorKind::RuntimeError, "_conv2d_act(): unknown activation " + repr(args[9]));
  const Shape out = p.g.out_sizes(p.cout);
  if (!args.is_none(10)) {
    const Tensor r = args.tensor(10);
    if (r.sizes() != out || r.dtype() != p.dtype)
      throw_error(ErrorKind::RuntimeError, "_conv2d_act(): residual must be " + std::string(dtype_name(p.dtype)) +
                                               shape_str(out) + ", got " + dtype_name(r.dtype()) + shape_str(r.sizes()));
  }
  return Tensor::meta(out, p.dtype);
}

Value conv_act_eager(const OpArgs& args) {
  conv_act_shape(args);
  ConvActivation act = ConvActivation::None;
  parse_conv_activation(args[9].as_str(), act);
  return conv_with_epilogue(args, args.is_none(7) ? Tensor() : args.tensor(7), args.is_none(8) ? Tensor() : args.tensor(8),
                            args.is_none(10) ? Tensor() : args.tensor(10), act);
}

}  // namespace kiln::runtime

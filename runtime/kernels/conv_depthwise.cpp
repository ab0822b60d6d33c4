#include "runtime/kernels/conv_depthwise.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "runtime/base/thread_pool.h"
#include "runtime/kernels/conv_phases.h"
#include "runtime/kernels/gemm_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::runtime {
namespace {

// ext[q] = bias + sum_t w[t] * q_planes[tap[t] + q] for q in [0, Epad):
// a tap-outer loop over a block of positions the compiler vectorizes (the
// portable path: float64, and float32 without AVX-512).
template <class T>
void extended_generic(const PhaseLayout& l, const T* qp, const T* w, T bias, T* ext) {
  const int64_t taps = int64_t(l.tap.size());
  for (int64_t q0 = 0; q0 < l.Epad; q0 += kPhaseBlock) {
    T acc[kPhaseBlock];
    for (int64_t i = 0; i < kPhaseBlock; ++i) acc[i] = bias;
    for (int64_t t = 0; t < taps; ++t) {
      const T wt = w[t];
      const T* src = qp + l.tap[size_t(t)] + q0;
      for (int64_t i = 0; i < kPhaseBlock; ++i) acc[i] += wt * src[i];
    }
    std::copy(acc, acc + kPhaseBlock, ext + q0);
  }
}

#if defined(__x86_64__)
// The same with four zmm accumulators: per tap, four loads and one
// broadcast (folded into the FMA) for four FMAs.
__attribute__((target("avx512f"))) void extended_avx512(const PhaseLayout& l, const float* qp, const float* w, float bias,
                                                        float* ext) {
  const int64_t taps = int64_t(l.tap.size());
  const int64_t* tap = l.tap.data();
  for (int64_t q0 = 0; q0 < l.Epad; q0 += kPhaseBlock) {
    __m512 a0 = _mm512_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t t = 0; t < taps; ++t) {
      const __m512 wt = _mm512_set1_ps(w[t]);
      const float* src = qp + tap[t] + q0;
      a0 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(src), a0);
      a1 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(src + 16), a1);
      a2 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(src + 32), a2);
      a3 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(src + 48), a3);
    }
    _mm512_storeu_ps(ext + q0, a0);
    _mm512_storeu_ps(ext + q0 + 16, a1);
    _mm512_storeu_ps(ext + q0 + 32, a2);
    _mm512_storeu_ps(ext + q0 + 48, a3);
  }
}
#endif

// A stride-1 convolution whose output is as large as its input (padding
// 'same', the common depthwise layer) needs no copy at all: each tap is
// one shifted run of the plane itself under lane masks (SameTaps,
// conv_phases.h).

#if defined(__x86_64__)
// out[P] = bias + sum_t w[t] * plane[q + offset[t]] (masked), four blocks
// of 16 positions at a time (four independent FMA chains), then single
// blocks, the last one stored under the mask of the positions that exist.
__attribute__((target("avx512f"))) void same_plane_avx512(const SameTaps& m, int64_t P, const float* plane,
                                                          const float* w, float bias, float* out) {
  const int64_t taps = int64_t(m.offset.size());
  const int64_t* off = m.offset.data();
  const uint16_t* mk = m.mask.data();
  int64_t b = 0;
  for (; (b + 4) * 16 <= P; b += 4) {
    const float* src = plane + b * 16;
    const uint16_t* k0 = mk + b * taps;
    __m512 a0 = _mm512_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t t = 0; t < taps; ++t) {
      const __m512 wt = _mm512_set1_ps(w[t]);
      const float* p = src + off[t];
      a0 = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(__mmask16(k0[t]), p), a0);
      a1 = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(__mmask16(k0[taps + t]), p + 16), a1);
      a2 = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(__mmask16(k0[2 * taps + t]), p + 32), a2);
      a3 = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(__mmask16(k0[3 * taps + t]), p + 48), a3);
    }
    _mm512_storeu_ps(out + b * 16, a0);
    _mm512_storeu_ps(out + b * 16 + 16, a1);
    _mm512_storeu_ps(out + b * 16 + 32, a2);
    _mm512_storeu_ps(out + b * 16 + 48, a3);
  }
  for (; b < m.blocks; ++b) {
    const float* src = plane + b * 16;
    const uint16_t* k0 = mk + b * taps;
    __m512 a0 = _mm512_set1_ps(bias);
    for (int64_t t = 0; t < taps; ++t)
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(w[t]), _mm512_maskz_loadu_ps(__mmask16(k0[t]), src + off[t]), a0);
    const int64_t n = std::min<int64_t>(16, P - b * 16);
    _mm512_mask_storeu_ps(out + b * 16, __mmask16(n == 16 ? 0xffffu : (1u << n) - 1), a0);
  }
}
#endif

// Wide planes at stride 1 (ow >= 16): the loads, not the FMAs, bound the
// extended kernels (a zmm load per FMA, plus a mask), so here an input row
// vector, once loaded, feeds every output row that reads it: kRows output
// rows x CB column blocks of 16 are accumulated at once (4 x CB zmm), and
// input row u of the group (u = r + ki * dh) at tap column kj is one load
// for up to kRows FMAs. Columns that would read padding are masked per
// (column block, kj) (ColMasks); rows past the input are skipped.
constexpr int kRows = 4;

struct ColMasks {
  int64_t blocks = 0;          // ceil(ow / 16)
  std::vector<uint16_t> load;  // [blocks][kw]: lanes whose input column exists
  std::vector<uint16_t> store; // [blocks]: lanes whose output column exists
};

ColMasks col_masks(const DepthwiseShape& s) {
  ColMasks m;
  m.blocks = (s.ow + 15) / 16;
  m.load.assign(size_t(m.blocks * s.kw), 0);
  m.store.assign(size_t(m.blocks), 0);
  for (int64_t oj = 0; oj < s.ow; ++oj) {
    const int64_t b = oj / 16;
    m.store[size_t(b)] |= uint16_t(1u << (oj % 16));
    for (int64_t kj = 0; kj < s.kw; ++kj) {
      const int64_t j = oj + kj * s.dw - s.pw;
      if (j >= 0 && j < s.W) m.load[size_t(b * s.kw + kj)] |= uint16_t(1u << (oj % 16));
    }
  }
  return m;
}

#if defined(__x86_64__)
// Output rows [oi0, oi0 + rr) x column blocks [b0, b0 + CB) of one plane.
template <int CB>
__attribute__((target("avx512f"))) void rows_group_avx512(const DepthwiseShape& s, const ColMasks& m, int64_t oi0,
                                                          int64_t rr, int64_t b0, const float* plane, const float* w,
                                                          float bias, float* out) {
  __m512 acc[kRows][CB];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_set1_ps(bias);
  const int64_t span = (rr - 1) + (s.kh - 1) * s.dh;  // input rows of the group: u in [0, span]
  for (int64_t u = 0; u <= span; ++u) {
    const int64_t ir = oi0 + u - s.ph;
    if (ir < 0 || ir >= s.H) continue;
    // The output rows r that read this input row, and the weight row each uses.
    const float* wr[kRows];
    bool use[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const int64_t d = u - r;
      use[r] = r < rr && d >= 0 && d % s.dh == 0 && d / s.dh < s.kh;
      wr[r] = use[r] ? w + (d / s.dh) * s.kw : w;
    }
    const float* row = plane + ir * s.W;
    for (int64_t kj = 0; kj < s.kw; ++kj) {
      __m512 v[CB];
#pragma GCC unroll 4
      for (int c = 0; c < CB; ++c)
        v[c] = _mm512_maskz_loadu_ps(__mmask16(m.load[size_t((b0 + c) * s.kw + kj)]),
                                     row + (b0 + c) * 16 + kj * s.dw - s.pw);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        if (!use[r]) continue;
        const __m512 wt = _mm512_set1_ps(wr[r][kj]);
#pragma GCC unroll 4
        for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_fmadd_ps(wt, v[c], acc[r][c]);
      }
    }
  }
  // Every index constant (no loop bound of rr): the accumulators stay in
  // registers only when no access needs them addressable.
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < CB; ++c)
      if (r < rr) _mm512_mask_storeu_ps(out + (oi0 + r) * s.ow + (b0 + c) * 16, __mmask16(m.store[size_t(b0 + c)]), acc[r][c]);
}

__attribute__((target("avx512f"))) void rows_plane_avx512(const DepthwiseShape& s, const ColMasks& m,
                                                          const float* plane, const float* w, float bias, float* out) {
  for (int64_t oi0 = 0; oi0 < s.oh; oi0 += kRows) {
    const int64_t rr = std::min<int64_t>(kRows, s.oh - oi0);
    int64_t b = 0;
    for (; b + 4 <= m.blocks; b += 4) rows_group_avx512<4>(s, m, oi0, rr, b, plane, w, bias, out);
    switch (m.blocks - b) {
      case 3: rows_group_avx512<3>(s, m, oi0, rr, b, plane, w, bias, out); break;
      case 2: rows_group_avx512<2>(s, m, oi0, rr, b, plane, w, bias, out); break;
      case 1: rows_group_avx512<1>(s, m, oi0, rr, b, plane, w, bias, out); break;
      default: break;
    }
  }
}
#endif

#if defined(__x86_64__)
// GCC 12 warns, wrongly, that the intrinsics' own _mm512_undefined_ps()
// (a self-initialised variable) may be used uninitialised once
// transpose16 is inlined: silenced for it and its callers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// r[i][j] -> r[j][i] for a 16 x 16 block of floats in 16 zmm: pairs
// interleaved, then quads, then 128-bit lanes twice (64 shuffles).
// Always inlined: called, the 16 vectors went through memory.
__attribute__((target("avx512f"), always_inline)) inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
    t[4 + k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
    t[8 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    t[12 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd);
    r[4 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0x88);
    r[12 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0xdd);
  }
}

// Lanes [0, n) of a 16-lane mask, n clamped to [0, 16].
inline __mmask16 first_lanes(int64_t n) {
  return __mmask16(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
}

// Narrow planes under a window as wide as theirs (ConvNeXt's 7x7 window
// on 7x7 and 14x14 planes, 5x5 on 14x14): vectors over 16 channels instead
// of positions, as oneDNN does, so no lane is wasted on a plane's edge.
// Per output row the OW accumulators and one row of the window's weights
// (KW vectors) stay in registers and each input vector, loaded once, feeds
// up to KW FMAs: FMA-bound, not load-bound. The channels are transposed
// into [rows][cols][16] and out of it 16 x 16 blocks at a time in
// registers (transpose16), and so are the weights: the gather per input
// position, the scatter per output position and the scalar weight copy
// they replace cost as much as the FMAs (768x7x7 at batch 2: 102 -> 81 us). Unit stride and dilation only; OW and KW are
// template constants so the loops unroll into register code.
template <int OW, int KW>
__attribute__((target("avx512f"))) void channel_block_avx512(const DepthwiseShape& s, const float* in,
                                                             const float* weight, const float* bias, float* out,
                                                             int64_t n, int64_t c0, float* buf) {
  static_assert(OW <= 16, "an output row is one 16 x 16 transpose");
  const int64_t Hp = s.oh + s.kh - 1, Wp = OW + KW - 1, HW = s.H * s.W, P = s.oh * OW;
  const int64_t nc = std::min<int64_t>(16, s.C - c0);
  const __mmask16 cm = first_lanes(nc);
  float* T = buf;                      // [Hp][Wp][16], zero on padding
  float* Wt = buf + Hp * Wp * 16;      // [kh][KW][16]
  const float* src = in + (n * s.C + c0) * HW;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t r = 0; r < Hp; ++r) {
    const int64_t i = r - s.ph;
    float* trow = T + r * Wp * 16;
    if (i < 0 || i >= s.H) {
      for (int64_t jj = 0; jj < Wp; ++jj) _mm512_storeu_ps(trow + jj * 16, zero);
      continue;
    }
    for (int64_t jj = 0; jj < std::min<int64_t>(Wp, s.pw); ++jj) _mm512_storeu_ps(trow + jj * 16, zero);
    for (int64_t jj = s.pw + s.W; jj < Wp; ++jj) _mm512_storeu_ps(trow + jj * 16, zero);
    // The input row's columns [j0, j0 + 16) of the 16 channels, transposed:
    // v[j] holds column j0 + j of every channel (channels past nc are 0).
    for (int64_t j0 = 0; j0 < s.W; j0 += 16) {
      const __mmask16 lm = first_lanes(s.W - j0);
      __m512 v[16];
#pragma GCC unroll 16
      for (int c = 0; c < 16; ++c) v[c] = c < nc ? _mm512_maskz_loadu_ps(lm, src + c * HW + i * s.W + j0) : zero;
      transpose16(v);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        const int64_t jj = s.pw + j0 + j;
        if (j0 + j < s.W && jj >= 0 && jj < Wp) _mm512_storeu_ps(trow + jj * 16, v[j]);
      }
    }
  }
  // The weights likewise, 16 taps at a time: [16 channels][taps] -> [taps][16]
  // (a scalar copy here was a fifth of the kernel).
  const int64_t taps = s.kh * KW;
  for (int64_t t0 = 0; t0 < taps; t0 += 16) {
    const __mmask16 lm = first_lanes(taps - t0);
    __m512 v[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) v[c] = c < nc ? _mm512_maskz_loadu_ps(lm, weight + (c0 + c) * taps + t0) : zero;
    transpose16(v);
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t)
      if (t0 + t < taps) _mm512_storeu_ps(Wt + (t0 + t) * 16, v[t]);
  }
  __m512 b = _mm512_setzero_ps();
  if (bias) b = _mm512_maskz_loadu_ps(cm, bias + c0);
  float* dst = out + (n * s.C + c0) * P;
  const __mmask16 om = first_lanes(OW);
  for (int64_t oi = 0; oi < s.oh; ++oi) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int o = 0; o < 16; ++o) acc[o] = o < OW ? b : zero;
    for (int64_t ki = 0; ki < s.kh; ++ki) {
      const float* row = T + (oi + ki) * Wp * 16;
      __m512 w[KW];
#pragma GCC unroll 8
      for (int kj = 0; kj < KW; ++kj) w[kj] = _mm512_loadu_ps(Wt + (ki * KW + kj) * 16);
#pragma GCC unroll 32
      for (int jj = 0; jj < OW + KW - 1; ++jj) {
        const __m512 v = _mm512_loadu_ps(row + jj * 16);
#pragma GCC unroll 8
        for (int kj = 0; kj < KW; ++kj) {
          const int o = jj - kj;
          if (o >= 0 && o < OW) acc[o] = _mm512_fmadd_ps(w[kj], v, acc[o]);
        }
      }
    }
    // acc[o] lane c -> channel c's row oi, column o.
    transpose16(acc);
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c)
      if (c < nc) _mm512_mask_storeu_ps(dst + c * P + oi * OW, om, acc[c]);
  }
}

#pragma GCC diagnostic pop

using ChannelBlockFn = void (*)(const DepthwiseShape&, const float*, const float*, const float*, float*, int64_t,
                                int64_t, float*);

// The instantiation for this layer, or null.
ChannelBlockFn channel_block_for(const DepthwiseShape& s) {
  if (!has_avx512() || s.sh != 1 || s.sw != 1 || s.dh != 1 || s.dw != 1 || s.cout != s.C || s.C < 16) return nullptr;
  // Measured against the position-vector paths (same_plane_avx512) at
  // batch 2: 1.7x faster for 7x7 windows on 7x7 planes (768 channels),
  // 1.2x on 14x14 (384); slower for 3x3 on 7x7 and 5x5 on 14x14 (0.7x,
  // 0.6x: the gathers and scatters the transposes were then cost more
  // than the lanes those waste).
  if (s.ow == 7 && s.kw == 7) return &channel_block_avx512<7, 7>;
  if (s.ow == 14 && s.kw == 7) return &channel_block_avx512<14, 7>;
  return nullptr;
}
#endif

#if defined(__x86_64__)
// rows_group_avx512 with the whole window's weights in registers (3x3 and
// 5x5, unit stride and dilation; `wv`: an array of broadcast vectors, or
// MemWeights below): there a broadcast weight per FMA made the loads, not
// the FMAs, the bound. KH * KW weights + R * CB
// accumulators + CB input vectors must fit the 32 zmm: 3x3 runs 4 rows x
// up to 4 column blocks, 5x5 2 rows x up to 2. Every loop but the one over
// the plane's row groups is unrolled, so the indices are constants and
// nothing is spilled; rows past the output are computed and not stored.
template <int KH, int KW, int R, int CB, class Weights>
__attribute__((target("avx512f"))) inline void rows_reg_group(const DepthwiseShape& s, const ColMasks& m,
                                                               const Weights& wv, int64_t oi0, int64_t b0,
                                                               const float* plane, float bias, float* out) {
  __m512 acc[R][CB];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_set1_ps(bias);
#pragma GCC unroll 16
  for (int u = 0; u < R + KH - 1; ++u) {
    const int64_t ir = oi0 + u - s.ph;
    if (ir < 0 || ir >= s.H) continue;
    const float* row = plane + ir * s.W + b0 * 16 - s.pw;
#pragma GCC unroll 8
    for (int kj = 0; kj < KW; ++kj) {
      __m512 v[CB];
#pragma GCC unroll 8
      for (int c = 0; c < CB; ++c)
        v[c] = _mm512_maskz_loadu_ps(__mmask16(m.load[size_t((b0 + c) * KW + kj)]), row + c * 16 + kj);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int ki = u - r;
        if (ki < 0 || ki >= KH) continue;
        const __m512 wt = wv[ki * KW + kj];
#pragma GCC unroll 8
        for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_fmadd_ps(wt, v[c], acc[r][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < CB; ++c)
      if (oi0 + r < s.oh)
        _mm512_mask_storeu_ps(out + (oi0 + r) * s.ow + (b0 + c) * 16, __mmask16(m.store[size_t(b0 + c)]), acc[r][c]);
}

template <int KH, int KW, int R, int CB>
__attribute__((target("avx512f"))) void rows_reg_plane(const DepthwiseShape& s, const ColMasks& m, const float* plane,
                                                        const float* w, float bias, float* out) {
  __m512 wv[KH * KW];
#pragma GCC unroll 32
  for (int t = 0; t < KH * KW; ++t) wv[t] = _mm512_set1_ps(w[t]);
  for (int64_t oi0 = 0; oi0 < s.oh; oi0 += R) {
    int64_t b = 0;
    for (; b + CB <= m.blocks; b += CB) rows_reg_group<KH, KW, R, CB>(s, m, wv, oi0, b, plane, bias, out);
    for (; b < m.blocks; ++b) rows_reg_group<KH, KW, R, 1>(s, m, wv, oi0, b, plane, bias, out);
  }
}

// The window's weights broadcast from memory where, with the
// accumulators, they would not fit the registers (7x7: ConvNeXt's). Still
// every loop unrolled and no division per row (rows_plane_avx512, the
// general path, tests each input row against each output row and runs a
// loop per tap column): 96x56x56 at batch 2, 940 -> 590 us.
struct MemWeights {
  const float* w;
  __attribute__((target("avx512f"))) __m512 operator[](int t) const { return _mm512_set1_ps(w[t]); }
};

template <int KH, int KW, int R, int CB>
__attribute__((target("avx512f"))) void rows_mem_plane(const DepthwiseShape& s, const ColMasks& m, const float* plane,
                                                        const float* w, float bias, float* out) {
  const MemWeights wv{w};
  for (int64_t oi0 = 0; oi0 < s.oh; oi0 += R) {
    int64_t b = 0;
    for (; b + CB <= m.blocks; b += CB) rows_reg_group<KH, KW, R, CB>(s, m, wv, oi0, b, plane, bias, out);
    for (; b < m.blocks; ++b) rows_reg_group<KH, KW, R, 1>(s, m, wv, oi0, b, plane, bias, out);
  }
}

using RowsPlaneFn = void (*)(const DepthwiseShape&, const ColMasks&, const float*, const float*, float, float*);

// The register-weight instantiation for this layer, or rows_plane_avx512.
RowsPlaneFn rows_plane_for(const DepthwiseShape& s) {
  if (s.dh == 1 && s.dw == 1 && s.kh == 3 && s.kw == 3) return &rows_reg_plane<3, 3, 4, 4>;
  if (s.dh == 1 && s.dw == 1 && s.kh == 5 && s.kw == 5) return &rows_reg_plane<5, 5, 2, 2>;
  if (s.dh == 1 && s.dw == 1 && s.kh == 7 && s.kw == 7) return &rows_mem_plane<7, 7, 4, 4>;
  return &rows_plane_avx512;
}
#endif

template <class T>
void extended(const PhaseLayout& l, const T* qp, const T* w, T bias, T* ext) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (has_avx512()) return extended_avx512(l, qp, w, bias, ext);
  }
#endif
  extended_generic(l, qp, w, bias, ext);
}

// Each output plane gets the epilogue (conv_epilogue.h) right after it is
// written, while it is still in cache.
template <class T>
void run(const DepthwiseShape& s, const T* in, const T* weight, const T* bias, T* out, const ConvEpilogue<T>& epi) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (const ChannelBlockFn fn = channel_block_for(s)) {
      const int64_t blocks = (s.C + 15) / 16, per_block = 16 * s.oh * s.ow * s.kh * s.kw;
      const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, per_block));
      const size_t scratch = size_t((s.oh + s.kh - 1) * (s.ow + s.kw - 1) * 16 + s.kh * s.kw * 16);
      parallel_for(s.N * blocks, grain, [&](int64_t lo, int64_t hi) {
        thread_local std::vector<float> buf;
        if (buf.size() < scratch) buf.resize(scratch);
        for (int64_t b = lo; b < hi; ++b) {
          const int64_t n = b / blocks, c0 = (b % blocks) * 16;
          fn(s, in, weight, bias, out, n, c0, buf.data());
          if (epi.active())
            for (int64_t c = c0; c < std::min(c0 + 16, s.C); ++c)
              epi.apply(c, out + (n * s.cout + c) * s.oh * s.ow, s.oh * s.ow);
        }
      });
      return;
    }
    // Rows of 16 or more; with the window's weights in registers (3x3,
    // 5x5) from 8: measured at 14 columns, 1.2x the masked position
    // vectors below (672x14x14 5x5: 337 -> 276 us), equal at 7.
    const bool reg = s.dh == 1 && s.dw == 1 && s.kh == s.kw && (s.kh == 3 || s.kh == 5);
    if (has_avx512() && s.sh == 1 && s.sw == 1 && (s.ow >= 16 || (reg && s.ow >= 8))) {
      const ColMasks masks = col_masks(s);
      const RowsPlaneFn plane_fn = rows_plane_for(s);
      const int64_t m = s.cout / s.C, taps = s.kh * s.kw, P = s.oh * s.ow;
      const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, m * P * taps));
      parallel_for(s.N * s.C, grain, [&](int64_t lo, int64_t hi) {
        for (int64_t plane = lo; plane < hi; ++plane) {
          const int64_t n = plane / s.C, c = plane % s.C;
          for (int64_t k = 0; k < m; ++k) {
            const int64_t o = c * m + k;
            plane_fn(s, masks, in + plane * s.H * s.W, weight + o * taps, bias ? bias[o] : 0.0f,
                     out + (n * s.cout + o) * P);
            epi.apply(o, out + (n * s.cout + o) * P, P);
          }
        }
      });
      return;
    }
    if (has_avx512() && s.sh == 1 && s.sw == 1 && s.oh == s.H && s.ow == s.W) {
      const SameTaps masks = same_taps(s);
      const int64_t m = s.cout / s.C, taps = s.kh * s.kw, P = s.H * s.W;
      // Cost per input plane: its m output planes, taps FMAs per position.
      const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, m * masks.blocks * 16 * taps));
      parallel_for(s.N * s.C, grain, [&](int64_t lo, int64_t hi) {
        for (int64_t plane = lo; plane < hi; ++plane) {
          const int64_t n = plane / s.C, c = plane % s.C;
          for (int64_t k = 0; k < m; ++k) {
            const int64_t o = c * m + k;
            same_plane_avx512(masks, P, in + plane * P, weight + o * taps, bias ? bias[o] : 0.0f,
                              out + (n * s.cout + o) * P);
            epi.apply(o, out + (n * s.cout + o) * P, P);
          }
        }
      });
      return;
    }
  }
#endif
  const PhaseLayout l = phase_layout(s);
  const int64_t m = s.cout / s.C, taps = s.kh * s.kw, P = s.oh * s.ow, phases = s.sh * s.sw;
  // The cost model: element-taps per input plane (its m outputs over the
  // extended positions, plus the phase-plane copy and the write-out). A
  // chunk of the pool is at least kMinWork of them (a few microseconds):
  // below that the hand-off costs more than a second thread saves, and a
  // small layer runs on the caller alone.
  constexpr int64_t kMinWork = int64_t(1) << 18;
  const int64_t plane_cost = m * (l.Epad * taps + P) + phases * l.S;
  const int64_t grain = std::max<int64_t>(1, kMinWork / std::max<int64_t>(1, plane_cost));
  parallel_for(s.N * s.C, grain, [&](int64_t lo, int64_t hi) {
    // Per-thread scratch, kept between calls (no page faults per call).
    thread_local std::vector<T> qbuf, ebuf;
    if (qbuf.size() < size_t(phases * l.S)) qbuf.resize(size_t(phases * l.S));
    if (ebuf.size() < size_t(l.Epad)) ebuf.resize(size_t(l.Epad));
    T* const qp = qbuf.data();
    T* const ext = ebuf.data();
    for (int64_t plane = lo; plane < hi; ++plane) {
      const int64_t n = plane / s.C, c = plane % s.C;
      fill_phases(s, l, in + plane * s.H * s.W, qp);
      for (int64_t k = 0; k < m; ++k) {
        const int64_t o = c * m + k;
        extended(l, qp, weight + o * taps, bias ? bias[o] : T(0), ext);
        T* dst = out + (n * s.cout + o) * P;
        for (int64_t oi = 0; oi < s.oh; ++oi) std::memcpy(dst + oi * s.ow, ext + oi * l.L, size_t(s.ow) * sizeof(T));
        epi.apply(o, dst, P);
      }
    }
  });
}

}  // namespace

void depthwise_conv2d(const DepthwiseShape& s, const float* in, const float* weight, const float* bias, float* out,
                      const ConvEpilogue<float>& epi) {
  run(s, in, weight, bias, out, epi);
}
void depthwise_conv2d(const DepthwiseShape& s, const double* in, const double* weight, const double* bias,
                      double* out, const ConvEpilogue<double>& epi) {
  run(s, in, weight, bias, out, epi);
}

}  // namespace kiln::runtime

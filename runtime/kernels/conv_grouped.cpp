#include "runtime/kernels/conv_grouped.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/base/thread_pool.h"
#include "runtime/kernels/gemm_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::runtime {

#if defined(__x86_64__)
namespace {

// A tile is up to 6 output channels x 4 vectors of 16 positions, or 7-8
// channels x 3 vectors: at most 24 accumulators, the input vectors and a
// broadcast weight in the 32 zmm. The phase-plane path's blocks are 4
// vectors (kPhaseBlock), so its tiles stop at 6 channels.
constexpr int kMaxMR = 8;
constexpr int kPhaseMR = 6;
constexpr int kCB = 4;
constexpr int cb_for(int mr) { return mr <= 6 ? 4 : 3; }

// One tile of the 'same' path: output channels [0, MR) (their weight rows
// K apart from w, their planes P apart from out) x position blocks
// [b0, b0 + CB) of one sample, over the group's cin input planes (HW apart
// from in). Masked-off lanes are never read, so a shifted run may start
// before its plane or end after it.
template <int MR, int CB>
__attribute__((target("avx512f"))) void same_tile(const SameTaps& m, int64_t P, int64_t cin, const float* in,
                                                  const float* w, int64_t K, const float* bias, int64_t b0, float* out) {
  const int64_t taps = int64_t(m.offset.size());
  const int64_t* off = m.offset.data();
  const uint16_t* mk = m.mask.data() + b0 * taps;
  __m512 acc[MR][CB];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const __m512 b = bias ? _mm512_set1_ps(bias[i]) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int c = 0; c < CB; ++c) acc[i][c] = b;
  }
  for (int64_t ic = 0; ic < cin; ++ic) {
    const float* plane = in + ic * P + b0 * 16;
    const float* wi = w + ic * taps;
    for (int64_t t = 0; t < taps; ++t) {
      const float* p = plane + off[t];
      __m512 v[CB];
#pragma GCC unroll 4
      for (int c = 0; c < CB; ++c) v[c] = _mm512_maskz_loadu_ps(__mmask16(mk[c * taps + t]), p + c * 16);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512 wt = _mm512_set1_ps(wi[i * K + t]);
#pragma GCC unroll 4
        for (int c = 0; c < CB; ++c) acc[i][c] = _mm512_fmadd_ps(wt, v[c], acc[i][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < CB; ++c) {
    const int64_t n = std::min<int64_t>(16, P - (b0 + c) * 16);
    const __mmask16 st = __mmask16(n >= 16 ? 0xffffu : (1u << n) - 1u);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(out + i * P + (b0 + c) * 16, st, acc[i][c]);
  }
}

using SameTileFn = void (*)(const SameTaps&, int64_t, int64_t, const float*, const float*, int64_t, const float*,
                            int64_t, float*);

template <int MR>
constexpr SameTileFn same_fn(int cb) {
  return cb == 1 ? &same_tile<MR, 1> : cb == 2 ? &same_tile<MR, 2> : cb == 3 ? &same_tile<MR, 3> : &same_tile<MR, 4>;
}

SameTileFn same_tile_for(int mr, int cb) {
  switch (mr) {
    case 1: return same_fn<1>(cb);
    case 2: return same_fn<2>(cb);
    case 3: return same_fn<3>(cb);
    case 4: return same_fn<4>(cb);
    case 5: return same_fn<5>(cb);
    case 6: return same_fn<6>(cb);
    case 7: return same_fn<7>(cb);
    default: return same_fn<8>(cb);
  }
}

// One tile of the phase-plane path: output channels [0, MR) x extended
// positions [q0, q0 + 64) into ext ([MR][Epad]), over the group's cin
// input planes' phase planes (`stride` elements apart from qp).
template <int MR>
__attribute__((target("avx512f"))) void phase_tile(const PhaseLayout& l, int64_t cin, const float* qp, int64_t stride,
                                                   const float* w, int64_t K, const float* bias, int64_t q0, float* ext) {
  const int64_t taps = int64_t(l.tap.size());
  const int64_t* tap = l.tap.data();
  __m512 acc[MR][kCB];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const __m512 b = bias ? _mm512_set1_ps(bias[i]) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int c = 0; c < kCB; ++c) acc[i][c] = b;
  }
  for (int64_t ic = 0; ic < cin; ++ic) {
    const float* src = qp + ic * stride + q0;
    const float* wi = w + ic * taps;
    for (int64_t t = 0; t < taps; ++t) {
      const float* p = src + tap[t];
      __m512 v[kCB];
#pragma GCC unroll 4
      for (int c = 0; c < kCB; ++c) v[c] = _mm512_loadu_ps(p + c * 16);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512 wt = _mm512_set1_ps(wi[i * K + t]);
#pragma GCC unroll 4
        for (int c = 0; c < kCB; ++c) acc[i][c] = _mm512_fmadd_ps(wt, v[c], acc[i][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < kCB; ++c) _mm512_storeu_ps(ext + i * l.Epad + q0 + c * 16, acc[i][c]);
}

using PhaseTileFn = void (*)(const PhaseLayout&, int64_t, const float*, int64_t, const float*, int64_t, const float*,
                             int64_t, float*);

PhaseTileFn phase_tile_for(int mr) {
  static constexpr PhaseTileFn fns[kPhaseMR + 1] = {nullptr,        &phase_tile<1>, &phase_tile<2>, &phase_tile<3>,
                                                  &phase_tile<4>, &phase_tile<5>, &phase_tile<6>};
  return fns[mr];
}

// A group's output channels split into tiles of at most max_mr, as even as
// can be (12 -> 6 + 6 for max_mr 8, not 8 + 4): tile j is channels
// [j * cout_g / tiles, (j + 1) * cout_g / tiles). Fewer tiles, fewer
// loads: each tile reads the group's whole input again.
int64_t tiles_for(int64_t cout_g, int64_t max_mr) { return (cout_g + max_mr - 1) / max_mr; }

// The 'same' path's tile count: 8-channel tiles (3 vectors) or 6-channel
// ones (4 vectors), whichever loads less per pass over the plane's blocks
// (vectors + broadcasts per input channel and tap). 8 wins on long planes;
// on short ones a partial pass of 8 x 1 vector can cost more than the
// extra tiles of 6 (a 7x7 plane is 4 blocks: 8 + 8 + 8 + 8 channels take
// 3 + 1 blocks each, 6 x 6 take 4 in one pass: 0.7x the loads).
int64_t same_tiles_for(int64_t cout_g, int64_t blocks) {
  auto loads = [&](int64_t max_mr) {
    const int64_t tiles = tiles_for(cout_g, max_mr), mr = (cout_g + tiles - 1) / tiles, cb = cb_for(int(mr));
    return tiles * ((blocks / cb) * (cb + mr) + (blocks % cb ? blocks % cb + mr : 0));
  };
  return loads(kPhaseMR) < loads(kMaxMR) ? tiles_for(cout_g, kPhaseMR) : tiles_for(cout_g, kMaxMR);
}

// Below this many multiply-adds a chunk of the pool costs more to hand
// off than a second thread saves (as the depthwise kernel).
constexpr int64_t kMinWork = int64_t(1) << 18;

void run_same(const GroupedShape& s, const float* in, const float* weight, const float* bias, float* out) {
  const SameTaps m = same_taps(s);
  const int64_t cin = s.C / s.groups, cout_g = s.cout / s.groups, taps = s.kh * s.kw, K = cin * taps;
  const int64_t P = s.H * s.W, tiles = same_tiles_for(cout_g, m.blocks);
  const int64_t items = s.N * s.groups * tiles;
  const int64_t cost = (cout_g / tiles + 1) * K * m.blocks * 16;
  parallel_for(items, std::max<int64_t>(1, kMinWork / std::max<int64_t>(1, cost)), [&](int64_t lo, int64_t hi) {
    for (int64_t it = lo; it < hi; ++it) {
      const int64_t n = it / (s.groups * tiles), grp = (it / tiles) % s.groups, j = it % tiles;
      const int64_t o0 = grp * cout_g + j * cout_g / tiles, o1 = grp * cout_g + (j + 1) * cout_g / tiles;
      const int mr = int(o1 - o0);
      const float* x = in + (n * s.C + grp * cin) * P;
      const float* w = weight + o0 * K;
      const float* b = bias ? bias + o0 : nullptr;
      float* y = out + (n * s.cout + o0) * P;
      const int cb = cb_for(mr);
      const SameTileFn full = same_tile_for(mr, cb);
      int64_t b0 = 0;
      for (; b0 + cb <= m.blocks; b0 += cb) full(m, P, cin, x, w, K, b, b0, y);
      if (b0 < m.blocks) same_tile_for(mr, int(m.blocks - b0))(m, P, cin, x, w, K, b, b0, y);
    }
  });
}

void run_phases(const GroupedShape& s, const float* in, const float* weight, const float* bias, float* out) {
  const PhaseLayout l = phase_layout(s);
  const int64_t cin = s.C / s.groups, cout_g = s.cout / s.groups, taps = s.kh * s.kw, K = cin * taps;
  const int64_t HW = s.H * s.W, P = s.oh * s.ow, tiles = tiles_for(cout_g, kPhaseMR), stride = l.phases * l.S;
  const int64_t cost = cout_g * K * l.Epad + cin * stride;
  parallel_for(s.N * s.groups, std::max<int64_t>(1, kMinWork / std::max<int64_t>(1, cost)), [&](int64_t lo, int64_t hi) {
    // Per-thread scratch, kept between calls (no page faults per call).
    thread_local std::vector<float> qbuf, ebuf;
    if (qbuf.size() < size_t(cin * stride)) qbuf.resize(size_t(cin * stride));
    if (ebuf.size() < size_t(kPhaseMR * l.Epad)) ebuf.resize(size_t(kPhaseMR * l.Epad));
    float* const qp = qbuf.data();
    float* const ext = ebuf.data();
    for (int64_t it = lo; it < hi; ++it) {
      const int64_t n = it / s.groups, grp = it % s.groups;
      for (int64_t ic = 0; ic < cin; ++ic) fill_phases(s, l, in + (n * s.C + grp * cin + ic) * HW, qp + ic * stride);
      for (int64_t j = 0; j < tiles; ++j) {
        const int64_t o0 = grp * cout_g + j * cout_g / tiles, o1 = grp * cout_g + (j + 1) * cout_g / tiles;
        const int mr = int(o1 - o0);
        const PhaseTileFn fn = phase_tile_for(mr);
        for (int64_t q0 = 0; q0 < l.Epad; q0 += kPhaseBlock)
          fn(l, cin, qp, stride, weight + o0 * K, K, bias ? bias + o0 : nullptr, q0, ext);
        for (int i = 0; i < mr; ++i) {
          float* dst = out + (n * s.cout + o0 + i) * P;
          const float* src = ext + i * l.Epad;
          for (int64_t oi = 0; oi < s.oh; ++oi) std::memcpy(dst + oi * s.ow, src + oi * l.L, size_t(s.ow) * sizeof(float));
        }
      }
    }
  });
}

}  // namespace

bool grouped_conv2d_applies(const GroupedShape& s) {
  if (!has_avx512() || s.groups <= 1) return false;
  const int64_t cin = s.C / s.groups, cout_g = s.cout / s.groups;
  // Depthwise layers have their own kernel (conv_depthwise.h); wide groups
  // (64 channels and more) make GEMMs big enough for the GEMM path.
  if (cin <= 1 || cin > 32 || cout_g > 32) return false;
  // Measured at batch 2: 16-channel groups on 28x28 planes (RegNetX's)
  // ran 1.2x slower here than as GEMMs over padded planes (whose 8 x 32
  // tile needs no masks); on 14x14 and smaller, and for narrower groups,
  // this kernel wins (1.2x to 3.3x).
  if (cout_g >= 16 && s.oh * s.ow >= 512) return false;
  // 32-bit-safe mask and offset tables, and a plane per sample that fits.
  return s.H * s.W < (int64_t(1) << 31) && s.oh * s.ow < (int64_t(1) << 31);
}

void grouped_conv2d(const GroupedShape& s, const float* in, const float* weight, const float* bias, float* out) {
  if (s.sh == 1 && s.sw == 1 && s.oh == s.H && s.ow == s.W) return run_same(s, in, weight, bias, out);
  run_phases(s, in, weight, bias, out);
}

#else
bool grouped_conv2d_applies(const GroupedShape&) { return false; }
void grouped_conv2d(const GroupedShape&, const float*, const float*, const float*, float*) {}
#endif

}  // namespace kiln::runtime

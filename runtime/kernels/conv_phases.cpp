#include "runtime/kernels/conv_phases.h"

#include <algorithm>
#include <cstring>

#include "runtime/kernels/gemm_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::runtime {

PhaseLayout phase_layout(const ConvWindow& s) {
  PhaseLayout l;
  const int64_t a_max = ((s.kh - 1) * s.dh) / s.sh, b_max = ((s.kw - 1) * s.dw) / s.sw;
  l.L = s.ow + b_max;
  l.rows = s.oh + a_max;
  l.E = s.oh * l.L;
  l.Epad = (l.E + kPhaseBlock - 1) / kPhaseBlock * kPhaseBlock;
  l.phases = s.sh * s.sw;
  // A block at q < Epad reads up to q + a_max * L + b_max.
  l.S = std::max(l.rows * l.L, l.Epad + a_max * l.L + b_max);
  for (int64_t ki = 0; ki < s.kh; ++ki)
    for (int64_t kj = 0; kj < s.kw; ++kj) {
      const int64_t phase = ((ki * s.dh) % s.sh) * s.sw + (kj * s.dw) % s.sw;
      l.tap.push_back(phase * l.S + ((ki * s.dh) / s.sh) * l.L + (kj * s.dw) / s.sw);
    }
  return l;
}

SameTaps same_taps(const ConvWindow& s) {
  SameTaps m;
  const int64_t P = s.H * s.W, taps = s.kh * s.kw;
  m.blocks = (P + 15) / 16;
  m.mask.assign(size_t(m.blocks * taps), 0);
  for (int64_t ki = 0; ki < s.kh; ++ki)
    for (int64_t kj = 0; kj < s.kw; ++kj) {
      const int64_t t = ki * s.kw + kj, di = ki * s.dh - s.ph, dj = kj * s.dw - s.pw;
      m.offset.push_back(di * s.W + dj);
      for (int64_t q = 0; q < P; ++q) {
        const int64_t i = q / s.W + di, j = q % s.W + dj;
        if (i >= 0 && i < s.H && j >= 0 && j < s.W) m.mask[size_t((q / 16) * taps + t)] |= uint16_t(1u << (q % 16));
      }
    }
  return m;
}

namespace {

// The first and one-past-last j in [0, n) with 0 <= j * stride + off < size.
void valid_range(int64_t off, int64_t stride, int64_t size, int64_t n, int64_t& lo, int64_t& hi) {
  lo = std::min(n, off >= 0 ? 0 : (-off + stride - 1) / stride);
  hi = std::max(lo, size - 1 - off < 0 ? 0 : std::min(n, (size - 1 - off) / stride + 1));
}

// Phase plane (pr, pc) of `plane` ([H][W]): Q[i * L + j] = the padded
// plane's element (i * sh + pr, j * sw + pc), 0 on padding and in the
// slack. Each element is written once.
template <class T>
void fill_phases_generic(const ConvWindow& s, const PhaseLayout& l, const T* plane, T* q) {
  for (int64_t pr = 0; pr < s.sh; ++pr)
    for (int64_t pc = 0; pc < s.sw; ++pc) {
      T* dst = q + (pr * s.sw + pc) * l.S;
      int64_t i_lo, i_hi, j_lo, j_hi;
      valid_range(pr - s.ph, s.sh, s.H, l.rows, i_lo, i_hi);
      valid_range(pc - s.pw, s.sw, s.W, l.L, j_lo, j_hi);
      if (j_lo == j_hi) i_hi = i_lo;
      std::fill(dst, dst + i_lo * l.L, T(0));
      for (int64_t i = i_lo; i < i_hi; ++i) {
        T* row = dst + i * l.L;
        const T* src = plane + (i * s.sh + pr - s.ph) * s.W + pc - s.pw;
        std::fill(row, row + j_lo, T(0));
        if (s.sw == 1) std::memcpy(row + j_lo, src + j_lo, size_t(j_hi - j_lo) * sizeof(T));
        else
          for (int64_t j = j_lo; j < j_hi; ++j) row[j] = src[j * s.sw];
        std::fill(row + j_hi, row + l.L, T(0));
      }
      std::fill(dst + i_hi * l.L, dst + l.S, T(0));
    }
}

#if defined(__x86_64__)
// fill_phases for a column stride of 2 (MobileNet's and EfficientNet's
// downsampling layers), float32: the scalar strided copy cost several times
// the convolution itself, so each padded row is read 32 columns at a time
// (two masked loads: the lanes on padding read nothing and are 0) and split
// into its even and odd columns (two permutes), the rows of phases 0 and 1.
__attribute__((target("avx512f"))) void fill_phases_s2_avx512(const ConvWindow& s, const PhaseLayout& l,
                                                              const float* plane, float* q) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  // Lanes [lo, hi) of a 16-lane mask, clamped.
  auto lanes = [](int64_t lo, int64_t hi) {
    lo = std::clamp<int64_t>(lo, 0, 16), hi = std::clamp<int64_t>(hi, 0, 16);
    return __mmask16(hi <= lo ? 0u : ((hi - lo == 16 ? 0xffffu : (1u << (hi - lo)) - 1u) << lo));
  };
  for (int64_t pr = 0; pr < s.sh; ++pr) {
    float* d0 = q + (pr * 2) * l.S;
    float* d1 = d0 + l.S;
    for (int64_t i = 0; i < l.rows; ++i) {
      const int64_t ir = i * s.sh + pr - s.ph;
      float* r0 = d0 + i * l.L;
      float* r1 = d1 + i * l.L;
      const bool row_in = ir >= 0 && ir < s.H;
      const float* src = plane + (row_in ? ir : 0) * s.W;
      for (int64_t j0 = 0; j0 < l.L; j0 += 16) {
        const int64_t c0 = 2 * j0 - s.pw;  // input column of the window's first lane
        __m512 e = _mm512_setzero_ps(), o = e;
        if (row_in) {
          const __m512 a = _mm512_maskz_loadu_ps(lanes(-c0, s.W - c0), src + c0);
          const __m512 b = _mm512_maskz_loadu_ps(lanes(-c0 - 16, s.W - c0 - 16), src + c0 + 16);
          e = _mm512_permutex2var_ps(a, even, b);
          o = _mm512_permutex2var_ps(a, odd, b);
        }
        const __mmask16 st = lanes(0, l.L - j0);
        _mm512_mask_storeu_ps(r0 + j0, st, e);
        _mm512_mask_storeu_ps(r1 + j0, st, o);
      }
    }
    std::fill(d0 + l.rows * l.L, d0 + l.S, 0.0f);
    std::fill(d1 + l.rows * l.L, d1 + l.S, 0.0f);
  }
}
#endif

}  // namespace

void fill_phases(const ConvWindow& s, const PhaseLayout& l, const float* plane, float* q) {
#if defined(__x86_64__)
  if (s.sw == 2 && has_avx512()) return fill_phases_s2_avx512(s, l, plane, q);
#endif
  fill_phases_generic(s, l, plane, q);
}

void fill_phases(const ConvWindow& s, const PhaseLayout& l, const double* plane, double* q) {
  fill_phases_generic(s, l, plane, q);
}

}  // namespace kiln::runtime

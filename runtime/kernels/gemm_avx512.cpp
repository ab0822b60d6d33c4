#include "runtime/kernels/gemm_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace kiln::runtime {

bool has_avx512() {
#if defined(__x86_64__)
  static const bool yes = [] {
    __builtin_cpu_init();
    return bool(__builtin_cpu_supports("avx512f"));
  }();
  return yes;
#else
  return false;
#endif
}

#if defined(__x86_64__)
namespace {

constexpr int kMR = 8;    // rows of A per tile (broadcast)
constexpr int kNR = 32;   // columns of B per tile (two zmm)
constexpr int64_t kKC = 256;  // k per pass: a B panel of kKC x 32 floats (32 KiB) stays in L1

// Where row p of B starts: a fixed stride (a matrix), or a table of
// offsets (a convolution's taps: shifted windows of one padded input).
struct StridedRows {
  static constexpr bool kMustPack = false;
  const float* b;
  int64_t ldb;
  const float* row(int64_t p) const { return b + p * ldb; }
  StridedRows from(int64_t k0, int64_t j0) const { return {b + k0 * ldb + j0, ldb}; }
};
struct TableRows {
  static constexpr bool kMustPack = false;
  const float* b;
  const int64_t* offset;
  const float* row(int64_t p) const { return b + offset[p]; }
  TableRows from(int64_t k0, int64_t j0) const { return {b + j0, offset + k0}; }
};

// Rows through an offset table read under lane masks: column j of row p
// exists where bit j % 16 of mask[(j / 16) * taps + tap[p]] is set (a
// 'same' convolution's taps over its unpadded input). Only pack_panel
// reads them (the tiles then read the packed panel), so every panel is
// packed; j0 is the first column (a multiple of 32), counted from b.
struct MaskedRows {
  static constexpr bool kMustPack = true;
  const float* b;
  const int64_t* offset;
  const int32_t* tap;
  const uint16_t* mask;
  int64_t taps, j0;
  MaskedRows from(int64_t k0, int64_t j) const { return {b, offset + k0, tap + k0, mask, taps, j0 + j}; }
};

// B given transposed, as its [n][k] rows (a Linear's weight): element
// (p, j) is b[j * ldb + p]. Only pack_panel reads it, gathering each
// panel's 32 columns from 32 rows of the weight (contiguous along k), so
// no transposed copy of the whole weight is written and read back.
struct TransposedRows {
  static constexpr bool kMustPack = true;
  const float* b;
  int64_t ldb;
  TransposedRows from(int64_t k0, int64_t j0) const { return {b + j0 * ldb + k0, ldb}; }
};

// One tile: C[0..mr, 0..nr) (+)= A[0..mr, 0..kc) B[0..kc, 0..nr). mr <= 8,
// nr <= 32 (columns past nr masked off). `accumulate`: add to C (a later
// k pass) rather than overwrite it.
template <int MR, class Rows>
__attribute__((target("avx512f"))) void tile(int64_t kc, const float* a, int64_t lda, Rows b, float* c, int64_t ldc,
                                              int nr, bool accumulate) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  const __mmask16 m0 = nr >= 16 ? __mmask16(0xffff) : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? __mmask16(0xffff) : nr <= 16 ? __mmask16(0) : __mmask16((1u << (nr - 16)) - 1);
  if (nr == kNR) {
    for (int64_t p = 0; p < kc; ++p) {
      const float* bp = b.row(p);
      const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512 ai = _mm512_set1_ps(a[i * lda + p]);
        acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
        acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
      }
    }
  } else {  // the last panel of a row: masked loads (never past B's end)
    for (int64_t p = 0; p < kc; ++p) {
      const float* bp = b.row(p);
      const __m512 b0 = _mm512_maskz_loadu_ps(m0, bp), b1 = _mm512_maskz_loadu_ps(m1, bp + 16);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512 ai = _mm512_set1_ps(a[i * lda + p]);
        acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
        acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (accumulate) {
      acc0[i] = _mm512_add_ps(acc0[i], _mm512_maskz_loadu_ps(m0, ci));
      acc1[i] = _mm512_add_ps(acc1[i], _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, acc0[i]);
    _mm512_mask_storeu_ps(ci + 16, m1, acc1[i]);
  }
}

// Copies B's panel [kc rows from `b`] x [nr <= 32 columns] into `dst`
// ([kc][32], the columns past nr zero): the row tiles then read one
// contiguous block from L1 instead of kc rows a plane apart (a
// convolution's B rows: 12 KiB at 56x56, each a TLB and an L1 miss for
// every row tile).
template <class Rows>
__attribute__((target("avx512f"))) void pack_panel(Rows b, int64_t kc, int nr, float* dst) {
  const __mmask16 m0 = nr >= 16 ? __mmask16(0xffff) : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? __mmask16(0xffff) : nr <= 16 ? __mmask16(0) : __mmask16((1u << (nr - 16)) - 1);
  for (int64_t p = 0; p < kc; ++p) {
    const float* bp = b.row(p);
    // The rows are too many streams for the hardware prefetcher: the
    // panel two ahead is asked for now (the copy waited on memory for
    // about as long as the tiles computed on a 3-tile GEMM).
    _mm_prefetch(reinterpret_cast<const char*>(bp + 2 * kNR), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(bp + 2 * kNR + 16), _MM_HINT_T0);
    _mm512_storeu_ps(dst + p * kNR, _mm512_maskz_loadu_ps(m0, bp));
    _mm512_storeu_ps(dst + p * kNR + 16, _mm512_maskz_loadu_ps(m1, bp + 16));
  }
}

// pack_panel for masked rows: the lanes a row's mask clears are 0 (never
// read), so the panel is the im2col block of a 'same' convolution, made in
// L1 panel by panel instead of in memory for the whole layer.
__attribute__((target("avx512f"))) void pack_panel(MaskedRows b, int64_t kc, int nr, float* dst) {
  const __mmask16 m0 = nr >= 16 ? __mmask16(0xffff) : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? __mmask16(0xffff) : nr <= 16 ? __mmask16(0) : __mmask16((1u << (nr - 16)) - 1);
  const uint16_t* mk0 = b.mask + (b.j0 / 16) * b.taps;
  const uint16_t* mk1 = mk0 + b.taps;  // read only where m1 has lanes: the next block exists
  for (int64_t p = 0; p < kc; ++p) {
    const float* bp = b.b + b.offset[p] + b.j0;
    const int32_t t = b.tap[p];
    const __mmask16 l0 = m0 & __mmask16(mk0[t]);
    const __mmask16 l1 = m1 ? __mmask16(m1 & mk1[t]) : __mmask16(0);
    _mm512_storeu_ps(dst + p * kNR, _mm512_maskz_loadu_ps(l0, bp));
    _mm512_storeu_ps(dst + p * kNR + 16, _mm512_maskz_loadu_ps(l1, bp + 16));
  }
}

// pack_panel for B^T: row p of the panel is column p of 32 rows of the
// weight, two 16-lane gathers (rows past nr read as 0, never loaded).
// Each weight row is read along k, so the 32 rows' lines stay in L1
// across 16 consecutive p.
__attribute__((target("avx512f"))) void pack_panel(TransposedRows b, int64_t kc, int nr, float* dst) {
  const __mmask16 m0 = nr >= 16 ? __mmask16(0xffff) : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? __mmask16(0xffff) : nr <= 16 ? __mmask16(0) : __mmask16((1u << (nr - 16)) - 1);
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(int32_t(b.ldb)));
  const float* half = b.b + 16 * b.ldb;
  for (int64_t p = 0; p < kc; ++p) {
    _mm512_storeu_ps(dst + p * kNR, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, rows, b.b + p, 4));
    _mm512_storeu_ps(dst + p * kNR + 16,
                     m1 ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, rows, half + p, 4) : _mm512_setzero_ps());
  }
}

// Packing B's panels pays from this many rows of A and this many of B:
// the copy is made once per panel and read by every row tile (measured:
// 3x3 convolutions at 56x56 and 28x28, k = 576 and 1152, 1.1-1.2x
// faster). With one or two row tiles, or a short panel (a 1x1
// convolution from 64 channels: 1.1x slower packed), the copy costs more
// than it saves.
constexpr int64_t kPackRows = 32, kPackDepth = 128;

template <class Rows>
void gemm_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, Rows b, float* c, int64_t ldc) {
  // Rows that are only packed have no tiles of their own.
  using TileRows = std::conditional_t<Rows::kMustPack, StridedRows, Rows>;
  using OwnFn = void (*)(int64_t, const float*, int64_t, TileRows, float*, int64_t, int, bool);
  static constexpr OwnFn tiles[kMR + 1] = {nullptr,           &tile<1, TileRows>, &tile<2, TileRows>,
                                           &tile<3, TileRows>, &tile<4, TileRows>, &tile<5, TileRows>,
                                           &tile<6, TileRows>, &tile<7, TileRows>, &tile<8, TileRows>};
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  // k passes outermost so a B panel (kKC x 32) is reused by every row tile
  // while it is in L1; the first pass writes C, the others add to it.
  using PackedFn = void (*)(int64_t, const float*, int64_t, StridedRows, float*, int64_t, int, bool);
  static constexpr PackedFn packed_tiles[kMR + 1] = {
      nullptr,           &tile<1, StridedRows>, &tile<2, StridedRows>, &tile<3, StridedRows>, &tile<4, StridedRows>,
      &tile<5, StridedRows>, &tile<6, StridedRows>, &tile<7, StridedRows>, &tile<8, StridedRows>};
  thread_local std::vector<float> panel_buf;
  const bool pack = Rows::kMustPack || (m >= kPackRows && k >= kPackDepth);
  if (pack && panel_buf.size() < size_t(kKC * kNR)) panel_buf.resize(size_t(kKC * kNR));
  float* const panel = panel_buf.data();
  for (int64_t k0 = 0; k0 < k; k0 += kKC) {
    const int64_t kc = std::min(kKC, k - k0);
    for (int64_t j0 = 0; j0 < n; j0 += kNR) {
      const int nr = int(std::min<int64_t>(kNR, n - j0));
      if (pack) pack_panel(b.from(k0, j0), kc, nr, panel);
      for (int64_t i0 = 0; i0 < m; i0 += kMR) {
        const int mr = int(std::min<int64_t>(kMR, m - i0));
        if constexpr (Rows::kMustPack) {
          packed_tiles[mr](kc, a + i0 * lda + k0, lda, StridedRows{panel, kNR}, c + i0 * ldc + j0, ldc, nr, k0 > 0);
        } else {
          if (pack)
            packed_tiles[mr](kc, a + i0 * lda + k0, lda, StridedRows{panel, kNR}, c + i0 * ldc + j0, ldc, nr, k0 > 0);
          else
            tiles[mr](kc, a + i0 * lda + k0, lda, b.from(k0, j0), c + i0 * ldc + j0, ldc, nr, k0 > 0);
        }
      }
    }
  }
}

// How far ahead (floats) each row of B is prefetched: the hardware's
// stream prefetcher alone tracks four concurrent streams poorly.
constexpr int64_t kNtPrefetch = 512;
// The bytes of B's rows one block of gemm_f32_avx512_nt keeps in L2.
constexpr int64_t kNtBlockBytes = 256 << 10;

template <int MR>
__attribute__((target("avx512f"), always_inline)) inline void nt_step(__m512 (&acc)[MR][4], const float* const (&br)[4],
                                                                      const float* a, int64_t lda, int64_t p,
                                                                      __mmask16 mask) {
  __m512 bv[4], av[MR];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    _mm_prefetch(reinterpret_cast<const char*>(br[q] + p + kNtPrefetch), _MM_HINT_T0);
    bv[q] = _mm512_maskz_loadu_ps(mask, br[q] + p);
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) av[i] = _mm512_maskz_loadu_ps(mask, a + i * lda + p);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
    for (int q = 0; q < 4; ++q) acc[i][q] = _mm512_fmadd_ps(av[i], bv[q], acc[i][q]);
}

// C[0..MR, j] = A[0..MR, :] . B[j, :] for four rows j of B at a time:
// both operands are read along k, where they are contiguous, so B (a
// Linear's weight, [n][k]) streams from memory once per call with no
// transposed copy. MR <= 4: 16 accumulators, 4 B loads and MR A loads per
// 16 k.
template <int MR>
__attribute__((target("avx512f"))) void nt_rows(int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                                                 int64_t ldb, float* c, int64_t ldc) {
  const __mmask16 tail = __mmask16((1u << (k % 16)) - 1);
  const int64_t kv = k - k % 16;
  for (int64_t j0 = 0; j0 < n; j0 += 4) {
    const int nj = int(std::min<int64_t>(4, n - j0));
    __m512 acc[MR][4];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
      for (int q = 0; q < 4; ++q) acc[i][q] = _mm512_setzero_ps();
    // Rows past n repeat the last one (read, never stored): no branch per load.
    const float* br[4];
    for (int q = 0; q < 4; ++q) br[q] = b + (j0 + std::min(q, nj - 1)) * ldb;
    for (int64_t p = 0; p < kv; p += 16) nt_step<MR>(acc, br, a, lda, p, __mmask16(0xffff));
    if (tail) nt_step<MR>(acc, br, a, lda, kv, tail);
    for (int i = 0; i < MR; ++i)
      for (int q = 0; q < nj; ++q) c[i * ldc + j0 + q] = _mm512_reduce_add_ps(acc[i][q]);
  }
}

}  // namespace

void gemm_f32_avx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                     float* c, int64_t ldc) {
  gemm_rows(m, n, k, a, lda, StridedRows{b, ldb}, c, ldc);
}

void gemm_f32_avx512_nt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                        float* c, int64_t ldc) {
  using Fn = void (*)(int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t);
  static constexpr Fn rows[5] = {nullptr, &nt_rows<1>, &nt_rows<2>, &nt_rows<3>, &nt_rows<4>};
  // Blocks of B's rows small enough to stay in L2 while every 4 rows of A
  // pass over them: B comes from memory once.
  const int64_t block = std::max<int64_t>(4, kNtBlockBytes / int64_t(sizeof(float)) / std::max<int64_t>(k, 1) / 4 * 4);
  for (int64_t j0 = 0; j0 < n; j0 += block) {
    const int64_t nb = std::min(block, n - j0);
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const int mr = int(std::min<int64_t>(4, m - i0));
      rows[mr](nb, k, a + i0 * lda, lda, b + j0 * ldb, ldb, c + i0 * ldc + j0, ldc);
    }
  }
}

void gemm_f32_avx512_t(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                       float* c, int64_t ldc) {
  gemm_rows(m, n, k, a, lda, TransposedRows{b, ldb}, c, ldc);
}

void gemm_f32_avx512_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                          const int64_t* row_offset, float* c, int64_t ldc) {
  gemm_rows(m, n, k, a, lda, TableRows{b, row_offset}, c, ldc);
}
void gemm_f32_avx512_masked(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                            const int64_t* row_offset, const int32_t* row_tap, const uint16_t* tap_mask, int64_t taps,
                            int64_t j0, float* c, int64_t ldc) {
  gemm_rows(m, n, k, a, lda, MaskedRows{b, row_offset, row_tap, tap_mask, taps, j0}, c, ldc);
}
#else
void gemm_f32_avx512(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t) {}
void gemm_f32_avx512_masked(int64_t, int64_t, int64_t, const float*, int64_t, const float*, const int64_t*,
                            const int32_t*, const uint16_t*, int64_t, int64_t, float*, int64_t) {}
void gemm_f32_avx512_rows(int64_t, int64_t, int64_t, const float*, int64_t, const float*, const int64_t*, float*,
                          int64_t) {}
void gemm_f32_avx512_nt(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t) {}
void gemm_f32_avx512_t(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t) {}
#endif

}  // namespace kiln::runtime

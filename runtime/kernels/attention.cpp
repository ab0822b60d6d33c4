// Tiled ("flash") attention; see attention.h for the contract.
//
// Layout. One work item is (batch index b, block of up to kBr queries). The
// scores of a key tile are kept transposed, St[key j][query r], so every
// softmax statistic (row max, row sum, the rescale factor) is a vector over
// the block's queries and every per-score loop runs along contiguous
// queries. Per item:
//   Qt[e][r]  = q[i0 + r][e] * scale     packed once per item (queries padded
//                                        to a multiple of the vector width W)
//   for each key tile [j0, j0 + bc):     (causal: only tiles with j0 <= last query)
//     St = K[j0:j0+bc] @ Qt              microkernel; K read in place, any strides
//     St += mask, St[j][r] = -inf where j0 + j > i0 + r (causal)
//     m' = max(m, max_j St), alpha = exp(m - m'), P = exp(St - m')
//     l = l * alpha + sum_j P, O = O * alpha + P^T @ V[j0:j0+bc]
//   out = O / l (zeros where l == 0: every key masked, or S == 0)
// Scratch per item (reused across the items a pool task runs): Qt, St, O,
// a V tile when V's rows are not contiguous whole vectors, and a few
// per-query vectors.
//
// Vectorization. The two products use one register-blocked microkernel
// written with GCC/Clang vector extensions (an accumulator array GCC 12's
// -O2 cost model will not vectorize or keep in registers on its own): MR
// rows of A broadcast against NV native vectors of B, MR x NV accumulators.
// The elementwise loops (mask, exp, sums, rescale factors) are plain loops
// over whole W-chunks, which -O2 does vectorize (the tile max uses the
// vector type too: clang vectorized its scalar form across the key rows,
// with gathers, 15x slower). exp is a polynomial with bit-level
// 2^n (no libm, no branches: selects are integer blends, because a float
// ?: gets jump-threaded into control flow that -O2 under -ftrapping-math
// will not if-convert).
// On x86-64 the work is compiled three times, each with its native vector
// width (a vector type wider than the target's registers is lowered through
// memory, 10x slower: so not target_clones over one width): AVX-512 (64-byte
// vectors), AVX2+FMA (32) and the baseline (16), picked once from the CPU.
#include "runtime/kernels/attention.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/thread_pool.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_ATTN_X86 1
#define KILN_ATTN_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
#define KILN_ATTN_AVX2 __attribute__((target("avx2,fma")))
#else
#define KILN_ATTN_X86 0
#endif
#define KILN_ATTN_INLINE inline __attribute__((always_inline))

namespace kiln::runtime {
namespace {

// ----- vector width --------------------------------------------------------------

// VB: the vector's bytes (the target's register width); W: its lanes.
template <class T, int VB> struct Simd {
  typedef T V __attribute__((vector_size(VB)));
  static constexpr int W = VB / int(sizeof(T));
};

constexpr int64_t kBr = 64;  // queries per work item (a multiple of every W)
constexpr int64_t kBc = 64;  // keys per tile

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

template <class T> constexpr T ninf() { return -std::numeric_limits<T>::infinity(); }

// ----- exp -----------------------------------------------------------------------
// Range reduction x = n ln2 + r (|r| <= ln2/2, ln2 split Cody-Waite style so n ln2
// is exact), a polynomial for exp(r), then 2^n as two exponent-field scalings
// (2^(n/2) twice) so subnormal results come out right. Inputs below the
// smallest subnormal's log give 0, above the largest finite result's log +inf:
// integer blends, and such inputs (the -inf of every masked score) are
// computed as 0 on the way, not clamped to the range's end, so they never
// run the slow subnormal arithmetic that exp(-104) would.

KILN_ATTN_INLINE float exp_poly(float x) {
  constexpr float lo = -104.0f;                  // exp(lo) < half the smallest subnormal
  constexpr float hi = 88.72283172607421875f;    // the largest float whose exp is finite
  constexpr float shifter = 12582912.0f;         // 1.5 * 2^23: adding it rounds to an integer
  const int32_t under = -int32_t(x < lo), over = -int32_t(x > hi);
  const float xc = std::bit_cast<float>(std::bit_cast<int32_t>(x) & ~(under | over));  // 0 there
  const float t = xc * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  const int32_t ni = int32_t(uint32_t(std::bit_cast<int32_t>(t)) - uint32_t(std::bit_cast<int32_t>(shifter)));
  float r = xc - n * 0.693359375f;  // Cephes' split of ln2
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // n = n1 + n2 with n1 = round(n / 2) (the shifter again: no vector shift needed)
  const int32_t n1 = int32_t(uint32_t(std::bit_cast<int32_t>(n * 0.5f + shifter)) -
                             uint32_t(std::bit_cast<int32_t>(shifter)));
  const int32_t n2 = int32_t(uint32_t(ni) - uint32_t(n1));
  const float s1 = std::bit_cast<float>((uint32_t(n1) + 127u) << 23);
  const float s2 = std::bit_cast<float>((uint32_t(n2) + 127u) << 23);
  const int32_t yb = std::bit_cast<int32_t>(p * s1 * s2) & ~under;
  return std::bit_cast<float>((yb & ~over) | (0x7f800000 & over));
}

KILN_ATTN_INLINE double exp_poly(double x) {
  constexpr double lo = -746.0;
  constexpr double hi = 709.782712893383973;  // log(DBL_MAX), rounded down
  constexpr double shifter = 6755399441055744.0;  // 1.5 * 2^52
  const int64_t under = -int64_t(x < lo), over = -int64_t(x > hi);
  const double xc = std::bit_cast<double>(std::bit_cast<int64_t>(x) & ~(under | over));
  const double t = xc * 1.4426950408889634 + shifter;
  const double n = t - shifter;
  const int64_t ni = int64_t(uint64_t(std::bit_cast<int64_t>(t)) - uint64_t(std::bit_cast<int64_t>(shifter)));
  double r = xc - n * 6.93147180369123816490e-01;  // fdlibm's ln2_hi (n * it is exact)
  r = r - n * 1.90821492927058770002e-10;          // ln2_lo
  // Taylor series to r^13/13!: the first term left out is < 3e-18 for |r| <= ln2/2.
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r * r + r + 1.0;
  const int64_t n1 = int64_t(uint64_t(std::bit_cast<int64_t>(n * 0.5 + shifter)) -
                             uint64_t(std::bit_cast<int64_t>(shifter)));
  const int64_t n2 = int64_t(uint64_t(ni) - uint64_t(n1));
  const double s1 = std::bit_cast<double>((uint64_t(n1) + 1023u) << 52);
  const double s2 = std::bit_cast<double>((uint64_t(n2) + 1023u) << 52);
  const int64_t yb = std::bit_cast<int64_t>(p * s1 * s2) & ~under;
  return std::bit_cast<double>((yb & ~over) | (int64_t(0x7ff0000000000000) & over));
}

// x, or 0 where x is -inf; an integer blend (see exp_poly).
template <class T>
KILN_ATTN_INLINE T zero_if_ninf(T x) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  const I keep = I(x == ninf<T>()) - 1;  // all ones unless -inf
  return std::bit_cast<T>(I(std::bit_cast<I>(x) & keep));
}

template <class T, int VB>
KILN_ATTN_INLINE void exp_array(const T* __restrict x, T* __restrict y, int64_t n) {
  constexpr int W = Simd<T, VB>::W;
  int64_t i = 0;
  for (; i + W <= n; i += W)
    for (int u = 0; u < W; ++u) y[i + u] = exp_poly(x[i + u]);
  for (; i < n; ++i) y[i] = exp_poly(x[i]);
}

// ----- the microkernel -----------------------------------------------------------
// C[r][c] (= C * alpha[r] when alpha is given, else =) + sum_k A[r][k] B[k][c] for
// r < MR and the NV*W columns c; A[r][k] at a[r*ars + k*aks] (any strides), B's row k
// at b + k*ldb (contiguous), C's row r at c + r*ldc.

template <class T, int VB, int MR, int NV>
KILN_ATTN_INLINE void micro(int64_t K, const T* a, int64_t ars, int64_t aks, const T* b, int64_t ldb, T* c,
                            int64_t ldc, const T* alpha) {
  using V = typename Simd<T, VB>::V;
  constexpr int W = Simd<T, VB>::W;
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  const T* bp = b;
  const T* ap = a;
  for (int64_t k = 0; k < K; ++k) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], bp + v * W, sizeof(V));
    bp += ldb;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const T av = ap[r * ars];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += bv[v] * av;
    }
    ap += aks;
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      T* cp = c + r * ldc + v * W;
      V o = acc[r][v];
      if (alpha) {
        V old;
        std::memcpy(&old, cp, sizeof(V));
        o += old * alpha[r];
      }
      std::memcpy(cp, &o, sizeof(V));
    }
}

// The same over nw vectors of columns: NV at a time, then one at a time.
template <class T, int VB, int MR, int NV>
KILN_ATTN_INLINE void micro_row(int64_t nw, int64_t K, const T* a, int64_t ars, int64_t aks, const T* b,
                                int64_t ldb, T* c, int64_t ldc, const T* alpha) {
  constexpr int W = Simd<T, VB>::W;
  int64_t v = 0;
  for (; v + NV <= nw; v += NV) micro<T, VB, MR, NV>(K, a, ars, aks, b + v * W, ldb, c + v * W, ldc, alpha);
  for (; v < nw; ++v) micro<T, VB, MR, 1>(K, a, ars, aks, b + v * W, ldb, c + v * W, ldc, alpha);
}

// ----- the work ------------------------------------------------------------------

enum class MaskKind { None, Bool, Float };

template <class T>
struct Job {
  const T *q, *k, *v;
  T* out;
  const void* mask;
  MaskKind mask_kind;
  bool keep;       // the bool mask value that keeps a score (false: masked_fill's mask)
  bool empty_nan;  // a row that saw no unmasked key is NaN, not zeros
  bool causal;
  T scale;
  int64_t L, S, E, Ev, nqb;  // nqb: query blocks per batch index
  int64_t qsL, qsE, ksS, ksE, vsS, vsE, osL, osE, msL, msS;
  // Element offsets of batch index b's [L|S, E|Ev] plane in each operand.
  const int64_t *qoff, *koff, *voff, *ooff, *moff;
};

// 64-byte aligned, zero-filled scratch.
template <class T>
struct Scratch {
  T* p = nullptr;
  explicit Scratch(int64_t n) {
    const size_t bytes = size_t(std::max<int64_t>(n, 1)) * sizeof(T);
    p = static_cast<T*>(::operator new(bytes, std::align_val_t(64)));
    std::memset(static_cast<void*>(p), 0, bytes);
  }
  ~Scratch() { ::operator delete(p, std::align_val_t(64)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// St[j][r] for r < rows of one key row j: the mask row of the block's queries.
template <class T, int VB, class M>
KILN_ATTN_INLINE void apply_mask(const Job<T>& J, const M* mb, int64_t i0, int64_t rows, int64_t j0, int64_t bc,
                                 T* St, int64_t lanes) {
  constexpr int W = Simd<T, VB>::W;
  if (J.msL == 0) {  // the same mask for every query (a padding mask): one value per key row
    for (int64_t j = 0; j < bc; ++j) {
      const M mv = mb[(j0 + j) * J.msS];
      T* s = St + j * lanes;
      if constexpr (std::is_same_v<M, bool>) {
        if (mv != J.keep)
          for (int64_t r = 0; r < lanes; r += W)
            for (int u = 0; u < W; ++u) s[r + u] = ninf<T>();
      } else {
        for (int64_t r = 0; r < lanes; r += W)
          for (int u = 0; u < W; ++u) s[r + u] += mv;
      }
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const M* mr = mb + (i0 + r) * J.msL + j0 * J.msS;
    T* s = St + r;
    for (int64_t j = 0; j < bc; ++j) {
      const M mv = mr[j * J.msS];
      if constexpr (std::is_same_v<M, bool>) {
        if (mv != J.keep) s[j * lanes] = ninf<T>();
      } else {
        s[j * lanes] += mv;
      }
    }
  }
}

// St rows [j, j + R) (keys j0 + j...) = K rows @ Qt. Causal: key j needs only
// the queries i >= j, so the block starts at the vector holding query j0 + j
// (the lanes before are set to -inf afterwards).
template <class T, int VB, int R, int NV>
KILN_ATTN_INLINE void score_rows(const Job<T>& J, const T* kb, const T* Qt, T* St, int64_t lanes, int64_t i0,
                                 int64_t j0, int64_t j) {
  constexpr int W = Simd<T, VB>::W;
  const int64_t c0 = J.causal ? std::max<int64_t>(0, j0 + j - i0) / W : 0;
  micro_row<T, VB, R, NV>(lanes / W - c0, J.E, kb + (j0 + j) * J.ksS, J.ksS, J.ksE, Qt + c0 * W, lanes,
                          St + j * lanes + c0 * W, lanes, nullptr);
}

template <class T, int VB, int MR, int NV>
KILN_ATTN_INLINE void score_tile(const Job<T>& J, const T* kb, const T* Qt, T* St, int64_t lanes, int64_t i0,
                                 int64_t j0, int64_t bc) {
  int64_t j = 0;
  for (; j + MR <= bc; j += MR) score_rows<T, VB, MR, NV>(J, kb, Qt, St, lanes, i0, j0, j);
  if constexpr (MR > 4)
    if (j + 4 <= bc) score_rows<T, VB, 4, NV>(J, kb, Qt, St, lanes, i0, j0, j), j += 4;
  if constexpr (MR > 2)
    if (j + 2 <= bc) score_rows<T, VB, 2, NV>(J, kb, Qt, St, lanes, i0, j0, j), j += 2;
  for (; j < bc; ++j) score_rows<T, VB, 1, NV>(J, kb, Qt, St, lanes, i0, j0, j);
}

// O rows [r, r + R) = O * alpha + P^T @ V tile. Causal: query i needs keys j <= i only.
template <class T, int VB, int R, int NV>
KILN_ATTN_INLINE void pv_rows(const Job<T>& J, const T* St, const T* B, int64_t ldb, T* O, int64_t Evw,
                              const T* alpha, int64_t lanes, int64_t i0, int64_t j0, int64_t bc, int64_t r) {
  constexpr int W = Simd<T, VB>::W;
  const int64_t keys = J.causal ? std::clamp<int64_t>(i0 + r + R - j0, 0, bc) : bc;
  micro_row<T, VB, R, NV>(Evw / W, keys, St + r, 1, lanes, B, ldb, O + r * Evw, Evw, alpha + r);
}

template <class T, int VB, int MR, int NV>
KILN_ATTN_INLINE void pv_tile(const Job<T>& J, const T* St, const T* B, int64_t ldb, T* O, int64_t Evw,
                              const T* alpha, int64_t lanes, int64_t i0, int64_t j0, int64_t bc, int64_t rows) {
  int64_t r = 0;
  for (; r + MR <= rows; r += MR) pv_rows<T, VB, MR, NV>(J, St, B, ldb, O, Evw, alpha, lanes, i0, j0, bc, r);
  if constexpr (MR > 4)
    if (r + 4 <= rows) pv_rows<T, VB, 4, NV>(J, St, B, ldb, O, Evw, alpha, lanes, i0, j0, bc, r), r += 4;
  if constexpr (MR > 2)
    if (r + 2 <= rows) pv_rows<T, VB, 2, NV>(J, St, B, ldb, O, Evw, alpha, lanes, i0, j0, bc, r), r += 2;
  for (; r < rows; ++r) pv_rows<T, VB, 1, NV>(J, St, B, ldb, O, Evw, alpha, lanes, i0, j0, bc, r);
}

template <class T, int VB, int MR, int NV>
KILN_ATTN_INLINE void run_items(const Job<T>& J, int64_t begin, int64_t end) {
  constexpr int W = Simd<T, VB>::W;
  const int64_t E = J.E, Ev = J.Ev, Evw = round_up(Ev, W);
  const bool v_direct = J.vsE == 1 && Ev % W == 0;  // V's rows usable in place as B
  Scratch<T> qt_buf(E * kBr), st_buf(kBc * kBr), o_buf(kBr * Evw), v_buf(v_direct ? 0 : kBc * Evw);
  Scratch<T> stats(5 * kBr);
  Scratch<double> l_buf(kBr);
  T* const Qt = qt_buf.p;
  T* const St = st_buf.p;
  T* const O = o_buf.p;
  T* const Vs = v_buf.p;  // pad columns [Ev, Evw) stay zero
  T* const m = stats.p;        // running max (-inf: nothing seen yet)
  T* const mu = m + kBr;       // the max used this tile (0 where still -inf: exp(-inf - 0) = 0)
  T* const alpha = mu + kBr;   // rescale factor of O and l
  T* const tmax = alpha + kBr;
  T* const tsum = tmax + kBr;
  double* const l = l_buf.p;

  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / J.nqb, i0 = (item % J.nqb) * kBr;
    const int64_t rows = std::min(kBr, J.L - i0), lanes = round_up(rows, W);
    // Qt[e][r] = q[i0 + r][e] * scale; pad lanes zero.
    const T* qb = J.q + J.qoff[b] + i0 * J.qsL;
    for (int64_t e = 0; e < E; ++e) {
      T* d = Qt + e * lanes;
      for (int64_t r = 0; r < rows; ++r) d[r] = qb[r * J.qsL + e * J.qsE] * J.scale;
      for (int64_t r = rows; r < lanes; ++r) d[r] = T(0);
    }
    std::memset(static_cast<void*>(O), 0, size_t(rows * Evw) * sizeof(T));
    for (int64_t r = 0; r < lanes; r += W)
      for (int u = 0; u < W; ++u) {
        m[r + u] = ninf<T>();
        l[r + u] = 0.0;
      }
    const T* kb = J.k + J.koff[b];
    const T* vb = J.v + J.voff[b];
    // Causal: keys past the block's last query are masked for all of it.
    const int64_t jend = J.causal ? std::min(J.S, i0 + rows) : J.S;
    for (int64_t j0 = 0; j0 < jend; j0 += kBc) {
      const int64_t bc = std::min(kBc, jend - j0);
      score_tile<T, VB, MR, NV>(J, kb, Qt, St, lanes, i0, j0, bc);  // St = K[j0:j0+bc] @ Qt
      if (J.mask_kind == MaskKind::Bool)
        apply_mask<T, VB>(J, static_cast<const bool*>(J.mask) + J.moff[b], i0, rows, j0, bc, St, lanes);
      else if (J.mask_kind == MaskKind::Float)
        apply_mask<T, VB>(J, static_cast<const T*>(J.mask) + J.moff[b], i0, rows, j0, bc, St, lanes);
      if (J.causal)
        for (int64_t jj = 0; jj < bc; ++jj) {
          const int64_t n = std::min(lanes, std::max<int64_t>(0, j0 + jj - i0));  // queries i < j
          T* s = St + jj * lanes;
          int64_t r = 0;
          for (; r + W <= n; r += W)
            for (int u = 0; u < W; ++u) s[r + u] = ninf<T>();
          for (; r < n; ++r) s[r] = ninf<T>();
        }
      // Online softmax over the tile, a vector over the block's queries. The
      // tile's max: W queries at a time down the key rows (written with the
      // vector type: clang vectorizes the scalar form across the rows, with
      // gathers).
      for (int64_t r = 0; r < lanes; r += W) {
        using V = typename Simd<T, VB>::V;
        V acc = V{} + ninf<T>();
        for (int64_t jj = 0; jj < bc; ++jj) {
          V x;
          std::memcpy(&x, St + jj * lanes + r, sizeof(V));
          acc = x > acc ? x : acc;
        }
        std::memcpy(tmax + r, &acc, sizeof(V));
      }
      for (int64_t r = 0; r < lanes; r += W)
        for (int u = 0; u < W; ++u) {
          const T mn = tmax[r + u] > m[r + u] ? tmax[r + u] : m[r + u];
          const T used = zero_if_ninf(mn);
          alpha[r + u] = exp_poly(T(m[r + u] - used));
          mu[r + u] = used;
          m[r + u] = mn;
          tsum[r + u] = T(0);
        }
      for (int64_t jj = 0; jj < bc; ++jj) {
        T* s = St + jj * lanes;
        for (int64_t r = 0; r < lanes; r += W)
          for (int u = 0; u < W; ++u) {
            const T p = exp_poly(T(s[r + u] - mu[r + u]));
            s[r + u] = p;
            tsum[r + u] += p;
          }
      }
      for (int64_t r = 0; r < lanes; r += W)
        for (int u = 0; u < W; ++u) l[r + u] = l[r + u] * double(alpha[r + u]) + double(tsum[r + u]);
      // O = O * alpha + P^T @ V[j0:j0+bc]
      const T* B = vb + j0 * J.vsS;
      int64_t ldb = J.vsS;
      if (!v_direct) {
        for (int64_t jj = 0; jj < bc; ++jj) {
          const T* src = vb + (j0 + jj) * J.vsS;
          T* d = Vs + jj * Evw;
          for (int64_t c = 0; c < Ev; ++c) d[c] = src[c * J.vsE];
        }
        B = Vs;
        ldb = Evw;
      }
      pv_tile<T, VB, MR, NV>(J, St, B, ldb, O, Evw, alpha, lanes, i0, j0, bc, rows);
    }
    // out = O / l; a row that saw no unmasked key (l == 0) is zeros (its O is 0:
    // every p it met was exp(-inf) = 0).
    T* ob = J.out + J.ooff[b] + i0 * J.osL;
    for (int64_t r = 0; r < rows; ++r) {
      T* __restrict d = ob + r * J.osL;
      const T* __restrict s = O + r * Evw;
      const T inv = l[r] > 0 ? T(1.0 / l[r]) : J.empty_nan ? std::numeric_limits<T>::quiet_NaN() : T(0);
      if (J.osE == 1) {
        using V = typename Simd<T, VB>::V;
        int64_t c = 0;
        for (; c + W <= Ev; c += W) {
          V x;
          std::memcpy(&x, s + c, sizeof(V));
          x *= inv;
          std::memcpy(d + c, &x, sizeof(V));
        }
        for (; c < Ev; ++c) d[c] = s[c] * inv;
      } else {
        for (int64_t c = 0; c < Ev; ++c) d[c * J.osE] = s[c] * inv;
      }
    }
  }
}

// ----- one build per instruction set ----------------------------------------------
// Register blocks (MR rows x NV vectors of accumulators): AVX-512 has 32
// registers, AVX2 and SSE2 16.

template <class T>
void run_base(const Job<T>& J, int64_t begin, int64_t end) { run_items<T, 16, 6, 2>(J, begin, end); }
template <class T>
void exp_base(const T* x, T* y, int64_t n) { exp_array<T, 16>(x, y, n); }
#if KILN_ATTN_X86
template <class T>
KILN_ATTN_AVX2 void run_avx2(const Job<T>& J, int64_t begin, int64_t end) { run_items<T, 32, 6, 2>(J, begin, end); }
template <class T>
KILN_ATTN_AVX512 void run_avx512(const Job<T>& J, int64_t begin, int64_t end) {
  run_items<T, 64, 8, 2>(J, begin, end);
}
template <class T>
KILN_ATTN_AVX2 void exp_avx2(const T* x, T* y, int64_t n) { exp_array<T, 32>(x, y, n); }
template <class T>
KILN_ATTN_AVX512 void exp_avx512(const T* x, T* y, int64_t n) { exp_array<T, 64>(x, y, n); }
#endif

// What the CPU supports: 0 baseline, 1 AVX2+FMA, 2 AVX-512 (F, VL, BW, DQ).
int cpu_simd_level() {
#if KILN_ATTN_X86
  static const int level = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
      return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
    return 0;
  }();
  return level;
#else
  return 0;
#endif
}

std::atomic<int> simd_limit{2};

int simd_level() { return std::min(cpu_simd_level(), simd_limit.load(std::memory_order_relaxed)); }

template <class T>
void run(const Job<T>& J, int64_t begin, int64_t end, int level) {
#if KILN_ATTN_X86
  if (level >= 2) return run_avx512(J, begin, end);
  if (level == 1) return run_avx2(J, begin, end);
#endif
  run_base(J, begin, end);
}

template <class T>
void exp_dispatch(const T* x, T* y, int64_t n) {
#if KILN_ATTN_X86
  const int level = simd_level();
  if (level >= 2) return exp_avx512(x, y, n);
  if (level == 1) return exp_avx2(x, y, n);
#endif
  exp_base(x, y, n);
}

// ----- argument checks -----------------------------------------------------------

constexpr const char* kOp = "scaled_dot_product_attention";

[[noreturn]] void fail(const std::string& what) {
  throw_error(ErrorKind::RuntimeError, std::string(kOp) + "(): " + what);
}

std::string shapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  return "query " + shape_str(q.sizes()) + ", key " + shape_str(k.sizes()) + " and value " + shape_str(v.sizes());
}

template <class T>
void launch(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, MaskKind mk, bool causal,
            double scale, const Tensor& out, const AttentionOptions& opt) {
  const int64_t nd = q.dim(), nb = nd - 2;
  const Shape& qs = q.sizes();
  const int64_t L = qs[size_t(nd - 2)], E = qs[size_t(nd - 1)], S = k.sizes()[size_t(nd - 2)],
                Ev = v.sizes()[size_t(nd - 1)];
  int64_t B = 1;
  for (int64_t d = 0; d < nb; ++d) B *= qs[size_t(d)];
  if (B == 0 || L == 0 || Ev == 0) return;
  // A dim of size 1 is read at index 0 only: its stride does not matter, take 0.
  auto stride = [](const Tensor& t, int64_t d) { return t.sizes()[size_t(d)] == 1 ? 0 : t.strides()[size_t(d)]; };

  Job<T> J{};
  J.q = q.data<T>();
  J.k = k.data<T>();
  J.v = v.data<T>();
  J.out = out.data<T>();
  J.mask = mk == MaskKind::None ? nullptr : mask.raw_data();
  J.mask_kind = mk;
  J.keep = !opt.mask_drops;
  J.empty_nan = opt.empty_rows_nan && S > 0;  // S == 0: softmax of nothing, an empty sum: zeros
  J.causal = causal;
  J.scale = T(scale);
  J.L = L, J.S = S, J.E = E, J.Ev = Ev;
  J.nqb = (L + kBr - 1) / kBr;
  J.qsL = stride(q, nd - 2), J.qsE = stride(q, nd - 1);
  J.ksS = stride(k, nd - 2), J.ksE = stride(k, nd - 1);
  J.vsS = stride(v, nd - 2), J.vsE = stride(v, nd - 1);
  J.osL = stride(out, nd - 2), J.osE = stride(out, nd - 1);
  // The mask's dims, right-aligned with [..., L, S]; missing and size-1 dims: stride 0.
  const int64_t md = mk == MaskKind::None ? 0 : mask.dim();
  auto mstride = [&](int64_t d) {  // d: a dim of q's rank
    const int64_t e = d - (nd - md);
    return e < 0 ? 0 : stride(mask, e);
  };
  J.msL = mstride(nd - 2), J.msS = mstride(nd - 1);

  std::vector<int64_t> offs(size_t(5 * B), 0);
  J.qoff = offs.data(), J.koff = J.qoff + B, J.voff = J.koff + B, J.ooff = J.voff + B, J.moff = J.ooff + B;
  {
    int64_t* qo = offs.data();
    std::vector<int64_t> idx(size_t(nb), 0);
    for (int64_t b = 0; b < B; ++b) {
      int64_t oq = 0, ok = 0, ov = 0, oo = 0, om = 0;
      for (int64_t d = 0; d < nb; ++d) {
        const int64_t i = idx[size_t(d)];
        oq += i * stride(q, d), ok += i * stride(k, d), ov += i * stride(v, d), oo += i * stride(out, d);
        om += i * mstride(d);
      }
      qo[b] = oq, qo[B + b] = ok, qo[2 * B + b] = ov, qo[3 * B + b] = oo, qo[4 * B + b] = om;
      for (int64_t d = nb - 1; d >= 0; --d) {  // next multi-index
        if (++idx[size_t(d)] < qs[size_t(d)]) break;
        idx[size_t(d)] = 0;
      }
    }
  }

  // Split (batch index x query block) over the pool; a task gets enough
  // items to outweigh handing it out (about 2^18 flops of products).
  const int64_t items = B * J.nqb;
  const int64_t rows = std::min(L, kBr);
  const int64_t keys = std::max<int64_t>(1, causal ? std::min(S, L) / 2 : S);  // causal: about half on average
  const int64_t flops = std::max<int64_t>(1, 2 * rows * keys * (E + Ev));
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / flops);
  const int level = simd_level();
  parallel_for(items, grain, [&J, level](int64_t begin, int64_t end) { run(J, begin, end, level); });
}

}  // namespace

Shape attention_result_sizes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  if (!q.defined() || !k.defined() || !v.defined()) fail("query, key, value and out must be tensors");
  const int64_t nd = q.dim();
  if (nd < 2 || k.dim() != nd || v.dim() != nd)
    fail("query, key and value must have the same number of dims, at least 2; got " + shapes(q, k, v));
  if (!is_floating(q.dtype()))
    fail(std::string("expected a float32 or float64 query, got ") + dtype_name(q.dtype()));
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    fail(std::string("query, key and value must have the same dtype, got ") + dtype_name(q.dtype()) + ", " +
         dtype_name(k.dtype()) + " and " + dtype_name(v.dtype()));
  const Shape &qs = q.sizes(), &ks = k.sizes(), &vs = v.sizes();
  for (int64_t d = 0; d + 2 < nd; ++d)
    if (ks[size_t(d)] != qs[size_t(d)] || vs[size_t(d)] != qs[size_t(d)])
      fail("the batch dims of query, key and value must be equal; got " + shapes(q, k, v));
  const size_t L = size_t(nd - 2), E = size_t(nd - 1);
  if (ks[E] != qs[E]) fail("key's last dim must equal query's (" + std::to_string(qs[E]) + "); got " + shapes(q, k, v));
  if (vs[L] != ks[L])
    fail("value must have as many rows as key (" + std::to_string(ks[L]) + "); got " + shapes(q, k, v));
  if (mask.defined()) {
    if (mask.dtype() != DType::Bool && mask.dtype() != q.dtype())
      fail(std::string("attn_mask must be bool or have the query's dtype (") + dtype_name(q.dtype()) + "), got " +
           dtype_name(mask.dtype()));
    Shape target(qs.begin(), qs.end() - 1);
    target.push_back(ks[L]);  // [..., L, S]
    bool ok = mask.dim() <= nd;
    for (int64_t e = 0; ok && e < mask.dim(); ++e) {
      const int64_t ms = mask.sizes()[size_t(e)], ts = target[size_t(nd - mask.dim() + e)];
      ok = ms == 1 || ms == ts;
    }
    if (!ok)
      fail("attn_mask of shape " + shape_str(mask.sizes()) + " cannot be broadcast to the scores' shape " +
           shape_str(target));
  }
  Shape out = qs;
  out.back() = vs.back();
  return out;
}

void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                     double scale, const Tensor& out, const AttentionOptions& options) {
  if (!q.defined() || !k.defined() || !v.defined() || !out.defined())
    fail("query, key, value and out must be tensors");
  if (q.is_meta() || k.is_meta() || v.is_meta() || out.is_meta() || (mask.defined() && mask.is_meta()))
    fail("cannot run on meta tensors");
  const Shape want = attention_result_sizes(q, k, v, mask);
  if (out.dim() != q.dim())
    fail("out must have the same number of dims as query (" + std::to_string(q.dim()) + "); got " +
         shape_str(out.sizes()));
  if (out.dtype() != q.dtype())
    fail(std::string("out must have the same dtype as query (") + dtype_name(q.dtype()) + "), got " +
         dtype_name(out.dtype()));
  if (out.sizes() != want)
    fail("out must have shape [..., L, Ev] = [..., " + std::to_string(want[want.size() - 2]) + ", " +
         std::to_string(want.back()) + "]; got " + shape_str(out.sizes()));
  const MaskKind mk = !mask.defined() ? MaskKind::None : mask.dtype() == DType::Bool ? MaskKind::Bool : MaskKind::Float;
  if (q.dtype() == DType::Float32)
    launch<float>(q, k, v, mask, mk, causal, scale, out, options);
  else
    launch<double>(q, k, v, mask, mk, causal, scale, out, options);
}

void attention_exp(const float* x, float* y, int64_t n) { exp_dispatch(x, y, n); }
void attention_exp(const double* x, double* y, int64_t n) { exp_dispatch(x, y, n); }

int set_attention_simd_limit(int level) {
  return simd_limit.exchange(std::clamp(level, 0, 2));
}

int attention_simd_level() { return simd_level(); }

}  // namespace kiln::runtime

#include "runtime/kernels/conv_epilogue.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "runtime/kernels/gemm_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::runtime {

const char* conv_activation_name(ConvActivation a) {
  switch (a) {
#define KILN_CONV_ACT_NAME(e, s) \
  case ConvActivation::e: return s;
    KILN_CONV_ACTIVATIONS(KILN_CONV_ACT_NAME)
#undef KILN_CONV_ACT_NAME
  }
  return "?";
}

bool parse_conv_activation(const std::string& name, ConvActivation& out) {
#define KILN_CONV_ACT_PARSE(e, s) \
  if (name == s) {                \
    out = ConvActivation::e;      \
    return true;                  \
  }
  KILN_CONV_ACTIVATIONS(KILN_CONV_ACT_PARSE)
#undef KILN_CONV_ACT_PARSE
  return false;
}

namespace {

// The portable path (float64, CPUs without AVX-512): libm, in T, in the
// eager rows' order of operations. max/min written so a NaN propagates, as
// torch's relu and clamp do.
template <class T>
T activate(ConvActivation act, T y) {
  auto clamp06 = [](T v) { return v != v ? v : std::min(std::max(v, T(0)), T(6)); };
  switch (act) {
    case ConvActivation::None: return y;
    case ConvActivation::Relu: return y != y ? y : std::max(y, T(0));
    case ConvActivation::Relu6: return clamp06(y);
    case ConvActivation::Hardswish: return y * clamp06(y + T(3)) / T(6);
    case ConvActivation::Hardsigmoid: return clamp06(y + T(3)) / T(6);
    case ConvActivation::Silu: return y * (T(1) / (T(1) + std::exp(-y)));
    case ConvActivation::Gelu: return (T(0.5) * y) * (T(1) + std::erf(y * T(0.70710678118654752440)));
    case ConvActivation::GeluTanh:
      return (T(0.5) * y) *
             (T(1) + std::tanh(T(0.79788456080286535588) * (y + T(0.044715) * ((y * y) * y))));
  }
  return y;
}

template <class T>
void apply_generic(const ConvEpilogue<T>& e, int64_t c, T* d, int64_t n) {
  const T s = e.scale ? e.scale[c] : T(1), b = e.shift ? e.shift[c] : T(0);
  const T* res = e.residual ? e.residual + (d - e.out) : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    T y = d[i];
    if (e.scale) y = y * s;
    if (e.shift) y = y + b;
    if (res) y = y + res[i];
    d[i] = activate(e.act, y);
  }
}

#if defined(__x86_64__)
// GCC 12 reports the undefined pass-through operand inside its own
// _mm512_max_ps/_mm512_min_ps as "may be used uninitialized" once they are
// inlined here: a false positive (the mask is all ones).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KILN_EPI_AVX512 __attribute__((target("avx512f,avx512dq,fma")))

// exp: Cephes' range reduction and polynomial (as runtime/kernels/
// attention.cpp's exp_poly), then 2^n by vscalefps, which also gets
// subnormal, zero and infinite results right: the input is only clamped
// to [-104, 89] (beyond, exp is 0 or +inf in float32), with the bound
// first so a NaN passes through. Relative error 1.2e-7 measured over
// [-100, 100]; 1.4x faster than exp_poly's two exponent-field scalings.
KILN_EPI_AVX512 inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(89.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // Cephes' split of ln2
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// erf by Abramowitz and Stegun 7.1.26 (absolute error <= 1.5e-7), odd.
KILN_EPI_AVX512 inline __m512 erf512(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(ax, _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.0f)));
  __m512 p = _mm512_set1_ps(1.061405429f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
  p = _mm512_mul_ps(p, t);
  const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(ax, ax)));
  const __m512 r = _mm512_fnmadd_ps(p, e, _mm512_set1_ps(1.0f));  // erf(|x|)
  // erf(NaN) = NaN; copy x's sign onto the result.
  const __m512 sign = _mm512_and_ps(x, _mm512_castsi512_ps(_mm512_set1_epi32(int32_t(0x80000000u))));
  return _mm512_or_ps(r, sign);
}

// max/min with the constant first: the instruction returns its second
// operand when either is NaN, so a NaN propagates as in torch.
KILN_EPI_AVX512 inline __m512 clamp06(__m512 v) {
  return _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(_mm512_setzero_ps(), v));
}

template <ConvActivation A>
KILN_EPI_AVX512 inline __m512 activate512(__m512 y) {
  const __m512 one = _mm512_set1_ps(1.0f);
  if constexpr (A == ConvActivation::Relu) return _mm512_max_ps(_mm512_setzero_ps(), y);
  if constexpr (A == ConvActivation::Relu6) return clamp06(y);
  if constexpr (A == ConvActivation::Hardswish)
    return _mm512_div_ps(_mm512_mul_ps(y, clamp06(_mm512_add_ps(y, _mm512_set1_ps(3.0f)))), _mm512_set1_ps(6.0f));
  if constexpr (A == ConvActivation::Hardsigmoid)
    return _mm512_div_ps(clamp06(_mm512_add_ps(y, _mm512_set1_ps(3.0f))), _mm512_set1_ps(6.0f));
  if constexpr (A == ConvActivation::Silu)
    return _mm512_mul_ps(y, _mm512_div_ps(one, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), y)))));
  if constexpr (A == ConvActivation::Gelu)
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), y),
                         _mm512_add_ps(one, erf512(_mm512_mul_ps(y, _mm512_set1_ps(0.70710678118654752440f)))));
  if constexpr (A == ConvActivation::GeluTanh) {
    const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(y, y), y);
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.79788456080286535588f),
                                   _mm512_add_ps(y, _mm512_mul_ps(_mm512_set1_ps(0.044715f), cube)));
    // tanh(u) = 1 - 2 / (exp(2u) + 1): +-1 at the ends, no inf / inf.
    const __m512 th = _mm512_sub_ps(
        one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(exp512(_mm512_add_ps(u, u)), one)));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), y), _mm512_add_ps(one, th));
  }
  return y;
}

// (A lambda would not inherit the target attribute: a plain function.)
template <ConvActivation A>
KILN_EPI_AVX512 inline __m512 affine_activate512(__m512 y, bool has_scale, __m512 s, bool has_shift, __m512 b,
                                                 bool has_res, __m512 r) {
  if (has_scale) y = _mm512_mul_ps(y, s);
  if (has_shift) y = _mm512_add_ps(y, b);
  if (has_res) y = _mm512_add_ps(y, r);
  return activate512<A>(y);
}

template <ConvActivation A>
KILN_EPI_AVX512 void apply512(const ConvEpilogue<float>& e, int64_t c, float* d, int64_t n) {
  const __m512 s = _mm512_set1_ps(e.scale ? e.scale[c] : 1.0f), b = _mm512_set1_ps(e.shift ? e.shift[c] : 0.0f);
  const bool hs = e.scale != nullptr, hb = e.shift != nullptr, hr = e.residual != nullptr;
  const float* res = hr ? e.residual + (d - e.out) : nullptr;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = hr ? _mm512_loadu_ps(res + i) : _mm512_setzero_ps();
    _mm512_storeu_ps(d + i, affine_activate512<A>(_mm512_loadu_ps(d + i), hs, s, hb, b, hr, r));
  }
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
    const __m512 r = hr ? _mm512_maskz_loadu_ps(m, res + i) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(d + i, m, affine_activate512<A>(_mm512_maskz_loadu_ps(m, d + i), hs, s, hb, b, hr, r));
  }
}

using Apply512 = void (*)(const ConvEpilogue<float>&, int64_t, float*, int64_t);

Apply512 apply512_for(ConvActivation a) {
  switch (a) {
#define KILN_CONV_ACT_FN(e, s) \
  case ConvActivation::e: return &apply512<ConvActivation::e>;
    KILN_CONV_ACTIVATIONS(KILN_CONV_ACT_FN)
#undef KILN_CONV_ACT_FN
  }
  return nullptr;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

template <class T>
void ConvEpilogue<T>::apply(int64_t c, T* data, int64_t n) const {
  if (!active() || n <= 0) return;
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (has_avx512()) return apply512_for(act)(*this, c, data, n);
  }
#endif
  apply_generic(*this, c, data, n);
}

template struct ConvEpilogue<float>;
template struct ConvEpilogue<double>;

}  // namespace kiln::runtime

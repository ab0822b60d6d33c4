// runtime/kernels/attention.h: the tiled ("flash") attention kernel against a
// straightforward reference (scores, softmax and the product in double),
// element by element: shapes off the tile sizes, L or S of 1 or 0, E != Ev,
// strided / transposed / broadcast operands, bool and float masks
// broadcast from fewer dims, causal (L < S, L > S) alone and with a mask,
// fully masked rows, the online softmax's rescaling, bad arguments; and the
// kernel's polynomial exp against std::exp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops_test_util.h"
#include "runtime/kernels/attention.h"

using namespace kiln;
using namespace kiln::runtime;
using namespace kiln::test;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Shape cat(Shape a, const Shape& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Sets element `i` (row-major over the tensor's own sizes) of a contiguous tensor.
void set_flat(const Tensor& t, int64_t i, double x) {
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    t.data<T>()[i] = T(x);
  });
}

// A contiguous tensor of uniform values in [lo, hi].
Tensor rnd(const Shape& s, DType dt, std::mt19937& g, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(s, dt);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) set_flat(t, i, u(g));
  return t;
}

// A strided view with the values of `t` (contiguous) whose memory is laid out
// in the dim order `perm` (perm[0] outermost) and which starts `pad`
// elements into its storage: the same logical tensor, read through other
// strides and a storage offset.
Tensor relayout(const Tensor& t, const std::vector<int>& perm, int64_t pad = 3) {
  const Shape& s = t.sizes();
  const int64_t nd = t.dim();
  Shape ps;  // sizes in memory order
  for (int d : perm) ps.push_back(s[size_t(d)]);
  const Shape pstr = contiguous_strides(ps);
  Shape strides(size_t(nd), 0);
  for (int64_t i = 0; i < nd; ++i) strides[size_t(perm[size_t(i)])] = pstr[size_t(i)];
  Tensor storage = Tensor::empty({t.numel() + pad}, t.dtype());
  Tensor view = storage.as_strided(s, strides, pad);
  std::vector<int64_t> idx(size_t(nd), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t off = pad;
    for (int64_t d = 0; d < nd; ++d) off += idx[size_t(d)] * strides[size_t(d)];
    dispatch_dtype(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      storage.data<T>()[off] = t.data<T>()[i];
    });
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < s[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return view;
}

// Element at a multi-index of rank >= t.dim(), right-aligned; size-1 dims of t
// broadcast (read at 0). Reads through t's strides.
double at(const Tensor& t, const std::vector<int64_t>& idx) {
  const size_t lead = idx.size() - size_t(t.dim());
  int64_t off = 0;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.sizes()[size_t(d)] != 1) off += idx[lead + size_t(d)] * t.strides()[size_t(d)];
  double x = 0;
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    x = double(t.data<T>()[off]);
  });
  return x;
}

// softmax(q @ k^T * scale + mask) @ v in double, row-major [..., L, Ev].
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                              double scale) {
  const int64_t nd = q.dim(), nb = nd - 2;
  const int64_t L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  int64_t B = 1;
  for (int64_t d = 0; d < nb; ++d) B *= q.sizes()[size_t(d)];
  // q, k, v row-major (vals() copies through the strides), the mask through at().
  const std::vector<double> qd = vals(q), kd = vals(k), vd = vals(v);
  std::vector<double> out;
  out.reserve(size_t(B * L * Ev));
  std::vector<int64_t> bi(size_t(nb), 0);
  std::vector<double> s(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> idx = bi;
    idx.push_back(0);
    idx.push_back(0);
    const double* qb = qd.data() + b * L * E;
    const double* kb = kd.data() + b * S * E;
    const double* vb = vd.data() + b * S * Ev;
    for (int64_t i = 0; i < L; ++i) {
      double mx = -kInf;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += qb[i * E + e] * kb[j * E + e];
        double x = dot * scale;
        if (mask.defined()) {
          idx[size_t(nb)] = i;
          idx[size_t(nb + 1)] = j;
          const double mv = at(mask, idx);
          if (mask.dtype() == DType::Bool)
            x = mv != 0 ? x : -kInf;
          else
            x += mv;
        }
        if (causal && j > i) x = -kInf;
        s[size_t(j)] = x;
        mx = std::max(mx, x);
      }
      double sum = 0;
      for (int64_t j = 0; j < S; ++j) {
        s[size_t(j)] = mx == -kInf ? 0.0 : std::exp(s[size_t(j)] - mx);
        sum += s[size_t(j)];
      }
      for (int64_t c = 0; c < Ev; ++c) {
        double o = 0;
        for (int64_t j = 0; j < S; ++j) o += s[size_t(j)] * vb[j * Ev + c];
        out.push_back(sum > 0 ? o / sum : 0.0);
      }
    }
    for (int64_t d = nb - 1; d >= 0; --d) {
      if (++bi[size_t(d)] < q.sizes()[size_t(d)]) break;
      bi[size_t(d)] = 0;
    }
  }
  return out;
}

// out [..., L, Ev], filled with NaN first so an element the kernel never
// writes shows.
Tensor nan_out(const Tensor& q, const Tensor& v) {
  Shape s(q.sizes().begin(), q.sizes().end() - 1);
  s.push_back(v.size(-1));
  Tensor out = Tensor::empty(s, q.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) set_flat(out, i, std::nan(""));
  return out;
}

double tolerance(DType dt) { return dt == DType::Float32 ? 1e-5 : 1e-12; }

// Every element of `got` (any strides) within tol * (1 + |ref|) of the reference.
void check_matches(const Tensor& got, const std::vector<double>& ref, double tol) {
  const std::vector<double> g = vals(got);
  REQUIRE(g.size() == ref.size());
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - ref[i]);
    if (!(err <= tol * (1 + std::abs(ref[i])))) {
      if (bad++ == 0) first = i;
    }
    if (err > worst || std::isnan(err)) worst = err;
  }
  INFO("elements: " << g.size() << ", mismatches: " << bad << ", worst error: " << worst);
  INFO("first mismatch at " << first << ": got " << (bad ? g[first] : 0.0) << ", expected " << (bad ? ref[first] : 0.0));
  CHECK(bad == 0);
}

// Runs the kernel into a fresh NaN-filled out and compares it with the reference.
// (tol: the float32 tolerance when not the default.)
Tensor check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                       double scale, double f32_tol = 0) {
  Tensor out = nan_out(q, v);
  flash_attention(q, k, v, mask, causal, scale, out);
  const double tol = q.dtype() == DType::Float32 && f32_tol > 0 ? f32_tol : tolerance(q.dtype());
  check_matches(out, reference(q, k, v, mask, causal, scale), tol);
  return out;
}

struct Case {
  Shape batch;
  int64_t L, S, E, Ev;
};

std::string describe(const Case& c, DType dt) {
  return std::string(dtype_name(dt)) + " batch " + shape_str(c.batch) + " L=" + std::to_string(c.L) +
         " S=" + std::to_string(c.S) + " E=" + std::to_string(c.E) + " Ev=" + std::to_string(c.Ev);
}

const DType kDTypes[] = {DType::Float32, DType::Float64};

// Checks that f raises RuntimeError naming scaled_dot_product_attention, and
// that the message contains `part`.
template <class F>
void check_raises(F&& f, const std::string& part) {
  try {
    f();
  } catch (const Error& e) {
    INFO(e.message());
    CHECK(e.kind() == ErrorKind::RuntimeError);
    CHECK(e.message().find("scaled_dot_product_attention") != std::string::npos);
    CHECK(e.message().find(part) != std::string::npos);
    return;
  }
  FAIL("expected a RuntimeError containing: " << part);
}

// Caps the kernel's instruction set for a scope (0 baseline, 1 AVX2, 2 AVX-512).
struct SimdLimit {
  int old;
  explicit SimdLimit(int level) : old(set_attention_simd_limit(level)) {}
  ~SimdLimit() { set_attention_simd_limit(old); }
  SimdLimit(const SimdLimit&) = delete;
  SimdLimit& operator=(const SimdLimit&) = delete;
};

}  // namespace

// Each test below runs once per build of the kernel (baseline, AVX2, AVX-512;
// the ones this CPU lacks run as the best it has).
#define EACH_SIMD_LEVEL()                                 \
  const int simd_limit_ = GENERATE(0, 1, 2);              \
  SimdLimit simd_guard_(simd_limit_);                     \
  INFO("simd level " << attention_simd_level() << " (limit " << simd_limit_ << ")")

TEST_CASE("attention simd levels", "[attention]") {
  const int best = attention_simd_level();
  CHECK(best >= 0);
  CHECK(best <= 2);
  {
    SimdLimit cap(0);
    CHECK(attention_simd_level() == 0);
  }
  CHECK(attention_simd_level() == best);
}

TEST_CASE("attention exp: float32 within 2 ULP of exp, special values exact", "[attention]") {
  EACH_SIMD_LEVEL();
  // Every 1009th float bit pattern in [-110, 0] and [0, 89] (all magnitudes),
  // uniform points over the same range, and special values.
  std::vector<float> x;
  auto from_bits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  for (uint32_t b = 0; from_bits(b) <= 89.0f; b += 1009) x.push_back(from_bits(b));
  for (uint32_t b = 0x80000000u; from_bits(b) >= -110.0f; b += 1009) x.push_back(from_bits(b));
  std::mt19937 g(11);
  std::uniform_real_distribution<float> u(-110.0f, 89.0f);
  for (int i = 0; i < 200000; ++i) x.push_back(u(g));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {-inf, inf, -1e30f, 1e30f, 0.0f, -0.0f, -103.97f, -87.0f, -88.0f,
                                      88.72283172607421875f, 88.7228394f, -1e-10f, 1e-10f, 1.0f, -1.0f};
  x.insert(x.end(), special.begin(), special.end());
  x.push_back(0.5f);  // n % 16 != 0: the scalar tail runs too
  std::vector<float> y(x.size());
  attention_exp(x.data(), y.data(), int64_t(x.size()));
  int64_t worst = 0, bad = 0;
  size_t worst_i = 0, bad_i = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = float(std::exp(double(x[i])));  // exp in double, rounded: the correctly rounded value (nearly always)
    if (std::isnan(y[i]) || y[i] < 0.0f || ((std::isinf(want) || std::isinf(y[i])) && y[i] != want)) {
      if (bad++ == 0) bad_i = i;
      continue;
    }
    if (std::isinf(want)) continue;
    int32_t a, b;
    std::memcpy(&a, &y[i], 4);
    std::memcpy(&b, &want, 4);
    const int64_t ulp = std::abs(int64_t(a) - int64_t(b));  // non-negative floats: bit order is value order
    if (ulp > worst) worst = ulp, worst_i = i;
  }
  INFO("worst: " << worst << " ULP at x = " << x[worst_i] << " (got " << y[worst_i] << ")");
  INFO("NaN, negative or a wrong inf: " << bad << ", the first at x = " << x[bad_i] << " (got " << y[bad_i] << ")");
  CHECK(bad == 0);
  CHECK(worst <= 2);
  float s[6] = {-inf, -1e30f, -200.0f, 0.0f, inf, std::nanf("")}, t[6];
  attention_exp(s, t, 6);
  CHECK(t[0] == 0.0f);
  CHECK(t[1] == 0.0f);
  CHECK(t[2] == 0.0f);
  CHECK(t[3] == 1.0f);
  CHECK(t[4] == inf);
  CHECK(std::isnan(t[5]));
}

TEST_CASE("attention exp: float64 within 1e-15 of exp", "[attention]") {
  EACH_SIMD_LEVEL();
  std::vector<double> x;
  for (double f = -750.0; f < 712.0; f += 0.0137) x.push_back(f);
  std::mt19937_64 g(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int i = 0; i < 20000; ++i) x.push_back(u(g));  // the reduction's |r| <= ln2/2 region densely
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> special = {-inf, inf, -1e300, 1e300, 0.0, -0.0, -745.1, -708.5, 709.78, 1e-300};
  x.insert(x.end(), special.begin(), special.end());
  x.push_back(0.25);  // n % 8 != 0
  std::vector<double> y(x.size());
  attention_exp(x.data(), y.data(), int64_t(x.size()));
  double worst = 0;
  int64_t bad = 0;
  size_t worst_i = 0, bad_i = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const long double want = std::exp(static_cast<long double>(x[i]));
    bool ok = !std::isnan(y[i]);
    if (ok && want > static_cast<long double>(std::numeric_limits<double>::max())) {
      ok = y[i] == inf;
    } else if (ok && want < static_cast<long double>(std::numeric_limits<double>::min())) {  // subnormal or 0
      ok = std::abs(static_cast<long double>(y[i]) - want) <=
           2 * static_cast<long double>(std::numeric_limits<double>::denorm_min());
    } else if (ok) {
      const double rel = double(std::abs((static_cast<long double>(y[i]) - want) / want));
      if (rel > worst) worst = rel, worst_i = i;
    }
    if (!ok && bad++ == 0) bad_i = i;
  }
  INFO("worst relative error " << worst << " at x = " << x[worst_i]);
  INFO("NaN, wrong inf or subnormal: " << bad << ", the first at x = " << x[bad_i] << " (got " << y[bad_i] << ")");
  CHECK(bad == 0);
  CHECK(worst <= 1e-15);
  double s[5] = {-inf, -1e300, -800.0, 0.0, std::nan("")}, t[5];
  attention_exp(s, t, 5);
  CHECK(t[0] == 0.0);
  CHECK(t[1] == 0.0);
  CHECK(t[2] == 0.0);
  CHECK(t[3] == 1.0);
  CHECK(std::isnan(t[4]));
}

TEST_CASE("flash attention matches the reference over shapes", "[attention]") {
  EACH_SIMD_LEVEL();
  const Case cases[] = {
      {{2, 3}, 5, 7, 8, 8},      {{1}, 1, 1, 4, 4},        {{2}, 1, 37, 16, 24},  {{2}, 37, 1, 16, 8},
      {{2, 3}, 67, 131, 32, 48}, {{}, 64, 64, 16, 16},     {{3}, 128, 64, 64, 64}, {{2}, 130, 200, 24, 40},
      {{1}, 9, 300, 1, 3},       {{2}, 65, 63, 5, 1},      {{1, 1}, 200, 17, 128, 96},
  };
  std::mt19937 g(1);
  for (DType dt : kDTypes)
    for (const Case& c : cases) {
      INFO(describe(c, dt));
      const Tensor q = rnd(cat(c.batch, {c.L, c.E}), dt, g), k = rnd(cat(c.batch, {c.S, c.E}), dt, g),
                   v = rnd(cat(c.batch, {c.S, c.Ev}), dt, g);
      check_attention(q, k, v, Tensor(), false, 1.0 / std::sqrt(double(c.E)));
      check_attention(q, k, v, Tensor(), false, 2.5);
    }
}

TEST_CASE("flash attention: empty L, S, E, Ev and batch", "[attention]") {
  EACH_SIMD_LEVEL();
  std::mt19937 g(2);
  for (DType dt : kDTypes) {
    INFO(dtype_name(dt));
    {  // L = 0: nothing to write
      const Tensor q = rnd({2, 0, 8}, dt, g), k = rnd({2, 5, 8}, dt, g), v = rnd({2, 5, 4}, dt, g);
      Tensor out = Tensor::empty({2, 0, 4}, dt);
      flash_attention(q, k, v, Tensor(), false, 0.5, out);
      flash_attention(q, k, v, Tensor(), true, 0.5, out);
    }
    for (bool causal : {false, true}) {  // S = 0: softmax over an empty row, zeros (torch's math path)
      const Tensor q = rnd({2, 3, 8}, dt, g), k = rnd({2, 0, 8}, dt, g), v = rnd({2, 0, 4}, dt, g);
      const Tensor out = check_attention(q, k, v, Tensor(), causal, 0.5);
      CHECK(vals(out) == std::vector<double>(24, 0.0));
    }
    {  // S = 0 with a mask
      const Tensor q = rnd({1, 2, 8}, dt, g), k = rnd({1, 0, 8}, dt, g), v = rnd({1, 0, 4}, dt, g);
      const Tensor out = check_attention(q, k, v, Tensor::empty({2, 0}, DType::Bool), false, 0.5);
      CHECK(vals(out) == std::vector<double>(8, 0.0));
    }
    {  // E = 0: every score 0, out is the mean of v's rows
      const Tensor q = rnd({2, 3, 0}, dt, g), k = rnd({2, 5, 0}, dt, g), v = rnd({2, 5, 4}, dt, g);
      check_attention(q, k, v, Tensor(), false, 1.0);
      check_attention(q, k, v, Tensor(), true, 1.0);
    }
    {  // Ev = 0 and an empty batch dim
      check_attention(rnd({2, 3, 8}, dt, g), rnd({2, 5, 8}, dt, g), rnd({2, 5, 0}, dt, g), Tensor(), false, 1.0);
      Tensor out = Tensor::empty({0, 3, 4}, dt);
      flash_attention(rnd({0, 3, 8}, dt, g), rnd({0, 5, 8}, dt, g), rnd({0, 5, 4}, dt, g), Tensor(), false, 1.0,
                      out);
    }
  }
}

TEST_CASE("flash attention reads strided, transposed and broadcast operands", "[attention]") {
  EACH_SIMD_LEVEL();
  std::mt19937 g(3);
  const int64_t B = 2, H = 3, L = 67, S = 131, E = 24, Ev = 40;
  for (DType dt : kDTypes) {
    INFO(dtype_name(dt));
    const Tensor q = rnd({B, H, L, E}, dt, g), k = rnd({B, H, S, E}, dt, g), v = rnd({B, H, S, Ev}, dt, g);
    const double scale = 1.0 / std::sqrt(double(E));
    const std::vector<double> want = reference(q, k, v, Tensor(), false, scale);
    auto run = [&](const Tensor& q2, const Tensor& k2, const Tensor& v2, const Tensor& out) {
      flash_attention(q2, k2, v2, Tensor(), false, scale, out);
      check_matches(out, want, tolerance(dt));
    };
    {
      INFO("k a transposed view (memory [B, H, E, S]), with a storage offset");
      const Tensor kt = relayout(k, {0, 1, 3, 2});
      CHECK(kt.strides()[3] == S);
      CHECK(kt.offset() == 3);
      run(q, kt, v, nan_out(q, v));
    }
    {
      INFO("q, k, v as [B, S, H, E] memory viewed as [B, H, S, E]");
      run(relayout(q, {0, 2, 1, 3}), relayout(k, {0, 2, 1, 3}), relayout(v, {0, 2, 1, 3}), nan_out(q, v));
    }
    {
      INFO("v transposed (memory [B, H, Ev, S]) and k fully permuted");
      run(q, relayout(k, {3, 1, 2, 0}), relayout(v, {0, 1, 3, 2}), nan_out(q, v));
    }
    {
      INFO("out written through its strides (memory [B, L, H, Ev], then [B, H, Ev, L])");
      run(q, k, v, relayout(nan_out(q, v), {0, 2, 1, 3}));
      run(q, k, v, relayout(nan_out(q, v), {0, 1, 3, 2}));
    }
  }
  {
    INFO("q broadcast over the batch with stride 0, k and v over heads");
    for (DType dt : kDTypes) {
      INFO(dtype_name(dt));
      const Tensor q1 = rnd({1, H, L, E}, dt, g), k1 = rnd({B, 1, S, E}, dt, g), v1 = rnd({B, 1, S, Ev}, dt, g);
      const Tensor q = q1.as_strided({B, H, L, E}, {0, L * E, E, 1}, 0);
      const Tensor k = k1.as_strided({B, H, S, E}, {S * E, 0, E, 1}, 0);
      const Tensor v = v1.as_strided({B, H, S, Ev}, {S * Ev, 0, Ev, 1}, 0);
      check_attention(q, k, v, Tensor(), false, 0.3);
      check_attention(q, k, v, Tensor(), true, 0.3);
    }
  }
}

TEST_CASE("flash attention: bool masks broadcast from fewer dims", "[attention]") {
  EACH_SIMD_LEVEL();
  std::mt19937 g(4);
  const int64_t B = 2, H = 3, L = 67, S = 131, E = 16, Ev = 24;
  std::bernoulli_distribution keep(0.7);
  auto bool_mask = [&](const Shape& s) {
    Tensor m = Tensor::empty(s, DType::Bool);
    for (int64_t i = 0; i < m.numel(); ++i) m.data<bool>()[i] = keep(g);
    return m;
  };
  for (DType dt : kDTypes) {
    INFO(dtype_name(dt));
    const Tensor q = rnd({B, H, L, E}, dt, g), k = rnd({B, H, S, E}, dt, g), v = rnd({B, H, S, Ev}, dt, g);
    for (const Shape& ms : std::vector<Shape>{{L, S}, {1, 1, L, S}, {B, 1, 1, S}, {S}, {B, H, L, S}, {H, 1, S}, {1}}) {
      INFO("mask " << shape_str(ms));
      check_attention(q, k, v, bool_mask(ms), false, 0.25);
    }
    // A padding mask expanded with 0 strides, and an [L, S] mask read transposed.
    const Tensor pad = bool_mask({B, 1, 1, S}).as_strided({B, H, L, S}, {S, 0, 0, 1}, 0);
    check_attention(q, k, v, pad, false, 0.25);
    check_attention(q, k, v, relayout(bool_mask({L, S}), {1, 0}), false, 0.25);
  }
}

TEST_CASE("flash attention: float masks, with -inf", "[attention]") {
  EACH_SIMD_LEVEL();
  std::mt19937 g(5);
  const int64_t B = 2, H = 2, L = 70, S = 129, E = 32, Ev = 16;
  std::bernoulli_distribution hole(0.2);
  for (DType dt : kDTypes) {
    INFO(dtype_name(dt));
    const Tensor q = rnd({B, H, L, E}, dt, g), k = rnd({B, H, S, E}, dt, g), v = rnd({B, H, S, Ev}, dt, g);
    for (const Shape& ms : std::vector<Shape>{{B, H, L, S}, {L, S}, {B, 1, 1, S}, {1, H, L, 1}}) {
      INFO("mask " << shape_str(ms));
      Tensor m = rnd(ms, dt, g, -3.0, 3.0);
      for (int64_t i = 0; i < m.numel(); ++i)
        if (hole(g)) set_flat(m, i, -kInf);
      check_attention(q, k, v, m, false, 0.2);
    }
  }
}

TEST_CASE("flash attention: causal, L < S, L > S, with masks", "[attention]") {
  EACH_SIMD_LEVEL();
  std::mt19937 g(6);
  const Case cases[] = {{{2, 2}, 67, 131, 16, 24}, {{2}, 131, 67, 16, 8},  {{1}, 64, 64, 32, 32},
                        {{2}, 1, 100, 8, 8},       {{2}, 100, 1, 8, 8},    {{1}, 200, 200, 8, 16},
                        {{3}, 5, 3, 4, 4},         {{1}, 130, 129, 64, 64}};
  std::bernoulli_distribution keep(0.8);
  for (DType dt : kDTypes)
    for (const Case& c : cases) {
      INFO(describe(c, dt));
      const Tensor q = rnd(cat(c.batch, {c.L, c.E}), dt, g), k = rnd(cat(c.batch, {c.S, c.E}), dt, g),
                   v = rnd(cat(c.batch, {c.S, c.Ev}), dt, g);
      check_attention(q, k, v, Tensor(), true, 0.5);
      Tensor bm = Tensor::empty({c.L, c.S}, DType::Bool);
      for (int64_t i = 0; i < bm.numel(); ++i) bm.data<bool>()[i] = keep(g);
      check_attention(q, k, v, bm, true, 0.5);
      check_attention(q, k, v, rnd({c.L, c.S}, dt, g, -2.0, 2.0), true, 0.5);
    }
}

TEST_CASE("flash attention: fully masked rows are zeros", "[attention]") {
  EACH_SIMD_LEVEL();
  std::mt19937 g(7);
  const int64_t L = 70, S = 150, E = 16, Ev = 12;
  for (DType dt : kDTypes) {
    INFO(dtype_name(dt));
    const Tensor q = rnd({2, L, E}, dt, g), k = rnd({2, S, E}, dt, g), v = rnd({2, S, Ev}, dt, g);
    const std::vector<int64_t> dead = {0, 3, 64, 69};  // rows in the first and second query block
    Tensor bm = Tensor::empty({L, S}, DType::Bool), fm = Tensor::empty({L, S}, dt);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        const bool d = std::find(dead.begin(), dead.end(), i) != dead.end();
        bm.data<bool>()[i * S + j] = !d && j % 3 != 0;
        set_flat(fm, i * S + j, d ? -kInf : (j % 3 == 0 ? -kInf : 0.5));
      }
    // Causal masks all but key 0 for query 0; the mask takes key 0 from every query.
    Tensor first = Tensor::empty({S}, DType::Bool);
    for (int64_t j = 0; j < S; ++j) first.data<bool>()[j] = j != 0;
    for (int variant = 0; variant < 3; ++variant) {
      INFO("variant " << variant);
      const Tensor& m = variant == 0 ? bm : variant == 1 ? fm : first;
      const bool causal = variant == 2;
      const Tensor out = check_attention(q, k, v, m, causal, 0.5);
      const std::vector<double> o = vals(out);
      const std::vector<int64_t> zero_rows = causal ? std::vector<int64_t>{0} : dead;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t i : zero_rows)
          for (int64_t c = 0; c < Ev; ++c) CHECK(o[size_t((b * L + i) * Ev + c)] == 0.0);
      for (int64_t c = 0; c < Ev; ++c) CHECK(o[size_t(1 * Ev + c)] != 0.0);  // a live row
    }
    // Every score masked: all zeros.
    const Tensor none = Tensor::empty({1, 1}, DType::Bool);  // false
    const Tensor out = check_attention(q, k, v, none, false, 0.5);
    CHECK(vals(out) == std::vector<double>(size_t(2 * L * Ev), 0.0));
  }
}

TEST_CASE("flash attention: rows masked for whole key tiles before their first live key", "[attention]") {
  EACH_SIMD_LEVEL();
  // Left padding: the running max stays -inf over the first tiles, then the
  // first live key must not inherit anything from them.
  std::mt19937 g(10);
  const int64_t B = 2, L = 70, S = 300, E = 16, Ev = 16;
  for (DType dt : kDTypes) {
    INFO(dtype_name(dt));
    const Tensor q = rnd({B, 1, L, E}, dt, g), k = rnd({B, 1, S, E}, dt, g), v = rnd({B, 1, S, Ev}, dt, g);
    Tensor pad = Tensor::empty({B, 1, 1, S}, DType::Bool);  // batch 0 keeps keys >= 130, batch 1 keys >= 299
    for (int64_t j = 0; j < S; ++j) {
      pad.data<bool>()[j] = j >= 130;
      pad.data<bool>()[S + j] = j >= 299;
    }
    check_attention(q, k, v, pad, false, 0.5);
    Tensor rows = Tensor::empty({L, S}, DType::Bool), frows = Tensor::empty({L, S}, dt);  // row i keeps keys >= (37 i) % S
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        rows.data<bool>()[i * S + j] = j >= (37 * i) % S;
        set_flat(frows, i * S + j, j >= (37 * i) % S ? 0.25 * double(j % 5) : -kInf);
      }
    check_attention(q, k, v, rows, false, 0.5);
    check_attention(q, k, v, frows, false, 0.5);
    // With causal too, row i keeps keys in [(37 i) % S, i]: often none (zeros).
    check_attention(q, k, v, rows, true, 0.5);
  }
}

TEST_CASE("flash attention: large scores and a max that grows tile after tile", "[attention]") {
  EACH_SIMD_LEVEL();
  std::mt19937 g(8);
  const int64_t L = 66, S = 300, E = 8, Ev = 8;
  for (DType dt : kDTypes) {
    INFO(dtype_name(dt));
    // Scores grow with the key index (so every key tile raises the running
    // max and rescales the accumulator), then a spike at the end.
    Tensor q = rnd({1, L, E}, dt, g, 0.5, 1.0), k = Tensor::empty({1, S, E}, dt);
    for (int64_t j = 0; j < S; ++j)
      for (int64_t e = 0; e < E; ++e) set_flat(k, j * E + e, (j == S - 5 ? 60.0 : 0.1 * double(j)) / double(E));
    const Tensor v = rnd({1, S, Ev}, dt, g);
    check_attention(q, k, v, Tensor(), false, 1.0);
    check_attention(q, k, v, Tensor(), true, 1.0);
    // Scores of several hundred, where exp(score) alone overflows. A float32
    // score that size is itself only good to ~500 * 2^-24 = 3e-5 (in any
    // float32 kernel), which exp turns into relative error: float32 gets 1e-4.
    const Tensor qb = rnd({2, L, E}, dt, g, -4.0, 4.0), kb = rnd({2, S, E}, dt, g, -4.0, 4.0);
    check_attention(qb, kb, rnd({2, S, Ev}, dt, g), Tensor(), false, 8.0, 1e-4);
    check_attention(qb, kb, rnd({2, S, Ev}, dt, g), Tensor(), true, 8.0, 1e-4);
  }
}

TEST_CASE("flash attention: bad arguments raise RuntimeError", "[attention]") {
  EACH_SIMD_LEVEL();
  std::mt19937 g(9);
  const DType f = DType::Float32;
  const Tensor q = rnd({2, 4, 8}, f, g), k = rnd({2, 5, 8}, f, g), v = rnd({2, 5, 6}, f, g);
  const Tensor out = Tensor::empty({2, 4, 6}, f);
  auto sdpa = [&](const Tensor& q2, const Tensor& k2, const Tensor& v2, const Tensor& m, const Tensor& o) {
    return [=] { flash_attention(q2, k2, v2, m, false, 1.0, o); };
  };
  flash_attention(q, k, v, Tensor(), false, 1.0, out);  // the good call
  check_raises(sdpa(Tensor(), k, v, Tensor(), out), "must be tensors");
  check_raises(sdpa(rnd({8}, f, g), rnd({8}, f, g), rnd({8}, f, g), Tensor(), Tensor::empty({8}, f)), "at least 2");
  check_raises(sdpa(q, rnd({5, 8}, f, g), v, Tensor(), out), "same number of dims");
  check_raises(sdpa(q, k, v, Tensor(), Tensor::empty({2, 4}, f)), "same number of dims");
  check_raises(sdpa(it({1, 2, 3, 4}, {1, 2, 2}), it({1, 2, 3, 4}, {1, 2, 2}), it({1, 2, 3, 4}, {1, 2, 2}), Tensor(),
                    Tensor::empty({1, 2, 2}, DType::Int64)),
               "expected a float32 or float64 query, got int64");
  check_raises(sdpa(q, k.to(DType::Float64), v, Tensor(), out), "same dtype");
  check_raises(sdpa(q, k, v, Tensor(), Tensor::empty({2, 4, 6}, DType::Float64)), "same dtype");
  check_raises(sdpa(q, rnd({3, 5, 8}, f, g), rnd({3, 5, 6}, f, g), Tensor(), out), "batch dims");
  check_raises(sdpa(q, rnd({2, 5, 7}, f, g), v, Tensor(), out), "key's last dim must equal query's (8)");
  check_raises(sdpa(q, k, rnd({2, 6, 6}, f, g), Tensor(), out), "value must have as many rows as key (5)");
  check_raises(sdpa(q, k, v, Tensor(), Tensor::empty({2, 4, 5}, f)), "out must have shape [..., L, Ev] = [..., 4, 6]");
  check_raises(sdpa(q, k, v, Tensor(), Tensor::empty({2, 3, 6}, f)), "out must have shape");
  check_raises(sdpa(q, k, v, it({1}, {1}), out), "attn_mask must be bool or have the query's dtype (float32), got int64");
  check_raises(sdpa(q, k, v, Tensor::empty({4, 5}, DType::Float64), out), "got float64");
  check_raises(sdpa(q, k, v, Tensor::empty({4, 6}, DType::Bool), out),
               "attn_mask of shape [4, 6] cannot be broadcast to the scores' shape [2, 4, 5]");
  check_raises(sdpa(q, k, v, Tensor::empty({3, 4, 5}, DType::Bool), out), "cannot be broadcast");
  check_raises(sdpa(q, k, v, Tensor::empty({1, 2, 4, 5}, DType::Bool), out), "cannot be broadcast");
  check_raises(sdpa(q, k, v, Tensor::meta({4, 5}, DType::Bool), out), "meta");
  // Broadcastable masks are accepted.
  flash_attention(q, k, v, Tensor::empty({2, 1, 5}, DType::Bool), false, 1.0, out);
  flash_attention(q, k, v, Tensor::empty({}, DType::Float32), true, 1.0, out);
}

// The global random generator: Philox 4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3"), counter-based, keyed by the seed.
//
// Reproducibility contract: the same seed and the same sequence of calls
// give bit-identical tensors on every IEEE-754 machine. Hence:
//  - uniforms are exact: k random bits times 2^-k (k = 24 for float32, 53
//    for float64), no rounding anywhere;
//  - normals use the Marsaglia polar method, which needs only + - * / and
//    sqrt (all correctly rounded by IEEE-754) plus a logarithm, and the
//    logarithm is our own (frexp + an atanh series) because std::log may
//    differ between C libraries in the last bit;
//  - this file is compiled with -ffp-contract=off (see runtime/CMakeLists),
//    so no fused multiply-add changes a rounding.
//
// State: (seed, offset). Every call starts at a fresh 128-bit Philox block
// `offset` and advances `offset` past the blocks it used.
#include <cmath>

#include "runtime/tensor/ops_kernels.h"

namespace kiln::runtime {
namespace {

struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // next unused Philox block
};

RngState& rng() {
  static RngState s;  // default seed 0, like a fresh process with manual_seed(0)
  return s;
}

using Block = std::array<uint32_t, 4>;

Block philox4x32_10(Block ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round) {
      k0 += W0;
      k1 += W1;
    }
    const uint64_t p0 = uint64_t(M0) * ctr[0];
    const uint64_t p1 = uint64_t(M1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ k1, uint32_t(p0)};
  }
  return ctr;
}

// A stream of 32-bit words from consecutive blocks; commit() advances the
// global offset past every block touched.
class Stream {
 public:
  Stream() : block_(rng().offset) {}
  uint32_t next() {
    if (used_ == 4) {
      buf_ = philox4x32_10({uint32_t(block_), uint32_t(block_ >> 32), 0, 0}, uint32_t(rng().seed),
                           uint32_t(rng().seed >> 32));
      ++block_;
      used_ = 0;
    }
    return buf_[size_t(used_++)];
  }
  // Uniform in [0, 1) with 53 random bits (exact).
  double uniform53() {
    const uint64_t a = next() >> 5, b = next() >> 6;  // 27 + 26 bits
    return double((a << 26) | b) * 0x1.0p-53;
  }
  void commit() { rng().offset = block_; }

 private:
  uint64_t block_;
  Block buf_{};
  int used_ = 4;
};

// Natural log for x > 0 (finite), from + - * / and frexp only, so that it
// rounds identically everywhere. x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(t), t = (m - 1) / (m + 1), |t| < 0.172; 14 series terms
// leave a truncation error far below double precision.
double det_log(double x) {
  int e;
  double m = std::frexp(x, &e);  // m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    --e;
  }
  const double t = (m - 1.0) / (m + 1.0);
  const double t2 = t * t;
  double p = 1.0 / 27.0;
  for (int k = 12; k >= 0; --k) p = p * t2 + 1.0 / double(2 * k + 1);
  // ln 2 split so that e * kLn2Hi is exact (fdlibm's constants).
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double de = double(e);
  return de * kLn2Hi + (de * kLn2Lo + 2.0 * t * p);
}

}  // namespace

double deterministic_log(double x) { return det_log(x); }
std::array<uint32_t, 4> philox_block(std::array<uint32_t, 4> ctr, uint32_t k0, uint32_t k1) {
  return philox4x32_10(ctr, k0, k1);
}

void manual_seed(uint64_t seed) {
  rng().seed = seed;
  rng().offset = 0;
}

namespace {
void check_target(const char* op, const Tensor& t) {
  if (!is_floating(t.dtype()) || !t.is_contiguous())
    throw_error(ErrorKind::RuntimeError, std::string(op) + ": target must be a contiguous floating point tensor");
}
}  // namespace

void fill_uniform(const Tensor& t) {
  check_target("rand", t);
  Stream s;
  const int64_t n = t.numel();
  if (t.dtype() == DType::Float32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = float(s.next() >> 8) * 0x1.0p-24f;
  } else {
    double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = s.uniform53();
  }
  s.commit();
}

void fill_normal(const Tensor& t) {
  check_target("randn", t);
  Stream s;
  const int64_t n = t.numel();
  float* p32 = t.dtype() == DType::Float32 ? t.data<float>() : nullptr;
  double* p64 = t.dtype() == DType::Float64 ? t.data<double>() : nullptr;
  auto store = [&](int64_t i, double z) {
    if (p32) p32[i] = float(z);
    else p64[i] = z;
  };
  for (int64_t i = 0; i < n; i += 2) {
    double u, v, r2;
    do {  // a point uniform in the unit disc, excluding the centre
      u = 2.0 * s.uniform53() - 1.0;
      v = 2.0 * s.uniform53() - 1.0;
      r2 = u * u + v * v;
    } while (r2 >= 1.0 || r2 == 0.0);
    const double f = std::sqrt(-2.0 * det_log(r2) / r2);
    store(i, u * f);
    if (i + 1 < n) store(i + 1, v * f);
  }
  s.commit();
}

}  // namespace kiln::runtime

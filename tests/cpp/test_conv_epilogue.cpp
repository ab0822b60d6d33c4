// The convolution epilogue (runtime/kernels/conv_epilogue.h): every
// activation of the float32 path (AVX-512 polynomials for exp and erf where
// the CPU has them) against the float64 path (libm), over a sweep of
// values, every tail length of a 16-lane vector, with and without the
// per-channel affine map; non-finite inputs as torch treats them.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/kernels/conv_epilogue.h"

namespace {

using kiln::runtime::ConvActivation;
using kiln::runtime::ConvEpilogue;

const ConvActivation kAll[] = {ConvActivation::None,        ConvActivation::Relu, ConvActivation::Relu6,
                               ConvActivation::Hardswish,   ConvActivation::Hardsigmoid, ConvActivation::Silu,
                               ConvActivation::Gelu,        ConvActivation::GeluTanh};

}  // namespace

TEST_CASE("conv epilogue: float32 equals the float64 reference for every activation", "[conv_epilogue]") {
  const float scale[2] = {1.5f, -0.75f}, shift[2] = {0.25f, -1.0f};
  for (ConvActivation act : kAll) {
    for (bool affine : {false, true}) {
      for (int64_t n : {int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(4001)}) {
        for (int64_t c = 0; c < 2; ++c) {
          std::vector<float> f(static_cast<size_t>(n));
          std::vector<double> d(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) f[size_t(i)] = float(-20.0 + 40.0 * double(i) / double(n)), d[size_t(i)] = f[size_t(i)];
          ConvEpilogue<float> ef;
          ConvEpilogue<double> ed;
          const double dscale[2] = {scale[0], scale[1]}, dshift[2] = {shift[0], shift[1]};
          if (affine) ef.scale = scale, ef.shift = shift, ed.scale = dscale, ed.shift = dshift;
          ef.act = ed.act = act;
          ef.apply(c, f.data(), n);
          ed.apply(c, d.data(), n);
          double worst = 0;
          for (int64_t i = 0; i < n; ++i)
            worst = std::max(worst, std::fabs(double(f[size_t(i)]) - d[size_t(i)]) / (1 + std::fabs(d[size_t(i)])));
          INFO(kiln::runtime::conv_activation_name(act) << " affine=" << affine << " n=" << n << " c=" << c);
          CHECK(worst < 1e-6);
        }
      }
    }
  }
}

TEST_CASE("conv epilogue: NaN propagates, infinities saturate", "[conv_epilogue]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (ConvActivation act : kAll) {
    std::vector<float> v(20, nan);
    v[1] = inf, v[2] = -inf;
    ConvEpilogue<float> e;
    e.act = act;
    e.apply(0, v.data(), int64_t(v.size()));
    INFO(kiln::runtime::conv_activation_name(act));
    CHECK(std::isnan(v[0]));
    CHECK(std::isnan(v[19]));  // the masked tail too
    if (act == ConvActivation::Relu || act == ConvActivation::Silu || act == ConvActivation::Gelu) {
      CHECK(v[1] == inf);
    }
    if (act == ConvActivation::Relu6) CHECK((v[1] == 6.0f && v[2] == 0.0f));
    if (act == ConvActivation::Relu || act == ConvActivation::Hardsigmoid) CHECK(v[2] == 0.0f);
  }
  ConvActivation parsed;
  CHECK((kiln::runtime::parse_conv_activation("hardswish", parsed) && parsed == ConvActivation::Hardswish));
  CHECK_FALSE(kiln::runtime::parse_conv_activation("tanh", parsed));
}

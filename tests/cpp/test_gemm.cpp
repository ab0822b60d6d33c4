// kiln's float32 GEMM (runtime/kernels/gemm_avx512.h) and the gemm_f32 entry that
// dispatches to it: every tile shape (rows 1..8 of a tile, masked columns),
// several k passes, strided operands, B transposed or at a 4 KiB stride,
// against a float64 reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "runtime/kernels/blas.h"
#include "runtime/kernels/gemm_avx512.h"

namespace {

using kiln::runtime::gemm_f32;
using kiln::runtime::gemm_f32_avx512;
using kiln::runtime::has_avx512;

struct Case {
  int64_t m, n, k, lda, ldb, ldc;
  bool tb;
};

// max |got - want| / (1 + |want|) over C, the reference in float64.
double rel_error(const Case& c, const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& got) {
  double worst = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < c.k; ++p)
        want += double(a[size_t(i * c.lda + p)]) * double(c.tb ? b[size_t(j * c.ldb + p)] : b[size_t(p * c.ldb + j)]);
      worst = std::max(worst, std::fabs(double(got[size_t(i * c.ldc + j)]) - want) / (1 + std::fabs(want)));
    }
  return worst;
}

}  // namespace

TEST_CASE("gemm_f32: kiln's AVX-512 kernel and the dispatching entry equal a float64 reference", "[gemm]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> val(-1, 1);
  std::vector<Case> cases;
  for (int64_t m : {1, 3, 8, 9, 16, 21})
    for (int64_t n : {1, 15, 16, 17, 32, 33, 70})
      for (int64_t k : {0, 1, 7, 256, 300}) cases.push_back({m, n, k, k + 3, n + 5, n + 2, false});
  cases.push_back({64, 1024, 96, 96, 1024, 1024, false});  // a 4 KiB row stride: copied with padding
  cases.push_back({43, 70, 300, 301, 3136, 75, false});     // B's panels packed (>= 32 rows, k >= 128): rows a plane apart, a masked panel, two k passes
  cases.push_back({40, 48, 130, 130, 130, 48, true});      // B^T, a Linear's weight
  cases.push_back({256, 384, 128, 128, 128, 384, true});   // big enough to split over the pool
  // B^T with few rows of A (a classifier head, a decoding step): read in place, 4 rows of B at a time
  // (up to kNtRowsLimit = 16 rows; 17 takes the copy).
  for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 16, 17})
    for (int64_t n : {1, 3, 4, 5, 17})
      for (int64_t k : {0, 1, 15, 16, 17, 300}) cases.push_back({m, n, k, k + 3, k + 1, n + 2, true});
  cases.push_back({2, 4099, 1030, 1030, 1030, 4099, true});  // split over the pool by rows of B, in L2 blocks of 60 rows
  cases.push_back({13, 500, 300, 301, 303, 500, true});       // L2 blocks of 216 rows of B, a partial last one
  // B^T from 17 rows: panels gathered from B's rows (gemm_f32_avx512_t), masked
  // panels of 1..31 columns, several k passes, B's rows longer than k.
  for (int64_t m : {17, 33})
    for (int64_t n : {1, 15, 16, 17, 32, 33, 70})
      for (int64_t k : {1, 7, 256, 300}) cases.push_back({m, n, k, k + 3, k + 9, n + 2, true});
  for (const Case& c : cases) {
    CAPTURE(c.m, c.n, c.k, c.tb);
    std::vector<float> a(size_t(c.m * c.lda)), b(size_t((c.tb ? c.n : c.k) * c.ldb + 1));
    for (float& v : a) v = val(rng);
    for (float& v : b) v = val(rng);
    // C starts as NaN: every element must be written (k = 0 gives zeros).
    std::vector<float> got(size_t(c.m * c.ldc), std::nanf(""));
    gemm_f32(false, c.tb, c.m, c.n, c.k, a.data(), c.lda, b.data(), c.ldb, got.data(), c.ldc);
    CHECK(rel_error(c, a, b, got) < 1e-5);
    if (has_avx512() && !c.tb) {
      std::vector<float> direct(size_t(c.m * c.ldc), std::nanf(""));
      gemm_f32_avx512(c.m, c.n, c.k, a.data(), c.lda, b.data(), c.ldb, direct.data(), c.ldc);
      CHECK(rel_error(c, a, b, direct) < 1e-5);
      // Columns past n in each row of C are left alone.
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = c.n; j < c.ldc; ++j) CHECK(std::isnan(direct[size_t(i * c.ldc + j)]));
    }
    if (has_avx512() && c.tb) {
      std::vector<float> direct(size_t(c.m * c.ldc), std::nanf(""));
      kiln::runtime::gemm_f32_avx512_t(c.m, c.n, c.k, a.data(), c.lda, b.data(), c.ldb, direct.data(), c.ldc);
      // (float32 sums in another order than the in-place kernel's: the bound grows with k)
      CHECK(rel_error(c, a, b, direct) < 1e-5 * double(std::max<int64_t>(1, c.k / 256)));
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = c.n; j < c.ldc; ++j) CHECK(std::isnan(direct[size_t(i * c.ldc + j)]));
    }
  }
}

TEST_CASE("gemm_f32_avx512_rows: B's rows through an offset table equal the strided product", "[gemm]") {
  if (!has_avx512()) return;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> val(-1, 1);
  for (const int64_t m : {11, 37}) {  // a tile remainder; 37: B's panels packed
    CAPTURE(m);
    const int64_t n = 45, k = 300;  // a masked panel, two k passes
    std::vector<float> a(size_t(m * k)), pool(size_t(4000));
    for (float& v : a) v = val(rng);
    for (float& v : pool) v = val(rng);
    // Rows at scattered, overlapping offsets (a convolution's taps overlap).
    std::vector<int64_t> offset(static_cast<size_t>(k));
    std::vector<float> b(static_cast<size_t>(k * n));
    for (int64_t p = 0; p < k; ++p) {
      offset[size_t(p)] = (p * 37) % 3900;
      std::copy(pool.begin() + offset[size_t(p)], pool.begin() + offset[size_t(p)] + n, b.begin() + p * n);
    }
    std::vector<float> want(size_t(m * n)), got(size_t(m * n), std::nanf(""));
    kiln::runtime::gemm_f32_avx512(m, n, k, a.data(), k, b.data(), n, want.data(), n);
    kiln::runtime::gemm_f32_avx512_rows(m, n, k, a.data(), k, pool.data(), offset.data(), got.data(), n);
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == want[i]);
  }
}

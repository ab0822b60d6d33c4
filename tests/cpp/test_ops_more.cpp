// Registry ops, continued: reductions and normalisations, matmul/linear,
// views, copies, cat, embedding, constructors and the seeded generator.
#include <cmath>
#include <cstring>

#include "ops_test_util.h"

using namespace kiln;
using namespace kiln::runtime;
using namespace kiln::test;

namespace {

const Value none = Value::none();
Tensor base23() { return ft({1, 2, 3, 4, 5, 6}, {2, 3}); }
Tensor t_(const Tensor& x) { return opt(OpId::transpose, {tv(x), iv(0), iv(1)}); }

}  // namespace

// ----- cumsum -------------------------------------------------------------------------------

TEST_CASE("cumsum: a running sum per lane, integers and bool as int64, floats in a double accumulator", "[ops]") {
  Tensor x = base23();
  CHECK(vals(opt(OpId::cumsum, {tv(x), iv(1)})) == std::vector<double>{1, 3, 6, 4, 9, 15});
  CHECK(vals(opt(OpId::cumsum, {tv(x), iv(-2)})) == std::vector<double>{1, 2, 3, 5, 7, 9});
  CHECK(vals(opt(OpId::cumsum, {tv(t_(x)), iv(0)})) == std::vector<double>{1, 4, 3, 9, 6, 15});  // strided lanes
  Tensor b = opt(OpId::cumsum, {tv(bt({true, false, true, true}, {4})), iv(0)});
  CHECK(b.dtype() == DType::Int64);
  CHECK(vals(b) == std::vector<double>{1, 1, 2, 3});
  Tensor big = opt(OpId::cumsum, {tv(it({int64_t(1) << 62, int64_t(1) << 61, 1}, {3})), iv(0)});
  CHECK(big.data<int64_t>()[2] == (int64_t(1) << 62) + (int64_t(1) << 61) + 1);  // exact, no float on the way
  // float32 terms summed in double, each prefix rounded once, as torch's CPU kernel:
  // 2^24 + 1 + 1 is 2^24 + 2 (a float32) in double, 2^24 in a float32 accumulator.
  Tensor f = opt(OpId::cumsum, {tv(ft({16777216.0f, 1, 1}, {3})), iv(0)});
  CHECK(f.data<float>()[2] == 16777218.0f);
  Tensor d = opt(OpId::cumsum, {tv(it({1, 2, 3}, {3})), iv(0)}, {{"dtype", sv("float64")}});
  CHECK(d.dtype() == DType::Float64);
  CHECK(vals(d) == std::vector<double>{1, 3, 6});
  CHECK(opt(OpId::cumsum, {tv(ft({5}, {})), iv(0)}).item() == 5);  // 0-d: itself
  CHECK_THROWS(op(OpId::cumsum, {tv(x), iv(2)}));
}

// ----- reductions --------------------------------------------------------------------------

TEST_CASE("sum over dims with keepdim", "[ops]") {
  Tensor x = base23();
  Tensor all = opt(OpId::sum, {tv(x)});
  CHECK(all.dim() == 0);
  CHECK(all.item() == 21);
  CHECK(all.dtype() == DType::Float32);
  CHECK(vals(opt(OpId::sum, {tv(x), iv(0)})) == std::vector<double>{5, 7, 9});
  CHECK(vals(opt(OpId::sum, {tv(x), iv(-1)})) == std::vector<double>{6, 15});
  Tensor k = opt(OpId::sum, {tv(x), iv(0), bv(true)});
  CHECK(k.sizes() == Shape{1, 3});
  CHECK(vals(k) == std::vector<double>{5, 7, 9});
  Tensor both = opt(OpId::sum, {tv(x), tup({iv(0), iv(-1)}), bv(true)});
  CHECK(both.sizes() == Shape{1, 1});
  CHECK(both.item() == 21);
  CHECK(opt(OpId::sum, {tv(x), lst({iv(1)})}).sizes() == Shape{2});
  CHECK(opt(OpId::sum, {tv(x), tup({})}).dim() == 0);  // empty dims: all of them, as torch
  // Non-contiguous input and a 3-D reduction over the middle dim.
  CHECK(vals(opt(OpId::sum, {tv(t_(x)), iv(1)})) == std::vector<double>{5, 7, 9});
  std::vector<float> v24;
  for (int i = 0; i < 24; ++i) v24.push_back(float(i));
  Tensor c = ft(v24, {2, 3, 4});
  CHECK(vals(opt(OpId::sum, {tv(c), iv(1)})) == std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57});
  CHECK(vals(opt(OpId::sum, {tv(c), tup({iv(0), iv(2)})})) == std::vector<double>{60, 92, 124});
  // dtypes: int and bool sum to int64; float64 stays.
  Tensor bs = opt(OpId::sum, {tv(bt({true, false, true}, {3}))});
  CHECK(bs.dtype() == DType::Int64);
  CHECK(bs.item() == 2);
  CHECK(opt(OpId::sum, {tv(it({1, 2}, {2}))}).dtype() == DType::Int64);
  CHECK(opt(OpId::sum, {tv(dt({1, 2}, {2}))}).dtype() == DType::Float64);
  CHECK(opt(OpId::sum, {tv(Tensor::empty({0, 3}, DType::Float32)), iv(0)}).sizes() == Shape{3});
  CHECK(opt(OpId::sum, {tv(Tensor::empty({0}, DType::Float32))}).item() == 0);
  CHECK(opt(OpId::sum, {tv(Tensor::scalar(4, DType::Float32))}).item() == 4);
  // float32 accumulates in double: 1e8 + 1 + ... stays exact until rounding.
  Tensor acc = ft({1e8f, 1, 1, 1, 1, -1e8f}, {6});
  CHECK(opt(OpId::sum, {tv(acc)}).item() == 4);
  check_error([&] { op(OpId::sum, {tv(x), tup({iv(0), iv(-2)})}); }, ErrorKind::RuntimeError,
              "sum: dim 0 appears multiple times in the list of dims");
  check_error([&] { op(OpId::sum, {tv(x), iv(2)}); }, ErrorKind::IndexError,
              "sum: dim 2 is out of range for a tensor of rank 2");
}

TEST_CASE("mean and amax", "[ops]") {
  Tensor x = base23();
  CHECK(opt(OpId::mean, {tv(x)}).item() == 3.5);
  CHECK(vals(opt(OpId::mean, {tv(x), iv(1)})) == std::vector<double>{2, 5});
  CHECK(opt(OpId::mean, {tv(x), iv(0), bv(true)}).sizes() == Shape{1, 3});
  CHECK(std::isnan(opt(OpId::mean, {tv(Tensor::empty({0}, DType::Float64))}).item()));
  check_error([] { op(OpId::mean, {tv(it({1, 2}, {2}))}); }, ErrorKind::TypeError,
              "mean(): could not infer output dtype. Input dtype must be floating point, got int64");
  CHECK(opt(OpId::amax, {tv(x)}).item() == 6);
  CHECK(vals(opt(OpId::amax, {tv(x), iv(0)})) == std::vector<double>{4, 5, 6});
  CHECK(vals(opt(OpId::amax, {tv(t_(x)), iv(0)})) == std::vector<double>{3, 6});
  CHECK(vals(opt(OpId::mean, {tv(t_(x)), iv(1), bv(true)})) == std::vector<double>{2.5, 3.5, 4.5});
  CHECK(vals(opt(OpId::amax, {tv(ft({-5, -2, -9, -1}, {2, 2})), iv(1), bv(true)})) == std::vector<double>{-2, -1});
  CHECK(opt(OpId::amax, {tv(it({3, -7, 5}, {3}))}).dtype() == DType::Int64);
  CHECK(opt(OpId::amax, {tv(it({3, -7, 5}, {3}))}).item() == 5);
  CHECK(opt(OpId::amax, {tv(bt({false, true}, {2}))}).item() == 1);
  CHECK(std::isnan(opt(OpId::amax, {tv(ft({1, NAN, 3}, {3}))}).item()));
  CHECK(opt(OpId::amax, {tv(Tensor::empty({0, 3}, DType::Float32)), iv(1)}).sizes() == Shape{0});
  check_error([] { op(OpId::amax, {tv(Tensor::empty({2, 0}, DType::Float32)), iv(1)}); }, ErrorKind::RuntimeError,
              "amax: cannot reduce over dim 1 of size 0 (input shape [2, 0]): the reduction has no identity");
  check_error([] { op(OpId::amax, {tv(Tensor::empty({0}, DType::Float32))}); }, ErrorKind::RuntimeError,
              "amax: cannot reduce over dim 0 of size 0 (input shape [0]): the reduction has no identity");
  Tensor m = meta_of(OpId::amax, {tv(Tensor::meta({4, 5, 6}, DType::Float64)), tup({iv(0), iv(2)})});
  CHECK(m.sizes() == Shape{5});
  CHECK(m.dtype() == DType::Float64);
}

TEST_CASE("softmax and log_softmax", "[ops]") {
  Tensor x = ft({1, 2, 3}, {3});
  check_close(opt(OpId::softmax, {tv(x), iv(0)}), {0.09003057317038046, 0.24472847105479764, 0.6652409557748219});
  check_close(opt(OpId::log_softmax, {tv(x), iv(-1)}), {-2.4076059644443806, -1.4076059644443806, -0.4076059644443806});
  // Stable for large inputs.
  check_close(opt(OpId::softmax, {tv(ft({1000, 1000}, {2})), iv(0)}), {0.5, 0.5});
  // Over dim 0 of a 2-D tensor, and on a non-contiguous input.
  Tensor y = ft({0, 0, 1, 0}, {2, 2});
  check_close(opt(OpId::softmax, {tv(y), iv(0)}), {0.2689414213699951, 0.5, 0.7310585786300049, 0.5});
  check_close(opt(OpId::softmax, {tv(t_(y)), iv(1)}), {0.2689414213699951, 0.7310585786300049, 0.5, 0.5});
  Tensor si = opt(OpId::softmax, {tv(it({0, 0}, {2})), iv(0)});
  CHECK(si.dtype() == DType::Float32);
  CHECK(vals(si) == std::vector<double>{0.5, 0.5});
  CHECK(opt(OpId::softmax, {tv(dt({1, 2}, {2})), iv(0)}).dtype() == DType::Float64);
  check_error([&] { op(OpId::softmax, {tv(x), iv(1)}); }, ErrorKind::IndexError,
              "softmax: dim 1 is out of range for a tensor of rank 1");
  check_error([&] { op(OpId::softmax, {tv(x)}); }, ErrorKind::TypeError, "softmax() missing required argument 'dim'");
}

TEST_CASE("layer_norm", "[ops]") {
  Tensor x = ft({1, 2, 3, 2, 4, 6}, {2, 3});
  const double r = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5), r2 = 1.0 / std::sqrt(8.0 / 3.0 + 1e-5);
  check_close(opt(OpId::layer_norm, {tv(x), iv(3)}), {-r, 0, r, -2 * r2, 0, 2 * r2});
  Tensor w = ft({1, 2, 3}, {3}), b = ft({0, 1, 0}, {3});
  check_close(opt(OpId::layer_norm, {tv(x), tup({iv(3)}), tv(w), tv(b)}), {-r, 1, 3 * r, -2 * r2, 1, 6 * r2});
  check_close(opt(OpId::layer_norm, {tv(x), lst({iv(3)})}, {{"bias", tv(b)}, {"eps", fv(0.0)}}),
              {-std::sqrt(1.5), 1, std::sqrt(1.5), -std::sqrt(1.5), 1, std::sqrt(1.5)});
  // Normalising over both dims, and a float64 weight promoting the result.
  check_close(opt(OpId::layer_norm, {tv(ft({1, 3, 1, 3}, {2, 2})), tup({iv(2), iv(2)})}, {{"eps", fv(0.0)}}),
              {-1, 1, -1, 1});
  CHECK(opt(OpId::layer_norm, {tv(x), iv(3), tv(dt({1, 1, 1}, {3}))}).dtype() == DType::Float64);
  // A non-contiguous input normalises its logical rows.
  check_close(opt(OpId::layer_norm, {tv(t_(ft({1, 2, 2, 4, 3, 6}, {3, 2}))), iv(3)}), {-r, 0, r, -2 * r2, 0, 2 * r2});
  check_error([&] { op(OpId::layer_norm, {tv(x), iv(2)}); }, ErrorKind::RuntimeError,
              "layer_norm: normalized_shape [2] does not match the trailing dimensions of input shape [2, 3]");
  check_error([&] { op(OpId::layer_norm, {tv(x), iv(3), tv(ft({1, 2}, {2}))}); }, ErrorKind::RuntimeError,
              "layer_norm: weight shape [2] does not match normalized_shape [3]");
  check_error([&] { op(OpId::layer_norm, {tv(it({1, 2}, {2})), iv(2)}); }, ErrorKind::TypeError,
              "layer_norm(): expected a floating point input, got int64");
}

// ----- matmul / linear ---------------------------------------------------------------------

TEST_CASE("matmul shapes and values", "[ops]") {
  Tensor a = base23();
  Tensor b = ft({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor c = opt(OpId::matmul, {tv(a), tv(b)});
  CHECK(c.sizes() == Shape{2, 2});
  CHECK(vals(c) == std::vector<double>{58, 64, 139, 154});
  // 1-D · 1-D is a 0-d dot product.
  Tensor d = opt(OpId::matmul, {tv(ft({1, 2, 3}, {3})), tv(ft({4, 5, 6}, {3}))});
  CHECK(d.dim() == 0);
  CHECK(d.item() == 32);
  // 1-D on either side is promoted and squeezed back.
  CHECK(vals(opt(OpId::matmul, {tv(ft({1, 1}, {2})), tv(a)})) == std::vector<double>{5, 7, 9});
  CHECK(vals(opt(OpId::matmul, {tv(a), tv(ft({1, 0, -1}, {3}))})) == std::vector<double>{-2, -2});
  // Batched, with broadcast batch dims.
  Tensor batch = ft({1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0}, {2, 2, 3});
  Tensor bb = opt(OpId::matmul, {tv(batch), tv(b)});
  CHECK(bb.sizes() == Shape{2, 2, 2});
  CHECK(vals(bb) == std::vector<double>{58, 64, 139, 154, 7, 8, 9, 10});
  Tensor lhs = ft({1, 0, 0, 1}, {1, 2, 2});
  Tensor rhs = ft({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 2, 2});
  Tensor br = opt(OpId::matmul, {tv(lhs), tv(rhs)});
  CHECK(br.sizes() == Shape{3, 2, 2});
  CHECK(vals(br) == vals(rhs));
  CHECK(opt(OpId::matmul, {tv(ft({1, 1, 1}, {3})), tv(Tensor::empty({4, 3, 5}, DType::Float32))}).sizes() == Shape{4, 5});
  CHECK(opt(OpId::matmul, {tv(Tensor::empty({4, 2, 3}, DType::Float32)), tv(ft({1, 1, 1}, {3}))}).sizes() == Shape{4, 2});
  // Empty inner dim: zeros.
  CHECK(vals(opt(OpId::matmul, {tv(Tensor::empty({2, 0}, DType::Float32)), tv(Tensor::empty({0, 2}, DType::Float32))})) ==
        std::vector<double>{0, 0, 0, 0});
  check_error([&] { op(OpId::matmul, {tv(a), tv(Tensor::empty({4, 5}, DType::Float32))}); }, ErrorKind::RuntimeError,
              "matmul: shapes [2, 3] and [4, 5] are not aligned (3 != 4)");
  check_error([&] { op(OpId::matmul, {tv(ft({1, 2}, {2})), tv(ft({1, 2, 3}, {3}))}); }, ErrorKind::RuntimeError,
              "matmul: shapes [2] and [3] are not aligned (2 != 3)");
  check_error([&] { op(OpId::matmul, {tv(Tensor::empty({2, 2, 3}, DType::Float32)), tv(Tensor::empty({3, 3, 2}, DType::Float32))}); },
              ErrorKind::RuntimeError, "matmul: batch dimensions of shapes [2, 2, 3] and [3, 3, 2] cannot be broadcast");
  check_error([&] { op(OpId::matmul, {tv(Tensor::scalar(1, DType::Float32)), tv(a)}); }, ErrorKind::RuntimeError,
              "matmul: both arguments need to be at least 1-D, but they are 0-D and 2-D");
  check_error([&] { op(OpId::matmul, {tv(bt({true}, {1})), tv(bt({true}, {1}))}); }, ErrorKind::TypeError,
              "matmul(): bool tensors are not supported");
}

TEST_CASE("matmul dtypes and strided operands", "[ops]") {
  Tensor a = base23();
  Tensor b = ft({7, 8, 9, 10, 11, 12}, {3, 2});
  const std::vector<double> expect{58, 64, 139, 154};
  // Transposed views go to BLAS with a transpose flag, no copy needed.
  Tensor at = t_(ft({1, 4, 2, 5, 3, 6}, {3, 2}));
  Tensor bt_ = t_(ft({7, 9, 11, 8, 10, 12}, {2, 3}));
  REQUIRE(!at.is_contiguous());
  CHECK(vals(opt(OpId::matmul, {tv(at), tv(bt_)})) == expect);
  // A step-2 slice has no unit stride: copied first.
  Tensor wide = ft({1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0}, {2, 6});
  Tensor strided = opt(OpId::slice, {tv(wide), iv(1), none, none, iv(2)});
  CHECK(vals(opt(OpId::matmul, {tv(strided), tv(b)})) == expect);
  // An expanded (stride 0) batch.
  Tensor eb = opt(OpId::expand, {tv(b), iv(3), iv(3), iv(2)});
  Tensor r = opt(OpId::matmul, {tv(a), tv(eb)});
  CHECK(r.sizes() == Shape{3, 2, 2});
  CHECK(vals(r) == std::vector<double>{58, 64, 139, 154, 58, 64, 139, 154, 58, 64, 139, 154});
  // int64 without BLAS, float64 through dgemm, mixed dtypes promote.
  Tensor ia = it({1, 2, 3, 4, 5, 6}, {2, 3}), ib = it({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor ic = opt(OpId::matmul, {tv(ia), tv(ib)});
  CHECK(ic.dtype() == DType::Int64);
  CHECK(vals(ic) == expect);
  CHECK(vals(opt(OpId::matmul, {tv(t_(ib)), tv(t_(ia))})) == std::vector<double>{58, 139, 64, 154});
  Tensor dc = opt(OpId::matmul, {tv(a.to(DType::Float64)), tv(b.to(DType::Float64))});
  CHECK(dc.dtype() == DType::Float64);
  CHECK(vals(dc) == expect);
  Tensor mixed = opt(OpId::matmul, {tv(ia), tv(b)});
  CHECK(mixed.dtype() == DType::Float32);
  CHECK(vals(mixed) == expect);
}

TEST_CASE("linear", "[ops]") {
  Tensor x = base23();                                   // [2, 3]
  Tensor w = ft({1, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 2}, {4, 3});  // [out=4, in=3]
  Tensor b = ft({10, 20, 30, 40}, {4});
  Tensor y = opt(OpId::linear, {tv(x), tv(w), tv(b)});
  CHECK(y.sizes() == Shape{2, 4});
  CHECK(vals(y) == std::vector<double>{11, 22, 36, 46, 14, 25, 45, 52});
  CHECK(vals(opt(OpId::linear, {tv(x), tv(w)})) == std::vector<double>{1, 2, 6, 6, 4, 5, 15, 12});
  CHECK(vals(opt(OpId::linear, {tv(ft({1, 2, 3}, {3})), tv(w)})) == std::vector<double>{1, 2, 6, 6});
  Tensor x3 = opt(OpId::reshape, {tv(x), iv(2), iv(1), iv(3)});
  CHECK(opt(OpId::linear, {tv(x3), tv(w), tv(b)}).sizes() == Shape{2, 1, 4});
  CHECK(opt(OpId::linear, {tv(x), tv(w), tv(b.to(DType::Float64))}).dtype() == DType::Float64);
  check_error([&] { op(OpId::linear, {tv(x), tv(Tensor::empty({4, 5}, DType::Float32))}); }, ErrorKind::RuntimeError,
              "linear: input shape [2, 3] and weight shape [4, 5] are not aligned (3 != 5)");
  check_error([&] { op(OpId::linear, {tv(x), tv(w), tv(ft({1, 2, 3}, {3}))}); }, ErrorKind::RuntimeError,
              "linear: shapes [2, 4] and [3] cannot be broadcast");
  check_error([&] { op(OpId::linear, {tv(x), tv(ft({1, 2, 3}, {3}))}); }, ErrorKind::RuntimeError,
              "linear: weight must be 2-D, got shape [3]");
}

// The ops real models need (issue 13): the registry's composite and
// mutating rows, and each kernel on small cases whose results are worked
// out by hand (tests/python/test_ops_models.py compares them with torch on
// random inputs).
#include <cmath>
#include <limits>

#include "ops_test_util.h"

using namespace kiln;
using namespace kiln::runtime;
using namespace kiln::test;

namespace {

const Value none = Value::none();
const double kNan = std::numeric_limits<double>::quiet_NaN();

Tensor seq(int64_t n, const Shape& s) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(float(i + 1));
  return ft(v, s);
}

std::vector<Value> items(const Value& tuple) {
  REQUIRE(tuple.is(Kind::Tuple));
  return tuple.as<TupleObj>()->items;
}

}  // namespace

TEST_CASE("registry: composite rows decompose, batch_norm mutates, masked_fill fills", "[ops][models]") {
  for (const char* name : {"split", "chunk", "unbind", "stack", "clamp", "clip", "roll", "topk", "sort",
                           "scaled_dot_product_attention", "binary_cross_entropy", "mse_loss", "dropout", "gelu"}) {
    INFO(name);
    REQUIRE(find_op(name));
    CHECK(find_op(name)->decompose != nullptr);
  }
  for (int i = 0; i < kNumOps; ++i) {
    const OpDef& d = op_def(OpId(i));
    INFO(d.name);
    CHECK(d.mutates == (d.id == OpId::batch_norm));
  }
  CHECK(op_def(OpId::masked_fill).rule == PwRule::Fill);
  CHECK(op_def(OpId::conv2d).decompose == nullptr);
  // A row whose every call decomposes also works through its own entries.
  const OpDef& split = op_def(OpId::split);
  std::vector<Value> a{tv(seq(6, {6})), iv(4)};
  const OpArgs bound = bind_op_args(split, CallArgs{a.data(), a.size(), nullptr});
  CHECK(items(split.eager(bound)).size() == 2);
  check_error([&] { split.shape(bound); }, ErrorKind::TypeError, "split() does not return one tensor");
  // infer_meta of a composite runs its decomposition on meta tensors.
  CHECK(meta_of(OpId::stack, {lst({tv(seq(6, {2, 3})), tv(seq(6, {2, 3}))}), iv(1)}).sizes() == Shape{2, 2, 3});
  CHECK(meta_of(OpId::clamp, {tv(it({1, 5}, {2})), fv(0.5)}).dtype() == DType::Float32);
}

TEST_CASE("masked_fill keeps the input's dtype and broadcasts", "[ops][models]") {
  Tensor x = it({1, 2, 3}, {3});
  Tensor m = bt({true, false, true}, {3});
  Tensor r = opt(OpId::masked_fill, {tv(x), tv(m), fv(2.5)});
  CHECK(r.dtype() == DType::Int64);  // torch converts the value: 2.5 -> 2
  CHECK(vals(r) == std::vector<double>{2, 2, 2});
  Tensor f = opt(OpId::masked_fill, {tv(ft({1, 2}, {2})), tv(bt({false, true, true, false}, {2, 2})),
                                     tv(Tensor::scalar(-7, DType::Float64))});
  CHECK(f.sizes() == Shape{2, 2});
  CHECK(f.dtype() == DType::Float32);
  CHECK(vals(f) == std::vector<double>{1, -7, -7, 2});
  check_error([&] { op(OpId::masked_fill, {tv(x), tv(it({1, 0, 1}, {3})), iv(1)}); }, ErrorKind::RuntimeError,
              "masked_fill(): only supports boolean masks, but got a mask of dtype int64");
  check_error([&] { op(OpId::masked_fill, {tv(x), tv(m), tv(it({1}, {1}))}); }, ErrorKind::RuntimeError,
              "masked_fill(): only supports a 0-dimensional value tensor, but got a tensor with 1 dimension(s)");
}

TEST_CASE("clamp: either bound, promotion step by step, min above max", "[ops][models]") {
  Tensor x = it({1, 5, 9}, {3});
  Tensor a = opt(OpId::clamp, {tv(x), fv(2.5), iv(4)});
  CHECK(a.dtype() == DType::Float32);
  CHECK(vals(a) == std::vector<double>{2.5, 4, 4});
  CHECK(vals(opt(OpId::clamp, {tv(x), iv(6), iv(4)})) == std::vector<double>{4, 4, 4});
  CHECK(vals(opt(OpId::clamp, {tv(x)}, {{"max", iv(3)}})) == std::vector<double>{1, 3, 3});
  CHECK(opt(OpId::clamp, {tv(x), iv(0)}).dtype() == DType::Int64);
  Tensor n = opt(OpId::clamp, {tv(ft({1, float(kNan), -5}, {3})), iv(0), iv(2)});
  CHECK(std::isnan(vals(n)[1]));
  check_error([&] { op(OpId::clamp, {tv(x)}); }, ErrorKind::RuntimeError,
              "clamp(): at least one of 'min' or 'max' must not be None");
}

TEST_CASE("split, chunk, unbind are views; stack and roll copy", "[ops][models]") {
  Tensor x = seq(10, {5, 2});
  std::vector<Value> parts = items(op(OpId::split, {tv(x), iv(2)}));
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].as_tensor().sizes() == Shape{1, 2});
  CHECK(same_storage(parts[1].as_tensor(), x));
  CHECK(vals(parts[1].as_tensor()) == std::vector<double>{5, 6, 7, 8});
  parts = items(op(OpId::split, {tv(x), lst({iv(1), iv(4)})}));
  CHECK(parts[1].as_tensor().sizes() == Shape{4, 2});
  check_error([&] { op(OpId::split, {tv(x), lst({iv(2), iv(2)})}); }, ErrorKind::RuntimeError,
              "split(): split sizes [2, 2] must add up to 5 (the size of dimension 0 of input [5, 2])");
  CHECK(items(op(OpId::chunk, {tv(x), iv(4)})).size() == 3);  // ceil(5/4) = 2 per chunk: 3 chunks, as torch
  CHECK(items(op(OpId::chunk, {tv(x), iv(2), iv(1)})).size() == 2);
  check_error([&] { op(OpId::chunk, {tv(x), iv(0)}); }, ErrorKind::RuntimeError,
              "chunk(): chunks must be greater than 0, got 0");
  std::vector<Value> rows = items(op(OpId::unbind, {tv(x), iv(1)}));
  REQUIRE(rows.size() == 2);
  CHECK(vals(rows[1].as_tensor()) == std::vector<double>{2, 4, 6, 8, 10});
  Tensor s = opt(OpId::stack, {lst({tv(ft({1, 2}, {2})), tv(it({3, 4}, {2}))}), iv(1)});
  CHECK(s.sizes() == Shape{2, 2});
  CHECK(s.dtype() == DType::Float32);
  CHECK(vals(s) == std::vector<double>{1, 3, 2, 4});
  check_error([&] { op(OpId::stack, {lst({})}); }, ErrorKind::RuntimeError, "stack(): expects a non-empty list of tensors");
  Tensor r = opt(OpId::roll, {tv(x), iv(1), iv(0)});
  CHECK(vals(r) == std::vector<double>{9, 10, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(vals(opt(OpId::roll, {tv(x), iv(-3)})) == std::vector<double>{4, 5, 6, 7, 8, 9, 10, 1, 2, 3});
  CHECK_FALSE(same_storage(opt(OpId::roll, {tv(x), iv(0), iv(0)}), x));
  check_error([&] { op(OpId::roll, {tv(x), tup({iv(1), iv(2)}), iv(0)}); }, ErrorKind::RuntimeError,
              "roll(): shifts and dims must align (shifts: 2, dims: 1)");
}

TEST_CASE("argmax/argmin, topk, sort: ties and NaN as torch", "[ops][models]") {
  CHECK(opt(OpId::argmax, {tv(ft({1, float(kNan), 2, float(kNan)}, {4}))}).item() == 1);
  CHECK(opt(OpId::argmin, {tv(it({3, 1, 2, 1}, {4}))}).item() == 1);  // the first minimum
  Tensor k = opt(OpId::argmax, {tv(it({1, 3, 3, 2, 2, 1}, {2, 3})), iv(1), bv(true)});
  CHECK(k.sizes() == Shape{2, 1});
  CHECK(vals(k) == std::vector<double>{1, 0});
  check_error([&] { op(OpId::argmax, {tv(ft({}, {0}))}); }, ErrorKind::IndexError,
              "argmax(): cannot reduce an empty tensor (shape [0]): the operation has no identity");
  // torch's CPU topk: nth_element then a sort of the first k - 1; ties
  // come out as its algorithm leaves them, not in index order.
  std::vector<Value> t = items(op(OpId::topk, {tv(ft({1, 3, 3, 2, 3, 1}, {6})), iv(3)}));
  CHECK(vals(t[0].as_tensor()) == std::vector<double>{3, 3, 3});
  CHECK(vals(t[1].as_tensor()) == std::vector<double>{2, 4, 1});
  t = items(op(OpId::topk, {tv(ft({1, 3, 3, 2, 3, 1}, {6})), iv(4)}, {{"largest", bv(false)}}));
  CHECK(vals(t[1].as_tensor()) == std::vector<double>{5, 0, 3, 2});
  t = items(op(OpId::topk, {tv(ft({1, float(kNan), 2}, {3})), iv(2)}));
  CHECK(vals(t[1].as_tensor()) == std::vector<double>{1, 2});  // NaN is the largest
  check_error([&] { op(OpId::topk, {tv(ft({1, 2}, {2})), iv(3)}); }, ErrorKind::RuntimeError,
              "topk(): k (3) is out of range for dimension 0 of size 2");
  std::vector<Value> s = items(op(OpId::sort, {tv(ft({2, float(kNan), 1, -1}, {4}))}));
  CHECK(vals(s[1].as_tensor()) == std::vector<double>{3, 2, 0, 1});  // NaN last
  Tensor st = opt(OpId::argsort, {tv(it({2, 1, 2, 1, 2}, {5})), iv(0), bv(true), bv(true)});
  CHECK(vals(st) == std::vector<double>{0, 2, 4, 1, 3});  // stable: ties in index order
  check_error([&] { op(OpId::gather, {tv(ft({1, 2}, {2})), iv(0), tv(it({2}, {1}))}); }, ErrorKind::RuntimeError,
              "gather(): index 2 is out of bounds for dimension 0 with size 2");
}

TEST_CASE("tril and triu over the last two dims", "[ops][models]") {
  Tensor x = seq(6, {2, 3});
  CHECK(vals(opt(OpId::tril, {tv(x)})) == std::vector<double>{1, 0, 0, 4, 5, 0});
  CHECK(vals(opt(OpId::triu, {tv(x), iv(1)})) == std::vector<double>{0, 2, 3, 0, 0, 6});
  CHECK(vals(opt(OpId::tril, {tv(x), iv(-1)})) == std::vector<double>{0, 0, 0, 4, 0, 0});
  check_error([&] { op(OpId::tril, {tv(ft({1}, {1}))}); }, ErrorKind::RuntimeError,
              "tril(): input must have at least 2 dimensions, got shape [1]");
}

TEST_CASE("conv2d and conv1d: padding, stride, groups, bias", "[ops][models]") {
  Tensor x = seq(9, {1, 1, 3, 3});
  Tensor w = ft({1, 1, 1, 1}, {1, 1, 2, 2});
  CHECK(vals(opt(OpId::conv2d, {tv(x), tv(w)})) == std::vector<double>{12, 16, 24, 28});
  Tensor same = opt(OpId::conv2d, {tv(x), tv(w)}, {{"padding", sv("same")}});
  CHECK(same.sizes() == Shape{1, 1, 3, 3});  // the extra padding goes right and below
  CHECK(vals(same) == std::vector<double>{12, 16, 9, 24, 28, 15, 15, 17, 9});
  Tensor s2 = opt(OpId::conv2d, {tv(x), tv(w), tv(ft({10}, {1}))}, {{"stride", iv(2)}, {"padding", iv(1)}});
  CHECK(vals(s2) == std::vector<double>{11, 15, 21, 38});
  // groups=2: each output channel sees its own input channel
  Tensor x2 = seq(8, {2, 4});
  Tensor w2 = ft({1, 0, 0, -1}, {2, 1, 2});
  CHECK(vals(opt(OpId::conv1d, {tv(x2), tv(w2)}, {{"groups", iv(2)}})) == std::vector<double>{1, 2, 3, -6, -7, -8});
  check_error([&] { op(OpId::conv2d, {tv(x), tv(w)}, {{"stride", iv(2)}, {"padding", sv("same")}}); },
              ErrorKind::RuntimeError, "conv2d(): padding='same' is not supported for strided convolutions");
  check_error([&] { op(OpId::conv2d, {tv(x), tv(ft({1, 1}, {2, 1, 1, 1}))}, {{"groups", iv(2)}}); },
              ErrorKind::RuntimeError,
              "Given groups=2, weight of size [2, 1, 1, 1], expected input[1, 1, 3, 3] to have 2 channels, but got 1 "
              "channels instead");
}

TEST_CASE("pooling: padding, ceil_mode, count_include_pad, adaptive windows", "[ops][models]") {
  Tensor x = seq(16, {1, 1, 4, 4});
  CHECK(vals(opt(OpId::max_pool2d, {tv(x), iv(2)})) == std::vector<double>{6, 8, 14, 16});
  Tensor c = opt(OpId::max_pool2d, {tv(x), iv(3), iv(2)}, {{"ceil_mode", bv(true)}});
  CHECK(c.sizes() == Shape{1, 1, 2, 2});  // floor mode gives 1x1
  CHECK(vals(c) == std::vector<double>{11, 12, 15, 16});
  Tensor a = opt(OpId::avg_pool2d, {tv(seq(4, {1, 1, 2, 2})), iv(2), iv(1), iv(1)});
  CHECK(vals(a)[0] == 0.25);  // the corner window: 1 / 4 (padding counted)
  Tensor b = opt(OpId::avg_pool2d, {tv(seq(4, {1, 1, 2, 2})), iv(2), iv(1), iv(1)}, {{"count_include_pad", bv(false)}});
  CHECK(vals(b)[0] == 1);
  Tensor ad = opt(OpId::adaptive_avg_pool2d, {tv(seq(6, {1, 3, 2})), tup({iv(2), none})});
  CHECK(ad.sizes() == Shape{1, 2, 2});
  CHECK(vals(ad) == std::vector<double>{2, 3, 4, 5});  // rows {0,1} and {1,2}: windows overlap
  check_error([&] { op(OpId::max_pool2d, {tv(x), iv(2)}, {{"padding", iv(2)}}); }, ErrorKind::RuntimeError,
              "max_pool2d(): pad should be at most half of effective kernel size, but got pad=2, kernel_size=2 and "
              "dilation=1");
  check_error([&] { op(OpId::max_pool2d, {tv(x), iv(2)}, {{"return_indices", bv(true)}}); },
              ErrorKind::NotImplementedError, "max_pool2d(): return_indices=True is not supported by kiln");
}

TEST_CASE("batch_norm: batch statistics, in-place running update, evaluation", "[ops][models]") {
  Tensor x = ft({1, 3}, {2, 1});
  Tensor rm = ft({0}, {1}), rv = ft({1}, {1});
  Tensor y = opt(OpId::batch_norm, {tv(x), tv(rm), tv(rv)}, {{"training", bv(true)}, {"momentum", fv(0.5)}});
  const double s = 1 / std::sqrt(1 + 1e-5);
  check_close(y, {-s, s});
  check_close(rm, {1.0});  // 0.5 * 0 + 0.5 * mean 2
  check_close(rv, {1.5});  // 0.5 * 1 + 0.5 * unbiased variance 2
  check_close(opt(OpId::batch_norm, {tv(x), tv(rm), tv(rv)}), {0, 2 / std::sqrt(1.5 + 1e-5)});
  // momentum=None: the cumulative average over num_batches_tracked batches
  Tensor n = Tensor::scalar(0, DType::Int64);
  Tensor cm = ft({5}, {1}), cv = ft({1}, {1});
  for (double shift : {0.0, 4.0}) {
    Tensor xs = opt(OpId::add, {tv(x), fv(shift)});
    op(OpId::batch_norm, {tv(xs), tv(cm), tv(cv)},
       {{"training", bv(true)}, {"momentum", none}, {"num_batches_tracked", tv(n)}});
  }
  CHECK(n.item() == 2);
  check_close(cm, {4.0});  // first batch replaces (factor 1), second averages: (2 + 6) / 2
  check_error([&] { op(OpId::batch_norm, {tv(x), none, none}); }, ErrorKind::RuntimeError,
              "batch_norm(): running_mean and running_var must be defined in evaluation mode");
  check_error([&] { op(OpId::batch_norm, {tv(ft({1}, {1, 1})), tv(rm), tv(rv)}, {{"training", bv(true)}}); },
              ErrorKind::ValueError, "Expected more than 1 value per channel when training, got input size [1, 1]");
}

TEST_CASE("cross_entropy: log-softmax NLL, ignore_index, smoothing", "[ops][models]") {
  Tensor logits = ft({0, 0, 0, 0}, {2, 2});
  check_close(opt(OpId::cross_entropy, {tv(logits), tv(it({0, 1}, {2}))}), {std::log(2.0)});
  check_close(opt(OpId::cross_entropy, {tv(logits), tv(it({0, -100}, {2}))}, {{"reduction", sv("sum")}}),
              {std::log(2.0)});
  Tensor none_red = opt(OpId::cross_entropy, {tv(logits), tv(it({0, 5}, {2}))},
                        {{"ignore_index", iv(5)}, {"reduction", sv("none")}});
  check_close(none_red, {std::log(2.0), 0});
  check_error([&] { op(OpId::cross_entropy, {tv(logits), tv(it({0, 2}, {2}))}); }, ErrorKind::IndexError,
              "cross_entropy(): target 2 is out of bounds for 2 classes");
  check_error([&] { op(OpId::cross_entropy, {tv(logits), tv(it({0}, {1}))}); }, ErrorKind::ValueError,
              "cross_entropy(): expected input batch size (2) to match target batch size (1)");
}

TEST_CASE("constructors: *_like and device", "[ops][models]") {
  Tensor x = dt({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor z = opt(OpId::zeros_like, {tv(opt(OpId::transpose, {tv(x), iv(0), iv(1)}))});
  CHECK(z.sizes() == Shape{3, 2});
  CHECK(z.dtype() == DType::Float64);
  Tensor f = opt(OpId::full_like, {tv(x), fv(2.5)}, {{"dtype", sv("int64")}});
  CHECK(vals(f) == std::vector<double>{2, 2, 2, 2, 2, 2});
  CHECK(opt(OpId::ones, {iv(2)}, {{"device", sv("cpu")}}).numel() == 2);
  check_error([&] { op(OpId::zeros, {iv(2)}, {{"device", sv("cuda")}}); }, ErrorKind::RuntimeError,
              "zeros(): kiln has only the cpu device, not 'cuda'");
  check_error([&] { op(OpId::randn_like, {tv(it({1}, {1}))}); }, ErrorKind::NotImplementedError,
              "randn_like(): only floating point dtypes are supported, got int64");
}

TEST_CASE("scaled_dot_product_attention: causal, masks, a fully masked row", "[ops][models]") {
  // One query, two keys with equal scores: the average of the values.
  Tensor q = ft({0, 0}, {1, 2}), k = ft({1, 0, 0, 1}, {2, 2}), v = ft({2, 4, 6, 8}, {2, 2});
  check_close(opt(OpId::scaled_dot_product_attention, {tv(q), tv(k), tv(v)}), {4, 6});
  // causal: query 0 sees only key 0
  check_close(opt(OpId::scaled_dot_product_attention, {tv(q), tv(k), tv(v)}, {{"is_causal", bv(true)}}), {2, 4});
  Tensor keep2 = bt({false, true}, {1, 2});
  check_close(opt(OpId::scaled_dot_product_attention, {tv(q), tv(k), tv(v), tv(keep2)}), {6, 8});
  Tensor none_kept = bt({false, false}, {1, 2});
  check_close(opt(OpId::scaled_dot_product_attention, {tv(q), tv(k), tv(v), tv(none_kept)}), {0, 0});
  check_error([&] { op(OpId::scaled_dot_product_attention, {tv(q), tv(k), tv(dt({1, 2, 3, 4}, {2, 2}))}); },
              ErrorKind::RuntimeError,
              "scaled_dot_product_attention(): query, key and value must have the same dtype, got float32, float32 and "
              "float64");
}

TEST_CASE("pad: constant, reflect, replicate, circular", "[ops][models]") {
  Tensor x = seq(3, {1, 3});
  CHECK(vals(opt(OpId::pad, {tv(x), tup({iv(2), iv(1)})}, {{"value", fv(9)}})) ==
        std::vector<double>{9, 9, 1, 2, 3, 9});
  CHECK(vals(opt(OpId::pad, {tv(x), tup({iv(2), iv(1)}), sv("reflect")})) == std::vector<double>{3, 2, 1, 2, 3, 2});
  CHECK(vals(opt(OpId::pad, {tv(x), tup({iv(2), iv(1)}), sv("replicate")})) == std::vector<double>{1, 1, 1, 2, 3, 3});
  CHECK(vals(opt(OpId::pad, {tv(x), tup({iv(2), iv(1)}), sv("circular")})) == std::vector<double>{2, 3, 1, 2, 3, 1});
  CHECK(vals(opt(OpId::pad, {tv(x), tup({iv(-1), iv(0)})})) == std::vector<double>{2, 3});
  check_error([&] { op(OpId::pad, {tv(x), tup({iv(3), iv(0)}), sv("reflect")}); }, ErrorKind::RuntimeError,
              "pad(): reflect padding (3, 0) must be less than the size 3 of dimension 1");
}

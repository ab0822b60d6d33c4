// Every registry op's eager kernel (and shape rule) against hand-computed
// expectations: broadcasting, weak-scalar dtype promotion, views sharing
// storage, non-contiguous inputs, reductions, matmul shapes, constructors,
// the seeded generator, and argument binding errors.
#include <cmath>
#include <cstring>

#include "ops_test_util.h"

using namespace kiln;
using namespace kiln::runtime;
using namespace kiln::test;

namespace {

// A 2x3 float32 tensor and its non-contiguous transpose [3, 2].
Tensor base23() { return ft({1, 2, 3, 4, 5, 6}, {2, 3}); }
Value none_v() { return Value::none(); }
Tensor transposed32() { return opt(OpId::transpose, {tv(base23()), iv(0), iv(1)}); }

}  // namespace

// ----- registry and binding ----------------------------------------------------------

TEST_CASE("registry lookup and parsed signatures", "[ops]") {
  const OpDef* add = find_op("add");
  REQUIRE(add);
  CHECK(add->id == OpId::add);
  CHECK(add->kind == OpKind::Pointwise);
  CHECK(add->rule == PwRule::Promote);
  CHECK(add->arity == 2);
  CHECK(find_op("no_such_op") == nullptr);
  CHECK(&op_def(OpId::matmul) == find_op("matmul"));
  const OpDef& ln = op_def(OpId::layer_norm);
  REQUIRE(ln.sig.params().size() == 5);
  CHECK(ln.sig.params()[4].name == "eps");
  CHECK(ln.sig.params()[4].has_default);
  CHECK(ln.sig.params()[4].default_value.as_float() == 1e-05);
  CHECK(ln.sig.params()[2].default_value.is_none());
  const OpDef& zeros = op_def(OpId::zeros);
  CHECK(zeros.sig.params()[0].varargs);
  CHECK(zeros.sig.params()[0].name == "size");
  CHECK(op_def(OpId::sum).sig.params()[2].default_value.is(Kind::Bool));
  CHECK(op_def(OpId::flatten).sig.params()[2].default_value.as_int() == -1);
  for (int i = 0; i < kNumOps; ++i) {
    const OpDef& d = op_def(OpId(i));
    INFO(d.name);
    CHECK(int(d.id) == i);
    CHECK(find_op(d.name) == &d);
    CHECK(d.shape != nullptr);
    CHECK(d.eager != nullptr);
    CHECK((d.kind == OpKind::Pointwise) == (d.rule != PwRule::None));
  }
}

TEST_CASE("argument binding follows Python's rules", "[ops]") {
  Tensor x = base23();
  check_error([&] { op(OpId::add, {tv(x)}); }, ErrorKind::TypeError, "add() missing required argument 'other'");
  check_error([&] { op(OpId::sum, {tv(x)}, {{"axis", iv(0)}}); }, ErrorKind::TypeError,
              "sum() got an unexpected keyword argument 'axis'");
  check_error([&] { op(OpId::transpose, {tv(x), iv(0), iv(1), iv(2)}); }, ErrorKind::TypeError,
              "transpose() takes 3 positional arguments but 4 were given");
  check_error([&] { op(OpId::sum, {tv(x), iv(0), bv(false), iv(1)}); }, ErrorKind::TypeError,
              "sum() takes from 1 to 3 positional arguments but 4 were given");
  check_error([&] { op(OpId::neg, {tv(x), tv(x)}); }, ErrorKind::TypeError,
              "neg() takes 1 positional argument but 2 were given");
  check_error([&] { op(OpId::add, {tv(x), tv(x)}, {{"input", tv(x)}}); }, ErrorKind::TypeError,
              "add() got multiple values for argument 'input'");
  check_error([&] { op(OpId::sum, {tv(x)}, {{"dim", sv("a")}}); }, ErrorKind::TypeError,
              "sum(): argument 'dim' must be an int or a tuple of ints, not str");
  check_error([&] { op(OpId::transpose, {tv(x), fv(0.5), iv(1)}); }, ErrorKind::TypeError,
              "transpose(): argument 'dim0' must be int, not float");
  check_error([&] { op(OpId::sum, {tv(x), iv(0), iv(1)}); }, ErrorKind::TypeError,
              "sum(): argument 'keepdim' must be bool, not int");
  check_error([&] { op(OpId::transpose, {iv(3), iv(0), iv(1)}); }, ErrorKind::TypeError,
              "transpose(): argument 'input' must be Tensor, not int");
  check_error([&] { op(OpId::add, {tv(x), sv("s")}); }, ErrorKind::TypeError,
              "add(): argument 'other' must be Tensor or a number, not str");
  check_error([&] { op(OpId::zeros, {tup({iv(2), fv(1.5)})}); }, ErrorKind::TypeError,
              "zeros(): argument 'size' must be a tuple of ints, but element 1 is float");

  // Keywords, including by the name of a positional parameter.
  Tensor s = opt(OpId::sum, {}, {{"input", tv(x)}, {"keepdim", bv(true)}, {"dim", iv(1)}});
  CHECK(s.sizes() == Shape{2, 1});
  CHECK(vals(s) == std::vector<double>{6, 15});
  // `*size`: separate ints, one tuple, one list, or the keyword.
  CHECK(opt(OpId::zeros, {iv(2), iv(3)}).sizes() == Shape{2, 3});
  CHECK(opt(OpId::zeros, {tup({iv(2), iv(3)})}).sizes() == Shape{2, 3});
  CHECK(opt(OpId::zeros, {lst({iv(2), iv(3)})}).sizes() == Shape{2, 3});
  CHECK(opt(OpId::zeros, {}, {{"size", tup({iv(4)})}}).sizes() == Shape{4});
  CHECK(opt(OpId::zeros, {}).sizes() == Shape{});
  CHECK(opt(OpId::zeros, {iv(2)}, {{"dtype", sv("int64")}}).dtype() == DType::Int64);
  CHECK(opt(OpId::reshape, {tv(x), iv(3), iv(2)}).sizes() == Shape{3, 2});
  CHECK(opt(OpId::reshape, {tv(x), tup({iv(6)})}).sizes() == Shape{6});
  // Parameters after `*size` are keyword-only.
  check_error([&] { op(OpId::zeros, {iv(2)}, {{"size", iv(3)}}); }, ErrorKind::TypeError,
              "zeros() got multiple values for argument 'size'");
}

TEST_CASE("call_op with an initializer list and infer_meta", "[ops]") {
  const Value r = call_op(OpId::mul, {tv(it({1, 2, 3}, {3})), iv(4)});
  CHECK(vals(r.as_tensor()) == std::vector<double>{4, 8, 12});
  Tensor m = meta_of(OpId::matmul, {tv(Tensor::meta({5, 2, 3}, DType::Float32)), tv(Tensor::meta({3, 4}, DType::Float64))});
  CHECK(m.is_meta());
  CHECK(m.sizes() == Shape{5, 2, 4});
  CHECK(m.dtype() == DType::Float64);
  Tensor v = meta_of(OpId::transpose, {tv(Tensor::meta({2, 3}, DType::Int64)), iv(0), iv(1)});
  CHECK(v.is_meta());
  CHECK(v.strides() == Shape{1, 3});
  Tensor rv = meta_of(OpId::transpose, {tv(base23()), iv(0), iv(1)});  // real input, meta result
  CHECK(rv.is_meta());
  check_error([] { meta_of(OpId::add, {tv(Tensor::meta({2, 3}, DType::Float32)), tv(Tensor::meta({4}, DType::Float32))}); },
              ErrorKind::RuntimeError, "add: shapes [2, 3] and [4] cannot be broadcast");
}

// ----- pointwise ------------------------------------------------------------------------

TEST_CASE("pointwise binary ops broadcast", "[ops]") {
  Tensor a = base23();
  Tensor b = ft({10, 20, 30}, {3});
  Tensor r = opt(OpId::add, {tv(a), tv(b)});
  CHECK(r.sizes() == Shape{2, 3});
  CHECK(r.dtype() == DType::Float32);
  CHECK(vals(r) == std::vector<double>{11, 22, 33, 14, 25, 36});
  Tensor col = ft({100, 200}, {2, 1});
  CHECK(vals(opt(OpId::sub, {tv(col), tv(b)})) == std::vector<double>{90, 80, 70, 190, 180, 170});
  CHECK(opt(OpId::mul, {tv(col), tv(b)}).sizes() == Shape{2, 3});
  CHECK(vals(opt(OpId::mul, {tv(a), tv(a)})) == std::vector<double>{1, 4, 9, 16, 25, 36});
  CHECK(vals(opt(OpId::div, {tv(a), fv(2.0)})) == std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3});
  CHECK(vals(opt(OpId::maximum, {tv(a), fv(3.5)})) == std::vector<double>{3.5, 3.5, 3.5, 4, 5, 6});
  CHECK(vals(opt(OpId::minimum, {tv(b), tv(col)})) == std::vector<double>{10, 20, 30, 10, 20, 30});
  // Broadcasting against an empty dim gives an empty result.
  CHECK(opt(OpId::add, {tv(Tensor::empty({0, 3}, DType::Float32)), tv(b)}).sizes() == Shape{0, 3});
  check_error([&] { op(OpId::add, {tv(a), tv(ft({1, 2}, {2}))}); }, ErrorKind::RuntimeError,
              "add: shapes [2, 3] and [2] cannot be broadcast");
  check_error([&] { op(OpId::where, {tv(bt({true, false, true}, {3})), tv(a), tv(ft({1, 2, 3, 4}, {2, 1, 2}))}); },
              ErrorKind::RuntimeError, "where: shapes [2, 3] and [2, 1, 2] cannot be broadcast");
  CHECK(opt(OpId::where, {tv(bt({true, false, true}, {3})), tv(a), tv(ft({-1, -2}, {2, 1, 1}))}).sizes() ==
        Shape{2, 2, 3});
}

TEST_CASE("pointwise ops read non-contiguous and expanded inputs", "[ops]") {
  Tensor t = transposed32();  // [[1, 4], [2, 5], [3, 6]]
  REQUIRE(!t.is_contiguous());
  CHECK(vals(opt(OpId::add, {tv(t), fv(1.0)})) == std::vector<double>{2, 5, 3, 6, 4, 7});
  CHECK(vals(opt(OpId::mul, {tv(t), tv(t)})) == std::vector<double>{1, 16, 4, 25, 9, 36});
  Tensor e = opt(OpId::expand, {tv(ft({1, 2}, {2, 1})), iv(2), iv(3)});
  CHECK(vals(opt(OpId::add, {tv(e), tv(base23())})) == std::vector<double>{2, 3, 4, 6, 7, 8});
  Tensor sl = opt(OpId::slice, {tv(ft({0, 1, 2, 3, 4, 5, 6, 7}, {8})), iv(0), iv(1), none_v(), iv(3)});
  CHECK(vals(opt(OpId::neg, {tv(sl)})) == std::vector<double>{-1, -4, -7});
  CHECK(vals(opt(OpId::where, {tv(bt({true, false}, {2})), tv(t), fv(0.0)})) == std::vector<double>{1, 0, 2, 0, 3, 0});
}

TEST_CASE("dtype promotion: tensors, 0-d tensors and weak Python scalars", "[ops]") {
  Tensor i = it({1, 2, 3}, {3});
  Tensor f = ft({1, 2, 3}, {3});
  Tensor b = bt({true, false, true}, {3});
  auto dtype_of_add = [](Value x, Value y) { return opt(OpId::add, {x, y}).dtype(); };
  CHECK(dtype_of_add(tv(i), fv(2.5)) == DType::Float32);   // int tensor + float -> default float
  CHECK(vals(opt(OpId::add, {tv(i), fv(2.5)})) == std::vector<double>{3.5, 4.5, 5.5});
  CHECK(dtype_of_add(tv(f), fv(2.0)) == DType::Float32);   // the scalar's precision does not count
  CHECK(dtype_of_add(tv(i), iv(2)) == DType::Int64);
  CHECK(dtype_of_add(tv(b), iv(1)) == DType::Int64);       // bool tensor + int -> int64
  CHECK(vals(opt(OpId::add, {tv(b), iv(1)})) == std::vector<double>{2, 1, 2});
  CHECK(dtype_of_add(tv(b), bv(true)) == DType::Bool);
  CHECK(dtype_of_add(tv(i), bv(true)) == DType::Int64);
  CHECK(dtype_of_add(tv(i), tv(f)) == DType::Float32);
  CHECK(dtype_of_add(tv(f), tv(dt({1, 2, 3}, {3}))) == DType::Float64);
  // int32 (torch.int32): a Python int keeps it, int64 and floats win, sums are int64.
  Tensor i32 = i.to(DType::Int32);
  CHECK(dtype_of_add(tv(i32), iv(2)) == DType::Int32);
  CHECK(dtype_of_add(tv(i32), tv(i)) == DType::Int64);
  CHECK(dtype_of_add(tv(i32), tv(b)) == DType::Int32);
  CHECK(dtype_of_add(tv(i32), fv(0.5)) == DType::Float32);
  CHECK(dtype_of_add(tv(Tensor::scalar(1, DType::Float32)), tv(i32)) == DType::Float32);  // torch.pow(base, powers)
  CHECK(opt(OpId::sum, {tv(i32)}).dtype() == DType::Int64);
  Tensor big = opt(OpId::mul, {tv(opt(OpId::add, {tv(i32), iv(1 << 30)})), iv(4)});  // wraps like torch's int32
  CHECK(big.dtype() == DType::Int32);
  CHECK(vals(big) == std::vector<double>{4, 8, 12});  // (i + 2^30) * 4 = 4i + 2^32
  Tensor mm = opt(OpId::matmul, {tv(it({1, 2, 3, 4}, {2, 2}).to(DType::Int32)), tv(it({1, 1, 1, 1}, {2, 2}).to(DType::Int32))});
  CHECK(mm.dtype() == DType::Int32);
  CHECK(vals(mm) == std::vector<double>{3, 3, 7, 7});
  // 0-d tensors rank between dimensioned tensors and scalars, as in torch.
  CHECK(dtype_of_add(tv(f), tv(Tensor::scalar(1, DType::Float64))) == DType::Float32);
  CHECK(dtype_of_add(tv(i), tv(Tensor::scalar(1, DType::Float64))) == DType::Float64);
  CHECK(dtype_of_add(tv(Tensor::scalar(1, DType::Int64)), fv(1.5)) == DType::Float32);
  CHECK(dtype_of_add(tv(Tensor::scalar(1, DType::Float64)), fv(1.5)) == DType::Float64);
  // Scalars on either side; all-scalar calls still give a 0-d tensor.
  CHECK(vals(opt(OpId::sub, {iv(10), tv(i)})) == std::vector<double>{9, 8, 7});
  Tensor s = opt(OpId::add, {iv(1), iv(2)});
  CHECK(s.dim() == 0);
  CHECK(s.dtype() == DType::Int64);
  CHECK(s.item() == 3);
  CHECK(opt(OpId::mul, {fv(1.5), iv(2)}).dtype() == DType::Float32);
  // Rules: Float (div and transcendentals), Compare, Integral, Where.
  CHECK(opt(OpId::div, {tv(i), iv(2)}).dtype() == DType::Float32);
  CHECK(vals(opt(OpId::div, {tv(i), iv(2)})) == std::vector<double>{0.5, 1, 1.5});
  CHECK(opt(OpId::exp, {tv(i)}).dtype() == DType::Float32);
  CHECK(opt(OpId::sqrt, {tv(dt({4}, {1}))}).dtype() == DType::Float64);
  CHECK(opt(OpId::lt, {tv(i), fv(2.5)}).dtype() == DType::Bool);
  CHECK(opt(OpId::relu, {tv(it({-1, 2}, {2}))}).dtype() == DType::Int64);
  CHECK(opt(OpId::where, {tv(b), tv(i), fv(0.5)}).dtype() == DType::Float32);
  CHECK(vals(opt(OpId::where, {tv(b), tv(i), fv(0.5)})) == std::vector<double>{1, 0.5, 3});
  CHECK(opt(OpId::where, {tv(b), tv(i), iv(0)}).dtype() == DType::Int64);
  check_error([&] { op(OpId::bitwise_and, {tv(f), tv(i)}); }, ErrorKind::TypeError,
              "bitwise_and(): expected integral or bool operands, got float32");
  check_error([&] { op(OpId::bitwise_not, {fv(1.0)}); }, ErrorKind::TypeError,
              "bitwise_not(): expected integral or bool operands, got float32");
  check_error([&] { op(OpId::where, {tv(f), tv(i), tv(i)}); }, ErrorKind::TypeError,
              "where(): argument 'condition' must be a bool tensor, not float32");
  check_error([&] { op(OpId::where, {iv(1), tv(i), tv(i)}); }, ErrorKind::TypeError,
              "where(): argument 'condition' must be a bool tensor, not int");
  CHECK(vals(opt(OpId::where, {bv(false), tv(i), iv(7)})) == std::vector<double>{7, 7, 7});
  check_error([&] { op(OpId::sub, {tv(b), tv(b)}); }, ErrorKind::RuntimeError,
              "Subtraction, the `-` operator, with two bool tensors is not supported. If you are trying to invert a "
              "mask, use the `~` or `logical_not()` operator instead.");
  check_error([&] { meta_of(OpId::neg, {tv(Tensor::meta({2}, DType::Bool))}); }, ErrorKind::RuntimeError,
              "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use "
              "the `~` or `logical_not()` operator instead.");
}

TEST_CASE("integer and float arithmetic semantics", "[ops]") {
  Tensor a = it({-7, 7, -7, 7}, {4});
  Tensor b = it({2, 2, -2, -2}, {4});
  CHECK(vals(opt(OpId::floor_divide, {tv(a), tv(b)})) == std::vector<double>{-4, 3, 3, -4});
  CHECK(vals(opt(OpId::remainder, {tv(a), tv(b)})) == std::vector<double>{1, 1, -1, -1});
  Tensor fa = dt({-7.5, 7.5, 1.0}, {3});
  CHECK(vals(opt(OpId::floor_divide, {tv(fa), fv(2.0)})) == std::vector<double>{-4, 3, 0});
  CHECK(vals(opt(OpId::remainder, {tv(fa), fv(-2.0)})) == std::vector<double>{-1.5, -0.5, -1});
  check_error([&] { op(OpId::floor_divide, {tv(a), iv(0)}); }, ErrorKind::ZeroDivisionError,
              "integer division or modulo by zero");
  check_error([&] { op(OpId::remainder, {tv(a), tv(it({1, 1, 0, 1}, {4}))}); }, ErrorKind::ZeroDivisionError,
              "integer division or modulo by zero");
  Tensor fdz = opt(OpId::div, {tv(ft({1, -1, 0}, {3})), fv(0.0)});
  CHECK(std::isinf(vals(fdz)[0]));
  CHECK(vals(fdz)[1] < 0);
  CHECK(std::isnan(vals(fdz)[2]));
  CHECK(vals(opt(OpId::pow, {tv(it({2, 3, -2}, {3})), iv(3)})) == std::vector<double>{8, 27, -8});
  CHECK(opt(OpId::pow, {tv(it({2}, {1})), iv(3)}).dtype() == DType::Int64);
  check_error([&] { op(OpId::pow, {tv(it({2}, {1})), iv(-1)}); }, ErrorKind::RuntimeError,
              "Integers to negative integer powers are not allowed.");
  CHECK(vals(opt(OpId::pow, {tv(ft({4, 9}, {2})), fv(0.5)})) == std::vector<double>{2, 3});
  CHECK(vals(opt(OpId::pow, {fv(2.0), tv(ft({3}, {1}))})) == std::vector<double>{8});
  CHECK(vals(opt(OpId::pow, {tv(it({4}, {1})), fv(0.5)})) == std::vector<double>{2});  // int ** float -> float32
  CHECK(vals(opt(OpId::abs, {tv(it({-3, 4}, {2}))})) == std::vector<double>{3, 4});
  CHECK(vals(opt(OpId::neg, {tv(it({-3, 4}, {2}))})) == std::vector<double>{3, -4});
  CHECK(vals(opt(OpId::add, {tv(bt({true, true, false}, {3})), tv(bt({true, false, false}, {3}))})) ==
        std::vector<double>{1, 1, 0});
  CHECK(vals(opt(OpId::mul, {tv(bt({true, true, false}, {3})), tv(bt({true, false, false}, {3}))})) ==
        std::vector<double>{1, 0, 0});
  // NaN propagates through maximum/minimum/relu, like torch.
  Tensor n = opt(OpId::maximum, {tv(ft({NAN, 1}, {2})), tv(ft({0, NAN}, {2}))});
  CHECK(std::isnan(vals(n)[0]));
  CHECK(std::isnan(vals(n)[1]));
  CHECK(std::isnan(vals(opt(OpId::relu, {tv(ft({NAN}, {1}))}))[0]));
}

TEST_CASE("comparison and bitwise ops", "[ops]") {
  Tensor x = ft({1, 2, 3}, {3});
  CHECK(vals(opt(OpId::eq, {tv(x), fv(2.0)})) == std::vector<double>{0, 1, 0});
  CHECK(vals(opt(OpId::ne, {tv(x), iv(2)})) == std::vector<double>{1, 0, 1});
  CHECK(vals(opt(OpId::lt, {tv(x), tv(ft({3, 2, 1}, {3}))})) == std::vector<double>{1, 0, 0});
  CHECK(vals(opt(OpId::le, {tv(x), fv(2.0)})) == std::vector<double>{1, 1, 0});
  CHECK(vals(opt(OpId::gt, {tv(x), fv(2.0)})) == std::vector<double>{0, 0, 1});
  CHECK(vals(opt(OpId::ge, {tv(x), fv(2.0)})) == std::vector<double>{0, 1, 1});
  CHECK(vals(opt(OpId::eq, {tv(it({1, 2}, {2})), fv(1.5)})) == std::vector<double>{0, 0});  // compares in float32
  CHECK(vals(opt(OpId::lt, {tv(it({1, 2}, {2})), fv(1.5)})) == std::vector<double>{1, 0});
  Tensor p = it({12, 10, -1}, {3}), q = it({10, 6, 5}, {3});
  CHECK(vals(opt(OpId::bitwise_and, {tv(p), tv(q)})) == std::vector<double>{8, 2, 5});
  CHECK(vals(opt(OpId::bitwise_or, {tv(p), tv(q)})) == std::vector<double>{14, 14, -1});
  CHECK(vals(opt(OpId::bitwise_xor, {tv(p), tv(q)})) == std::vector<double>{6, 12, -6});
  CHECK(vals(opt(OpId::bitwise_not, {tv(p)})) == std::vector<double>{-13, -11, 0});
  Tensor m = bt({true, false}, {2});
  CHECK(opt(OpId::bitwise_not, {tv(m)}).dtype() == DType::Bool);
  CHECK(vals(opt(OpId::bitwise_not, {tv(m)})) == std::vector<double>{0, 1});
  CHECK(vals(opt(OpId::bitwise_xor, {tv(m), bv(true)})) == std::vector<double>{0, 1});
  CHECK(opt(OpId::bitwise_or, {tv(m), iv(2)}).dtype() == DType::Int64);
  CHECK(vals(opt(OpId::bitwise_or, {tv(m), iv(2)})) == std::vector<double>{3, 2});
}

TEST_CASE("unary float ops", "[ops]") {
  Tensor x = ft({-1, 0, 1, 2}, {4});
  check_close(opt(OpId::exp, {tv(x)}), {0.36787944117144233, 1, 2.718281828459045, 7.38905609893065});
  check_close(opt(OpId::tanh, {tv(x)}), {-0.7615941559557649, 0, 0.7615941559557649, 0.9640275800758169});
  check_close(opt(OpId::sigmoid, {tv(x)}), {0.2689414213699951, 0.5, 0.7310585786300049, 0.8807970779778823});
  check_close(opt(OpId::gelu, {tv(x)}), {-0.15865525393145707, 0, 0.8413447460685429, 1.9544997361036416});
  CHECK(vals(opt(OpId::relu, {tv(x)})) == std::vector<double>{0, 0, 1, 2});
  CHECK(vals(opt(OpId::abs, {tv(x)})) == std::vector<double>{1, 0, 1, 2});
  CHECK(vals(opt(OpId::neg, {tv(x)})) == std::vector<double>{1, 0, -1, -2});
  Tensor y = dt({1, 4, 0.25}, {3});
  CHECK(vals(opt(OpId::sqrt, {tv(y)})) == std::vector<double>{1, 2, 0.5});
  CHECK(vals(opt(OpId::rsqrt, {tv(y)})) == std::vector<double>{1, 0.5, 2});
  check_close(opt(OpId::log, {tv(y)}), {0, 1.3862943611198906, -1.3862943611198906}, 1e-12);
  CHECK(opt(OpId::log, {tv(y)}).dtype() == DType::Float64);
  Tensor l = opt(OpId::log, {tv(ft({0, -1}, {2}))});
  CHECK(std::isinf(vals(l)[0]));
  CHECK(std::isnan(vals(l)[1]));
  check_close(opt(OpId::sigmoid, {tv(it({0, 1}, {2}))}), {0.5, 0.7310585786300049});
  // A 0-d tensor input keeps rank 0.
  Tensor z = opt(OpId::exp, {tv(Tensor::scalar(0, DType::Float64))});
  CHECK(z.dim() == 0);
  CHECK(z.item() == 1);
}

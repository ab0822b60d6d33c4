// Tensor: storage, construction, layout queries, copies and conversions,
// element access, printing, broadcasting helpers, indexing, and the random
// generator's building blocks.
#include <cmath>
#include <cstring>
#include <limits>

#include "ops_test_util.h"
#include "runtime/kernels/eager_eval.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/tensor/tensor_index.h"

using namespace kiln;
using namespace kiln::runtime;
using namespace kiln::test;

TEST_CASE("shape helpers", "[tensor]") {
  CHECK(shape_str({}) == "[]");
  CHECK(shape_str({2, 3}) == "[2, 3]");
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({2, 0, 3}) == 0);
  CHECK(contiguous_strides({2, 3, 4}) == Shape{12, 4, 1});
  CHECK(contiguous_strides({2, 0, 4}) == Shape{4, 4, 1});
  CHECK(contiguous_strides({}) == Shape{});
  CHECK(broadcast_shapes("add", {2, 1, 3}, {4, 1}) == Shape{2, 4, 3});
  CHECK(broadcast_shapes("add", {}, {5}) == Shape{5});
  CHECK(broadcast_shapes("add", {0, 1}, {3}) == Shape{0, 3});
  check_error([] { broadcast_shapes("add", {2, 3}, {4}); }, ErrorKind::RuntimeError,
              "add: shapes [2, 3] and [4] cannot be broadcast");
  CHECK(wrap_dim("sum", -1, 2) == 1);
  CHECK(wrap_dim("sum", 0, 2) == 0);
  check_error([] { wrap_dim("sum", 3, 2); }, ErrorKind::IndexError, "sum: dim 3 is out of range for a tensor of rank 2");
  check_error([] { wrap_dim("sum", -3, 2); }, ErrorKind::IndexError,
              "sum: dim -3 is out of range for a tensor of rank 2");
}

TEST_CASE("dtype names", "[tensor]") {
  CHECK(dtype_from_name("float32") == DType::Float32);
  CHECK(dtype_from_name("float64") == DType::Float64);
  CHECK(dtype_from_name("int64") == DType::Int64);
  CHECK(dtype_from_name("bool") == DType::Bool);
  CHECK(dtype_from_name("float") == DType::Float32);
  CHECK(dtype_from_name("double") == DType::Float64);
  CHECK(dtype_from_name("long") == DType::Int64);
  CHECK(!dtype_from_name("float16"));
  CHECK(!dtype_from_name("int"));
  CHECK(!dtype_from_name("Float32"));
}

TEST_CASE("storage is zeroed and 64-byte aligned", "[tensor]") {
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(1000)}) {
    auto s = Storage::allocate(n);
    REQUIRE(s->data != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(s->data) % 64 == 0);
    CHECK(s->nbytes == n);
    for (size_t i = 0; i < n; ++i) REQUIRE(static_cast<unsigned char*>(s->data)[i] == 0);
  }
  Tensor t = Tensor::empty({3, 5}, DType::Float64);
  CHECK(vals(t) == std::vector<double>(15, 0.0));
  CHECK(t.strides() == Shape{5, 1});
  CHECK(t.is_contiguous());
  CHECK(t.offset() == 0);
  check_error([] { Tensor::empty({2, -1}, DType::Float32); }, ErrorKind::RuntimeError,
              "negative dimension -1 in shape [2, -1]");
  check_error([] { Tensor::empty({int64_t(1) << 40, int64_t(1) << 40}, DType::Float32); }, ErrorKind::RuntimeError,
              "shape [1099511627776, 1099511627776] is too large");
}

TEST_CASE("from_blob borrows memory and runs the deleter once the last view dies", "[tensor]") {
  static int freed = 0;
  freed = 0;
  double buf[6] = {1, 2, 3, 4, 5, 6};
  {
    Tensor t = Tensor::from_blob(buf, {2, 3}, {}, DType::Float64, [](void*) { ++freed; });
    CHECK(t.data<double>() == buf);
    Tensor v = t.as_strided({3}, {2}, 0);
    t = Tensor();
    CHECK(freed == 0);
    CHECK(vals(v) == std::vector<double>{1, 3, 5});
    buf[2] = 30;
    CHECK(vals(v) == std::vector<double>{1, 30, 5});
  }
  CHECK(freed == 1);
}

TEST_CASE("from_vector, scalar, item", "[tensor]") {
  Tensor t = it({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.dtype() == DType::Int64);
  CHECK(t.size(0) == 2);
  CHECK(t.size(-1) == 3);
  check_error([&] { t.size(2); }, ErrorKind::IndexError, "size: dim 2 is out of range for a tensor of rank 2");
  CHECK(t.item_as_double({1, 2}) == 6);
  check_error([&] { t.item_as_double({2, 0}); }, ErrorKind::IndexError,
              "item: index 2 is out of range for dimension 0 of size 2");
  check_error([&] { t.item(); }, ErrorKind::RuntimeError, "a Tensor with 6 elements cannot be converted to Scalar");
  check_error([] { it({1, 2}, {3}); }, ErrorKind::RuntimeError, "from_vector: 2 values do not fill shape [3] (3 elements)");
  CHECK(Tensor::scalar(2.75, DType::Float32).item() == 2.75);
  CHECK(Tensor::scalar(2.75, DType::Int64).item() == 2);
  CHECK(Tensor::scalar(-2.75, DType::Int64).item() == -2);
  CHECK(Tensor::scalar(0.5, DType::Bool).item() == 1);
  CHECK(Tensor::scalar(2.0, DType::Float64).dim() == 0);
  // NaN to int64 is pinned (torch on x86 gives INT64_MIN) rather than undefined.
  CHECK(Tensor::scalar(std::nan(""), DType::Int64).item() == double(std::numeric_limits<int64_t>::min()));
  CHECK(ft({7}, {1, 1}).item() == 7);
}

TEST_CASE("meta tensors carry layout but no data", "[tensor]") {
  Tensor m = Tensor::meta({2, 3}, DType::Float64);
  CHECK(m.is_meta());
  CHECK(m.strides() == Shape{3, 1});
  check_error([&] { m.raw_data(); }, ErrorKind::RuntimeError, "cannot access the data of a meta tensor (shape [2, 3])");
  Tensor v = m.as_strided({3, 2}, {1, 3}, 0);
  CHECK(v.is_meta());
  CHECK(!v.is_contiguous());
  CHECK(v.contiguous().strides() == Shape{2, 1});
  CHECK(v.to(DType::Int64).dtype() == DType::Int64);
  CHECK(m.repr() == "tensor(..., device='meta', size=(2, 3), dtype=float64)");
  CHECK(Tensor::meta({4}, DType::Float32).repr() == "tensor(..., device='meta', size=(4,))");
}

TEST_CASE("contiguity, views, clone and conversion", "[tensor]") {
  Tensor t = ft({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tt = t.as_strided({3, 2}, {1, 3}, 0);  // the transpose
  CHECK(!tt.is_contiguous());
  CHECK(vals(tt) == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(t.as_strided({1, 3}, {100, 1}, 3).is_contiguous());  // a size-1 dim's stride is irrelevant
  CHECK(t.as_strided({0, 3}, {1, 5}, 0).is_contiguous());

  Tensor c = tt.contiguous();
  CHECK(!same_storage(c, t));
  CHECK(c.is_contiguous());
  CHECK(vals(c) == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(t.contiguous().same(t));  // already contiguous: the same tensor

  Tensor k = t.clone();
  CHECK(!same_storage(k, t));
  k.data<float>()[0] = 100;
  CHECK(t.data<float>()[0] == 1);

  CHECK(t.to(DType::Float32).same(t));
  Tensor i = ft({-1.5, 2.5, 0.0}, {3}).to(DType::Int64);
  CHECK(i.dtype() == DType::Int64);
  CHECK(vals(i) == std::vector<double>{-1, 2, 0});
  CHECK(vals(ft({-1.5, 2.5, 0.0}, {3}).to(DType::Bool)) == std::vector<double>{1, 1, 0});
  CHECK(vals(tt.to(DType::Float64)) == std::vector<double>{1, 4, 2, 5, 3, 6});

  Tensor p = t.as_parameter();
  CHECK(p.is_parameter());
  CHECK(!t.is_parameter());
  CHECK(same_storage(p, t));

  Tensor v = t.as_strided({2}, {3}, 1);  // column 1
  v.data<float>()[3] = 50;               // element [1] of the view
  CHECK(t.item_as_double({1, 1}) == 50);
  check_error([&] { t.as_strided({3, 3}, {3, 1}, 0); }, ErrorKind::RuntimeError,
              "as_strided: a view of shape [3, 3], strides [3, 1] and offset 0 is out of bounds for a storage of 6 "
              "elements");
}

TEST_CASE("repr follows torch's formatting", "[tensor]") {
  CHECK(ft({1, 2, 3, 4}, {2, 2}).repr() == "tensor([[1., 2.],\n        [3., 4.]])");
  CHECK(dt({1.5, 2.25}, {2}).repr() == "tensor([1.5000, 2.2500], dtype=float64)");
  CHECK(ft({0.1f, 0.25f}, {2}).repr() == "tensor([0.1000, 0.2500])");
  CHECK(ft({-1.5f, 10.0f}, {2}).repr() == "tensor([-1.5000, 10.0000])");
  CHECK(it({1, 2, 3}, {3}).repr() == "tensor([1, 2, 3])");
  CHECK(it({1, -10}, {2}).repr() == "tensor([  1, -10])");
  CHECK(bt({true, false}, {2}).repr() == "tensor([ True, False])");
  CHECK(Tensor::scalar(3.5, DType::Float32).repr() == "tensor(3.5000)");
  CHECK(Tensor::scalar(2, DType::Float32).repr() == "tensor(2.)");
  CHECK(Tensor::scalar(7, DType::Int64).repr() == "tensor(7)");
  CHECK(Tensor::scalar(1, DType::Bool).repr() == "tensor(True)");
  CHECK(Tensor::scalar(2, DType::Float64).repr() == "tensor(2., dtype=float64)");
  CHECK(Tensor::empty({0}, DType::Float32).repr() == "tensor([])");
  CHECK(Tensor::empty({0, 3}, DType::Float32).repr() == "tensor([], size=(0, 3))");
  CHECK(Tensor::empty({0}, DType::Int64).repr() == "tensor([], dtype=int64)");
  CHECK(ft({1e-5f, 1.0f}, {2}).repr() == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(ft({1.0f, 1e9f}, {2}).repr() == "tensor([1.0000e+00, 1.0000e+09])");
  CHECK(ft({1.0f, NAN, -INFINITY}, {3}).repr() == "tensor([1., nan, -inf])");
  CHECK(ft({0, 0}, {2}).repr() == "tensor([0., 0.])");
  CHECK(Tensor::empty({2, 1, 2}, DType::Float32).repr() == "tensor([[[0., 0.]],\n\n        [[0., 0.]]])");

  std::vector<float> a30;
  for (int i = 0; i < 30; ++i) a30.push_back(float(i));
  CHECK(ft(a30, {30}).repr() ==
        "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
        "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
        "        28., 29.])");

  std::vector<int64_t> a2000;
  for (int i = 0; i < 2000; ++i) a2000.push_back(i);
  CHECK(it(a2000, {2000}).repr() == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  CHECK(Tensor::empty({100, 100}, DType::Float32).repr() ==
        "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        ...,\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.]])");
  // Non-contiguous tensors print their logical order.
  Tensor t = ft({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.as_strided({3, 2}, {1, 3}, 0).repr() == "tensor([[1., 4.],\n        [2., 5.],\n        [3., 6.]])");
  // A suffix that would pass 80 columns moves to its own line.
  std::vector<double> wide;
  for (int i = 0; i < 12; ++i) wide.push_back(i + 0.5);
  CHECK(dt(wide, {12}).repr() ==
        "tensor([ 0.5000,  1.5000,  2.5000,  3.5000,  4.5000,  5.5000,  6.5000,  7.5000,\n"
        "         8.5000,  9.5000, 10.5000, 11.5000], dtype=float64)");
  std::vector<double> full_line;
  for (int i = 0; i < 8; ++i) full_line.push_back(i + 10.5);
  CHECK(dt(full_line, {8}).repr() ==
        "tensor([10.5000, 11.5000, 12.5000, 13.5000, 14.5000, 15.5000, 16.5000, 17.5000],\n"
        "       dtype=float64)");
}

// ----- indexing -------------------------------------------------------------------

namespace {
Value slice(Value a, Value b, Value c = Value::none()) { return make_slice(std::move(a), std::move(b), std::move(c)); }
const Value none = Value::none();
}  // namespace

TEST_CASE("tensor_getitem returns views", "[tensor]") {
  Tensor t = ft({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor r = tensor_getitem(t, iv(1)).as_tensor();
  CHECK(r.sizes() == Shape{4});
  CHECK(vals(r) == std::vector<double>{4, 5, 6, 7});
  CHECK(same_storage(r, t));
  CHECK(vals(tensor_getitem(t, iv(-1)).as_tensor()) == std::vector<double>{8, 9, 10, 11});
  Tensor col = tensor_getitem(t, tup({slice(none, none), iv(2)})).as_tensor();
  CHECK(col.sizes() == Shape{3});
  CHECK(vals(col) == std::vector<double>{2, 6, 10});
  Tensor s = tensor_getitem(t, tup({slice(iv(1), none), slice(none, none, iv(2))})).as_tensor();
  CHECK(s.sizes() == Shape{2, 2});
  CHECK(vals(s) == std::vector<double>{4, 6, 8, 10});
  Tensor clamped = tensor_getitem(t, slice(iv(-10), iv(100))).as_tensor();
  CHECK(clamped.sizes() == Shape{3, 4});
  CHECK(tensor_getitem(t, slice(iv(2), iv(1))).as_tensor().sizes() == Shape{0, 4});
  Tensor u = tensor_getitem(t, tup({none, iv(0), none})).as_tensor();
  CHECK(u.sizes() == Shape{1, 1, 4});
  CHECK(vals(u) == std::vector<double>{0, 1, 2, 3});
  CHECK(tensor_getitem(t, tup({iv(1), iv(2)})).as_tensor().item() == 6);
  CHECK(tensor_getitem(t, tup({iv(1), iv(2)})).as_tensor().dim() == 0);

  check_error([&] { tensor_getitem(t, iv(3)); }, ErrorKind::IndexError,
              "index 3 is out of bounds for dimension 0 with size 3");
  check_error([&] { tensor_getitem(t, tup({iv(0), iv(0), iv(0)})); }, ErrorKind::IndexError,
              "too many indices for tensor of dimension 2");
  check_error([&] { tensor_getitem(Tensor::scalar(1, DType::Float32), iv(0)); }, ErrorKind::IndexError,
              "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or `tensor.item<T>()` in C++ to convert a 0-dim "
              "tensor to a number");
  check_error([&] { tensor_getitem(t, sv("a")); }, ErrorKind::IndexError,
              "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices (got str)");
  check_error([&] { tensor_getitem(t, slice(none, none, iv(-1))); }, ErrorKind::ValueError,
              "step must be greater than zero");
  check_error([&] { tensor_getitem(t, slice(none, none, iv(0))); }, ErrorKind::ValueError, "slice step cannot be zero");
  check_error([&] { tensor_getitem(t, slice(fv(1.0), none)); }, ErrorKind::TypeError,
              "slice indices must be integers or None or have an __index__ method");
}

TEST_CASE("tensor_setitem writes through the view with broadcasting and conversion", "[tensor]") {
  Tensor t = ft({0, 1, 2, 3, 4, 5}, {2, 3});
  tensor_setitem(t, iv(0), fv(9.5));
  CHECK(vals(t) == std::vector<double>{9.5, 9.5, 9.5, 3, 4, 5});
  tensor_setitem(t, tup({slice(none, none), iv(1)}), tv(it({7, 8}, {2})));  // int64 into float32
  CHECK(vals(t) == std::vector<double>{9.5, 7, 9.5, 3, 8, 5});
  tensor_setitem(t, tup({slice(none, none), slice(iv(1), none)}), tv(ft({-1, -2}, {2})));  // broadcast rows
  CHECK(vals(t) == std::vector<double>{9.5, -1, -2, 3, -1, -2});
  tensor_setitem(t, iv(1), bv(true));
  CHECK(vals(t) == std::vector<double>{9.5, -1, -2, 1, 1, 1});

  Tensor i = it({0, 0, 0}, {3});
  tensor_setitem(i, slice(none, none), fv(2.7));  // truncates like torch
  CHECK(vals(i) == std::vector<double>{2, 2, 2});

  // Overlapping source and destination: the source is read before writing.
  Tensor s = it({1, 2, 3, 4}, {4});
  tensor_setitem(s, slice(iv(1), none), tensor_getitem(s, slice(none, iv(-1))));
  CHECK(vals(s) == std::vector<double>{1, 1, 2, 3});

  check_error([&] { tensor_setitem(t, iv(0), tv(ft({1, 2}, {2}))); }, ErrorKind::RuntimeError,
              "The expanded size of the tensor (3) must match the existing size (2) at non-singleton dimension 0.  "
              "Target sizes: [3].  Tensor sizes: [2]");
  check_error([&] { tensor_setitem(t, iv(0), sv("x")); }, ErrorKind::TypeError, "can't assign a str to a float32 tensor");
}

// ----- scalar semantics of the eager evaluator ----------------------------------

TEST_CASE("eager evaluator: Python integer and float semantics", "[tensor]") {
  EagerEval E;
  CHECK(E.floordiv<int64_t>(-7, 2) == -4);
  CHECK(E.floordiv<int64_t>(7, -2) == -4);
  CHECK(E.floordiv<int64_t>(-7, -2) == 3);
  CHECK(E.mod<int64_t>(-7, 2) == 1);
  CHECK(E.mod<int64_t>(7, -2) == -1);
  CHECK(E.mod<int64_t>(-8, 2) == 0);
  const int64_t mn = std::numeric_limits<int64_t>::min();
  CHECK(E.floordiv<int64_t>(mn, -1) == mn);  // wraps instead of trapping
  CHECK(E.mod<int64_t>(mn, -1) == 0);
  CHECK(E.add<int64_t>(std::numeric_limits<int64_t>::max(), 1) == mn);
  CHECK(E.floordiv<double>(-7.5, 2) == -4);
  CHECK(E.mod<double>(-7.5, 2) == 0.5);
  CHECK(E.mod<double>(7.5, -2) == -0.5);
  CHECK(std::isinf(E.floordiv<double>(1.0, 0.0)));
  CHECK(E.floordiv<double>(-0.5, 4.0) == -1);
  CHECK(E.floordiv<double>(0.5, -4.0) == -1);
  CHECK(std::signbit(E.floordiv<double>(0.0, -4.0)));  // -0.0, as Python's 0.0 // -4.0
  CHECK(E.pow<int64_t>(3, 4) == 81);
  CHECK(E.pow<int64_t>(-2, 3) == -8);
  CHECK(E.pow<bool>(false, false) == true);
  CHECK(E.bnot<bool>(true) == false);
  CHECK(E.bnot<int64_t>(5) == -6);
  CHECK(E.abs<int64_t>(-3) == 3);
  CHECK(std::isnan(E.max<float>(NAN, 1.0f)));
  CHECK(std::isnan(E.min<double>(1.0, NAN)));
  CHECK(E.max<bool>(false, true) == true);
  CHECK(E.c<float>(0.0f, 0.5) == 0.5f);
  CHECK(E.where<int64_t>(false, 1, 2) == 2);
  check_error([&] { E.floordiv<int64_t>(1, 0); }, ErrorKind::ZeroDivisionError, "integer division or modulo by zero");
  check_error([&] { E.mod<int64_t>(1, 0); }, ErrorKind::ZeroDivisionError, "integer division or modulo by zero");
  check_error([&] { E.mod<bool>(true, false); }, ErrorKind::ZeroDivisionError, "integer division or modulo by zero");
  check_error([&] { E.pow<int64_t>(2, -1); }, ErrorKind::RuntimeError,
              "Integers to negative integer powers are not allowed.");
}

// ----- the random generator's building blocks -------------------------------------

TEST_CASE("Philox 4x32-10 matches the Random123 known-answer vectors", "[tensor]") {
  using B = std::array<uint32_t, 4>;
  CHECK(philox_block({0, 0, 0, 0}, 0, 0) == B{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox_block({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu) ==
        B{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox_block({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u) ==
        B{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("deterministic log agrees with std::log", "[tensor]") {
  for (double x : {1e-300, 1e-10, 0.001, 0.1, 0.5, 0.70710678, 0.75, 0.999999, 1.0, 1.5, 2.0, 10.0, 12345.678, 1e300}) {
    const double ref = std::log(x);
    const double got = deterministic_log(x);
    CHECK(std::abs(got - ref) <= 4e-16 * std::max(1.0, std::abs(ref)));
  }
  CHECK(deterministic_log(1.0) == 0.0);
}

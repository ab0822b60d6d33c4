// Registry ops, continued: views (sharing storage), copies and conversion,
// cat, embedding, constructors, and the seeded random generator.
#include <cmath>
#include <cstring>

#include "ops_test_util.h"

using namespace kiln;
using namespace kiln::runtime;
using namespace kiln::test;

namespace {

const Value none = Value::none();
Tensor base23() { return ft({1, 2, 3, 4, 5, 6}, {2, 3}); }

std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out(size_t(t.numel()));
  REQUIRE(t.dtype() == DType::Float32);
  std::memcpy(out.data(), t.data<float>(), out.size() * 4);
  return out;
}

}  // namespace

// ----- views ----------------------------------------------------------------------------------

TEST_CASE("reshape and view share storage when possible", "[ops]") {
  Tensor x = base23();
  Tensor r = opt(OpId::reshape, {tv(x), iv(3), iv(-1)});
  CHECK(r.sizes() == Shape{3, 2});
  CHECK(same_storage(r, x));
  r.data<float>()[5] = 60;  // writing through the view changes the base
  CHECK(x.item_as_double({1, 2}) == 60);
  CHECK(vals(opt(OpId::view, {tv(x), iv(6)})) == std::vector<double>{1, 2, 3, 4, 5, 60});
  CHECK(same_storage(opt(OpId::view, {tv(x), iv(-1)}), x));
  CHECK(opt(OpId::reshape, {tv(x), iv(1), iv(2), iv(1), iv(3)}).sizes() == Shape{1, 2, 1, 3});
  // A transposed tensor cannot be flattened without a copy: reshape copies, view refuses.
  Tensor t = opt(OpId::transpose, {tv(x), iv(0), iv(1)});
  Tensor rc = opt(OpId::reshape, {tv(t), iv(6)});
  CHECK(!same_storage(rc, x));
  CHECK(vals(rc) == std::vector<double>{1, 4, 2, 5, 3, 60});
  check_error([&] { op(OpId::view, {tv(t), iv(6)}); }, ErrorKind::RuntimeError,
              "view: shape [6] is not compatible with input shape [3, 2] and strides [1, 3] without a copy (use "
              "reshape)");
  // ... but splitting a dim of a non-contiguous tensor is still a view.
  Tensor split = opt(OpId::view, {tv(t), iv(3), iv(2), iv(1)});
  CHECK(same_storage(split, x));
  CHECK(split.strides() == Shape{1, 3, 3});
  // A column slice viewed with a new leading dim.
  Tensor col = opt(OpId::select, {tv(x), iv(1), iv(0)});
  CHECK(same_storage(opt(OpId::view, {tv(col), iv(1), iv(2)}), x));
  check_error([&] { op(OpId::reshape, {tv(Tensor::empty({6}, DType::Float32)), iv(4), iv(5)}); },
              ErrorKind::RuntimeError, "reshape: shape [4, 5] is invalid for input of size 6");
  check_error([&] { op(OpId::reshape, {tv(x), iv(-1), iv(-1)}); }, ErrorKind::RuntimeError,
              "reshape: only one dimension can be inferred");
  check_error([&] { op(OpId::reshape, {tv(x), iv(-1), iv(4)}); }, ErrorKind::RuntimeError,
              "reshape: shape [-1, 4] is invalid for input of size 6");
  check_error([&] { op(OpId::reshape, {tv(x), iv(-2), iv(3)}); }, ErrorKind::RuntimeError,
              "reshape: invalid shape dimension -2 in [-2, 3]");
  CHECK(opt(OpId::reshape, {tv(Tensor::scalar(5, DType::Float32)), tup({})}).dim() == 0);
  CHECK(opt(OpId::reshape, {tv(Tensor::empty({0, 3}, DType::Float32)), iv(3), iv(0)}).sizes() == Shape{3, 0});
  // With 0 elements, -1 next to a 0 could be anything: an error, as in torch.
  check_error([&] { op(OpId::reshape, {tv(Tensor::empty({0, 3}, DType::Float32)), iv(0), iv(-1)}); },
              ErrorKind::RuntimeError, "reshape: shape [0, -1] is invalid for input of size 0");
  // The meta rule reports view strides, or the layout of the copy.
  Tensor mv = meta_of(OpId::reshape, {tv(Tensor::meta({3, 2}, DType::Float32, {1, 3})), iv(6)});
  CHECK(mv.strides() == Shape{1});
  CHECK(mv.sizes() == Shape{6});
}

TEST_CASE("transpose, permute, expand", "[ops]") {
  Tensor x = base23();
  Tensor t = opt(OpId::transpose, {tv(x), iv(-1), iv(0)});
  CHECK(t.sizes() == Shape{3, 2});
  CHECK(t.strides() == Shape{1, 3});
  CHECK(same_storage(t, x));
  CHECK(vals(t) == std::vector<double>{1, 4, 2, 5, 3, 6});
  check_error([&] { op(OpId::transpose, {tv(x), iv(0), iv(2)}); }, ErrorKind::IndexError,
              "transpose: dim 2 is out of range for a tensor of rank 2");
  // A 0-d tensor takes dims 0 and -1 as torch's, and stays itself.
  Tensor s0 = opt(OpId::transpose, {tv(ft({7}, {})), iv(0), iv(-1)});
  CHECK((s0.dim() == 0 && s0.item() == 7));
  check_error([&] { op(OpId::transpose, {tv(ft({7}, {})), iv(0), iv(1)}); }, ErrorKind::IndexError,
              "transpose: dim 1 is out of range for a tensor of rank 1");

  std::vector<float> v24;
  for (int i = 0; i < 24; ++i) v24.push_back(float(i));
  Tensor c = ft(v24, {2, 3, 4});
  Tensor p = opt(OpId::permute, {tv(c), iv(2), iv(0), iv(1)});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.item_as_double({3, 1, 2}) == 12 + 8 + 3);
  CHECK(opt(OpId::permute, {tv(c), tup({iv(-1), iv(1), iv(0)})}).sizes() == Shape{4, 3, 2});
  check_error([&] { op(OpId::permute, {tv(c), iv(0), iv(0), iv(1)}); }, ErrorKind::RuntimeError,
              "permute: dims [0, 0, 1] are not a permutation (dim 0 repeats)");
  check_error([&] { op(OpId::permute, {tv(c), iv(0), iv(1)}); }, ErrorKind::RuntimeError,
              "permute: dims [0, 1] do not match a tensor of rank 3");

  Tensor col = ft({1, 2}, {2, 1});
  Tensor e = opt(OpId::expand, {tv(col), iv(3), iv(-1), iv(4)});
  CHECK(e.sizes() == Shape{3, 2, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(same_storage(e, col));
  CHECK(vals(e) == std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2});
  CHECK(opt(OpId::expand, {tv(col), tup({iv(2), iv(1)})}).strides() == Shape{1, 1});
  check_error([&] { op(OpId::expand, {tv(x), iv(2), iv(4)}); }, ErrorKind::RuntimeError,
              "expand: the expanded size 4 must match the existing size 3 at non-singleton dimension 1; target shape "
              "[2, 4], input shape [2, 3]");
  check_error([&] { op(OpId::expand, {tv(x), iv(3)}); }, ErrorKind::RuntimeError,
              "expand: the number of sizes (1) must be at least the tensor's rank (2); target shape [3], input shape "
              "[2, 3]");
  check_error([&] { op(OpId::expand, {tv(col), iv(-1), iv(2), iv(2)}); }, ErrorKind::RuntimeError,
              "expand: the size -1 is not allowed for a new leading dimension; target shape [-1, 2, 2], input shape "
              "[2, 1]");
}

TEST_CASE("select, slice, unsqueeze, squeeze, flatten", "[ops]") {
  Tensor x = base23();
  Tensor s = opt(OpId::select, {tv(x), iv(1), iv(-1)});
  CHECK(s.sizes() == Shape{2});
  CHECK(vals(s) == std::vector<double>{3, 6});
  CHECK(same_storage(s, x));
  s.data<float>()[0] = 30;  // element [0, 2] of the base
  CHECK(x.item_as_double({0, 2}) == 30);
  check_error([&] { op(OpId::select, {tv(x), iv(0), iv(2)}); }, ErrorKind::IndexError,
              "select: index 2 is out of range for dimension 0 of size 2");
  check_error([&] { op(OpId::select, {tv(x), iv(0), iv(-3)}); }, ErrorKind::IndexError,
              "select: index -3 is out of range for dimension 0 of size 2");

  Tensor r = ft({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10});
  CHECK(vals(opt(OpId::slice, {tv(r), iv(0), iv(2), iv(8), iv(3)})) == std::vector<double>{2, 5});
  CHECK(vals(opt(OpId::slice, {tv(r)}, {{"start", iv(-3)}})) == std::vector<double>{7, 8, 9});
  CHECK(vals(opt(OpId::slice, {tv(r)}, {{"end", iv(-8)}})) == std::vector<double>{0, 1});
  CHECK(opt(OpId::slice, {tv(r), iv(0), iv(20), iv(30)}).sizes() == Shape{0});
  CHECK(opt(OpId::slice, {tv(r), iv(0), iv(5), iv(2)}).sizes() == Shape{0});
  CHECK(vals(opt(OpId::slice, {tv(r), iv(0), iv(-100), iv(100), iv(4)})) == std::vector<double>{0, 4, 8});
  Tensor sx = opt(OpId::slice, {tv(x), iv(1), iv(1)});
  CHECK(sx.sizes() == Shape{2, 2});
  CHECK(sx.offset() == 1);
  CHECK(vals(sx) == std::vector<double>{2, 30, 5, 6});
  check_error([&] { op(OpId::slice, {tv(r), iv(0), none, none, iv(-1)}); }, ErrorKind::ValueError,
              "slice: slice step must be positive, got -1");
  check_error([&] { op(OpId::slice, {tv(r), iv(0), none, none, iv(0)}); }, ErrorKind::ValueError,
              "slice: slice step must be positive, got 0");

  Tensor u = opt(OpId::unsqueeze, {tv(x), iv(1)});
  CHECK(u.sizes() == Shape{2, 1, 3});
  CHECK(u.is_contiguous());
  CHECK(opt(OpId::unsqueeze, {tv(x), iv(-1)}).sizes() == Shape{2, 3, 1});
  CHECK(opt(OpId::unsqueeze, {tv(Tensor::scalar(1, DType::Float32)), iv(0)}).sizes() == Shape{1});
  check_error([&] { op(OpId::unsqueeze, {tv(x), iv(3)}); }, ErrorKind::IndexError,
              "unsqueeze: dim 3 is out of range for inserting into a tensor of rank 2 (expected -3 to 2)");

  Tensor q = Tensor::empty({1, 2, 1, 3}, DType::Float32);
  CHECK(opt(OpId::squeeze, {tv(q)}).sizes() == Shape{2, 3});
  CHECK(opt(OpId::squeeze, {tv(q), iv(2)}).sizes() == Shape{1, 2, 3});
  CHECK(opt(OpId::squeeze, {tv(q), iv(1)}).sizes() == Shape{1, 2, 1, 3});  // not size 1: unchanged
  CHECK(opt(OpId::squeeze, {tv(q), tup({iv(0), iv(-2)})}).sizes() == Shape{2, 3});
  CHECK(same_storage(opt(OpId::squeeze, {tv(q)}), q));

  std::vector<float> v24;
  for (int i = 0; i < 24; ++i) v24.push_back(float(i));
  Tensor c = ft(v24, {2, 3, 4});
  Tensor f = opt(OpId::flatten, {tv(c)});
  CHECK(f.sizes() == Shape{24});
  CHECK(same_storage(f, c));
  CHECK(opt(OpId::flatten, {tv(c), iv(1)}).sizes() == Shape{2, 12});
  CHECK(opt(OpId::flatten, {tv(c), iv(0), iv(1)}).sizes() == Shape{6, 4});
  CHECK(opt(OpId::flatten, {tv(Tensor::scalar(2, DType::Float32))}).sizes() == Shape{1});
  Tensor pf = opt(OpId::flatten, {tv(opt(OpId::permute, {tv(c), iv(2), iv(0), iv(1)})), iv(1)});
  CHECK(pf.sizes() == Shape{4, 6});
  CHECK(same_storage(pf, c));  // dims 0 and 1 of the permuted tensor are still adjacent in memory
  CHECK(vals(pf)[7] == 5);
  Tensor pf2 = opt(OpId::flatten, {tv(opt(OpId::permute, {tv(c), iv(2), iv(0), iv(1)}))});
  CHECK(!same_storage(pf2, c));
  CHECK(vals(pf2)[1] == 4);
  check_error([&] { op(OpId::flatten, {tv(c), iv(2), iv(1)}); }, ErrorKind::RuntimeError,
              "flatten: start_dim 2 cannot come after end_dim 1");
}

TEST_CASE("views of views keep writing into the base", "[ops]") {
  Tensor x = Tensor::empty({4, 4}, DType::Int64);
  Tensor v = opt(OpId::select, {tv(opt(OpId::slice, {tv(opt(OpId::transpose, {tv(x), iv(0), iv(1)})), iv(0), iv(1),
                                                         iv(4), iv(2)})),
                                iv(1), iv(3)});
  // transpose -> rows 1 and 3 of x^T (columns 1, 3 of x) -> element 3 of each: x[3, 1], x[3, 3]
  REQUIRE(v.sizes() == Shape{2});
  v.data<int64_t>()[0] = 7;
  v.data<int64_t>()[v.strides()[0]] = 9;
  CHECK(x.item_as_double({3, 1}) == 7);
  CHECK(x.item_as_double({3, 3}) == 9);
  CHECK(opt(OpId::sum, {tv(x)}).item() == 16);
}

// ----- copies, cat, embedding --------------------------------------------------------------

TEST_CASE("contiguous, clone, to", "[ops]") {
  Tensor x = base23();
  CHECK(opt(OpId::contiguous, {tv(x)}).same(x));
  Tensor t = opt(OpId::transpose, {tv(x), iv(0), iv(1)});
  Tensor c = opt(OpId::contiguous, {tv(t)});
  CHECK(c.is_contiguous());
  CHECK(!same_storage(c, x));
  CHECK(vals(c) == std::vector<double>{1, 4, 2, 5, 3, 6});
  Tensor k = opt(OpId::clone, {tv(x)});
  CHECK(!same_storage(k, x));
  CHECK(vals(k) == vals(x));
  Tensor d = opt(OpId::to, {tv(t), sv("float64")});
  CHECK(d.dtype() == DType::Float64);
  CHECK(vals(d) == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(opt(OpId::to, {tv(x), sv("float32")}).same(x));
  CHECK(vals(opt(OpId::to, {tv(ft({-1.7f, 0, 2.9f}, {3})), sv("long")})) == std::vector<double>{-1, 0, 2});
  CHECK(vals(opt(OpId::to, {tv(ft({-1.7f, 0, 2.9f}, {3})), sv("bool")})) == std::vector<double>{1, 0, 1});
  check_error([&] { op(OpId::to, {tv(x), sv("float16")}); }, ErrorKind::TypeError,
              "to(): unknown dtype 'float16' (expected float32, float64, int64 or bool)");
  check_error([&] { op(OpId::to, {tv(x), iv(3)}); }, ErrorKind::TypeError,
              "to(): argument 'dtype' must be a dtype name, not int");
  CHECK(meta_of(OpId::to, {tv(Tensor::meta({2}, DType::Float32)), sv("int64")}).dtype() == DType::Int64);
}

TEST_CASE("cat", "[ops]") {
  Tensor a = base23();
  Tensor b = ft({7, 8, 9}, {1, 3});
  Tensor r = opt(OpId::cat, {lst({tv(a), tv(b)})});
  CHECK(r.sizes() == Shape{3, 3});
  CHECK(vals(r) == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor c = opt(OpId::cat, {tup({tv(a), tv(it({10, 20}, {2, 1}))}), iv(-1)});
  CHECK(c.sizes() == Shape{2, 4});
  CHECK(c.dtype() == DType::Float32);
  CHECK(vals(c) == std::vector<double>{1, 2, 3, 10, 4, 5, 6, 20});
  Tensor t = opt(OpId::transpose, {tv(a), iv(0), iv(1)});
  CHECK(vals(opt(OpId::cat, {lst({tv(t), tv(t)}), iv(1)})) == std::vector<double>{1, 4, 1, 4, 2, 5, 2, 5, 3, 6, 3, 6});
  CHECK(opt(OpId::cat, {lst({tv(a), tv(Tensor::empty({0, 3}, DType::Float64))})}).dtype() == DType::Float64);
  CHECK(opt(OpId::cat, {lst({tv(a)})}).sizes() == Shape{2, 3});
  check_error([&] { op(OpId::cat, {lst({tv(a), tv(ft({1, 2}, {1, 2}))})}); }, ErrorKind::RuntimeError,
              "cat: shapes [2, 3] and [1, 2] do not match outside dimension 0");
  check_error([&] { op(OpId::cat, {lst({tv(a), tv(ft({1, 2, 3}, {3}))})}); }, ErrorKind::RuntimeError,
              "cat: shapes [2, 3] and [3] do not match outside dimension 0");
  check_error([&] { op(OpId::cat, {lst({})}); }, ErrorKind::RuntimeError, "cat: expected a non-empty list of tensors");
  check_error([&] { op(OpId::cat, {lst({tv(a), iv(1)})}); }, ErrorKind::TypeError,
              "cat(): expected a tuple or list of Tensors, but element 1 is int");
  check_error([&] { op(OpId::cat, {tv(a)}); }, ErrorKind::TypeError,
              "cat(): argument 'tensors' must be a tuple or list of Tensors, not Tensor");
  check_error([&] { op(OpId::cat, {lst({tv(a), tv(a)}), iv(2)}); }, ErrorKind::IndexError,
              "cat: dim 2 is out of range for a tensor of rank 2");
}

TEST_CASE("embedding", "[ops]") {
  Tensor w = ft({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  Tensor idx = it({3, 0, 1, 3}, {2, 2});
  Tensor e = opt(OpId::embedding, {tv(idx), tv(w)});
  CHECK(e.sizes() == Shape{2, 2, 2});
  CHECK(vals(e) == std::vector<double>{30, 31, 0, 1, 10, 11, 30, 31});
  CHECK(opt(OpId::embedding, {tv(Tensor::scalar(2, DType::Int64)), tv(w)}).sizes() == Shape{2});
  Tensor wt = opt(OpId::transpose, {tv(ft({0, 10, 20, 30, 1, 11, 21, 31}, {2, 4})), iv(0), iv(1)});
  CHECK(vals(opt(OpId::embedding, {tv(it({2}, {1})), tv(wt)})) == std::vector<double>{20, 21});
  check_error([&] { op(OpId::embedding, {tv(it({4}, {1})), tv(w)}); }, ErrorKind::IndexError,
              "embedding: index 4 is out of range for a table of size 4");
  check_error([&] { op(OpId::embedding, {tv(it({-1}, {1})), tv(w)}); }, ErrorKind::IndexError,
              "embedding: index -1 is out of range for a table of size 4");
  check_error([&] { op(OpId::embedding, {tv(ft({1}, {1})), tv(w)}); }, ErrorKind::TypeError,
              "embedding(): argument 'input' must be an int64 tensor, got float32");
  check_error([&] { op(OpId::embedding, {tv(it({1}, {1})), tv(ft({1}, {1}))}); }, ErrorKind::RuntimeError,
              "embedding: weight must be 2-D, got shape [1]");
}

// ----- constructors ------------------------------------------------------------------------

TEST_CASE("zeros, ones, full", "[ops]") {
  Tensor z = opt(OpId::zeros, {iv(2), iv(3)});
  CHECK(z.dtype() == DType::Float32);
  CHECK(vals(z) == std::vector<double>(6, 0.0));
  Tensor o = opt(OpId::ones, {tup({iv(2)})}, {{"dtype", sv("int64")}});
  CHECK(o.dtype() == DType::Int64);
  CHECK(vals(o) == std::vector<double>{1, 1});
  CHECK(vals(opt(OpId::ones, {iv(2)}, {{"dtype", sv("bool")}})) == std::vector<double>{1, 1});
  check_error([] { op(OpId::zeros, {iv(2), iv(-1)}); }, ErrorKind::RuntimeError,
              "zeros: negative dimension -1 in size [2, -1]");
  check_error([] { op(OpId::ones, {iv(2)}, {{"dtype", sv("half")}}); }, ErrorKind::TypeError,
              "ones(): unknown dtype 'half' (expected float32, float64, int64 or bool)");

  Tensor f = opt(OpId::full, {tup({iv(2)}), iv(3)});
  CHECK(f.dtype() == DType::Int64);
  CHECK(vals(f) == std::vector<double>{3, 3});
  CHECK(opt(OpId::full, {tup({iv(2)}), bv(true)}).dtype() == DType::Bool);
  CHECK(opt(OpId::full, {tup({iv(2)}), fv(0.5)}).dtype() == DType::Float32);
  Tensor fd = opt(OpId::full, {lst({iv(1), iv(2)}), iv(3)}, {{"dtype", sv("float64")}});
  CHECK(fd.dtype() == DType::Float64);
  CHECK(fd.sizes() == Shape{1, 2});
  Tensor big = opt(OpId::full, {iv(1), iv((int64_t(1) << 62) + 1)});
  CHECK(big.data<int64_t>()[0] == (int64_t(1) << 62) + 1);  // exact, not through double
  check_error([] { op(OpId::full, {iv(2), sv("x")}); }, ErrorKind::TypeError,
              "full(): argument 'fill_value' must be a number, not str");
}

TEST_CASE("arange", "[ops]") {
  Tensor a = opt(OpId::arange, {iv(5)});
  CHECK(a.dtype() == DType::Int64);
  CHECK(vals(a) == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(vals(opt(OpId::arange, {iv(2), iv(11), iv(3)})) == std::vector<double>{2, 5, 8});
  CHECK(vals(opt(OpId::arange, {iv(5), iv(0), iv(-2)})) == std::vector<double>{5, 3, 1});
  CHECK(opt(OpId::arange, {iv(3), iv(3)}).sizes() == Shape{0});
  Tensor f = opt(OpId::arange, {fv(0.0), iv(1), fv(0.25)});
  CHECK(f.dtype() == DType::Float32);
  CHECK(vals(f) == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(opt(OpId::arange, {fv(0.0), fv(1.0), fv(0.3)}).sizes() == Shape{4});  // ceil(1 / 0.3)
  CHECK(opt(OpId::arange, {iv(4)}, {{"dtype", sv("float64")}}).dtype() == DType::Float64);
  CHECK(opt(OpId::arange, {fv(2.5)}).sizes() == Shape{3});
  check_error([] { op(OpId::arange, {iv(0), iv(5), iv(0)}); }, ErrorKind::RuntimeError,
              "arange: step must be nonzero (start 0, end 5, step 0)");
  check_error([] { op(OpId::arange, {iv(0), iv(5), iv(-1)}); }, ErrorKind::RuntimeError,
              "arange: the end is not reachable with this step (start 0, end 5, step -1)");
  check_error([] { op(OpId::arange, {fv(0.0), fv(INFINITY)}); }, ErrorKind::RuntimeError,
              "arange: bounds must be finite (start 0, end inf, step 1)");
  check_error([] { op(OpId::arange, {sv("3")}); }, ErrorKind::TypeError,
              "arange(): argument 'start' must be a number, not str");
  Tensor m = meta_of(OpId::arange, {iv(1), iv(10), iv(4)});
  CHECK(m.sizes() == Shape{3});
  CHECK(m.dtype() == DType::Int64);
}

// ----- the seeded generator -------------------------------------------------------------------

TEST_CASE("rand and randn are reproducible from the seed", "[ops]") {
  manual_seed(0);
  Tensor a = opt(OpId::rand, {iv(5)});
  Tensor b = opt(OpId::rand, {iv(5)});
  CHECK(bits(a) != bits(b));  // the stream advances
  manual_seed(0);
  CHECK(bits(opt(OpId::rand, {iv(5)})) == bits(a));
  CHECK(bits(opt(OpId::rand, {iv(5)})) == bits(b));
  manual_seed(1);
  CHECK(bits(opt(OpId::rand, {iv(5)})) != bits(a));

  // Pinned values: a change to the generator is a change to every seeded
  // program's output, so it must be deliberate.
  manual_seed(0);
  const std::vector<uint32_t> golden = {0x3ecc4fd0u, 0x3f6169c5u, 0x3f3c57acu, 0x3f1b00dbu};
  CHECK(bits(opt(OpId::rand, {iv(4)})) == golden);
  manual_seed(0);
  CHECK(bits(opt(OpId::randn, {iv(4)})) == std::vector<uint32_t>{0xbf24b921u, 0x3fc04d99u, 0x3fa8a927u, 0x3ef5a33eu});
  manual_seed(0);
  CHECK(vals(opt(OpId::rand, {iv(2)}, {{"dtype", sv("float64")}})) ==
        std::vector<double>{0x1.989fa370b4e2cp-2, 0x1.78af58a6c036fp-1});

  manual_seed(42);
  Tensor n1 = opt(OpId::randn, {iv(7)});
  manual_seed(42);
  Tensor n2 = opt(OpId::randn, {iv(7)});
  CHECK(bits(n1) == bits(n2));

  // float64 uses 53 bits per number; values in [0, 1).
  manual_seed(3);
  Tensor d = opt(OpId::rand, {iv(1000)}, {{"dtype", sv("float64")}});
  CHECK(d.dtype() == DType::Float64);
  for (double v : vals(d)) REQUIRE((v >= 0 && v < 1));
  check_error([] { op(OpId::rand, {iv(2)}, {{"dtype", sv("int64")}}); }, ErrorKind::NotImplementedError,
              "rand(): only floating point dtypes are supported, got int64");
}

TEST_CASE("rand and randn have the right distribution", "[ops]") {
  manual_seed(123);
  const std::vector<double> u = vals(opt(OpId::rand, {iv(100), iv(100)}));
  double mean = 0;
  for (double v : u) {
    REQUIRE((v >= 0 && v < 1));
    mean += v;
  }
  mean /= double(u.size());
  CHECK(std::abs(mean - 0.5) < 0.01);
  const std::vector<double> n = vals(opt(OpId::randn, {iv(20001)}, {{"dtype", sv("float64")}}));
  double m = 0, sq = 0;
  for (double v : n) m += v;
  m /= double(n.size());
  for (double v : n) sq += (v - m) * (v - m);
  const double sd = std::sqrt(sq / double(n.size()));
  CHECK(std::abs(m) < 0.03);
  CHECK(std::abs(sd - 1) < 0.03);
}

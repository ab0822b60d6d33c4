// Tensor subscripting in the runtime (runtime/tensor/tensor_index.cpp): advanced
// indexing (int tensors, lists, bool masks, Python bools), its placement
// rule, Ellipsis, in-place assignment, the `index` / `setitem` ops and their
// shape rules. Generated cases are checked against compositions of select,
// which the basic-indexing tests pin down.
#include <catch2/catch.hpp>

#include "ops_test_util.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/tensor_index.h"

using namespace kiln;
using namespace kiln::test;
using runtime::make_slice;
using runtime::tensor_getitem;
using runtime::tensor_setitem;

namespace {
const Value none = Value::none();
Value all() { return make_slice(none, none, none); }
Tensor grid(int64_t a, int64_t b) {  // x[i, j] = 10 * i + j
  std::vector<float> v;
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) v.push_back(float(10 * i + j));
  return ft(v, {a, b});
}
Tensor get(const Tensor& t, const Value& key) { return tensor_getitem(t, key).as_tensor(); }
double at(const Tensor& t, int64_t i, int64_t j) { return get(t, tup({iv(i), iv(j)})).item(); }
int64_t wrap(int64_t i, int64_t n) { return i < 0 ? i + n : i; }
}  // namespace

TEST_CASE("integer-tensor indices gather rows, columns and points", "[index]") {
  const Tensor x = grid(3, 4);
  int cases = 0;
  for (int64_t a = -3; a < 3; ++a)
    for (int64_t b = -3; b < 3; ++b) {
      const Tensor rows = get(x, tv(it({a, b}, {2})));
      REQUIRE(rows.sizes() == Shape{2, 4});
      CHECK(vals(rows) ==
            vals(opt(OpId::cat, {tup({tv(get(x, tup({none, iv(a)}))), tv(get(x, tup({none, iv(b)})))})})));
      const Tensor cols = get(x, tup({all(), lst({iv(b), iv(a)})}));  // a list is an index too
      REQUIRE(cols.sizes() == Shape{3, 2});
      for (int64_t i = 0; i < 3; ++i) {
        CHECK(at(cols, i, 0) == at(x, i, b));
        CHECK(at(cols, i, 1) == at(x, i, a));
      }
      const Tensor pts = get(x, tup({tv(it({a, b}, {2})), tv(it({b + 1, a + 1}, {2}))}));
      REQUIRE(pts.sizes() == Shape{2});
      CHECK(vals(pts) == std::vector<double>{10.0 * wrap(a, 3) + wrap(b + 1, 4), 10.0 * wrap(b, 3) + wrap(a + 1, 4)});
      CHECK_FALSE(pts.impl()->storage.get() == x.impl()->storage.get());  // a copy
      ++cases;
    }
  CHECK(cases == 36);
}

TEST_CASE("bool masks select the true positions, every mask of a row", "[index]") {
  const Tensor x = grid(3, 4);
  for (int m = 0; m < 16; ++m) {
    std::vector<bool> bits;
    std::vector<double> want_cols;
    for (int j = 0; j < 4; ++j) {
      bits.push_back((m >> j) & 1);
      if ((m >> j) & 1) want_cols.push_back(j);
    }
    const Tensor cols = get(x, tup({all(), tv(bt(bits, {4}))}));
    REQUIRE(cols.sizes() == Shape{3, int64_t(want_cols.size())});
    for (int64_t i = 0; i < 3; ++i)
      for (size_t k = 0; k < want_cols.size(); ++k) CHECK(at(cols, i, int64_t(k)) == 10.0 * i + want_cols[k]);
    // The same mask as a list of Python bools.
    std::vector<Value> lb;
    for (bool b : bits) lb.push_back(bv(b));
    CHECK(vals(get(x, tup({all(), lst(lb)}))) == vals(cols));
  }
  // A 2-d mask over both dims flattens them.
  const Tensor m2 = get(x, tv(bt({true, false, false, true, false, true, false, false, false, false, false, true}, {3, 4})));
  CHECK(vals(m2) == std::vector<double>{0, 3, 11, 23});
}

TEST_CASE("advanced dims go in place when adjacent, first otherwise (torch's rule)", "[index]") {
  Tensor x = runtime::call_op(OpId::zeros, {iv(2), iv(3), iv(4), iv(5)}).as_tensor();
  const Value i2 = tv(it({0, 1}, {2}));
  CHECK(get(x, tup({all(), i2, i2})).sizes() == Shape{2, 2, 5});      // adjacent: in place
  CHECK(get(x, tup({i2, all(), i2})).sizes() == Shape{2, 3, 5});      // split by a slice: first
  CHECK(get(x, tup({iv(0), all(), i2})).sizes() == Shape{3, 2, 5});   // ints select first (torch, not NumPy)
  CHECK(get(x, tup({all(), tv(it({0, 1, 2, 0, 1, 2}, {2, 3}))})).sizes() == Shape{2, 2, 3, 4, 5});
  CHECK(get(x, tup({runtime::ellipsis(), i2})).sizes() == Shape{2, 3, 4, 2});
  CHECK(get(x, tup({i2, none, i2})).sizes() == Shape{2, 1, 4, 5});
  CHECK(get(x, bv(true)).sizes() == Shape{1, 2, 3, 4, 5});
  CHECK(get(x, bv(false)).sizes() == Shape{0, 2, 3, 4, 5});
  CHECK(get(x, tup({iv(0), bv(true)})).sizes() == Shape{1, 3, 4, 5});
}

TEST_CASE("Ellipsis expands to the dims other parts leave", "[index]") {
  const Tensor x = grid(3, 4);
  CHECK(vals(get(x, tup({runtime::ellipsis(), iv(1)}))) == std::vector<double>{1, 11, 21});
  CHECK(vals(get(x, tup({iv(2), runtime::ellipsis()}))) == std::vector<double>{20, 21, 22, 23});
  CHECK(get(x, runtime::ellipsis()).sizes() == Shape{3, 4});
  CHECK(get(x, tup({runtime::ellipsis(), none})).sizes() == Shape{3, 4, 1});
  CHECK(runtime::repr(runtime::ellipsis()) == "Ellipsis");
  CHECK(get(x, tup({runtime::ellipsis(), iv(1)})).impl()->storage.get() == x.impl()->storage.get());  // a view
}

TEST_CASE("indexing errors carry torch's types and words", "[index]") {
  const Tensor x = grid(3, 4);
  check_error([&] { get(x, tup({iv(0), iv(-5)})); }, ErrorKind::IndexError,
              "index -5 is out of bounds for dimension 1 with size 4");
  check_error([&] { get(x, tv(it({3}, {1}))); }, ErrorKind::IndexError,
              "index 3 is out of bounds for dimension 0 with size 3");
  check_error([&] { get(x, tv(ft({0}, {1}))); }, ErrorKind::IndexError,
              "tensors used as indices must be long, int, byte or bool tensors");
  check_error([&] { get(x, tv(bt({true, false}, {2}))); }, ErrorKind::IndexError,
              "The shape of the mask [2] at index 0 does not match the shape of the indexed tensor [3, 4] at index 0");
  check_error([&] { get(x, tup({tv(it({0, 1}, {2})), tv(it({0, 1, 2}, {3}))})); }, ErrorKind::IndexError,
              "shape mismatch: indexing tensors could not be broadcast together with shapes [2], [3]");
  check_error([&] { get(x, fv(1.0)); }, ErrorKind::IndexError,
              "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices (got "
              "float)");
  check_error([&] { get(x, tup({all(), all(), iv(0)})); }, ErrorKind::IndexError,
              "too many indices for tensor of dimension 2");
}

TEST_CASE("assignment through advanced indices is index_put", "[index]") {
  Tensor x = grid(3, 4);
  tensor_setitem(x, tv(it({0, 2}, {2})), fv(-1));
  CHECK(vals(get(x, iv(0))) == std::vector<double>{-1, -1, -1, -1});
  CHECK(vals(get(x, iv(2))) == std::vector<double>{-1, -1, -1, -1});
  tensor_setitem(x, tup({all(), lst({iv(1), iv(3)})}), tv(ft({7, 8}, {2})));  // broadcast over rows
  CHECK(vals(get(x, iv(1))) == std::vector<double>{10, 7, 12, 8});
  Tensor m = grid(3, 4);
  tensor_setitem(m, tv(runtime::call_op(OpId::gt, {tv(m), iv(15)}).as_tensor()), fv(0.5));
  CHECK(vals(m) == std::vector<double>{0, 1, 2, 3, 10, 11, 12, 13, 0.5, 0.5, 0.5, 0.5});
  Tensor i = it({0, 0, 0, 0, 0, 0}, {3, 2});
  tensor_setitem(i, tup({all(), iv(0)}), tv(it({4, 5, 6}, {3})));
  CHECK(vals(i) == std::vector<double>{4, 0, 5, 0, 6, 0});
  // One mask and a one-element value: masked_fill with its item, any dtype (torch).
  Tensor d = dt({1, 2, 3}, {3});
  tensor_setitem(d, tv(bt({true, false, true}, {3})), tv(ft({9}, {1})));
  CHECK(vals(d) == std::vector<double>{9, 2, 9});
  check_error([&] { tensor_setitem(x, tv(it({0}, {1})), tv(dt({1, 2, 3, 4}, {4}))); }, ErrorKind::RuntimeError,
              "Index put requires the source and destination dtypes match, got Float for the destination and Double "
              "for the source.");
  check_error([&] { tensor_setitem(x, tv(it({0, 1}, {2})), tv(ft({1, 2, 3}, {3}))); }, ErrorKind::RuntimeError,
              "shape mismatch: value tensor of shape [3] cannot be broadcast to indexing result of shape [2, 4]");
}

TEST_CASE("the index and setitem ops: eager kernels and shape rules", "[index][ops]") {
  const Tensor x = grid(3, 4);
  const Tensor r = opt(OpId::index, {tv(x), tup({none, tv(it({3, 0}, {2}))})});
  CHECK(vals(r) == std::vector<double>{3, 0, 13, 10, 23, 20});
  CHECK(meta_of(OpId::index, {tv(Tensor::meta({3, 4}, DType::Float32)), tup({tv(Tensor::meta({5}, DType::Int64))})})
            .sizes() == Shape{5, 4});
  // setitem is functional: the input is unchanged.
  const Tensor y = opt(OpId::setitem, {tv(x), tup({all(), iv(-1)}), fv(1)});
  CHECK(vals(get(y, tup({all(), iv(-1)}))) == std::vector<double>{1, 1, 1});
  CHECK(at(x, 0, 3) == 3);
  const Tensor mk = Tensor::meta({3, 4}, DType::Float32);
  CHECK(meta_of(OpId::setitem, {tv(mk), tup({tv(Tensor::meta({3, 4}, DType::Bool))}), fv(0.5)}).sizes() == Shape{3, 4});
  CHECK_THROWS(meta_of(OpId::setitem, {tv(mk), iv(0), tv(Tensor::meta({5}, DType::Float32))}));
  CHECK_THROWS(meta_of(OpId::index, {tv(mk), tup({tv(Tensor::meta({3, 4}, DType::Bool))})}));  // data-dependent
}

TEST_CASE("normalize_index: what the tracer lowers", "[index]") {
  using K = runtime::IndexPart::K;
  auto kinds = [](const std::vector<runtime::IndexPart>& ps) {
    std::vector<K> out;
    for (const auto& p : ps) out.push_back(p.k);
    return out;
  };
  CHECK(kinds(runtime::normalize_index(3, tup({runtime::ellipsis(), iv(0)}))) == std::vector<K>{K::Slice, K::Slice, K::Int});
  CHECK(kinds(runtime::normalize_index(2, lst({iv(0), iv(1)}))) == std::vector<K>{K::Tensor});       // an index list
  CHECK(kinds(runtime::normalize_index(2, lst({iv(0), all()}))) == std::vector<K>{K::Int, K::Slice}); // torch: a tuple
  CHECK(kinds(runtime::normalize_index(2, bv(true))) == std::vector<K>{K::None, K::Tensor});
  CHECK(runtime::normalize_index(2, tup({tv(Tensor::scalar(1, DType::Int64))}))[0].k == K::Int);  // 0-d selects
}

// codegen's symbolic Dims (codegen/symbolic_dims.h): polynomials split into
// a monomial and a derived symbol, and torch's view strides over Dims.
#include <catch2/catch.hpp>
#include <random>

#include "codegen/symbolic_dims.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/value/tensor.h"

using namespace kiln;
using codegen::Dim;
using codegen::Dims;
using output_graph::SymExpr;

namespace {
SymExpr S(int i) { return SymExpr::symbol(i); }
SymExpr C(int64_t v) { return SymExpr::constant(v); }
}  // namespace

TEST_CASE("a polynomial's content is the monomial dividing every term", "[symbolic_shapes]") {
  CHECK((S(0) * S(1) - S(0)).content() == S(0));
  CHECK((C(6) * S(0) * S(0) * S(1) + C(4) * S(0) * S(0)).content() == C(2) * S(0) * S(0));
  CHECK((S(0) + S(1)).content() == C(1));
  CHECK((C(-4) * S(2) - C(6)).content() == C(2));
  CHECK(SymExpr().content() == C(1));
  CHECK(SymExpr::floordiv(S(0), C(3)).content() == C(1));  // an opaque term is not a symbol
  auto m = (C(3) * S(2) * S(0)).as_monomial();
  REQUIRE(m);
  CHECK(m->coef == 3);
  CHECK(m->syms == std::vector<int>{0, 2});
  CHECK(!(S(0) + C(1)).as_monomial());
  CHECK(!SymExpr::max(S(0), C(4)).as_monomial());
}

TEST_CASE("SymDims: monomials stay Dims, the rest of a polynomial is one derived symbol", "[codegen]") {
  codegen::Program p;
  p.syms.resize(2);  // s0, s1: the graph's symbols
  codegen::SymDims sd(p);
  CHECK(sd.of(C(7)) == Dim::c(7));
  CHECK(sd.of(C(4) * S(1) * S(0)) == (Dim{4, {0, 1}}));
  // s0*s1 - s0 == s0 * (s1 - 1): the rest is symbol 2, evaluated per call.
  const Dim d = sd.of(S(0) * S(1) - S(0));
  REQUIRE(p.syms.size() == 3);
  CHECK(p.syms[2].from == codegen::SymSource::From::Expr);
  CHECK(p.syms[2].expr == S(1) - C(1));
  CHECK(d == (Dim{1, {0, 2}}));
  // The same rest is the same symbol, so equal polynomials are equal Dims.
  CHECK(sd.of(C(3) * S(1) - C(3)) == (Dim{3, {2}}));
  CHECK(p.syms.size() == 3);
  // Sums expand derived symbols: (s1 - 1)*8 + 8 == 8*s1, a monomial again.
  CHECK(sd.add(Dim{8, {2}}, Dim::c(8)) == (Dim{8, {1}}));
  CHECK(sd.expr(Dim{2, {0, 2}}) == C(2) * S(0) * S(1) - C(2) * S(0));
}

TEST_CASE("view strides over Dims agree with the eager rule on static layouts", "[codegen]") {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return int64_t(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  int viewable = 0, not_viewable = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    // A random layout: a permuted, possibly sliced contiguous tensor.
    const size_t r = size_t(pick(1, 4));
    runtime::Shape sizes(r);
    for (auto& s : sizes) s = pick(1, 4);
    runtime::Tensor t = runtime::Tensor::meta(sizes, runtime::DType::Float32);
    if (r >= 2 && pick(0, 1)) t = runtime::meta_view(t.dtype(), {t.sizes()[1], t.sizes()[0]}, {t.strides()[1], t.strides()[0]}, 0);
    if (r >= 2 && t.dim() == 2 && pick(0, 1) && t.sizes()[1] > 1)
      t = runtime::meta_view(t.dtype(), {t.sizes()[0], t.sizes()[1] - 1}, t.strides(), 0);
    // A target shape of the same numel.
    int64_t numel = t.numel();
    runtime::Shape target;
    while (numel > 1) {
      int64_t f = 2;
      while (numel % f) ++f;
      if (pick(0, 1) && !target.empty()) target.back() *= f;
      else target.push_back(f);
      numel /= f;
      if (pick(0, 3) == 0) target.push_back(1);
    }
    Dims os, ost, ts;
    for (int64_t s : t.sizes()) os.push_back(Dim::c(s));
    for (int64_t s : t.strides()) ost.push_back(Dim::c(s));
    for (int64_t s : target) ts.push_back(Dim::c(s));
    auto want = runtime::view_strides(t, target);
    auto got = codegen::view_strides(os, ost, ts);
    INFO("sizes " << runtime::shape_str(t.sizes()) << " strides " << runtime::shape_str(t.strides()) << " -> "
                  << runtime::shape_str(target));
    REQUIRE(bool(want) == bool(got));
    if (!want) {
      ++not_viewable;
      continue;
    }
    ++viewable;
    for (size_t i = 0; i < target.size(); ++i)
      if (target[i] != 1) CHECK((*got)[i] == Dim::c((*want)[i]));
  }
  CHECK(viewable > 500);
  CHECK(not_viewable > 50);
}

TEST_CASE("view strides over symbolic Dims: split, merge, and what needs a copy", "[codegen]") {
  const Dim s0 = Dim::sym(0), s1 = Dim::sym(1);
  // [s0, s1, 8] contiguous -> [s0, s1, 2, 4]
  auto a = codegen::view_strides({s0, s1, Dim::c(8)}, {s1 * Dim::c(8), Dim::c(8), Dim::c(1)},
                                 {s0, s1, Dim::c(2), Dim::c(4)});
  REQUIRE(a);
  CHECK(*a == (Dims{s1 * Dim::c(8), Dim::c(8), Dim::c(4), Dim::c(1)}));
  // a slice along dim 1 of a [s0, 12, 8] buffer, last dim split: rows keep their stride
  auto b = codegen::view_strides({s0, s1, Dim::c(8)}, {Dim::c(96), Dim::c(8), Dim::c(1)},
                                 {s0, s1, Dim::c(2), Dim::c(4)});
  REQUIRE(b);
  CHECK((*b)[0] == Dim::c(96));
  // merging [s0, s1] of a contiguous tensor
  auto c = codegen::view_strides({s0, s1, Dim::c(8)}, {s1 * Dim::c(8), Dim::c(8), Dim::c(1)}, {s0 * s1, Dim::c(8)});
  REQUIRE(c);
  CHECK(*c == (Dims{Dim::c(8), Dim::c(1)}));
  // merging across a transposed pair cannot be a view
  CHECK(!codegen::view_strides({s0, s1}, {Dim::c(1), s0}, {s0 * s1}));
}

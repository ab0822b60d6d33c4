// Symbolic sizes (output_graph/symbolic_shapes.h): the canonical form, Python's
// integer semantics, and the guards a ShapeEnv records.
#include <catch2/catch.hpp>

#include <functional>
#include <random>

#include "output_graph/symbolic_shapes.h"
#include "runtime/base/error.h"

using namespace kiln;
using output_graph::Rel;
using output_graph::ShapeEnv;
using output_graph::SymExpr;

namespace {
SymExpr c(int64_t v) { return SymExpr::constant(v); }
SymExpr s(int id) { return SymExpr::symbol(id); }
}  // namespace

TEST_CASE("symbolic sizes: one canonical form per polynomial", "[symbolic_shapes]") {
  CHECK((s(0) + c(1)) * (s(0) - c(1)) == s(0) * s(0) - c(1));
  CHECK(s(0) + s(1) == s(1) + s(0));
  CHECK(s(0) * s(1) * c(2) == c(2) * s(1) * s(0));
  CHECK(s(0) - s(0) == c(0));
  CHECK((s(0) - s(0)).is_constant());
  CHECK(s(0) * c(4) - s(0) * c(3) == s(0));
  CHECK((s(0) * c(4) - s(0) * c(3)).as_symbol() == 0);
  CHECK(!(s(0) * c(2)).as_symbol());
  CHECK(s(0) != s(1));
  CHECK(s(2) * s(10) == s(10) * s(2));  // ids order numerically, not as text
  CHECK(SymExpr::max(s(0), s(1)) == SymExpr::max(s(1), s(0)));
}

TEST_CASE("symbolic sizes print as Python would write them", "[symbolic_shapes]") {
  CHECK(c(0).str() == "0");
  CHECK(c(-3).str() == "-3");
  CHECK(s(0).str() == "s0");
  CHECK((s(0) * s(1) + c(2) * s(0) - c(1)).str() == "2*s0 + s0*s1 - 1");
  CHECK((c(1) - s(0)).str() == "-s0 + 1");
  CHECK(SymExpr::floordiv(s(0) + c(1), c(2)).str() == "(s0 + 1)//2");
  CHECK(SymExpr::floordiv(s(0), c(2)).str() == "s0//2");
  CHECK(SymExpr::mod(s(1), c(3)).str() == "s1%3");
  CHECK(SymExpr::max(s(0), c(4)).str() == "max(4, s0)");
  CHECK(SymExpr::min(s(0), s(1)).str() == "min(s0, s1)");
}

TEST_CASE("symbolic sizes simplify what every size >= 2 decides", "[symbolic_shapes]") {
  CHECK(SymExpr::floordiv(c(4) * s(0) + c(2), c(2)) == c(2) * s(0) + c(1));
  CHECK(SymExpr::floordiv(s(0), c(1)) == s(0));
  CHECK(SymExpr::floordiv(s(0) * s(1), s(0) * s(1)) == c(1));
  CHECK(SymExpr::mod(c(6) * s(0), c(3)) == c(0));
  CHECK(SymExpr::max(s(0), c(1)) == s(0));      // s0 >= 2 > 1
  CHECK(SymExpr::min(s(0), c(2)) == c(2));
  CHECK(SymExpr::max(s(0) + c(1), s(0)) == s(0) + c(1));
  CHECK(SymExpr::min(s(0) * s(1), s(0)) == s(0));  // s0*s1 - s0 >= 2 at s = 2
  CHECK_FALSE(SymExpr::max(s(0), c(3)).is_constant());
  CHECK(c(7) == SymExpr::floordiv(c(15), c(2)));
  CHECK_THROWS_AS(SymExpr::floordiv(s(0), c(0)), kiln::Error);
}

// Every expression built from random operations evaluates, at random
// sizes, to what the same operations give on those sizes directly (Python's
// floor division and modulo, negative values included), and never leaves
// the bounds the form claims for every size >= 2.
TEST_CASE("symbolic sizes evaluate as the integers they stand for, within their bounds", "[symbolic_shapes]") {
  std::mt19937_64 rng(7);
  auto pydiv = [](int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  };
  auto pymod = [&](int64_t a, int64_t b) { return a - pydiv(a, b) * b; };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int64_t> values{int64_t(2 + rng() % 50), int64_t(2 + rng() % 50), int64_t(2 + rng() % 50)};
    SymExpr e = s(int(rng() % 3));
    int64_t v = values[0];
    // start from the symbol chosen
    v = e.evaluate(values);
    for (int step = 0; step < 6; ++step) {
      SymExpr o;
      int64_t ov;
      if (rng() % 2) {
        int id = int(rng() % 3);
        o = s(id);
        ov = values[size_t(id)];
      } else {
        ov = int64_t(rng() % 9) - 4;
        o = c(ov);
      }
      switch (rng() % 7) {
        case 0: e = e + o; v += ov; break;
        case 1: e = e - o; v -= ov; break;
        case 2: e = e * o; v *= ov; break;
        case 3:
          if (ov == 0) break;
          e = SymExpr::floordiv(e, o); v = pydiv(v, ov); break;
        case 4:
          if (ov == 0) break;
          e = SymExpr::mod(e, o); v = pymod(v, ov); break;
        case 5: e = SymExpr::max(e, o); v = std::max(v, ov); break;
        case 6: e = SymExpr::min(e, o); v = std::min(v, ov); break;
      }
      if (std::abs(v) > (int64_t(1) << 40)) break;
      INFO(e.str());
      REQUIRE(e.evaluate(values) == v);
      // The bounds hold at every size >= 2, these included.
      if (auto lo = e.lower_bound()) REQUIRE(v >= *lo);
      if (auto hi = e.upper_bound()) REQUIRE(v <= *hi);
    }
  }
}

TEST_CASE("a ShapeEnv guards relations, not values, and skips what always holds", "[symbolic_shapes]") {
  ShapeEnv env;
  SymExpr T = env.create_symbol(64, "L['x'].size()[1]");
  SymExpr B = env.create_symbol(4, "L['x'].size()[0]");
  CHECK(env.hint(B * T) == 256);
  CHECK(env.evaluate_relation(T, Rel::LE, c(128)));
  CHECK(!env.evaluate_relation(T, Rel::GT, c(128)));  // the same relation, negated: one guard
  CHECK(env.evaluate_relation(T, Rel::GE, c(1)));      // every symbol is >= 2
  CHECK(env.evaluate_relation(B * T, Rel::GT, B));     // B*T - B >= 2 at B = T = 2
  CHECK(env.evaluate_relation(T, Rel::NE, c(0)));
  REQUIRE(env.guards().size() == 1);
  CHECK(env.guards()[0].str() == "s0 <= 128");
  CHECK(env.check({100, 3}));
  std::string failed;
  CHECK(!env.check({129, 3}, &failed));
  CHECK(failed == "s0 <= 128");

  CHECK(env.specialize(B, "a list length") == 4);
  CHECK(env.specializations().back() == "s1 == 4 (a list length)");
  CHECK(env.check({100, 4}));
  CHECK(!env.check({100, 5}));

  CHECK(!env.evaluate_relation(T, Rel::EQ, B));  // 64 != 4: guarded as s0 != s1
  CHECK(env.guards().back().str() == "s0 != s1");
  CHECK_THROWS_AS(env.create_symbol(1, "L['y'].size()[0]"), kiln::Error);  // 0 and 1 specialize
}

TEST_CASE("the bounds of random polynomials hold at every size >= 2 tried", "[symbolic_shapes]") {
  std::mt19937_64 rng(11);
  int bounded = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    SymExpr e;
    for (int t = 0; t < 4; ++t) {
      SymExpr m = c(int64_t(rng() % 7) - 3);
      for (int k = int(rng() % 3); k > 0; --k) m = m * s(int(rng() % 2));
      e = e + m;
    }
    auto lo = e.lower_bound(), hi = e.upper_bound();
    bounded += lo || hi;
    for (int64_t a = 2; a < 9; ++a)
      for (int64_t b = 2; b < 9; ++b) {
        INFO(e.str() << " at s0=" << a << " s1=" << b);
        if (lo) REQUIRE(e.evaluate({a, b}) >= *lo);
        if (hi) REQUIRE(e.evaluate({a, b}) <= *hi);
      }
  }
  CHECK(bounded > 1000);  // the bounds are not vacuous
}

namespace {
// Evaluates what SymExpr::emit hands out on a stack, with Python's integer
// operators: what the residual's bytecode computes.
class StackMachine final : public output_graph::SymEmitter {
 public:
  explicit StackMachine(std::vector<int64_t> values) : values_(std::move(values)) {}
  void symbol(int id) override { stack_.push_back(values_.at(size_t(id))); }
  void constant(int64_t v) override { stack_.push_back(v); }
  void binary(Op op) override {
    REQUIRE(stack_.size() >= 2);
    const int64_t b = stack_.back();
    stack_.pop_back();
    const int64_t a = stack_.back();
    int64_t r = 0;
    switch (op) {
      case Op::Add: r = a + b; break;
      case Op::Mul: r = a * b; break;
      case Op::FloorDiv: r = a / b - ((a % b != 0) && ((a < 0) != (b < 0))); break;
      case Op::Mod: r = a - b * (a / b - ((a % b != 0) && ((a < 0) != (b < 0)))); break;
      case Op::Max: r = std::max(a, b); break;
      case Op::Min: r = std::min(a, b); break;
    }
    stack_.back() = r;
  }
  int64_t result() const {
    REQUIRE(stack_.size() == 1);
    return stack_.back();
  }

 private:
  std::vector<int64_t> values_;
  std::vector<int64_t> stack_;
};
}  // namespace

TEST_CASE("an emitted expression computes what evaluate() does", "[symbolic_shapes]") {
  // Random expressions over two symbols with every kind of term: the
  // residual rebuilds a size the code after the graph reads this way.
  std::mt19937_64 rng(5);
  std::function<SymExpr(int)> random_expr = [&](int depth) {
    SymExpr e = c(int64_t(rng() % 9) - 4);
    for (int t = int(rng() % 3) + 1; t > 0; --t) {
      SymExpr m = c(int64_t(rng() % 7) - 3);
      for (int k = int(rng() % 3); k > 0; --k) {
        SymExpr atom = s(int(rng() % 2));
        if (depth > 0) {
          switch (rng() % 5) {
            case 0: atom = SymExpr::floordiv(random_expr(depth - 1), c(int64_t(rng() % 4) + 2)); break;
            case 1: atom = SymExpr::mod(random_expr(depth - 1), s(int(rng() % 2))); break;
            case 2: atom = SymExpr::max(random_expr(depth - 1), c(int64_t(rng() % 9))); break;
            case 3: atom = SymExpr::min(s(0), random_expr(depth - 1)); break;
            default: break;
          }
        }
        m = m * atom;
      }
      e = e + m;
    }
    return e;
  };
  int nonconstant = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    SymExpr e = random_expr(2);
    nonconstant += e.has_symbols();
    for (int64_t a = 2; a < 7; ++a)
      for (int64_t b = 2; b < 7; ++b) {
        INFO(e.str() << " at s0=" << a << " s1=" << b);
        StackMachine m({a, b});
        e.emit(m);
        REQUIRE(m.result() == e.evaluate({a, b}));
      }
  }
  CHECK(nonconstant > 1000);  // the expressions are not mostly constants
}

// Symbolic sizes (issue 14): what a dynamic dimension's size is while a
// trace runs, and the conditions the trace's decisions put on it.
//
// Dynamo's ShapeEnv (torch/fx/experimental/symbolic_shapes.py) re-created
// without sympy: a size is a SymExpr, a polynomial over the symbols s0,
// s1, ... (one per dynamic input dimension) with integer coefficients, whose
// terms may also hold opaque floor-division, modulo, max and min terms. The
// form is canonical, so two expressions are equal exactly when they are
// the same polynomial: (s0 + 1) * (s0 - 1) == s0*s0 - 1.
//
// Every symbol has a hint, the size the traced example had. A Python
// decision on a symbolic value (`if T > 128`) is taken for the hint and
// recorded as a guard on the relation (`s0 <= 128`), not on the value; a
// value used where only a number serves (a list's length) is specialized:
// a guard `s0 == 8`. Sizes 0 and 1 are never symbolic (as in torch), so
// every symbol is at least 2, and relations that hold for every such
// value (`s0 >= 1`, `2*s0 > s0`) are not guarded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::output_graph {

class HintLearner;  // output_graph.h
struct SymAtom;
using SymAtomRef = std::shared_ptr<const SymAtom>;

// Receives an expression in evaluation order, operands before their
// operation (SymExpr::emit): how the residual's bytecode computes a size
// from the input sizes it is made of.
class SymEmitter {
 public:
  enum class Op : uint8_t { Add, Mul, FloorDiv, Mod, Max, Min };
  virtual ~SymEmitter() = default;
  virtual void symbol(int id) = 0;
  virtual void constant(int64_t v) = 0;
  virtual void binary(Op op) = 0;  // of the two values emitted last
};

class SymExpr {
 public:
  SymExpr() = default;  // 0
  static SymExpr constant(int64_t v);
  static SymExpr symbol(int id);

  bool is_constant() const { return terms_.empty() || (terms_.size() == 1 && terms_[0].atoms.empty()); }
  int64_t constant_value() const;  // requires is_constant()
  std::optional<int> as_symbol() const;  // exactly one symbol, coefficient 1
  bool has_symbols() const { return !is_constant(); }

  friend SymExpr operator+(const SymExpr& a, const SymExpr& b);
  friend SymExpr operator-(const SymExpr& a, const SymExpr& b);
  friend SymExpr operator*(const SymExpr& a, const SymExpr& b);
  SymExpr operator-() const;
  // Python's //, % (floor semantics: the result of % has the divisor's
  // sign), max and min. A constant divisor that divides every coefficient
  // divides through; what cannot be simplified becomes an opaque term.
  static SymExpr floordiv(const SymExpr& a, const SymExpr& b);
  static SymExpr mod(const SymExpr& a, const SymExpr& b);
  static SymExpr max(const SymExpr& a, const SymExpr& b);
  static SymExpr min(const SymExpr& a, const SymExpr& b);

  // The value for `values[id]` of each symbol id. Division by zero raises
  // ZeroDivisionError, as Python does.
  int64_t evaluate(const std::vector<int64_t>& values) const;
  std::string str() const;  // "s0*s1 + 2*s0 - 1", "(s0 + 1)//2", "max(s0, 4)"
  bool operator==(const SymExpr& o) const;
  bool operator!=(const SymExpr& o) const { return !(*this == o); }
  // a / d when d divides a as polynomials: d a nonzero constant dividing
  // every coefficient, or a single term whose atoms every term of a holds
  // (s0*s1*s2 / (s0*s2) == s1). None otherwise.
  std::optional<SymExpr> divide_exactly(const SymExpr& d) const;
  // Every symbol id the expression reads, ascending.
  std::vector<int> symbols() const;
  // The expression as values and operations (Python's int arithmetic on
  // the symbols' values gives evaluate()'s result).
  void emit(SymEmitter& out) const;
  // coef * s_i * s_j * ... (ids ascending, repeated for a power) when the
  // expression is a constant or one term of plain symbols; None otherwise.
  struct Monomial {
    int64_t coef = 0;
    std::vector<int> syms;
  };
  std::optional<Monomial> as_monomial() const;
  // The largest monomial dividing every term: the gcd of the coefficients
  // (positive) times the plain symbols every term holds; 1 for 0. So
  // s0*s1 - s0 == s0 * (s1 - 1) splits into a monomial and a rest.
  SymExpr content() const;
  // Lower and upper bounds over every symbol >= 2, when the terms let them
  // be read off (all non-constant coefficients of one sign, no opaque term).
  std::optional<int64_t> lower_bound() const;
  std::optional<int64_t> upper_bound() const;

 private:
  friend struct SymAtom;
  struct Term {
    std::vector<SymAtomRef> atoms;  // sorted by key; an atom may repeat (s0*s0)
    std::string key;                // the atoms' keys joined: the canonical order of terms
    int64_t coef = 0;
  };
  std::vector<Term> terms_;  // sorted by key, no zero coefficient; the constant term (key "") first

  static SymExpr of_atom(SymAtomRef atom);
  void add_term(Term t);
};

// What a relation compares (lhs REL rhs).
enum class Rel : uint8_t { EQ, NE, LT, LE, GT, GE };
const char* rel_str(Rel r);
bool rel_holds(Rel r, int64_t lhs, int64_t rhs);
Rel rel_negated(Rel r);

struct ShapeGuard {
  SymExpr lhs;
  Rel rel;
  SymExpr rhs;
  std::string str() const;  // "s0 <= 128"
  // Whether it holds for these symbol values (a division by zero: no).
  bool holds(const std::vector<int64_t>& values) const;
};

class ShapeEnv {
 public:
  // A new symbol for a dimension of size `hint` (>= 2), read from `origin`
  // ("L['x'].size()[0]"), for messages and logs.
  SymExpr create_symbol(int64_t hint, std::string origin);
  size_t num_symbols() const { return hints_.size(); }
  const std::vector<int64_t>& hints() const { return hints_; }
  const std::string& origin(int id) const { return origins_[size_t(id)]; }

  int64_t hint(const SymExpr& e) const { return e.evaluate(hints_); }
  // The truth of `lhs rel rhs` for the traced example. Unless it holds for
  // every size (or is constant), the relation, or its negation when false,
  // becomes a guard.
  bool evaluate_relation(const SymExpr& lhs, Rel rel, const SymExpr& rhs);
  // A symbolic value used where only a number serves: the trace goes on
  // with its hint under a guard `e == hint`; `why` is what needed the
  // number (for the recompiles log).
  int64_t specialize(const SymExpr& e, const std::string& why);

  const std::vector<ShapeGuard>& guards() const { return guards_; }
  // Each specialization: "s0 == 8 (a list length)".
  const std::vector<std::string>& specializations() const { return specializations_; }
  // Whether every guard holds for `values` (one per symbol); the first
  // that fails is named in `failed`.
  bool check(const std::vector<int64_t>& values, std::string* failed = nullptr) const;

  // Set when the hints are guesses, not an example's sizes
  // (kiln.fx.symbolic_trace without example inputs): an op whose concrete
  // shape rule refuses the guessed sizes asks it for better ones. Copies of
  // the env (a leaf module's scratch trace) share it.
  HintLearner* learner = nullptr;

 private:
  void add_guard(ShapeGuard g);
  std::vector<int64_t> hints_;
  std::vector<std::string> origins_;
  std::vector<ShapeGuard> guards_;
  std::vector<std::string> specializations_;
};

}  // namespace kiln::output_graph

#include "output_graph/symbolic_shapes.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "runtime/base/error.h"

namespace kiln::output_graph {

using kiln::ErrorKind;
using kiln::throw_error;

namespace {

[[noreturn]] void overflow() { throw_error(ErrorKind::OverflowError, "symbolic size arithmetic overflows int64"); }
int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}
// Python's // and % on ints.
int64_t py_floordiv(int64_t a, int64_t b) {
  if (b == 0) throw_error(ErrorKind::ZeroDivisionError, "integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t py_mod(int64_t a, int64_t b) {
  if (b == 0) throw_error(ErrorKind::ZeroDivisionError, "integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace

// A symbol, or a term the polynomial form cannot open: a // b, a % b,
// max(a, b), min(a, b) of two expressions. `key` orders atoms canonically
// (symbols by id, zero-padded so s2 < s10; opaque terms after symbols).
struct SymAtom {
  enum class Kind : uint8_t { Symbol, FloorDiv, Mod, Max, Min } kind = Kind::Symbol;
  int id = -1;
  SymExpr a, b;
  std::string key;

  int64_t evaluate(const std::vector<int64_t>& values) const {
    switch (kind) {
      case Kind::Symbol:
        if (size_t(id) >= values.size()) throw_error(ErrorKind::ValueError, "no value for symbol s" + std::to_string(id));
        return values[size_t(id)];
      case Kind::FloorDiv: return py_floordiv(a.evaluate(values), b.evaluate(values));
      case Kind::Mod: return py_mod(a.evaluate(values), b.evaluate(values));
      case Kind::Max: return std::max(a.evaluate(values), b.evaluate(values));
      case Kind::Min: return std::min(a.evaluate(values), b.evaluate(values));
    }
    return 0;
  }
  std::string str() const {
    // An operand needs parentheses unless it is one symbol or a constant.
    auto operand = [](const SymExpr& e) {
      std::string s = e.str();
      return (e.is_constant() || e.as_symbol()) ? s : "(" + s + ")";
    };
    switch (kind) {
      case Kind::Symbol: return "s" + std::to_string(id);
      case Kind::FloorDiv: return operand(a) + "//" + operand(b);
      case Kind::Mod: return operand(a) + "%" + operand(b);
      case Kind::Max: return "max(" + a.str() + ", " + b.str() + ")";
      case Kind::Min: return "min(" + a.str() + ", " + b.str() + ")";
    }
    return "?";
  }
};

namespace {

std::string expr_key(const SymExpr& e) { return e.str(); }  // canonical: str() prints the canonical form

SymAtomRef make_opaque(SymAtom::Kind kind, const SymExpr& a, const SymExpr& b) {
  auto atom = std::make_shared<SymAtom>();
  atom->kind = kind;
  atom->a = a;
  atom->b = b;
  static const char* tags[] = {"", "~fd", "~mod", "~max", "~min"};
  atom->key = std::string(tags[size_t(kind)]) + "(" + expr_key(a) + "," + expr_key(b) + ")";
  return atom;
}

}  // namespace

SymExpr SymExpr::constant(int64_t v) {
  SymExpr e;
  if (v != 0) e.terms_.push_back(Term{{}, "", v});
  return e;
}

SymExpr SymExpr::symbol(int id) {
  auto atom = std::make_shared<SymAtom>();
  atom->kind = SymAtom::Kind::Symbol;
  atom->id = id;
  char buf[32];
  std::snprintf(buf, sizeof buf, "s%08d", id);
  atom->key = buf;
  return of_atom(std::move(atom));
}

SymExpr SymExpr::of_atom(SymAtomRef atom) {
  SymExpr e;
  std::string key = atom->key;
  e.terms_.push_back(Term{{std::move(atom)}, std::move(key), 1});
  return e;
}

int64_t SymExpr::constant_value() const { return terms_.empty() ? 0 : terms_[0].coef; }

std::optional<int> SymExpr::as_symbol() const {
  if (terms_.size() != 1 || terms_[0].coef != 1 || terms_[0].atoms.size() != 1) return std::nullopt;
  const SymAtom& a = *terms_[0].atoms[0];
  if (a.kind != SymAtom::Kind::Symbol) return std::nullopt;
  return a.id;
}

void SymExpr::add_term(Term t) {
  if (t.coef == 0) return;
  auto it = std::lower_bound(terms_.begin(), terms_.end(), t.key,
                             [](const Term& x, const std::string& k) { return x.key < k; });
  if (it != terms_.end() && it->key == t.key) {
    it->coef = add(it->coef, t.coef);
    if (it->coef == 0) terms_.erase(it);
    return;
  }
  terms_.insert(it, std::move(t));
}

SymExpr operator+(const SymExpr& a, const SymExpr& b) {
  SymExpr r = a;
  for (const auto& t : b.terms_) r.add_term(t);
  return r;
}

SymExpr SymExpr::operator-() const {
  SymExpr r = *this;
  for (auto& t : r.terms_) t.coef = mul(t.coef, -1);
  return r;
}

SymExpr operator-(const SymExpr& a, const SymExpr& b) { return a + (-b); }

SymExpr operator*(const SymExpr& a, const SymExpr& b) {
  SymExpr r;
  for (const auto& x : a.terms_)
    for (const auto& y : b.terms_) {
      SymExpr::Term t;
      t.coef = mul(x.coef, y.coef);
      t.atoms = x.atoms;
      t.atoms.insert(t.atoms.end(), y.atoms.begin(), y.atoms.end());
      std::stable_sort(t.atoms.begin(), t.atoms.end(), [](const SymAtomRef& p, const SymAtomRef& q) { return p->key < q->key; });
      for (const auto& atom : t.atoms) t.key += (t.key.empty() ? "" : "*") + atom->key;
      r.add_term(std::move(t));
    }
  return r;
}

SymExpr SymExpr::floordiv(const SymExpr& a, const SymExpr& b) {
  if (b.is_constant()) {
    const int64_t c = b.constant_value();
    if (c == 0) throw_error(ErrorKind::ZeroDivisionError, "integer division or modulo by zero");
    if (a.is_constant()) return constant(py_floordiv(a.constant_value(), c));
    if (c == 1) return a;
    // Exact when c divides every coefficient: (4*s0 + 2)//2 == 2*s0 + 1.
    bool exact = std::all_of(a.terms_.begin(), a.terms_.end(), [c](const Term& t) { return t.coef % c == 0; });
    if (exact) {
      SymExpr r = a;
      for (auto& t : r.terms_) t.coef /= c;
      return r;
    }
  } else if (a == b) {
    auto lo = b.lower_bound();
    if (lo && *lo > 0) return constant(1);
  }
  return of_atom(make_opaque(SymAtom::Kind::FloorDiv, a, b));
}

SymExpr SymExpr::mod(const SymExpr& a, const SymExpr& b) {
  if (b.is_constant()) {
    const int64_t c = b.constant_value();
    if (c == 0) throw_error(ErrorKind::ZeroDivisionError, "integer division or modulo by zero");
    if (a.is_constant()) return constant(py_mod(a.constant_value(), c));
    bool exact = std::all_of(a.terms_.begin(), a.terms_.end(), [c](const Term& t) { return t.coef % c == 0; });
    if (exact) return SymExpr();
  }
  return of_atom(make_opaque(SymAtom::Kind::Mod, a, b));
}

SymExpr SymExpr::max(const SymExpr& a, const SymExpr& b) {
  if (a.is_constant() && b.is_constant()) return constant(std::max(a.constant_value(), b.constant_value()));
  if (a == b) return a;
  const SymExpr d = a - b;
  if (auto lo = d.lower_bound(); lo && *lo >= 0) return a;
  if (auto hi = d.upper_bound(); hi && *hi <= 0) return b;
  // max is commutative: one canonical operand order.
  return expr_key(a) <= expr_key(b) ? of_atom(make_opaque(SymAtom::Kind::Max, a, b))
                                    : of_atom(make_opaque(SymAtom::Kind::Max, b, a));
}

SymExpr SymExpr::min(const SymExpr& a, const SymExpr& b) {
  if (a.is_constant() && b.is_constant()) return constant(std::min(a.constant_value(), b.constant_value()));
  if (a == b) return a;
  const SymExpr d = a - b;
  if (auto lo = d.lower_bound(); lo && *lo >= 0) return b;
  if (auto hi = d.upper_bound(); hi && *hi <= 0) return a;
  return expr_key(a) <= expr_key(b) ? of_atom(make_opaque(SymAtom::Kind::Min, a, b))
                                    : of_atom(make_opaque(SymAtom::Kind::Min, b, a));
}

std::optional<SymExpr> SymExpr::divide_exactly(const SymExpr& d) const {
  if (d.terms_.size() != 1 || d.terms_[0].coef == 0) return std::nullopt;
  const Term& dt = d.terms_[0];
  SymExpr r;
  for (const auto& t : terms_) {
    if (t.coef % dt.coef != 0) return std::nullopt;
    // Remove dt's atoms from t's (both sorted by key, as multisets).
    Term q;
    q.coef = t.coef / dt.coef;
    size_t i = 0;
    for (const auto& atom : t.atoms) {
      if (i < dt.atoms.size() && dt.atoms[i]->key == atom->key) {
        ++i;
        continue;
      }
      q.atoms.push_back(atom);
    }
    if (i != dt.atoms.size()) return std::nullopt;
    for (const auto& atom : q.atoms) q.key += (q.key.empty() ? "" : "*") + atom->key;
    r.add_term(std::move(q));
  }
  return r;
}

std::optional<SymExpr::Monomial> SymExpr::as_monomial() const {
  if (terms_.empty()) return Monomial{0, {}};
  if (terms_.size() != 1) return std::nullopt;
  Monomial m{terms_[0].coef, {}};
  for (const auto& atom : terms_[0].atoms) {
    if (atom->kind != SymAtom::Kind::Symbol) return std::nullopt;
    m.syms.push_back(atom->id);
  }
  std::sort(m.syms.begin(), m.syms.end());
  return m;
}

SymExpr SymExpr::content() const {
  if (terms_.empty()) return constant(1);
  int64_t g = 0;
  for (const auto& t : terms_) g = std::gcd(g, t.coef < 0 ? -t.coef : t.coef);
  // The symbol atoms of the first term that every other term holds too
  // (as multisets: s0*s0 divides s0*s0*s1, not s0*s1).
  std::vector<SymAtomRef> common;
  for (const auto& atom : terms_[0].atoms)
    if (atom->kind == SymAtom::Kind::Symbol) common.push_back(atom);
  for (size_t k = 1; k < terms_.size() && !common.empty(); ++k) {
    std::vector<SymAtomRef> kept;
    std::vector<bool> used(terms_[k].atoms.size(), false);
    for (const auto& c : common)
      for (size_t j = 0; j < terms_[k].atoms.size(); ++j)
        if (!used[j] && terms_[k].atoms[j]->key == c->key) {
          used[j] = true;
          kept.push_back(c);
          break;
        }
    common = std::move(kept);
  }
  SymExpr r = constant(g);
  for (const auto& atom : common) r = r * of_atom(atom);
  return r;
}

int64_t SymExpr::evaluate(const std::vector<int64_t>& values) const {
  int64_t sum = 0;
  for (const auto& t : terms_) {
    int64_t p = t.coef;
    for (const auto& atom : t.atoms) p = mul(p, atom->evaluate(values));
    sum = add(sum, p);
  }
  return sum;
}

void SymExpr::emit(SymEmitter& out) const {
  using Op = SymEmitter::Op;
  if (terms_.empty()) return out.constant(0);
  bool first = true;
  for (const Term& t : terms_) {
    bool product = false;
    for (const auto& atom : t.atoms) {
      switch (atom->kind) {
        case SymAtom::Kind::Symbol: out.symbol(atom->id); break;
        case SymAtom::Kind::FloorDiv:
        case SymAtom::Kind::Mod:
        case SymAtom::Kind::Max:
        case SymAtom::Kind::Min: {
          atom->a.emit(out);
          atom->b.emit(out);
          const Op op = atom->kind == SymAtom::Kind::FloorDiv ? Op::FloorDiv
                        : atom->kind == SymAtom::Kind::Mod    ? Op::Mod
                        : atom->kind == SymAtom::Kind::Max    ? Op::Max
                                                              : Op::Min;
          out.binary(op);
          break;
        }
      }
      if (product) out.binary(Op::Mul);
      product = true;
    }
    if (!product || t.coef != 1) {
      out.constant(t.coef);
      if (product) out.binary(Op::Mul);
    }
    if (!first) out.binary(Op::Add);
    first = false;
  }
}

std::string SymExpr::str() const {
  if (terms_.empty()) return "0";
  // Terms with symbols first (in canonical order), the constant last.
  std::string out;
  auto emit = [&](const Term& t) {
    int64_t c = t.coef;
    std::string body;
    for (const auto& atom : t.atoms) body += (body.empty() ? "" : "*") + atom->str();
    if (out.empty()) {
      if (c < 0) out += "-";
    } else {
      out += c < 0 ? " - " : " + ";
    }
    const uint64_t mag = c < 0 ? uint64_t(0) - uint64_t(c) : uint64_t(c);
    if (body.empty()) out += std::to_string(mag);
    else out += (mag == 1 ? "" : std::to_string(mag) + "*") + body;
  };
  for (const auto& t : terms_)
    if (!t.atoms.empty()) emit(t);
  if (!terms_[0].atoms.empty()) return out;
  emit(terms_[0]);
  return out;
}

bool SymExpr::operator==(const SymExpr& o) const {
  if (terms_.size() != o.terms_.size()) return false;
  for (size_t i = 0; i < terms_.size(); ++i)
    if (terms_[i].coef != o.terms_[i].coef || terms_[i].key != o.terms_[i].key) return false;
  return true;
}

std::vector<int> SymExpr::symbols() const {
  std::vector<int> ids;
  auto visit = [&](auto& self, const SymExpr& e) -> void {
    for (const auto& t : e.terms_)
      for (const auto& atom : t.atoms) {
        if (atom->kind == SymAtom::Kind::Symbol) ids.push_back(atom->id);
        else {
          self(self, atom->a);
          self(self, atom->b);
        }
      }
  };
  visit(visit, *this);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// Every symbol is >= 2. A term with a positive coefficient is at least its
// value at all symbols == 2. A negative term c*m is bounded by positive
// terms that are multiples of it: d*m*m' >= d*2^deg(m')*m, so each unit of
// d cancels 2^deg(m') units of |c| (s0*s1 - s0 >= 0). The bound is what
// is left once every negative term is cancelled; none when one cannot be,
// or a term holds an opaque atom (//, %, max, min are not bounded here).
std::optional<int64_t> SymExpr::lower_bound() const {
  struct Positive {
    const Term* term;
    int64_t left;
  };
  int64_t bound = 0;
  std::vector<Positive> positives;
  for (const auto& t : terms_) {
    for (const auto& atom : t.atoms)
      if (atom->kind != SymAtom::Kind::Symbol) return std::nullopt;
    if (t.atoms.empty()) bound = add(bound, t.coef);
    else if (t.coef > 0) positives.push_back({&t, t.coef});
  }
  // Whether `big`'s atoms include `small`'s (both sorted by key), as multisets.
  auto divides = [](const Term& small, const Term& big) {
    size_t i = 0;
    for (const auto& atom : big.atoms)
      if (i < small.atoms.size() && small.atoms[i]->key == atom->key) ++i;
    return i == small.atoms.size();
  };
  for (const auto& t : terms_) {
    if (t.atoms.empty() || t.coef > 0) continue;
    int64_t need = -t.coef;  // units of t's monomial
    for (auto& p : positives) {
      if (need == 0) break;
      if (p.left == 0 || p.term->atoms.size() <= t.atoms.size() || !divides(t, *p.term)) continue;
      const size_t extra = p.term->atoms.size() - t.atoms.size();
      if (extra >= 62) return std::nullopt;
      const int64_t per = int64_t(1) << extra;  // units one coefficient of p covers
      const int64_t use = std::min(p.left, (need + per - 1) / per);
      p.left -= use;
      const int64_t covered = mul(use, per);
      if (covered > need) {  // the rest of those units still counts: each is >= 2^deg(t)
        int64_t surplus = covered - need;
        for (size_t i = 0; i < t.atoms.size(); ++i) surplus = mul(surplus, 2);
        bound = add(bound, surplus);
      }
      need = std::max<int64_t>(0, need - covered);
    }
    if (need > 0) return std::nullopt;
  }
  for (const auto& p : positives) {
    int64_t v = p.left;
    for (size_t i = 0; i < p.term->atoms.size(); ++i) v = mul(v, 2);
    bound = add(bound, v);
  }
  return bound;
}

std::optional<int64_t> SymExpr::upper_bound() const {
  auto lo = (-*this).lower_bound();
  if (!lo) return std::nullopt;
  return -*lo;
}

const char* rel_str(Rel r) {
  switch (r) {
    case Rel::EQ: return "==";
    case Rel::NE: return "!=";
    case Rel::LT: return "<";
    case Rel::LE: return "<=";
    case Rel::GT: return ">";
    case Rel::GE: return ">=";
  }
  return "?";
}

bool rel_holds(Rel r, int64_t a, int64_t b) {
  switch (r) {
    case Rel::EQ: return a == b;
    case Rel::NE: return a != b;
    case Rel::LT: return a < b;
    case Rel::LE: return a <= b;
    case Rel::GT: return a > b;
    case Rel::GE: return a >= b;
  }
  return false;
}

Rel rel_negated(Rel r) {
  switch (r) {
    case Rel::EQ: return Rel::NE;
    case Rel::NE: return Rel::EQ;
    case Rel::LT: return Rel::GE;
    case Rel::LE: return Rel::GT;
    case Rel::GT: return Rel::LE;
    case Rel::GE: return Rel::LT;
  }
  return r;
}

std::string ShapeGuard::str() const { return lhs.str() + " " + rel_str(rel) + " " + rhs.str(); }

bool ShapeGuard::holds(const std::vector<int64_t>& values) const {
  try {
    return rel_holds(rel, lhs.evaluate(values), rhs.evaluate(values));
  } catch (const kiln::Error&) {
    return false;  // a division by zero at these sizes: not the traced case
  }
}

SymExpr ShapeEnv::create_symbol(int64_t hint, std::string origin) {
  if (hint < 2) throw_error(ErrorKind::ValueError, "a symbolic size must be at least 2 (0 and 1 specialize), got " + std::to_string(hint));
  hints_.push_back(hint);
  origins_.push_back(std::move(origin));
  return SymExpr::symbol(int(hints_.size() - 1));
}

bool ShapeEnv::evaluate_relation(const SymExpr& lhs, Rel rel, const SymExpr& rhs) {
  const SymExpr d = lhs - rhs;
  const int64_t dv = hint(d);
  const bool truth = rel_holds(rel, dv, 0);
  if (d.is_constant()) return truth;
  const Rel known = truth ? rel : rel_negated(rel);
  // Implied by every symbol being >= 2: nothing to guard.
  const auto lo = d.lower_bound(), hi = d.upper_bound();
  bool implied = false;
  switch (known) {
    case Rel::GT: implied = lo && *lo > 0; break;
    case Rel::GE: implied = lo && *lo >= 0; break;
    case Rel::LT: implied = hi && *hi < 0; break;
    case Rel::LE: implied = hi && *hi <= 0; break;
    case Rel::NE: implied = (lo && *lo > 0) || (hi && *hi < 0); break;
    case Rel::EQ: implied = false; break;
  }
  if (!implied) add_guard({lhs, known, rhs});
  return truth;
}

int64_t ShapeEnv::specialize(const SymExpr& e, const std::string& why) {
  const int64_t v = hint(e);
  if (e.is_constant()) return v;
  ShapeGuard g{e, Rel::EQ, SymExpr::constant(v)};
  specializations_.push_back(g.str() + " (" + why + ")");
  add_guard(std::move(g));
  return v;
}

void ShapeEnv::add_guard(ShapeGuard g) {
  const std::string s = g.str();
  for (const auto& have : guards_)
    if (have.str() == s) return;
  guards_.push_back(std::move(g));
}

bool ShapeEnv::check(const std::vector<int64_t>& values, std::string* failed) const {
  for (const auto& g : guards_) {
    if (!g.holds(values)) {
      if (failed) *failed = g.str();
      return false;
    }
  }
  return true;
}

}  // namespace kiln::output_graph

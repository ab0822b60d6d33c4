// Python semantics of Values: printing, truth, equality, hashing and the
// arithmetic/comparison/unary operators. Attribute, item and iteration
// access live in value_access.cpp.
//
// Deliberate deviation from Python: int is int64. An operation that would
// overflow gives the exact result through the embedder's BigIntHooks
// (under Python: a Python int), or raises OverflowError — never a
// silently wrapped result.
#include "runtime/semantics/value_ops.h"

#include "runtime/base/host_python.h"

#include "runtime/base/budget.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <algorithm>

#include "runtime/base/hash.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/class_model.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/kind_slots.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/str_format.h"
#include "runtime/semantics/super.h"

namespace kiln::runtime {

// Guards the recursive walks over containers (repr, ==, hash): a
// container met again inside itself prints as [...] like Python, and
// nesting deeper than kMaxNesting is a RecursionError, never a C++ stack
// overflow.
namespace {
constexpr int kMaxNesting = 1000;
thread_local int nesting = 0;
thread_local std::vector<const Object*> in_repr;

// Each level also spends a step of the run's budget (runtime/base/budget.h):
// a tuple that holds one tuple twice, nested 60 deep, is small but walks
// 2^60 nodes (CPython too: tuple hashes are not cached), and a fuzzed
// program must not stall in one native walk.
struct NestingGuard {
  NestingGuard() {
    spend_step();
    if (++nesting > kMaxNesting) {
      --nesting;
      throw_error(ErrorKind::RecursionError, "maximum recursion depth exceeded while walking a nested value");
    }
  }
  ~NestingGuard() { --nesting; }
};

// Marks a container as being printed; `active` is false when it already was.
struct ReprMark {
  const Object* o;
  bool active;
  explicit ReprMark(const Object* obj) : o(obj) {
    active = std::find(in_repr.begin(), in_repr.end(), o) == in_repr.end();
    if (active) in_repr.push_back(o);
  }
  ~ReprMark() {
    if (active) in_repr.pop_back();
  }
};
}  // namespace

// ---------------------------------------------------------------- printing --

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::Module: return v.as<ModuleObj>()->cls->name;
    case Kind::Foreign: {
      auto* f = v.as<ForeignObj>();
      return f->vt->type_name_of ? f->vt->type_name_of(f->handle) : f->vt->type_name;
    }
    case Kind::Builtin: return is_ellipsis(v) ? "ellipsis" : "builtin_function_or_method";
    default: return kind_name(v.kind());
  }
}

static std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, laid out the way Python's repr() does:
  // positional for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  size_t epos = s.find('e');
  int exp = std::stoi(s.substr(epos + 1));
  std::string digits = s.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else if (size_t(exp + 1) >= digits.size()) {
      out = digits + std::string(size_t(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, size_t(exp + 1)) + "." + digits.substr(size_t(exp + 1));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += e;
  }
  return neg ? "-" + out : out;
}

namespace {
struct CodeRange {
  uint32_t first, last;
};
constexpr CodeRange kNonPrintable[] = {
#define KILN_NONPRINTABLE(first, last) {first, last},
#include "runtime/semantics/unicode_nonprintable.def"
#undef KILN_NONPRINTABLE
};
constexpr bool sorted_and_disjoint() {
  for (size_t i = 0; i < std::size(kNonPrintable); ++i)
    if (kNonPrintable[i].first > kNonPrintable[i].last || (i > 0 && kNonPrintable[i - 1].last >= kNonPrintable[i].first))
      return false;
  return true;
}
static_assert(sorted_and_disjoint(), "unicode_nonprintable.def must be sorted, disjoint ranges (binary search)");

HostPython host;

// str.isprintable() for one code point, as CPython's unicode database has
// it: the embedding interpreter's when it installed its own.
bool printable(uint32_t cp) {
  if (host.printable) return host.printable(cp);
  const CodeRange* r = std::upper_bound(std::begin(kNonPrintable), std::end(kNonPrintable), cp,
                                        [](uint32_t c, const CodeRange& x) { return c < x.first; });
  return r == std::begin(kNonPrintable) || cp > (r - 1)->last;
}
}  // namespace

void set_host_python(const HostPython& h) { host = h; }
const HostPython& host_python() { return host; }

// CPython's repr of a str: its quote choice, the escapes for \n \t \r \\
// and the quote, and \xhh / \uhhhh / \Uhhhhhhhh for what is not printable.
static std::string str_repr(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {  // a UTF-8 sequence: copied, or escaped when not printable
      const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
      for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      if (printable(cp)) {
        out.append(s, i, n);
      } else {
        char b[16];
        std::snprintf(b, sizeof b, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", unsigned(cp));
        out += b;
      }
      i += n - 1;
      continue;
    }
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c == q) {
          out += '\\';
          out += char(c);
        } else if (c < 0x20 || c == 0x7f) {
          char b[8];
          std::snprintf(b, sizeof b, "\\x%02x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  return out + q;
}

std::string repr(const Value& v) {
  NestingGuard guard;
  switch (v.kind()) {
    case Kind::None: return "None";
    case Kind::Null: return "<NULL>";
    case Kind::Bool: return v.as_bool() ? "True" : "False";
    case Kind::Int: return std::to_string(v.as_int());
    case Kind::Float: return float_repr(v.as_float());
    case Kind::Str: return str_repr(v.as_str());
    case Kind::Tensor: return v.as_tensor().repr();
    case Kind::Tuple: {
      const auto& items = v.as<TupleObj>()->items;
      ReprMark mark(v.obj());
      if (!mark.active) return "(...)";
      std::string s = "(";
      for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + repr(items[i]);
      return s + (items.size() == 1 ? ",)" : ")");
    }
    case Kind::List: {
      const auto& items = v.as<ListObj>()->items;
      ReprMark mark(v.obj());
      if (!mark.active) return "[...]";
      std::string s = "[";
      for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + repr(items[i]);
      return s + "]";
    }
    case Kind::Dict: {
      ReprMark mark(v.obj());
      if (!mark.active) return "{...}";
      std::string s = "{";
      bool first = true;
      for (const auto& [k, val] : v.as<DictObj>()->entries) {
        s += (first ? "" : ", ") + repr(k) + ": " + repr(val);
        first = false;
      }
      return s + "}";
    }
    case Kind::Set:
    case Kind::FrozenSet: {
      ReprMark mark(v.obj());
      if (!mark.active) return type_name(v) + "(...)";
      return set_repr(v);
    }
    case Kind::Slice: {
      auto* sl = v.as<SliceObj>();
      return "slice(" + repr(sl->start) + ", " + repr(sl->stop) + ", " + repr(sl->step) + ")";
    }
    case Kind::Range: {
      auto* r = v.as<RangeObj>();
      std::string s = "range(" + std::to_string(r->start) + ", " + std::to_string(r->stop);
      return s + (r->step == 1 ? ")" : ", " + std::to_string(r->step) + ")");
    }
    case Kind::Iterator: return "<iterator>";
    case Kind::Cell: return "<cell>";
    case Kind::Code: return "<code " + v.as<Code>()->qualname + ">";
    case Kind::Function: return "<function " + v.as<FunctionObj>()->code->qualname + ">";
    case Kind::BoundMethod: {
      auto* bm = v.as<BoundMethodObj>();
      std::string name = bm->func.is(Kind::Function) ? bm->func.as<FunctionObj>()->code->qualname
                         : bm->func.is(Kind::Builtin) ? bm->func.as<BuiltinObj>()->name
                                                      : repr(bm->func);
      return "<bound method " + name + " of " + type_name(bm->self) + " object>";
    }
    case Kind::Builtin:
      if (is_ellipsis(v)) return "Ellipsis";
      // int, type(None); kiln's Tensor type is Python's kiln._C.Tensor
      if (v.as<BuiltinObj>()->type_of == Kind::Tensor) return "<class 'kiln._C.Tensor'>";
      if (v.as<BuiltinObj>()->type_of != Kind::Null) return "<class '" + v.as<BuiltinObj>()->name + "'>";
      return "<built-in function " + v.as<BuiltinObj>()->name + ">";
    case Kind::Class: return "<class '" + v.as<ClassObj>()->name + "'>";
    case Kind::Property: return "<property object>";
    case Kind::StaticMethod:
    case Kind::ClassMethod:
      return std::string("<") + kind_name(v.kind()) + "(" + repr(v.as<MethodWrapperObj>()->func) + ")>";
    case Kind::Super: return super_repr(v.as<SuperObj>());
    case Kind::Module: return module_slots().repr(v.as<ModuleObj>());
    case Kind::Foreign: {
      auto* f = v.as<ForeignObj>();
      return f->vt->repr ? f->vt->repr(f->handle) : "<" + std::string(f->vt->type_name) + " object>";
    }
  }
  return "?";
}

std::string to_str(const Value& v) {
  if (v.is(Kind::Str)) return v.as_str();
  // A Python object's str() is its format(obj, "") (object.__format__).
  if (v.is(Kind::Foreign) && v.as<ForeignObj>()->vt->format) return v.as<ForeignObj>()->vt->format(v.as<ForeignObj>()->handle, "");
  return repr(v);
}

// ------------------------------------------------------ truth, ==, hash ----

bool truth(const Value& v) {
  switch (v.kind()) {
    case Kind::None:
    case Kind::Null: return false;
    case Kind::Bool:
    case Kind::Int: return v.as_int() != 0;
    case Kind::Float: return v.as_float() != 0.0;
    case Kind::Str: return !v.as_str().empty();
    case Kind::Tuple: return !v.as<TupleObj>()->items.empty();
    case Kind::List: return !v.as<ListObj>()->items.empty();
    case Kind::Dict: return !v.as<DictObj>()->entries.empty();
    case Kind::Set:
    case Kind::FrozenSet: return !v.as<SetObj>()->empty();
    case Kind::Range: return v.as<RangeObj>()->length() != 0;
    case Kind::Tensor: {
      Tensor t = v.as_tensor();
      if (t.numel() != 1)
        throw_error(ErrorKind::RuntimeError, "Boolean value of Tensor with " + std::to_string(t.numel()) +
                                                 " values is ambiguous");
      return t.item() != 0.0;
    }
    case Kind::Module: {
      auto bk = v.as<ModuleObj>()->cls->builtin_kind();
      if (bk == BuiltinModule::Sequential || bk == BuiltinModule::ModuleList || bk == BuiltinModule::ModuleDict)
        return length(v) != 0;
      return true;
    }
    case Kind::Foreign: {
      auto* f = v.as<ForeignObj>();
      return f->vt->truth ? f->vt->truth(f->handle) : true;
    }
    default: return true;
  }
}

template <class Seq>
static bool seq_equal(const Seq& a, const Seq& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].is_same(b[i]) && !values_equal(a[i], b[i])) return false;
  return true;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is(Kind::Float) || b.is(Kind::Float)) return a.as_number() == b.as_number();
    return a.as_int() == b.as_int();
  }
  if (a.is_same(b) && !a.is(Kind::Float)) return true;  // identity first, as Python's containers do
  NestingGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.is(Kind::Float) || b.is(Kind::Float)) return a.as_number() == b.as_number();
    return a.as_int() == b.as_int();
  }
  if (is_set_like(a) && is_set_like(b)) return sets_equal(a, b);  // set == frozenset
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::None:
    case Kind::Null: return true;
    case Kind::Str: return a.obj() == b.obj() || a.as_str() == b.as_str();
    case Kind::Tuple: return seq_equal(a.as<TupleObj>()->items, b.as<TupleObj>()->items);
    case Kind::List: return seq_equal(a.as<ListObj>()->items, b.as<ListObj>()->items);
    case Kind::Dict: {
      auto* da = a.as<DictObj>();
      auto* db = b.as<DictObj>();
      if (da->entries.size() != db->entries.size()) return false;
      for (const auto& [k, v] : da->entries) {
        const Value* o = db->find(k);
        if (!o || !values_equal(v, *o)) return false;
      }
      return true;
    }
    case Kind::Range: {
      auto* ra = a.as<RangeObj>();
      auto* rb = b.as<RangeObj>();
      int64_t n = ra->length();
      return n == rb->length() && (n == 0 || (ra->start == rb->start && (n == 1 || ra->step == rb->step)));
    }
    case Kind::BoundMethod: {
      auto* ma = a.as<BoundMethodObj>();
      auto* mb = b.as<BoundMethodObj>();
      return ma->func.is_same(mb->func) && ma->self.is_same(mb->self);
    }
    case Kind::Foreign: {
      // Python objects by Python's == (two Python ints beyond int64 as dict
      // keys, in a list's `in`); identity was tried above.
      auto* f = a.as<ForeignObj>();
      if (!f->vt->compare) return false;
      return truth(f->vt->compare(f->handle, int(CmpOp::EQ), b));
    }
    // Tensors compare by identity here (dict keys, `in`); elementwise ==
    // on tensors is compare_op's business.
    default: return a.obj() == b.obj();
  }
}

// CPython's hash of every kind kiln owns (runtime/base/hash.h says which are
// exact and which only the embedder knows).
size_t value_hash(const Value& v) {
  switch (v.kind()) {
    case Kind::None: return size_t(hash_none());
    case Kind::Bool:
    case Kind::Int: return size_t(hash_int(v.as_int()));
    case Kind::Float: return size_t(hash_double(v.as_float()));
    case Kind::Str: {
      auto* s = v.as<StrObj>();
      if (s->hash == -1) s->hash = hash_str(s->s);
      return size_t(s->hash);
    }
    case Kind::Tuple: {
      NestingGuard guard;
      TupleHash h;
      for (const auto& x : v.as<TupleObj>()->items) h.add(int64_t(value_hash(x)));
      return size_t(h.finish());
    }
    case Kind::FrozenSet: return size_t(frozenset_hash(v));
    case Kind::Range: {
      // hash((len, None, None)), hash((len, start, None)) or hash((len, start, step))
      auto* r = v.as<RangeObj>();
      const int64_t n = r->length();
      TupleHash h;
      h.add(hash_int(n));
      h.add(n == 0 ? hash_none() : hash_int(r->start));
      h.add(n <= 1 ? hash_none() : hash_int(r->step));
      return size_t(h.finish());
    }
    case Kind::BoundMethod: {
      // method_hash: self by identity, the function by its hash
      auto* m = v.as<BoundMethodObj>();
      const int64_t self = m->self.is_heap() ? hash_pointer(object_identity(m->self)) : int64_t(value_hash(m->self));
      const int64_t x = self ^ int64_t(value_hash(m->func));
      return size_t(x == -1 ? -2 : x);
    }
    case Kind::List:
    case Kind::Dict:
    case Kind::Set:
    case Kind::Slice:  // unhashable until CPython 3.12
      throw_error(ErrorKind::TypeError, "unhashable type: '" + type_name(v) + "'");
    case Kind::Foreign: {
      auto* f = v.as<ForeignObj>();
      if (f->vt->hash) return f->vt->hash(f->handle);
      return size_t(hash_pointer(f));
    }
    default: return size_t(hash_pointer(v.obj()));  // identity, as CPython's object.__hash__
  }
}

// --------------------------------------------------------------- operators --

[[noreturn]] static void unsupported(const char* sym, bool inplace, const Value& a, const Value& b) {
  // CPython names pow() beside ** (binary_op1's message for the power slot),
  // but not beside **=.
  const std::string op = std::string(sym) + (inplace ? "=" : std::strcmp(sym, "**") == 0 ? " or pow()" : "");
  throw_error(ErrorKind::TypeError,
              "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

[[noreturn]] static void overflow_error(const char* sym) {
  throw_error(ErrorKind::OverflowError, std::string("integer overflow in ") + sym + " (kiln ints are 64-bit)");
}
// TRAP: never pass the builtin's result slot as another argument of the
// same call; argument evaluation order is unspecified.
#define KILN_CHECKED(builtin, x, y, sym)                 \
  [&] {                                                  \
    int64_t r_;                                          \
    if (builtin(x, y, &r_)) overflow_error(sym);         \
    return r_;                                           \
  }()

static int64_t int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = KILN_CHECKED(__builtin_mul_overflow, result, base, "**");
    exp >>= 1;
    if (exp) base = KILN_CHECKED(__builtin_mul_overflow, base, base, "**");
  }
  return result;
}

namespace {
const BigIntHooks* installed_bigint_hooks = nullptr;
}
void set_bigint_hooks(const BigIntHooks* hooks) { installed_bigint_hooks = hooks; }
const BigIntHooks* bigint_hooks() { return installed_bigint_hooks; }

static Value int_binop(BinOp op, int64_t x, int64_t y, bool both_bool);
// int_binop, with an overflow handed to the big-int hooks when installed
// (the exception path is taken only on overflow).
static Value exact_int_binop(BinOp op, int64_t x, int64_t y, bool both_bool) {
  try {
    return int_binop(op, x, y, both_bool);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::OverflowError || !installed_bigint_hooks) throw;
    return installed_bigint_hooks->binary(op, x, y);
  }
}

// x / y for ints, correctly rounded as CPython's long_true_divide gives it
// (round half to even of the exact quotient), not double(x) / double(y):
// an int past 2**53 is rounded once on the way to a double and again by
// the division ((10**17 + 1) / (10**12 - 10) came out 100000.000001, not
// 100000.00000100001; progen seed 1071154). Both within 2**53, IEEE's
// division of the exact doubles is that rounding already.
static double int_true_divide(int64_t x, int64_t y) {
  constexpr uint64_t kExact = uint64_t(1) << 53;
  const bool negative = (x < 0) != (y < 0);
  const uint64_t a = x < 0 ? uint64_t(0) - uint64_t(x) : uint64_t(x);
  const uint64_t b = y < 0 ? uint64_t(0) - uint64_t(y) : uint64_t(y);
  if (a <= kExact && b <= kExact) return double(x) / double(y);
  if (a == 0) return negative ? -0.0 : 0.0;
  // A quotient of 55 or 56 bits (two below a double's 53: the rounding
  // bit and one more), the remainder folded into its last bit (sticky);
  // converting that to double rounds once, exactly as the true quotient
  // would. Neither shift overflows 128 bits: 55 + bit_length(b) <= 119.
  const int shift = 55 - ((64 - __builtin_clzll(a)) - (64 - __builtin_clzll(b)));
  using u128 = unsigned __int128;
  const u128 num = shift >= 0 ? u128(a) << shift : u128(a);
  const u128 den = shift >= 0 ? u128(b) : u128(b) << -shift;
  u128 q = num / den;
  if (num % den != 0) q |= 1;
  const double r = std::ldexp(double(uint64_t(q)), -shift);  // q < 2**57; no subnormal: |x / y| >= 2**-63
  return negative ? -r : r;
}

static Value int_binop(BinOp op, int64_t x, int64_t y, bool both_bool) {
  const char* sym = binop_symbol(op);
  switch (op) {
    case BinOp::ADD: return Value::integer(KILN_CHECKED(__builtin_add_overflow, x, y, sym));
    case BinOp::SUB: return Value::integer(KILN_CHECKED(__builtin_sub_overflow, x, y, sym));
    case BinOp::MUL: return Value::integer(KILN_CHECKED(__builtin_mul_overflow, x, y, sym));
    case BinOp::TRUEDIV:
      if (y == 0) throw_error(ErrorKind::ZeroDivisionError, "division by zero");
      return Value::floating(int_true_divide(x, y));
    case BinOp::FLOORDIV:
    case BinOp::MOD: {
      // CPython 3.11's words differ between the two (3.10 had one for both)
      if (y == 0)
        throw_error(ErrorKind::ZeroDivisionError, op == BinOp::MOD && host_python().minor >= 11
                                                      ? "integer modulo by zero"
                                                      : "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) {
        if (op == BinOp::MOD) return Value::integer(0);
        overflow_error(sym);
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return Value::integer(op == BinOp::FLOORDIV ? q : m);
    }
    case BinOp::POW:
      if (y < 0) {
        if (x == 0) throw_error(ErrorKind::ZeroDivisionError, "0 cannot be raised to a negative power");
        return Value::floating(std::pow(double(x), double(y)));
      }
      return Value::integer(int_pow(x, y));
    case BinOp::AND: return both_bool ? Value::boolean(x & y) : Value::integer(x & y);
    case BinOp::OR: return both_bool ? Value::boolean(x | y) : Value::integer(x | y);
    case BinOp::XOR: return both_bool ? Value::boolean(x ^ y) : Value::integer(x ^ y);
    case BinOp::LSHIFT:
      if (y < 0) throw_error(ErrorKind::ValueError, "negative shift count");
      if (x != 0 && (y >= 63 || (x > 0 ? x > (INT64_MAX >> y) : x < (INT64_MIN >> y)))) overflow_error(sym);
      return Value::integer(x << y);
    case BinOp::RSHIFT:
      if (y < 0) throw_error(ErrorKind::ValueError, "negative shift count");
      return Value::integer(y >= 63 ? (x < 0 ? -1 : 0) : (x >> y));
    case BinOp::MATMUL: break;
  }
  return Value::null();
}

// Python's float floor division and modulo (Objects/floatobject.c).
static void float_divmod(double vx, double wx, double& floordiv, double& mod) {
  mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
}

static Value float_binop(BinOp op, double x, double y) {
  switch (op) {
    case BinOp::ADD: return Value::floating(x + y);
    case BinOp::SUB: return Value::floating(x - y);
    case BinOp::MUL: return Value::floating(x * y);
    case BinOp::TRUEDIV:
      if (y == 0) throw_error(ErrorKind::ZeroDivisionError, "float division by zero");
      return Value::floating(x / y);
    case BinOp::FLOORDIV:
    case BinOp::MOD: {
      if (y == 0)
        throw_error(ErrorKind::ZeroDivisionError,
                    op == BinOp::FLOORDIV          ? "float floor division by zero"
                    : host_python().minor >= 13 ? "float modulo by zero"
                                                : "float modulo");
      double q, m;
      float_divmod(x, y, q, m);
      return Value::floating(op == BinOp::FLOORDIV ? q : m);
    }
    case BinOp::POW:
      if (x == 0 && y < 0) throw_error(ErrorKind::ZeroDivisionError, "0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y))
        throw_error(ErrorKind::ValueError, "complex results are not supported (negative number to a fractional power)");
      {
        const double r = std::pow(x, y);
        // CPython's float_pow raises on overflow (errno ERANGE), as * does not
        if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
          raise_exception(make_exception(ErrorKind::OverflowError,  // args (errno, strerror), as CPython's
                                         {Value::integer(34), Value::str("Numerical result out of range")}),
                          Value::null());
        return Value::floating(r);
      }
    default: return Value::null();
  }
}

// The result's size is known before anything is copied: an empty sequence
// repeated 10**18 times is empty at once (it looped that often), and one too
// large to hold is MemoryError, as in CPython, not an allocator failure.
size_t repeated_length(size_t len, int64_t n, size_t item_bytes, const char* what) {
  if (len == 0 || n <= 0) return 0;
  if (len > (SIZE_MAX / item_bytes) / size_t(n)) throw_error(ErrorKind::MemoryError, "");
  check_allocation(len * size_t(n) * item_bytes, what);
  if (len * size_t(n) > size_t(1) << 40) throw_error(ErrorKind::MemoryError, "");
  return len * size_t(n);
}

template <class Seq>
static Value repeat(const std::vector<Value>& items, int64_t n, Kind k) {
  std::vector<Value> out;
  out.reserve(repeated_length(items.size(), n, sizeof(Value), k == Kind::List ? "a list" : "a tuple"));
  if (!items.empty())
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return k == Kind::List ? make_list(std::move(out)) : make_tuple(std::move(out));
}

Value binary_op(BinOp op, const Value& a, const Value& b, bool inplace) {
  // Fast path first: int op int is what loops spend their time on.
  if (a.is(Kind::Int) && b.is(Kind::Int)) {
    Value r = exact_int_binop(op, a.as_int(), b.as_int(), false);
    if (!r.is_null()) return r;
    unsupported(binop_symbol(op), inplace, a, b);
  }
  if (op == BinOp::MOD && a.is(Kind::Str)) return Value::str(str_percent(a.as_str(), b));  // printf-style
  if (a.is(Kind::Tensor) || b.is(Kind::Tensor)) {
    int id = tensor_slots().op_for_binary(op);
    if (id < 0) unsupported(binop_symbol(op), inplace, a, b);
    return call_tensor_op(id, {a, b});
  }
  // A set op the caller's Python set: CPython's set_or & co. take any set
  // as `other`, and s op= t must change kiln's s itself.
  if (is_set_like(a) && foreign_container(b) == Kind::Set) return set_binary(op, a, b, inplace);
  if (a.is(Kind::Foreign)) {
    auto* f = a.as<ForeignObj>();
    if (f->vt->binary_op) {
      Value r = f->vt->binary_op(f->handle, int(op), b, false, inplace);
      // s op= t gives s back: the same Value, so `is` still holds
      if (inplace && r.is(Kind::Foreign) && r.as<ForeignObj>()->handle == f->handle) return a;
      return r;
    }
  } else if (b.is(Kind::Foreign) && !(inplace && a.is(Kind::List))) {
    auto* f = b.as<ForeignObj>();
    if (f->vt->binary_op) return f->vt->binary_op(f->handle, int(op), a, true, false);
  }
  if (a.is_number() && b.is_number()) {
    Value r = (a.is(Kind::Float) || b.is(Kind::Float))
                  ? float_binop(op, a.as_number(), b.as_number())
                  : exact_int_binop(op, a.as_int(), b.as_int(), a.is(Kind::Bool) && b.is(Kind::Bool));
    if (!r.is_null()) return r;
    unsupported(binop_symbol(op), inplace, a, b);
  }
  if (Value r = set_binary(op, a, b, inplace); !r.is_null()) return r;
  if (op == BinOp::OR && a.is(Kind::Dict) && b.is(Kind::Dict)) {
    // d | e is a new dict; d |= e updates d (aliases see it)
    Value out = inplace ? a : make_dict();
    if (!inplace)
      for (const auto& [k, v] : a.as<DictObj>()->entries) out.as<DictObj>()->set(k, v);
    std::vector<std::pair<Value, Value>> more = b.as<DictObj>()->entries;
    for (const auto& [k, v] : more) out.as<DictObj>()->set(k, v);
    return out;
  }
  if (inplace && a.is(Kind::List) && op == BinOp::ADD) {
    // list += any iterable mutates the list, as in Python (aliases see it)
    std::vector<Value> src = to_vector(b);
    auto& dst = a.as<ListObj>()->items;
    dst.insert(dst.end(), src.begin(), src.end());
    return a;
  }
  if (op == BinOp::ADD) {
    if (a.is(Kind::Str) && b.is(Kind::Str)) return Value::str(a.as_str() + b.as_str());
    if (a.is(Kind::Str))
      throw_error(ErrorKind::TypeError, "can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.is(Kind::List) && b.is(Kind::List)) {
      std::vector<Value> out = a.as<ListObj>()->items;
      const auto& more = b.as<ListObj>()->items;
      out.insert(out.end(), more.begin(), more.end());
      return make_list(std::move(out));
    }
    if (a.is(Kind::Tuple) && b.is(Kind::Tuple)) {
      std::vector<Value> out = a.as<TupleObj>()->items;
      const auto& more = b.as<TupleObj>()->items;
      out.insert(out.end(), more.begin(), more.end());
      return make_tuple(std::move(out));
    }
  }
  if (op == BinOp::MUL) {
    const Value* seq = (a.is(Kind::Int) || a.is(Kind::Bool)) ? &b : &a;
    const Value* n = seq == &a ? &b : &a;
    if ((n->is(Kind::Int) || n->is(Kind::Bool))) {
      int64_t count = std::max<int64_t>(0, n->as_int());
      if (seq->is(Kind::Str)) {
        std::string out;
        out.reserve(repeated_length(seq->as_str().size(), count, 1, "a str"));
        if (!seq->as_str().empty())
          for (int64_t i = 0; i < count; ++i) out += seq->as_str();
        return Value::str(out);
      }
      if (seq->is(Kind::List)) {
        Value r = repeat<ListObj>(seq->as<ListObj>()->items, count, Kind::List);
        if (!inplace || seq != &a) return r;
        a.as<ListObj>()->items = std::move(r.as<ListObj>()->items);  // l *= n: the same list
        return a;
      }
      if (seq->is(Kind::Tuple)) return repeat<TupleObj>(seq->as<TupleObj>()->items, count, Kind::Tuple);
    }
    for (const Value* v : {&a, &b})
      if (v->is(Kind::Str) || v->is(Kind::List) || v->is(Kind::Tuple))
        throw_error(ErrorKind::TypeError,
                    "can't multiply sequence by non-int of type '" + type_name(v == &a ? b : a) + "'");
  }
  if (op == BinOp::ADD && (a.is(Kind::List) || a.is(Kind::Tuple)))
    throw_error(ErrorKind::TypeError, "can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                                          type_name(a));
  unsupported(binop_symbol(op), inplace, a, b);
}

// Three-way ordering for <, <=, >, >= on non-tensor values.
static int order(CmpOp op, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is(Kind::Float) || b.is(Kind::Float)) {
      double x = a.as_number(), y = b.as_number();
      return x < y ? -1 : (x > y ? 1 : (x == y ? 0 : 2));  // 2: unordered (nan)
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is(Kind::Str) && b.is(Kind::Str)) {
    int c = a.as_str().compare(b.as_str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if ((a.is(Kind::Tuple) && b.is(Kind::Tuple)) || (a.is(Kind::List) && b.is(Kind::List))) {
    const auto& x = a.is(Kind::Tuple) ? a.as<TupleObj>()->items : a.as<ListObj>()->items;
    const auto& y = b.is(Kind::Tuple) ? b.as<TupleObj>()->items : b.as<ListObj>()->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!values_equal(x[i], y[i])) return order(op, x[i], y[i]);
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw_error(ErrorKind::TypeError, std::string("'") + cmpop_symbol(op) + "' not supported between instances of '" +
                                        type_name(a) + "' and '" + type_name(b) + "'");
}

Value compare_op(CmpOp op, const Value& a, const Value& b) {
  if (a.is(Kind::Int) && b.is(Kind::Int)) {
    int64_t x = a.as_int(), y = b.as_int();
    switch (op) {
      case CmpOp::LT: return Value::boolean(x < y);
      case CmpOp::LE: return Value::boolean(x <= y);
      case CmpOp::EQ: return Value::boolean(x == y);
      case CmpOp::NE: return Value::boolean(x != y);
      case CmpOp::GT: return Value::boolean(x > y);
      case CmpOp::GE: return Value::boolean(x >= y);
      default: break;
    }
  }
  switch (op) {
    case CmpOp::IS: return Value::boolean(a.is_same(b));
    case CmpOp::IS_NOT: return Value::boolean(!a.is_same(b));
    case CmpOp::IN: return Value::boolean(contains(b, a));
    case CmpOp::NOT_IN: return Value::boolean(!contains(b, a));
    default: break;
  }
  if (a.is(Kind::Tensor) || b.is(Kind::Tensor)) return call_tensor_op(tensor_slots().op_for_compare(op), {a, b});
  if (a.is(Kind::Foreign)) {
    auto* f = a.as<ForeignObj>();
    if (f->vt->compare) return f->vt->compare(f->handle, int(op), b);
  } else if (b.is(Kind::Foreign)) {
    auto* f = b.as<ForeignObj>();
    if (f->vt->compare) return f->vt->compare(f->handle, int(reflected_cmpop(op)), a);
  }
  if (op == CmpOp::EQ) return Value::boolean(values_equal(a, b));
  if (op == CmpOp::NE) return Value::boolean(!values_equal(a, b));
  if (Value r = set_compare(op, a, b); !r.is_null()) return r;
  int c = order(op, a, b);
  switch (op) {
    case CmpOp::LT: return Value::boolean(c == -1);
    case CmpOp::LE: return Value::boolean(c == -1 || c == 0);
    case CmpOp::GT: return Value::boolean(c == 1);
    case CmpOp::GE: return Value::boolean(c == 1 || c == 0);
    default: return Value::boolean(false);
  }
}

Value unary_op(UnOp op, const Value& a) {
  if (a.is(Kind::Foreign) && op != UnOp::NOT)
    if (auto* f = a.as<ForeignObj>(); f->vt->unary_op) return f->vt->unary_op(f->handle, int(op));
  if (op == UnOp::NOT) return Value::boolean(!truth(a));
  if (a.is(Kind::Tensor)) {
    if (op == UnOp::POS) return a;
    return call_tensor_op(tensor_slots().op_for_unary(op), {a});
  }
  if (a.is(Kind::Int) || a.is(Kind::Bool)) {
    int64_t x = a.as_int();
    switch (op) {
      case UnOp::NEG:
        if (x == INT64_MIN) {
          if (installed_bigint_hooks) return installed_bigint_hooks->binary(BinOp::SUB, 0, x);
          overflow_error("unary -");
        }
        return Value::integer(-x);
      case UnOp::POS: return Value::integer(x);
      case UnOp::INVERT: return Value::integer(~x);
      default: break;
    }
  }
  if (a.is(Kind::Float)) {
    if (op == UnOp::NEG) return Value::floating(-a.as_float());
    if (op == UnOp::POS) return a;
  }
  throw_error(ErrorKind::TypeError,
              std::string("bad operand type for unary ") + unop_symbol(op) + ": '" + type_name(a) + "'");
}

// dict keys hash and compare by the functions above (value/value.h).
namespace {
const bool key_semantics_installed = (set_key_semantics({value_hash, values_equal}), true);
}  // namespace
// runtime/CMakeLists.txt asks every link for this symbol, which keeps this
// object, and so the initialiser above, in it.
extern "C" const bool* kiln_key_semantics_anchor() { return &key_semantics_installed; }

}  // namespace kiln::runtime

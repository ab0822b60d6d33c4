// The global builtins of every KBC program.
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/census.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "runtime/base/host_python.h"
#include "runtime/semantics/class_model.h"
#include "runtime/semantics/descriptors.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/format.h"
#include "runtime/semantics/kind_slots.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/signature.h"
#include "runtime/semantics/super.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::runtime {

namespace {

// ---- Python builtins ----------------------------------------------------------

Value b_len(CallContext&, const std::vector<Value>& a) { return Value::integer(length(a[0])); }

Value b_range(CallContext&, const std::vector<Value>& a) {
  if (a[1].is_none()) return make_range(0, as_index(a[0]), 1);
  return make_range(as_index(a[0]), as_index(a[1]), as_index(a[2]));
}

struct EnumerateIter final : IteratorObj {
  Value inner;
  int64_t count;
  bool next(Value& out) override {
    Value item;
    if (!inner.as<IteratorObj>()->next(item)) return false;
    out = make_tuple({Value::integer(count++), item});
    return true;
  }
  void traverse(Visitor& v) const override { visit(v, inner); }
};
Value b_enumerate(CallContext&, const std::vector<Value>& a) {
  auto it = make_ref<EnumerateIter>();
  it->inner = get_iter(a[0]);
  it->count = as_index(a[1]);
  return Value::object(Kind::Iterator, static_cast<Object*>(it.get()));
}

struct ZipIter final : IteratorObj {
  std::vector<Value> inners;
  bool strict = false;
  bool next(Value& out) override {
    if (inners.empty()) return false;
    std::vector<Value> items(inners.size());
    for (size_t i = 0; i < inners.size(); ++i)
      if (!inners[i].as<IteratorObj>()->next(items[i])) {
        if (strict) zip_check_strict(i, inners.size(), [&](size_t j) { return inners[j].as<IteratorObj>()->next(items[j]); });
        return false;
      }
    out = make_tuple(std::move(items));
    return true;
  }
  void traverse(Visitor& v) const override { visit(v, inners); }
};
Value b_zip(CallContext&, const std::vector<Value>& a) {
  auto it = make_ref<ZipIter>();
  for (const Value& x : a[0].as<TupleObj>()->items) it->inners.push_back(get_iter(x));
  it->strict = truth(a[1]);
  return Value::object(Kind::Iterator, static_cast<Object*>(it.get()));
}

Value b_print(CallContext& ctx, const std::vector<Value>& a) {
  std::string sep = a[1].is_none() ? " " : to_str(a[1]);
  std::string end = a[2].is_none() ? "\n" : to_str(a[2]);
  std::string out;
  const auto& items = a[0].as<TupleObj>()->items;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + to_str(items[i]);
  ctx.write_stdout(out + end);
  return Value::none();
}

bool is_class_like(const Value& v);  // below, with issubclass

bool isinstance_one(const Value& obj, const Value& type) {
  if (exception_class_kind(type)) return exception_isinstance(obj, type);
  if (type.is(Kind::Foreign)) {
    auto* f = type.as<ForeignObj>();
    if (f->vt->instance_check) return f->vt->instance_check(f->handle, obj, false);
    if (f->vt->exception_match) return exception_isinstance(obj, type);
  }
  if (type.is(Kind::Class))
    return obj.is(Kind::Module) && obj.as<ModuleObj>()->cls->is_subclass_of(type.as<ClassObj>());
  // isinstance(x, type): x is a class. A host's object asks its class
  // (typing's checks: isinstance(expected_type, type)).
  if (is_type_builtin(type)) {
    if (obj.is(Kind::Foreign)) {
      const auto* f = obj.as<ForeignObj>();
      const Value cls = f->vt->getattr ? f->vt->getattr(f->handle, "__class__") : Value::null();
      return cls.is(Kind::Foreign) && cls.as<ForeignObj>()->vt->subclass_of &&
             cls.as<ForeignObj>()->vt->subclass_of(cls.as<ForeignObj>()->handle, type);
    }
    return is_class_like(obj);
  }
  if (type.is(Kind::Builtin)) {
    Kind k = type.as<BuiltinObj>()->type_of;
    if (k == Kind::Null)
      throw_error(ErrorKind::TypeError, "isinstance() arg 2 must be a type, a tuple of types, or a union");
    if (k == Kind::Int) return obj.is(Kind::Int) || obj.is(Kind::Bool);  // bool is an int
    return obj.kind() == k;
  }
  if (type.is(Kind::Tuple)) {
    for (const Value& t : type.as<TupleObj>()->items)
      if (isinstance_one(obj, t)) return true;
    return false;
  }
  throw_error(ErrorKind::TypeError, "isinstance() arg 2 must be a type, a tuple of types, or a union");
}
Value b_isinstance(CallContext&, const std::vector<Value>& a) { return Value::boolean(isinstance_one(a[0], a[1])); }

// min/max(*args, key=None, default=?): the first of the best items, as in
// CPython (ties keep the earlier item).
Value min_max(CallContext& ctx, const std::vector<Value>& a, CmpOp better, const char* name) {
  std::vector<Value> items = a[0].as<TupleObj>()->items;
  if (items.empty())
    throw_error(ErrorKind::TypeError, std::string(name) + " expected at least 1 argument, got 0");
  if (items.size() == 1) items = to_vector(items[0]);
  else if (!a[2].is_null())
    throw_error(ErrorKind::TypeError,
                std::string("Cannot specify a default for ") + name + "() with multiple positional arguments");
  if (items.empty()) {
    if (!a[2].is_null()) return a[2];
    throw_error(ErrorKind::ValueError, std::string(name) + (host_python().minor >= 12 ? "() iterable argument is empty"
                                                                                       : "() arg is an empty sequence"));
  }
  const bool keyed = !a[1].is_none();
  Value best = items[0];
  Value best_key = keyed ? ctx.call(a[1], {best}) : best;
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = keyed ? ctx.call(a[1], {items[i]}) : items[i];
    if (truth(compare_op(better, k, best_key))) {
      best = items[i];
      best_key = std::move(k);
    }
  }
  return best;
}
Value b_min(CallContext& ctx, const std::vector<Value>& a) { return min_max(ctx, a, CmpOp::LT, "min"); }
Value b_max(CallContext& ctx, const std::vector<Value>& a) { return min_max(ctx, a, CmpOp::GT, "max"); }

// abs / sum / pow are both Python builtins and registry ops: tensors go to
// the op, everything else gets Python's meaning.
Value b_abs(CallContext&, const std::vector<Value>& a) {
  const Value& x = a[0];
  if (x.is(Kind::Tensor)) {
    static const int abs_op = tensor_op_id("abs");
    return call_tensor_op(abs_op, {x});
  }
  if (x.is(Kind::Float)) return Value::floating(std::fabs(x.as_float()));
  if (x.is(Kind::Int) || x.is(Kind::Bool)) {
    if (x.as_int() == INT64_MIN) throw_error(ErrorKind::OverflowError, "integer overflow in abs()");
    return Value::integer(std::llabs(x.as_int()));
  }
  throw_error(ErrorKind::TypeError, "bad operand type for abs(): '" + type_name(x) + "'");
}
// Python's sum(iterable, /, start=0): start + x0 + x1 + ... (a tensor is
// iterated over its rows, as CPython does).
// From 3.12, CPython adds a run of floats (and ints, as doubles) with
// Neumaier's compensation once the running total is a float, and adds the
// compensation back when the run ends (bltinmodule.c builtin_sum_impl); 3.11
// adds them one by one, which the generic loop does.
namespace {
bool add_compensated(IteratorObj& it, Value& total, Value& item) {
  double sum = total.as_float(), c = 0.0;
  bool more;
  while ((more = it.next(item))) {
    if (item.is(Kind::Float)) {
      const double x = item.as_float(), t = sum + x;
      c += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
      sum = t;
    } else if (item.is(Kind::Int) || item.is(Kind::Bool)) {
      sum += double(item.as_int());
    } else {
      break;
    }
  }
  if (c != 0.0 && std::isfinite(c)) sum += c;  // keeps -0.0, and inf/nan from the compensation
  total = Value::floating(sum);
  return more;  // item holds the value that ended the run
}
}  // namespace

Value python_sum(const Value& iterable, Value total) {
  if (total.is(Kind::Str)) throw_error(ErrorKind::TypeError, "sum() can't sum strings [use ''.join(seq) instead]");
  Value it = get_iter(iterable);
  auto& iter = *it.as<IteratorObj>();
  Value item;
  // CPython's order: a run of ints while the total is an int, then (3.12+)
  // a compensated run of floats if the total is a float by then, then one
  // add at a time; a total that becomes a float later stays on the last.
  if (total.is(Kind::Int)) {
    while (true) {
      if (!iter.next(item)) return total;
      const bool int_item = item.is(Kind::Int) || item.is(Kind::Bool);
      total = binary_op(BinOp::ADD, total, item);
      if (!int_item || !total.is(Kind::Int)) break;
    }
  }
  if (host_python().minor >= 12 && total.is(Kind::Float)) {
    if (!add_compensated(iter, total, item)) return total;
    total = binary_op(BinOp::ADD, total, item);
  }
  while (iter.next(item)) total = binary_op(BinOp::ADD, total, item);
  return total;
}
Value b_sum(CallContext&, const std::vector<Value>& a) { return python_sum(a[0], a[1]); }
// KBC's sum (kbc_dispatching below): the registry op on a tensor, with
// sum(t, 1) / sum(t, dim=1) the op's dim; Python's sum otherwise.
Value b_kbc_sum(CallContext&, const std::vector<Value>& a) {
  if (a[0].is(Kind::Tensor)) {
    if (!a[1].is_null() && !a[3].is_null())
      throw_error(ErrorKind::TypeError, "sum() got multiple values for argument 'dim'");
    Value dim = !a[3].is_null() ? a[3] : a[1].is_null() ? Value::none() : a[1];
    Value args[] = {a[0], dim, a[2]};
    static const Value names = census::permanent_value(make_tuple({intern_value("dim"), intern_value("keepdim")}));
    static const int sum_op = tensor_op_id("sum");
    return tensor_slots().call_op(sum_op, CallArgs{args, 3, names.as<TupleObj>()});
  }
  return python_sum(a[0], a[1].is_null() ? Value::integer(0) : a[1]);
}
Value b_pow(CallContext&, const std::vector<Value>& a) { return binary_op(BinOp::POW, a[0], a[1]); }

Value b_getattr(CallContext& ctx, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str)) throw_error(ErrorKind::TypeError, "getattr(): attribute name must be string");
  auto name = intern(a[1].as_str());
  if (a[2].is_null()) return get_attr(ctx, a[0], name.get());
  Value v = get_attr_or_null(ctx, a[0], name.get());
  return v.is_null() ? a[2] : v;
}
Value b_setattr(CallContext& ctx, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str)) throw_error(ErrorKind::TypeError, "setattr(): attribute name must be string");
  set_attr(ctx, a[0], intern(a[1].as_str()), a[2]);
  return Value::none();
}
Value b_hasattr(CallContext& ctx, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str)) throw_error(ErrorKind::TypeError, "hasattr(): attribute name must be string");
  return Value::boolean(!get_attr_or_null(ctx, a[0], intern(a[1].as_str()).get()).is_null());
}

Value parse_int(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  while (end && *end == ' ') ++end;
  if (s.empty() || *end != '\0' || errno == ERANGE)
    throw_error(ErrorKind::ValueError, "invalid literal for int() with base 10: " + repr(Value::str(s)));
  return Value::integer(v);
}
// int(s, base): CPython's rules (2..36 or 0 = by prefix; a 0x/0o/0b prefix
// matching the base; underscores between digits; surrounding whitespace).
Value parse_int_base(const std::string& text, int64_t base) {
  auto invalid = [&]() -> Value {
    throw_error(ErrorKind::ValueError,
                "invalid literal for int() with base " + std::to_string(base) + ": " + repr(Value::str(text)));
  };
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  bool negative = false;
  if (b < e && (text[b] == '+' || text[b] == '-')) negative = text[b++] == '-';
  int64_t radix = base;
  if (b + 1 < e && text[b] == '0') {
    const char p = char(std::tolower(static_cast<unsigned char>(text[b + 1])));
    const int64_t prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed && (base == 0 || base == prefixed)) {
      radix = prefixed;
      b += 2;
      if (b < e && text[b] == '_') ++b;
    }
  }
  if (radix == 0) {
    radix = 10;  // base 0 without a prefix: decimal, and no leading zeros but 0 itself
    for (size_t k = b; k < e; ++k)
      if (text[k] != '0' && text[k] != '_') {
        if (text[b] == '0') invalid();
        break;
      }
  }
  if (b >= e) invalid();
  int64_t v = 0;
  bool prev_digit = false;
  for (size_t k = b; k < e; ++k) {
    const char c = text[k];
    if (c == '_') {
      if (!prev_digit) invalid();
      prev_digit = false;
      continue;
    }
    const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                  : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(static_cast<unsigned char>(c)) - 'a' + 10
                                                                 : 99;
    if (d >= radix) invalid();
    if (__builtin_mul_overflow(v, radix, &v) || __builtin_add_overflow(v, d, &v)) {
      if (const BigIntHooks* h = bigint_hooks()) {  // the embedder's exact int
        const Value args[] = {Value::str(text), Value::integer(base)};
        if (Value r = h->call_builtin("int", CallArgs{args, 2, nullptr}); !r.is_null()) return r;
      }
      throw_error(ErrorKind::OverflowError, "int too large for kiln");
    }
    prev_digit = true;
  }
  if (!prev_digit) invalid();
  return Value::integer(negative ? -v : v);
}
Value b_int(CallContext&, const std::vector<Value>& a) {
  const Value& x = a[0];
  if (!a[1].is_null()) {
    if (!a[1].is(Kind::Int) && !a[1].is(Kind::Bool))
      throw_error(ErrorKind::TypeError, "'" + type_name(a[1]) + "' object cannot be interpreted as an integer");
    const int64_t base = a[1].as_int();
    if (!x.is(Kind::Str)) throw_error(ErrorKind::TypeError, "int() can't convert non-string with explicit base");
    if (base != 0 && (base < 2 || base > 36))
      throw_error(ErrorKind::ValueError, "int() base must be >= 2 and <= 36, or 0");
    return parse_int_base(x.as_str(), base);
  }
  if (x.is(Kind::Int)) return x;
  if (x.is(Kind::Bool)) return Value::integer(x.as_int());
  if (x.is(Kind::Float)) {
    double d = x.as_float();
    if (std::isnan(d)) throw_error(ErrorKind::ValueError, "cannot convert float NaN to integer");
    if (std::isinf(d)) throw_error(ErrorKind::OverflowError, "cannot convert float infinity to integer");
    if (std::fabs(d) >= 9.223372036854775807e18) {
      if (const BigIntHooks* h = bigint_hooks()) return h->from_double(d);
      throw_error(ErrorKind::OverflowError, "int too large for kiln");
    }
    return Value::integer(int64_t(d));
  }
  if (x.is(Kind::Str)) return parse_int(x.as_str());
  if (x.is(Kind::Tensor)) {
    Tensor t = x.as_tensor();
    return Value::integer(int64_t(t.item()));
  }
  throw_error(ErrorKind::TypeError, "int() argument must be a string or a number, not '" + type_name(x) + "'");
}
Value b_float(CallContext&, const std::vector<Value>& a) {
  const Value& x = a[0];
  if (x.is_number()) return Value::floating(x.as_number());
  if (x.is(Kind::Tensor)) return Value::floating(x.as_tensor().item());
  if (x.is(Kind::Str)) {
    const std::string& s = x.as_str();
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0')
      throw_error(ErrorKind::ValueError, "could not convert string to float: " + repr(x));
    return Value::floating(d);
  }
  throw_error(ErrorKind::TypeError, "float() argument must be a string or a number, not '" + type_name(x) + "'");
}
Value b_bool(CallContext&, const std::vector<Value>& a) { return Value::boolean(truth(a[0])); }
Value b_str(CallContext&, const std::vector<Value>& a) { return Value::str(to_str(a[0])); }
Value b_repr(CallContext&, const std::vector<Value>& a) { return Value::str(repr(a[0])); }
Value b_list(CallContext&, const std::vector<Value>& a) {
  return make_list(a[0].is_null() ? std::vector<Value>{} : to_vector(a[0]));
}
Value b_tuple(CallContext&, const std::vector<Value>& a) {
  if (a[0].is(Kind::Tuple)) return a[0];
  return make_tuple(a[0].is_null() ? std::vector<Value>{} : to_vector(a[0]));
}
Value b_set(CallContext&, const std::vector<Value>& a) {
  return a[0].is_null() ? make_set(false) : set_from(a[0], false);
}
Value b_frozenset(CallContext&, const std::vector<Value>& a) {
  if (a[0].is(Kind::FrozenSet)) return a[0];  // immutable: frozenset(fs) is fs, as in CPython
  return a[0].is_null() ? make_set(true) : set_from(a[0], true);
}
Value b_format(CallContext&, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str))
    throw_error(ErrorKind::TypeError, "format() argument 2 must be str, not " + type_name(a[1]));
  return Value::str(format_value(a[0], a[1].as_str()));
}
Value b_ascii(CallContext&, const std::vector<Value>& a) { return Value::str(ascii_repr(a[0])); }
Value b_dict(CallContext&, const std::vector<Value>& a) {
  Value d = make_dict();
  if (!a[0].is_null()) dict_update(d.as<DictObj>(), a[0]);
  dict_update(d.as<DictObj>(), a[1]);
  return d;
}

// sorted(iterable, *, key=None, reverse=False): stable, and stable under
// reverse too (CPython reverses, sorts, reverses back).
Value b_sorted(CallContext& ctx, const std::vector<Value>& a) {
  std::vector<Value> items = to_vector(a[0]);
  const bool reverse = truth(a[2]);
  std::vector<Value> keys;
  if (!a[1].is_none())
    for (const Value& x : items) keys.push_back(ctx.call(a[1], {x}));
  else keys = items;
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (reverse) std::reverse(order.begin(), order.end());
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return truth(compare_op(CmpOp::LT, keys[x], keys[y])); });
  if (reverse) std::reverse(order.begin(), order.end());
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(items[i]);
  return make_list(std::move(out));
}
Value b_reversed(CallContext&, const std::vector<Value>& a) {
  std::vector<Value> items = to_vector(a[0]);
  std::reverse(items.begin(), items.end());
  return get_iter(make_list(std::move(items)));
}
Value b_any(CallContext&, const std::vector<Value>& a) {
  for (const Value& v : to_vector(a[0]))
    if (truth(v)) return Value::boolean(true);
  return Value::boolean(false);
}
Value b_all(CallContext&, const std::vector<Value>& a) {
  for (const Value& v : to_vector(a[0]))
    if (!truth(v)) return Value::boolean(false);
  return Value::boolean(true);
}
Value b_iter(CallContext&, const std::vector<Value>& a) { return get_iter(a[0]); }
Value b_next(CallContext&, const std::vector<Value>& a) {
  if (!a[0].is(Kind::Iterator)) throw_error(ErrorKind::TypeError, "'" + type_name(a[0]) + "' object is not an iterator");
  Value out;
  if (a[0].as<IteratorObj>()->next(out)) return out;
  if (!a[1].is_null()) return a[1];
  throw_error(ErrorKind::StopIteration, "");
}

// round(number, ndigits=None), with CPython's exact results: ints and
// floats round half to even; a float with ndigits rounds its exact binary
// value (what CPython's dtoa does), so round(2.675, 2) is 2.67.
[[noreturn]] void not_an_integer(const Value& v) {
  throw_error(ErrorKind::TypeError, "'" + type_name(v) + "' object cannot be interpreted as an integer");
}
int64_t int_arg(const Value& v) {
  if (!v.is(Kind::Int) && !v.is(Kind::Bool)) not_an_integer(v);
  return v.as_int();
}
double round_float_digits(double x, int64_t ndigits) {
  if (!std::isfinite(x) || x == 0) return x;
  if (ndigits > 330) return x;                           // finer than any double's last digit
  if (ndigits < -330) return std::copysign(0.0, x);      // coarser than the largest double
  // Every double's decimal expansion is exact in at most 1074 fractional
  // digits; glibc prints it exactly.
  static thread_local std::vector<char> buf(1500);
  std::snprintf(buf.data(), buf.size(), "%.1080f", std::fabs(x));
  std::string text(buf.data());
  const size_t dot = text.find('.');
  std::string digits = text.substr(0, dot) + text.substr(dot + 1);
  const int64_t keep = int64_t(dot) + ndigits;  // digits left of the rounding position
  if (keep < 0) return std::copysign(0.0, x);
  if (keep >= int64_t(digits.size())) return x;
  const char first = digits[size_t(keep)];
  bool up = first > '5';
  if (first == '5') {
    const bool tail = digits.find_first_not_of('0', size_t(keep) + 1) != std::string::npos;
    up = tail || (keep > 0 && (digits[size_t(keep) - 1] - '0') % 2 == 1);
  }
  std::string kept = keep > 0 ? digits.substr(0, size_t(keep)) : "0";
  if (up) {
    int64_t i = int64_t(kept.size()) - 1;
    for (; i >= 0 && kept[size_t(i)] == '9'; --i) kept[size_t(i)] = '0';
    if (i < 0) kept.insert(kept.begin(), '1');
    else ++kept[size_t(i)];
  }
  const double r = std::strtod((kept + "e" + std::to_string(int64_t(dot) - keep)).c_str(), nullptr);
  if (std::isinf(r)) throw_error(ErrorKind::OverflowError, "rounded value too large to represent");
  return std::copysign(r, x);
}
Value b_round(CallContext&, const std::vector<Value>& a) {
  const Value& x = a[0];
  const bool has_digits = !a[1].is_none();
  if (x.is(Kind::Int) || x.is(Kind::Bool)) {
    const int64_t v = x.as_int();
    if (!has_digits) return Value::integer(v);
    const int64_t nd = int_arg(a[1]);
    if (nd >= 0) return Value::integer(v);
    if (nd < -18) return Value::integer(0);  // |v| < 10**19 <= 10**-nd / 2... rounds to 0 (half-even at exactly half)
    int64_t p = 1;
    for (int64_t i = 0; i < -nd; ++i) p *= 10;
    int64_t q = v / p, r = v % p;
    if (r < 0) { r += p; --q; }  // floor division
    if (2 * r > p || (2 * r == p && q % 2 != 0)) ++q;
    if (int64_t out; !__builtin_mul_overflow(q, p, &out)) return Value::integer(out);
    if (const BigIntHooks* h = bigint_hooks()) return h->binary(BinOp::MUL, q, p);
    throw_error(ErrorKind::OverflowError, "int too large for kiln");
  }
  if (x.is(Kind::Float)) {
    const double d = x.as_float();
    if (has_digits) return Value::floating(round_float_digits(d, int_arg(a[1])));
    if (std::isnan(d)) throw_error(ErrorKind::ValueError, "cannot convert float NaN to integer");
    if (std::isinf(d)) throw_error(ErrorKind::OverflowError, "cannot convert float infinity to integer");
    const double r = std::nearbyint(d);  // the default rounding mode: half to even
    if (std::fabs(r) >= 9.223372036854775807e18) {
      if (const BigIntHooks* h = bigint_hooks()) return h->from_double(r);
      throw_error(ErrorKind::OverflowError, "int too large for kiln");
    }
    return Value::integer(int64_t(r));
  }
  throw_error(ErrorKind::TypeError, "type " + type_name(x) + " doesn't define __round__ method");
}

// type(obj): the type object kiln's own names stand for (`type(1) is int`),
// a module's class, a Python object's own type.
Value hidden_type(Kind k, const char* name = nullptr) {
  // Types without a constructor (NoneType, function, Tensor, ...): made
  // once each.
  static std::vector<Value> types(64);
  Value& t = types[size_t(k)];
  if (t.is_none()) {
    t = make_builtin(name ? name : kind_name(k), [](CallContext&, const BuiltinObj& self, const CallArgs&) -> Value {
      throw_error(ErrorKind::TypeError, "cannot create '" + self.name + "' instances");
    });
    t.as<BuiltinObj>()->type_of = k;
    census::permanent_value(t);
  }
  return t;
}
Value type_of_value(CallContext& ctx, const Value& v) {
  if (ExceptionData* e = exception_data(v)) {
    if (!e->foreign.is_null()) return type_of_value(ctx, e->foreign);
    return exception_class(e->kind);
  }
  static const Ref<StrObj> class_name = intern("__class__");
  switch (v.kind()) {
    case Kind::Module: return Value::object(Kind::Class, v.as<ModuleObj>()->cls);
    case Kind::Foreign: return get_attr(ctx, v, class_name.get());
    case Kind::Class: return hidden_type(Kind::Class);  // `type`
    case Kind::Builtin:
      if (v.as<BuiltinObj>()->type_of != Kind::Null || exception_class_kind(v) || v.as<BuiltinObj>()->name == "type")
        return hidden_type(Kind::Class);  // a type (type itself too)
      return hidden_type(Kind::Builtin, "builtin_function_or_method");
    default: break;
  }
  for (const char* name : {"bool", "int", "float", "str", "tuple", "list", "dict", "set", "frozenset", "slice",
                           "range", "Tensor"}) {
    const Value* t = builtins().find(name);
    if (t && t->as<BuiltinObj>()->type_of == v.kind()) return *t;
  }
  return hidden_type(v.kind());
}
Value b_type(CallContext& ctx, const std::vector<Value>& a) { return type_of_value(ctx, a[0]); }

// map() and filter() are lazy, as in Python: the function runs as the
// iterator advances (interleaved with the loop body that consumes it), on
// whichever kiln context is running then.
CallContext& running_context(const char* who) {
  CallContext* ctx = CallContext::current();
  if (!ctx) throw_error(ErrorKind::RuntimeError, std::string(who) + " iterator advanced outside kiln code");
  return *ctx;
}
struct MapIter final : IteratorObj {
  Value fn;
  std::vector<Value> inners;
  bool next(Value& out) override {
    std::vector<Value> items(inners.size());
    for (size_t i = 0; i < inners.size(); ++i)
      if (!inners[i].as<IteratorObj>()->next(items[i])) return false;
    out = running_context("map()").call(fn, CallArgs{items.data(), items.size(), nullptr});
    return true;
  }
  void traverse(Visitor& v) const override {
    visit(v, fn);
    visit(v, inners);
  }
  void clear() override { fn = Value::none(); }
};
Value b_map(CallContext&, const std::vector<Value>& a) {
  auto it = make_ref<MapIter>();
  it->fn = a[0];
  it->inners.push_back(get_iter(a[1]));
  for (const Value& x : a[2].as<TupleObj>()->items) it->inners.push_back(get_iter(x));
  return Value::object(Kind::Iterator, static_cast<Object*>(it.get()));
}
struct FilterIter final : IteratorObj {
  Value fn;  // None: the items' own truth
  Value inner;
  bool next(Value& out) override {
    Value item;
    while (inner.as<IteratorObj>()->next(item)) {
      const bool keep = fn.is_none() ? truth(item) : truth(running_context("filter()").call(fn, {item}));
      if (keep) {
        out = std::move(item);
        return true;
      }
    }
    return false;
  }
  void traverse(Visitor& v) const override {
    visit(v, fn);
    visit(v, inner);
  }
  void clear() override { fn = Value::none(); }
};
Value b_filter(CallContext&, const std::vector<Value>& a) {
  auto it = make_ref<FilterIter>();
  it->fn = a[0];
  it->inner = get_iter(a[1]);
  return Value::object(Kind::Iterator, static_cast<Object*>(it.get()));
}

Value b_ord(CallContext&, const std::vector<Value>& a) {
  if (!a[0].is(Kind::Str))
    throw_error(ErrorKind::TypeError, "ord() expected string of length 1, but " + type_name(a[0]) + " found");
  const std::u32string cps = utf8_decode(a[0].as_str());
  if (cps.size() != 1)
    throw_error(ErrorKind::TypeError,
                "ord() expected a character, but string of length " + std::to_string(cps.size()) + " found");
  return Value::integer(int64_t(cps[0]));
}
Value b_chr(CallContext&, const std::vector<Value>& a) {
  const int64_t i = int_arg(a[0]);
  if (i < 0 || i > 0x10FFFF) throw_error(ErrorKind::ValueError, "chr() arg not in range(0x110000)");
  return Value::str(utf8_encode(char32_t(i)));
}
Value b_divmod(CallContext&, const std::vector<Value>& a) {
  if (!a[0].is_number() || !a[1].is_number())
    throw_error(ErrorKind::TypeError, "unsupported operand type(s) for divmod(): '" + type_name(a[0]) + "' and '" +
                                          type_name(a[1]) + "'");
  if ((a[0].is(Kind::Float) || a[1].is(Kind::Float)) && a[1].as_number() == 0)
    throw_error(ErrorKind::ZeroDivisionError, "float divmod()");
  return make_tuple({binary_op(BinOp::FLOORDIV, a[0], a[1]), binary_op(BinOp::MOD, a[0], a[1])});
}
Value b_callable(CallContext& ctx, const std::vector<Value>& a) {
  static const Ref<StrObj> call_name = intern("__call__");
  switch (a[0].kind()) {
    case Kind::Function:
    case Kind::BoundMethod:
    case Kind::Builtin:
    case Kind::Class:
    case Kind::Module: return Value::boolean(true);
    case Kind::Foreign: return Value::boolean(!get_attr_or_null(ctx, a[0], call_name.get()).is_null());
    default: return Value::boolean(false);
  }
}

// bin/oct/hex: Python's spelling of an int in base 2/8/16.
Value int_in_base(const Value& v, int shift, const char* prefix) {
  const int64_t i = int_arg(v);
  uint64_t u = i < 0 ? uint64_t(0) - uint64_t(i) : uint64_t(i);
  const char* digits = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), digits[u & ((1u << shift) - 1)]);
    u >>= shift;
  } while (u);
  return Value::str((i < 0 ? "-" : "") + std::string(prefix) + out);
}
Value b_bin(CallContext&, const std::vector<Value>& a) { return int_in_base(a[0], 1, "0b"); }
Value b_oct(CallContext&, const std::vector<Value>& a) { return int_in_base(a[0], 3, "0o"); }
Value b_hex(CallContext&, const std::vector<Value>& a) { return int_in_base(a[0], 4, "0x"); }

// id(): an object's address, as in CPython (a foreign object's handle is
// its owner's object, so a Python object's is Python's id). A number, bool
// or None has no object here: an odd number (no address is odd) mixed from
// its kind and bits, the same for equal immediates of one kind.
Value b_id(CallContext&, const std::vector<Value>& a) {
  if (a[0].is_heap()) return Value::integer(int64_t(reinterpret_cast<uintptr_t>(object_identity(a[0]))));
  uint64_t bits = a[0].is(Kind::Float) ? std::bit_cast<uint64_t>(a[0].as_float()) : uint64_t(a[0].as_int());
  bits = (bits ^ (uint64_t(a[0].kind()) << 56)) * 0x9E3779B97F4A7C15ull;
  return Value::integer(int64_t((bits ^ (bits >> 31)) | 1) & INT64_MAX);
}

// Python's slice(stop) / slice(start, stop[, step]), with its own errors.
Value python_slice(const std::vector<Value>& pos, bool keywords) {
  if (keywords) throw_error(ErrorKind::TypeError, "slice() takes no keyword arguments");
  if (pos.empty()) throw_error(ErrorKind::TypeError, "slice expected at least 1 argument, got 0");
  if (pos.size() > 3)
    throw_error(ErrorKind::TypeError, "slice expected at most 3 arguments, got " + std::to_string(pos.size()));
  if (pos.size() == 1) return make_slice(Value::none(), pos[0], Value::none());
  return make_slice(pos[0], pos[1], pos.size() == 3 ? pos[2] : Value::none());
}
Value b_slice(CallContext&, const std::vector<Value>& a) {
  return python_slice(a[0].as<TupleObj>()->items, !a[1].as<DictObj>()->entries.empty());
}
// KBC's slice (kbc_dispatching below): the registry op when the first
// argument is a tensor (slice(x, dim, start, end, step)), Python's otherwise.
Value b_kbc_slice(CallContext&, const std::vector<Value>& a) {
  const auto& pos = a[0].as<TupleObj>()->items;
  const auto& kw = a[1].as<DictObj>()->entries;
  if (!pos.empty() && pos[0].is(Kind::Tensor)) {
    std::vector<Value> args = pos;
    std::vector<Value> names;
    for (const auto& [k, v] : kw) {
      names.push_back(k);
      args.push_back(v);
    }
    Value kwnames = make_tuple(std::move(names));
    static const int slice_op = tensor_op_id("slice");
    return tensor_slots().call_op(slice_op,
                                  CallArgs{args.data(), args.size(), kw.empty() ? nullptr : kwnames.as<TupleObj>()});
  }
  return python_slice(pos, !kw.empty());
}

bool is_class_like(const Value& v) {
  return v.is(Kind::Class) || (v.is(Kind::Builtin) && v.as<BuiltinObj>()->type_of != Kind::Null) ||
         exception_class_kind(v).has_value() || (v.is(Kind::Foreign) && v.as<ForeignObj>()->vt->instance_check) ||
         is_type_builtin(v);
}
bool issubclass_one(const Value& cls, const Value& info) {
  if (info.is(Kind::Tuple)) {
    for (const Value& t : info.as<TupleObj>()->items)
      if (issubclass_one(cls, t)) return true;
    return false;
  }
  if (info.is(Kind::Foreign) && info.as<ForeignObj>()->vt->instance_check)
    return info.as<ForeignObj>()->vt->instance_check(info.as<ForeignObj>()->handle, cls, true);
  if (!is_class_like(info))
    throw_error(ErrorKind::TypeError, "issubclass() arg 2 must be a class, a tuple of classes, or a union");
  if (cls.is_same(info)) return true;
  // A host's class against kiln's name for a host type (issubclass(C, dict),
  // copy.deepcopy's issubclass(cls, type)): the host answers.
  if (cls.is(Kind::Foreign) && cls.as<ForeignObj>()->vt->subclass_of)
    return cls.as<ForeignObj>()->vt->subclass_of(cls.as<ForeignObj>()->handle, info);
  if (cls.is(Kind::Class) && info.is(Kind::Class)) return cls.as<ClassObj>()->is_subclass_of(info.as<ClassObj>());
  const auto ck = exception_class_kind(cls), ik = exception_class_kind(info);
  if (ck && ik) return error_kind_is(*ck, *ik);
  if (cls.is(Kind::Builtin) && info.is(Kind::Builtin))
    return cls.as<BuiltinObj>()->type_of == Kind::Bool && info.as<BuiltinObj>()->type_of == Kind::Int;
  return false;
}
Value b_issubclass(CallContext&, const std::vector<Value>& a) {
  if (!is_class_like(a[0])) throw_error(ErrorKind::TypeError, "issubclass() arg 1 must be a class");
  return Value::boolean(issubclass_one(a[0], a[1]));
}

// runtime/semantics/descriptors.h and runtime/semantics/super.h
Value b_delattr(CallContext& ctx, const std::vector<Value>& a) { return builtin_delattr(ctx, a); }
Value b_super(CallContext& ctx, const std::vector<Value>& a) { return builtin_super(ctx, a); }

// ---- tensors --------------------------------------------------------------------

Value b_Parameter(CallContext&, const std::vector<Value>& a) {
  if (!a[0].is(Kind::Tensor)) throw_error(ErrorKind::TypeError, "Parameter() expects a Tensor, got " + type_name(a[0]));
  return Value::tensor(a[0].as_tensor().as_parameter());
}
Value b_manual_seed(CallContext&, const std::vector<Value>& a) {
  tensor_slots().manual_seed(uint64_t(to_index(a[0], "manual_seed() seed")));
  return Value::none();
}

// tensor(data, dtype=None): nested lists/tuples of numbers, like torch.tensor.
void flatten_data(const Value& v, size_t depth, Shape& shape, std::vector<Value>& flat) {
  if (v.is(Kind::List) || v.is(Kind::Tuple) || foreign_container(v) == Kind::List) {
    auto items = to_vector(v);
    if (depth == shape.size()) shape.push_back(int64_t(items.size()));
    else if (shape[depth] != int64_t(items.size()))
      throw_error(ErrorKind::ValueError, "tensor(): expected sequence of length " + std::to_string(shape[depth]) +
                                             " at dim " + std::to_string(depth) + " (got " +
                                             std::to_string(items.size()) + ")");
    for (const Value& x : items) flatten_data(x, depth + 1, shape, flat);
    return;
  }
  if (!v.is_number()) throw_error(ErrorKind::TypeError, "tensor(): can't convert '" + type_name(v) + "' to a number");
  if (depth != shape.size())
    throw_error(ErrorKind::ValueError, "tensor(): ragged nested sequence at dim " + std::to_string(depth));
  flat.push_back(v);
}
Value b_tensor(CallContext&, const std::vector<Value>& a) {
  if (a[0].is(Kind::Tensor)) {
    static const int clone_op = tensor_op_id("clone");
    return call_tensor_op(clone_op, {a[0]});
  }
  Shape shape;
  std::vector<Value> flat;
  flatten_data(a[0], 0, shape, flat);
  DType dt = DType::Bool;
  for (const Value& v : flat)
    dt = promote(dt, v.is(Kind::Float) ? kDefaultFloat : v.is(Kind::Int) ? DType::Int64 : DType::Bool);
  if (flat.empty()) dt = kDefaultFloat;
  if (!a[1].is_none()) {
    if (!a[1].is(Kind::Str) || !dtype_from_name(a[1].as_str()))
      throw_error(ErrorKind::TypeError, "tensor(): unknown dtype " + repr(a[1]));
    dt = *dtype_from_name(a[1].as_str());
  }
  Tensor t = Tensor::empty(shape, dt);
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (size_t i = 0; i < flat.size(); ++i)
      p[i] = flat[i].is(Kind::Float) ? T(flat[i].as_float()) : T(flat[i].as_int());
  });
  return Value::tensor(t);
}

// The native of each KILN_NATIVE row (None for Python's own rows).
std::vector<Value>& row_natives() {
  static std::vector<Value> v(static_cast<size_t>(kNumBuiltinRows));
  return v;
}

NameMap build_builtins() {
  NameMap m;
  // Registry ops first; Python builtins of the same name (abs, sum, pow)
  // replace them below with dispatching versions.
  tensor_slots().add_builtins(m);
  struct NativeDef {
    BuiltinId id;
    const char* signature;
    NativeFn fn;
    Kind type_of;
  };
  const NativeDef natives[] = {
#define KILN_NATIVE(name, signature, type_of, how) {BuiltinId::b_##name, signature, b_##name, Kind::type_of},
#define KILN_OWN KILN_NATIVE
#define KILN_PYTHON(name, how)
#include "runtime/semantics/builtins.def"
#undef KILN_NATIVE
#undef KILN_OWN
#undef KILN_PYTHON
  };
  auto native = [](BuiltinId id, const char* signature, NativeFn fn, Kind type_of) {
    const BuiltinRow& row = builtin_row(id);
    Value b = make_native(row.name, signature, fn);
    auto* obj = b.as<BuiltinObj>();
    obj->type_of = type_of;
    obj->how = row.how;
    obj->row = int(id);
    return b;
  };
  for (const NativeDef& d : natives) {
    Value b = native(d.id, d.signature, d.fn, d.type_of);
    row_natives()[size_t(d.id)] = b;
    m.set(builtin_row(d.id).name, b);
  }
  // KBC programs call the registry ops sum and slice by those names: there
  // they dispatch (a tensor goes to the op). A Python program's free name
  // means Python's own (python_builtin).
  const NativeDef kbc_dispatching[] = {
      {BuiltinId::b_sum, "iterable, start=?, keepdim=False, dim=?", b_kbc_sum, Kind::Null},
      {BuiltinId::b_slice, "*args, **kwargs", b_kbc_slice, Kind::Slice},  // same signature as the row
  };
  for (const NativeDef& d : kbc_dispatching) {
    Value b = native(d.id, d.signature, d.fn, d.type_of);
    b.as<BuiltinObj>()->kbc_dispatching = true;
    m.set(builtin_row(d.id).name, b);
  }
  m.set("Tensor", hidden_type(Kind::Tensor, "Tensor"));  // type(t), isinstance(x, Tensor); tensor(data) makes one
  // Every built-in exception class a user can name (runtime/semantics/exceptions.h).
  for (int k = 0; k <= int(ErrorKind::VerifyError); ++k)
    if (ErrorKind(k) != ErrorKind::VerifyError) m.set(error_kind_name(ErrorKind(k)), exception_class(ErrorKind(k)));
  for (DType d : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) m.set(dtype_name(d), intern_value(dtype_name(d)));
  m.set("Module", Value::object(Kind::Class, module_base_class()));
  module_slots().add_builtins(m);
  return m;
}

}  // namespace

const BuiltinRow kRows[] = {
#define KILN_NATIVE(name, signature, type_of, how) {#name, BuiltinHow::how, true, true},
#define KILN_OWN(name, signature, type_of, how) {#name, BuiltinHow::how, true, false},
#define KILN_PYTHON(name, how) {#name, BuiltinHow::how, false, true},
#include "runtime/semantics/builtins.def"
#undef KILN_NATIVE
#undef KILN_OWN
#undef KILN_PYTHON
};
static_assert(std::size(kRows) == size_t(kNumBuiltinRows), "one BuiltinRow per builtins.def row");

const BuiltinRow& builtin_row(BuiltinId id) { return kRows[size_t(id)]; }

const BuiltinRow* find_builtin_row(std::string_view name) {
  for (const BuiltinRow& r : kRows)
    if (name == r.name) return &r;
  return nullptr;
}

Value assertion_error() {
  static const Value v = *builtins().find("AssertionError");
  return v;
}

static ImportHook import_hook = nullptr;
void set_import_hook(ImportHook hook) { import_hook = hook; }

Value import_module(const StrObj* name, const Value& fromlist, const Value& level, bool loaded_only) {
  if (import_hook) return import_hook(name, fromlist, level, loaded_only);
  if (loaded_only) return Value::null();
  throw_error(ErrorKind::ModuleNotFoundError, "No module named '" + name->s + "' (a KBC program imports no modules)");
}

const Value& ellipsis() {
  static const Value e = census::permanent_value(make_builtin("Ellipsis", [](CallContext&, const BuiltinObj&, const CallArgs&) -> Value {
    throw_error(ErrorKind::TypeError, "'ellipsis' object is not callable");
  }));
  return e;
}

void zip_check_strict(size_t exhausted, size_t count, const std::function<bool(size_t)>& advance) {
  // CPython's words: "argument 2 is shorter than argument 1", "argument 3
  // is longer than arguments 1-2".
  auto fail = [](size_t i, const char* how) {
    throw_error(ErrorKind::ValueError, "zip() argument " + std::to_string(i + 1) + " is " + how + " than argument" +
                                           (i == 1 ? std::string(" 1") : "s 1-" + std::to_string(i)));
  };
  if (exhausted > 0) fail(exhausted, "shorter");
  for (size_t j = 1; j < count; ++j)
    if (advance(j)) fail(j, "longer");
}

bool is_ellipsis(const Value& v) { return v.is_same(ellipsis()); }
// `type` itself is a builtin row (a function of one argument in KBC) and
// a class in Python.
bool is_type_builtin(const Value& v) {
  static const Value* const type = builtins().find("type");  // (isinstance and issubclass ask on every call)
  return v.is(Kind::Builtin) && v.is_same(*type);
}

const NameMap& builtins() {
  static const NameMap* m = new NameMap(build_builtins());
  return *m;
}

const NameMap& python_builtins() {
  static const NameMap* m = [] {
    const NameMap& kbc = builtins();  // fills row_natives
    auto* p = new NameMap();
    for (int i = 0; i < kNumBuiltinRows; ++i)
      if (kRows[i].native && kRows[i].python) p->set(kRows[i].name, row_natives()[size_t(i)]);
    for (int k = 0; k <= int(ErrorKind::VerifyError); ++k)
      if (ErrorKind(k) != ErrorKind::VerifyError) p->set(error_kind_name(ErrorKind(k)), *kbc.find(error_kind_name(ErrorKind(k))));
    return p;
  }();
  return *m;
}

}  // namespace kiln::runtime

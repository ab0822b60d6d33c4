// Methods of the built-in value types: list.append, dict.items, str.join,
// tensor.size, ... Registry ops are tensor methods too, but those come from
// the op table (value_access.cpp), not from here.
#include <algorithm>

#include "runtime/semantics/builtins.h"
#include "runtime/semantics/census.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/kind_slots.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/signature.h"
#include "runtime/semantics/str_format.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::runtime {

namespace {

std::vector<Value>& list_of(const std::vector<Value>& a) { return a[0].as<ListObj>()->items; }
DictObj* dict_of(const std::vector<Value>& a) { return a[0].as<DictObj>(); }

// ---- list ---------------------------------------------------------------------
Value l_append(CallContext&, const std::vector<Value>& a) {
  list_of(a).push_back(a[1]);
  return Value::none();
}
Value l_extend(CallContext&, const std::vector<Value>& a) {
  auto more = to_vector(a[1]);
  list_of(a).insert(list_of(a).end(), more.begin(), more.end());
  return Value::none();
}
Value l_pop(CallContext&, const std::vector<Value>& a) {
  auto& items = list_of(a);
  if (items.empty()) throw_error(ErrorKind::IndexError, "pop from empty list");
  int64_t i = to_index(a[1], "list.pop() index");
  if (i < 0) i += int64_t(items.size());
  if (i < 0 || i >= int64_t(items.size())) throw_error(ErrorKind::IndexError, "pop index out of range");
  Value v = items[size_t(i)];
  items.erase(items.begin() + i);
  return v;
}
Value l_insert(CallContext&, const std::vector<Value>& a) {
  auto& items = list_of(a);
  int64_t n = int64_t(items.size());
  int64_t i = to_index(a[1], "list.insert() index");
  if (i < 0) i = std::max<int64_t>(0, i + n);
  items.insert(items.begin() + std::min(i, n), a[2]);
  return Value::none();
}
Value seq_index(const std::vector<Value>& items, const Value& x, const char* what) {
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].is_same(x) || values_equal(items[i], x)) return Value::integer(int64_t(i));
  throw_error(ErrorKind::ValueError, repr(x) + " is not in " + what);
}
Value seq_count(const std::vector<Value>& items, const Value& x) {
  int64_t n = 0;
  for (const Value& v : items) n += (v.is_same(x) || values_equal(v, x)) ? 1 : 0;
  return Value::integer(n);
}
Value l_index(CallContext&, const std::vector<Value>& a) { return seq_index(list_of(a), a[1], "list"); }
Value l_count(CallContext&, const std::vector<Value>& a) { return seq_count(list_of(a), a[1]); }
Value l_remove(CallContext&, const std::vector<Value>& a) {
  auto& items = list_of(a);
  for (size_t i = 0; i < items.size(); ++i)
    if (values_equal(items[i], a[1])) {
      items.erase(items.begin() + ptrdiff_t(i));
      return Value::none();
    }
  throw_error(ErrorKind::ValueError, "list.remove(x): x not in list");  // CPython's words (not index's)
}
Value l_reverse(CallContext&, const std::vector<Value>& a) {
  std::reverse(list_of(a).begin(), list_of(a).end());
  return Value::none();
}
Value l_sort(CallContext&, const std::vector<Value>& a) {
  auto& items = list_of(a);
  std::stable_sort(items.begin(), items.end(),
                   [](const Value& x, const Value& y) { return truth(compare_op(CmpOp::LT, x, y)); });
  if (truth(a[1])) std::reverse(items.begin(), items.end());
  return Value::none();
}
Value l_copy(CallContext&, const std::vector<Value>& a) { return make_list(list_of(a)); }
Value l_clear(CallContext&, const std::vector<Value>& a) {
  list_of(a).clear();
  return Value::none();
}

// ---- tuple ----------------------------------------------------------------------
Value t_index(CallContext&, const std::vector<Value>& a) {
  return seq_index(a[0].as<TupleObj>()->items, a[1], "tuple");
}
Value t_count(CallContext&, const std::vector<Value>& a) { return seq_count(a[0].as<TupleObj>()->items, a[1]); }

// ---- dict -------------------------------------------------------------------------
Value d_keys(CallContext&, const std::vector<Value>& a) {
  std::vector<Value> out;
  for (const auto& [k, v] : dict_of(a)->entries) out.push_back(k);
  return make_list(std::move(out));
}
Value d_values(CallContext&, const std::vector<Value>& a) {
  std::vector<Value> out;
  for (const auto& [k, v] : dict_of(a)->entries) out.push_back(v);
  return make_list(std::move(out));
}
Value d_items(CallContext&, const std::vector<Value>& a) {
  std::vector<Value> out;
  for (const auto& [k, v] : dict_of(a)->entries) out.push_back(make_tuple({k, v}));
  return make_list(std::move(out));
}
Value d_get(CallContext&, const std::vector<Value>& a) {
  const Value* v = dict_of(a)->find(a[1]);
  return v ? *v : a[2];
}
Value d_getitem(CallContext&, const std::vector<Value>& a) {
  const Value* v = dict_of(a)->find(a[1]);
  if (!v) throw_key_error(a[1]);
  return *v;
}
Value d_contains(CallContext&, const std::vector<Value>& a) { return Value::boolean(dict_of(a)->find(a[1]) != nullptr); }
Value d_setitem(CallContext&, const std::vector<Value>& a) {
  dict_of(a)->set(a[1], a[2]);
  return Value::none();
}
Value d_delitem(CallContext&, const std::vector<Value>& a) {
  if (!dict_of(a)->find(a[1])) throw_key_error(a[1]);
  dict_of(a)->erase(a[1]);
  return Value::none();
}
Value d_pop(CallContext&, const std::vector<Value>& a) {
  const Value* v = dict_of(a)->find(a[1]);
  if (!v) {
    if (a[2].is_null()) throw_key_error(a[1]);
    return a[2];
  }
  Value out = *v;
  dict_of(a)->erase(a[1]);
  return out;
}
Value d_setdefault(CallContext&, const std::vector<Value>& a) {
  if (const Value* v = dict_of(a)->find(a[1])) return *v;
  dict_of(a)->set(a[1], a[2]);
  return a[2];
}
// dict.update(mapping or iterable of pairs, **kwargs), with CPython's words.
Value d_update(CallContext&, const std::vector<Value>& a) {
  if (!a[1].is_null()) dict_update(dict_of(a), a[1]);
  dict_update(dict_of(a), a[2]);
  return Value::none();
}
// d.fromkeys(iterable, value=None): a new dict (CPython's classmethod,
// reached through an instance).
Value d_fromkeys(CallContext&, const std::vector<Value>& a) {
  const auto& args = a[1].as<TupleObj>()->items;
  if (args.empty()) throw_error(ErrorKind::TypeError, "fromkeys expected at least 1 argument, got 0");
  if (args.size() > 2)
    throw_error(ErrorKind::TypeError, "fromkeys expected at most 2 arguments, got " + std::to_string(args.size()));
  Value d = make_dict();
  const Value value = args.size() == 2 ? args[1] : Value::none();
  for (const Value& k : to_vector(args[0])) d.as<DictObj>()->set(k, value);
  return d;
}
Value s_format(CallContext& ctx, const std::vector<Value>& a);
Value d_popitem(CallContext&, const std::vector<Value>& a) {
  DictObj* d = dict_of(a);
  if (d->entries.empty()) throw_key_error(Value::str("popitem(): dictionary is empty"));
  auto [k, v] = d->entries.back();
  d->erase(k);
  return make_tuple({k, v});
}
Value d_copy(CallContext&, const std::vector<Value>& a) {
  Value d = make_dict();
  for (const auto& [k, v] : dict_of(a)->entries) d.as<DictObj>()->set(k, v);
  return d;
}
Value d_clear(CallContext&, const std::vector<Value>& a) {
  dict_of(a)->entries.clear();
  dict_of(a)->index.clear();
  return Value::none();
}

// ---- str --------------------------------------------------------------------------
const std::string& str_of(const std::vector<Value>& a) { return a[0].as_str(); }
const std::string& str_arg(const Value& v, const char* what) {
  if (!v.is(Kind::Str)) throw_error(ErrorKind::TypeError, std::string(what) + " must be str, not " + type_name(v));
  return v.as_str();
}
Value s_join(CallContext&, const std::vector<Value>& a) {
  std::string out;
  auto items = to_vector(a[1]);
  for (size_t i = 0; i < items.size(); ++i) out += (i ? str_of(a) : "") + str_arg(items[i], "str.join() item");
  return Value::str(out);
}
Value s_split(CallContext&, const std::vector<Value>& a) {
  const std::string& s = str_of(a);
  std::vector<Value> out;
  if (a[1].is_none()) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      if (j > i) out.push_back(Value::str(s.substr(i, j - i)));
      i = j;
    }
    return make_list(std::move(out));
  }
  const std::string& sep = str_arg(a[1], "separator");
  if (sep.empty()) throw_error(ErrorKind::ValueError, "empty separator");
  size_t start = 0, pos;
  while ((pos = s.find(sep, start)) != std::string::npos) {
    out.push_back(Value::str(s.substr(start, pos - start)));
    start = pos + sep.size();
  }
  out.push_back(Value::str(s.substr(start)));
  return make_list(std::move(out));
}
Value s_startswith(CallContext&, const std::vector<Value>& a) {
  return Value::boolean(str_of(a).rfind(str_arg(a[1], "prefix"), 0) == 0);
}
Value s_endswith(CallContext&, const std::vector<Value>& a) {
  const std::string& s = str_of(a);
  const std::string& suf = str_arg(a[1], "suffix");
  return Value::boolean(s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0);
}
Value s_upper(CallContext&, const std::vector<Value>& a) {
  std::string s = str_of(a);
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return Value::str(s);
}
Value s_lower(CallContext&, const std::vector<Value>& a) {
  std::string s = str_of(a);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return Value::str(s);
}
// The methods below follow CPython's str on code points. Searching and
// padding work on UTF-8 exactly (a code point is never part of another's
// encoding); the character classes and case mappings are ASCII's, so a
// string with other characters is refused rather than answered wrongly.
size_t code_points(const std::string& s, size_t end) {
  size_t n = 0;
  for (size_t i = 0; i < end; ++i) n += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
  return n;
}
const std::string& sub_arg(const Value& v) {
  if (!v.is(Kind::Str)) throw_error(ErrorKind::TypeError, "must be str, not " + type_name(v));
  return v.as_str();
}
const std::string& ascii_arg(const std::vector<Value>& a, const char* method) {
  const std::string& s = str_of(a);
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80)
      throw_error(ErrorKind::NotImplementedError,
                  std::string("kiln: str.") + method + "() of a non-ASCII string is not supported");
  return s;
}
Value s_count(CallContext&, const std::vector<Value>& a) {
  const std::string& s = str_of(a);
  const std::string& sub = sub_arg(a[1]);
  if (sub.empty()) return Value::integer(int64_t(code_points(s, s.size()) + 1));
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return Value::integer(n);
}
Value s_find(CallContext&, const std::vector<Value>& a) {
  const std::string& s = str_of(a);
  size_t pos = s.find(sub_arg(a[1]));
  return Value::integer(pos == std::string::npos ? -1 : int64_t(code_points(s, pos)));
}
Value s_rfind(CallContext&, const std::vector<Value>& a) {
  const std::string& s = str_of(a);
  size_t pos = s.rfind(sub_arg(a[1]));
  return Value::integer(pos == std::string::npos ? -1 : int64_t(code_points(s, pos)));
}
Value s_index(CallContext& c, const std::vector<Value>& a) {
  Value i = s_find(c, a);
  if (i.as_int() < 0) throw_error(ErrorKind::ValueError, "substring not found");
  return i;
}
template <int (*Pred)(int)>
Value s_is(CallContext&, const std::vector<Value>& a) {
  const std::string& s = ascii_arg(a, "is...");
  if (s.empty()) return Value::boolean(false);
  for (char c : s)
    if (!Pred(static_cast<unsigned char>(c))) return Value::boolean(false);
  return Value::boolean(true);
}
int is_digit(int c) { return c >= '0' && c <= '9'; }
int is_alpha(int c) { return std::isalpha(c); }
int is_alnum(int c) { return std::isalnum(c); }
int is_space(int c) { return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F); }
// isupper / islower: at least one cased character, and no cased one of the other case.
template <bool Upper>
Value s_iscase(CallContext&, const std::vector<Value>& a) {
  bool cased = false;
  for (char ch : ascii_arg(a, Upper ? "isupper" : "islower")) {
    int c = static_cast<unsigned char>(ch);
    if (Upper ? std::islower(c) : std::isupper(c)) return Value::boolean(false);
    cased |= bool(std::isalpha(c));
  }
  return Value::boolean(cased);
}
Value s_title(CallContext&, const std::vector<Value>& a) {
  std::string s = ascii_arg(a, "title");
  bool prev_cased = false;
  for (char& ch : s) {
    int c = static_cast<unsigned char>(ch);
    ch = char(prev_cased ? std::tolower(c) : std::toupper(c));
    prev_cased = std::isalpha(c) != 0;
  }
  return Value::str(s);
}
Value s_capitalize(CallContext&, const std::vector<Value>& a) {
  std::string s = ascii_arg(a, "capitalize");
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = char(i ? std::tolower(static_cast<unsigned char>(s[i])) : std::toupper(static_cast<unsigned char>(s[i])));
  return Value::str(s);
}
// center / ljust / rjust: CPython's split of the margin (unicodeobject.c pad).
enum class Align { Left, Right, Center };
template <Align A>
Value s_pad(CallContext&, const std::vector<Value>& a) {
  const std::string& s = str_of(a);
  int64_t width = to_index(a[1], "width");
  std::string fill = " ";
  if (!a[2].is_null()) {
    if (!a[2].is(Kind::Str))
      throw_error(ErrorKind::TypeError, "The fill character must be a unicode character, not " + type_name(a[2]));
    fill = a[2].as_str();
    if (code_points(fill, fill.size()) != 1)
      throw_error(ErrorKind::TypeError, "The fill character must be exactly one character long");
  }
  int64_t len = int64_t(code_points(s, s.size()));
  if (width <= len) return a[0];
  int64_t marg = width - len;
  int64_t left = A == Align::Left ? 0 : A == Align::Right ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += fill;
  return Value::str(out);
}
Value s_zfill(CallContext&, const std::vector<Value>& a) {
  const std::string& s = str_of(a);
  int64_t width = to_index(a[1], "width");
  int64_t len = int64_t(code_points(s, s.size()));
  if (width <= len) return a[0];
  size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  return Value::str(s.substr(0, sign) + std::string(size_t(width - len), '0') + s.substr(sign));
}
// strip / lstrip / rstrip: whitespace (ASCII's, as Python's str.isspace
// there), or any of `chars`.
template <bool Left, bool Right>
Value s_strip_chars(CallContext&, const std::vector<Value>& a) {
  const std::string& s = str_of(a);
  std::string chars = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f";
  if (!a[1].is_null() && !a[1].is_none()) {
    if (!a[1].is(Kind::Str))
      throw_error(ErrorKind::TypeError, std::string(Left && Right ? "strip" : Left ? "lstrip" : "rstrip") +
                                            " arg must be None or str");
    chars = a[1].as_str();
    for (char c : chars)
      if (static_cast<unsigned char>(c) >= 0x80)
        throw_error(ErrorKind::NotImplementedError, "kiln: str.strip() of non-ASCII characters is not supported");
  }
  size_t b = Left ? s.find_first_not_of(chars) : 0;
  if (b == std::string::npos) return Value::str("");
  size_t e = Right ? s.find_last_not_of(chars) : s.size() - 1;
  // Python strips Unicode whitespace too: stopping at a non-ASCII character
  // would be a guess
  auto non_ascii = [&](size_t i) { return static_cast<unsigned char>(s[i]) >= 0x80; };
  if (a[1].is_null() || a[1].is_none())
    if ((Left && non_ascii(b)) || (Right && non_ascii(e)))
      throw_error(ErrorKind::NotImplementedError, "kiln: str.strip() at a non-ASCII character is not supported");
  return Value::str(s.substr(b, e - b + 1));
}
Value s_format(CallContext& ctx, const std::vector<Value>& a) {
  return Value::str(str_format(ctx, str_of(a), a[1].as<TupleObj>()->items, a[2]));
}
Value s_replace(CallContext&, const std::vector<Value>& a) {
  std::string s = str_of(a);
  const std::string& from = str_arg(a[1], "old");
  const std::string& to = str_arg(a[2], "new");
  if (from.empty()) return Value::str(s);
  std::string out;
  size_t start = 0, pos;
  while ((pos = s.find(from, start)) != std::string::npos) {
    out += s.substr(start, pos - start) + to;
    start = pos + from.size();
  }
  return Value::str(out + s.substr(start));
}

// ---- tensor -------------------------------------------------------------------------
Tensor tensor_of(const std::vector<Value>& a) { return a[0].as_tensor(); }
Value tn_size(CallContext&, const std::vector<Value>& a) {
  Tensor t = tensor_of(a);
  if (!a[1].is_none()) return Value::integer(t.size(wrap_dim("size", to_index(a[1], "size() dim"), t.dim())));
  std::vector<Value> dims;
  for (int64_t s : t.sizes()) dims.push_back(Value::integer(s));
  return make_tuple(std::move(dims));
}
Value tn_dim(CallContext&, const std::vector<Value>& a) { return Value::integer(tensor_of(a).dim()); }
Value tn_numel(CallContext&, const std::vector<Value>& a) { return Value::integer(tensor_of(a).numel()); }
Value scalar_value(const Tensor& t, const Shape& idx) {
  double d = t.item_as_double(idx);
  switch (t.dtype()) {
    case DType::Bool: return Value::boolean(d != 0);
    case DType::Int32:
    case DType::Int64: return Value::integer(int64_t(d));
    default: return Value::floating(d);
  }
}
Value tn_item(CallContext&, const std::vector<Value>& a) {
  Tensor t = tensor_of(a);
  if (t.numel() != 1)
    throw_error(ErrorKind::RuntimeError,
                "a Tensor with " + std::to_string(t.numel()) + " elements cannot be converted to Scalar");
  return scalar_value(t, Shape(size_t(t.dim()), 0));
}
Value tolist_rec(const Tensor& t, Shape& idx) {
  if (int64_t(idx.size()) == t.dim()) return scalar_value(t, idx);
  std::vector<Value> out;
  int64_t n = t.size(int64_t(idx.size()));
  for (int64_t i = 0; i < n; ++i) {
    idx.push_back(i);
    out.push_back(tolist_rec(t, idx));
    idx.pop_back();
  }
  return make_list(std::move(out));
}
Value tn_tolist(CallContext&, const std::vector<Value>& a) {
  Shape idx;
  return tolist_rec(tensor_of(a), idx);
}
Value tn_is_contiguous(CallContext&, const std::vector<Value>& a) {
  return Value::boolean(tensor_of(a).is_contiguous());
}
template <DType D>
Value tn_convert(CallContext&, const std::vector<Value>& a) {
  static const int to_op = tensor_op_id("to");
  return call_tensor_op(to_op, {a[0], intern_value(dtype_name(D))});
}

}  // namespace

// dict(x) / d.update(x): a dict's entries, or (key, value) pairs from any
// iterable, with CPython's errors.
void dict_update(DictObj* into, const Value& other) {
  if (other.is(Kind::Dict)) {
    for (const auto& [k, v] : other.as<DictObj>()->entries) into->set(k, v);
    return;
  }
  const std::vector<Value> pairs = to_vector(other);
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (!pairs[i].is(Kind::Tuple) && !pairs[i].is(Kind::List) && !pairs[i].is(Kind::Str) &&
        !pairs[i].is(Kind::Foreign))
      throw_error(ErrorKind::TypeError, "cannot convert dictionary update sequence element #" + std::to_string(i) +
                                            " to a sequence");
    auto kv = to_vector(pairs[i]);
    if (kv.size() != 2)
      throw_error(ErrorKind::ValueError, "dictionary update sequence element #" + std::to_string(i) +
                                             " has length " + std::to_string(kv.size()) + "; 2 is required");
    into->set(kv[0], kv[1]);
  }
}

namespace {

struct MethodDef {
  const char* name;
  const char* signature;
  NativeFn fn;
};

// `how` for every method of the type: list, dict and Tensor methods have
// the translator's handlers (they mutate trackers or read metadata); str
// and tuple methods are pure.
NameMap build(Kind kind, const char* type, BuiltinHow how, std::initializer_list<MethodDef> defs) {
  NameMap m;
  for (const MethodDef& d : defs) {
    Value b = make_native_method(kind, type, d.name, d.signature, d.fn);
    b.as<BuiltinObj>()->how = how;
    m.set(d.name, census::permanent_value(b));
  }
  return m;
}

}  // namespace

Value type_classmethod(Kind k, const StrObj* name) {
  if (k != Kind::Dict || name->s != "fromkeys") return Value::null();
  static const Value* fromkeys = [] {
    Value b = make_builtin_closure("fromkeys", [](CallContext& ctx, const CallArgs& a) {
      if (a.nkw() > 0) throw_error(ErrorKind::TypeError, "dict.fromkeys() takes no keyword arguments");
      std::vector<Value> bound{make_dict(), make_tuple(std::vector<Value>(a.args, a.args + a.nargs))};
      return d_fromkeys(ctx, bound);
    });
    b.as<BuiltinObj>()->how = BuiltinHow::Fold;  // a new dict from known values
    return new Value(census::permanent_value(b));
  }();
  return *fromkeys;
}

static NameMap& host_tensor_methods() {
  static auto* m = new NameMap();
  return *m;
}
Value host_tensor_method(const StrObj* name) {
  const NameMap& m = host_tensor_methods();
  if (m.empty()) return Value::null();
  const Value* v = m.find(name);
  return v ? *v : Value::null();
}
void register_tensor_method(const std::string& name, Value fn) { host_tensor_methods().set(name, std::move(fn)); }

Value type_method(Kind k, const StrObj* name) {
  static const NameMap list_methods = build(
      Kind::List, "list", BuiltinHow::Trace, {{"append", "self, x", l_append},   {"extend", "self, iterable", l_extend},
               {"pop", "self, index=-1", l_pop},   {"insert", "self, index, x", l_insert},
               {"index", "self, x", l_index},      {"count", "self, x", l_count},
               {"remove", "self, x", l_remove},    {"reverse", "self", l_reverse},
               {"sort", "self, *, reverse=False", l_sort}, {"copy", "self", l_copy},
               {"clear", "self", l_clear}});
  static const NameMap tuple_methods = build(Kind::Tuple, "tuple", BuiltinHow::Fold, {{"index", "self, x", t_index}, {"count", "self, x", t_count}});
  static const NameMap dict_methods = build(
      Kind::Dict, "dict", BuiltinHow::Trace, {{"keys", "self", d_keys},
               {"values", "self", d_values},
               {"items", "self", d_items},
               {"get", "self, key, default=None", d_get},
               // called by name (a dict subclass's super().__getitem__(k), a residual's
               // dict.__getitem__(obj, k)); d[k] and `k in d` have their own opcodes
               {"__getitem__", "self, key, /", d_getitem},
               {"__contains__", "self, key, /", d_contains},
               {"__setitem__", "self, key, value, /", d_setitem},
               {"__delitem__", "self, key, /", d_delitem},
               {"pop", "self, key, default=?", d_pop},
               {"setdefault", "self, key, default=None", d_setdefault},
               {"update", "self, other=?, /, **kwargs", d_update},
               {"fromkeys", "self, *args", d_fromkeys},
               {"popitem", "self", d_popitem},
               {"copy", "self", d_copy},
               {"clear", "self", d_clear}});
  static const NameMap str_methods = build(
      Kind::Str, "str", BuiltinHow::Fold, {{"join", "self, iterable", s_join},
              {"split", "self, sep=None", s_split},
              {"startswith", "self, prefix", s_startswith},
              {"endswith", "self, suffix", s_endswith},
              {"upper", "self", s_upper},
              {"lower", "self", s_lower},
              {"strip", "self, chars=None", s_strip_chars<true, true>},
              {"lstrip", "self, chars=None", s_strip_chars<true, false>},
              {"rstrip", "self, chars=None", s_strip_chars<false, true>},
              {"count", "self, sub, /", s_count},
              {"find", "self, sub, /", s_find},
              {"rfind", "self, sub, /", s_rfind},
              {"index", "self, sub, /", s_index},
              {"isdigit", "self", s_is<is_digit>},
              {"isalpha", "self", s_is<is_alpha>},
              {"isalnum", "self", s_is<is_alnum>},
              {"isspace", "self", s_is<is_space>},
              {"isupper", "self", s_iscase<true>},
              {"islower", "self", s_iscase<false>},
              {"title", "self", s_title},
              {"capitalize", "self", s_capitalize},
              {"center", "self, width, fillchar=?, /", s_pad<Align::Center>},
              {"ljust", "self, width, fillchar=?, /", s_pad<Align::Left>},
              {"rjust", "self, width, fillchar=?, /", s_pad<Align::Right>},
              {"zfill", "self, width, /", s_zfill},
              {"replace", "self, old, new", s_replace},
              {"format", "self, *args, **kwargs", s_format}});
  static const NameMap tensor_methods = build(
      Kind::Tensor, "Tensor", BuiltinHow::Trace, {{"size", "self, dim=None", tn_size},
                 {"dim", "self", tn_dim},
                 {"numel", "self", tn_numel},
                 {"item", "self", tn_item},
                 {"tolist", "self", tn_tolist},
                 {"is_contiguous", "self", tn_is_contiguous},
                 {"float", "self", tn_convert<DType::Float32>},
                 {"double", "self", tn_convert<DType::Float64>},
                 {"long", "self", tn_convert<DType::Int64>},
                 {"int", "self", tn_convert<DType::Int32>},
                 {"bool", "self", tn_convert<DType::Bool>}});
  const NameMap* table = nullptr;
  switch (k) {
    case Kind::List: table = &list_methods; break;
    case Kind::Tuple: table = &tuple_methods; break;
    case Kind::Dict: table = &dict_methods; break;
    case Kind::Str: table = &str_methods; break;
    case Kind::Tensor: table = &tensor_methods; break;
    case Kind::Set:
    case Kind::FrozenSet: return set_method(k, name);
    default: return Value::null();
  }
  const Value* v = table->find(name);
  if (!v && k == Kind::Tensor) return host_tensor_method(name);
  return v ? *v : Value::null();
}

}  // namespace kiln::runtime

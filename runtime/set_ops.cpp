// set and frozenset. Elements follow dict-key semantics (value_hash and
// values_equal: 1, 1.0 and True are one element, the first added is kept).
// Order is insertion order, never CPython's hash order; nothing here may
// depend on it except printing and iteration.
#include "runtime/set_ops.h"
#include "runtime/exceptions.h"

#include "runtime/name_map.h"
#include "runtime/signature.h"
#include "runtime/value_ops.h"

namespace kiln::runtime {

SetObj::~SetObj() {
  index.clear();
  release_items(items);
}

bool SetObj::add(const Value& v) {
  if (index.count(v)) return false;
  index.emplace(v, items.size());
  items.push_back(v);
  return true;
}

bool SetObj::erase(const Value& v) {
  auto it = index.find(v);
  if (it == index.end()) return false;
  size_t pos = it->second;
  index.erase(it);
  items.erase(items.begin() + ptrdiff_t(pos));
  for (auto& [k, i] : index)
    if (i > pos) --i;
  return true;
}

void SetObj::clear() {
  index.clear();
  items.clear();
}

Value make_set(bool frozen) { return Value::object(frozen ? Kind::FrozenSet : Kind::Set, make_ref<SetObj>()); }

Value set_from(const Value& iterable, bool frozen) {
  Value out = make_set(frozen);
  auto* s = out.as<SetObj>();
  if (is_set_like(iterable)) {
    for (const Value& x : iterable.as<SetObj>()->items) s->add(x);
    return out;
  }
  for (const Value& x : to_vector(iterable)) s->add(x);
  return out;
}

Value set_copy(const Value& s, bool frozen) { return set_from(s, frozen); }

namespace {

SetObj* set_of(const Value& v) { return v.as<SetObj>(); }

// The items of `other` as a set (any iterable, for the methods).
Value as_set(const Value& other) { return is_set_like(other) ? other : set_from(other, true); }

Value combine(BinOp op, const Value& a, const Value& b, Kind result_kind) {
  Value out = make_set(result_kind == Kind::FrozenSet);
  auto* r = set_of(out);
  const auto* x = set_of(a);
  const auto* y = set_of(b);
  switch (op) {
    case BinOp::OR:
      for (const Value& v : x->items) r->add(v);
      for (const Value& v : y->items) r->add(v);
      break;
    case BinOp::AND:
      for (const Value& v : x->items)
        if (y->contains(v)) r->add(v);
      break;
    case BinOp::SUB:
      for (const Value& v : x->items)
        if (!y->contains(v)) r->add(v);
      break;
    case BinOp::XOR:
      for (const Value& v : x->items)
        if (!y->contains(v)) r->add(v);
      for (const Value& v : y->items)
        if (!x->contains(v)) r->add(v);
      break;
    default: return Value::null();
  }
  return out;
}

bool subset(const Value& a, const Value& b) {
  const auto* x = set_of(a);
  const auto* y = set_of(b);
  if (x->items.size() > y->items.size()) return false;
  for (const Value& v : x->items)
    if (!y->contains(v)) return false;
  return true;
}

struct SetIter final : IteratorObj {
  Ref<SetObj> set;
  size_t pos = 0, size0 = 0;
  bool next(Value& out) override {
    if (set->items.size() != size0) {
      size0 = SIZE_MAX;  // stays broken, as CPython's iterator does
      throw_error(ErrorKind::RuntimeError, "Set changed size during iteration");
    }
    if (pos >= set->items.size()) return false;
    out = set->items[pos++];
    return true;
  }
};

// ---- methods ------------------------------------------------------------

Kind kind_of(const std::vector<Value>& a) { return a[0].kind(); }

Value m_add(CallContext&, const std::vector<Value>& a) {
  set_of(a[0])->add(a[1]);
  return Value::none();
}
Value m_discard(CallContext&, const std::vector<Value>& a) {
  set_of(a[0])->erase(a[1]);
  return Value::none();
}
Value m_remove(CallContext&, const std::vector<Value>& a) {
  if (!set_of(a[0])->erase(a[1])) throw_key_error(a[1]);
  return Value::none();
}
Value m_pop(CallContext&, const std::vector<Value>& a) {
  auto* s = set_of(a[0]);
  if (s->items.empty()) throw_error(ErrorKind::KeyError, "'pop from an empty set'");
  Value v = s->items.front();
  s->erase(v);
  return v;
}
Value m_clear(CallContext&, const std::vector<Value>& a) {
  set_of(a[0])->clear();
  return Value::none();
}
Value m_update(CallContext&, const std::vector<Value>& a) {
  for (const Value& other : a[1].as<TupleObj>()->items)
    for (const Value& v : to_vector(other)) set_of(a[0])->add(v);
  return Value::none();
}
// s.op_update(...): s becomes s op others, in place (aliases see it).
template <BinOp Op>
Value m_fold_update(CallContext&, const std::vector<Value>& a) {
  Value acc = set_copy(a[0], false);
  for (const Value& other : a[1].as<TupleObj>()->items) acc = combine(Op, acc, as_set(other), Kind::Set);
  auto* s = set_of(a[0]);
  s->clear();
  for (const Value& v : set_of(acc)->items) s->add(v);
  return Value::none();
}
Value m_symmetric_difference_update(CallContext&, const std::vector<Value>& a) {
  Value acc = combine(BinOp::XOR, a[0], as_set(a[1]), Kind::Set);
  auto* s = set_of(a[0]);
  s->clear();
  for (const Value& v : set_of(acc)->items) s->add(v);
  return Value::none();
}
Value m_copy(CallContext&, const std::vector<Value>& a) { return set_copy(a[0], kind_of(a) == Kind::FrozenSet); }

// union / intersection / difference take any number of iterables.
template <BinOp Op>
Value m_fold(CallContext&, const std::vector<Value>& a) {
  Value acc = set_copy(a[0], kind_of(a) == Kind::FrozenSet);
  for (const Value& other : a[1].as<TupleObj>()->items) acc = combine(Op, acc, as_set(other), kind_of(a));
  return acc;
}
Value m_symmetric_difference(CallContext&, const std::vector<Value>& a) {
  return combine(BinOp::XOR, a[0], as_set(a[1]), kind_of(a));
}
Value m_issubset(CallContext&, const std::vector<Value>& a) { return Value::boolean(subset(a[0], as_set(a[1]))); }
Value m_issuperset(CallContext&, const std::vector<Value>& a) { return Value::boolean(subset(as_set(a[1]), a[0])); }
Value m_isdisjoint(CallContext&, const std::vector<Value>& a) {
  Value other = as_set(a[1]);
  for (const Value& v : set_of(other)->items)
    if (set_of(a[0])->contains(v)) return Value::boolean(false);
  return Value::boolean(true);
}

struct MethodDef {
  const char* name;
  const char* signature;
  NativeFn fn;
  bool mutates;  // set only
};
const MethodDef kMethods[] = {
    {"add", "self, elem, /", m_add, true},
    {"discard", "self, elem, /", m_discard, true},
    {"remove", "self, elem, /", m_remove, true},
    {"pop", "self, /", m_pop, true},
    {"clear", "self, /", m_clear, true},
    {"update", "self, *others", m_update, true},
    {"difference_update", "self, *others", m_fold_update<BinOp::SUB>, true},
    {"intersection_update", "self, *others", m_fold_update<BinOp::AND>, true},
    {"symmetric_difference_update", "self, other, /", m_symmetric_difference_update, true},
    {"copy", "self, /", m_copy, false},
    {"union", "self, *others", m_fold<BinOp::OR>, false},
    {"intersection", "self, *others", m_fold<BinOp::AND>, false},
    {"difference", "self, *others", m_fold<BinOp::SUB>, false},
    {"symmetric_difference", "self, other, /", m_symmetric_difference, false},
    {"issubset", "self, other, /", m_issubset, false},
    {"issuperset", "self, other, /", m_issuperset, false},
    {"isdisjoint", "self, other, /", m_isdisjoint, false},
};

NameMap build(bool frozen) {
  NameMap m;
  const char* type = frozen ? "frozenset" : "set";
  for (const MethodDef& d : kMethods)
    if (!(frozen && d.mutates)) {
      Value b = make_native_method(frozen ? Kind::FrozenSet : Kind::Set, type, d.name, d.signature, d.fn);
      // The translator applies a mutator to a set made in the trace.
      b.as<BuiltinObj>()->how = d.mutates ? BuiltinHow::Trace : BuiltinHow::Fold;
      m.set(d.name, b);
    }
  return m;
}

}  // namespace

Value set_binary(BinOp op, const Value& a, const Value& b, bool inplace) {
  if (!is_set_like(a) || !is_set_like(b)) return Value::null();
  Value r = combine(op, a, b, a.kind());
  if (r.is_null() || !inplace || !a.is(Kind::Set)) return r;
  // s |= t mutates s (aliases see it), as list += does.
  auto* s = set_of(a);
  Value keep = r;
  s->clear();
  for (const Value& v : set_of(keep)->items) s->add(v);
  return a;
}

Value set_compare(CmpOp op, const Value& a, const Value& b) {
  if (!is_set_like(a) || !is_set_like(b)) return Value::null();
  const size_t na = set_of(a)->items.size(), nb = set_of(b)->items.size();
  switch (op) {
    case CmpOp::LE: return Value::boolean(subset(a, b));
    case CmpOp::LT: return Value::boolean(na < nb && subset(a, b));
    case CmpOp::GE: return Value::boolean(subset(b, a));
    case CmpOp::GT: return Value::boolean(na > nb && subset(b, a));
    default: return Value::null();
  }
}

bool sets_equal(const Value& a, const Value& b) {
  return set_of(a)->items.size() == set_of(b)->items.size() && subset(a, b);
}

size_t frozenset_hash(const Value& s) {
  // Order-independent: a sum of mixed element hashes (CPython mixes too,
  // so that {1, 2} and {3} do not collide by plain xor).
  size_t h = 1927868237u * (set_of(s)->items.size() + 1);
  for (const Value& v : set_of(s)->items) {
    size_t x = value_hash(v);
    h += (x ^ (x << 16) ^ 89869747u) * 3644798167u;
  }
  return h * 69069u + 907133923u;
}

std::string set_repr(const Value& s) {
  const auto& items = set_of(s)->items;
  const bool frozen = s.is(Kind::FrozenSet);
  if (items.empty()) return frozen ? "frozenset()" : "set()";
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + repr(items[i]);
  out += "}";
  return frozen ? "frozenset(" + out + ")" : out;
}

Value set_iter(const Value& s) {
  auto it = make_ref<SetIter>();
  it->set = Ref<SetObj>(set_of(s));
  it->size0 = it->set->items.size();
  return Value::object(Kind::Iterator, static_cast<Object*>(it.get()));
}

Value set_method(Kind k, const StrObj* name) {
  static const NameMap set_methods = build(false);
  static const NameMap frozenset_methods = build(true);
  const Value* v = (k == Kind::FrozenSet ? frozenset_methods : set_methods).find(name);
  return v ? *v : Value::null();
}

}  // namespace kiln::runtime

// set and frozenset: SetObj's table (value/value.h) and the Python operations
// over it, each a transcription of its CPython 3.11 function in
// Objects/setobject.c (named beside it). Elements compare with
// values_equal and hash with value_hash (CPython's hashes: runtime/base/hash.h).
//
// Re-entrancy: comparing two elements may run Python code (a Foreign
// element's __eq__), which may change the set; as in CPython, a lookup
// whose table or entry changed under it starts again, and loops over a
// table re-read it by index instead of holding entry pointers across calls.
#include "runtime/semantics/set_ops.h"

#include "runtime/semantics/census.h"

#include <stdexcept>

#include "runtime/base/hash.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/signature.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/name_map.h"

namespace kiln::runtime {

namespace {
constexpr size_t kLinearProbes = 9;
constexpr int kPerturbShift = 5;

// The growth rule of set_add_entry and set_difference_update_internal.
int64_t grown(int64_t used) { return used > 50000 ? used * 2 : used * 4; }
}  // namespace

// ------------------------------------------------------------ the table --

SetObj::~SetObj() {
  // Elements die through release_items: a frozenset nested 100k deep must
  // not recurse 100k destructors deep.
  if (used_ == 0) return;
  std::vector<Value> keys;
  keys.reserve(size_t(used_));
  for (int64_t i = 0; i <= mask_; ++i)
    if (table_[i].active()) keys.push_back(std::move(table_[i].key));
  for (int64_t i = 0; i <= mask_; ++i) table_[i].reset();
  release_items(keys);
}

// set_lookkey: the entry holding an element equal to `key`, else the
// unused entry that ends the probe sequence (never a dummy).
SetObj::Entry* SetObj::lookkey(const Value& key, int64_t hash) {
restart:
  size_t mask = size_t(mask_);
  size_t perturb = size_t(hash);
  size_t i = size_t(hash) & mask;
  for (;;) {
    Entry* entry = &table_[i];
    size_t probes = (i + kLinearProbes <= mask) ? kLinearProbes : 0;
    do {
      if (entry->hash == 0 && entry->key.is_null()) return entry;
      if (entry->hash == hash) {  // a dummy's -1 is no element's hash
        Entry* const table = table_;
        const Value startkey = entry->key;
        const bool eq = values_equal(startkey, key);
        if (table != table_ || !entry->key.is_same(startkey)) goto restart;
        if (eq) return entry;
        mask = size_t(mask_);
      }
      ++entry;
    } while (probes--);
    perturb >>= kPerturbShift;
    i = (i * 5 + 1 + perturb) & mask;
  }
}

bool SetObj::contains_entry(const Value& key, int64_t hash) { return lookkey(key, hash)->active(); }

int64_t SetObj::find_slot(const Value& key, int64_t hash) {
  const Entry* e = lookkey(key, hash);
  return e->active() ? e - table_ : -1;
}

bool SetObj::contains(const Value& v) { return contains_entry(v, int64_t(value_hash(v))); }

// set_add_entry: a new element goes to the last dummy its probe sequence
// passed, else to the unused entry that ended it (then maybe a resize).
bool SetObj::add_entry(const Value& key, int64_t hash) {
  Entry* entry;
  Entry* freeslot;
restart:
  {
    size_t mask = size_t(mask_);
    size_t i = size_t(hash) & mask;
    size_t perturb = size_t(hash);
    freeslot = nullptr;
    for (;;) {
      entry = &table_[i];
      size_t probes = (i + kLinearProbes <= mask) ? kLinearProbes : 0;
      do {
        if (entry->hash == 0 && entry->key.is_null()) goto found_unused_or_dummy;
        if (entry->hash == hash) {
          Entry* const table = table_;
          const Value startkey = entry->key;
          if (values_equal(startkey, key)) return false;
          if (table != table_ || !entry->key.is_same(startkey)) goto restart;
          mask = size_t(mask_);
        } else if (entry->hash == -1) {
          freeslot = entry;
        }
        ++entry;
      } while (probes--);
      perturb >>= kPerturbShift;
      i = (i * 5 + 1 + perturb) & mask;
    }
  }
found_unused_or_dummy:
  hash_ = -1;
  if (freeslot) {
    ++used_;
    freeslot->key = key;
    freeslot->hash = hash;
    return true;
  }
  ++fill_;
  ++used_;
  entry->key = key;
  entry->hash = hash;
  if (size_t(fill_) * 5 < size_t(mask_) * 3) return true;
  resize(grown(used_));
  return true;
}

bool SetObj::add(const Value& v) { return add_entry(v, int64_t(value_hash(v))); }

bool SetObj::discard_entry(const Value& key, int64_t hash) {
  Entry* entry = lookkey(key, hash);
  if (!entry->active()) return false;
  const Value old = std::move(entry->key);  // dies after the set is consistent again
  entry->key = Value::null();
  entry->hash = -1;
  --used_;
  hash_ = -1;
  return true;
}

bool SetObj::discard(const Value& v) { return discard_entry(v, int64_t(value_hash(v))); }

// set_insert_clean: into a table without dummies, the first unused entry
// of the probe sequence (no comparisons: `key` is known to be absent).
void SetObj::insert_clean(Entry* table, int64_t mask0, Value key, int64_t hash) {
  const size_t mask = size_t(mask0);
  size_t perturb = size_t(hash);
  size_t i = size_t(hash) & mask;
  Entry* entry;
  for (;;) {
    entry = &table[i];
    if (entry->key.is_null()) goto found_null;
    if (i + kLinearProbes <= mask)
      for (size_t j = 0; j < kLinearProbes; ++j) {
        ++entry;
        if (entry->key.is_null()) goto found_null;
      }
    perturb >>= kPerturbShift;
    i = (i * 5 + 1 + perturb) & mask;
  }
found_null:
  entry->key = std::move(key);
  entry->hash = hash;
}

// set_table_resize. Invariant kept: small_ is all unused whenever the
// table is big_ (a table of kMinSize entries is always small_).
void SetObj::resize(int64_t minused) {
  int64_t newsize = kMinSize;
  while (newsize <= minused) newsize <<= 1;
  Entry* oldtable = table_;
  const int64_t oldmask = mask_;
  std::unique_ptr<Entry[]> oldbig = std::move(big_);  // freed at the end
  Entry small_copy[kMinSize];
  Entry* newtable;
  std::unique_ptr<Entry[]> newbig;
  if (newsize == kMinSize) {
    newtable = small_;
    if (oldtable == small_) {
      if (fill_ == used_) return;  // no dummies: nothing to do (big_ was null)
      for (int64_t k = 0; k < kMinSize; ++k) {
        small_copy[k].key = std::move(small_[k].key);
        small_copy[k].hash = small_[k].hash;
        small_[k].reset();
      }
      oldtable = small_copy;
    }
  } else {
    newbig.reset(new Entry[size_t(newsize)]);
    newtable = newbig.get();
  }
  fill_ = used_;  // dummies are not copied
  for (int64_t k = 0; k <= oldmask; ++k) {
    Entry& e = oldtable[k];
    if (e.active()) insert_clean(newtable, newsize - 1, std::move(e.key), e.hash);
    e.reset();
  }
  mask_ = newsize - 1;
  table_ = newtable;
  big_ = std::move(newbig);
}

void SetObj::reserve_for(int64_t incoming) {
  if ((fill_ + incoming) * 5 >= mask_ * 3) resize((used_ + incoming) * 2);
}

void SetObj::reset_to_small() {
  for (Entry& e : small_) e.reset();
  big_.reset();
  table_ = small_;
  mask_ = kMinSize - 1;
  fill_ = used_ = 0;
  hash_ = -1;
}

// set_clear_internal: the set is empty (and small) before its elements die.
void SetObj::clear() {
  std::vector<Value> keys;
  keys.reserve(size_t(used_));
  for (int64_t i = 0; i <= mask_; ++i)
    if (table_[i].active()) keys.push_back(std::move(table_[i].key));
  for (int64_t i = 0; i <= mask_; ++i) table_[i].reset();
  reset_to_small();
  release_items(keys);
}

// set_pop: the first active entry from the finger on, wrapping around.
Value SetObj::pop() {
  if (used_ == 0) throw_key_error(Value::str("pop from an empty set"));  // KeyError('pop from an empty set')
  Entry* entry = table_ + (finger_ & mask_);
  Entry* const limit = table_ + mask_;
  while (!entry->active()) {
    ++entry;
    if (entry > limit) entry = table_;
  }
  Value key = std::move(entry->key);
  entry->key = Value::null();
  entry->hash = -1;
  --used_;
  hash_ = -1;
  finger_ = (entry - table_) + 1;
  return key;
}

// set_merge.
void SetObj::merge(const SetObj& other) {
  if (&other == this || other.used_ == 0) return;
  // One big resize first, expecting few common elements.
  if ((fill_ + other.used_) * 5 >= mask_ * 3) resize((used_ + other.used_) * 2);
  hash_ = -1;
  // Empty, same size, no dummies to drop: the same layout.
  if (fill_ == 0 && mask_ == other.mask_ && other.fill_ == other.used_) {
    for (int64_t i = 0; i <= other.mask_; ++i)
      if (other.table_[i].active()) table_[i] = other.table_[i];
    fill_ = other.fill_;
    used_ = other.used_;
    return;
  }
  // Empty: no duplicates possible, no comparisons needed.
  if (fill_ == 0) {
    fill_ = used_ = other.used_;
    for (int64_t i = 0; i <= other.mask_; ++i)
      if (other.table_[i].active()) insert_clean(table_, mask_, other.table_[i].key, other.table_[i].hash);
    return;
  }
  for (int64_t i = 0; i <= other.mask_; ++i) {
    if (!other.table_[i].active()) continue;
    const Value key = other.table_[i].key;  // add_entry may run code that changes `other`
    add_entry(key, other.table_[i].hash);
  }
}

void SetObj::swap_bodies(SetObj& b) {
  const bool a_small = table_ == small_, b_small = b.table_ == b.small_;
  std::swap(fill_, b.fill_);
  std::swap(used_, b.used_);
  std::swap(mask_, b.mask_);
  std::swap(big_, b.big_);
  for (int64_t k = 0; k < kMinSize; ++k) std::swap(small_[k], b.small_[k]);
  table_ = b_small ? small_ : big_.get();
  b.table_ = a_small ? b.small_ : b.big_.get();
  hash_ = b.hash_ = -1;
}

Ref<SetObj> SetObj::clone() const {
  auto c = make_ref<SetObj>();
  if (mask_ != kMinSize - 1) {
    c->big_.reset(new Entry[size_t(mask_ + 1)]);
    c->table_ = c->big_.get();
  }
  for (int64_t i = 0; i <= mask_; ++i) c->table_[i] = table_[i];
  c->fill_ = fill_;
  c->used_ = used_;
  c->mask_ = mask_;
  c->finger_ = finger_;
  c->hash_ = hash_;
  return c;
}

void SetObj::assign_table(std::vector<Entry> t, int64_t finger) {
  const size_t n = t.size();
  if (n < size_t(kMinSize) || (n & (n - 1)) != 0)
    throw std::logic_error("SetObj::assign_table: the size is not a power of two >= 8");
  int64_t fill = 0, used = 0;
  for (Entry& e : t) {
    if (e.active()) {
      ++fill;
      ++used;
    } else if (e.hash == -1) {
      ++fill;
    } else {
      e.hash = 0;
    }
  }
  if (fill >= int64_t(n)) throw std::logic_error("SetObj::assign_table: no unused entry");
  clear();
  if (n != size_t(kMinSize)) {
    big_.reset(new Entry[n]);
    table_ = big_.get();
  }
  for (size_t i = 0; i < n; ++i) table_[i] = std::move(t[i]);
  mask_ = int64_t(n) - 1;
  fill_ = fill;
  used_ = used;
  finger_ = finger;
  hash_ = -1;
}

int64_t SetObj::frozen_hash() {
  if (hash_ != -1) return hash_;
  FrozenSetHash h;
  for_each([&](const Entry& e) { h.add(e.hash); });
  hash_ = h.finish(used_);
  return hash_;
}

std::vector<Value> SetObj::items() const {
  std::vector<Value> out;
  out.reserve(size_t(used_));
  for_each([&](const Entry& e) { out.push_back(e.key); });
  return out;
}

Value make_set(bool frozen) { return Value::object(frozen ? Kind::FrozenSet : Kind::Set, make_ref<SetObj>()); }

// ------------------------------------------------------- the operations --

namespace {

SetObj* set_of(const Value& v) { return v.as<SetObj>(); }

// set_next: the next active entry at or after `pos` (by index: the table
// may change between calls), or false at the end.
bool next_entry(const SetObj& s, int64_t& pos, Value& key, int64_t& hash) {
  const SetObj::Entry* t = s.table();
  while (pos < s.capacity() && !t[pos].active()) ++pos;
  if (pos >= s.capacity()) return false;
  key = t[pos].key;
  hash = t[pos].hash;
  ++pos;
  return true;
}

// PyAnySet_Check(other): the set to read, or Null.
Value any_set(const Value& v) {
  if (is_set_like(v)) return v;
  if (foreign_container(v) == Kind::Set) return native_container(v);
  return Value::null();
}

// PyDict_CheckExact(other): a kiln dict or the caller's Python dict.
bool exact_dict(const Value& v) { return v.is(Kind::Dict) || foreign_container(v) == Kind::Dict; }
std::vector<Value> dict_keys(const Value& d) {
  if (!d.is(Kind::Dict)) return to_vector(d);
  std::vector<Value> keys;
  for (const auto& kv : d.as<DictObj>()->entries) keys.push_back(kv.first);
  return keys;
}
bool dict_has(const Value& d, const Value& key) {
  return d.is(Kind::Dict) ? d.as<DictObj>()->find(key) != nullptr : contains(d, key);
}

// make_new_set_basetype(type(so)): a new empty set of so's type.
Value new_like(const Value& so) { return make_set(so.is(Kind::FrozenSet)); }

// The frozenset hash of a set used as an element (set_contains & co.:
// CPython retries a set key as a frozenset).
int64_t key_hash(const Value& key) {
  if (key.is(Kind::Set)) return set_of(key)->frozen_hash();
  return int64_t(value_hash(key));
}

// set_update_internal.
void update_internal(const Value& so_v, const Value& other) {
  SetObj* so = set_of(so_v);
  if (Value o = any_set(other); !o.is_null()) {
    so->merge(*set_of(o));
    return;
  }
  if (exact_dict(other)) {
    const std::vector<Value> keys = dict_keys(other);
    so->reserve_for(int64_t(keys.size()));
    for (const Value& k : keys) so->add_entry(k, int64_t(value_hash(k)));
    return;
  }
  Value it = get_iter(other);
  Value item;
  while (it.as<IteratorObj>()->next(item)) so->add(item);
}

// set_copy: make_new_set_basetype(type(so), so).
Value copy_of(const Value& so) {
  Value out = new_like(so);
  set_of(out)->merge(*set_of(so));
  return out;
}

// set_intersection.
Value intersection(const Value& so_v, const Value& other) {
  if (other.is_same(so_v)) return copy_of(so_v);
  Value result = new_like(so_v);
  SetObj* r = set_of(result);
  if (Value o = any_set(other); !o.is_null()) {
    SetObj* big = set_of(so_v);
    SetObj* small = set_of(o);
    if (small->size() > big->size()) std::swap(big, small);
    int64_t pos = 0, hash;
    Value key;
    while (next_entry(*small, pos, key, hash))
      if (big->contains_entry(key, hash)) r->add_entry(key, hash);
    return result;
  }
  SetObj* so = set_of(so_v);
  Value it = get_iter(other);
  Value key;
  while (it.as<IteratorObj>()->next(key)) {
    const int64_t hash = int64_t(value_hash(key));
    if (so->contains_entry(key, hash)) {
      r->add_entry(key, hash);
      if (r->size() >= so->size()) break;
    }
  }
  return result;
}

// set_intersection_multi.
Value intersection_multi(const Value& so, const std::vector<Value>& others) {
  if (others.empty()) return copy_of(so);
  Value result = so;
  for (const Value& other : others) result = intersection(result, other);
  return result;
}

void clear_set(const Value& so) { set_of(so)->clear(); }

// set_difference_update_internal.
void difference_update(const Value& so_v, const Value& other) {
  SetObj* so = set_of(so_v);
  if (other.is_same(so_v)) return clear_set(so_v);
  if (Value o = any_set(other); !o.is_null()) {
    // The other set more than 8 times larger: its intersection with so.
    if ((set_of(o)->size() >> 3) > so->size()) o = intersection(so_v, o);
    int64_t pos = 0, hash;
    Value key;
    while (next_entry(*set_of(o), pos, key, hash)) so->discard_entry(key, hash);
  } else {
    Value it = get_iter(other);
    Value key;
    while (it.as<IteratorObj>()->next(key)) so->discard(key);
  }
  // More than a quarter dummies: resize them away.
  if (size_t(so->fill() - so->size()) <= size_t(so->capacity() - 1) / 4) return;
  so->resize(grown(so->size()));
}

// set_copy_and_difference.
Value copy_and_difference(const Value& so, const Value& other) {
  Value result = copy_of(so);
  difference_update(result, other);
  return result;
}

// set_difference.
Value difference(const Value& so_v, const Value& other) {
  int64_t other_size;
  Value o = any_set(other);
  const bool dict = o.is_null() && exact_dict(other);
  if (!o.is_null())
    other_size = set_of(o)->size();
  else if (dict)
    other_size = length(other);
  else
    return copy_and_difference(so_v, other);
  SetObj* so = set_of(so_v);
  // len(so) much larger than len(other): copy so, then remove other's.
  if ((so->size() >> 2) > other_size) return copy_and_difference(so_v, other);
  Value result = new_like(so_v);
  SetObj* r = set_of(result);
  int64_t pos = 0, hash;
  Value key;
  while (next_entry(*so, pos, key, hash)) {
    const bool common = dict ? dict_has(other, key) : set_of(o)->contains_entry(key, hash);
    if (!common) r->add_entry(key, hash);
  }
  return result;
}

// set_difference_multi.
Value difference_multi(const Value& so, const std::vector<Value>& others) {
  if (others.empty()) return copy_of(so);
  Value result = difference(so, others[0]);
  for (size_t i = 1; i < others.size(); ++i) difference_update(result, others[i]);
  return result;
}

// set_symmetric_difference_update.
void symmetric_difference_update(const Value& so_v, const Value& other) {
  SetObj* so = set_of(so_v);
  if (other.is_same(so_v)) return clear_set(so_v);
  auto toggle = [&](const Value& key, int64_t hash) {
    if (!so->discard_entry(key, hash)) so->add_entry(key, hash);
  };
  if (exact_dict(other)) {
    for (const Value& k : dict_keys(other)) toggle(k, int64_t(value_hash(k)));
    return;
  }
  Value o = any_set(other);
  if (o.is_null()) {
    o = new_like(so_v);
    update_internal(o, other);
  }
  int64_t pos = 0, hash;
  Value key;
  while (next_entry(*set_of(o), pos, key, hash)) toggle(key, hash);
}

// set_symmetric_difference: a new set of so's type from `other`, then so's
// elements toggled in it.
Value symmetric_difference(const Value& so, const Value& other) {
  Value result = new_like(so);
  update_internal(result, other);
  symmetric_difference_update(result, so);
  return result;
}

// set_issubset.
bool issubset(const Value& so_v, const Value& other) {
  Value o = any_set(other);
  if (o.is_null()) o = set_from(other, false);
  SetObj* so = set_of(so_v);
  if (so->size() > set_of(o)->size()) return false;
  int64_t pos = 0, hash;
  Value key;
  while (next_entry(*so, pos, key, hash))
    if (!set_of(o)->contains_entry(key, hash)) return false;
  return true;
}

// set_issuperset.
bool issuperset(const Value& so_v, const Value& other) {
  if (Value o = any_set(other); !o.is_null()) return issubset(o, so_v);
  Value it = get_iter(other);
  Value key;
  while (it.as<IteratorObj>()->next(key))
    if (!set_of(so_v)->contains(key)) return false;
  return true;
}

// set_isdisjoint.
bool isdisjoint(const Value& so_v, const Value& other) {
  if (other.is_same(so_v)) return set_of(so_v)->empty();
  if (Value o = any_set(other); !o.is_null()) {
    SetObj* big = set_of(so_v);
    SetObj* small = set_of(o);
    if (small->size() > big->size()) std::swap(big, small);
    int64_t pos = 0, hash;
    Value key;
    while (next_entry(*small, pos, key, hash))
      if (big->contains_entry(key, hash)) return false;
    return true;
  }
  Value it = get_iter(other);
  Value key;
  while (it.as<IteratorObj>()->next(key))
    if (set_of(so_v)->contains(key)) return false;
  return true;
}

// set_iterator: scans the table from its position; a size change raises,
// and keeps raising; once exhausted it stays exhausted.
struct SetIter final : IteratorObj {
  Ref<SetObj> set;  // null once exhausted
  int64_t pos = 0, used0 = 0;
  bool next(Value& out) override {
    if (!set) return false;
    if (used0 != set->size()) {
      used0 = -1;
      throw_error(ErrorKind::RuntimeError, "Set changed size during iteration");
    }
    const SetObj::Entry* t = set->table();
    while (pos < set->capacity() && !t[pos].active()) ++pos;
    if (pos >= set->capacity()) {
      set = Ref<SetObj>();
      return false;
    }
    out = t[pos++].key;
    return true;
  }
  void traverse(Visitor& v) const override { visit(v, set); }
};

// ---- methods ------------------------------------------------------------

const std::vector<Value>& others_of(const std::vector<Value>& a) { return a[1].as<TupleObj>()->items; }

Value m_add(CallContext&, const std::vector<Value>& a) {
  set_of(a[0])->add(a[1]);
  return Value::none();
}
// set_discard / set_remove: a set element is looked up as a frozenset.
Value m_discard(CallContext&, const std::vector<Value>& a) {
  set_of(a[0])->discard_entry(a[1], key_hash(a[1]));
  return Value::none();
}
Value m_remove(CallContext&, const std::vector<Value>& a) {
  if (!set_of(a[0])->discard_entry(a[1], key_hash(a[1]))) throw_key_error(a[1]);
  return Value::none();
}
Value m_pop(CallContext&, const std::vector<Value>& a) { return set_of(a[0])->pop(); }
Value m_clear(CallContext&, const std::vector<Value>& a) {
  clear_set(a[0]);
  return Value::none();
}
Value m_update(CallContext&, const std::vector<Value>& a) {
  for (const Value& other : others_of(a)) update_internal(a[0], other);
  return Value::none();
}
Value m_difference_update(CallContext&, const std::vector<Value>& a) {
  for (const Value& other : others_of(a)) difference_update(a[0], other);
  return Value::none();
}
Value m_intersection_update(CallContext&, const std::vector<Value>& a) {
  Value tmp = intersection_multi(a[0], others_of(a));  // always a new set
  set_of(a[0])->swap_bodies(*set_of(tmp));
  return Value::none();
}
Value m_symmetric_difference_update(CallContext&, const std::vector<Value>& a) {
  symmetric_difference_update(a[0], a[1]);
  return Value::none();
}
Value m_copy(CallContext&, const std::vector<Value>& a) {
  if (a[0].is(Kind::FrozenSet)) return a[0];  // frozenset.copy() of a frozenset is itself
  return copy_of(a[0]);
}
Value m_union(CallContext&, const std::vector<Value>& a) {
  Value result = copy_of(a[0]);
  for (const Value& other : others_of(a))
    if (!other.is_same(a[0])) update_internal(result, other);
  return result;
}
Value m_intersection(CallContext&, const std::vector<Value>& a) { return intersection_multi(a[0], others_of(a)); }
Value m_difference(CallContext&, const std::vector<Value>& a) { return difference_multi(a[0], others_of(a)); }
Value m_symmetric_difference(CallContext&, const std::vector<Value>& a) { return symmetric_difference(a[0], a[1]); }
Value m_issubset(CallContext&, const std::vector<Value>& a) { return Value::boolean(issubset(a[0], a[1])); }
Value m_issuperset(CallContext&, const std::vector<Value>& a) { return Value::boolean(issuperset(a[0], a[1])); }
Value m_isdisjoint(CallContext&, const std::vector<Value>& a) { return Value::boolean(isdisjoint(a[0], a[1])); }

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
    {"difference_update", "self, *others", m_difference_update, true},
    {"intersection_update", "self, *others", m_intersection_update, true},
    {"symmetric_difference_update", "self, other, /", m_symmetric_difference_update, true},
    {"copy", "self, /", m_copy, false},
    {"union", "self, *others", m_union, false},
    {"intersection", "self, *others", m_intersection, false},
    {"difference", "self, *others", m_difference, false},
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
      m.set(d.name, census::permanent_value(b));
    }
  return m;
}

}  // namespace

Value set_from(const Value& iterable, bool frozen) {
  Value out = make_set(frozen);
  update_internal(out, iterable);
  return out;
}

Value set_copy(const Value& s, bool frozen) {
  Value out = make_set(frozen);
  set_of(out)->merge(*set_of(s));
  return out;
}

Value set_clone(const Value& s, bool frozen) {
  return Value::object(frozen ? Kind::FrozenSet : Kind::Set, set_of(s)->clone());
}

bool sets_same_layout(const Value& a, const Value& b) {
  const SetObj* x = set_of(a);
  const SetObj* y = set_of(b);
  if (x->capacity() != y->capacity() || x->size() != y->size() || x->fill() != y->fill()) return false;
  for (int64_t i = 0; i < x->capacity(); ++i) {
    const SetObj::Entry& e = x->table()[i];
    const SetObj::Entry& f = y->table()[i];
    if (e.hash != f.hash || e.active() != f.active()) return false;
    if (e.active() && !e.key.is_same(f.key) && !values_equal(e.key, f.key)) return false;
  }
  return true;
}

void set_update(const Value& s, const Value& other) { update_internal(s, other); }

Value set_binary(BinOp op, const Value& a, const Value& b0, bool inplace) {
  if (!is_set_like(a)) return Value::null();
  const Value b = any_set(b0);
  if (b.is_null()) return Value::null();
  if (inplace && a.is(Kind::Set)) {  // set_ior & co.: s itself changes (aliases see it)
    switch (op) {
      case BinOp::OR: update_internal(a, b); return a;
      case BinOp::AND: {
        Value tmp = intersection(a, b);
        set_of(a)->swap_bodies(*set_of(tmp));
        return a;
      }
      case BinOp::SUB: difference_update(a, b); return a;
      case BinOp::XOR: symmetric_difference_update(a, b); return a;
      default: return Value::null();
    }
  }
  switch (op) {
    case BinOp::OR: {  // set_or
      Value result = copy_of(a);
      if (!b.is_same(a)) update_internal(result, b);
      return result;
    }
    case BinOp::AND: return intersection(a, b);
    case BinOp::SUB: return difference(a, b);
    case BinOp::XOR: return symmetric_difference(a, b);
    default: return Value::null();
  }
}

Value set_compare(CmpOp op, const Value& a, const Value& b) {
  if (!is_set_like(a) || !is_set_like(b)) return Value::null();
  const int64_t na = set_of(a)->size(), nb = set_of(b)->size();
  switch (op) {
    case CmpOp::LE: return Value::boolean(issubset(a, b));
    case CmpOp::LT: return Value::boolean(na < nb && issubset(a, b));
    case CmpOp::GE: return Value::boolean(issubset(b, a));
    case CmpOp::GT: return Value::boolean(na > nb && issubset(b, a));
    default: return Value::null();
  }
}

bool sets_equal(const Value& a, const Value& b) {
  return set_of(a)->size() == set_of(b)->size() && issubset(a, b);
}

bool set_contains(const Value& s, const Value& item) { return set_of(s)->contains_entry(item, key_hash(item)); }

int64_t frozenset_hash(const Value& s) { return set_of(s)->frozen_hash(); }

std::string set_repr(const Value& s) {
  const std::vector<Value> items = set_of(s)->items();
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
  it->used0 = it->set->size();
  return Value::object(Kind::Iterator, static_cast<Object*>(it.get()));
}

Value set_method(Kind k, const StrObj* name) {
  static const NameMap set_methods = build(false);
  static const NameMap frozenset_methods = build(true);
  const Value* v = (k == Kind::FrozenSet ? frozenset_methods : set_methods).find(name);
  return v ? *v : Value::null();
}

}  // namespace kiln::runtime

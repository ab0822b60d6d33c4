// set and frozenset: construction, the operators (| & - ^ and the subset
// comparisons), equality and hashing, iteration and the methods
// (set.add, frozenset.union, ...). The object is SetObj (value/value.h), CPython
// 3.11's table; each operation here takes the path its CPython function
// takes (set_merge's fast paths, set_intersection iterating the smaller
// set, set_difference's two strategies, ...), because the path decides
// where the elements land and so the order a program sees.
//
// "A set" as `other` means what CPython's PyAnySet_Check accepts: a kiln
// set or frozenset, or the caller's Python set (read through the seam as a
// native set with the same table: native_container).
#pragma once

#include <string>

#include "runtime/value/code.h"
#include "runtime/value/value.h"

namespace kiln::runtime {

inline bool is_set_like(const Value& v) { return v.is(Kind::Set) || v.is(Kind::FrozenSet); }

// set(iterable) / frozenset(iterable) (make_new_set): TypeError for an
// unhashable item. frozenset(fs) is not special here (builtins.cpp).
Value set_from(const Value& iterable, bool frozen);
// s.copy() as CPython makes it (a new table filled by set_merge: not
// always s's layout). For an exact copy, SetObj::clone.
Value set_copy(const Value& s, bool frozen);
// An exact copy as a set or frozenset (same table, dummies and finger).
Value set_clone(const Value& s, bool frozen);
// Whether two sets have the same table: what the order of every later
// operation depends on (the finger aside).
bool sets_same_layout(const Value& a, const Value& b);
// set.update(other) for one `other` (set_update_internal).
void set_update(const Value& s, const Value& other);

// a OP b for a set and a set (Null when either is not one): the result has
// a's type; `|=` and friends on a set update it in place, as Python's do.
Value set_binary(BinOp op, const Value& a, const Value& b, bool inplace);
// <, <=, >, >= between sets (Null when either is not one).
Value set_compare(CmpOp op, const Value& a, const Value& b);
bool sets_equal(const Value& a, const Value& b);  // set == frozenset with the same items too
// `item in s`: a set item is looked up as the frozenset of its items, as
// CPython does (set_contains).
bool set_contains(const Value& s, const Value& item);
int64_t frozenset_hash(const Value& s);
std::string set_repr(const Value& s);  // {1, 2}, set(), frozenset({1}), frozenset()
Value set_iter(const Value& s);        // RuntimeError if the set changes size meanwhile

// Native methods of set / frozenset (Null when there is none).
Value set_method(Kind k, const StrObj* name);

}  // namespace kiln::runtime

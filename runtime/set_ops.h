// set and frozenset: construction, the operators (| & - ^ and the subset
// comparisons), equality and hashing, iteration and the methods
// (set.add, frozenset.union, ...). The object is SetObj (value.h).
#pragma once

#include <string>

#include "runtime/code.h"
#include "runtime/value.h"

namespace kiln::runtime {

inline bool is_set_like(const Value& v) { return v.is(Kind::Set) || v.is(Kind::FrozenSet); }

// set(iterable) / frozenset(iterable): TypeError for an unhashable item.
Value set_from(const Value& iterable, bool frozen);
// A copy of a set or frozenset, as a set or a frozenset.
Value set_copy(const Value& s, bool frozen);

// a OP b for two sets (Null when either is not one): the result has a's
// type; `|=` and friends on a set update it in place, as Python's do.
Value set_binary(BinOp op, const Value& a, const Value& b, bool inplace);
// <, <=, >, >= between sets (Null when either is not one).
Value set_compare(CmpOp op, const Value& a, const Value& b);
bool sets_equal(const Value& a, const Value& b);  // set == frozenset with the same items too
size_t frozenset_hash(const Value& s);             // independent of insertion order
std::string set_repr(const Value& s);               // {1, 2}, set(), frozenset({1}), frozenset()
Value set_iter(const Value& s);                     // RuntimeError if the set changes size meanwhile

// Native methods of set / frozenset (Null when there is none).
Value set_method(Kind k, const StrObj* name);

}  // namespace kiln::runtime

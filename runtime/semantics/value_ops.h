// Python semantics over Values: what the VM does for each operator, and
// what the tracer will constant-fold. Tensors dispatch to the op registry
// (value/operators.def names the op); Foreign objects to their vtable.
#pragma once

#include <string>

#include "runtime/value/code.h"
#include "runtime/value/value.h"

namespace kiln::runtime {

std::string type_name(const Value& v);  // "int", "Tensor", a module's class name, ...
std::string repr(const Value& v);
std::string to_str(const Value& v);     // str(v): strings unquoted
bool truth(const Value& v);             // TypeError-free except tensors with numel != 1
bool values_equal(const Value& a, const Value& b);  // Python == for non-tensors
size_t value_hash(const Value& v);      // TypeError for list/dict

// Ints beyond int64. kiln's int is int64; an embedder that has exact
// integers (python/: Python's own ints, as Foreign values) installs these,
// and an int operation that overflows gives the exact result through them
// instead of raising OverflowError. Results that fit come back as Int.
struct BigIntHooks {
  Value (*binary)(BinOp op, int64_t x, int64_t y);  // x op y, exactly
  Value (*from_double)(double d);                   // int(d) for a finite d beyond int64
  // The embedder's builtin `name` on arguments one of which is one of its
  // big ints (abs, float, divmod, hex, ...); Null when it has none.
  Value (*call_builtin)(const std::string& name, const CallArgs& args);
  // Whether `v` is one of its big ints.
  bool (*is_big)(const Value& v);
};
void set_bigint_hooks(const BigIntHooks* hooks);  // nullptr: OverflowError (the default)
const BigIntHooks* bigint_hooks();

Value binary_op(BinOp op, const Value& a, const Value& b, bool inplace = false);
Value compare_op(CmpOp op, const Value& a, const Value& b);
Value unary_op(UnOp op, const Value& a);
bool contains(const Value& container, const Value& item);  // `item in container`

// Attribute access on any value (modules through module_getattr; tensors:
// shape, dtype, ndim, T and every registry op as a bound method).
Value get_attr(CallContext& ctx, const Value& obj, const StrObj* name);
// get_attr that returns Null instead of raising AttributeError.
Value get_attr_or_null(CallContext& ctx, const Value& obj, const StrObj* name);
void set_attr(const Value& obj, const Ref<StrObj>& name, const Value& value);
// obj.name = value as the VM runs it: a property's setter is called through ctx.
void set_attr(CallContext& ctx, const Value& obj, const Ref<StrObj>& name, const Value& value);
// del obj.name (DELETE_ATTR, delattr): a module's entry leaves its dict
// (module_delattr), a property's deleter runs, a Python object's own
// __delattr__ runs; otherwise CPython's AttributeError.
void del_attr(CallContext& ctx, const Value& obj, const StrObj* name);
// LOAD_METHOD: sets `method` and `self` (self Null when `method` is the
// attribute itself, not a function to be called with obj prepended).
void load_method(CallContext& ctx, const Value& obj, const StrObj* name, Value& method, Value& self);

Value get_item(const Value& obj, const Value& key);
void set_item(const Value& obj, const Value& key, const Value& value);
void del_item(const Value& obj, const Value& key);
Value make_slice(Value start, Value stop, Value step);

Value get_iter(const Value& v);
int64_t length(const Value& v);
// Materialises any iterable into a vector (tuples/lists directly).
std::vector<Value> to_vector(const Value& iterable);
// The length of `len` items repeated n times (seq * n; 0 when n <= 0), known
// before anything is copied: MemoryError, as in CPython, for what could not
// be held (or is over the run's memory budget: runtime/base/budget.h).
size_t repeated_length(size_t len, int64_t n, size_t item_bytes, const char* what);
// dict(x) / d.update(x): another dict's entries or (key, value) pairs.
void dict_update(DictObj* into, const Value& other);
// What a Foreign object is, when it is exactly a built-in list, dict or set
// (ForeignVTable::container); Kind::Null for anything else.
Kind foreign_container(const Value& v);
// What `is` compares: the object (for a Foreign value, the foreign object
// itself: each crossing of the seam makes a new ForeignObj for it).
const void* object_identity(const Value& v);
// v with every foreign list (at any depth, through lists and tuples) read
// into a native list: for ops, which read their arguments and never keep
// or mutate them. Anything else is returned as it is.
Value native_sequences(const Value& v);
// A caller's Python list, dict or set as a native one holding the same items
// (one level: what it holds stays as it is); anything else unchanged. A set
// has the Python set's table when exact_set_snapshot gives it, else its
// elements are added in the Python set's order.
Value native_container(const Value& v);
// The caller's Python set as a native set with its very table (the same
// order, the same result of every later operation), or Null when the seam
// cannot give one (ForeignVTable::set_snapshot).
Value exact_set_snapshot(const Value& v);

// Python's int / float conversions with range checks; errors name `what`.
int64_t to_index(const Value& v, const char* what);
// Python's operator.index for kiln's ints: TypeError "'float' object
// cannot be interpreted as an integer" otherwise (range(), enumerate()).
int64_t as_index(const Value& v);

}  // namespace kiln::runtime

// Value: what KBC computes with. A 16-byte tagged union: immediates (None,
// bool, int, float) inline, everything else a counted pointer to an Object.
// The semantics of each kind follow Python's; Python-level operations on
// Values (repr, ==, hash, attribute access, operators) are in semantics/value_ops.h.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/object.h"
#include "runtime/value/tensor.h"

namespace kiln::runtime {

struct Code;
struct ClassObj;
struct ModuleObj;
class CallContext;

// Order matters: every kind from Str on is heap-allocated (is_heap()).
#define KILN_VALUE_KINDS(X)          \
  X(None, "NoneType")                \
  X(Bool, "bool")                    \
  X(Int, "int")                      \
  X(Float, "float")                  \
  X(Null, "NULL")                    \
  X(Str, "str")                      \
  X(Tensor, "Tensor")                \
  X(Tuple, "tuple")                  \
  X(List, "list")                    \
  X(Dict, "dict")                    \
  X(Set, "set")                      \
  X(FrozenSet, "frozenset")          \
  X(Slice, "slice")                  \
  X(Range, "range")                  \
  X(Iterator, "iterator")            \
  X(Cell, "cell")                    \
  X(Code, "code")                    \
  X(Function, "function")            \
  X(BoundMethod, "method")           \
  X(Builtin, "builtin_function")     \
  X(Class, "type")                   \
  X(Property, "property")            \
  X(StaticMethod, "staticmethod")    \
  X(ClassMethod, "classmethod")      \
  X(Super, "super")                  \
  X(Module, "Module")                \
  X(Foreign, "foreign")

enum class Kind : uint8_t {
#define KILN_KIND_ENUM(name, pyname) name,
  KILN_VALUE_KINDS(KILN_KIND_ENUM)
#undef KILN_KIND_ENUM
};
// Null is the VM's internal "no value" marker (empty cell, LOAD_METHOD's
// missing self, unbound local); user code can never observe it.
static_assert(Kind::Null < Kind::Str, "immediate kinds must precede heap kinds");
const char* kind_name(Kind k);

// Value's copy/move/destroy run on every stack operation of the VM; GCC
// does not always inline them on its own (measured: 25% of an attribute
// loop spent in an out-of-line operator=).
#define KILN_ALWAYS_INLINE inline __attribute__((always_inline))

class Value {
 public:
  Value() noexcept : kind_(Kind::None) { u_.i = 0; }
  static Value none() noexcept { return Value(); }
  static Value null() noexcept { Value v; v.kind_ = Kind::Null; return v; }
  static Value boolean(bool b) noexcept { Value v; v.kind_ = Kind::Bool; v.u_.i = b; return v; }
  static Value integer(int64_t i) noexcept { Value v; v.kind_ = Kind::Int; v.u_.i = i; return v; }
  static Value floating(double f) noexcept { Value v; v.kind_ = Kind::Float; v.u_.f = f; return v; }
  static Value str(std::string_view s);
  static Value tensor(const Tensor& t);
  // Takes a new reference to `o`, which must be of the object type of `k`.
  static Value object(Kind k, Object* o) noexcept {
    Value v; v.kind_ = k; v.u_.o = o; o->incref(); return v;
  }
  template <class T>
  static Value object(Kind k, const Ref<T>& r) noexcept { return object(k, static_cast<Object*>(r.get())); }

  KILN_ALWAYS_INLINE Value(const Value& o) noexcept : kind_(o.kind_), u_(o.u_) { if (is_heap()) u_.o->incref(); }
  KILN_ALWAYS_INLINE Value(Value&& o) noexcept : kind_(o.kind_), u_(o.u_) { o.kind_ = Kind::None; }
  KILN_ALWAYS_INLINE Value& operator=(const Value& o) noexcept {
    if (o.is_heap()) o.u_.o->incref();
    release();
    kind_ = o.kind_; u_ = o.u_;
    return *this;
  }
  KILN_ALWAYS_INLINE Value& operator=(Value&& o) noexcept {
    if (this != &o) { release(); kind_ = o.kind_; u_ = o.u_; o.kind_ = Kind::None; }
    return *this;
  }
  KILN_ALWAYS_INLINE ~Value() { release(); }

  Kind kind() const noexcept { return kind_; }
  bool is_heap() const noexcept { return kind_ >= Kind::Str; }
  bool is(Kind k) const noexcept { return kind_ == k; }
  bool is_none() const noexcept { return kind_ == Kind::None; }
  bool is_null() const noexcept { return kind_ == Kind::Null; }
  // bool, int or float (Python's numbers; bool counts as int as in Python)
  bool is_number() const noexcept { return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float; }

  // Unchecked accessors: the caller has checked kind().
  bool as_bool() const noexcept { return u_.i != 0; }
  int64_t as_int() const noexcept { return u_.i; }     // Bool or Int
  double as_float() const noexcept { return u_.f; }    // Float only
  double as_number() const noexcept { return kind_ == Kind::Float ? u_.f : double(u_.i); }
  Object* obj() const noexcept { return u_.o; }
  template <class T> T* as() const noexcept { return static_cast<T*>(u_.o); }
  Tensor as_tensor() const;
  const std::string& as_str() const;

  // Identity in Python's `is` sense (same immediate value, or same object).
  // Trap: a foreign object gets a new ForeignObj each time it crosses the
  // seam, so two Foreign values are the same when their handles are.
  bool is_same(const Value& o) const noexcept {
    if (kind_ != o.kind_) return false;
    if (!is_heap()) return u_.i == o.u_.i;
    return u_.o == o.u_.o || (kind_ == Kind::Foreign && same_foreign(o));
  }

 private:
  KILN_ALWAYS_INLINE void release() noexcept { if (is_heap()) u_.o->decref(); }
  bool same_foreign(const Value& o) const noexcept;  // value.cpp
  Kind kind_;
  union { int64_t i; double f; Object* o; } u_;
};
static_assert(sizeof(Value) == 16, "Value must stay two words: it is copied on every stack op");

// A Value's object, for Object::traverse (immediates hold none).
inline void visit(Visitor& v, const Value& x) {
  if (x.is_heap()) v(x.obj());
}
inline void visit(Visitor& v, const std::vector<Value>& xs) {
  for (const Value& x : xs) visit(v, x);
}

// ----- heap object types -----------------------------------------------------

struct StrObj final : Object {
  explicit StrObj(std::string v);
  std::string s;
  int64_t hash = -1;  // CPython's hash of s (runtime/base/hash.h), computed on first use; -1: not yet
  bool interned = false;
  void traverse(Visitor&) const override {}
};
// Interned strings are unique per content and live forever; maps keyed by
// name (module dicts, globals, class methods) compare them by pointer.
Ref<StrObj> intern(std::string_view s);
Value intern_value(std::string_view s);

// Destroys a container's items without recursing deeper than a fixed
// depth (CPython's "trashcan"): items met below it are parked and freed by
// the outermost call, so dropping a 100k-deep nested list cannot overflow
// the C++ stack.
void release_items(std::vector<Value>& items);

struct TupleObj final : Object {
  ~TupleObj() override { release_items(items); }
  std::vector<Value> items;
  void traverse(Visitor& v) const override { visit(v, items); }
};
struct ListObj final : Object {
  ~ListObj() override { release_items(items); }
  std::vector<Value> items;
  void traverse(Visitor& v) const override { visit(v, items); }
  void clear() override;
};

// Python's hash() and == for dict keys. The value model holds the table;
// runtime/semantics/ gives the meaning (value_hash, values_equal) and
// installs it from a static initialiser, before any program runs.
struct KeySemantics {
  size_t (*hash)(const Value& v) = nullptr;
  bool (*equal)(const Value& a, const Value& b) = nullptr;
};
void set_key_semantics(KeySemantics semantics);
struct ValueHash { size_t operator()(const Value& v) const; };  // TypeError if unhashable
struct ValueEq { bool operator()(const Value& a, const Value& b) const; };

// Insertion-ordered dict with Python key semantics (1 == 1.0 == True).
struct DictObj final : Object {
  ~DictObj() override;
  std::vector<std::pair<Value, Value>> entries;
  std::unordered_map<Value, size_t, ValueHash, ValueEq> index;
  const Value* find(const Value& key) const;
  void set(const Value& key, Value value);
  bool erase(const Value& key);
  // Each key twice: `entries` and `index` hold a reference each.
  void traverse(Visitor& v) const override;
  void clear() override;
};

// set and frozenset (Kind::Set / Kind::FrozenSet share this object):
// CPython 3.11's hash table (Objects/setobject.c), slot for slot, so that
// a set iterates, prints and pops in CPython's order. That order is the
// table's, so it depends on every step of the set's history: the probe
// sequence (LINEAR_PROBES 9 neighbours, then perturbation by PERTURB_SHIFT
// 5), where a deleted element leaves a dummy, when the table resizes and to
// what size, and which path each operation takes (runtime/semantics/set_ops.cpp
// follows CPython's functions one by one). Element hashes are CPython's
// (runtime/base/hash.h); elements compare as dict keys do (1, 1.0 and True are
// one element, the first added is kept).
//
// An entry is unused (key Null, hash 0), a dummy left by a deletion (key
// Null, hash -1) or active. TRAP: a moved-from Value is None, not Null:
// entries are emptied with reset(), never left moved-from.
struct SetObj final : Object {
  struct Entry {
    Value key = Value::null();
    int64_t hash = 0;
    bool active() const noexcept { return !key.is_null(); }
    bool dummy() const noexcept { return key.is_null() && hash == -1; }
    void reset() noexcept { key = Value::null(); hash = 0; }
  };
  static constexpr int64_t kMinSize = 8;  // PySet_MINSIZE: the table inside the object

  SetObj() = default;
  ~SetObj() override;
  SetObj(const SetObj&) = delete;
  SetObj& operator=(const SetObj&) = delete;

  int64_t size() const noexcept { return used_; }
  bool empty() const noexcept { return used_ == 0; }

  // One element, by Python's rules (value_hash: TypeError if unhashable).
  bool contains(const Value& v);
  bool add(const Value& v);      // false when an equal element is there already
  bool discard(const Value& v);  // false when absent
  // The same with the element's hash known (CPython's *_entry functions).
  bool contains_entry(const Value& key, int64_t hash);
  bool add_entry(const Value& key, int64_t hash);
  bool discard_entry(const Value& key, int64_t hash);
  int64_t find_slot(const Value& key, int64_t hash);  // the entry holding key, or -1
  Value pop();  // set.pop(): from the search finger on; KeyError when empty
  void clear() override;  // back to the table inside the object (the finger stays)

  // set_merge: other's elements added in its table order, with CPython's
  // fast paths (copy the layout into an empty table of the same size).
  void merge(const SetObj& other);
  // set_update_internal's dict path: one resize for `incoming` more, first.
  void reserve_for(int64_t incoming);
  // set_table_resize: a table of the smallest power of two > minused,
  // reinserting in table order (dummies dropped).
  void resize(int64_t minused);
  // set_swap_bodies: exchanges tables and counts (not the fingers).
  void swap_bodies(SetObj& other);
  // An exact copy: table, counts, dummies, finger (what Python's copy is
  // not: set(s) may lay its elements out differently).
  Ref<SetObj> clone() const;
  void traverse(Visitor& v) const override {
    for_each([&v](const Entry& e) { visit(v, e.key); });
  }

  // The table (python/ copies layouts across the seam; guards compare them).
  const Entry* table() const noexcept { return table_; }
  int64_t capacity() const noexcept { return mask_ + 1; }
  int64_t fill() const noexcept { return fill_; }
  int64_t finger() const noexcept { return finger_; }
  // Replaces the contents by this table (capacity a power of two >= 8,
  // some entry unused, active hashes the keys' value_hash).
  void assign_table(std::vector<Entry> table, int64_t finger);
  // The hash a frozenset of these elements has (cached until a change).
  int64_t frozen_hash();

  // The active elements in table order: what iteration gives.
  std::vector<Value> items() const;
  template <class F>
  void for_each(F&& f) const {
    for (int64_t i = 0; i <= mask_; ++i)
      if (table_[i].active()) f(table_[i]);
  }

 private:
  Entry* lookkey(const Value& key, int64_t hash);
  void insert_clean(Entry* table, int64_t mask, Value key, int64_t hash);
  void reset_to_small();

  int64_t fill_ = 0;  // active + dummy entries
  int64_t used_ = 0;  // active entries
  int64_t mask_ = kMinSize - 1;
  int64_t finger_ = 0;
  int64_t hash_ = -1;  // frozen_hash() of the current contents, -1: not computed
  Entry* table_ = small_;
  std::unique_ptr<Entry[]> big_;  // the table when larger than small_
  Entry small_[kMinSize];
};

struct SliceObj final : Object {
  Value start, stop, step;
  void traverse(Visitor& v) const override {
    visit(v, start);
    visit(v, stop);
    visit(v, step);
  }
};
struct RangeObj final : Object {
  int64_t start = 0, stop = 0, step = 1;
  int64_t length() const;
  void traverse(Visitor&) const override {}
};
// Each concrete iterator traverses what it holds (Object::traverse is pure).
struct IteratorObj : Object {
  // Writes the next item to `out` and returns true, or returns false when exhausted.
  virtual bool next(Value& out) = 0;
};
struct CellObj final : Object {
  Value v = Value::null();
  // The embedder's cell this one stands for (a Python closure cell), or
  // null. The embedder refreshes `v` from it before kiln runs; a store
  // through the VM goes back to it (host_cell_stored).
  void* host = nullptr;
  void traverse(Visitor& visitor) const override { visit(visitor, v); }
  void clear() override;
};

// Called after the VM stores into (or deletes from) a cell with a host.
using HostCellStoreHook = void (*)(CellObj* cell);
void set_host_cell_store_hook(HostCellStoreHook hook);
void host_cell_stored(CellObj* cell);

struct GlobalsObj;  // name_map.h: a program's global namespace
struct FunctionObj final : Object {
  FunctionObj();
  ~FunctionObj() override;  // out of line: GlobalsObj is incomplete here
  Ref<Code> code;
  std::vector<Value> defaults;         // for the last defaults.size() positional params
  std::vector<Value> kwdefaults;       // one per keyword-only param (Null: required)
  std::vector<Ref<CellObj>> closure;   // one per code->freevars
  Ref<GlobalsObj> globals;
  void traverse(Visitor& v) const override;  // out of line: GlobalsObj is incomplete here
  void clear() override;
};
// The embedder's seam for a KBC function made from one of its own (python/:
// a Python function translated for tracing). host_function_attr: the
// attribute `name` of that host function, read without running user code
// (its __name__, __module__, a __dict__ entry) — the host's object, not
// kiln's copy, is what the program sees. False for KBC's own functions and
// for attributes the host does not expose this way. Both the tracer and the
// guards (interpreter/guard_tree.cpp) read through it.
using HostFunctionAttr = bool (*)(const FunctionObj& fn, std::string_view name, Value& out);
void set_host_function_attr(HostFunctionAttr hook);
bool host_function_attr(const FunctionObj& fn, std::string_view name, Value& out);

struct BoundMethodObj final : Object {
  Value func, self;
  // Bound by a classmethod read off its class (self is that class). CPython's
  // LOAD_METHOD leaves such a method bound (a NULL and the method), never
  // splits it into function and receiver as it does an instance's method.
  bool classmethod = false;
  void traverse(Visitor& v) const override {
    visit(v, func);
    visit(v, self);
  }
};
// A class attribute read by calling `fget(instance)` (Python's property):
// `.property` before a method in a .kbc class (docs/kbc.md), or a Python
// class's @property. Null fset/fdel: assigning/deleting raises CPython's
// "property 'x' of 'C' object has no setter/deleter" (runtime/semantics/descriptors.h).
struct PropertyObj final : Object {
  Value fget, fset = Value::null(), fdel = Value::null();
  void traverse(Visitor& v) const override {
    visit(v, fget);
    visit(v, fset);
    visit(v, fdel);
  }
};
// Python's staticmethod (Kind::StaticMethod) and classmethod
// (Kind::ClassMethod) around a function, as class attributes: read through
// an instance or the class they give the function itself, or the function
// bound to the class (runtime/semantics/descriptors.h).
struct MethodWrapperObj final : Object {
  Value func;
  void traverse(Visitor& v) const override { visit(v, func); }
};

// Positional arguments, then keyword arguments whose names are in kwnames
// (the vectorcall convention): nargs counts both.
struct CallArgs {
  const Value* args = nullptr;
  size_t nargs = 0;
  const TupleObj* kwnames = nullptr;

  size_t nkw() const { return kwnames ? kwnames->items.size() : 0; }
  size_t npos() const { return nargs - nkw(); }
  const Value& operator[](size_t i) const { return args[i]; }
};

// The VM implements this; runtime code (module __call__, Sequential, hooks,
// builtins like print) uses it to call back into user functions.
class CallContext {
 public:
  virtual ~CallContext() = default;
  virtual Value call(const Value& callee, const CallArgs& args) = 0;
  virtual void write_stdout(std::string_view text) = 0;
  Value call(const Value& callee, std::initializer_list<Value> positional);

  // The innermost context running on this thread: for natives whose work
  // outlives their own call (map() and filter() call their function when
  // the iterator advances). Null when no kiln code is running.
  static CallContext* current() noexcept;
  class Scope {
   public:
    explicit Scope(CallContext* c) noexcept;
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CallContext* prev_;
  };
  // Zero-argument super(): the calling KBC frame's `__class__` cell and
  // first argument, or CPython's RuntimeError when it has none (the
  // default: a context that runs no frames). runtime/semantics/super.h.
  virtual void zero_arg_super(Value& type, Value& obj);
  // How many more frames may start before the recursion limit
  // (RecursionError): the VM's count; a context that runs no frames has
  // no limit of its own.
  virtual int64_t recursion_headroom() const { return INT64_MAX; }
};

using BuiltinFn = Value (*)(CallContext& ctx, const struct BuiltinObj& self, const CallArgs& args);
using NativeClosure = std::function<Value(CallContext& ctx, const CallArgs& args)>;
// How traced code treats a call of a builtin (runtime/semantics/builtins.def says it
// for every builtin function; the method tables for methods).
enum class BuiltinHow : uint8_t {
  Fold,    // pure: called at trace time on known arguments
  Trace,   // the translator has a handler over trackers
  Effect,  // acts outside the program: the graph breaks, the call runs at run time
};
struct BuiltinObj final : Object {
  std::string name;
  BuiltinFn fn = nullptr;
  int op = -1;               // OpId when this builtin is a registry op (the tracer keys on it)
  int row = -1;              // BuiltinRow when this is a semantics/builtins.def function (the tracer keys on it)
  BuiltinHow how = BuiltinHow::Effect;  // nothing said: assume it acts (a break is never wrong)
  bool kbc_dispatching = false;  // KBC's sum/slice: a tensor argument goes to the registry op (semantics/builtins.h)
  int64_t data = 0;          // per-builtin payload (e.g. an ErrorKind)
  Kind type_of = Kind::Null; // when this builtin is also a type (int, float, list, ...), the kind it names
  NativeClosure closure;     // make_builtin_closure: state a plain function pointer cannot carry
  // The objects `closure` uses, owned here (it captures them as raw
  // pointers): a std::function's captures cannot be traversed, so a
  // closure that captured a Ref or Value itself would hide that reference
  // from the census (runtime/semantics/census.h) and from cycle clearing.
  std::vector<Ref<Object>> held;
  void traverse(Visitor& v) const override {
    for (const Ref<Object>& r : held) visit(v, r);
  }
};
Value make_builtin(std::string name, BuiltinFn fn, int64_t data = 0);
// A Builtin running a C++ closure (compiled graphs, compiled functions).
// Rule: `fn` captures no Ref or Value (they would be references nothing
// reports); the objects it needs go in `held` and it captures raw pointers
// to them, alive as long as the builtin is. Closures of the compiler whose
// captures are compiled graphs (convert_frame's graph_fn) are the one
// exception: only compile caches reach them, and kiln::reset() drops those.
Value make_builtin_closure(std::string name, NativeClosure fn, std::vector<Ref<Object>> held = {});

// The opaque Python object seam. python/ fills the vtable; the core never
// includes Python. Every entry may throw kiln::Error.
// What ForeignVTable::lookup_attr found.
enum class ForeignAttr : uint8_t {
  Undecided,   // reading it runs user code, or kiln cannot tell: CPython reads it
  Absent,      // no such attribute (an AttributeError before any __getattr__)
  Found,       // out: the attribute's value
  Method,      // out: a Python function on the class, which the read binds to the object; or
               // kiln's own method of dict for dict's method that reads the object's dict
               // storage (get, __getitem__, __contains__ of a dict subclass: dict_storage_find)
  Property,    // out: the getter (a Python function) of a property on the class
  GenericGetattribute,  // object.__getattribute__ itself: the generic lookup
  GenericSetattr,       // object.__setattr__ itself: the generic store
};

// What ForeignVTable::new_instance made.
struct NewInstance {
  Value instance;        // an empty instance of the class
  Value new_fn;          // the __new__ that made it, called as new_fn(cls)
  Value setitem;         // a dict subclass's base's __setitem__ (dict's or OrderedDict's); Null otherwise
};

struct ForeignVTable {
  const char* type_name;
  void (*destroy)(void* handle);
  Value (*getattr)(void* handle, std::string_view name);
  void (*setattr)(void* handle, std::string_view name, const Value& v);
  Value (*call)(void* handle, const CallArgs& args);
  // op: a BinOp / CmpOp id (operators.def); `reflected` when the foreign
  // object is the right operand; `inplace` for `obj op= other` (the
  // object's own in-place operator: a caller's set or dict is mutated).
  Value (*binary_op)(void* handle, int op, const Value& other, bool reflected, bool inplace);
  // op: a CmpOp id, one of < <= == != > >= (compare_op answers is / in
  // itself, through identity and `contains`).
  Value (*compare)(void* handle, int op, const Value& other);
  bool (*truth)(void* handle);
  std::string (*repr)(void* handle);
  size_t (*hash)(void* handle);
  // Optional (nullptr: none). For a namespace-like object (a Python
  // module): a stable pointer to the current value of attribute `name`, or
  // nullptr when it has none. The tracer reads and guards such attributes
  // like a module's dict entries; the owner keeps the values current
  // before each compiled call.
  const Value* (*namespace_find)(void* handle, const StrObj* name) = nullptr;
  // Optional: format(obj, spec) by the object's own __format__ (nullptr:
  // only the empty spec, which gives str()).
  std::string (*format)(void* handle, std::string_view spec) = nullptr;

  // Optional container protocol (nullptr: the object has none, and the
  // operation is Python's TypeError for it). These are how residual code
  // and the VM work on a caller's own list or dict in place: the object is
  // never copied into a kiln list, so a mutation is the caller's mutation.
  // `container` names what the object is exactly (Kind::List, Dict, Set;
  // Kind::Null for anything else, subclasses included): only exact
  // built-in containers are traced through (read under guards, mutations
  // replayed); anything else stays opaque to the tracer.
  Kind (*container)(void* handle) = nullptr;
  int64_t (*length)(void* handle) = nullptr;
  Value (*getitem)(void* handle, const Value& key) = nullptr;
  // value Null: del obj[key]
  void (*setitem)(void* handle, const Value& key, const Value& value) = nullptr;
  Value (*iter)(void* handle) = nullptr;  // an Iterator value
  bool (*contains)(void* handle, const Value& item) = nullptr;
  // Optional: the object's own type name (type_name is the seam's name),
  // for the messages kiln itself writes about the object.
  std::string (*type_name_of)(void* handle) = nullptr;

  // Optional (runtime/semantics/exceptions.h; nullptr: not an exception and no
  // exception class). raise_exception: `raise obj` for this object, which
  // throws the kiln::Error it raises as (a class is instantiated first;
  // anything else is CPython's TypeError). exception_match: whether the
  // exception `exc` is an instance of class `cls` (Python's except-clause
  // test), called on whichever of the two is this foreign object.
  void (*raise_exception)(void* handle) = nullptr;  // always throws
  bool (*exception_match)(void* handle, const Value& exc, const Value& cls) = nullptr;
  // Optional: a function whose result depends on its arguments alone and
  // that has no effects (math.sqrt): the tracer calls it on known values
  // and folds the result instead of breaking the graph.
  bool (*pure)(void* handle) = nullptr;
  // Optional: isinstance(obj, cls) / issubclass(obj, cls) (`subclass`) with
  // this object as cls, by the object's own rules (a Python class's
  // __instancecheck__); TypeError when it is no class.
  bool (*instance_check)(void* cls, const Value& obj, bool subclass) = nullptr;
  // Optional: attribute `name` when reading it runs no user code (an
  // instance __dict__ entry, a __slots__ member, a plain class attribute of
  // an object with the default attribute lookup: a dataclass or
  // SimpleNamespace config): true and the value in `out`. The tracer reads
  // such attributes as constants under guards, and the guard re-reads them
  // the same way.
  bool (*plain_attr)(void* handle, std::string_view name, Value& out) = nullptr;
  // Optional: -obj, +obj, ~obj by the object's own operators (op: a UnOp
  // id other than NOT, which is truth).
  Value (*unary_op)(void* handle, int op) = nullptr;
  // Optional, for a set: a native set with the same table (slots, dummies,
  // finger) and so the same order; Null when it has none (an element kiln
  // hashes otherwise than its owner: an object hashed by its address).
  Value (*set_snapshot)(void* handle) = nullptr;
  // Optional: the kiln objects the handle owns (an exception's args,
  // cause, attributes), as Object::traverse / Object::clear report and drop
  // them. nullptr: it owns none (a Python object: what Python holds is
  // Python's business).
  void (*traverse)(void* handle, Visitor& visit) = nullptr;
  void (*clear)(void* handle) = nullptr;
  // Optional: why the tracer leaves this object to its owner, in the words
  // of a break reason ("torch.nn.functional.unfold has no kiln lowering",
  // a torch tensor of a dtype kiln lacks), or "" for nothing particular.
  // Such an object still runs wherever the program uses it (its library's
  // own operations); the trace breaks there with this reason.
  std::string (*untraced_reason)(void* handle) = nullptr;
  // Optional: a context manager whose __enter__ and __exit__ change nothing
  // a kiln graph computes (torch.no_grad(): kiln's kernels compute no
  // gradients). The tracer traces a `with` block over it as over
  // contextlib.nullcontext() when the whole block traces; a block that
  // breaks inside runs from its `with` on the VM, which calls the real
  // __enter__ and __exit__ (interpreter/translator_constructs.cpp).
  bool (*null_context)(void* handle) = nullptr;
  // Optional: a tensor of another library that records gradients (a torch
  // tensor that requires grad): a kiln tensor over its memory, which the
  // tracer reads its metadata from, or a null Tensor when the object is
  // none. The object itself stays the library's everywhere a program runs;
  // a graph that reads it runs through the library's own ops (its autograd
  // records them: output_graph/backend.h, kAutogradBackend).
  Tensor (*grad_tensor)(void* handle) = nullptr;
  // Optional: whether compare(op, other) runs no user code (both operands'
  // types compare with their C slots: a str Enum's member against a str),
  // so the tracer may compare an object its guards pin at trace time.
  bool (*pure_compare)(void* handle, int op, const Value& other) = nullptr;
  // Optional: how CPython's attribute lookup resolves `name` on the object,
  // decided without running user code (ForeignAttr says what was found).
  // `after` null: object.__getattribute__(obj, name), Python's generic
  // lookup (data descriptors of the type, then the instance __dict__, then
  // the type's other attributes), whatever the object's own type does
  // instead. `after` a class: the lookup super(after, obj).name makes
  // along type(obj).__mro__ after that class; a Null `after`: from the
  // type itself (where CPython finds a special method). `raw`, when
  // given, receives what the class holds (the function, the property), for
  // guards that pin it.
  ForeignAttr (*lookup_attr)(void* handle, std::string_view name, const Value* after, Value& out, Value* raw) = nullptr;
  // Optional: for a class whose metaclass keeps type's own __repr__ and
  // object's __str__, str(cls) ("<class 'mod.Name'>") and true; false for
  // anything else. It reads only the class's __module__ and __qualname__,
  // so the tracer folds str()/repr() of a class it pins (as Dynamo folds a
  // class, a Python constant): transformers keys a registry by
  // str(model.__class__).
  bool (*class_repr)(void* handle, std::string& out) = nullptr;
  // Optional: for an instance of a dict subclass (or a dict), what its own
  // dict storage holds at `key`, read as dict.__getitem__(obj, key) reads
  // it, whatever the subclass's __getitem__ does instead: Found (out: the
  // value), Absent, or Undecided when the object is no dict or the key is
  // no literal (hashing it could run user code). transformers keeps
  // registries in dict subclasses and reads them with super().get(key).
  ForeignAttr (*dict_storage_find)(void* handle, const Value& key, Value& out) = nullptr;
  // Optional: for a class whose instances CPython makes without running
  // user code before __init__ (the metaclass keeps type's __call__; the
  // __new__ its MRO finds is object's, dict's or OrderedDict's own), an
  // empty instance and how it was made (NewInstance); false for any other
  // class. The tracer makes a Python object in the trace over such an
  // instance (interpreter/translator_user_defined.cpp): the instance is
  // only what class lookups read through, never the program's object.
  bool (*new_instance)(void* cls, NewInstance& out) = nullptr;
  // Optional, with `pure`: what the function returns is immutable and
  // reading it runs no effects (inspect.signature's Signature): the tracer
  // keeps such a result as a constant, and what it reads off it too.
  bool (*frozen_result)(void* handle) = nullptr;
  // Optional: the object is the process environment's mapping (Python's
  // os.environ). The tracer reads a variable of it at trace time under a
  // guard on that variable (output_graph::environ_source), instead of
  // running the mapping's own code (which encodes keys to bytes).
  bool (*environ)(void* handle) = nullptr;
  // Optional: for a weak reference (exactly weakref.ref: calling it runs no
  // user code), what calling it returns now in `out` (None once the object
  // is gone), and true; false for anything else. torch's RNNs check their
  // weights through weakrefs on every forward.
  bool (*weakref_target)(void* handle, Value& out) = nullptr;
  // Optional: for a class, issubclass(it, info) where `info` is kiln's own
  // class-like value (a builtin type, `type` itself), which stands for the
  // host's type of that name: a Python class deriving from dict or type.
  bool (*subclass_of)(void* cls, const Value& info) = nullptr;
};

// Whether the embedder's autograd is recording now (torch's grad mode;
// false without such an embedder). Guards and the tracer read it.
using GradModeHook = bool (*)();
void set_grad_mode_hook(GradModeHook hook);
bool grad_mode_enabled();

// What a traced tensor is to the embedder (python/: a torch tensor of its
// shape and dtype on torch's meta device, a Parameter for a parameter): the
// value isinstance() and type() are asked about in a trace over the
// embedder's tensors, so `type(x) is torch.Tensor` answers as in eager.
// Null without such an embedder.
using HostTensorSample = Value (*)(const Tensor& meta);
void set_host_tensor_sample(HostTensorSample hook);
Value host_tensor_sample(const Tensor& meta);
struct ForeignObj final : Object {
  ForeignObj(const ForeignVTable* vt, void* handle) : vt(vt), handle(handle) {}
  ~ForeignObj() override { if (vt && vt->destroy) vt->destroy(handle); }
  const ForeignVTable* vt;
  void* handle;
  void traverse(Visitor& v) const override {
    if (vt && vt->traverse) vt->traverse(handle, v);
  }
  void clear() override {
    if (vt && vt->clear) vt->clear(handle);
  }
};

// Convenience constructors.
Value make_tuple(std::vector<Value> items);
Value make_list(std::vector<Value> items);
Value make_dict();
// A new empty set (frozen: a frozenset).
Value make_set(bool frozen = false);
Value make_range(int64_t start, int64_t stop, int64_t step);

}  // namespace kiln::runtime

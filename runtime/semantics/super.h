// Python's super() over kiln classes: attribute lookup that starts after a
// given class in the chain of an object's class. kiln classes have one base
// each, so that chain is the MRO.
//
// CPython 3.11 compiles a zero-argument `super()` to `LOAD_GLOBAL super;
// CALL 0` in a function that has a `__class__` free variable; the builtin
// then reads the calling frame's `__class__` cell and its first argument
// (CallContext::zero_arg_super, which the VM implements). KBC does the same,
// so translated methods need no rewriting.
#pragma once

#include <iterator>
#include <string>
#include <vector>

#include "runtime/semantics/class_model.h"

namespace kiln::runtime {

struct SuperObj final : Object {
  Value type;              // __thisclass__ (a Class): the lookup starts after it
  Value obj;               // __self__: an instance (a module) or a class; Null: unbound super(C)
  Ref<ClassObj> obj_type;  // __self_class__: type(obj), or obj when it is a class
  ClassObj* type_class() const { return type.as<ClassObj>(); }
  void traverse(Visitor& v) const override {
    visit(v, type);
    visit(v, obj);
    visit(v, obj_type);
  }
};

// super(type, obj) with CPython's checks and TypeErrors; obj Null: the
// unbound super(type).
Value make_super(const Value& type, const Value& obj);

// The builtin: super(), super(type), super(type, obj). A foreign type (a
// Python class that is no kiln class) goes to the host's own super (below).
Value builtin_super(CallContext& ctx, const std::vector<Value>& a);
// The host language's super (Python's builtins.super, a Foreign callable),
// set by the embedding that has one (python/): super over its own classes
// is its business. Without it such a call is a TypeError.
void set_host_super(Value fn);

// Where super's lookup finds `name`: the raw class attribute (and the
// class holding it), or null. Unbound supers find nothing.
const Value* super_find(const SuperObj* s, const StrObj* name, ClassObj** owner = nullptr);

// super_obj.name, CPython's super_getattro: the attribute found after
// `type`, bound to obj as descriptors.h says (a property's getter runs),
// else super's own attributes (__thisclass__, __self__, __self_class__).
// Null when none.
Value super_getattr_or_null(CallContext& ctx, const Value& super, const StrObj* name);

// "'super' object has no attribute 'x'"
[[noreturn]] void super_attribute_error(const StrObj* name);

// object.__getattribute__, Python's generic attribute lookup, as a kiln
// callable (self, name): what super().__getattribute__ reaches in a Python
// class's own __getattribute__ (a transformers config's). The tracer reads
// what it finds itself (interpreter/translator_user_defined.cpp); code
// CPython runs holds Python's own object.__getattribute__ in its place
// (python/src/eval_frame_hook.cpp, residual_const).
const Value& object_getattribute();
// object.__setattr__ likewise (self, name, value): the store super().
// __setattr__ reaches in a Python class's own __setattr__, which the trace
// records and code CPython runs makes with Python's own.
const Value& object_setattr();
// object.__init__, dict.__init__ and OrderedDict.__init__ (which: 0, 1,
// 2) likewise (self, *args, **kwargs): what super().__init__() reaches in
// a Python class over those bases. Without arguments each leaves the
// object as it is (the tracer answers None); with some, the host runs it.
// Code CPython runs holds Python's own in its place (residual_const).
const Value& host_init(int which);
// Which host_init `v` is, or -1.
int host_init_index(const Value& v);
// object's own __reduce_ex__, __reduce__, __getstate__ and __delattr__
// (which: an index of kObjectMethods) likewise: what a plain Python class
// finds under those names; copy.deepcopy and copy.copy call the first
// three. The tracer answers __reduce_ex__ on an object it pins or made
// (interpreter/translator_user_defined.cpp reduce_ex), deletes through
// __delattr__ on one it made (made_delattr), and tells the others apart by
// identity; the VM does not run them (a TypeError: their host does). Code
// CPython runs holds Python's own in their place (residual_const).
enum class ObjectMethod { ReduceEx, Reduce, Getstate, Delattr };
inline constexpr const char* kObjectMethods[] = {"__reduce_ex__", "__reduce__", "__getstate__", "__delattr__"};
constexpr int kNumObjectMethods = int(std::size(kObjectMethods));
static_assert(kNumObjectMethods == int(ObjectMethod::Delattr) + 1, "one name per ObjectMethod, in its order");
const Value& object_method(int which);
// Which object_method `v` is, or -1.
int object_method_index(const Value& v);
inline bool is_object_method(const Value& v, ObjectMethod m) { return object_method_index(v) == int(m); }
// copyreg.__newobj__(cls, *args) likewise: the callable the traced
// __reduce_ex__ hands back for copy's _reconstruct to call; the tracer
// makes the object there (InstructionTranslator::new_made_object).
const Value& copyreg_newobj();
// types.MethodType(func, self): the residual rebuilds a bound method the
// trace made (a method looked up on an object, held across a graph break)
// over the self this run has; code CPython runs holds Python's own
// types.MethodType in its place (residual_const).
const Value& method_type();

std::string super_repr(const SuperObj* s);  // <super: <class 'B'>, <Child object>>

}  // namespace kiln::runtime

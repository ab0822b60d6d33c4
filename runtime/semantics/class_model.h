// Python's classes and their instances, as kiln holds them: a ClassObj
// (methods, bases, the host class it mirrors) and its instances, each a
// ModuleObj shaped as torch.nn.Module's (ordered _parameters, _buffers and
// _modules, plain attributes, forward hooks, a training flag, a lazy flag
// and a version counter), since every class a program defines derives from
// the root class `Module`. Here: the attribute protocol (lookup, setattr
// routing, properties, __getattr__), class attributes and the host class
// reads, instantiation. What torch.nn.Module does beyond attributes (the
// built-in classes and their forwards, __call__ with hooks, the walkers,
// state_dict, containers) is runtime/nn/module.h.
//
// Invariant: a name lives in at most one of params/modules/buffers/attrs
// (setattr moves it), and every structural change takes a fresh version
// from one global counter, so (module identity, version) never repeats:
// the VM's inline caches and the tracer's guards rely on that. So change
// the dicts only through the functions below, which bump the version.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/value/name_map.h"
#include "runtime/value/value.h"

namespace kiln::runtime {

// The built-in module classes, implemented natively: one row per class,
//   X(NAME, HOW, OP, OPERANDS)
// NAME is the class; the other columns are its forward, read only by
// runtime/nn/builtin_forward.h (which says what they mean): how it is
// computed (ForwardHow), the registry op it runs (`none`: no op), and where
// each of the op's operands comes from (the input, a parameter, an
// attribute). Here, below nn/, they are only text.
// Embedding: padding_idx (a torch module's attribute, or one a program
// sets) changes only the gradient; passed when set, so torch's own
// embedding (the autograd backend) gets it.
// LazyLinear: initialised by its first call (materialize_lazy), it is a
// Linear by the time its forward runs.
// clang-format off
#define KILN_BUILTIN_MODULES(X)                                                                            \
  X(Linear,     Op,       linear,     (kInput, param_operand("weight"), param_operand("bias")))             \
  X(ReLU,       Op,       relu,       (kInput))                                                             \
  X(GELU,       Op,       gelu,       (kInput, attr_operand("approximate")))                                \
  X(LayerNorm,  Op,       layer_norm, (kInput, attr_operand("normalized_shape"), param_operand("weight"),   \
                                       param_operand("bias"), attr_operand("eps")))                         \
  X(Embedding,  Op,       embedding,  (kInput, param_operand("weight"), attr_if_set_operand("padding_idx"))) \
  X(Dropout,    Dropout,  dropout,    (kInput, attr_operand("p")))                                          \
  X(Sequential, Children, none,       (kInput))                                                             \
  X(ModuleList, None,     none,       ())                                                                   \
  X(ModuleDict, None,     none,       ())                                                                   \
  X(LazyLinear, Op,       linear,     (kInput, param_operand("weight"), param_operand("bias")))
// clang-format on

enum class BuiltinModule : uint8_t {
  None,  // a user class (methods in KBC) or the Module base class
#define KILN_BM_ENUM(name, ...) name,
  KILN_BUILTIN_MODULES(KILN_BM_ENUM)
#undef KILN_BM_ENUM
};

struct ClassObj final : Object {
  std::string name;      // __name__: what messages and type() print
  std::string qualname;  // __qualname__ when it differs (a class defined in a function); else empty
  Ref<ClassObj> base;  // null only for the root `Module` class
  NameMap methods;     // Function / Builtin values, Property / StaticMethod / ClassMethod, other class attributes
  BuiltinModule builtin = BuiltinModule::None;
  // A class defined in another language (a Python kiln.nn.Module subclass):
  // calling the class calls this, which constructs the object there (its
  // own __new__ and __init__ run). Null: instantiate() below.
  Value constructor = Value::null();
  // A class of the host language (python/: a torch.nn.Module or kiln.nn.Module
  // subclass) is never copied: an attribute is read from the host class the
  // first time a lookup asks for it (set_host_class_reader) and kept in
  // `host_reads` (a miss as Null) until the host class changes
  // (forget_host_reads). A tracing-time cache of what was read, nothing a
  // program runs on. Every lookup first brings the reads up to date with
  // the host class (set_host_class_check), and a trace records the classes
  // it read (set_class_read_log): its compiled entry holds while each one's
  // reads_version is unchanged, which is how an entry guards the class
  // attributes it folded, and only those classes. Node-based on purpose: a
  // pointer a lookup returned stays valid while later lookups read more.
  bool reads_host = false;
  uint64_t reads_version = 0;  // bumped by forget_host_reads
  using HostReads = std::unordered_map<const StrObj*, std::pair<Ref<StrObj>, Value>>;
  mutable HostReads host_reads;
  // The generation before the last forget, kept one more generation: a
  // pointer a lookup returned earlier in a trace stays valid across it.
  HostReads retired_reads;
  // Looks `name` up in this class, then its bases.
  const Value* lookup(const StrObj* name) const;
  // `name` in this class's own attributes (read from the host class when
  // reads_host), a pending method resolved (set_pending_method_resolver).
  const Value* find_own(const StrObj* name) const;
  bool is_subclass_of(const ClassObj* other) const;
  // The nearest built-in class in the base chain (None if none).
  BuiltinModule builtin_kind() const;
  void traverse(Visitor& v) const override {
    visit(v, base);
    methods.traverse(v);
    for (const HostReads* reads : {static_cast<const HostReads*>(&host_reads), &retired_reads})
      for (const auto& [key, read] : *reads) {
        visit(v, read.first);
        visit(v, read.second);
      }
    visit(v, constructor);
  }
  void clear() override {
    methods.take();
    HostReads reads = std::move(host_reads), retired = std::move(retired_reads);
    host_reads.clear();
    retired_reads.clear();
    Value c = std::move(constructor);
    constructor = Value::null();
  }
};

struct Hook {
  int64_t id;
  Value fn;
};

struct ModuleObj final : Object {
  Ref<ClassObj> cls;
  NameMap params;   // Tensor (is_parameter) or None
  NameMap buffers;  // Tensor or None
  NameMap modules;  // Module or None
  NameMap attrs;
  std::vector<Hook> forward_pre_hooks;  // fn(module, args) -> None | new args
  std::vector<Hook> forward_hooks;      // fn(module, args, output) -> None | new output
  bool training = true;
  bool lazy = false;  // LazyLinear before its first call
  uint64_t version = 0;
  // Non-null: this module mirrors an object of the host language (python/:
  // a torch.nn.Module), which owns the truth. Changes kiln code makes go to
  // the host (set_host_module_store_hook), which applies them by its own
  // rules and refreshes this module from the object.
  void* host = nullptr;

  void bump_version();
  const std::string& class_name() const { return cls->name; }
  void traverse(Visitor& v) const override {
    visit(v, cls);
    params.traverse(v);
    buffers.traverse(v);
    modules.traverse(v);
    attrs.traverse(v);
    for (const Hook& h : forward_pre_hooks) visit(v, h.fn);
    for (const Hook& h : forward_hooks) visit(v, h.fn);
  }
  // The class stays (messages read cls->name).
  void clear() override {
    params.take();
    buffers.take();
    modules.take();
    attrs.take();
    std::vector<Hook> pre, post;
    pre.swap(forward_pre_hooks);
    post.swap(forward_hooks);
  }
};

// The newest version handed out to any module. Unchanged since a moment
// means no module changed since then: a cache entry's module-version guards
// all hold with one comparison.
uint64_t module_version_epoch();

// The root class every module class derives from, holding the shared
// methods (parameters, named_modules, train, eval, register_buffer, ...):
// runtime/nn/ makes it (ModuleSlots::base_class, semantics/kind_slots.h).
Ref<ClassObj> module_base_class();
// A new user class deriving from `base` (module_base_class() if null).
Ref<ClassObj> make_class(std::string name, Ref<ClassObj> base = nullptr);
// Class attributes set or deleted after the class is in use (a Python
// class's `Child.K = 5`): the change and a new class epoch. Compiled code
// folds class attributes (guarded only by the identity of modules and
// classes), so every compiled entry older than the epoch is stale.
void set_class_attr(ClassObj* cls, const Ref<StrObj>& name, Value value);
void del_class_attr(ClassObj* cls, const StrObj* name);
uint64_t class_epoch();
// `C.name = value` / `del C.name` in a program (value Null: delete). A class
// with a counterpart in the host language (a Python class) changes there,
// and the host reports it back through set_class_attr: the hook says
// whether it did (false: a class of KBC alone, changed here).
using HostClassAttrHook = bool (*)(ClassObj* cls, const StrObj* name, const Value& value);
void set_host_class_attr_hook(HostClassAttrHook hook);
// A class attribute that stands for a method not made yet (python/: a
// Python function of a torch class's body, translated to KBC only when the
// tracer first looks it up, not when the class is read). The resolver says
// whether `attr` is such a placeholder and, if so, gives the method it
// stands for; ClassObj::lookup then stores that in the attribute's slot, so
// no reader of a class's methods ever sees a placeholder. Readers that
// walk `methods` directly go through ClassObj::find_own.
using PendingMethodResolver = bool (*)(const Value& attr, Value& method);
void set_pending_method_resolver(PendingMethodResolver resolver);
// Reads `name` from the host class of `cls` (ClassObj::reads_host): true
// with the attribute as kiln holds it (a pending method, a property, a
// constant), false when the class does not define it itself (its kiln base
// chain answers then, or nothing does).
using HostClassReader = bool (*)(const ClassObj* cls, const StrObj* name, Value& out);
void set_host_class_reader(HostClassReader reader);
// str() / repr() of a host class as its language prints it ("<class
// 'mod.Name'>"), when working it out runs no program code (python/: the
// metaclass keeps type's own __repr__ and __str__): true and the text.
using HostClassRepr = bool (*)(const ClassObj* cls, std::string& out);
void set_host_class_repr(HostClassRepr repr);
bool host_class_repr(const ClassObj* cls, std::string& out);
// Brings `cls`'s reads up to date with its host class: if the host class
// changed (a class attribute set, a method replaced, a base changed) and
// something read from it now reads differently, forget_host_reads.
using HostClassCheck = void (*)(ClassObj* cls);
void set_host_class_check(HostClassCheck check);
// What was read from the host class of `cls` is read again on demand, and
// its reads_version moves: compiled entries that read it are stale.
void forget_host_reads(ClassObj* cls);
// The classes (reads_host) a trace looked attributes up in: while `log` is
// set, every lookup through such a class appends it. Returns the previous log.
std::vector<ClassObj*>* set_class_read_log(std::vector<ClassObj*>* log);
// A compiled entry's guard on the classes its trace read: each one with its
// reads_version then.
struct ClassRead {
  Ref<ClassObj> cls;
  uint64_t version;
};
std::vector<ClassRead> class_reads_of(const std::vector<ClassObj*>& log);
// Whether every class read is as it was (each brought up to date with its
// host class first). False names the first class that changed in `changed`.
bool class_reads_hold(const std::vector<ClassRead>& reads, std::string* changed = nullptr);
void class_setattr(ClassObj* cls, const Ref<StrObj>& name, const Value& value);
void class_delattr(ClassObj* cls, const StrObj* name);

// A new, empty instance (no __init__ run).
Ref<ModuleObj> new_module(const Ref<ClassObj>& cls);
// Instantiates a class: new_module, then the class's __init__ with `args`
// (or the class's constructor, when it has one).
Value instantiate(CallContext& ctx, const Ref<ClassObj>& cls, const CallArgs& args);

// Attribute lookup in Python's order (torch's Module): plain attributes,
// the class (functions become bound methods, a property's getter is
// called), _parameters, _buffers, _modules (torch's __getattr__), then a
// user-defined __getattr__.
// Missing: AttributeError naming the class ("'Block' object has no
// attribute 'foo'", Python's words).
Value module_getattr(CallContext& ctx, const Value& module, const StrObj* name);
// The end of that lookup (torch's Module.__getattr__): the class's own
// __getattr__, else the AttributeError.
Value module_getattr_fallback(CallContext& ctx, const Value& module, const StrObj* name);
// Same lookup without the __getattr__ fallback and without running a
// property's getter (that needs a call context): a property comes back as
// the Property value itself. Class attributes are bound as descriptors.h
// says; `__class__` is the module's class. Null if absent.
Value module_lookup(const Value& module, const StrObj* name);
// A class property: the class's own or an inherited one (null if `name` is
// not a property of `cls`).
const PropertyObj* class_property(const ClassObj* cls, const StrObj* name);
Value make_property(Value fget);
// The instance entry Python's lookup gives for `name` (the attributes,
// then _parameters, _buffers, _modules unless the class has `name`), or
// nullptr. Valid until the module's version or the class changes.
const Value* module_instance_slot(const ModuleObj* m, const StrObj* name);
// torch's __setattr__: Parameter -> _parameters, Module -> _modules, a
// tensor/None to an existing buffer name -> _buffers, else a plain attribute.
// A property of the class is never an instance entry: storing to it calls
// its setter through ctx (descriptors.h; CPython's AttributeError when it
// has none), so no instance entry ever shadows a property and the instance
// dicts can be read first.
void module_setattr(const Value& module, const Ref<StrObj>& name, const Value& value, CallContext* ctx = nullptr);
// torch's __delattr__: the entry leaves whichever dict holds it (a later
// read is "'Child' object has no attribute 'lin'"); a property's deleter is
// called through ctx; AttributeError when there is nothing to delete.
void module_delattr(const Value& module, const StrObj* name, CallContext* ctx = nullptr);
// Takes `name` out of every instance dict of m (params, modules, buffers,
// attrs), keeping the one-dict invariant; the caller bumps the version.
void drop_everywhere(ModuleObj* m, const StrObj* name);

// A store to a host module (ModuleObj::host) by kiln code: `value` null
// deletes `name`. The host applies it to its object (torch's __setattr__ /
// __delattr__: its own routing to _parameters, _modules, _buffers), then
// refreshes `m` from the object (a new version when anything changed).
// Registering or hooking a host module from kiln code is refused (do it on
// the host object).
using HostModuleStoreHook = void (*)(ModuleObj* m, const StrObj* name, const Value* value);
void set_host_module_store_hook(HostModuleStoreHook hook);
HostModuleStoreHook host_module_store_hook();  // null without a host

}  // namespace kiln::runtime

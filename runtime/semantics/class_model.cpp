// Python's classes and their instances: class attributes and the host
// class reads, instantiation, and the instance attribute protocol (lookup,
// torch's setattr routing, properties, __getattr__). See class_model.h.
#include "runtime/semantics/class_model.h"

#include <algorithm>
#include <unordered_set>

#include "runtime/semantics/descriptors.h"
#include "runtime/semantics/kind_slots.h"
#include "runtime/semantics/value_ops.h"
namespace kiln::runtime {

namespace {
uint64_t version_counter = 0;
uint64_t next_version() { return ++version_counter; }
}  // namespace

uint64_t module_version_epoch() { return version_counter; }

namespace {
uint64_t class_epoch_counter = 0;
HostClassAttrHook host_class_attr_hook = nullptr;
}  // namespace

uint64_t class_epoch() { return class_epoch_counter; }

void set_class_attr(ClassObj* cls, const Ref<StrObj>& name, Value value) {
  cls->methods.set(name, std::move(value));
  ++class_epoch_counter;
}

void del_class_attr(ClassObj* cls, const StrObj* name) {
  cls->methods.erase(name);
  ++class_epoch_counter;
}

void set_host_class_attr_hook(HostClassAttrHook hook) { host_class_attr_hook = hook; }

void class_setattr(ClassObj* cls, const Ref<StrObj>& name, const Value& value) {
  if (host_class_attr_hook && host_class_attr_hook(cls, name.get(), value)) return;
  set_class_attr(cls, name, value);
}

void class_delattr(ClassObj* cls, const StrObj* name) {
  if (host_class_attr_hook && host_class_attr_hook(cls, name, Value::null())) return;
  if (!cls->methods.find(name))
    throw_error(ErrorKind::AttributeError, "type object '" + cls->name + "' has no attribute '" + name->s + "'");
  del_class_attr(cls, name);
}

void ModuleObj::bump_version() { version = next_version(); }

namespace {
PendingMethodResolver pending_method_resolver = nullptr;
HostClassReader host_class_reader = nullptr;
HostClassCheck host_class_check = nullptr;
HostClassRepr host_class_repr_fn = nullptr;
thread_local std::vector<ClassObj*>* class_read_log = nullptr;
}  // namespace
void set_pending_method_resolver(PendingMethodResolver resolver) { pending_method_resolver = resolver; }
void set_host_class_reader(HostClassReader reader) { host_class_reader = reader; }
void set_host_class_check(HostClassCheck check) { host_class_check = check; }
void set_host_class_repr(HostClassRepr repr) { host_class_repr_fn = repr; }
bool host_class_repr(const ClassObj* cls, std::string& out) {
  return cls->reads_host && host_class_repr_fn && host_class_repr_fn(cls, out);
}

std::vector<ClassObj*>* set_class_read_log(std::vector<ClassObj*>* log) {
  std::vector<ClassObj*>* prev = class_read_log;
  class_read_log = log;
  return prev;
}

void forget_host_reads(ClassObj* cls) {
  // The maps are consistent before the oldest generation dies (its values'
  // destructors may run the host's code).
  ClassObj::HostReads dying = std::move(cls->retired_reads);
  cls->retired_reads = std::move(cls->host_reads);
  cls->host_reads.clear();
  ++cls->reads_version;
}

std::vector<ClassRead> class_reads_of(const std::vector<ClassObj*>& log) {
  std::vector<ClassRead> out;
  std::unordered_set<const ClassObj*> seen;
  for (ClassObj* c : log)
    if (seen.insert(c).second) out.push_back({Ref<ClassObj>(c), c->reads_version});
  return out;
}

bool class_reads_hold(const std::vector<ClassRead>& reads, std::string* changed) {
  for (const ClassRead& r : reads) {
    if (host_class_check) host_class_check(r.cls.get());
    if (r.cls->reads_version != r.version) {
      if (changed) *changed = r.cls->name;
      return false;
    }
  }
  return true;
}

const Value* ClassObj::find_own(const StrObj* key) const {
  if (reads_host) {
    auto* self = const_cast<ClassObj*>(this);
    if (host_class_check) host_class_check(self);
    if (class_read_log) class_read_log->push_back(self);
  }
  const Value* v = methods.find(key);
  if (!v && reads_host && host_class_reader) {
    auto it = host_reads.find(key);
    if (it == host_reads.end()) {
      Value read = Value::null();
      if (!host_class_reader(this, key, read)) read = Value::null();
      // The reader may have read other names meanwhile: emplace, never
      // overwrite, and node addresses stay put.
      it = host_reads.emplace(key, std::make_pair(intern(key->s), std::move(read))).first;
    }
    if (it->second.second.is_null()) return nullptr;
    v = &it->second.second;
  }
  if (v && v->is(Kind::Foreign) && pending_method_resolver) {
    // Resolved in place: the slot is the attribute's own (no rehash), so
    // pointers other lookups returned stay valid. No epoch change: the
    // class means what it meant, only kiln's form of it is made now.
    Value method;
    if (pending_method_resolver(*v, method)) *const_cast<Value*>(v) = std::move(method);
  }
  return v;
}

const Value* ClassObj::lookup(const StrObj* key) const {
  for (const ClassObj* c = this; c; c = c->base.get())
    if (const Value* v = c->find_own(key)) return v;
  return nullptr;
}

bool ClassObj::is_subclass_of(const ClassObj* other) const {
  for (const ClassObj* c = this; c; c = c->base.get())
    if (c == other) return true;
  return false;
}

BuiltinModule ClassObj::builtin_kind() const {
  for (const ClassObj* c = this; c; c = c->base.get())
    if (c->builtin != BuiltinModule::None) return c->builtin;
  return BuiltinModule::None;
}

Ref<ClassObj> module_base_class() { return module_slots().base_class(); }

Ref<ClassObj> make_class(std::string name, Ref<ClassObj> base) {
  auto c = make_ref<ClassObj>();
  c->name = std::move(name);
  c->base = base ? base : module_base_class();
  return c;
}

Ref<ModuleObj> new_module(const Ref<ClassObj>& cls) {
  auto m = make_ref<ModuleObj>();
  m->cls = cls;
  m->bump_version();
  return m;
}

Value instantiate(CallContext& ctx, const Ref<ClassObj>& cls, const CallArgs& args) {
  if (!cls->constructor.is_null()) return ctx.call(cls->constructor, args);
  Value self = Value::object(Kind::Module, new_module(cls));
  if (const Value* init = cls->lookup(intern("__init__").get())) {
    std::vector<Value> full{self};
    full.insert(full.end(), args.args, args.args + args.nargs);
    CallArgs a{full.data(), full.size(), args.kwnames};
    Value r = ctx.call(*init, a);
    if (!r.is_none())
      throw_error(ErrorKind::TypeError, "__init__() should return None, not '" + type_name(r) + "'");
  }
  return self;
}

// ------------------------------------------------------------- attributes --

const Value* module_instance_slot(const ModuleObj* m, const StrObj* name) {
  // Python's order, as torch's modules answer it: the instance __dict__
  // (attrs), then the class (a method or class attribute named like a
  // submodule wins: torch's _parameters/_modules/_buffers are only reached
  // through Module.__getattr__, when the class has no such attribute). A
  // property never reaches here as an instance entry (module_setattr).
  if (const Value* v = m->attrs.find(name)) return v;
  if (m->params.empty() && m->modules.empty() && m->buffers.empty()) return nullptr;
  const Value* v = m->params.find(name);  // torch's __getattr__: _parameters, _buffers, _modules
  if (!v) v = m->buffers.find(name);
  if (!v) v = m->modules.find(name);
  if (v && m->cls->lookup(name)) return nullptr;  // the class's attribute shadows it
  return v;
}

Value module_lookup(const Value& module, const StrObj* name) {
  auto* m = module.as<ModuleObj>();
  if (const Value* v = module_instance_slot(m, name)) return *v;
  if (name->s == "training") return Value::boolean(m->training);
  if (const Value* v = m->cls->lookup(name)) return bind_class_attr(nullptr, *v, module, m->cls.get(), name);
  // object.__class__ (a data descriptor of every object: nothing shadows it,
  // and no instance entry can be named so).
  if (name->s == "__class__") return class_value(m->cls.get());
  return Value::null();
}

const PropertyObj* class_property(const ClassObj* cls, const StrObj* name) {
  const Value* v = cls->lookup(name);
  return v && v->is(Kind::Property) ? v->as<PropertyObj>() : nullptr;
}

Value make_property(Value fget) {
  auto p = make_ref<PropertyObj>();
  p->fget = std::move(fget);
  return Value::object(Kind::Property, p);
}

Value module_getattr(CallContext& ctx, const Value& module, const StrObj* name) {
  Value v = module_lookup(module, name);
  if (v.is(Kind::Property)) {
    // Python calls a class's __getattr__ when an attribute's lookup raises
    // AttributeError, a property getter's own included, so torch reports
    // "'W' object has no attribute 'x'" for either.
    try {
      return bind_class_attr(&ctx, v, module, module.as<ModuleObj>()->cls.get(), name);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::AttributeError) throw;
    }
    return module_getattr_fallback(ctx, module, name);
  }
  if (!v.is_null()) return v;
  return module_getattr_fallback(ctx, module, name);
}

Value module_getattr_fallback(CallContext& ctx, const Value& module, const StrObj* name) {
  auto* m = module.as<ModuleObj>();
  static const Ref<StrObj> getattr_name = intern("__getattr__");
  if (const Value* custom = m->cls->lookup(getattr_name.get()); custom && custom->is(Kind::Function))
    return ctx.call(*custom, {module, Value::object(Kind::Str, const_cast<StrObj*>(name))});
  throw_error(ErrorKind::AttributeError, "'" + m->class_name() + "' object has no attribute '" + name->s + "'");
}

void drop_everywhere(ModuleObj* m, const StrObj* name) {
  m->params.erase(name);
  m->modules.erase(name);
  m->buffers.erase(name);
  m->attrs.erase(name);
}

static HostModuleStoreHook host_store = nullptr;
void set_host_module_store_hook(HostModuleStoreHook hook) { host_store = hook; }
HostModuleStoreHook host_module_store_hook() { return host_store; }

void module_setattr(const Value& module, const Ref<StrObj>& name, const Value& value, CallContext* ctx) {
  auto* m = module.as<ModuleObj>();
  if (m->host && host_store) {  // the host's rules, properties included
    host_store(m, name.get(), &value);
    return;
  }
  // A name already in an instance dict cannot be a property (see class_model.h):
  // only a new name costs the class lookup.
  if (!module_instance_slot(m, name.get()) && class_property(m->cls.get(), name.get())) {
    if (ctx) {
      property_set(*ctx, module, name.get(), value);
      return;
    }
    // Only the read-only case can be answered without calling anything.
    const PropertyObj* p = class_property(m->cls.get(), name.get());
    if (p->fset.is_null() || p->fset.is_none())
      throw_error(ErrorKind::AttributeError, no_setter_message(name->s, m->class_name()));
    throw_error(ErrorKind::RuntimeError, "kiln: property '" + name->s + "' of '" + m->class_name() +
                                             "' has a setter, and this store has no caller to run it");
  }
  if (name->s == "training") {
    m->training = truth(value);
    m->bump_version();
    return;
  }
  if (value.is(Kind::Tensor) && value.as_tensor().is_parameter()) {
    drop_everywhere(m, name.get());
    m->params.set(name, value);
  } else if (m->params.contains(name.get())) {
    if (!value.is_none())
      throw_error(ErrorKind::TypeError, "cannot assign '" + type_name(value) + "' as parameter '" + name->s +
                                            "' (Parameter or None expected)");
    m->params.set(name, value);
  } else if (value.is(Kind::Module)) {
    drop_everywhere(m, name.get());
    m->modules.set(name, value);
  } else if (m->modules.contains(name.get())) {
    if (!value.is_none())
      throw_error(ErrorKind::TypeError, "cannot assign '" + type_name(value) + "' as child module '" + name->s +
                                            "' (Module or None expected)");
    m->modules.set(name, value);
  } else if (m->buffers.contains(name.get())) {
    if (!value.is_none() && !value.is(Kind::Tensor))
      throw_error(ErrorKind::TypeError, "cannot assign '" + type_name(value) + "' as buffer '" + name->s +
                                            "' (Tensor or None expected)");
    m->buffers.set(name, value);
  } else {
    m->attrs.set(name, value);
  }
  m->bump_version();
}

void module_delattr(const Value& module, const StrObj* name, CallContext* ctx) {
  auto* m = module.as<ModuleObj>();
  if (m->host && host_store) {
    host_store(m, name, nullptr);
    return;
  }
  if (!module_instance_slot(m, name) && class_property(m->cls.get(), name)) {
    if (ctx && property_delete(*ctx, module, name)) return;
    const PropertyObj* p = class_property(m->cls.get(), name);
    if (p->fdel.is_null() || p->fdel.is_none())
      throw_error(ErrorKind::AttributeError, no_deleter_message(name->s, m->class_name()));
    throw_error(ErrorKind::RuntimeError, "kiln: property '" + name->s + "' of '" + m->class_name() +
                                             "' has a deleter, and this del has no caller to run it");
  }
  if (!m->params.erase(name) && !m->modules.erase(name) && !m->buffers.erase(name) && !m->attrs.erase(name))
    throw_error(ErrorKind::AttributeError, "'" + m->class_name() + "' object has no attribute '" + name->s + "'");
  m->bump_version();
}

}  // namespace kiln::runtime

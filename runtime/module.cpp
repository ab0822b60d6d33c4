// The Module object model: lookup, setattr routing, __call__ with hooks,
// traversal (parameters, named_modules, ...), state_dict.
#include "runtime/module.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "runtime/descriptors.h"
#include "runtime/ops.h"
#include "runtime/signature.h"
#include "runtime/tensor_index.h"
#include "runtime/value_ops.h"

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

static void drop_everywhere(ModuleObj* m, const StrObj* name) {
  m->params.erase(name);
  m->modules.erase(name);
  m->buffers.erase(name);
  m->attrs.erase(name);
}

static HostModuleStoreHook host_store = nullptr;
void set_host_module_store_hook(HostModuleStoreHook hook) { host_store = hook; }

static void refuse_on_host(const ModuleObj* m, const char* what) {
  if (m->host)
    throw_error(ErrorKind::NotImplementedError, std::string(what) + " on a " + m->class_name() +
                                                    " mirrored from Python (a torch module) is not supported in kiln "
                                                    "code; call it on the module outside the compiled function");
}

void module_setattr(const Value& module, const Ref<StrObj>& name, const Value& value, CallContext* ctx) {
  auto* m = module.as<ModuleObj>();
  if (m->host && host_store) {  // the host's rules, properties included
    host_store(m, name.get(), &value);
    return;
  }
  // A name already in an instance dict cannot be a property (see module.h):
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

static void check_new_name(ModuleObj* m, std::string_view name, const char* what) {
  if (name.empty() || name.find('.') != std::string_view::npos)
    throw_error(ErrorKind::KeyError, std::string(what) + " name can't be empty or contain \".\", got: \"" +
                                         std::string(name) + "\"");
  auto key = intern(name);
  bool taken = m->attrs.contains(key.get()) || m->cls->lookup(key.get());
  bool same_dict = (std::string_view(what) == "parameter" && m->params.contains(key.get())) ||
                   (std::string_view(what) == "buffer" && m->buffers.contains(key.get())) ||
                   (std::string_view(what) == "module" && m->modules.contains(key.get()));
  if (taken && !same_dict)
    throw_error(ErrorKind::KeyError, "attribute '" + std::string(name) + "' already exists");
}

void register_parameter(ModuleObj* m, std::string_view name, const Value& param) {
  refuse_on_host(m, "register_parameter");
  check_new_name(m, name, "parameter");
  if (!param.is_none() && !(param.is(Kind::Tensor) && param.as_tensor().is_parameter()))
    throw_error(ErrorKind::TypeError, "cannot assign '" + type_name(param) + "' object to parameter '" +
                                          std::string(name) + "' (Parameter or None required)");
  auto key = intern(name);
  drop_everywhere(m, key.get());
  m->params.set(key, param);
  m->bump_version();
}

void register_buffer(ModuleObj* m, std::string_view name, const Value& tensor) {
  refuse_on_host(m, "register_buffer");
  check_new_name(m, name, "buffer");
  if (!tensor.is_none() && !tensor.is(Kind::Tensor))
    throw_error(ErrorKind::TypeError, "cannot assign '" + type_name(tensor) + "' object to buffer '" +
                                          std::string(name) + "' (Tensor or None required)");
  auto key = intern(name);
  drop_everywhere(m, key.get());
  m->buffers.set(key, tensor);
  m->bump_version();
}

void add_module(ModuleObj* m, std::string_view name, const Value& child) {
  refuse_on_host(m, "add_module");
  check_new_name(m, name, "module");
  if (!child.is_none() && !child.is(Kind::Module))
    throw_error(ErrorKind::TypeError, type_name(child) + " is not a Module subclass");
  auto key = intern(name);
  drop_everywhere(m, key.get());
  m->modules.set(key, child);
  m->bump_version();
}

static int64_t next_hook_id() {
  static int64_t id = 0;
  return ++id;
}

int64_t add_forward_pre_hook(ModuleObj* m, Value fn) {
  refuse_on_host(m, "register_forward_pre_hook");
  int64_t id = next_hook_id();
  m->forward_pre_hooks.push_back({id, std::move(fn)});
  m->bump_version();
  return id;
}

int64_t add_forward_hook(ModuleObj* m, Value fn) {
  refuse_on_host(m, "register_forward_hook");
  int64_t id = next_hook_id();
  m->forward_hooks.push_back({id, std::move(fn)});
  m->bump_version();
  return id;
}

bool remove_hook(ModuleObj* m, int64_t id) {
  for (auto* hooks : {&m->forward_pre_hooks, &m->forward_hooks})
    for (auto it = hooks->begin(); it != hooks->end(); ++it)
      if (it->id == id) {
        hooks->erase(it);
        m->bump_version();
        return true;
      }
  return false;
}

// ------------------------------------------------------------------ calls --


Value module_call(CallContext& ctx, const Value& module, const CallArgs& args, const Value* forward) {
  auto* m = module.as<ModuleObj>();
  if (m->lazy) materialize_lazy(m, args);
  static const Ref<StrObj> forward_name = intern("forward");
  if (!forward) forward = m->cls->lookup(forward_name.get());
  if (!forward)
    throw_error(ErrorKind::RuntimeError,
                "Module [" + m->class_name() + "] is missing the required \"forward\" function");

  if (m->forward_pre_hooks.empty() && m->forward_hooks.empty()) {
    std::vector<Value> full{module};
    full.insert(full.end(), args.args, args.args + args.nargs);
    return ctx.call(*forward, CallArgs{full.data(), full.size(), args.kwnames});
  }

  // Hooks see (and may replace) the positional arguments; keywords pass
  // straight to forward, as in torch. Copies: a hook may remove itself.
  std::vector<Value> pos(args.args, args.args + args.npos());
  std::vector<Value> kw(args.args + args.npos(), args.args + args.nargs);
  auto pre_hooks = m->forward_pre_hooks;
  for (const Hook& h : pre_hooks) {
    Value r = ctx.call(h.fn, {module, make_tuple(pos)});
    if (!r.is_none()) pos = r.is(Kind::Tuple) ? r.as<TupleObj>()->items : std::vector<Value>{r};
  }
  std::vector<Value> full{module};
  full.insert(full.end(), pos.begin(), pos.end());
  full.insert(full.end(), kw.begin(), kw.end());
  Value out = ctx.call(*forward, CallArgs{full.data(), full.size(), args.kwnames});
  auto hooks = m->forward_hooks;
  for (const Hook& h : hooks) {
    Value r = ctx.call(h.fn, {module, make_tuple(pos), out});
    if (!r.is_none()) out = r;
  }
  return out;
}

// -------------------------------------------------------------- traversal --

std::vector<std::pair<std::string, Value>> named_modules(ModuleObj* m, bool dedupe) {
  std::vector<std::pair<std::string, Value>> out;
  std::unordered_set<const ModuleObj*> seen;
  std::vector<const ModuleObj*> path;  // without dedupe: only a cycle is cut
  // Iterative preorder walk; deep hierarchies must not recurse the C stack.
  struct Item {
    std::string prefix;
    ModuleObj* m;
    size_t depth;
  };
  std::vector<Item> stack{{"", m, 0}};
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    ModuleObj* cur = item.m;
    if (dedupe ? !seen.insert(cur).second
               : std::find(path.begin(), path.begin() + ptrdiff_t(std::min(item.depth, path.size())), cur) !=
                     path.begin() + ptrdiff_t(std::min(item.depth, path.size())))
      continue;
    path.resize(item.depth);
    path.push_back(cur);
    out.emplace_back(item.prefix, Value::object(Kind::Module, cur));
    const auto& kids = cur->modules.entries();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
      if (it->second.is_none()) continue;
      stack.push_back({item.prefix.empty() ? it->first->s : item.prefix + "." + it->first->s,
                       it->second.as<ModuleObj>(), item.depth + 1});
    }
  }
  return out;
}

static std::vector<std::pair<std::string, Value>> named_members(ModuleObj* m, bool recurse, NameMap ModuleObj::*dict,
                                                                 bool dedupe) {
  std::vector<std::pair<std::string, Value>> out;
  std::unordered_set<const Object*> seen;
  auto visit = [&](const std::string& prefix, ModuleObj* mod) {
    for (const auto& [name, v] : mod->*dict) {
      if (v.is_none()) continue;
      if (dedupe && !seen.insert(v.obj()).second) continue;
      out.emplace_back(prefix.empty() ? name->s : prefix + "." + name->s, v);
    }
  };
  if (!recurse) {
    visit("", m);
    return out;
  }
  for (const auto& [prefix, mod] : named_modules(m, dedupe)) visit(prefix, mod.as<ModuleObj>());
  return out;
}

std::vector<std::pair<std::string, Value>> named_parameters(ModuleObj* m, bool recurse, bool dedupe) {
  return named_members(m, recurse, &ModuleObj::params, dedupe);
}
std::vector<std::pair<std::string, Value>> named_buffers(ModuleObj* m, bool recurse, bool dedupe) {
  return named_members(m, recurse, &ModuleObj::buffers, dedupe);
}

std::vector<std::pair<std::string, Value>> with_prefix(std::vector<std::pair<std::string, Value>> items,
                                                       const std::string& prefix) {
  if (prefix.empty()) return items;
  for (auto& [name, v] : items) name = name.empty() ? prefix : prefix + "." + name;
  return items;
}

std::vector<std::pair<std::string, Value>> named_children(ModuleObj* m) {
  std::vector<std::pair<std::string, Value>> out;
  std::unordered_set<const Object*> seen;
  for (const auto& [name, v] : m->modules)
    if (!v.is_none() && seen.insert(v.obj()).second) out.emplace_back(name->s, v);
  return out;
}

void set_training(ModuleObj* m, bool mode) {
  for (const auto& [name, mod] : named_modules(m)) {
    auto* x = mod.as<ModuleObj>();
    if (x->host && host_store) {  // the host object's own flag (refreshes x)
      static const Ref<StrObj> training = intern("training");
      const Value v = Value::boolean(mode);
      host_store(x, training.get(), &v);
      continue;
    }
    if (x->training != mode) {
      x->training = mode;
      x->bump_version();
    }
  }
}

// Like torch: every name, so a module or tensor reachable by two paths is
// listed under each (only a cycle is cut, at the module that closes it).
static void state_dict_into(ModuleObj* m, const std::string& prefix, DictObj* out,
                            std::vector<const ModuleObj*>& path) {
  if (std::find(path.begin(), path.end(), m) != path.end()) return;
  path.push_back(m);
  for (auto* dict : {&m->params, &m->buffers})
    for (const auto& [name, v] : *dict)
      if (!v.is_none()) out->set(Value::str(prefix + name->s), v);
  for (const auto& [name, child] : m->modules)
    if (!child.is_none()) state_dict_into(child.as<ModuleObj>(), prefix + name->s + ".", out, path);
  path.pop_back();
}

Value state_dict(ModuleObj* m) {
  Value d = make_dict();
  std::vector<const ModuleObj*> path;
  state_dict_into(m, "", d.as<DictObj>(), path);
  return d;
}

void load_state_dict(ModuleObj* m, const Value& dict) {
  if (!dict.is(Kind::Dict))
    throw_error(ErrorKind::TypeError, "load_state_dict() expects a dict, got '" + type_name(dict) + "'");
  Value own = state_dict(m);
  auto* src = dict.as<DictObj>();
  std::string missing, unexpected, mismatch;
  for (const auto& [k, v] : own.as<DictObj>()->entries)
    if (!src->find(k)) missing += (missing.empty() ? "" : ", ") + repr(k);
  for (const auto& [k, v] : src->entries) {
    const Value* dst = own.as<DictObj>()->find(k);
    if (!dst) {
      unexpected += (unexpected.empty() ? "" : ", ") + repr(k);
      continue;
    }
    if (!v.is(Kind::Tensor)) {
      mismatch += "\n\tvalue for " + to_str(k) + " is a '" + type_name(v) + "', not a Tensor.";
      continue;
    }
    Tensor a = v.as_tensor(), b = dst->as_tensor();
    if (a.sizes() != b.sizes())
      mismatch += "\n\tsize mismatch for " + to_str(k) + ": copying a param with shape " + shape_str(a.sizes()) +
                  " from checkpoint, the shape in current model is " + shape_str(b.sizes()) + ".";
  }
  if (!missing.empty() || !unexpected.empty() || !mismatch.empty()) {
    std::string msg = "Error(s) in loading state_dict for " + m->class_name() + ":";
    if (!missing.empty()) msg += "\n\tMissing key(s) in state_dict: " + missing + ".";
    if (!unexpected.empty()) msg += "\n\tUnexpected key(s) in state_dict: " + unexpected + ".";
    throw_error(ErrorKind::RuntimeError, msg + mismatch);
  }
  // Checked everything first: a failed load leaves the model untouched.
  for (const auto& [k, v] : src->entries)
    tensor_setitem(own.as<DictObj>()->find(k)->as_tensor(), make_tuple({}), v);
}

}  // namespace kiln::runtime

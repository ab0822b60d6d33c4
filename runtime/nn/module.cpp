// torch.nn.Module's behaviour (see module.h): registering, hooks, __call__,
// the walkers, train/eval, state_dict.
#include "runtime/nn/module.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "runtime/semantics/descriptors.h"
#include "runtime/semantics/signature.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_index.h"

namespace kiln::runtime {

static void refuse_on_host(const ModuleObj* m, const char* what) {
  if (m->host)
    throw_error(ErrorKind::NotImplementedError, std::string(what) + " on a " + m->class_name() +
                                                    " mirrored from Python (a torch module) is not supported in kiln "
                                                    "code; call it on the module outside the compiled function");
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
    if (x->host && host_module_store_hook()) {  // the host object's own flag (refreshes x)
      static const Ref<StrObj> training = intern("training");
      const Value v = Value::boolean(mode);
      host_module_store_hook()(x, training.get(), &v);
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

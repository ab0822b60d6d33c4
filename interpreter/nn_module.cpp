// nn.Module during a trace (nn_module.h): Dynamo's NNModuleVariable and
// UnspecializedNNModuleVariable, named as the seeds name them.
#include "interpreter/nn_module.h"

#include <algorithm>
#include <map>
#include <optional>

#include "runtime/nn/builtin_forward.h"
#include "runtime/nn/module.h"
#include "runtime/nn/module_walkers.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/descriptors.h"
#include "runtime/semantics/value_ops.h"
#include "variables/wrap.h"

namespace kiln::interpreter::nn_module {

using namespace kiln::runtime;
using output_graph::attr_source;
namespace vars = kiln::variables;
using output_graph::Guard;
using output_graph::GuardKind;
using output_graph::TensorMeta;

namespace {

const NameMap& field_map(const ModuleObj* m, Field field) {
  switch (field) {
    case Field::parameters: return m->params;
    case Field::modules: return m->modules;
    case Field::buffers: return m->buffers;
  }
  throw_error(ErrorKind::RuntimeError, "getattr_helper: no such field");
}

// NNModuleVariable.var_getattr: a specialized module (its version guard
// covers what its dicts hold, so every read below folds).
VT specialized_var_getattr(InstructionTranslator& tx, const VT& module, const std::string& name) {
  TraceContext& ctx = tx.ctx();
  auto overlay = ctx.attr_overlay.find({module->value.obj(), name});
  // A null entry: deleted earlier in the trace (the class and __getattr__
  // may still answer).
  const bool deleted = overlay != ctx.attr_overlay.end() && !overlay->second;
  if (overlay != ctx.attr_overlay.end() && !deleted) return overlay->second;
  auto* m = module->value.as<ModuleObj>();
  // Python's order (runtime::module_lookup): the instance __dict__, the
  // class, then torch's __getattr__ over _parameters, _modules, _buffers.
  if (!deleted) {
    if (const Value* a = m->attrs.find(intern(name).get())) {
      auto source = module->source ? attr_source(module->source, name) : nullptr;
      if (a->is(Kind::Tensor) || vars::grad_tensor_view(*a).defined())
        return vars::register_attr_or_module(ctx.out, *a, module, name, source);
      return source ? ctx.builder.wrap(*a, source) : tx.from_value(*a);
    }
  }
  if (name == "training") return const_vt(Value::boolean(m->training));
  // Class attributes bound as Python binds them (a property's getter is
  // inlined on this module: no instance entry can shadow it, module_setattr
  // calls its setter instead); a method named like a submodule wins.
  if (const Value* c = m->cls->lookup(intern(name).get()))
    return tx.bind_class_attr_traced(*c, module, m->cls.get(), name);
  if (!deleted)
    if (VT v = manually_trace_nn_module_getattr(tx, module, name)) return v;
  if (name == "__class__") return tx.from_value(class_value(m->cls.get()));
  if (VT v = custom_getattr_fallback(tx, module, name)) return v;
  // A traced AttributeError: the graph ends here and the VM raises the
  // program's own error ("'Block' object has no attribute 'foo'") when the
  // residual code runs this instruction; the reason adds where the module
  // sits in the traced tree.
  const std::string path = vars::module_qualname(*module);
  unsupported(BreakReason::attribute_error, "'" + m->class_name() + "' object" +
                                                (path.empty() ? "" : " (at " + path + ")") + " has no attribute '" +
                                                name + "'");
}

// UnspecializedNNModuleVariable.var_getattr: an instance entry wrapped at
// its own source (guarded by what it is); anything else through
// specialized().
VT unspecialized_var_getattr(InstructionTranslator& tx, const VT& module, const std::string& name) {
  TraceContext& ctx = tx.ctx();
  auto overlay = ctx.attr_overlay.find({module->value.obj(), name});
  if (overlay != ctx.attr_overlay.end()) {
    if (overlay->second) return overlay->second;
    return specialized_var_getattr(tx, specialized(tx, module), name);  // deleted in this trace
  }
  if (module->source)
    if (const Value* v = module_instance_slot(module->value.as<ModuleObj>(), intern(name).get())) {
      // A plain object's attribute, guarded by what it is at its own
      // source (a submodule: identity and version; a tensor: an input).
      VT vt = ctx.builder.wrap(*v, attr_source(module->source, name));
      if (vt->is_module()) {
        vt->path_parent = module;
        vt->module_path = name;
      }
      return vt;
    }
  // training, the class, __getattr__ or nothing: what answers depends on
  // the instance dicts *not* holding the name, which the version guards.
  return specialized_var_getattr(tx, specialized(tx, module), name);
}

}  // namespace

// ------------------------------------------------------------ attributes --

VT var_getattr(InstructionTranslator& tx, const VT& module, const std::string& name) {
  if (module->is(VTKind::UnspecializedNNModule)) return unspecialized_var_getattr(tx, module, name);
  return specialized_var_getattr(tx, module, name);
}

VT getattr_helper(InstructionTranslator& tx, const VT& module, Field field, const std::string& name) {
  const Value* v = field_map(module->value.as<ModuleObj>(), field).find(intern(name).get());
  if (!v) return nullptr;
  // Its contents are covered by the module's version guard.
  return vars::register_attr_or_module(tx.ctx().out, *v, module, name,
                                       module->source ? attr_source(module->source, name) : nullptr);
}

VT manually_trace_nn_module_getattr(InstructionTranslator& tx, const VT& module, const std::string& name) {
  VT out = getattr_helper(tx, module, Field::parameters, name);  // torch's __getattr__ order
  if (!out) out = getattr_helper(tx, module, Field::buffers, name);
  if (!out) out = getattr_helper(tx, module, Field::modules, name);
  return out;
}

VT custom_getattr_fallback(InstructionTranslator& tx, const VT& module, const std::string& name) {
  static const Ref<StrObj> getattr_name = intern("__getattr__");
  const Value* custom = module->value.as<ModuleObj>()->cls->lookup(getattr_name.get());
  if (!custom || !custom->is(Kind::Function)) return nullptr;
  return tx.inline_call(*custom, {module, const_vt(Value::str(name))}, nullptr, nullptr);
}

VT specialized(InstructionTranslator& tx, const VT& module) {
  if (!module->is(VTKind::UnspecializedNNModule)) return module;
  if (!module->realized) {
    if (module->source) {
      Guard g;
      g.source = module->source;
      g.kind = GuardKind::ModuleVersion;
      g.expected = module->value;
      g.version = module->value.as<ModuleObj>()->version;
      tx.ctx().out.guards().add(std::move(g));
    }
    VT twin = vars::make_nn_module(module->value, module->module_path, module->source);
    twin->path_parent = module->path_parent;
    module->realized = twin;
  }
  return module->realized;
}

void check_structure_unchanged(InstructionTranslator& tx, const ModuleObj* m, const std::string& what) {
  const auto& overlay = tx.ctx().attr_overlay;
  for (auto it = overlay.lower_bound({m, std::string()}); it != overlay.end() && it->first.first == m; ++it) {
    const VT& v = it->second;
    // What module_setattr files under _modules or _parameters: a module, or
    // a tensor that existed before the trace (it may be a Parameter).
    const bool lazy = v && v->is(VTKind::Lazy);
    const bool structural_value =
        v && (v->is_module() || (v->is(VTKind::Tensor) && v->source) ||
              (lazy && (v->value.is(Kind::Module) || v->value.is(Kind::Tensor))));
    auto key = intern(it->first.second);
    if (structural_value || m->params.contains(key.get()) || m->modules.contains(key.get()) ||
        m->buffers.contains(key.get()))
      unsupported(BreakReason::untraced_object,
                  what + " after its attribute '" + it->first.second + "' was set in the same trace");
  }
}

// ----------------------------------------------------------------- calls --

VT call_function(InstructionTranslator& tx, const VT& module0, std::vector<VT> args, const TupleObj* kwnames) {
  TraceContext& ctx = tx.ctx();
  auto* m = module0->value.as<ModuleObj>();
  if (ctx.tracer && !kwnames &&
      ctx.tracer->is_leaf_module(m, ctx.tracer->uses_names() ? vars::module_qualname(*module0) : std::string()))
    return leaf_call(tx, module0, args);
  // An unspecialized module stays so only for what is guarded as it is
  // read (hooks, a Sequential's children); initialising a lazy module or
  // running another built-in forward reads its structure.
  const bool unspecialized = module0->is(VTKind::UnspecializedNNModule) && !m->lazy &&
                             m->cls->builtin_kind() == BuiltinModule::Sequential;
  const VT module = unspecialized ? module0 : specialized(tx, module0);
  if (unspecialized && module->source) {
    // The hooks it runs, by identity and in order.
    std::vector<Value> pre, post;
    for (const Hook& h : m->forward_pre_hooks) pre.push_back(h.fn);
    for (const Hook& h : m->forward_hooks) post.push_back(h.fn);
    Guard g;
    g.source = module->source;
    g.kind = GuardKind::ModuleHooks;
    g.expected = make_tuple({make_tuple(std::move(pre)), make_tuple(std::move(post))});
    ctx.out.guards().add(std::move(g));
  }
  if (m->lazy) {
    // A lazy module initialises itself from its first input, as it would
    // eagerly (the only input it reads is the last dimension's size); then
    // it is traced as what it became. Its version guard is re-taken after.
    VT x = args.empty() ? nullptr : tx.realize(args[0]);
    if (!x || !x->is(VTKind::Tensor) || !module->source)
      unsupported(BreakReason::module_call, "the first call of a lazy module without a tensor input");
    // Initialising changes the module now, at trace time: an attribute this
    // trace read before (a tracker or a guard holds its source) would be
    // read again after the graph, or guarded, as it is after the change.
    // The VM initialises it instead, and the rest is traced afresh.
    for (const auto& [name, child] : module->source->attr_children)
      if (!child.expired())
        unsupported(BreakReason::module_call, "the first call of a lazy module whose '" + name +
                                                  "' this trace already read");
    Value meta = Value::tensor(output_graph::meta_tensor(x->meta()));
    // It reads the last dim's size (its in_features): that one is a number now.
    if (!x->meta().sizes.empty()) {
      VT last = tx.size_of(x, x->meta().sizes.size() - 1);
      if (last->is(VTKind::SymInt)) tx.specialize(last, "a lazy module's first input sets its size");
    }
    try {
      materialize_lazy(m, CallArgs{&meta, 1, nullptr});
    } catch (const Error& e) {
      unsupported(BreakReason::module_call, std::string("lazy initialisation fails: ") + e.what());
    }
    Guard g;
    g.source = module->source;
    g.kind = GuardKind::ModuleVersion;
    g.expected = module->value;
    g.version = m->version;
    ctx.out.guards().add(std::move(g));
  }
  static const Ref<StrObj> forward = intern("forward");
  const Value* fwd = m->cls->lookup(forward.get());
  if (!fwd) unsupported(BreakReason::module_call, "a module without forward");
  if (fwd->is(Kind::Function) && m->forward_pre_hooks.empty() && m->forward_hooks.empty()) {
    // No hook sees the arguments: forward(self, *args) straight away.
    args.insert(args.begin(), module);
    return tx.inline_call(*fwd, std::move(args), kwnames, nullptr);
  }
  const size_t nkw = kwnames ? kwnames->items.size() : 0;
  std::vector<VT> pos(args.begin(), args.end() - ptrdiff_t(nkw));
  std::vector<VT> kw(args.end() - ptrdiff_t(nkw), args.end());
  for (const Hook& h : m->forward_pre_hooks) {
    if (!h.fn.is(Kind::Function))
      unsupported(BreakReason::module_call, "a forward pre-hook that is not a KBC function");
    VT r = tx.inline_call(h.fn, {module, vars::make_tuple(pos)}, nullptr, nullptr);
    if (!(r->is(VTKind::Constant) && r->value.is_none())) pos = r->is(VTKind::Tuple) ? r->items : std::vector<VT>{r};
  }
  VT out;
  if (fwd->is(Kind::Function)) {
    std::vector<VT> full{module};
    full.insert(full.end(), pos.begin(), pos.end());
    full.insert(full.end(), kw.begin(), kw.end());
    out = tx.inline_call(*fwd, std::move(full), kwnames, nullptr);
  } else {
    // A forward kiln could not translate (kiln/_frontend.py says why) is
    // a native calling the Python function: it runs as Python, untraced.
    if (m->cls->builtin_kind() == runtime::BuiltinModule::None && fwd->is(Kind::Builtin))
      unsupported(BreakReason::module_call, m->class_name() + ".forward is Python kiln could not translate to KBC "
                                            "(kiln._frontend.translate(" + m->class_name() + ".forward) says why)");
    if (nkw || pos.size() != 1) unsupported(BreakReason::module_call, "built-in module called with these arguments");
    out = builtin_forward(tx, module, pos[0], unspecialized);
  }
  for (const Hook& h : m->forward_hooks) {
    if (!h.fn.is(Kind::Function)) unsupported(BreakReason::module_call, "a forward hook that is not a KBC function");
    VT r = tx.inline_call(h.fn, {module, vars::make_tuple(pos), out}, nullptr, nullptr);
    if (!(r->is(VTKind::Constant) && r->value.is_none())) out = r;
  }
  return out;
}

namespace {

// The traced backend of run_builtin_forward (runtime/nn/builtin_forward.h):
// trackers, each op a graph node; the module's attributes read through
// var_getattr (so their sources are guarded as any read is).
struct TracedForward {
  using V = VT;
  InstructionTranslator& tx;
  const VT& module;
  bool unspecialized;
  VT read(const ForwardOperand& o) { return var_getattr(tx, module, o.name); }
  VT constant(Value v) { return const_vt(std::move(v)); }
  VT op(OpId id, std::vector<VT> args) { return tx.tensor_op(id, args); }
  // The input as it is (a function's argument is a lazy tracker until
  // read: unrealized, it is no Tensor, and training-mode Dropout broke).
  // Recording gradients: the op runs as torch's own (the autograd backend).
  bool records_grad(const VT& x0) {
    const VT x = tx.realize(x0);
    return x->is(VTKind::Tensor) && x->node && x->node->requires_grad;
  }
  void require_tensor(const VT& x) {
    if (!tx.realize(x)->is(VTKind::Tensor)) unsupported(BreakReason::module_call, "Dropout of a non-tensor");
  }
  VT sizes_of(const VT& x0) {
    const VT x = tx.realize(x0);
    std::vector<VT> dims;  // symbolic where x's sizes are
    for (size_t d = 0; d < x->meta().sizes.size(); ++d) dims.push_back(tx.size_of(x, d));
    return vars::make_tuple(std::move(dims));
  }
  // Sequential, unrolled.
  VT call_children(const VT& x) {
    auto* m = module->value.as<ModuleObj>();
    check_structure_unchanged(tx, m, "calling a Sequential");
    if (unspecialized && module->source) {
      // Unrolled over these children: their names in order are guarded,
      // each child by its own source.
      std::vector<Value> names;
      for (const auto& [name, child] : m->modules) names.push_back(Value::object(Kind::Str, name));
      Guard g;
      g.source = module->source;
      g.kind = GuardKind::ModuleChildren;
      g.expected = make_tuple(std::move(names));
      tx.ctx().out.guards().add(std::move(g));
    }
    VT out = x;
    // Every child is read, None ones too: unspecialized, that read is
    // what guards a None slot against becoming a module.
    for (const auto& [name, child] : m->modules) {
      VT c = var_getattr(tx, module, name->s);
      if (!(c->is(VTKind::Constant) && c->value.is_none())) out = call_function(tx, c, {out}, nullptr);
    }
    return out;
  }
  [[noreturn]] void fail(const std::string& message) { unsupported(BreakReason::module_call, message); }
};

}  // namespace

VT builtin_forward(InstructionTranslator& tx, const VT& module, const VT& x, bool unspecialized) {
  auto* m = module->value.as<ModuleObj>();
  TracedForward b{tx, module, unspecialized};
  return run_builtin_forward(b, m, m->cls->builtin_kind(), x);
}

// A built-in leaf's result metadata straight from its op's shape rule.
static std::optional<TensorMeta> builtin_leaf_meta(const ModuleObj* m, const VT& x) {
  if (!x->is(VTKind::Tensor)) return std::nullopt;
  switch (m->cls->builtin_kind()) {
    case BuiltinModule::ReLU:
    case BuiltinModule::GELU:
    case BuiltinModule::Dropout:
    case BuiltinModule::LayerNorm: return x->meta();  // elementwise or normalising: same shape and dtype
    case BuiltinModule::Linear: {
      const Value* w = m->params.find("weight");
      const Value* b = m->params.find("bias");
      if (!w || !w->is(Kind::Tensor)) return std::nullopt;
      const bool has_bias = b && !b->is_none();
      if (has_bias && !b->is(Kind::Tensor)) return std::nullopt;
      // linear's rule on the types alone: no meta tensors to build (a dozen
      // allocations per Linear, in a trace that is mostly Linear calls).
      const TensorMeta& xm = x->meta();
      if (!xm.sym.empty()) return std::nullopt;  // symbolic sizes: the scratch trace's rules say
      const Tensor& wt = w->as_tensor();
      try {
        auto [sizes, dtype] = linear_result(xm.sizes, xm.dtype, wt.sizes(), wt.dtype(),
                                            has_bias ? &b->as_tensor().sizes() : nullptr,
                                            has_bias ? b->as_tensor().dtype() : xm.dtype);
        TensorMeta out;
        out.strides = contiguous_strides(sizes);
        out.sizes = std::move(sizes);
        out.dtype = dtype;
        return out;
      } catch (const Error&) {
        return std::nullopt;  // the general path reports the error
      }
    }
    default: return std::nullopt;
  }
}

VT leaf_call(InstructionTranslator& tx, const VT& module, const std::vector<VT>& args) {
  TraceContext& ctx = tx.ctx();
  auto* m = module->value.as<ModuleObj>();
  // The call_module node for a computed result type: with the default path
  // policy it carries a path link and the module (no O(depth) string).
  auto leaf_node = [&](std::vector<output_graph::Arg> node_args, TensorMeta meta) {
    if (!ctx.tracer->uses_names())
      return ctx.out.graph().call_module(ctx.tracer->path_link_of_module(m), module->value, std::move(node_args),
                                         std::move(meta));
    std::string path = ctx.tracer->path_of_module(m);
    ctx.out.graph().set_attr(path, module->value);
    return ctx.out.graph().call_module(path, std::move(node_args), std::move(meta));
  };
  if (args.size() == 1 && !m->lazy) {
    const VT x = tx.realize(args[0]);
    if (auto meta = builtin_leaf_meta(m, x))
      return vars::make_tensor(leaf_node({output_graph::Arg::of(x->node)}, std::move(*meta)));
  }
  // The leaf's result type: trace the call once into a scratch graph (the
  // leaf's own ops, discarded), over placeholders shaped like the args.
  // Symbolic sizes stay symbolic: the scratch trace starts from the
  // caller's ShapeEnv (its symbols, hints and learner), and what its rules
  // assume of them comes back as the caller's guards.
  TraceContext scratch(ctx.vm);
  output_graph::ShapeEnv& env = ctx.out.guards().shapes();
  scratch.out.guards().shapes() = env;
  InstructionTranslator scratch_tx(scratch, tx.function_ref(), {}, nullptr);
  std::vector<VT> scratch_args;
  std::vector<output_graph::Arg> node_args;
  for (const VT& a0 : args) {
    VT a = tx.realize(a0);
    if (a->is(VTKind::Tensor)) {
      auto src = output_graph::local_source("leaf_arg" + std::to_string(scratch_args.size()), -1);
      scratch_args.push_back(vars::make_tensor(scratch.out.add_input_like(src, a->meta()), src));
      node_args.push_back(output_graph::Arg::of(a->node));
    } else if (tx.is_constant(a)) {
      scratch_args.push_back(a);
      node_args.push_back(output_graph::Arg::constant(tx.constant_value(a)));
    } else {
      unsupported(BreakReason::module_call, "a leaf module called with " + a->str());
    }
  }
  VT out = call_function(scratch_tx, vars::make_nn_module(module->value, vars::module_qualname(*module), nullptr),
                         scratch_args, nullptr);
  if (!out->is(VTKind::Tensor)) unsupported(BreakReason::module_call, "a leaf module that does not return a tensor");
  env = scratch.out.guards().shapes();
  return vars::make_tensor(leaf_node(std::move(node_args), out->meta()));
}

// -------------------------------------------------------- traced methods --

namespace {

// The module tracker at a dotted path below `root`, through the same
// attribute lookup (and guards) as self.a.b.
VT module_at(InstructionTranslator& tx, const VT& root, const std::string& path) {
  VT cur = root;
  size_t start = 0;
  while (start < path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string::npos) dot = path.size();
    cur = var_getattr(tx, cur, path.substr(start, dot - start));
    start = dot + 1;
  }
  return cur;
}

// The tensor at a qualified name (blocks.0.fc.weight) below `root`.
VT member_at(InstructionTranslator& tx, const VT& root, const std::string& qualified) {
  size_t dot = qualified.rfind('.');
  VT owner = dot == std::string::npos ? root : module_at(tx, root, qualified.substr(0, dot));
  return var_getattr(tx, owner, dot == std::string::npos ? qualified : qualified.substr(dot + 1));
}

// Each (qualified name, value) the runtime's walk lists (deduplicated as
// torch's named_* are), as a tracker read through var_getattr: a tensor is
// a get_attr node once per identity, a module a tracker with its own guard.
std::vector<std::pair<std::string, VT>> trackers_of(InstructionTranslator& tx, const VT& root,
                                                    const std::vector<std::pair<std::string, Value>>& items,
                                                    bool modules) {
  std::vector<std::pair<std::string, VT>> out;
  for (const auto& [qualified, v] : items)
    out.emplace_back(qualified, modules ? (qualified.empty() ? root : module_at(tx, root, qualified))
                                        : member_at(tx, root, qualified));
  return out;
}

VT list_of(const std::vector<std::pair<std::string, VT>>& items, bool named) {
  std::vector<VT> out;
  for (const auto& [qualified, vt] : items)
    out.push_back(named ? vars::make_tuple({const_vt(Value::str(qualified)), vt}) : vt);
  return vars::make_list(std::move(out));
}

}  // namespace

std::vector<std::pair<std::string, VT>> collect_parameters(InstructionTranslator& tx, const VT& module, bool recurse) {
  return trackers_of(tx, module, named_parameters(module->value.as<ModuleObj>(), recurse), false);
}

// Answered at trace time by walking the module dicts. A read of the whole
// structure: an unspecialized module is specialized.
VT trace_supported_methods(InstructionTranslator& tx, BuiltinCall& c, std::string_view m) {
  auto& args = c.args;
  if (args.empty()) return nullptr;
  if (args[0]->is(VTKind::UnspecializedNNModule)) args[0] = specialized(tx, args[0]);
  if (!args[0]->is(VTKind::NNModule)) return nullptr;
  // torch's signature (runtime/nn/module_walkers.h), each argument a known
  // constant; anything else is CPython's to answer.
  const runtime::Signature* sig = runtime::module_walker_signature(m);
  if (!sig) return nullptr;
  std::vector<Value> values{args[0]->value};
  for (size_t i = 1; i < args.size(); ++i) {
    if (!tx.is_constant(args[i]))
      unsupported(BreakReason::builtin_of_traced_value, c.b.name + "() with a traced argument");
    values.push_back(tx.constant_value(args[i]));
  }
  std::vector<Value> bound;
  try {
    bound = sig->bind(runtime::CallArgs{values.data(), values.size(), c.kwnames});
  } catch (const Error& e) {
    unsupported(BreakReason::python_error, e.what());
  }
  auto param = [&](std::string_view n) { return sig->index_of(n) < 0 ? Value::null() : bound[size_t(sig->index_of(n))]; };
  auto flag = [&](std::string_view n) { return sig->index_of(n) < 0 || truth(param(n)); };
  std::string prefix;
  if (Value p = param("prefix"); !p.is_null()) {
    if (!p.is(Kind::Str)) unsupported(BreakReason::python_error, c.b.name + "() with a prefix that is not a str");
    prefix = p.as<StrObj>()->s;
  }
  if (Value memo = param("memo"); !memo.is_null() && !memo.is_none())
    unsupported(BreakReason::builtin_of_traced_value, "named_modules() with a memo set");
  const bool recurse = flag("recurse"), dedupe = flag("remove_duplicate");
  const VT& self = args[0];
  auto* root = self->value.as<ModuleObj>();
  if (!tx.ctx().attr_overlay.empty())
    for (const auto& [path, mod] : named_modules(root))
      check_structure_unchanged(tx, mod.as<ModuleObj>(), c.b.name + "()");
  auto named = [&](std::vector<std::pair<std::string, Value>> items, bool modules) {
    // Trackers keep the path from self (their sources); the names take the prefix.
    auto out = trackers_of(tx, self, items, modules);
    if (!prefix.empty())
      for (auto& [name, vt] : out) name = name.empty() ? prefix : prefix + "." + name;
    return out;
  };
  if (m == "parameters") return list_of(collect_parameters(tx, self, recurse), false);
  if (m == "named_parameters") return list_of(named(named_parameters(root, recurse, dedupe), false), true);
  if (m == "buffers") return list_of(named(named_buffers(root, recurse), false), false);
  if (m == "named_buffers") return list_of(named(named_buffers(root, recurse, dedupe), false), true);
  if (m == "children") return list_of(named(named_children(root), true), false);
  if (m == "named_children") return list_of(named(named_children(root), true), true);
  if (m == "modules") return list_of(named(named_modules(root), true), false);
  if (m == "named_modules") return list_of(named(named_modules(root, dedupe), true), true);
  return nullptr;
}

// ModuleDict's views: children by name, through the module's own lookup.
VT trace_module_dict_method(InstructionTranslator& tx, BuiltinCall& c, std::string_view m) {
  auto& args = c.args;
  if (args.size() != 1) return nullptr;
  if (args[0]->is(VTKind::UnspecializedNNModule)) args[0] = specialized(tx, args[0]);
  if (!args[0]->is(VTKind::NNModule) || (m != "keys" && m != "values" && m != "items")) return nullptr;
  check_structure_unchanged(tx, args[0]->value.as<ModuleObj>(), c.b.name + "()");
  std::vector<VT> out;
  for (const auto& [key, child] : args[0]->value.as<ModuleObj>()->modules) {
    VT k = const_vt(Value::str(key->s));
    if (m == "keys") out.push_back(k);
    else if (m == "values") out.push_back(var_getattr(tx, args[0], key->s));
    else out.push_back(vars::make_tuple({k, var_getattr(tx, args[0], key->s)}));
  }
  return vars::make_list(std::move(out));
}

// ---------------------------------------------------- stores and deletes --

bool store_through_property(InstructionTranslator& tx, const VT& module, const std::string& name, const VT& value) {
  auto* m = module->value.as<ModuleObj>();
  const PropertyObj* p = class_property(m->cls.get(), intern(name).get());
  if (!p) return false;
  if (p->fset.is_null() || p->fset.is_none())
    unsupported(BreakReason::attribute_error, no_setter_message(name, m->class_name()));
  tx.call_function(tx.from_value(p->fset), {module, value}, nullptr);
  return true;
}

void var_delattr(InstructionTranslator& tx, const VT& obj0, const std::string& name) {
  VT obj = tx.realize(obj0);
  if (obj->made) return tx.made_delattr(obj, name);  // translator_user_defined.cpp
  if (!obj->is_module() || !obj->source)
    unsupported(BreakReason::outside_mutation, "attribute deletion on " + obj->str());
  auto* m = obj->value.as<ModuleObj>();
  auto key = intern(name);
  if (const PropertyObj* p = class_property(m->cls.get(), key.get())) {
    if (p->fdel.is_null() || p->fdel.is_none())
      unsupported(BreakReason::attribute_error, no_deleter_message(name, m->class_name()));
    tx.call_function(tx.from_value(p->fdel), {obj}, nullptr);
    return;
  }
  // What is there now: the trace's own stores and deletes first (a null
  // overlay entry is a deletion), else the module's dicts.
  TraceContext& ctx = tx.ctx();
  auto overlay = ctx.attr_overlay.find({m, name});
  const bool present = overlay != ctx.attr_overlay.end() ? overlay->second != nullptr
                                                         : module_instance_slot(m, key.get()) != nullptr;
  if (!present)
    unsupported(BreakReason::attribute_error, "'" + m->class_name() + "' object has no attribute '" + name + "'");
  // Replayed after the graph (a null value: DELETE_ATTR); reads later in
  // the trace see it gone.
  ctx.attr_overlay[{m, name}] = nullptr;
  ctx.side_effects.attr_stores.push_back({obj, name, nullptr});
}

}  // namespace kiln::interpreter::nn_module

// Calling and attribute access during a trace: inline_call_ for KBC
// functions and methods, module calls (hooks, forward, built-in modules),
// builtins (registry ops become nodes; pure Python builtins fold; side
// effects break), and attribute reads on tensors and modules.
#include "interpreter/instruction_translator.h"
#include "interpreter/stack_guard.h"

#include <optional>
#include "variables/wrap.h"
#include "runtime/builtins.h"
#include "runtime/descriptors.h"
#include "runtime/module.h"
#include "runtime/name_map.h"
#include "runtime/value_ops.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
using output_graph::attr_source;
namespace vars = kiln::variables;
using output_graph::Guard;
using output_graph::GuardKind;
using output_graph::TensorMeta;

static VT const_vt(Value v) { return vars::make_constant(std::move(v)); }

// Inlining depth is bounded by the C++ stack (stack_guard.h), not a count:
// a 5,000-deep module chain inlines on a big enough stack.

// ------------------------------------------------------------- dispatch --

// math.sqrt(C // n_head) on known numbers: called now, its result a
// constant (the callee is guarded at its own source, by identity). Null
// when it cannot fold: a traced argument, a result that is no literal, or
// an error (the graph then breaks and the call raises it when it runs).
VT InstructionTranslator::fold_pure_foreign_call(const Value& fn, std::vector<VT>& args, const TupleObj* kwnames) {
  const auto* f = fn.as<ForeignObj>();
  if (!f->vt->pure || !f->vt->pure(f->handle)) return nullptr;
  std::vector<Value> values;
  for (VT& a : args) {
    a = realize(a);
    if (!is_constant(a)) return nullptr;
    values.push_back(constant_value(a));
  }
  try {
    Value r = ctx_.vm.call(fn, CallArgs{values.data(), values.size(), kwnames});
    // A null-context manager (torch.no_grad()) is as good as a literal: an
    // object whose only use is a `with` traced as doing nothing.
    const bool null_context = r.is(Kind::Foreign) && r.as<ForeignObj>()->vt->null_context &&
                              r.as<ForeignObj>()->vt->null_context(r.as<ForeignObj>()->handle);
    return vars::is_literal(r) || null_context ? const_vt(std::move(r)) : nullptr;
  } catch (const Error&) {
    return nullptr;
  }
}

// Why the object's owner keeps it from the tracer (ForeignVTable::
// untraced_reason), or "".
static std::string untraced_reason(const Value& v) {
  if (!v.is(Kind::Foreign)) return "";
  const auto* f = v.as<ForeignObj>();
  return f->vt->untraced_reason ? f->vt->untraced_reason(f->handle) : "";
}

VT InstructionTranslator::call_function(const VT& callee0, std::vector<VT> args, const TupleObj* kwnames) {
  VT callee = realize(callee0);
  if (callee->kind == VTKind::Builtin && callee->value.is_same(null_context_exit())) close_null_with();
  switch (callee->kind) {
    case VTKind::UserFunction:
      if (callee->value.is(Kind::Builtin)) return call_builtin(callee->value, std::move(args), kwnames);
      return inline_call(callee->value, std::move(args), kwnames, callee);
    case VTKind::UserMethod:
      args.insert(args.begin(), callee->self);
      if (callee->value.is(Kind::Builtin)) return call_builtin(callee->value, std::move(args), kwnames);
      return inline_call(callee->value, std::move(args), kwnames, nullptr);
    case VTKind::Builtin: return call_builtin(callee->value, std::move(args), kwnames);
    case VTKind::NNModule:
    case VTKind::UnspecializedNNModule: return call_module(callee, std::move(args), kwnames);
    case VTKind::NestedFunction: {
      // A function made in this trace: a FunctionObj for its code and
      // constant defaults; its cells stay trackers.
      auto f = make_ref<FunctionObj>();
      f->code = Ref<Code>(callee->value.as<Code>());
      f->globals = fn_->globals;
      if (callee->self) {
        if (!is_constant(callee->self)) unsupported(BreakReason::traced_python_value, "non-constant defaults of a nested function");
        f->defaults = to_vector(constant_value(callee->self));
      }
      return inline_call(Value::object(Kind::Function, f), std::move(args), kwnames, callee, callee->items);
    }
    case VTKind::GetAttr:
      if (callee->self->value.is(Kind::Foreign)) {
        if (std::string why = untraced_reason(callee->self->value); !why.empty())
          unsupported(BreakReason::library_fallback, why + " (method '" + callee->module_path + "')");
        unsupported(BreakReason::foreign_call, "method '" + callee->module_path + "'");
      }
      // LOAD_METHOD deferred a failed module lookup to this call: looking
      // again throws its own reason (a missing attribute's AttributeError).
      if (callee->self->is_module()) get_attr(callee->self, callee->module_path);
      unsupported(BreakReason::untraced_object, "call to '" + callee->module_path + "' of " + callee->self->str());
    case VTKind::Opaque:
      if (callee->value.is(Kind::Foreign)) {
        if (VT folded = fold_pure_foreign_call(callee->value, args, kwnames)) return folded;
        if (std::string why = untraced_reason(callee->value); !why.empty())
          unsupported(BreakReason::library_fallback, why);  // "torch.nn.functional.unfold has no kiln lowering"
        unsupported(BreakReason::foreign_call, repr(callee->value));  // "<built-in function id>"
      }
      if (callee->value.is(Kind::Class))
        unsupported(BreakReason::untraced_object, "creating a " + callee->value.as<ClassObj>()->name + " inside the trace");
      [[fallthrough]];
    default: unsupported(BreakReason::untraced_object, "calling " + callee->str());
  }
}

VT InstructionTranslator::inline_call(const Value& fnv, std::vector<VT> args, const TupleObj* kwnames, const VT& fn_vt,
                                      std::vector<VT> closure) {
  auto* fn = fnv.as<FunctionObj>();
  const Code* code = fn->code.get();
  // Recursion is the same code on the same self: a module chain runs one
  // forward on many different modules, which is nesting, not recursion.
  const void* self_id = (!args.empty() && args[0] && args[0]->is_module()) ? args[0]->value.obj() : nullptr;
  const std::pair<const void*, const void*> frame_key{code, self_id};
  if (ctx_.active_frames.count(frame_key)) unsupported(BreakReason::recursion, code->qualname);
  if (stack_nearly_exhausted()) unsupported(BreakReason::recursion, code->qualname + " (inlining too deep for the stack)");

  // Python's binding rules over trackers; a binding error is left to the VM,
  // which raises it with the same message when it runs the call.
  const size_t argc = size_t(code->argcount), kwonly = size_t(code->kwonlyargcount);
  const size_t nkw = kwnames ? kwnames->items.size() : 0, npos = args.size() - nkw;
  const bool varargs = code->flags & kVarArgs, varkw = code->flags & kVarKw;
  std::vector<VT> locals(code->varnames.size());
  for (size_t i = 0; i < std::min(npos, argc); ++i) locals[i] = args[i];
  if (npos > argc && !varargs) unsupported(BreakReason::python_error, code->name + "() given too many arguments");
  size_t slot = argc + kwonly;
  if (varargs) locals[slot++] = vars::make_tuple(npos > argc ? std::vector<VT>(args.begin() + ptrdiff_t(argc),
                                                                                 args.begin() + ptrdiff_t(npos))
                                                             : std::vector<VT>{});
  VT extra_kw = varkw ? vars::make_const_dict({}, {}) : nullptr;
  for (size_t k = 0; k < nkw; ++k) {
    const std::string& name = kwnames->items[k].as_str();
    size_t p = size_t(code->posonlyargcount);  // positional-only names go to **kwargs (or are an error)
    while (p < argc + kwonly && code->varnames[p] != name) ++p;
    if (p < argc + kwonly) {
      if (locals[p]) unsupported(BreakReason::python_error, code->name + "() got multiple values for '" + name + "'");
      locals[p] = args[npos + k];
    } else if (extra_kw) {
      extra_kw->keys.push_back(Value::str(name));
      extra_kw->items.push_back(args[npos + k]);
    } else {
      unsupported(BreakReason::python_error, code->name + "() got an unexpected keyword argument '" + name + "'");
    }
  }
  if (extra_kw) locals[slot] = extra_kw;
  const size_t first_default = argc - std::min(argc, fn->defaults.size());
  for (size_t i = 0; i < argc; ++i)
    if (!locals[i]) {
      if (i < first_default) unsupported(BreakReason::python_error, code->name + "() missing an argument");
      locals[i] = from_value(fn->defaults[i - first_default]);
    }
  for (size_t i = argc; i < argc + kwonly; ++i)
    if (!locals[i]) {
      const Value* d = (i - argc) < fn->kwdefaults.size() ? &fn->kwdefaults[i - argc] : nullptr;
      if (!d || d->is_null()) unsupported(BreakReason::python_error, code->name + "() missing a keyword argument");
      locals[i] = from_value(*d);
    }

  try {
    InstructionTranslator child(ctx_, Ref<FunctionObj>(fn), std::move(locals), this, fn_vt, std::move(closure));
    child.self_id_ = self_id;
    auto active = ctx_.active_frames.insert(frame_key);
    struct Leave {
      std::multiset<std::pair<const void*, const void*>>& set;
      std::multiset<std::pair<const void*, const void*>>::iterator it;
      ~Leave() { set.erase(it); }
    } leave{ctx_.active_frames, active};
    child.run();
    return child.result();
  } catch (const Unsupported& u) {
    // The outer frame breaks at this call; the callee will run as its own
    // compiled frame and report its own break.
    std::string cause = u.cause.empty() ? break_reason_text(u.reason, u.detail) + " in " + code->qualname : u.cause;
    throw Unsupported{BreakReason::inlined_break, code->qualname, std::move(cause)};
  }
}

// --------------------------------------------------------------- modules --

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

VT InstructionTranslator::leaf_call(const VT& module, const std::vector<VT>& args) {
  auto* m = module->value.as<ModuleObj>();
  // The call_module node for a computed result type: with the default path
  // policy it carries a path link and the module (no O(depth) string).
  auto leaf_node = [&](std::vector<output_graph::Arg> node_args, TensorMeta meta) {
    if (!ctx_.tracer->uses_names())
      return ctx_.out.graph().call_module(ctx_.tracer->path_link_of_module(m), module->value, std::move(node_args),
                                          std::move(meta));
    std::string path = ctx_.tracer->path_of_module(m);
    ctx_.out.graph().set_attr(path, module->value);
    return ctx_.out.graph().call_module(path, std::move(node_args), std::move(meta));
  };
  if (args.size() == 1 && !m->lazy) {
    const VT x = realize(args[0]);
    if (auto meta = builtin_leaf_meta(m, x))
      return vars::make_tensor(leaf_node({output_graph::Arg::of(x->node)}, std::move(*meta)));
  }
  // The leaf's result type: trace the call once into a scratch graph (the
  // leaf's own ops, discarded), over placeholders shaped like the args.
  TraceContext scratch(ctx_.vm);
  InstructionTranslator scratch_tx(scratch, fn_, {}, nullptr);
  std::vector<VT> scratch_args;
  std::vector<output_graph::Arg> node_args;
  for (const VT& a0 : args) {
    VT a = realize(a0);
    if (a->is(VTKind::Tensor)) {
      Tensor meta = output_graph::meta_tensor(a->meta());
      auto src = output_graph::local_source("leaf_arg" + std::to_string(scratch_args.size()), -1);
      scratch_args.push_back(vars::make_tensor(scratch.out.add_input(src, meta), src));
      node_args.push_back(output_graph::Arg::of(a->node));
    } else if (is_constant(a)) {
      scratch_args.push_back(a);
      node_args.push_back(output_graph::Arg::constant(constant_value(a)));
    } else {
      unsupported(BreakReason::module_call, "a leaf module called with " + a->str());
    }
  }
  VT out = scratch_tx.call_module(vars::make_nn_module(module->value, vars::module_qualname(*module), nullptr),
                                  scratch_args, nullptr);
  if (!out->is(VTKind::Tensor)) unsupported(BreakReason::module_call, "a leaf module that does not return a tensor");
  return vars::make_tensor(leaf_node(std::move(node_args), out->meta()));
}

VT InstructionTranslator::call_module(const VT& module0, std::vector<VT> args, const TupleObj* kwnames) {
  auto* m = module0->value.as<ModuleObj>();
  if (ctx_.tracer && !kwnames &&
      ctx_.tracer->is_leaf_module(m, ctx_.tracer->uses_names() ? vars::module_qualname(*module0) : std::string()))
    return leaf_call(module0, args);
  // An unspecialized module stays so only for what is guarded as it is
  // read (hooks, a Sequential's children); initialising a lazy module or
  // running another built-in forward reads its structure.
  const bool unspecialized = module0->is(VTKind::UnspecializedNNModule) && !m->lazy &&
                             m->cls->builtin_kind() == BuiltinModule::Sequential;
  const VT module = unspecialized ? module0 : specialized(module0);
  if (unspecialized && module->source) {
    // The hooks it runs, by identity and in order.
    std::vector<Value> pre, post;
    for (const Hook& h : m->forward_pre_hooks) pre.push_back(h.fn);
    for (const Hook& h : m->forward_hooks) post.push_back(h.fn);
    Guard g;
    g.source = module->source;
    g.kind = GuardKind::ModuleHooks;
    g.expected = make_tuple({make_tuple(std::move(pre)), make_tuple(std::move(post))});
    ctx_.out.guards().add(std::move(g));
  }
  if (m->lazy) {
    // A lazy module initialises itself from its first input, as it would
    // eagerly (the only input it reads is the last dimension's size); then
    // it is traced as what it became. Its version guard is re-taken after.
    VT x = args.empty() ? nullptr : realize(args[0]);
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
      VT last = size_of(x, x->meta().sizes.size() - 1);
      if (last->is(VTKind::SymInt)) specialize(last, "a lazy module's first input sets its size");
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
    ctx_.out.guards().add(std::move(g));
  }
  static const Ref<StrObj> forward = intern("forward");
  const Value* fwd = m->cls->lookup(forward.get());
  if (!fwd) unsupported(BreakReason::module_call, "a module without forward");
  if (fwd->is(Kind::Function) && m->forward_pre_hooks.empty() && m->forward_hooks.empty()) {
    // No hook sees the arguments: forward(self, *args) straight away.
    args.insert(args.begin(), module);
    return inline_call(*fwd, std::move(args), kwnames, nullptr);
  }
  const size_t nkw = kwnames ? kwnames->items.size() : 0;
  std::vector<VT> pos(args.begin(), args.end() - ptrdiff_t(nkw));
  std::vector<VT> kw(args.end() - ptrdiff_t(nkw), args.end());
  for (const Hook& h : m->forward_pre_hooks) {
    if (!h.fn.is(Kind::Function)) unsupported(BreakReason::module_call, "a forward pre-hook that is not a KBC function");
    VT r = inline_call(h.fn, {module, vars::make_tuple(pos)}, nullptr, nullptr);
    if (!(r->is(VTKind::Constant) && r->value.is_none())) pos = r->is(VTKind::Tuple) ? r->items : std::vector<VT>{r};
  }
  VT out;
  if (fwd->is(Kind::Function)) {
    std::vector<VT> full{module};
    full.insert(full.end(), pos.begin(), pos.end());
    full.insert(full.end(), kw.begin(), kw.end());
    out = inline_call(*fwd, std::move(full), kwnames, nullptr);
  } else {
    if (nkw || pos.size() != 1) unsupported(BreakReason::module_call, "built-in module called with these arguments");
    out = builtin_forward(module, pos[0], unspecialized);
  }
  for (const Hook& h : m->forward_hooks) {
    if (!h.fn.is(Kind::Function)) unsupported(BreakReason::module_call, "a forward hook that is not a KBC function");
    VT r = inline_call(h.fn, {module, vars::make_tuple(pos), out}, nullptr, nullptr);
    if (!(r->is(VTKind::Constant) && r->value.is_none())) out = r;
  }
  return out;
}

// The forward of a built-in module class (Linear, ..., Sequential) traced as
// its ops: for a module call, and for `super().forward(x)` in a subclass.
VT InstructionTranslator::builtin_forward(const VT& module, const VT& x, bool unspecialized) {
  auto* m = module->value.as<ModuleObj>();
  VT out;
  switch (m->cls->builtin_kind()) {
    case BuiltinModule::Linear:
      out = tensor_op(OpId::linear, {x, module_getattr(module, "weight"), module_getattr(module, "bias")});
      break;
    case BuiltinModule::ReLU: out = tensor_op(OpId::relu, {x}); break;
    case BuiltinModule::GELU: out = tensor_op(OpId::gelu, {x, module_getattr(module, "approximate")}); break;
    case BuiltinModule::LayerNorm:
      out = tensor_op(OpId::layer_norm, {x, module_getattr(module, "normalized_shape"), module_getattr(module, "weight"),
                                         module_getattr(module, "bias"), module_getattr(module, "eps")});
      break;
    case BuiltinModule::Embedding: {
      // padding_idx (a torch module's attribute) matters to the gradient only.
      const Value* pad = m->attrs.find("padding_idx");
      if (pad && !pad->is_none())
        out = tensor_op(OpId::embedding, {x, module_getattr(module, "weight"), module_getattr(module, "padding_idx")});
      else
        out = tensor_op(OpId::embedding, {x, module_getattr(module, "weight")});
      break;
    }
    case BuiltinModule::Dropout: {
      double p = m->attrs.find("p")->as_number();
      if (!m->training || p == 0) {
        out = x;
      } else if (x->is(VTKind::Tensor) && x->node && x->node->requires_grad) {
        // Recording gradients: the dropout op, which runs as torch's own
        // (the autograd backend), drawing from torch's generator as the
        // eager module does.
        out = tensor_op(OpId::dropout, {x, const_vt(Value::floating(p)), const_vt(Value::boolean(true))});
      } else if (p == 1) {
        out = tensor_op(OpId::mul, {x, const_vt(Value::floating(0.0))});
      } else {
        // The same ops, in the same order, as the eager module: equal random draws.
        if (!x->is(VTKind::Tensor)) unsupported(BreakReason::module_call, "Dropout of a non-tensor");
        std::vector<VT> dims;  // symbolic where x's sizes are
        for (size_t d = 0; d < x->meta().sizes.size(); ++d) dims.push_back(size_of(x, d));
        VT keep = tensor_op(OpId::ge, {tensor_op(OpId::rand, {vars::make_tuple(std::move(dims))}), const_vt(Value::floating(p))});
        out = tensor_op(OpId::mul, {tensor_op(OpId::mul, {x, keep}), const_vt(Value::floating(1.0 / (1.0 - p)))});
      }
      break;
    }
    case BuiltinModule::Sequential: {
      check_structure_unchanged(m, "calling a Sequential");
      if (unspecialized && module->source) {
        // Unrolled over these children: their names in order are guarded,
        // each child by its own source.
        std::vector<Value> names;
        for (const auto& [name, child] : m->modules) names.push_back(Value::object(Kind::Str, name));
        Guard g;
        g.source = module->source;
        g.kind = GuardKind::ModuleChildren;
        g.expected = make_tuple(std::move(names));
        ctx_.out.guards().add(std::move(g));
      }
      out = x;
      // Every child is read, None ones too: unspecialized, that read is
      // what guards a None slot against becoming a module.
      for (const auto& [name, child] : m->modules) {
        VT c = get_attr(module, name->s);
        if (!(c->is(VTKind::Constant) && c->value.is_none())) out = call_module(c, {out}, nullptr);
      }
      break;
    }
    default: unsupported(BreakReason::module_call, "calling a " + m->class_name());
  }
  return out;
}

VT InstructionTranslator::module_getattr(const VT& module, const std::string& name) {
  auto overlay = ctx_.attr_overlay.find({module->value.obj(), name});
  // A null entry: deleted earlier in the trace (the class and __getattr__
  // may still answer).
  const bool deleted = overlay != ctx_.attr_overlay.end() && !overlay->second;
  if (overlay != ctx_.attr_overlay.end() && !deleted) return overlay->second;
  auto* m = module->value.as<ModuleObj>();
  auto key = intern(name);
  auto source = module->source ? attr_source(module->source, name) : nullptr;
  // _parameters, _modules, _buffers first (DESIGN.md); their contents are
  // covered by the module's version guard.
  if (deleted) {
  } else if (const Value* v = m->params.find(key.get())) {
    return vars::register_attr_or_module(ctx_.out, *v, module, name, source);
  } else if (const Value* v = m->modules.find(key.get())) {
    return vars::register_attr_or_module(ctx_.out, *v, module, name, source);
  } else if (const Value* v = m->buffers.find(key.get())) {
    return vars::register_attr_or_module(ctx_.out, *v, module, name, source);
  } else if (const Value* a = m->attrs.find(key.get())) {
    if (a->is(Kind::Tensor) || vars::grad_tensor_view(*a).defined())
      return vars::register_attr_or_module(ctx_.out, *a, module, name, source);
    return source ? ctx_.builder.wrap(*a, source) : from_value(*a);
  }
  if (name == "training") return const_vt(Value::boolean(m->training));
  // Class attributes bound as Python binds them (a property's getter is
  // inlined on this module: no instance entry can shadow it, module_setattr
  // calls its setter instead).
  if (const Value* c = m->cls->lookup(key.get())) return bind_class_attr_traced(*c, module, m->cls.get(), name);
  if (name == "__class__") return from_value(class_value(m->cls.get()));
  static const Ref<StrObj> getattr_name = intern("__getattr__");
  if (const Value* custom = m->cls->lookup(getattr_name.get()); custom && custom->is(Kind::Function))
    return inline_call(*custom, {module, const_vt(Value::str(name))}, nullptr, nullptr);
  // A traced AttributeError: the graph ends here and the VM raises the
  // program's own error ("'Block' object has no attribute 'foo'") when the
  // residual code runs this instruction; the reason adds where the module
  // sits in the traced tree.
  const std::string path = vars::module_qualname(*module);
  unsupported(BreakReason::attribute_error, "'" + m->class_name() + "' object" +
                                                (path.empty() ? "" : " (at " + path + ")") + " has no attribute '" +
                                                name + "'");
}

VT InstructionTranslator::specialized(const VT& module) {
  if (!module->is(VTKind::UnspecializedNNModule)) return module;
  if (!module->realized) {
    if (module->source) {
      Guard g;
      g.source = module->source;
      g.kind = GuardKind::ModuleVersion;
      g.expected = module->value;
      g.version = module->value.as<ModuleObj>()->version;
      ctx_.out.guards().add(std::move(g));
    }
    VT twin = vars::make_nn_module(module->value, module->module_path, module->source);
    twin->path_parent = module->path_parent;
    module->realized = twin;
  }
  return module->realized;
}

VT InstructionTranslator::unspecialized_getattr(const VT& module, const std::string& name) {
  auto overlay = ctx_.attr_overlay.find({module->value.obj(), name});
  if (overlay != ctx_.attr_overlay.end()) {
    if (overlay->second) return overlay->second;
    return module_getattr(specialized(module), name);  // deleted in this trace
  }
  if (module->source)
    if (const Value* v = module_instance_slot(module->value.as<ModuleObj>(), intern(name).get())) {
      // A plain object's attribute, guarded by what it is at its own
      // source (a submodule: identity and version; a tensor: an input).
      VT vt = ctx_.builder.wrap(*v, attr_source(module->source, name));
      if (vt->is_module()) {
        vt->path_parent = module;
        vt->module_path = name;
      }
      return vt;
    }
  // training, the class, __getattr__ or nothing: what answers depends on
  // the instance dicts *not* holding the name, which the version guards.
  return module_getattr(specialized(module), name);
}

void InstructionTranslator::check_structure_unchanged(const ModuleObj* m, const std::string& what) {
  for (auto it = ctx_.attr_overlay.lower_bound({m, std::string()});
       it != ctx_.attr_overlay.end() && it->first.first == m; ++it) {
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

// ------------------------------------------------------------ attributes --

VT InstructionTranslator::get_attr(const VT& obj, const std::string& name) {
  switch (obj->kind) {
    case VTKind::NNModule: return module_getattr(obj, name);
    case VTKind::UnspecializedNNModule: return unspecialized_getattr(obj, name);
    case VTKind::Tensor: {
      const auto& meta = obj->meta();
      if (name == "shape") {
        std::vector<VT> dims;
        for (size_t d = 0; d < meta.sizes.size(); ++d) dims.push_back(size_of(obj, d));
        return vars::make_tuple(std::move(dims));
      }
      if (name == "dtype") return const_vt(intern_value(dtype_name(meta.dtype)));
      if (name == "ndim") return const_vt(Value::integer(int64_t(meta.sizes.size())));
      if (name == "device") return const_vt(intern_value("cpu"));  // as runtime tensor_attr
      if (name == "requires_grad" || name == "is_cuda") return const_vt(Value::boolean(false));
      if (name == "T") {
        std::vector<Value> dims;
        for (int64_t d = int64_t(meta.sizes.size()) - 1; d >= 0; --d) dims.push_back(Value::integer(d));
        return tensor_op(OpId::permute, {obj, const_vt(make_tuple(std::move(dims)))});
      }
      if (Value m = host_tensor_method(intern(name).get()); !m.is_null()) return vars::make_user_method(m, obj);
      if (const OpDef* op = find_op(name); op && op->arity != 0)
        return vars::make_user_method(op_builtin(int(op->id)), obj);
      Value m = type_method(Kind::Tensor, intern(name).get());
      if (!m.is_null()) return vars::make_user_method(m, obj);
      // The names above are all a tensor has (runtime/value_access.cpp):
      // the VM raises here.
      unsupported(BreakReason::attribute_error, "'Tensor' object has no attribute '" + name + "'");
    }
    case VTKind::List:
    case VTKind::Tuple:
    case VTKind::ConstDict: {
      Kind k = obj->is(VTKind::List) ? Kind::List : obj->is(VTKind::Tuple) ? Kind::Tuple : Kind::Dict;
      Value m = type_method(k, intern(name).get());
      if (!m.is_null()) return vars::make_user_method(m, obj);
      unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
    }
    case VTKind::Constant: {
      Value m = type_method(obj->value.kind(), intern(name).get());
      if (!m.is_null()) return vars::make_user_method(m, obj);
      Value v = get_attr_or_null(ctx_.vm, obj->value, intern(name).get());
      if (v.is_null()) unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
      return from_value(v);
    }
    case VTKind::UserFunction:
    case VTKind::Builtin: {
      Value v = get_attr_or_null(ctx_.vm, obj->value, intern(name).get());
      if (v.is_null()) unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
      return from_value(v);
    }
    case VTKind::Opaque:
      if (obj->value.is(Kind::Class)) return class_getattr(obj, name);
      if (obj->value.is(Kind::Super) && obj->self) return super_getattr(obj, name);
      // A foreign namespace (a Python module: kiln.softmax, math.pi): its
      // attribute is read now and guarded at its own source, like a
      // module dict entry.
      // A plain object's field (a dataclass or SimpleNamespace config): the
      // same, when reading it runs no user code.
      if (obj->value.is(Kind::Foreign) && obj->source) {
        const auto* f = obj->value.as<ForeignObj>();
        if (f->vt->namespace_find) {
          if (const Value* v = f->vt->namespace_find(f->handle, intern(name).get()))
            return ctx_.builder.wrap(*v, attr_source(obj->source, name));
        } else if (Value v; f->vt->plain_attr && f->vt->plain_attr(f->handle, name, v)) {
          return ctx_.builder.wrap(v, attr_source(obj->source, name));
        }
      }
      unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
    default: unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
  }
}

}  // namespace kiln::interpreter

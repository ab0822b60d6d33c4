// Calling and attribute access during a trace: call_function's dispatch by
// callee kind, inline_call_ for KBC functions and methods, and attribute
// reads by tracker kind (a module's call and attributes: nn_module.h;
// operators, items and unpacking: translator_operators.cpp).
#include "interpreter/frame_cache.h"
#include "interpreter/instruction_translator.h"
#include "interpreter/nn_module.h"
#include "interpreter/stack_guard.h"

#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/descriptors.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/name_map.h"
#include "variables/wrap.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
using output_graph::attr_source;
namespace vars = kiln::variables;

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
  const bool frozen = f->vt->frozen_result && f->vt->frozen_result(f->handle);
  std::vector<Value> values;
  for (VT& a : args) {
    a = realize(a);
    if (is_constant(a)) {
      values.push_back(constant_value(a));
    } else if (frozen && a->is(VTKind::UserFunction) && a->source && a->value.is(Kind::Function)) {
      values.push_back(a->value);  // the program's function (its guards pin it)
    } else if (frozen && a->is(VTKind::UserMethod) && a->value.is(Kind::Function) && a->self &&
               (a->self->is_module() || (a->self->is(VTKind::Opaque) && a->self->source))) {
      auto bm = make_ref<BoundMethodObj>();  // CPython's bound method over the program's object
      bm->func = a->value;
      bm->self = a->self->value;
      values.push_back(Value::object(Kind::BoundMethod, bm));
    } else {
      return nullptr;
    }
  }
  try {
    Value r = ctx_.vm.call(fn, CallArgs{values.data(), values.size(), kwnames});
    // A null-context manager (torch.no_grad()) is as good as a literal: an
    // object whose only use is a `with` traced as doing nothing; so is an
    // immutable answer (inspect.signature's).
    const bool null_context = r.is(Kind::Foreign) && r.as<ForeignObj>()->vt->null_context &&
                              r.as<ForeignObj>()->vt->null_context(r.as<ForeignObj>()->handle);
    return vars::is_literal(r) || null_context || frozen ? const_vt(std::move(r)) : nullptr;
  } catch (const Error&) {
    return nullptr;
  }
}

// ref() of a weakref.ref the guards pin (its source's identity guard): its
// target cannot change, only die, so the call is answered now. What the
// trace can stand for is a module's tensor it has already read (torch's
// RNNs: `ref() is not weight` after `weight = getattr(self, name)`): the
// same get_attr, which the module's version guard keeps alive and the
// same object. A dead ref is None for good. Anything else: null (the call
// breaks as a foreign call).
VT InstructionTranslator::call_weakref(const VT& callee, const std::vector<VT>& args, const TupleObj* kwnames) {
  const auto* f = callee->value.as<ForeignObj>();
  Value target;
  if (!args.empty() || kwnames || !callee->source || !f->vt->weakref_target || !f->vt->weakref_target(f->handle, target))
    return nullptr;
  if (target.is_none()) return const_vt(Value::none());
  Value tensor = target;
  if (runtime::Tensor view = vars::grad_tensor_view(target); view.defined()) tensor = Value::tensor(view);
  if (!tensor.is(Kind::Tensor)) return nullptr;
  output_graph::Node* n = ctx_.out.registered_attr(tensor);
  return n ? vars::make_tensor(n) : nullptr;
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
    case VTKind::UnspecializedNNModule: return nn_module::call_function(*this, callee, std::move(args), kwnames);
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
        if (VT target = call_weakref(callee, args, kwnames)) return target;
        if (VT method = call_python_method(callee, args, kwnames)) return method;  // translator_user_defined.cpp
        // (before construct_object: torch.autocast(enabled=False) folds to a null context)
        if (VT folded = fold_pure_foreign_call(callee->value, args, kwnames)) return folded;
        if (VT made = construct_object(callee, args, kwnames)) return made;
        if (VT made = call_host_new(callee, args, kwnames)) return made;  // object.__new__(cls)
        if (VT r = call_partial(callee, args, kwnames)) return r;
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
  // A bounded recursion is inlined (transformers' configs walk their nested
  // dicts with one; a class's special methods re-enter themselves by design:
  // a __getattr__ whose property reads another attribute, a ModelOutput's
  // __getitem__(0) reading self[key]). Deeper than kMaxRecursiveInlines
  // levels is recursion kiln leaves to the frame's own runner: the frame
  // that called it first breaks at that call (the catch below).
  // The inlined levels take no frame when the graph runs; the cache entry
  // records how deep its trace went (TraceContext::max_inline_depth), and
  // a call without that much room below the recursion limit runs the frame
  // itself (frame_cache.h: room_for), so RecursionError is raised where
  // eager raises it.
  const void* self_id = (!args.empty() && args[0] && args[0]->is_module()) ? args[0]->value.obj() : nullptr;
  const std::pair<const void*, const void*> frame_key{code, self_id};
  if (ctx_.active_frames.count(frame_key) >= kMaxRecursiveInlines) {
    Unsupported u{BreakReason::recursion, code->qualname, {}};
    u.recursive_code = code;
    throw u;
  }
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

  if (code->flags & kGenerator) return make_generator(fn, std::move(locals), fn_vt, std::move(closure), self_id);
  try {
    InstructionTranslator child(ctx_, Ref<FunctionObj>(fn), std::move(locals), this, fn_vt, std::move(closure));
    child.self_id_ = self_id;
    auto active = ctx_.active_frames.insert(frame_key);
    struct Leave {
      std::multiset<std::pair<const void*, const void*>>& set;
      std::multiset<std::pair<const void*, const void*>>::iterator it;
      ~Leave() { set.erase(it); }
    } leave{ctx_.active_frames, active};
    // A generator expression is made its items at once (kiln/_frontend.py):
    // what CPython's lazy generator gives only when making them changes
    // nothing but its own list (one append per item). A body with any other
    // effect (an append to an outer list, an attribute store) breaks here,
    // and CPython runs the generator lazily, interleaved with its consumer.
    const bool genexpr = code->qualname.ends_with("<genexpr>");
    const size_t effects_before = ctx_.side_effects.effect_count();
    child.run();
    VT r = child.result();
    if (genexpr) {
      VT it = realize(r);
      const size_t n = !it->is(VTKind::Iterator) ? 0 : it->iterated ? it->iterated->items.size() : it->items.size();
      if (!it->is(VTKind::Iterator) || ctx_.side_effects.effect_count() - effects_before != n)
        unsupported(BreakReason::untraced_object, "a generator expression whose body has effects (CPython runs it lazily)");
    }
    return r;
  } catch (const Unsupported& u) {
    // The embedder's own code is never compiled as its own frame: its
    // break is this call's.
    if (ctx_.python_frames && is_own_code(code->filename)) throw;
    // A recursion too deep to inline unwinds as itself through its own
    // levels: the frame that called it first breaks at that call, and the
    // frame's runner runs the recursion whole.
    if (u.reason == BreakReason::recursion && u.recursive_code == code) throw;
    // The outer frame breaks at this call; the callee will run as its own
    // compiled frame and report its own break.
    std::string cause = u.cause.empty() ? break_reason_text(u.reason, u.detail) + " in " + code->qualname : u.cause;
    throw Unsupported{BreakReason::inlined_break, code->qualname, std::move(cause), -1, u.innermost(), u.where,
                      u.missing_attribute};
  }
}

// ------------------------------------------------------------ attributes --

VT InstructionTranslator::get_attr(const VT& obj, const std::string& name) {
  switch (obj->kind) {
    case VTKind::NNModule:
    case VTKind::UnspecializedNNModule: return nn_module::var_getattr(*this, obj, name);
    case VTKind::Tensor: {
      const auto& meta = obj->meta();
      if (name == "shape") {
        std::vector<VT> dims;
        for (size_t d = 0; d < meta.sizes.size(); ++d) dims.push_back(size_of(obj, d));
        return vars::make_tuple(std::move(dims));
      }
      if (name == "dtype" || name == "device") {
        VT c = const_vt(intern_value(name == "dtype" ? dtype_name(meta.dtype) : "cpu"));  // as runtime tensor_attr
        c->self = obj;
        c->module_path = name;
        return c;
      }
      if (name == "ndim") return const_vt(Value::integer(int64_t(meta.sizes.size())));
      if (name == "requires_grad") {
        // torch's answer: a tensor the graph records gradients for does; a
        // result of the graph otherwise does not. Under grad mode an input
        // or parameter that requires grad is marked so (builder, wrap);
        // under no_grad its own flag is only the real tensor's (kiln's
        // tensor has none): on the frames path of a torch program CPython
        // reads it. A frame of kiln's own tensors (random_is_hosts off: no
        // torch tensor or module came in) has no such flag to read.
        const bool leaf = !obj->node || obj->node->op == output_graph::NodeOp::Placeholder ||
                          obj->node->op == output_graph::NodeOp::GetAttr;
        if (obj->node && obj->node->requires_grad) return const_vt(Value::boolean(true));
        if (leaf && ctx_.python_frames && ctx_.random_is_hosts && !runtime::grad_mode_enabled())
          unsupported(BreakReason::untraced_object, "reading requires_grad of a tensor from outside the graph");
        return const_vt(Value::boolean(false));
      }
      if (name == "is_cuda") return const_vt(Value::boolean(false));
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
      // The names above are all a tensor has (runtime/semantics/value_access.cpp):
      // the VM raises here.
      unsupported(BreakReason::attribute_error, "'Tensor' object has no attribute '" + name + "'");
    }
    case VTKind::List:
    case VTKind::Tuple:
    case VTKind::ConstDict: {
      if (is_module_slice(obj)) unsupported(BreakReason::untraced_object, "attribute '" + name + "' of a slice of a module container");
      Kind k = obj->is(VTKind::List) ? Kind::List : obj->is(VTKind::Tuple) ? Kind::Tuple : Kind::Dict;
      Value m = type_method(k, intern(name).get());
      if (!m.is_null()) return vars::make_user_method(m, obj);
      unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
    }
    case VTKind::Constant: {
      // A tensor's device (kiln's "cpu", standing for torch's device
      // object): its type and index, as torch.device answers them.
      if (obj->self && obj->module_path == "device" && (name == "type" || name == "index"))
        return const_vt(name == "type" ? intern_value("cpu") : Value::none());
      Value m = type_method(obj->value.kind(), intern(name).get());
      if (!m.is_null()) return vars::make_user_method(m, obj);
      Value v = get_attr_or_null(ctx_.vm, obj->value, intern(name).get());
      if (v.is_null()) unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
      // A constant Python object (an immutable answer folded at trace time,
      // fold_pure_foreign_call): what it holds is constant too.
      if (obj->value.is(Kind::Foreign) && v.is(Kind::Foreign)) return const_vt(std::move(v));
      return from_value(v);
    }
    case VTKind::UserFunction:
    case VTKind::Builtin: {
      if (ctx_.python_frames && obj->kind == VTKind::UserFunction) {
        // The program's function, not kiln's translation of it, answers
        // (its __module__, __name__, a __dict__ entry), guarded at its
        // source as the guards re-read it.
        Value v;
        if (obj->source && obj->value.is(Kind::Function) &&
            runtime::host_function_attr(*obj->value.as<FunctionObj>(), name, v))
          return ctx_.builder.wrap(v, attr_source(obj->source, name));
        unsupported(BreakReason::untraced_object, "attribute '" + name + "' of the Python function " + obj->str() +
                                                      " (CPython reads the function's own)");
      }
      Value v = get_attr_or_null(ctx_.vm, obj->value, intern(name).get());
      if (v.is_null()) unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
      return from_value(v);
    }
    case VTKind::Opaque:
      if (obj->value.is(Kind::Class)) return class_getattr(obj, name);
      if (obj->value.is(Kind::Super) && obj->self) return super_getattr(obj, name);
      if (obj->host_super) return host_super_getattr(obj, name);
      // A foreign namespace (a Python module: kiln.softmax, math.pi): its
      // attribute is read now and guarded at its own source, like a
      // module dict entry.
      // A plain object's field (a dataclass or SimpleNamespace config): the
      // same, when reading it runs no user code.
      if (obj->made) {  // made in this trace: its own trackers, then its class
        if (VT v = user_object_getattr(obj, name)) return v;
      } else if (obj->value.is(Kind::Foreign) && obj->source) {
        const auto* f = obj->value.as<ForeignObj>();
        if (f->vt->namespace_find) {
          if (const Value* v = f->vt->namespace_find(f->handle, intern(name).get()))
            return ctx_.builder.wrap(*v, attr_source(obj->source, name));
        } else if (ctx_.attr_overlay.count({object_identity(obj->value), name})) {
          // Stored earlier in this trace: read as the class's lookup reads it.
          if (VT v = user_object_getattr(obj, name)) return v;
        } else if (Value v; f->vt->plain_attr && f->vt->plain_attr(f->handle, name, v)) {
          VT read = ctx_.builder.wrap(v, attr_source(obj->source, name));
          // A classmethod stays the bound method it is (op_LOAD_METHOD then
          // keeps it whole, and a residual reloads it from its source: the
          // program's own, not kiln's stand-in for its function).
          const bool classmethod = v.is(Kind::BoundMethod) && v.as<BoundMethodObj>()->classmethod;
          return classmethod ? read : bound_to_tracker(read, obj);
        } else if (VT v = user_object_getattr(obj, name)) {
          return v;
        }
      }
      unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
    default: unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str());
  }
}

namespace {
std::string& own_code_dir() {
  static auto* dir = new std::string();
  return *dir;
}
}  // namespace

void set_own_code_dir(std::string dir) { own_code_dir() = std::move(dir); }

bool is_own_code(const std::string& filename) {
  const std::string& dir = own_code_dir();
  return !dir.empty() && filename.compare(0, dir.size(), dir) == 0;
}

}  // namespace kiln::interpreter

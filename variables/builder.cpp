#include "variables/builder.h"

#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/super.h"

#include <algorithm>

#include "runtime/nn/module.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::variables {

using output_graph::Guard;
using output_graph::GuardKind;
using runtime::Kind;

void SideEffects::mark_mutated(const VT& container) {
  ++container_writes;
  if (!container->source || container->mutated) return;
  container->mutated = true;
  mutated.push_back(container);
}

bool traced_unspecialized(const runtime::ModuleObj* m) {
  if (m->forward_pre_hooks.empty() && m->forward_hooks.empty()) return false;
  if (m->cls->builtin_kind() != runtime::BuiltinModule::Sequential) return false;
  static const runtime::Ref<runtime::StrObj> forward = runtime::intern("forward");
  const Value* fwd = m->cls->lookup(forward.get());
  return fwd && fwd->is(Kind::Builtin);  // a subclass's own forward is inlined as written
}

VT VariableBuilder::realize(const VT& vt) {
  if (!vt || !vt->is(VTKind::Lazy)) return vt;
  if (!vt->realized) vt->realized = wrap(vt->value, vt->source);
  return vt->realized;
}

VT VariableBuilder::wrap(const Value& v, const SourceRef& source) {
  if (v.is(Kind::List) || v.is(Kind::Dict) || v.is(Kind::Set) || v.is(Kind::Foreign)) {
    auto known = containers_.find(runtime::object_identity(v));
    if (known != containers_.end()) {
      aliasing_guard(source, known->second.alias_class);
      return known->second.vt;
    }
  }
  auto guard = [&](GuardKind k) {
    Guard g;
    g.source = source;
    g.kind = k;
    g.expected = v;
    return g;
  };
  switch (v.kind()) {
    case Kind::Tensor: {
      runtime::Tensor t = v.as_tensor();
      Guard g = guard(GuardKind::TensorMatch);
      g.tensor = output_graph::meta_of(t);
      if (!never_dynamic) {
        std::vector<bool> dyn(size_t(t.dim()), all_dynamic);
        auto it = dynamic_dims.find(source->str());
        for (size_t d = 0; d < dyn.size(); ++d) {
          if (it != dynamic_dims.end() && d < it->second.size() && it->second[d]) dyn[d] = true;
          if (d < 64 && (t.impl()->marked_dynamic >> d) & 1) dyn[d] = true;
          // Sizes 0 and 1 specialize, as in torch: a symbol is at least 2,
          // so it never broadcasts and is never empty (output_graph/symbolic_shapes.h).
          if (t.sizes()[d] < 2) dyn[d] = false;
        }
        if (std::find(dyn.begin(), dyn.end(), true) != dyn.end()) g.tensor.dynamic = dyn;
      }
      g.expected = Value();  // never keep the input tensor alive through a guard
      const std::vector<bool> dynamic = g.tensor.dynamic;
      out_.guards().add(std::move(g));
      return make_tensor(out_.add_input(source, t, dynamic), source);
    }
    case Kind::None:
    case Kind::Bool:
    case Kind::Int:
    case Kind::Float:
    case Kind::Str:
      add_guard(source, GuardKind::ConstantMatch, v);
      return make_constant(v, source);
    case Kind::Tuple: return wrap_sequence(v, v.as<runtime::TupleObj>()->items, Kind::Tuple, source);
    case Kind::List:
      return remember_container(v, wrap_sequence(v, v.as<runtime::ListObj>()->items, Kind::List, source), source);
    case Kind::Dict: {
      std::vector<std::pair<Value, Value>> entries(v.as<runtime::DictObj>()->entries.begin(),
                                                   v.as<runtime::DictObj>()->entries.end());
      return remember_container(v, wrap_dict(v, entries, source), source);
    }
    case Kind::Module: {
      add_guard(source, GuardKind::IdMatch, v);
      // Parameters are named by their path from here: a module reached as
      // G['model'] or L['net'] is the root "model." / "net."; `self` is the
      // root itself.
      std::string path;
      if ((source->kind == output_graph::SourceKind::Local || source->kind == output_graph::SourceKind::Global) &&
          source->name != "self")
        path = source->name;
      if (traced_unspecialized(v.as<runtime::ModuleObj>())) return make_unspecialized_nn_module(v, path, source);
      Guard vg = guard(GuardKind::ModuleVersion);
      vg.version = v.as<runtime::ModuleObj>()->version;
      out_.guards().add(std::move(vg));
      return make_nn_module(v, path, source);
    }
    case Kind::Function:
      add_guard(source, GuardKind::IdMatch, v);
      return make_user_function(v, source);
    case Kind::Builtin:
      add_guard(source, GuardKind::IdMatch, v);
      return make_builtin(v, source);
    case Kind::BoundMethod: {
      // A new method object per call (a resume function binds it anew):
      // guarded by what it holds, the function's identity and the object.
      // (A builtin: dict.get read through a dict subclass, foreign.cpp.)
      const auto* bm = v.as<runtime::BoundMethodObj>();
      if (!bm->func.is(Kind::Function) && !bm->func.is(Kind::Builtin)) {
        add_guard(source, GuardKind::IdMatch, v);
        return make_opaque(v, source);
      }
      add_guard(source, GuardKind::TypeMatch, v);
      add_guard(output_graph::attr_source(source, "__func__"), GuardKind::IdMatch, bm->func);
      VT method = make_user_method(bm->func, wrap(bm->self, output_graph::attr_source(source, "__self__")));
      method->source = source;
      return method;
    }
    case Kind::Range:
    case Kind::Slice:
      add_guard(source, GuardKind::ConstantMatch, v);
      return make_constant(v, source);
    case Kind::Set:
    case Kind::FrozenSet: {
      // Guarded by contents and table (guard_tree.cpp), against an exact
      // snapshot: the caller may mutate its set between calls. The trace
      // only reads it (a mutation breaks).
      add_guard(source, GuardKind::ConstantMatch, runtime::set_clone(v, v.is(Kind::FrozenSet)));
      VT set = make_constant(v, source);
      return v.is(Kind::Set) ? remember_container(v, set, source) : set;
    }
    case Kind::Super: {
      // A super object (one crossed a graph break as a live local): any
      // super of the same class over the same object traces the same, so it
      // is guarded by what it holds, not by its identity (each call makes a
      // new one). An unbound super(C) holds nothing to trace through.
      const auto* sup = v.as<runtime::SuperObj>();
      if (sup->obj.is_null()) {
        add_guard(source, GuardKind::IdMatch, v);
        return make_opaque(v, source);
      }
      add_guard(source, GuardKind::TypeMatch, v);
      VT vt = make_opaque(v, source);
      vt->self = wrap(sup->obj, output_graph::attr_source(source, "__self__"));
      vt->items = {wrap(sup->type, output_graph::attr_source(source, "__thisclass__"))};
      return vt;
    }
    case Kind::Foreign:
      if (VT t = wrap_grad_tensor(v, source)) return t;
      // The caller's own list, dict or set (never copied in): traced like a
      // native one, read through the foreign seam, guarded the same way;
      // mutations are replayed on the object itself after the graph.
      switch (runtime::foreign_container(v)) {
        case Kind::List:
          return remember_container(v, wrap_sequence(v, runtime::to_vector(v), Kind::List, source), source);
        case Kind::Dict: {
          std::vector<std::pair<Value, Value>> entries;
          for (const Value& k : runtime::to_vector(v)) entries.emplace_back(k, runtime::get_item(v, k));
          return remember_container(v, wrap_dict(v, entries, source), source);
        }
        case Kind::Set: {
          // Traced as a snapshot with the set's own table. Without one (an
          // element kiln hashes otherwise than Python: a tensor, an object),
          // the set stays opaque and the VM iterates it in Python's order.
          Value snapshot = runtime::exact_set_snapshot(v);
          if (snapshot.is_null()) break;
          return remember_container(v, wrap_set(snapshot, source), source);
        }
        default: break;
      }
      [[fallthrough]];
    default:
      add_guard(source, GuardKind::IdMatch, v);
      return make_opaque(v, source);
  }
}

// An input that is the embedder's tensor requiring grad while grad mode is
// on (a torch tensor with requires_grad): traced as a tensor over the
// metadata of its kiln view, a placeholder that records gradients, so the
// graph runs through the embedder's autograd (OutputGraph). Its guard holds
// only while it is still such a tensor with the traced layout, so the
// same call under no_grad (a plain kiln tensor then) selects another entry.
// Never dynamic: the guard reads no symbols from a foreign object.
VT VariableBuilder::wrap_grad_tensor(const Value& v, const SourceRef& source) {
  const auto* f = v.as<runtime::ForeignObj>();
  if (!f->vt->grad_tensor || !runtime::grad_mode_enabled()) return nullptr;
  const runtime::Tensor t = f->vt->grad_tensor(f->handle);
  if (!t.defined()) return nullptr;
  Guard g;
  g.source = source;
  g.kind = GuardKind::GradTensorMatch;
  g.tensor = output_graph::meta_of(t);
  out_.guards().add(std::move(g));
  out_.guards().require_grad_mode(true);
  output_graph::Node* node = out_.add_input(source, t, {});
  out_.mark_requires_grad(node, "input " + source->str() + " requires grad");
  return make_tensor(node, source);
}

VT VariableBuilder::remember_container(const Value& v, VT vt, const SourceRef& source) {
  // Opaque: its identity is guarded. A set (a Constant tracker) is one
  // tracker per object too: `a = s` then `a is s` after a break.
  const bool set = vt->is(VTKind::Constant) && vt->value.is(Kind::Set);
  if (!vt->is(VTKind::List) && !vt->is(VTKind::ConstDict) && !set) return vt;
  const int64_t alias_class = int64_t(containers_.size());
  containers_.emplace(runtime::object_identity(v), Container{vt, alias_class});
  aliasing_guard(source, alias_class);
  return vt;
}

void VariableBuilder::aliasing_guard(const SourceRef& source, int64_t alias_class) {
  add_guard(source, GuardKind::Aliasing, Value(), alias_class);
}

void VariableBuilder::add_guard(const SourceRef& source, GuardKind kind, Value expected, int64_t length) {
  Guard g;
  g.source = source;
  g.kind = kind;
  g.expected = std::move(expected);
  g.length = length;
  out_.guards().add(std::move(g));
}

// A list or tuple `v` (native, or a caller's Python list) whose items are
// `items`: a type and a length guard, items wrapped lazily at their index.
VT VariableBuilder::wrap_sequence(const Value& v, const std::vector<Value>& items, Kind kind, const SourceRef& source) {
  add_guard(source, GuardKind::TypeMatch, kind == Kind::Tuple ? runtime::make_tuple({}) : runtime::make_list({}));
  add_guard(source, GuardKind::Length, Value(), int64_t(items.size()));
  std::vector<VT> wrapped;
  wrapped.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    wrapped.push_back(make_lazy(items[i], output_graph::item_source(source, Value::integer(int64_t(i)))));
  if (kind == Kind::Tuple) return make_tuple(std::move(wrapped), source);
  VT list = make_list(std::move(wrapped), source);
  list->value = v;  // identity, for residual code that must hand back the same list
  return list;
}

VT VariableBuilder::wrap_dict(const Value& v, const std::vector<std::pair<Value, Value>>& entries,
                              const SourceRef& source) {
  std::vector<Value> keys;
  std::vector<VT> values;
  for (const auto& [k, val] : entries) {
    if (!is_literal(k)) {  // non-constant keys: not traced into
      add_guard(source, GuardKind::IdMatch, v);
      return make_opaque(v, source);
    }
    keys.push_back(k);
    values.push_back(make_lazy(val, output_graph::item_source(source, k)));
  }
  add_guard(source, GuardKind::TypeMatch, runtime::make_dict());
  // Same length, and the same keys in the same order: the trace answers
  // `k in d`, len(d) and iteration from them (values are guarded by their
  // Item sources when realized). Dynamo's DICT_KEYS.
  add_guard(source, GuardKind::Length, Value(), int64_t(keys.size()));
  add_guard(source, GuardKind::DictKeys, runtime::make_tuple(keys));
  VT dict = make_const_dict(std::move(keys), std::move(values), source);
  dict->value = v;
  return dict;
}

// The caller's Python set: guarded by contents against a snapshot, traced as
// that snapshot (a mutation of it breaks, as for a native set). The tracker's
// source makes residual code hand back the caller's own object.
VT VariableBuilder::wrap_set(const Value& snapshot, const SourceRef& source) {
  add_guard(source, GuardKind::ConstantMatch, snapshot);
  return make_constant(runtime::set_clone(snapshot, false), source);
}

}  // namespace kiln::variables

#include "interpreter/guard_tree.h"

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <unordered_map>

#include "runtime/nn/module.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/super.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/name_map.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
using output_graph::Guard;
using output_graph::GuardKind;
using output_graph::SourceKind;
using output_graph::SourceRef;

// strides == contiguous_strides(sizes), without making that vector.
static bool has_contiguous_strides(const Shape& sizes, const Shape& strides) {
  if (strides.size() != sizes.size()) return false;
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (strides[i] != stride) return false;
    stride *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return true;
}

// Bit d: dim d of a TensorMatch takes any size (dims past 63 stay exact:
// stricter, so at worst a recompile).
static uint64_t dynamic_mask(const std::vector<bool>& dynamic) {
  uint64_t mask = 0;
  for (size_t d = 0; d < dynamic.size() && d < 64; ++d)
    if (dynamic[d]) mask |= uint64_t(1) << d;
  return mask;
}

// A tensor against a TensorMatch's dtype and layout: the static sizes
// equal; the strides exact, or, with a dynamic dim (whose size varies, so
// its strides do too), in the traced layout class: contiguous, or exactly
// the traced strides. Checked in place: this runs per tensor per call.
static bool layout_matches(const TensorImpl& t, DType dtype, const Shape& sizes, const Shape& strides,
                           uint64_t dynamic, bool contiguous) {
  if (t.dtype != dtype) return false;
  if (!dynamic) return t.sizes == sizes && t.strides == strides;
  if (t.sizes.size() != sizes.size()) return false;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (!((dynamic >> d) & 1) && t.sizes[d] != sizes[d]) return false;
  return contiguous ? has_contiguous_strides(t.sizes, t.strides) : t.strides == strides;
}

GuardTree::GuardTree(const output_graph::GuardSet& set) {
  std::unordered_map<const output_graph::Source*, int> index;
  // Parents first: sort sources by depth, add missing bases on the way.
  std::vector<const Guard*> guards;
  for (const Guard& g : set.guards()) guards.push_back(&g);
  std::stable_sort(guards.begin(), guards.end(),
                   [](const Guard* a, const Guard* b) { return a->source->depth < b->source->depth; });
  auto accessor_of = [&](auto& self, const SourceRef& s) -> int {
    auto it = index.find(s.get());
    if (it != index.end()) return it->second;
    int parent = s->base ? self(self, s->base) : -1;
    accessors_.push_back({s, parent, {}});
    index.emplace(s.get(), int(accessors_.size() - 1));
    return int(accessors_.size() - 1);
  };
  for (const Guard* g : guards) {
    Accessor& a = accessors_[size_t(accessor_of(accessor_of, g->source))];
    a.guards.push_back(*g);
    ++nguards_;
  }
  // Split off the parameter tensor guards (dynamic dims as a mask).
  kept_guards_.reserve(accessors_.size());  // pointers into it are taken below
  std::vector<Accessor> rest;
  std::vector<int> remap(accessors_.size(), -1);
  // Which accessors are a parent, in one pass (asking each accessor of
  // every other was quadratic in a deep module chain's sources).
  std::vector<char> has_child(accessors_.size(), 0);
  for (const Accessor& b : accessors_)
    if (b.parent >= 0) has_child[size_t(b.parent)] = 1;
  for (size_t i = 0; i < accessors_.size(); ++i) {
    Accessor& a = accessors_[i];
    bool simple = a.source->kind == SourceKind::Local && a.guards.size() == 1 &&
                  a.guards[0].kind == GuardKind::TensorMatch;
    if (simple && !has_child[i]) {
      const Guard& g = a.guards[0];
      param_tensors_.push_back({size_t(a.source->local_index), g.tensor.dtype, g.tensor.sizes, g.tensor.strides, nullptr,
                                dynamic_mask(g.tensor.dynamic), has_contiguous_strides(g.tensor.sizes, g.tensor.strides)});
      kept_guards_.push_back(g);
      continue;
    }
    remap[i] = int(rest.size());
    rest.push_back(std::move(a));
  }
  for (Accessor& a : rest)
    if (a.parent >= 0) a.parent = remap[size_t(a.parent)];
  accessors_ = std::move(rest);
  for (size_t i = 0; i < param_tensors_.size(); ++i) param_tensors_[i].guard = &kept_guards_[i];
  resolved_.resize(accessors_.size());
  computed_.resize(accessors_.size());
  epoch_ = module_version_epoch();
  grad_mode_ = set.grad_mode();
  if (grad_mode_ >= 0) ++nguards_;
  // A symbol's tensor has an accessor while its TensorMatch guard has a
  // dynamic dim. Once the trace specialized every dim (specialize_all) it
  // may have become a plain parameter check: the size is then the hint.
  shape_guards_ = set.shapes().guards();
  if (!shape_guards_.empty()) {
    for (size_t i = 0; i < set.symbol_sources().size(); ++i) {
      const output_graph::Source* src = set.symbol_sources()[i].get();
      int found = -1, local = -1;
      for (size_t a = 0; a < accessors_.size(); ++a)
        if (accessors_[a].source.get() == src) found = int(a);
      for (const ParamTensorCheck& c : param_tensors_)
        if (c.dynamic && src->kind == SourceKind::Local && c.local == size_t(src->local_index)) local = int(c.local);
      symbol_accessors_.push_back(found);
      symbol_locals_.push_back(local);
      symbol_dims_.push_back(set.symbol_dims()[i]);
    }
    nguards_ += shape_guards_.size();
    symbol_values_ = set.shapes().hints();
  }
  mark_implied_subtrees();
}

namespace {
// A value no mutation of its own can change: a guard on it is decided by
// which object it is.
bool immutable_constant(const Value& v) {
  switch (v.kind()) {
    case Kind::None:
    case Kind::Bool:
    case Kind::Int:
    case Kind::Float:
    case Kind::Str: return true;
    case Kind::Tuple:
      for (const Value& x : v.as<TupleObj>()->items)
        if (!immutable_constant(x)) return false;
      return true;
    default: return false;
  }
}
}  // namespace

// A value read from an unchanged module's dicts (an Attr source whose base
// carries a ModuleVersion guard) is the object it was when traced: every
// store to a module bumps its version, and kiln tensors' metadata never
// changes in place (a mirrored torch module's does, and its mirror then
// takes a new version). So while the module version epoch stands, guards
// on it that depend only on which object it is (identity, type, an
// immutable constant, a tensor's metadata, its own module structure) hold
// without reading it. A subtree of such accessors is skipped whole: a deep
// module chain's cached call does not walk the chain.
void GuardTree::mark_implied_subtrees() {
  std::vector<bool> needed(accessors_.size(), false);  // a symbol's tensor: its sizes are read
  for (int a : symbol_accessors_)
    if (a >= 0) needed[size_t(a)] = true;
  std::vector<bool> own(accessors_.size(), false);
  for (size_t i = 0; i < accessors_.size(); ++i) {
    const Accessor& a = accessors_[i];
    if (a.parent < 0 || a.source->kind != SourceKind::Attr || needed[i]) continue;
    bool versioned = false;
    for (const Guard& g : accessors_[size_t(a.parent)].guards) versioned = versioned || g.kind == GuardKind::ModuleVersion;
    if (!versioned) continue;
    bool implied = true;
    for (const Guard& g : a.guards) {
      switch (g.kind) {
        case GuardKind::IdMatch:
        case GuardKind::TypeMatch:
        case GuardKind::TensorMatch: break;
        case GuardKind::ConstantMatch: implied = implied && immutable_constant(g.expected); break;
        default: implied = implied && output_graph::is_module_structure_guard(g.kind);
      }
    }
    own[i] = implied;
  }
  // Accessors come parents first (sorted by source depth); a subtree is
  // implied when its root and everything below are.
  std::vector<bool> all_below(accessors_.size(), true);
  for (size_t i = accessors_.size(); i-- > 0;) {
    Accessor& a = accessors_[i];
    a.implied_when_unchanged = own[i] && all_below[i];
    if (a.parent >= 0 && !a.implied_when_unchanged) all_below[size_t(a.parent)] = false;
  }
}

// `scratch` holds a value read through the foreign seam (an item of the
// caller's Python list or dict), which has no home to point at.
static const Value* resolve(const output_graph::Source& s, const Value* base, const Value* locals,
                            const FunctionObj& fn, Value& scratch) {
  switch (s.kind) {
    case SourceKind::Local: {
      const Value* v = &locals[s.local_index];
      return v->is_null() ? nullptr : v;
    }
    case SourceKind::Global:
      if (s.globals) return s.globals->map.find(s.interned.get());
      return fn.globals ? fn.globals->map.find(s.interned.get()) : nullptr;
    case SourceKind::Attr:
      // Only module dicts and foreign namespaces are read: no side
      // effects, no user code.
      if (base->is(Kind::Foreign)) {
        const auto* f = base->as<ForeignObj>();
        if (f->vt->namespace_find) return f->vt->namespace_find(f->handle, s.interned.get());
        // A plain object's attribute (a config's field), read as the tracer read it.
        return f->vt->plain_attr && f->vt->plain_attr(f->handle, s.name, scratch) ? &scratch : nullptr;
      }
      if (base->is(Kind::Super)) {  // a super object's own two (runtime/semantics/super.h)
        const auto* sup = base->as<SuperObj>();
        if (s.name == "__self__") return sup->obj.is_null() ? nullptr : &sup->obj;
        if (s.name == "__thisclass__") return &sup->type;
        return nullptr;
      }
      if (base->is(Kind::BoundMethod)) {  // a method's own two
        const auto* bm = base->as<BoundMethodObj>();
        if (s.name == "__func__") return &bm->func;
        if (s.name == "__self__") return &bm->self;
        return nullptr;
      }
      if (base->is(Kind::Function))  // a translated Python function's own attribute (runtime/value/value.h)
        return host_function_attr(*base->as<FunctionObj>(), s.name, scratch) ? &scratch : nullptr;
      if (!base->is(Kind::Module)) return nullptr;
      return module_instance_slot(base->as<ModuleObj>(), s.interned.get());
    case SourceKind::Item: {
      if (base->is(Kind::List) || base->is(Kind::Tuple)) {
        const auto& items = base->is(Kind::List) ? base->as<ListObj>()->items : base->as<TupleObj>()->items;
        int64_t i = s.key.as_int();
        return (i < 0 || i >= int64_t(items.size())) ? nullptr : &items[size_t(i)];
      }
      if (base->is(Kind::Dict)) return base->as<DictObj>()->find(s.key);
      const Kind container = foreign_container(*base);
      if (container != Kind::List && container != Kind::Dict) return nullptr;
      if (container == Kind::List && (s.key.as_int() < 0 || s.key.as_int() >= length(*base))) return nullptr;
      if (container == Kind::Dict && !contains(*base, s.key)) return nullptr;
      scratch = get_item(*base, s.key);
      return &scratch;
    }
    case SourceKind::Const: return &s.key;
    case SourceKind::Environ: {
      const char* v = std::getenv(s.name.c_str());
      if (!v) return nullptr;  // absent (an Absent guard accepts it)
      scratch = Value::str(v);
      return &scratch;
    }
    case SourceKind::GenericAttr:
    case SourceKind::TypeAttr: {
      // A Python object's attribute by Python's generic lookup, or what its
      // class lookup finds (unbound: the function, the property). Absent:
      // missing, which an Absent guard accepts; a lookup that would run
      // user code now reads as Null, which no other guard accepts.
      if (!base->is(Kind::Foreign)) return nullptr;
      const auto* f = base->as<ForeignObj>();
      if (!f->vt->lookup_attr) return nullptr;
      Value raw = Value::null();
      const bool generic = s.kind == SourceKind::GenericAttr;
      const ForeignAttr found = f->vt->lookup_attr(f->handle, s.name, generic ? nullptr : &s.key, scratch, generic ? nullptr : &raw);
      if (found == ForeignAttr::Absent) return nullptr;
      if (generic && found == ForeignAttr::Method) {
        auto bm = make_ref<BoundMethodObj>();
        bm->func = std::move(scratch);
        bm->self = *base;
        scratch = Value::object(Kind::BoundMethod, bm);
      } else if (!generic && found != ForeignAttr::Undecided) {
        // What the class holds, whatever reading it through an object means.
        scratch = std::move(raw);
      } else if (found != ForeignAttr::Found) {
        scratch = Value::null();
      }
      return &scratch;
    }
    case SourceKind::DictItem: {
      // A dict subclass's own storage at a literal key; a base that is no
      // dict now reads as Null, which no guard accepts.
      if (!base->is(Kind::Foreign)) return nullptr;
      const auto* f = base->as<ForeignObj>();
      if (!f->vt->dict_storage_find) return nullptr;
      switch (f->vt->dict_storage_find(f->handle, s.key, scratch)) {
        case ForeignAttr::Found: return &scratch;
        case ForeignAttr::Absent: return nullptr;
        default: scratch = Value::null(); return &scratch;
      }
    }
    case SourceKind::Cell: {
      const FunctionObj* f = &fn;
      if (s.base) {
        if (!base->is(Kind::Function)) return nullptr;
        f = base->as<FunctionObj>();
      }
      if (size_t(s.local_index) >= f->closure.size()) return nullptr;
      const Value* v = &f->closure[size_t(s.local_index)]->v;
      return v->is_null() ? nullptr : v;
    }
  }
  return nullptr;
}

// The kind a value has for guards: a caller's Python list, dict or set
// (Foreign) is a list, dict or set.
static Kind guarded_kind(const Value& v) {
  const Kind k = v.kind();
  if (k != Kind::Foreign) return k;
  const Kind container = foreign_container(v);
  return container == Kind::Null ? k : container;
}

// A constant guard's comparison: Python's ==, except that a set must also
// have the snapshot's table (its order and what later operations do with
// it depend on that, not only on its elements), at any depth in tuples.
// The same constant as far as the trace could tell: of the same kind (1,
// 1.0 and True are three programs: 7 // 2 vs 7 // 2.0, str(True)), floats
// by their bits' meaning (-0.0 is not 0.0: the sign of a result follows
// it; every NaN is one NaN, so a NaN argument does not recompile each call).
static bool same_constant(const Value& v, const Value& expected) {
  if (v.kind() != expected.kind()) return false;
  if (v.is(Kind::Float)) {
    const double a = v.as_float(), b = expected.as_float();
    return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
  }
  if (is_set_like(v) && is_set_like(expected)) return sets_same_layout(v, expected);
  if (v.is(Kind::Tuple) && expected.is(Kind::Tuple)) {
    const auto& a = v.as<TupleObj>()->items;
    const auto& b = expected.as<TupleObj>()->items;
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_constant(a[i], b[i])) return false;
    return true;
  }
  return values_equal(v, expected);
}

static bool holds(const Guard& g, const Value& v) {
  switch (g.kind) {
    case GuardKind::TypeMatch:
      if (guarded_kind(v) != g.expected.kind()) return false;
      return !v.is(Kind::Module) || v.as<ModuleObj>()->cls.get() == g.expected.as<ModuleObj>()->cls.get();
    case GuardKind::IdMatch: return v.is_same(g.expected);
    case GuardKind::ConstantMatch:
      if (v.is(Kind::Foreign) && guarded_kind(v) == Kind::Set && g.expected.is(Kind::Set))
        return same_constant(native_container(v), g.expected);  // the caller's Python set vs the trace's snapshot
      return v.kind() == g.expected.kind() && same_constant(v, g.expected);
    case GuardKind::TensorMatch: {
      if (!v.is(Kind::Tensor)) return false;
      const auto& m = g.tensor;
      return layout_matches(*v.as<TensorImpl>(), m.dtype, m.sizes, m.strides, dynamic_mask(m.dynamic),
                            has_contiguous_strides(m.sizes, m.strides));
    }
    case GuardKind::Length: {
      const Kind k = guarded_kind(v);
      int64_t n = v.is(Kind::List)                        ? int64_t(v.as<ListObj>()->items.size())
                  : v.is(Kind::Tuple)                     ? int64_t(v.as<TupleObj>()->items.size())
                  : v.is(Kind::Dict)                      ? int64_t(v.as<DictObj>()->entries.size())
                  : (k == Kind::List || k == Kind::Dict)  ? length(v)
                                                          : -1;
      return n == g.length;
    }
    case GuardKind::ModuleVersion:
      return v.is(Kind::Module) && v.is_same(g.expected) && v.as<ModuleObj>()->version == g.version;
    case GuardKind::ModuleHooks: {
      if (!v.is(Kind::Module)) return false;
      auto same = [](const std::vector<Hook>& hooks, const Value& fns) {
        const auto& want = fns.as<TupleObj>()->items;
        if (hooks.size() != want.size()) return false;
        for (size_t i = 0; i < hooks.size(); ++i)
          if (!hooks[i].fn.is_same(want[i])) return false;
        return true;
      };
      const auto& want = g.expected.as<TupleObj>()->items;
      auto* m = v.as<ModuleObj>();
      return same(m->forward_pre_hooks, want[0]) && same(m->forward_hooks, want[1]);
    }
    case GuardKind::ModuleChildren: {
      if (!v.is(Kind::Module)) return false;
      const auto& kids = v.as<ModuleObj>()->modules.entries();
      const auto& names = g.expected.as<TupleObj>()->items;
      if (kids.size() != names.size()) return false;
      for (size_t i = 0; i < kids.size(); ++i)  // interned: names compare by pointer
        if (kids[i].first.get() != names[i].obj()) return false;
      return true;
    }
    case GuardKind::DictKeys: {
      // What a trace read of a dict without reading its values (`k in d`,
      // len, iteration order) holds only for the same keys.
      const Value d = v.is(Kind::Dict) ? v : native_container(v);
      if (!d.is(Kind::Dict)) return false;
      const auto& entries = d.as<DictObj>()->entries;
      const auto& keys = g.expected.as<TupleObj>()->items;
      if (entries.size() != keys.size()) return false;
      for (size_t i = 0; i < keys.size(); ++i)
        if (!same_constant(entries[i].first, keys[i])) return false;
      return true;
    }
    case GuardKind::Aliasing: return true;  // checked across sources, after they all resolved
    case GuardKind::Absent: return false;   // the name exists now: it shadows the builtin
    case GuardKind::GradTensorMatch: {
      // Still the embedder's tensor that requires grad (under no_grad, or
      // once it stops requiring grad, it arrives as a kiln tensor), with
      // the traced dtype and layout (never dynamic: always specialized).
      if (!v.is(Kind::Foreign)) return false;
      const auto* f = v.as<ForeignObj>();
      if (!f->vt->grad_tensor) return false;
      const Tensor t = f->vt->grad_tensor(f->handle);
      if (!t.defined()) return false;
      return t.dtype() == g.tensor.dtype && t.sizes() == g.tensor.sizes && t.strides() == g.tensor.strides;
    }
  }
  return false;
}

std::vector<GuardTree::Failure> GuardTree::size_changes(const Value* locals, const FunctionObj& fn) {
  std::vector<Failure> out;
  auto moved = [](const Value& v, runtime::DType dtype, const auto& sizes) {
    if (!v.is(Kind::Tensor)) return false;
    const Tensor t = v.as_tensor();
    return t.dtype() == dtype && t.sizes().size() == sizes.size() && t.sizes() != sizes;
  };
  for (const ParamTensorCheck& c : param_tensors_)
    if (moved(locals[c.local], c.dtype, c.sizes)) out.push_back({c.guard, &locals[c.local]});
  // And every tensor the guards reach below the arguments (a KV cache's
  // tensors, held by an object passed in): all whose sizes moved become
  // dynamic at once, not one per recompile. Every accessor is read here,
  // whatever other guard fails; the values stay in resolved_ / computed_
  // until the next check.
  for (size_t i = 0; i < accessors_.size(); ++i) {
    const Accessor& a = accessors_[i];
    const Value* base = a.parent >= 0 ? resolved_[size_t(a.parent)] : nullptr;
    resolved_[i] = a.parent >= 0 && !base ? nullptr : resolve(*a.source, base, locals, fn, computed_[i]);
    if (!resolved_[i]) continue;
    for (const Guard& g : a.guards)
      if (g.kind == GuardKind::TensorMatch && moved(*resolved_[i], g.tensor.dtype, g.tensor.sizes))
        out.push_back({&g, resolved_[i]});
  }
  return out;
}

bool GuardTree::check(const Value* locals, const FunctionObj& fn, std::string* why, Failure* failure) {
  if (grad_mode_ >= 0 && grad_mode_enabled() != (grad_mode_ == 1)) {
    if (why) *why = std::string("failed: GRAD_MODE ") + (grad_mode_ ? "on" : "off");
    return false;
  }
  for (const ParamTensorCheck& c : param_tensors_) {
    const Value& v = locals[c.local];
    const TensorImpl* t = v.is(Kind::Tensor) ? v.as<TensorImpl>() : nullptr;
    if (!t || !layout_matches(*t, c.dtype, c.sizes, c.strides, c.dynamic, c.contiguous)) {
      if (why) *why = "failed: " + c.guard->str();
      if (failure) *failure = {c.guard, &v};
      return false;
    }
  }
  const bool modules_unchanged = module_version_epoch() == epoch_;
  bool read_foreign = false;
  for (size_t i = 0; i < accessors_.size(); ++i) {
    const Accessor& a = accessors_[i];
    if (modules_unchanged && a.implied_when_unchanged) {
      resolved_[i] = nullptr;  // nothing below reads it: every accessor below is implied too
      continue;
    }
    const Value* base = a.parent >= 0 ? resolved_[size_t(a.parent)] : nullptr;
    const Value* v = resolve(*a.source, base, locals, fn, computed_[i]);
    if (!v) {
      // The one guard that holds on a missing value (a builtin read where
      // a global of that name would shadow it); nothing hangs below it.
      if (a.guards.size() == 1 && a.guards[0].kind == GuardKind::Absent) {
        resolved_[i] = nullptr;
        continue;
      }
      if (why) *why = a.source->str() + " is missing";
      aliases_.clear();
      return false;
    }
    read_foreign = read_foreign || v == &computed_[i];
    resolved_[i] = v;
    for (const Guard& g : a.guards) {
      if (modules_unchanged && output_graph::is_module_structure_guard(g.kind)) continue;
      if (g.kind == GuardKind::Aliasing) {
        aliases_.push_back({g.length, object_identity(*v), &g});
        continue;
      }
      if (!holds(g, *v)) {
        if (why) *why = "failed: " + g.str();
        if (failure) *failure = {&g, v};
        aliases_.clear();
        return false;
      }
    }
  }
  // Mutable containers: one object now exactly where there was one when
  // traced (a handful of sources: the pairwise check is the cheap one).
  for (size_t i = 0; i < aliases_.size(); ++i)
    for (size_t j = i + 1; j < aliases_.size(); ++j)
      if ((aliases_[i].alias_class == aliases_[j].alias_class) != (aliases_[i].identity == aliases_[j].identity)) {
        if (why)
          *why = aliases_[i].guard->source->str() + " and " + aliases_[j].guard->source->str() +
                 (aliases_[i].alias_class == aliases_[j].alias_class ? " were one object when traced, now two"
                                                                     : " were two objects when traced, now one");
        aliases_.clear();
        return false;
      }
  aliases_.clear();
  if (!shape_guards_.empty()) {
    for (size_t i = 0; i < symbol_accessors_.size(); ++i) {
      if (symbol_locals_[i] >= 0)
        symbol_values_[i] = locals[size_t(symbol_locals_[i])].as<TensorImpl>()->sizes[size_t(symbol_dims_[i])];
      else if (symbol_accessors_[i] >= 0)
        symbol_values_[i] = resolved_[size_t(symbol_accessors_[i])]->as<TensorImpl>()->sizes[size_t(symbol_dims_[i])];
    }
    for (const output_graph::ShapeGuard& g : shape_guards_) {
      if (!g.holds(symbol_values_)) {
        if (why) *why = "failed: SHAPE " + g.str();
        if (read_foreign)
          for (Value& c : computed_) c = Value();
        return false;
      }
    }
  }
  // Every version guard held although some module changed: remember the
  // new epoch so the next check is one comparison again.
  if (!modules_unchanged) epoch_ = module_version_epoch();
  // Items read out of the caller's containers are not kept past the check
  // (a failure keeps them: the caller reads Failure::value).
  if (read_foreign)
    for (Value& c : computed_) c = Value();
  return true;
}

}  // namespace kiln::interpreter

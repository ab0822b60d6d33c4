#include "variables/variable_tracker.h"

#include <string>
#include <unordered_set>

#include "output_graph/output_graph.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::variables {

const char* vt_kind_name(VTKind k) {
  switch (k) {
#define KILN_VT_NAME(k) \
  case VTKind::k: return #k "Variable";
    KILN_VT_KINDS(KILN_VT_NAME)
#undef KILN_VT_NAME
  }
  return "?";
}

// Python's own short repr: a class, a function, a module, a dtype
// (`<class 'int'>`, `<function f at 0x..>`, `torch.int32`).
static bool repr_is_pythons_own(const runtime::Value& v) {
  static const std::unordered_set<std::string> own = {
      "type",   "function",    "builtin_function_or_method", "method", "method-wrapper", "module",
      "torch.dtype", "torch.device", "weakref.ReferenceType", "NoneType", "bool", "int", "float"};
  return own.count(runtime::type_name(v)) > 0;
}

std::string VariableTracker::str() const {
  std::string s = vt_kind_name(kind);
  switch (kind) {
    case VTKind::Opaque:
      // (a made object's instance is empty: its own repr may well raise)
      if (made) return "UserDefinedObjectVariable(a " + runtime::type_name(value) + " made in the trace)";
      // A program's object is named by its type, as Dynamo names it: its
      // own repr runs its code at trace time, for a message that may never
      // be read, and can be pages long (a config dumps itself as JSON, a
      // ModelOutput prints its tensors).
      if (value.is(runtime::Kind::Foreign) && !repr_is_pythons_own(value))
        return s + "(" + runtime::type_name(value) + ")";
      [[fallthrough]];
    case VTKind::Constant: return s + "(" + runtime::repr(value) + ")";
    case VTKind::Tensor: return s + "(" + meta().str() + ")";
    case VTKind::SymInt: return s + "(" + sym.str() + ")";
    case VTKind::List:
    case VTKind::Tuple: return s + "(len " + std::to_string(items.size()) + ")";
    case VTKind::NNModule:
    case VTKind::UnspecializedNNModule: return s + "(" + runtime::type_name(value) + ")";
    case VTKind::UserFunction:
    case VTKind::Builtin: return s + "(" + runtime::repr(value) + ")";
    default: return s;
  }
}

namespace {
thread_local TraceArena* current_arena = nullptr;

VT make(VTKind k, SourceRef source) {
  auto v = std::make_shared<VariableTracker>();
  v->kind = k;
  v->source = std::move(source);
  if (current_arena) current_arena->add(v);
  return v;
}
}  // namespace

TraceArena::TraceArena() : outer_(current_arena) { current_arena = this; }

TraceArena* TraceArena::current() { return current_arena; }

TraceArena::~TraceArena() {
  current_arena = outer_;
  // Every link a tracker holds to another: with them gone no cycle is left.
  for (const auto& w : made_)
    if (VT v = w.lock()) {
      v->items.clear();
      v->iterated.reset();
      v->self.reset();
      v->path_parent.reset();
      v->realized.reset();
      v->made.reset();
      v->frame.reset();  // a generator's body holds trackers (its locals, its stack)
    }
}

VT make_constant(Value v, SourceRef source) {
  VT t = make(VTKind::Constant, std::move(source));
  t->value = std::move(v);
  return t;
}
VT make_symint(output_graph::SymExpr e, int64_t hint) {
  if (!e.has_symbols()) return make_constant(Value::integer(e.constant_value()));
  VT t = make(VTKind::SymInt, nullptr);
  t->sym = std::move(e);
  t->value = Value::integer(hint);
  return t;
}
VT make_slice_of(VT start, VT stop, VT step) {
  VT t = make(VTKind::SliceOf, nullptr);
  t->items = {std::move(start), std::move(stop), std::move(step)};
  return t;
}
VT make_tensor(Node* node, SourceRef source) {
  VT t = make(VTKind::Tensor, std::move(source));
  t->node = node;
  return t;
}
VT make_list(std::vector<VT> items, SourceRef source) {
  VT t = make(VTKind::List, std::move(source));
  t->items = std::move(items);
  return t;
}
VT make_tuple(std::vector<VT> items, SourceRef source) {
  VT t = make(VTKind::Tuple, std::move(source));
  t->items = std::move(items);
  return t;
}
VT make_const_dict(std::vector<Value> keys, std::vector<VT> values, SourceRef source) {
  VT t = make(VTKind::ConstDict, std::move(source));
  t->keys = std::move(keys);
  t->items = std::move(values);
  return t;
}
VT make_user_function(Value fn, SourceRef source) {
  VT t = make(VTKind::UserFunction, std::move(source));
  t->value = std::move(fn);
  return t;
}
VT make_user_method(Value fn, VT self) {
  VT t = make(VTKind::UserMethod, nullptr);
  t->value = std::move(fn);
  t->self = std::move(self);
  return t;
}
VT make_builtin(Value builtin, SourceRef source) {
  VT t = make(VTKind::Builtin, std::move(source));
  t->value = std::move(builtin);
  return t;
}
VT make_nn_module(Value module, std::string path, SourceRef source) {
  VT t = make(VTKind::NNModule, std::move(source));
  t->value = std::move(module);
  t->module_path = std::move(path);
  return t;
}
VT make_unspecialized_nn_module(Value module, std::string path, SourceRef source) {
  VT t = make(VTKind::UnspecializedNNModule, std::move(source));
  t->value = std::move(module);
  t->module_path = std::move(path);
  return t;
}
std::string module_qualname(const VariableTracker& module) {
  std::vector<const VariableTracker*> chain;
  for (const VariableTracker* m = &module; m; m = m->path_parent.get()) chain.push_back(m);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    if ((*it)->module_path.empty()) continue;
    if (!out.empty()) out += '.';
    out += (*it)->module_path;
  }
  return out;
}

output_graph::PathRef module_path_link(output_graph::OutputGraph& out, const VariableTracker& module) {
  // Iterative: a chain thousands deep must not recurse as deep.
  std::vector<const VariableTracker*> todo;
  const VariableTracker* m = &module;
  for (; m && m->path_link_graph != &out; m = m->path_parent.get()) todo.push_back(m);
  output_graph::PathRef link = m ? m->path_link : nullptr;
  for (auto it = todo.rbegin(); it != todo.rend(); ++it) {
    // An empty name (a root traced without one) adds no part to the path.
    if (!(*it)->module_path.empty()) link = out.path_link(link, (*it)->module_path);
    (*it)->path_link = link;
    (*it)->path_link_graph = &out;
  }
  return link;
}

VT make_child_module(Value module, const VT& parent, std::string name, SourceRef source) {
  VT t = make_nn_module(std::move(module), std::move(name), std::move(source));
  t->path_parent = parent;
  return t;
}

size_t container_size(const VariableTracker& c) {
  if (c.is(VTKind::List) || c.is(VTKind::ConstDict)) return c.items.size();
  if (c.is(VTKind::Constant) && (c.value.is(runtime::Kind::Set) || c.value.is(runtime::Kind::FrozenSet)))
    return size_t(c.value.as<runtime::SetObj>()->size());
  return SIZE_MAX;
}

const char* iteration_error(const VariableTracker& it) {
  if (!it.iterated || it.iterated->is(VTKind::List) || container_size(*it.iterated) == it.iterated_size) return nullptr;
  return it.iterated->is(VTKind::ConstDict) ? "dictionary changed size during iteration"
                                            : "Set changed size during iteration";
}

VT dict_view_item(const VariableTracker& d, DictView view, size_t i) {
  if (view == DictView::Keys) return make_constant(d.keys[i]);
  if (view == DictView::Values) return d.items[i];
  return make_tuple({make_constant(d.keys[i]), d.items[i]});
}
std::vector<VT> dict_view_items(const VariableTracker& d, DictView view) {
  std::vector<VT> out;
  for (size_t i = 0; i < d.keys.size(); ++i) out.push_back(dict_view_item(d, view, i));
  return out;
}

bool iterates_set(const VariableTracker& it) {
  return it.iterated && it.iterated->is(VTKind::Constant) &&
         (it.iterated->value.is(runtime::Kind::Set) || it.iterated->value.is(runtime::Kind::FrozenSet));
}

size_t items_yielded(const VariableTracker& it) {
  if (!iterates_set(it)) return it.pos;
  const auto* s = it.iterated->value.as<runtime::SetObj>();
  size_t n = 0;
  for (int64_t i = 0; i < int64_t(it.pos) && i < s->capacity(); ++i) n += s->table()[i].active() ? 1 : 0;
  return n;
}

std::vector<VT> remaining_items(const VariableTracker& it) {
  if (iterates_set(it)) {  // the set's table from the position on
    const auto* s = it.iterated->value.as<runtime::SetObj>();
    std::vector<VT> out;
    for (int64_t i = int64_t(it.pos); i < s->capacity(); ++i)
      if (s->table()[i].active()) out.push_back(make_constant(s->table()[i].key));
    return out;
  }
  const std::vector<VT>& items = it.iterated && it.iterated->is(VTKind::List) ? it.iterated->items : it.items;
  if (it.pos >= items.size()) return {};
  return std::vector<VT>(items.begin() + ptrdiff_t(it.pos), items.end());
}

VT make_iterator(std::vector<VT> items) {
  VT t = make(VTKind::Iterator, nullptr);
  t->items = std::move(items);
  return t;
}
VT make_lazy_iterator(std::vector<VT> items, VT fn, LazyIteration how) {
  VT t = make_iterator(std::move(items));
  t->self = std::move(fn);
  t->iteration = how;
  return t;
}
VT make_opaque(Value v, SourceRef source) {
  VT t = make(VTKind::Opaque, std::move(source));
  t->value = std::move(v);
  return t;
}
void dict_set(std::vector<Value>& keys, std::vector<VT>& values, const Value& key, VT value) {
  for (size_t i = 0; i < keys.size(); ++i)
    if (runtime::values_equal(keys[i], key)) {
      values[i] = std::move(value);
      return;
    }
  keys.push_back(key);
  values.push_back(std::move(value));
}

VT make_made_object(Value empty, VT cls, std::shared_ptr<const MadeHere> made) {
  VT t = make(VTKind::Opaque, nullptr);
  t->value = std::move(empty);
  const bool storage = !made->setitem.is_null();
  t->items = {std::move(cls), make_const_dict({}, {}), storage ? make_const_dict({}, {}) : make_constant(Value::none())};
  t->made = std::move(made);
  return t;
}
VT make_getattr(VT object, std::string name) {
  VT t = make(VTKind::GetAttr, nullptr);
  t->self = std::move(object);
  t->module_path = std::move(name);
  return t;
}
VT make_cell(VT content, SourceRef source, std::string name) {
  VT t = make(VTKind::Cell, std::move(source));
  t->items.push_back(std::move(content));
  t->module_path = std::move(name);
  return t;
}
VT make_nested_function(Value code, std::vector<VT> cells, VT defaults) {
  VT t = make(VTKind::NestedFunction, nullptr);
  t->value = std::move(code);
  t->items = std::move(cells);
  t->self = std::move(defaults);
  return t;
}
VT make_lazy(Value v, SourceRef source) {
  VT t = make(VTKind::Lazy, std::move(source));
  t->value = std::move(v);
  return t;
}

bool is_literal(const Value& v) {
  switch (v.kind()) {
    case runtime::Kind::None:
    case runtime::Kind::Bool:
    case runtime::Kind::Int:
    case runtime::Kind::Float:
    case runtime::Kind::Str: return true;
    case runtime::Kind::Tuple:
      for (const Value& x : v.as<runtime::TupleObj>()->items)
        if (!is_literal(x)) return false;
      return true;
    default: return false;
  }
}

}  // namespace kiln::variables

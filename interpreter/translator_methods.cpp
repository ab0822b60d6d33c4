// Methods of built-in types during a trace (their rows say Trace): lists and
// dicts mutate their trackers and record the side effect (the residual code
// replays the new contents onto the real object); a set made in the trace
// is updated by value; Tensor methods read metadata; Module methods walk
// the module tree. Each handler answers or breaks: a method of a mutable
// receiver never folds on a copy of it.
#include "interpreter/instruction_translator.h"
#include "interpreter/nn_module.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;

static VT none_vt() { return const_vt(Value::none()); }

VT InstructionTranslator::trace_method(BuiltinCall& c) {
  using Handler = VT (*)(InstructionTranslator&, BuiltinCall&, std::string_view);
  using Tx = InstructionTranslator;
  static const std::pair<std::string_view, Handler> by_type[] = {
      {"list.", [](Tx& tx, BuiltinCall& c, std::string_view m) { return tx.trace_list_method(c, m); }},
      {"dict.", [](Tx& tx, BuiltinCall& c, std::string_view m) { return tx.trace_dict_method(c, m); }},
      {"set.", [](Tx& tx, BuiltinCall& c, std::string_view m) { return tx.trace_set_method(c, m); }},
      {"Tensor.", [](Tx& tx, BuiltinCall& c, std::string_view m) { return tx.trace_tensor_method(c, m); }},
      {"Module.", nn_module::trace_supported_methods},  // nn_module.h
      {"ModuleDict.", nn_module::trace_module_dict_method},
  };
  const std::string& name = c.b.name;
  for (const auto& [prefix, handler] : by_type)
    if (name.compare(0, prefix.size(), prefix) == 0)
      if (VT r = handler(*this, c, std::string_view(name).substr(prefix.size()))) return r;
  unsupported(BreakReason::untraced_method, name + "() on " + (c.args.empty() ? "nothing" : c.args[0]->str()));
}

// Tensor methods (type_methods.cpp) on a tensor tracker: metadata reads
// fold; reading values is a break.
VT InstructionTranslator::trace_tensor_method(BuiltinCall& c, std::string_view m) {
  const auto& args = c.args;
  if (args.empty() || !args[0]->is(VTKind::Tensor)) return nullptr;
  const auto& meta = args[0]->meta();
  if (m == "item" || m == "tolist") unsupported(BreakReason::tensor_to_python, std::string(m) + "()");
  if (m == "is_contiguous") ctx_.shape_read = true;
  if (m == "dim") return const_vt(Value::integer(int64_t(meta.sizes.size())));
  if (m == "numel") {
    output_graph::SymExpr n = output_graph::SymExpr::constant(1);
    for (size_t d = 0; d < meta.sizes.size(); ++d)
      n = n * (d < meta.sym.size() ? meta.sym[d] : output_graph::SymExpr::constant(meta.sizes[d]));
    return vars::make_symint(n, shape_numel(meta.sizes));
  }
  if (m == "is_contiguous") return const_vt(Value::boolean(meta.strides == contiguous_strides(meta.sizes)));
  if (m == "size") {
    if (args.size() == 1) {
      std::vector<VT> dims;
      for (size_t d = 0; d < meta.sizes.size(); ++d) dims.push_back(size_of(args[0], d));
      return vars::make_tuple(std::move(dims));
    }
    if (!is_constant(args[1])) unsupported(BreakReason::builtin_of_traced_value, "size() of a traced dim");
    int64_t d = to_index(constant_value(args[1]), "size() dim");
    int64_t n = int64_t(meta.sizes.size());
    if (d < -n || d >= n) unsupported(BreakReason::python_error, "size(): dim " + std::to_string(d) + " out of range");
    return size_of(args[0], size_t(d < 0 ? d + n : d));
  }
  static const std::pair<const char*, const char*> conversions[] = {
      {"float", "float32"}, {"double", "float64"}, {"long", "int64"}, {"int", "int32"}, {"bool", "bool"}};
  for (const auto& [method, dtype] : conversions)
    if (m == method) return tensor_op(OpId::to, {args[0], const_vt(intern_value(dtype))});
  return nullptr;
}

VT InstructionTranslator::trace_list_method(BuiltinCall& c, std::string_view m) {
  const auto& args = c.args;
  if (args.empty() || !args[0]->is(VTKind::List)) return nullptr;
  VT list = args[0];
  // sort(reverse=...) and index/count fold on known items.
  if ((m == "sort" || m == "index" || m == "count") && is_constant(list)) {
    std::vector<Value> values{constant_value(list)};
    for (size_t i = 1; i < args.size(); ++i) {
      if (!is_constant(args[i])) return nullptr;
      values.push_back(constant_value(args[i]));
    }
    Value r;
    try {
      r = ctx_.vm.call(c.builtin, CallArgs{values.data(), values.size(), c.kwnames});
    } catch (const Error& e) {
      unsupported(BreakReason::python_error, c.b.name + "(): " + e.what());
    }
    if (m != "sort") return from_value(r);
    list->items.clear();
    for (const Value& x : values[0].as<ListObj>()->items) list->items.push_back(from_value(x));
    ctx_.side_effects.mark_mutated(list);
    return none_vt();
  }
  if (c.nkw) return nullptr;
  auto mutated = [&] {
    ctx_.side_effects.mark_mutated(list);
    return none_vt();
  };
  if (m == "append" && args.size() == 2) {
    refuse_cycle(list, args[1]);
    list->items.push_back(args[1]);
    return mutated();
  }
  if (m == "extend" && args.size() == 2) {
    for (VT& v : unpack(args[1])) {
      refuse_cycle(list, v);
      list->items.push_back(v);
    }
    return mutated();
  }
  if (m == "pop" && args.size() <= 2 && !list->items.empty()) {
    if (args.size() == 2 && !is_constant(args[1])) return nullptr;
    int64_t i = args.size() == 2 ? to_index(constant_value(args[1]), "pop index") : -1;
    int64_t n = int64_t(list->items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) unsupported(BreakReason::python_error, "list.pop(): pop index out of range");
    VT v = list->items[size_t(i)];
    list->items.erase(list->items.begin() + i);
    mutated();
    return v;
  }
  if (m == "insert" && args.size() == 3 && is_constant(args[1])) {
    int64_t n = int64_t(list->items.size());
    int64_t i = to_index(constant_value(args[1]), "insert index");
    if (i < 0) i = std::max<int64_t>(0, i + n);
    refuse_cycle(list, args[2]);
    list->items.insert(list->items.begin() + std::min(i, n), args[2]);
    return mutated();
  }
  if (m == "reverse" && args.size() == 1) {
    std::reverse(list->items.begin(), list->items.end());
    return mutated();
  }
  if (m == "copy" && args.size() == 1) return vars::make_list(list->items);
  if (m == "remove" && args.size() == 2 && is_constant(args[1])) {
    Value x = constant_value(args[1]);
    for (size_t i = 0; i < list->items.size(); ++i) {
      if (!is_constant(list->items[i])) return nullptr;  // == on a traced item is not known now
      if (values_equal(constant_value(list->items[i]), x)) {
        list->items.erase(list->items.begin() + ptrdiff_t(i));
        return mutated();
      }
    }
    unsupported(BreakReason::python_error, "list.remove(x): x not in list");
  }
  if (m == "clear" && args.size() == 1) {
    list->items.clear();
    return mutated();
  }
  return nullptr;
}

VT InstructionTranslator::trace_dict_method(BuiltinCall& c, std::string_view m) {
  const auto& args = c.args;
  if (!args.empty() && args[0]->is(VTKind::Opaque)) return user_dict_method(c, m);  // translator_user_defined.cpp
  if (args.empty() || !args[0]->is(VTKind::ConstDict) || c.nkw) return nullptr;
  VT d = args[0];
  auto mutated = [&] { ctx_.side_effects.mark_mutated(d); };
  if (m == "keys" || m == "values" || m == "items") {
    const vars::DictView kind = m == "keys" ? vars::DictView::Keys
                                : m == "values" ? vars::DictView::Values
                                                : vars::DictView::Items;
    // A view (as a list of its items now): iter() reads the dict again,
    // and a loop over it raises if the dict then changes size.
    VT view = vars::make_list(vars::dict_view_items(*d, kind));
    view->iterated = d;
    view->iterated_size = d->keys.size();
    view->view = kind;
    return view;
  }
  auto find = [&](const Value& k) -> int {
    require_hashable(k, std::string("dict.").append(m).c_str());
    for (size_t i = 0; i < d->keys.size(); ++i)
      if (values_equal(d->keys[i], k)) return int(i);
    return -1;
  };
  if (m == "copy" && args.size() == 1) return vars::make_const_dict(d->keys, d->items);
  if (m == "update" && args.size() == 2 && args[1]->is(VTKind::ConstDict)) {
    refuse_cycle(d, args[1]);
    for (size_t i = 0; i < args[1]->keys.size(); ++i) {
      int at = find(args[1]->keys[i]);
      if (at >= 0) d->items[size_t(at)] = args[1]->items[i];
      else {
        d->keys.push_back(args[1]->keys[i]);
        d->items.push_back(args[1]->items[i]);
      }
    }
    mutated();
    return none_vt();
  }
  if ((m == "pop" || m == "setdefault") && (args.size() == 2 || args.size() == 3) && is_constant(args[1])) {
    Value k = constant_value(args[1]);
    int at = find(k);
    if (m == "setdefault") {
      if (at >= 0) return d->items[size_t(at)];
      if (args.size() == 3) refuse_cycle(d, args[2]);
      d->keys.push_back(k);
      d->items.push_back(args.size() == 3 ? args[2] : none_vt());
      mutated();
      return d->items.back();
    }
    if (at < 0) {
      if (args.size() == 3) return args[2];
      throw_key_error(k);  // step(): an inlined handler, or the break
    }
    VT v = d->items[size_t(at)];
    d->keys.erase(d->keys.begin() + at);
    d->items.erase(d->items.begin() + at);
    mutated();
    return v;
  }
  if (m == "clear" && args.size() == 1) {
    d->keys.clear();
    d->items.clear();
    mutated();
    return none_vt();
  }
  if (m == "get" && args.size() >= 2 && is_constant(args[1])) {
    int at = find(constant_value(args[1]));
    if (at >= 0) return d->items[size_t(at)];
    return args.size() == 3 ? args[2] : none_vt();
  }
  if (m == "__setitem__" && args.size() == 3 && is_constant(args[1])) {  // super().__setitem__(k, v)
    const Value k = constant_value(args[1]);
    require_hashable(k, "dict.__setitem__");
    refuse_cycle(d, args[2]);
    vars::dict_set(d->keys, d->items, k, args[2]);
    mutated();
    return none_vt();
  }
  if (m == "__delitem__" && args.size() == 2 && is_constant(args[1])) {
    const Value k = constant_value(args[1]);
    const int at = find(k);
    if (at < 0) unsupported(BreakReason::python_error, "dict.__delitem__(): KeyError " + repr(k));  // the call raises it
    d->keys.erase(d->keys.begin() + at);
    d->items.erase(d->items.begin() + at);
    mutated();
    return none_vt();
  }
  if ((m == "__getitem__" || m == "__contains__") && args.size() == 2 && is_constant(args[1])) {
    const Value k = constant_value(args[1]);
    const int at = find(k);
    if (m == "__contains__") return const_vt(Value::boolean(at >= 0));
    if (at < 0) throw_key_error(k);  // step(): an inlined handler, or the break
    return d->items[size_t(at)];
  }
  return nullptr;
}

// A mutating method of a set made in this trace: applied to a copy that
// becomes the tracker's value (never to a SetObj someone else holds).
VT InstructionTranslator::trace_set_method(BuiltinCall& c, std::string_view) {
  const auto& args = c.args;
  if (args.empty() || !args[0]->is(VTKind::Constant) || !args[0]->value.is(Kind::Set)) return nullptr;
  VT set = args[0];
  if (set->source) unsupported(BreakReason::outside_mutation, c.b.name + "() on a set the function did not make");
  // An exact copy (set_clone), changed as the VM changes the set itself;
  // the set passed to its own method (s.update(s)) is that copy too.
  std::vector<Value> values{set_clone(set->value, false)};
  for (size_t i = 1; i < args.size(); ++i) {
    if (!is_constant(args[i])) unsupported(BreakReason::builtin_of_traced_value, c.b.name + "() of " + args[i]->str());
    Value v = constant_value(args[i]);
    values.push_back(v.is_same(set->value) ? values[0] : v);
  }
  Value result;
  try {
    result = c.b.fn(ctx_.vm, c.b, CallArgs{values.data(), values.size(), c.kwnames});
  } catch (const Error& e) {
    unsupported(BreakReason::python_error, c.b.name + "(): " + e.what());
  }
  set->value = values[0];
  return from_value(result);
}

}  // namespace kiln::interpreter

// Builtins during a trace. Registry ops become graph nodes; Python builtins
// fold when their arguments are known; methods of lists and dicts mutate
// trackers (and record the side effect); print and reading a tensor's
// value break the graph.
#include <unordered_set>

#include "interpreter/instruction_translator.h"
#include "runtime/builtins.h"
#include "runtime/module.h"
#include "runtime/set_ops.h"
#include "runtime/value_ops.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;

static VT const_vt(Value v) { return vars::make_constant(std::move(v)); }
static VT none_vt() { return const_vt(Value::none()); }

// Builtins without side effects, folded by calling them on known values.
static bool is_pure(const std::string& name) {
  static const std::unordered_set<std::string> pure = {
      "len", "range", "isinstance", "min", "max", "abs", "sum", "pow", "int", "float", "bool", "str", "repr",
      "tuple", "list", "dict", "sorted", "any", "all", "getattr", "hasattr", "enumerate", "zip", "reversed",
      "TypeError", "ValueError", "AttributeError", "IndexError", "KeyError", "ZeroDivisionError", "RuntimeError",
      "NameError", "Exception", "NotImplementedError", "AssertionError", "format", "ascii", "set", "frozenset"};
  static const std::unordered_set<std::string> set_mutators = {"set.add", "set.discard", "set.remove", "set.pop",
                                                               "set.clear", "set.update"};
  return pure.count(name) > 0 || name.rfind("str.", 0) == 0 || name.rfind("tuple.", 0) == 0 ||
         name.rfind("frozenset.", 0) == 0 || (name.rfind("set.", 0) == 0 && !set_mutators.count(name));
}

// A value of the same Python type as the tracker, for isinstance.
static Value type_sample(const VT& v) {
  switch (v->kind) {
    case VTKind::Tensor: return Value::tensor(output_graph::meta_tensor(v->meta()));
    case VTKind::List: return make_list({});
    case VTKind::Tuple: return make_tuple({});
    case VTKind::ConstDict: return make_dict();
    default: return v->value;
  }
}

VT InstructionTranslator::call_builtin(const Value& builtin, std::vector<VT> args, const TupleObj* kwnames) {
  if (VT r = trace_class_builtin(builtin, args, kwnames)) return r;  // super, delattr, property setattr
  auto* b = builtin.as<BuiltinObj>();
  const std::string& name = b->name;
  const size_t nkw = kwnames ? kwnames->items.size() : 0;
  for (VT& a : args) a = realize(a);
  auto any_tensor = [&] {
    for (const VT& a : args)
      if (a->is(VTKind::Tensor)) return true;
    return false;
  };
  if (b->op >= 0) return tensor_op(OpId(b->op), args, kwnames);

  // setattr on a module with a constant name is an attribute store.
  if (name == "setattr" && args.size() == 3 && nkw == 0 && args[0]->is_module() && args[0]->source &&
      is_constant(args[1]) && constant_value(args[1]).is(Kind::Str)) {
    const std::string attr = constant_value(args[1]).as_str();
    if (class_property(args[0]->value.as<ModuleObj>()->cls.get(), intern(attr).get()))
      unsupported(BreakReason::attribute_error, "property '" + attr + "' of '" + type_name(args[0]->value) +
                                                    "' object has no setter");
    ctx_.attr_overlay[{args[0]->value.obj(), attr}] = args[2];
    ctx_.side_effects.attr_stores.push_back({args[0], attr, args[2]});
    return none_vt();
  }
  if (name == "print" || name == "manual_seed" || name == "setattr")
    unsupported(BreakReason::side_effect_builtin, name + "()");

  // parameters(), named_parameters(), buffers(), named_buffers(), children(),
  // named_children(), modules(), named_modules(): answered at trace time by
  // walking the module dicts (trace_supported_methods), each tensor a
  // get_attr node once, each module a tracker with its own version guard.
  // A read of the whole structure: an unspecialized module is specialized.
  if ((name.rfind("Module.", 0) == 0 || name.rfind("ModuleDict.", 0) == 0 || name == "len" || name == "getattr" ||
       name == "hasattr") &&
      !args.empty() && args[0]->is(VTKind::UnspecializedNNModule))
    args[0] = specialized(args[0]);
  if (name.rfind("Module.", 0) == 0 && !args.empty() && args[0]->is(VTKind::NNModule)) {
    std::string m = name.substr(7);
    bool recurse = true;
    if (args.size() > 1 || nkw) {
      // recurse=... (positional or keyword) must be a known bool
      const VT& r = args.back();
      if (!is_constant(r)) unsupported(BreakReason::unsupported, name + "() with a traced recurse");
      recurse = truth(constant_value(r));
    }
    auto* root = args[0]->value.as<ModuleObj>();
    if (!ctx_.attr_overlay.empty())
      for (const auto& [path, mod] : named_modules(root))
        check_structure_unchanged(mod.as<ModuleObj>(), name + "()");
    // The module tracker at a dotted path below args[0], through the same
    // attribute lookup (and guards) as self.a.b.
    auto module_at = [&](const std::string& path) {
      VT cur = args[0];
      size_t start = 0;
      while (start < path.size()) {
        size_t dot = path.find('.', start);
        if (dot == std::string::npos) dot = path.size();
        cur = module_getattr(cur, path.substr(start, dot - start));
        start = dot + 1;
      }
      return cur;
    };
    auto member = [&](const std::string& qualified) {
      size_t dot = qualified.rfind('.');
      VT owner = dot == std::string::npos ? args[0] : module_at(qualified.substr(0, dot));
      return module_getattr(owner, dot == std::string::npos ? qualified : qualified.substr(dot + 1));
    };
    auto list_of = [&](const std::vector<std::pair<std::string, Value>>& items, bool named, bool modules) {
      std::vector<VT> out;
      for (const auto& [qualified, v] : items) {
        VT vt = modules ? (qualified.empty() ? args[0] : module_at(qualified)) : member(qualified);
        out.push_back(named ? vars::make_tuple({const_vt(Value::str(qualified)), vt}) : vt);
      }
      return vars::make_list(std::move(out));
    };
    if (m == "parameters") return list_of(named_parameters(root, recurse), false, false);
    if (m == "named_parameters") return list_of(named_parameters(root, recurse), true, false);
    if (m == "buffers") return list_of(named_buffers(root, recurse), false, false);
    if (m == "named_buffers") return list_of(named_buffers(root, recurse), true, false);
    if (m == "children") return list_of(named_children(root), false, true);
    if (m == "named_children") return list_of(named_children(root), true, true);
    if (m == "modules") return list_of(named_modules(root), false, true);
    if (m == "named_modules") return list_of(named_modules(root), true, true);
  }

  // ModuleDict's views: children by name, through the module's own lookup.
  if (name.rfind("ModuleDict.", 0) == 0 && args.size() == 1 && args[0]->is(VTKind::NNModule)) {
    std::string m = name.substr(11);
    check_structure_unchanged(args[0]->value.as<ModuleObj>(), name + "()");
    std::vector<VT> out;
    for (const auto& [key, child] : args[0]->value.as<ModuleObj>()->modules) {
      VT k = const_vt(Value::str(key->s));
      if (m == "keys") out.push_back(k);
      else if (m == "values") out.push_back(module_getattr(args[0], key->s));
      else if (m == "items") out.push_back(vars::make_tuple({k, module_getattr(args[0], key->s)}));
    }
    if (m == "keys" || m == "values" || m == "items") return vars::make_list(std::move(out));
  }

  // Tensor methods (type_methods.cpp) on a tensor tracker.
  if (name.rfind("Tensor.", 0) == 0 && !args.empty() && args[0]->is(VTKind::Tensor)) {
    const auto& meta = args[0]->meta();
    std::string m = name.substr(7);
    if (m == "item" || m == "tolist") unsupported(BreakReason::tensor_to_python, m + "()");
    if (m == "numel" || m == "size" || m == "is_contiguous") ctx_.shape_read = true;
    if (m == "dim") return const_vt(Value::integer(int64_t(meta.sizes.size())));
    if (m == "numel") return const_vt(Value::integer(shape_numel(meta.sizes)));
    if (m == "is_contiguous") return const_vt(Value::boolean(meta.strides == contiguous_strides(meta.sizes)));
    if (m == "size") {
      if (args.size() == 1) {
        std::vector<VT> dims;
        for (int64_t s : meta.sizes) dims.push_back(const_vt(Value::integer(s)));
        return vars::make_tuple(std::move(dims));
      }
      if (!is_constant(args[1])) unsupported(BreakReason::unsupported, "size() of a non-constant dim");
      int64_t d = to_index(constant_value(args[1]), "size() dim");
      int64_t n = int64_t(meta.sizes.size());
      if (d < -n || d >= n) unsupported(BreakReason::unsupported, "size() dim out of range");
      return const_vt(Value::integer(meta.sizes[size_t(d < 0 ? d + n : d)]));
    }
    static const std::pair<const char*, const char*> conversions[] = {
        {"float", "float32"}, {"double", "float64"}, {"long", "int64"}, {"int", "int64"}, {"bool", "bool"}};
    for (const auto& [method, dtype] : conversions)
      if (m == method) return tensor_op(OpId::to, {args[0], const_vt(intern_value(dtype))});
  }

  // Methods of lists and dicts mutate the tracker; the residual code
  // replays the new contents onto the real object.
  if (name == "list.sort" && !args.empty() && args[0]->is(VTKind::List) && is_constant(args[0])) {
    // sort(reverse=...) folds on known items
    VT list = args[0];
    std::vector<Value> values{constant_value(list)};
    for (size_t i = 1; i < args.size(); ++i) values.push_back(constant_value(args[i]));
    ctx_.vm.call(builtin, CallArgs{values.data(), values.size(), kwnames});
    list->items.clear();
    for (const Value& x : values[0].as<ListObj>()->items) list->items.push_back(from_value(x));
    ctx_.side_effects.mark_mutated(list);
    return none_vt();
  }
  if (name.rfind("list.", 0) == 0 && !args.empty() && args[0]->is(VTKind::List) && nkw == 0) {
    VT list = args[0];
    std::string m = name.substr(5);
    if (m == "append" && args.size() == 2) {
      list->items.push_back(args[1]);
      ctx_.side_effects.mark_mutated(list);
      return none_vt();
    }
    if (m == "extend" && args.size() == 2) {
      for (VT& v : unpack(args[1])) list->items.push_back(v);
      ctx_.side_effects.mark_mutated(list);
      return none_vt();
    }
    if (m == "pop" && args.size() <= 2 && !list->items.empty()) {
      int64_t i = args.size() == 2 ? to_index(constant_value(args[1]), "pop index") : -1;
      int64_t n = int64_t(list->items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) unsupported(BreakReason::unsupported, "pop index out of range");
      VT v = list->items[size_t(i)];
      list->items.erase(list->items.begin() + i);
      ctx_.side_effects.mark_mutated(list);
      return v;
    }
    if (m == "insert" && args.size() == 3 && is_constant(args[1])) {
      int64_t n = int64_t(list->items.size());
      int64_t i = to_index(constant_value(args[1]), "insert index");
      if (i < 0) i = std::max<int64_t>(0, i + n);
      list->items.insert(list->items.begin() + std::min(i, n), args[2]);
      ctx_.side_effects.mark_mutated(list);
      return none_vt();
    }
    if (m == "reverse" && args.size() == 1) {
      std::reverse(list->items.begin(), list->items.end());
      ctx_.side_effects.mark_mutated(list);
      return none_vt();
    }
    if (m == "copy" && args.size() == 1) return vars::make_list(list->items);
    if (m == "remove" && args.size() == 2 && is_constant(args[1])) {
      Value x = constant_value(args[1]);
      for (size_t i = 0; i < list->items.size(); ++i)
        if (is_constant(list->items[i]) && values_equal(constant_value(list->items[i]), x)) {
          list->items.erase(list->items.begin() + ptrdiff_t(i));
          ctx_.side_effects.mark_mutated(list);
          return none_vt();
        }
      unsupported(BreakReason::unsupported, "list.remove of a missing item");
    }
    if ((m == "index" || m == "count") && args.size() == 2 && is_constant(args[1]) && is_constant(list)) {
      Value real = constant_value(list);
      return from_value(ctx_.vm.call(builtin, {real, constant_value(args[1])}));
    }
    if (m == "sort" && args.size() == 1 && is_constant(list)) {
      Value real = constant_value(list);
      ctx_.vm.call(builtin, {real});
      list->items.clear();
      for (const Value& x : real.as<ListObj>()->items) list->items.push_back(from_value(x));
      ctx_.side_effects.mark_mutated(list);
      return none_vt();
    }
    if (m == "clear" && args.size() == 1) {
      list->items.clear();
      ctx_.side_effects.mark_mutated(list);
      return none_vt();
    }
  }
  if (name.rfind("dict.", 0) == 0 && !args.empty() && args[0]->is(VTKind::ConstDict) && nkw == 0) {
    VT d = args[0];
    std::string m = name.substr(5);
    if (m == "keys" || m == "values" || m == "items") {
      std::vector<VT> out;
      for (size_t i = 0; i < d->keys.size(); ++i) {
        if (m == "keys") out.push_back(const_vt(d->keys[i]));
        else if (m == "values") out.push_back(d->items[i]);
        else out.push_back(vars::make_tuple({const_vt(d->keys[i]), d->items[i]}));
      }
      return vars::make_list(std::move(out));
    }
    auto find = [&](const Value& k) -> int {
      for (size_t i = 0; i < d->keys.size(); ++i)
        if (values_equal(d->keys[i], k)) return int(i);
      return -1;
    };
    if (m == "copy" && args.size() == 1) return vars::make_const_dict(d->keys, d->items);
    if (m == "update" && args.size() == 2 && args[1]->is(VTKind::ConstDict)) {
      for (size_t i = 0; i < args[1]->keys.size(); ++i) {
        int at = find(args[1]->keys[i]);
        if (at >= 0) d->items[size_t(at)] = args[1]->items[i];
        else {
          d->keys.push_back(args[1]->keys[i]);
          d->items.push_back(args[1]->items[i]);
        }
      }
      ctx_.side_effects.mark_mutated(d);
      return none_vt();
    }
    if ((m == "pop" || m == "setdefault") && (args.size() == 2 || args.size() == 3) && is_constant(args[1])) {
      Value k = constant_value(args[1]);
      int at = find(k);
      if (m == "setdefault") {
        if (at >= 0) return d->items[size_t(at)];
        d->keys.push_back(k);
        d->items.push_back(args.size() == 3 ? args[2] : none_vt());
        ctx_.side_effects.mark_mutated(d);
        return d->items.back();
      }
      if (at < 0) {
        if (args.size() == 3) return args[2];
        unsupported(BreakReason::unsupported, "dict.pop of a missing key");
      }
      VT v = d->items[size_t(at)];
      d->keys.erase(d->keys.begin() + at);
      d->items.erase(d->items.begin() + at);
      ctx_.side_effects.mark_mutated(d);
      return v;
    }
    if (m == "clear" && args.size() == 1) {
      d->keys.clear();
      d->items.clear();
      ctx_.side_effects.mark_mutated(d);
      return none_vt();
    }
    if (m == "get" && args.size() >= 2 && is_constant(args[1])) {
      Value k = constant_value(args[1]);
      for (size_t i = 0; i < d->keys.size(); ++i)
        if (values_equal(d->keys[i], k)) return d->items[i];
      return args.size() == 3 ? args[2] : none_vt();
    }
  }

  // format()/ascii() of a tensor read its value (torch formats a 0-d
  // tensor's item).
  if ((name == "format" || name == "ascii") && !args.empty() && args[0]->is(VTKind::Tensor))
    unsupported(BreakReason::tensor_to_python, name + "()");
  // A mutating method of a set made in this trace: applied to a copy that
  // becomes the tracker's value (never to a SetObj someone else holds).
  if (name.rfind("set.", 0) == 0 && !args.empty() && args[0]->is(VTKind::Constant) && args[0]->value.is(Kind::Set) &&
      !is_pure(name)) {
    VT set = args[0];
    if (set->source) unsupported(BreakReason::unsupported, name + "() on a set the function did not make");
    std::vector<Value> values{set_copy(set->value, false)};
    for (size_t i = 1; i < args.size(); ++i) {
      if (!is_constant(args[i])) unsupported(BreakReason::unsupported, name + "() of " + args[i]->str());
      values.push_back(constant_value(args[i]));
    }
    Value result;
    try {
      result = b->fn(ctx_.vm, *b, CallArgs{values.data(), values.size(), kwnames});
    } catch (const Error&) {
      unsupported(BreakReason::unsupported, name + "() raising an error");
    }
    set->value = values[0];
    return from_value(result);
  }

  if (name == "sum" && !args.empty() && args[0]->is(VTKind::Tensor)) return tensor_op(OpId::sum, args, kwnames);
  if (name == "sum" && nkw == 0 && !args.empty() && !is_constant(args[0])) {
    // Python's sum over items that include tensors: start + x0 + x1 + ...
    VT total = args.size() > 1 ? args[1] : const_vt(Value::integer(0));
    for (const VT& x : unpack(args[0])) total = binary(BinOp::ADD, total, realize(x), false);
    return total;
  }

  // Python builtins that mean something for trackers.
  if (nkw == 0) {
    if (name == "len" && args.size() == 1) {
      const VT& x = args[0];
      if (x->is(VTKind::List) || x->is(VTKind::Tuple) || x->is(VTKind::ConstDict))
        return const_vt(Value::integer(int64_t(x->items.size())));
      if (x->is(VTKind::Tensor) && !x->meta().sizes.empty()) {
        ctx_.shape_read = true;
        return const_vt(Value::integer(x->meta().sizes[0]));
      }
      if (x->is(VTKind::NNModule)) {
        check_structure_unchanged(x->value.as<ModuleObj>(), "len() of a module");
        return const_vt(Value::integer(module_len(x->value)));
      }
    }
    // isinstance(x, T) or isinstance(x, (T, U)): types are Builtin or Class
    // trackers; x is represented by a value of its Python type.
    auto classinfo = [&](auto& self, const VT& t) -> Value {
      VT r = realize(t);
      if (r->is(VTKind::Builtin) || (r->is(VTKind::Opaque) && r->value.is(Kind::Class))) return r->value;
      if (r->is(VTKind::Tuple)) {
        std::vector<Value> items;
        for (const VT& x : r->items) {
          Value v = self(self, x);
          if (v.is_null()) return Value::null();
          items.push_back(v);
        }
        return make_tuple(std::move(items));
      }
      return Value::null();
    };
    Value types = name == "isinstance" && args.size() == 2 ? classinfo(classinfo, args[1]) : Value::null();
    if (!types.is_null()) {
      bool r = false;
      try {
        r = truth(ctx_.vm.call(builtin, {type_sample(args[0]), types}));
      } catch (const Error&) {
        unsupported(BreakReason::unsupported, "isinstance() raising an error");
      }
      return const_vt(Value::boolean(r));
    }
    if ((name == "int" || name == "float" || name == "bool") && args.size() == 1 && args[0]->is(VTKind::Tensor))
      unsupported(BreakReason::tensor_to_python, name + "()");
    if ((name == "abs") && args.size() == 1 && args[0]->is(VTKind::Tensor)) return tensor_op(OpId::abs, args);
    if (name == "pow" && args.size() == 2 && any_tensor()) return binary(BinOp::POW, args[0], args[1], false);
    if ((name == "list" || name == "tuple") && args.size() <= 1) {
      std::vector<VT> items = args.empty() ? std::vector<VT>{} : unpack(args[0]);
      return name == "list" ? vars::make_list(std::move(items)) : vars::make_tuple(std::move(items));
    }
    if (name == "enumerate" && !args.empty() && !args[0]->is(VTKind::Constant)) {
      int64_t start = args.size() > 1 ? to_index(constant_value(args[1]), "enumerate start") : 0;
      std::vector<VT> out;
      for (VT& v : unpack(args[0])) out.push_back(vars::make_tuple({const_vt(Value::integer(start++)), v}));
      return vars::make_iterator(std::move(out));
    }
    if (name == "zip" && !any_tensor()) {
      std::vector<std::vector<VT>> seqs;
      for (VT& a : args) seqs.push_back(unpack(a));
      size_t n = seqs.empty() ? 0 : SIZE_MAX;
      for (auto& s : seqs) n = std::min(n, s.size());
      std::vector<VT> out;
      for (size_t i = 0; i < n; ++i) {
        std::vector<VT> row;
        for (auto& s : seqs) row.push_back(s[i]);
        out.push_back(vars::make_tuple(std::move(row)));
      }
      return vars::make_iterator(std::move(out));
    }
    if (name == "reversed" && args.size() == 1 && !args[0]->is(VTKind::Constant)) {
      std::vector<VT> items = unpack(args[0]);
      std::reverse(items.begin(), items.end());
      return vars::make_iterator(std::move(items));
    }
    if ((name == "getattr" || name == "hasattr") && (args.size() == 2 || args.size() == 3) && is_constant(args[1]) &&
        constant_value(args[1]).is(Kind::Str)) {
      const std::string attr = constant_value(args[1]).as_str();
      if (args[0]->is(VTKind::NNModule)) {
        static const Ref<StrObj> getattr_name = intern("__getattr__");
        auto* mod = args[0]->value.as<ModuleObj>();
        bool custom = mod->cls->lookup(getattr_name.get()) != nullptr;
        bool overlaid = ctx_.attr_overlay.count({args[0]->value.obj(), attr}) > 0;
        if (!custom && !overlaid && module_lookup(args[0]->value, intern(attr).get()).is_null()) {
          if (name == "hasattr") return const_vt(Value::boolean(false));
          if (args.size() == 3) return args[2];
        }
      }
      try {
        VT v = get_attr(args[0], attr);
        return name == "hasattr" ? const_vt(Value::boolean(true)) : v;
      } catch (const Unsupported&) {
        if (args[0]->is(VTKind::Constant) || args[0]->is(VTKind::Tensor)) {
          if (name == "hasattr") return const_vt(Value::boolean(false));
          if (args.size() == 3) return args[2];
        }
        throw;
      }
    }
  }

  // Everything else folds when all arguments are known values.
  if (is_pure(name)) {
    std::vector<Value> values;
    for (const VT& a : args) {
      if (!is_constant(a)) unsupported(BreakReason::unsupported, name + "() of " + a->str());
      values.push_back(constant_value(a));
    }
    try {
      return from_value(b->fn(ctx_.vm, *b, CallArgs{values.data(), values.size(), kwnames}));
    } catch (const Error&) {
      unsupported(BreakReason::unsupported, name + "() raising an error");
    }
  }
  unsupported(BreakReason::unsupported, "call to " + name + "()");
}

}  // namespace kiln::interpreter

// Builtins during a trace. Registry ops become graph nodes. Every other
// builtin is treated as its row says (runtime/semantics/builtins.def, and the method
// tables for methods): Fold calls it now on known values, Trace runs its
// handler here, Effect breaks the graph so the call runs when the program
// runs. Method handlers (list, dict, set, Tensor, Module) live in
// translator_methods.cpp.
#include "interpreter/frame_cache.h"
#include "interpreter/instruction_translator.h"
#include "interpreter/nn_module.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;

// The handler of each Trace row, indexed by BuiltinId (null for the others):
// a Trace row without a handler does not link.
using TraceHandler = VT (InstructionTranslator::*)(BuiltinCall&);
#define KILN_HANDLER_Trace(name) &InstructionTranslator::trace_##name,
#define KILN_HANDLER_Fold(name) nullptr,
#define KILN_HANDLER_Effect(name) nullptr,
static const TraceHandler kTraceHandlers[] = {
#define KILN_NATIVE(name, signature, type_of, how) KILN_HANDLER_##how(name)
#define KILN_OWN KILN_NATIVE
#define KILN_PYTHON(name, how) nullptr,
#include "runtime/semantics/builtins.def"
#undef KILN_NATIVE
#undef KILN_OWN
#undef KILN_PYTHON
};
#undef KILN_HANDLER_Trace
#undef KILN_HANDLER_Fold
#undef KILN_HANDLER_Effect
static_assert(std::size(kTraceHandlers) == size_t(kNumBuiltinRows), "one handler slot per builtins.def row");

VT InstructionTranslator::call_builtin(const Value& builtin, std::vector<VT> args, const TupleObj* kwnames) {
  // super(), delattr, a property's setattr, getattr/hasattr of a deleted
  // name, a built-in forward called as a method (translator_classes.cpp).
  if (VT r = trace_class_builtin(builtin, args, kwnames)) return r;
  const auto* b = builtin.as<BuiltinObj>();
  // A tensor op takes symbolic sizes as they are (view(B, T, C) of a
  // dynamic input stays symbolic); every other builtin reads numbers.
  for (VT& a : args) a = realize_sym(a);
  if (b->op >= 0) return tensor_op(OpId(b->op), args, kwnames);
  if (b->row == int(BuiltinId::b_max) || b->row == int(BuiltinId::b_min))
    if (VT r = symbolic_min_max(b->row == int(BuiltinId::b_max), args, kwnames)) return r;
  // isinstance / type of a symbolic size: an int whatever the size, so the
  // hint answers without specializing it (transformers' mask code asks
  // isinstance(q_offset, torch.Tensor) of the cache length every step).
  if ((b->row == int(BuiltinId::b_isinstance) || b->row == int(BuiltinId::b_type)) && !args.empty() &&
      args[0]->is(VTKind::SymInt))
    args[0] = const_vt(args[0]->value);
  for (VT& a : args) a = realize(a);
  BuiltinCall call{builtin, *b, args, kwnames ? kwnames->items.size() : 0, kwnames};
  switch (b->how) {
    case BuiltinHow::Effect: unsupported(BreakReason::side_effect_builtin, b->name + "()");
    case BuiltinHow::Trace:
      if (b->row >= 0) {
        if (VT r = (this->*kTraceHandlers[b->row])(call)) return r;
        break;  // the handler declined: the row is pure, fold it
      }
      // A method: its type's handler answers or breaks (a method of a
      // mutable type never folds on a copy of its receiver).
      return trace_method(call);
    case BuiltinHow::Fold: break;
  }
  return fold_builtin(call);
}

// Calls the builtin now on known values: its result is a constant of the
// graph. A traced argument or an error breaks the graph (the VM then makes
// the call, and raises the error, when the program runs).
VT InstructionTranslator::fold_builtin(BuiltinCall& call) {
  // str() / repr() of a class the trace pins: its language's text, a
  // constant (a kiln class prints without its module).
  if ((call.b.row == int(BuiltinId::b_str) || call.b.row == int(BuiltinId::b_repr)) && call.args.size() == 1 &&
      !call.nkw && call.args[0]->is(VTKind::Opaque)) {
    const Value& cls = call.args[0]->value;
    const auto* f = cls.is(Kind::Foreign) ? cls.as<runtime::ForeignObj>() : nullptr;
    std::string text;
    const bool known = f ? f->vt->class_repr && f->vt->class_repr(f->handle, text)
                         : cls.is(Kind::Class) && runtime::host_class_repr(cls.as<runtime::ClassObj>(), text);
    if (known) return variables::make_constant(Value::str(text));
  }
  // sorted(d), min(d), max(d): a dict iterates over its keys, which the
  // trace knows, whatever its values are. (Not set(d): CPython sizes a
  // set made from a dict by the dict's size, so its order is not that of
  // a set made from the keys' list; tests/python/test_set_order.py.)
  const int row = call.b.row;
  const bool iterates_first = row == int(BuiltinId::b_sorted) ||
                              ((row == int(BuiltinId::b_min) || row == int(BuiltinId::b_max)) &&
                               call.args.size() - call.nkw == 1);
  if (iterates_first && !call.args.empty() && call.args.size() > call.nkw && call.args[0]->is(VTKind::ConstDict))
    call.args[0] = variables::make_constant(make_list(std::vector<Value>(call.args[0]->keys)));
  std::vector<Value> values;
  for (const VT& a : call.args) {
    if (a->is(VTKind::Tensor)) unsupported(BreakReason::tensor_to_python, call.b.name + "()");
    if (!is_constant(a)) unsupported(BreakReason::builtin_of_traced_value, call.b.name + "() of " + a->str());
    values.push_back(constant_value(a));
  }
  // map()/filter() results call back as from_value consumes them.
  CallContext::Scope scope(&ctx_.vm);
  try {
    return from_value(call.b.fn(ctx_.vm, call.b, CallArgs{values.data(), values.size(), call.kwnames}));
  } catch (const Error& e) {
    unsupported(BreakReason::python_error, call.b.name + "(): " + e.what());
  }
}

// ---- Trace rows: return null to fold -----------------------------------------

// super(): trace_class_builtin resolved every form it can; what is left
// (keywords, an unknown first argument) never folds: zero-argument super
// reads the running frame, which a fold has not.
VT InstructionTranslator::trace_super(BuiltinCall& c) {
  unsupported(BreakReason::builtin_of_traced_value, "super() of " + (c.args.empty() ? std::string("nothing")
                                                                                     : c.args[0]->str()));
}

VT InstructionTranslator::trace_len(BuiltinCall& c) {
  if (c.nkw || c.args.size() != 1) return nullptr;
  VT x = c.args[0];
  if (x->is(VTKind::UnspecializedNNModule)) x = nn_module::specialized(*this, x);
  if (x->is(VTKind::List) || x->is(VTKind::Tuple) || x->is(VTKind::ConstDict))
    return const_vt(Value::integer(int64_t(x->items.size())));
  if (x->is(VTKind::Tensor)) {
    if (x->meta().sizes.empty()) return nullptr;  // len() of a 0-d tensor: the fold raises the TypeError
    return size_of(x, 0);
  }
  if (x->is(VTKind::NNModule)) {
    nn_module::check_structure_unchanged(*this, x->value.as<ModuleObj>(), "len() of a module");
    return const_vt(Value::integer(module_len(x->value)));
  }
  return python_len(x);  // null: folded on Python values, or the break
}

// A value of the same Python type as the tracker (isinstance, type).
Value InstructionTranslator::type_sample(const VT& v) {
  switch (v->kind) {
    case VTKind::Tensor: {
      // A frame over the embedder's tensors asks about what the program
      // holds there: torch's tensor, not kiln's (the embedder decides which
      // frames those are: python/src/torch_values.cpp, where a tensor read
      // from an object counts too, not only the frame's arguments); kiln's
      // own Python (its torch-API adapters) asks about kiln's.
      Tensor meta = output_graph::meta_tensor(v->meta());
      // A module's parameter (a get_attr of the graph): a Parameter.
      if (v->node && v->node->op == output_graph::NodeOp::GetAttr)
        if (const Value* attr = ctx_.out.graph().attr_of(*v->node); attr && attr->is(Kind::Tensor) && attr->as_tensor().is_parameter())
          meta = meta.as_parameter();
      if (ctx_.python_frames && !is_own_code(code_->filename))
        if (Value host = host_tensor_sample(meta); !host.is_null()) return host;
      return Value::tensor(meta);
    }
    case VTKind::List: return make_list({});
    case VTKind::Tuple:
      if (is_module_slice(v)) unsupported(BreakReason::untraced_object, "the type of a slice of a module container");
      return make_tuple({});
    case VTKind::ConstDict: return make_dict();
    case VTKind::Iterator:
      // A generator's type is no list iterator's: CPython answers.
      if (vars::lazy_iteration(*v) == vars::LazyIteration::Generator)
        unsupported(BreakReason::untraced_object, "the type of a generator");
      return get_iter(make_list({}));
    case VTKind::UnspecializedNNModule:
    case VTKind::NNModule:
    case VTKind::Constant:
    case VTKind::UserFunction:
    case VTKind::Builtin:
    case VTKind::Opaque: return v->value;
    default: return Value::null();
  }
}

// A class tracker's class, or a tuple of them, nested (isinstance's and
// issubclass's classinfo); Null for anything else. A class the trace holds
// is fixed: a builtin, or one its guards pin (or type() of a pinned object).
Value InstructionTranslator::classinfo_value(const VT& t) {
  VT r = realize(t);
  if (r->is(VTKind::Builtin) || (r->is(VTKind::Opaque) && (r->value.is(Kind::Class) || r->value.is(Kind::Foreign))))
    return r->value;
  if (r->is(VTKind::Tuple)) {
    std::vector<Value> items;
    for (const VT& x : r->items) {
      Value v = classinfo_value(x);
      if (v.is_null()) return Value::null();
      items.push_back(v);
    }
    return make_tuple(std::move(items));
  }
  return Value::null();
}

// isinstance(x, T) or isinstance(x, (T, U)): the types are Builtin, Class
// or Foreign (a Python class) trackers; x is represented by a value of its
// Python type.
VT InstructionTranslator::trace_isinstance(BuiltinCall& c) {
  if (c.nkw || c.args.size() != 2) return nullptr;
  Value types = classinfo_value(c.args[1]);
  Value sample = type_sample(c.args[0]);
  if (types.is_null() || sample.is_null()) return nullptr;
  try {
    return const_vt(ctx_.vm.call(c.builtin, {sample, types}));
  } catch (const Error& e) {
    unsupported(BreakReason::python_error, std::string("isinstance(): ") + e.what());
  }
}

// issubclass(cls, classinfo) of classes the trace holds (copy.deepcopy
// asks issubclass(type(x), type)): answered now, as isinstance is.
VT InstructionTranslator::trace_issubclass(BuiltinCall& c) {
  if (c.nkw || c.args.size() != 2) return nullptr;
  Value cls = classinfo_value(c.args[0]);
  Value types = classinfo_value(c.args[1]);
  if (cls.is_null() || types.is_null()) return nullptr;  // the fold decides (and breaks on a traced value)
  try {
    return const_vt(ctx_.vm.call(c.builtin, {cls, types}));
  } catch (const Error& e) {
    unsupported(BreakReason::python_error, std::string("issubclass(): ") + e.what());
  }
}

// type(x): the type object, a constant (x's type is what its guards pinned).
VT InstructionTranslator::trace_type(BuiltinCall& c) {
  if (c.nkw || c.args.size() != 1) return nullptr;
  Value sample = type_sample(c.args[0]);
  if (sample.is_null()) return nullptr;
  Value t = ctx_.vm.call(c.builtin, {sample});
  return t.is(Kind::Builtin) ? vars::make_builtin(t) : vars::make_opaque(t, nullptr);
}

// id(x) (copy.deepcopy keys its memo by it). An object the program passed
// in, which the trace reaches at a source: its own id, under a guard that
// it is that very object (Dynamo's ID_MATCH). Something with no Python
// object yet (a container or object the trace made, a constant): a
// made-up id, distinct for distinct live trackers, which code the program
// sees never gets (fake_id_step: residual.cpp restarts the trace before
// this step instead). Dynamo's FakeIdVariable does the same.
VT InstructionTranslator::trace_id(BuiltinCall& c) {
  if (c.nkw || c.args.size() != 1) return nullptr;  // the fold raises CPython's TypeError
  const VT& x = c.args[0];
  auto made_up = [&](int64_t id) {
    VT v = const_vt(Value::integer(id));
    v->fake_id_step = root_step();
    return v;
  };
  auto address = [](const void* p) { return int64_t(reinterpret_cast<uintptr_t>(p)); };
  // Python's object, or (a KBC program) the VM's own, reached at a source.
  const bool owners_object = x->value.is(Kind::Foreign) || (!ctx_.python_frames && x->value.is_heap());
  if (x->source && !x->made && !x->is(VTKind::Constant) && !x->is(VTKind::Tensor) && owners_object) {
    ctx_.builder.identity_guard(x->source, x->value);
    return const_vt(Value::integer(address(object_identity(x->value))));
  }
  // One tracker per object the trace made. (A tuple read at a source is
  // a tracker per read: immutable, so only id() itself could tell.)
  if (x->made || x->is(VTKind::Tuple) || ((x->is(VTKind::List) || x->is(VTKind::ConstDict)) && !x->source))
    return made_up(address(x.get()));
  if (x->is(VTKind::Constant)) {  // equal immediates alike; a heap value by its kiln object
    const Value v = x->value;
    return made_up(c.b.fn(ctx_.vm, c.b, CallArgs{&v, 1, nullptr}).as_int());
  }
  unsupported(BreakReason::side_effect_builtin, "id() of " + x->str());
}

VT InstructionTranslator::trace_callable(BuiltinCall& c) {
  if (c.nkw || c.args.size() != 1) return nullptr;
  switch (c.args[0]->kind) {
    case VTKind::UserFunction:
    case VTKind::UserMethod:
    case VTKind::Builtin:
    case VTKind::NestedFunction:
    case VTKind::NNModule:
    case VTKind::UnspecializedNNModule: return const_vt(Value::boolean(true));
    case VTKind::Tuple: return const_vt(Value::boolean(is_module_slice(c.args[0])));  // a module is callable
    case VTKind::Tensor:
    case VTKind::List:
    case VTKind::ConstDict:
    case VTKind::Iterator: return const_vt(Value::boolean(false));
    default: return nullptr;
  }
}

// int(t), float(t), bool(t), format(t), ascii(t): a tensor's value, read
// into Python.
VT InstructionTranslator::reads_tensor_value(BuiltinCall& c) {
  if (!c.args.empty() && c.args[0]->is(VTKind::Tensor)) unsupported(BreakReason::tensor_to_python, c.b.name + "()");
  return nullptr;
}
VT InstructionTranslator::trace_int(BuiltinCall& c) { return reads_tensor_value(c); }
VT InstructionTranslator::trace_float(BuiltinCall& c) { return reads_tensor_value(c); }
VT InstructionTranslator::trace_bool(BuiltinCall& c) { return reads_tensor_value(c); }
VT InstructionTranslator::trace_format(BuiltinCall& c) { return reads_tensor_value(c); }
VT InstructionTranslator::trace_ascii(BuiltinCall& c) { return reads_tensor_value(c); }

VT InstructionTranslator::trace_abs(BuiltinCall& c) {
  if (!c.nkw && c.args.size() == 1 && c.args[0]->is(VTKind::Tensor)) return tensor_op(OpId::abs, c.args);
  return nullptr;
}
VT InstructionTranslator::trace_pow(BuiltinCall& c) {
  if (!c.nkw && c.args.size() == 2 && (c.args[0]->is(VTKind::Tensor) || c.args[1]->is(VTKind::Tensor)))
    return binary(BinOp::POW, c.args[0], c.args[1], false);
  return nullptr;
}

// KBC's sum of a tensor is the registry op; Python's sum over items that
// include tensors (a tensor's own items are its rows) is start + x0 + x1 ...
VT InstructionTranslator::trace_sum(BuiltinCall& c) {
  if (c.b.kbc_dispatching && !c.args.empty() && c.args[0]->is(VTKind::Tensor))
    return tensor_op(OpId::sum, c.args, c.kwnames);
  if (c.nkw || c.args.empty() || is_constant(c.args[0])) return nullptr;
  VT total = c.args.size() > 1 ? c.args[1] : const_vt(Value::integer(0));
  for (const VT& x : unpack(c.args[0])) total = binary(BinOp::ADD, total, realize(x), false);
  return total;
}

// all() / any() over what the trace holds (a generator expression's items,
// a list of known values): Python's loop item by item, stopping where
// Python stops, so an iterator keeps its rest. A constant folds; an item
// whose truth is data breaks (truth_of).
VT InstructionTranslator::trace_all(BuiltinCall& c) { return short_circuit(c, false); }
VT InstructionTranslator::trace_any(BuiltinCall& c) { return short_circuit(c, true); }
VT InstructionTranslator::short_circuit(BuiltinCall& c, bool stop_at) {
  if (c.nkw || c.args.size() != 1 || is_constant(c.args[0])) return nullptr;
  VT it = iter_of(c.args[0]);
  VT item;
  while (next_item(it, item))
    if (truth_of(realize(item)) == stop_at) return const_vt(Value::boolean(stop_at));
  return const_vt(Value::boolean(!stop_at));
}

// KBC's slice(x, dim, start, end): the registry op on a tensor; Python's
// slice objects fold.
VT InstructionTranslator::trace_slice(BuiltinCall& c) {
  if (c.b.kbc_dispatching && !c.args.empty() && c.args[0]->is(VTKind::Tensor))
    return tensor_op(OpId::slice, c.args, c.kwnames);
  return nullptr;
}

VT InstructionTranslator::trace_list(BuiltinCall& c) {
  if (c.nkw || c.args.size() > 1) return nullptr;
  return vars::make_list(c.args.empty() ? std::vector<VT>{} : unpack(c.args[0]));
}
VT InstructionTranslator::trace_tuple(BuiltinCall& c) {
  if (c.nkw || c.args.size() > 1) return nullptr;
  return vars::make_tuple(c.args.empty() ? std::vector<VT>{} : unpack(c.args[0]));
}
// dict(pairs, **kw) over trackers: a dict tracker, when every key is a
// literal (a ModelOutput's dict(self.items())); all-constant calls fold.
VT InstructionTranslator::trace_dict(BuiltinCall& c) {
  const size_t npos = c.args.size() - c.nkw;
  if (npos > 1) return nullptr;
  bool known = true;
  for (const VT& a : c.args) known = known && is_constant(a);
  if (known) return nullptr;
  std::vector<Value> keys;
  std::vector<VT> values;
  auto put = [&](const Value& k, const VT& v) {
    if (!vars::is_literal(k)) unsupported(BreakReason::builtin_of_traced_value, "dict() with a key that is no literal");
    vars::dict_set(keys, values, k, v);
  };
  if (npos == 1) {
    const VT src = realize(c.args[0]);
    if (src->is(VTKind::ConstDict)) {
      for (size_t i = 0; i < src->keys.size(); ++i) put(src->keys[i], src->items[i]);
    } else {
      for (const VT& pair0 : unpack(src)) {
        const VT pair = realize(pair0);
        if (!(pair->is(VTKind::Tuple) || pair->is(VTKind::List)) || pair->items.size() != 2 ||
            !is_constant(pair->items[0]))
          return nullptr;
        put(constant_value(pair->items[0]), pair->items[1]);
      }
    }
  }
  for (size_t i = 0; i < c.nkw; ++i) put(c.kwnames->items[i], c.args[npos + i]);
  return vars::make_const_dict(std::move(keys), std::move(values));
}

VT InstructionTranslator::trace_iter(BuiltinCall& c) {
  if (c.nkw || c.args.size() != 1 || is_constant(c.args[0])) return nullptr;
  return iter_of(c.args[0]);  // as GET_ITER: a list's iterator reads the list live
}

// next(it[, default]) of an iterator the trace holds: its next item (a
// generator's body runs to its next yield); exhausted, the default or
// StopIteration, which an inlined handler may catch (else the break, and
// CPython raises it).
VT InstructionTranslator::trace_next(BuiltinCall& c) {
  if (c.nkw || c.args.empty() || c.args.size() > 2) return nullptr;
  VT it = realize(c.args[0]);
  if (!it->is(VTKind::Iterator)) return nullptr;
  VT out;
  if (next_item(it, out)) return out;
  if (c.args.size() == 2) return c.args[1];
  throw_error(ErrorKind::StopIteration, "");
}

VT InstructionTranslator::trace_enumerate(BuiltinCall& c) {
  if (c.nkw || c.args.empty() || c.args.size() > 2 || c.args[0]->is(VTKind::Constant)) return nullptr;
  if (c.args.size() > 1 && !is_constant(c.args[1])) return nullptr;
  int64_t start = c.args.size() > 1 ? to_index(constant_value(c.args[1]), "enumerate start") : 0;
  VT it = vars::make_lazy_iterator(iters_of(c.args.begin(), c.args.begin() + 1), nullptr, vars::LazyIteration::Enumerate);
  it->value = Value::integer(start);
  return it;
}

VT InstructionTranslator::trace_zip(BuiltinCall& c) {
  // strict= (3.10+) as a known value: torch's RNNs zip their weights so.
  // (c.args is left as it came: a declined call folds from it.)
  if (c.nkw > 1 || (c.nkw == 1 && (c.kwnames->items[0].as_str() != "strict" || !is_constant(c.args.back()))))
    return nullptr;
  const auto last = c.args.end() - ptrdiff_t(c.nkw);
  for (auto a = c.args.begin(); a != last; ++a)
    if ((*a)->is(VTKind::Tensor)) return nullptr;
  const bool strict = c.nkw == 1 && runtime::truth(constant_value(c.args.back()));
  return vars::make_lazy_iterator(iters_of(c.args.begin(), last), nullptr,
                                  strict ? vars::LazyIteration::ZipStrict : vars::LazyIteration::Zip);
}

std::vector<VT> InstructionTranslator::iters_of(std::vector<VT>::const_iterator first,
                                                std::vector<VT>::const_iterator last) {
  std::vector<VT> out;
  for (auto it = first; it != last; ++it) out.push_back(iter_of(*it));
  return out;
}

VT InstructionTranslator::trace_reversed(BuiltinCall& c) {
  if (c.nkw || c.args.size() != 1 || c.args[0]->is(VTKind::Constant)) return nullptr;
  std::vector<VT> items = unpack(c.args[0]);
  std::reverse(items.begin(), items.end());
  return vars::make_iterator(std::move(items));
}

// map(f, xs, ...) and filter(f, xs): lazy iterators over their arguments'
// iterators; the function is called (inlined) as the loop advances, so its
// effects interleave with the loop body's as in Python (next_item).
VT InstructionTranslator::trace_map(BuiltinCall& c) {
  if (c.nkw || c.args.size() < 2) return nullptr;
  return vars::make_lazy_iterator(iters_of(c.args.begin() + 1, c.args.end()), c.args[0], vars::LazyIteration::Map);
}
VT InstructionTranslator::trace_filter(BuiltinCall& c) {
  if (c.nkw || c.args.size() != 2) return nullptr;
  return vars::make_lazy_iterator(iters_of(c.args.begin() + 1, c.args.end()), c.args[0], vars::LazyIteration::Filter);
}

VT InstructionTranslator::trace_getattr(BuiltinCall& c) { return getattr_or_hasattr(c, false); }
VT InstructionTranslator::trace_hasattr(BuiltinCall& c) { return getattr_or_hasattr(c, true); }
VT InstructionTranslator::getattr_or_hasattr(BuiltinCall& c, bool has) {
  if (c.nkw || (c.args.size() != 2 && c.args.size() != 3) || !is_constant(c.args[1]) ||
      !constant_value(c.args[1]).is(Kind::Str))
    return nullptr;
  VT obj = c.args[0];
  if (obj->is(VTKind::UnspecializedNNModule)) obj = nn_module::specialized(*this, obj);
  const std::string attr = constant_value(c.args[1]).as_str();
  if (obj->is(VTKind::NNModule)) {
    static const Ref<StrObj> getattr_name = intern("__getattr__");
    auto* mod = obj->value.as<ModuleObj>();
    bool custom = mod->cls->lookup(getattr_name.get()) != nullptr;
    bool overlaid = ctx_.attr_overlay.count({obj->value.obj(), attr}) > 0;
    if (!custom && !overlaid && module_lookup(obj->value, intern(attr).get()).is_null()) {
      if (has) return const_vt(Value::boolean(false));
      if (c.args.size() == 3) return c.args[2];
    }
  }
  try {
    VT v = get_attr(obj, attr);
    return has ? const_vt(Value::boolean(true)) : v;
  } catch (const Unsupported& u) {
    // Python's lookup proved the name missing (guarded absent), in a
    // Python object's own __getattribute__ too: getattr catches that
    // AttributeError, as CPython's does.
    if (obj->is(VTKind::Constant) || obj->is(VTKind::Tensor) || u.missing_attribute) {
      if (has) return const_vt(Value::boolean(false));
      if (c.args.size() == 3) return c.args[2];
    }
    throw;
  } catch (const Error& e) {
    // An AttributeError raised in the trace (a property's getter, inside
    // a try an inlined frame has): getattr catches it, as CPython's does.
    if (!error_kind_is(e.kind(), ErrorKind::AttributeError) || (!has && c.args.size() != 3)) throw;
    return has ? const_vt(Value::boolean(false)) : c.args[2];
  }
}

// setattr on a module with a constant name is an attribute store, replayed
// after the graph; any other setattr acts on an object now, so it runs at
// run time. (Never declines: folding would store into the real object
// while tracing.)
VT InstructionTranslator::trace_setattr(BuiltinCall& c) {
  // (a module's property: trace_class_builtin ran its setter already)
  const auto& a = c.args;
  if (a.size() == 3 && !c.nkw && (a[0]->source || a[0]->made) && is_constant(a[1]) &&
      constant_value(a[1]).is(Kind::Str)) {
    store_attr(a[0], constant_value(a[1]).as_str(), a[2]);  // as `obj.name = value`
    return const_vt(Value::none());
  }
  unsupported(BreakReason::side_effect_builtin, "setattr()");
}

}  // namespace kiln::interpreter

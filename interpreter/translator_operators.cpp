// Operators, compares, subscripts (get and set) and unpacking on trackers,
// with the two ends they reduce to: constants (a Python value as a tracker
// and back, is_constant, lazily wrapped globals), folded at trace time
// with the VM's own value_ops, and tensor ops (tensor_op, through which an
// op on tensor trackers becomes a graph node).
// Calls and attribute reads are in translator_invoke.cpp.
#include <algorithm>
#include <cstdlib>

#include "interpreter/instruction_translator.h"
#include "interpreter/nn_module.h"
#include "interpreter/tensor_views.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/host_tensors.h"
#include "runtime/tensor/tensor_index.h"
#include "runtime/value/name_map.h"
#include "variables/wrap.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
using output_graph::Arg;
using output_graph::attr_source;
using output_graph::Guard;
using output_graph::GuardKind;
namespace vars = kiln::variables;

// ----------------------------------------------------------- constants --

namespace {
// A tracker graph may still hold a cycle through an input that contains
// itself (the builder maps one object to one tracker): such a container is
// not a constant, and the walk must end.
bool constant_walk(InstructionTranslator& tx, const VT& v, std::vector<const vars::VariableTracker*>& path) {
  VT r = tx.realize(v);
  if (r->is(VTKind::Constant)) return true;
  if (!r->is(VTKind::Tuple) && !r->is(VTKind::List)) return false;
  if (std::find(path.begin(), path.end(), r.get()) != path.end()) return false;
  path.push_back(r.get());
  for (const VT& x : r->items)
    if (!constant_walk(tx, x, path)) return false;
  path.pop_back();
  return true;
}

bool holds(const VT& v, const vars::VariableTracker* target, std::vector<const vars::VariableTracker*>& seen) {
  if (!v) return false;
  const VT& r = v->is(VTKind::Lazy) && v->realized ? v->realized : v;
  if (r.get() == target) return true;
  // An iterator holds what it walks (a tuple's items, the iterators a zip
  // advances, the list a live list iterator reads): a list that holds an
  // iterator over a tuple holding the list is a cycle too (fuzz finding 34:
  // the residual's rebuild of it recursed until the C++ stack overflowed).
  const bool iterator = r->is(VTKind::Iterator);
  if (!r->is(VTKind::List) && !r->is(VTKind::Tuple) && !r->is(VTKind::ConstDict) && !iterator) return false;
  if (std::find(seen.begin(), seen.end(), r.get()) != seen.end()) return false;
  seen.push_back(r.get());
  for (const VT& x : r->items)
    if (holds(x, target, seen)) return true;
  return iterator && r->self && holds(r->self, target, seen);
}
}  // namespace

bool InstructionTranslator::is_constant(const VT& v) {
  std::vector<const vars::VariableTracker*> path;
  return constant_walk(*this, v, path);
}

void InstructionTranslator::refuse_cycle(const VT& container, const VT& value) {
  std::vector<const vars::VariableTracker*> seen;
  if (holds(value, container.get(), seen))
    unsupported(BreakReason::untraced_object, "a container that holds itself (" + container->str() + ")");
}

Value InstructionTranslator::constant_value(const VT& v) {
  VT r = realize(v);
  if (r->is(VTKind::Constant)) return r->value;
  std::vector<Value> items;
  for (const VT& x : r->items) items.push_back(constant_value(x));
  return r->is(VTKind::List) ? make_list(std::move(items)) : make_tuple(std::move(items));
}

VT InstructionTranslator::from_value(const Value& v) {
  switch (v.kind()) {
    case Kind::Tensor: {
      // A tensor made at trace time (a constant): the graph reads it by get_attr.
      std::string name = "_tensor_constant" + std::to_string(ctx_.tensor_constants++);
      output_graph::Node* n = ctx_.out.register_attr(v, nullptr, name);
      ctx_.constant_tensors[n] = v.as_tensor();
      return vars::make_tensor(n);
    }
    case Kind::Tuple:
    case Kind::List: {
      std::vector<VT> items;
      for (const Value& x : v.is(Kind::Tuple) ? v.as<TupleObj>()->items : v.as<ListObj>()->items)
        items.push_back(from_value(x));
      return v.is(Kind::Tuple) ? vars::make_tuple(std::move(items)) : vars::make_list(std::move(items));
    }
    case Kind::Dict: {
      std::vector<Value> keys;
      std::vector<VT> values;
      for (const auto& [k, x] : v.as<DictObj>()->entries) {
        if (!vars::is_literal(k)) return vars::make_opaque(v, nullptr);
        keys.push_back(k);
        values.push_back(from_value(x));
      }
      return vars::make_const_dict(std::move(keys), std::move(values));
    }
    case Kind::Function: return vars::make_user_function(v);
    case Kind::Builtin: return vars::make_builtin(v);
    case Kind::Iterator: {
      // Made by a folded builtin (enumerate, zip, ...), so nobody else holds
      // it: consume it now rather than bake a stateful object into the code.
      std::vector<VT> items;
      for (const Value& x : to_vector(v)) items.push_back(from_value(x));
      return vars::make_iterator(std::move(items));
    }
    case Kind::Module: return vars::make_nn_module(v, "", nullptr);
    case Kind::None:
    case Kind::Bool:
    case Kind::Int:
    case Kind::Float:
    case Kind::Str:
    case Kind::Range:
    case Kind::Slice:
    case Kind::Code:  // immutable
    case Kind::FrozenSet:
    case Kind::Set: return const_vt(v);  // a set tracker is never mutated in place (translator_constructs.cpp)
    default: return vars::make_opaque(v, nullptr);
  }
}

VT InstructionTranslator::make_lazy_global(const std::string& name, const Value& v) {
  VT lz = vars::make_lazy(v, output_graph::global_source(name));
  ctx_.globals[name] = lz;
  return lz;
}

// ------------------------------------------------------------- tensors --

static Arg to_arg(InstructionTranslator& tx, const VT& v0) {
  VT v = tx.realize_sym(v0);
  switch (v->kind) {
    case VTKind::Tensor: return Arg::of(v->node);
    case VTKind::SymInt: return Arg::symbolic(v->sym, v->value.as_int());  // a size computed per call
    case VTKind::Constant: return Arg::constant(v->value);
    case VTKind::List:
    case VTKind::Tuple: {
      std::vector<Arg> items;
      for (const VT& x : v->items) items.push_back(to_arg(tx, x));
      return Arg::list(std::move(items));
    }
    default: unsupported(BreakReason::untraced_object, "passing " + v->str() + " to a tensor op");
  }
}

static bool arg_requires_grad(const Arg& a) {
  if (a.kind == Arg::Kind::Node) return a.node->requires_grad;
  if (a.kind == Arg::Kind::List)
    for (const Arg& item : a.items)
      if (arg_requires_grad(item)) return true;
  return false;
}

// An op on a tensor that records gradients runs through the embedder's
// autograd (output_graph/backend.h): it must have a lowering there, and no
// grad-mode block (traced as doing nothing) may be open around it, since
// the autograd backend would then record what the program asked not to.
// Either way the op runs on the VM instead, by the embedder's own rules.
void InstructionTranslator::check_autograd(OpId op, const std::vector<Arg>& pos,
                                           const std::vector<std::pair<std::string, Arg>>& kw) {
  bool grad = false;
  for (const Arg& a : pos) grad = grad || arg_requires_grad(a);
  for (const auto& kv : kw) grad = grad || arg_requires_grad(kv.second);
  if (!grad) return;
  const std::string name = op_def(op).name;
  if (!output_graph::autograd_lowers(op))
    unsupported(BreakReason::no_autograd_lowering,
                "kiln's " + name + "() has no torch lowering, and it takes a tensor that requires grad (" +
                    ctx_.out.graph().autograd + ")");
  for (const InstructionTranslator* t = this; t; t = t->parent_)
    if (!t->null_withs_.empty())
      unsupported(BreakReason::grad_mode_block, name + "() on a tensor that requires grad inside a torch.no_grad()/"
                                                    "inference_mode()/enable_grad() block (" +
                                                    ctx_.out.graph().autograd + ")");
}

// Whether this call draws from the random generator: rand/randn and their
// _like forms; dropout in training with p > 0 (torch's default training=True
// when not given); attention with dropout_p > 0. An argument only known when
// the graph runs counts as drawing.
static bool draws_random(InstructionTranslator& tx, OpId op, const std::vector<VT>& args, const TupleObj* kwnames) {
  if (op == OpId::rand || op == OpId::randn || op == OpId::rand_like || op == OpId::randn_like) return true;
  const bool dropout = op == OpId::dropout;
  if (!dropout && op != OpId::scaled_dot_product_attention) return false;
  const size_t nkw = kwnames ? kwnames->items.size() : 0, npos = args.size() - nkw;
  auto arg = [&](size_t index, std::string_view name) -> const VT* {
    if (index < npos) return &args[index];
    for (size_t k = 0; k < nkw; ++k)
      if (kwnames->items[k].as_str() == name) return &args[npos + k];
    return nullptr;
  };
  Value p = Value::floating(dropout ? 0.5 : 0.0), training = Value::boolean(true);
  if (const VT* v = dropout ? arg(1, "p") : arg(4, "dropout_p")) {
    if (!tx.is_constant(*v)) return true;
    p = tx.constant_value(*v);
  }
  if (const VT* v = dropout ? arg(2, "training") : nullptr) {
    if (!tx.is_constant(*v)) return true;
    training = tx.constant_value(*v);
  }
  const double prob = p.is(Kind::Int) ? double(p.as_int()) : p.is(Kind::Float) ? p.as_float() : 1.0;
  return truth(training) && prob != 0.0;
}

VT InstructionTranslator::tensor_op(OpId op, const std::vector<VT>& args, const TupleObj* kwnames) {
  // On the frames path a torch program's random ops are torch's (its seed,
  // its saved and restored states): CPython runs them (Dynamo's other
  // option, replaying torch's generator inside the graph, is not kiln's
  // kernels'). A graph that records gradients runs as torch's own ops (the
  // autograd backend), whose dropout draws from torch's generator: it
  // stays. A frame over kiln's tensors alone keeps them (kiln's generator,
  // as its eager ops: Options::random_is_hosts).
  const bool through_torch = !args.empty() && args[0] && args[0]->node && args[0]->node->requires_grad;
  if (ctx_.python_frames && ctx_.random_is_hosts && !through_torch && draws_random(*this, op, args, kwnames))
    unsupported(BreakReason::random_op, std::string(op_def(op).name) + "()");
  if (op_def(op).decompose)
    if (VT r = decomposed_op(op, args, kwnames)) return r;
  size_t nkw = kwnames ? kwnames->items.size() : 0;
  std::vector<Arg> pos;
  std::vector<std::pair<std::string, Arg>> kw;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i < args.size() - nkw) pos.push_back(to_arg(*this, args[i]));
    else kw.emplace_back(kwnames->items[i - (args.size() - nkw)].as_str(), to_arg(*this, args[i]));
  }
  check_autograd(op, pos, kw);
  try {
    VT r = vars::wrap_fx_proxy(ctx_.out, op, std::move(pos), std::move(kw));
    // `to` its own dtype is the tensor itself in torch: the same tracker,
    // so a write into either is one into the other (the node is dead code).
    if (op == OpId::to && args[0]->is(VTKind::Tensor) && r->meta().dtype == args[0]->meta().dtype) return args[0];
    if (r->is(VTKind::Tensor) && r->node && may_alias(r->node)) note_view(r, args[0]);  // translator_views.cpp
    return r;
  } catch (const Error& e) {
    // A shape or argument error: the VM raises it when it runs the call.
    unsupported(BreakReason::python_error, std::string(op_def(op).name) + "() fails: " + e.what());
  }
}

// A subscript key as the runtime's normalize_index reads it: tensor trackers
// stand in as meta tensors (remembered, to map the parts back), constants as
// themselves. Ellipsis, bools, lists and 0-d tensors then normalize exactly
// as eagerly, so the trace and the VM agree on what each part means.
struct TracedKey {
  std::vector<IndexPart> parts;
  std::unordered_map<const TensorImpl*, VT> trackers;
};

static Value key_value(InstructionTranslator& tx, const VT& k0, TracedKey& out) {
  VT k = tx.realize(k0);
  // An int32 index tensor indexes as its int64 conversion (the runtime's
  // indexing does the same: tensor_index.cpp as_long_index), converted in
  // the graph so the part maps back to a tracker.
  if (k->is(VTKind::Tensor) && k->meta().dtype == DType::Int32)
    k = tx.tensor_op(OpId::to, {k, const_vt(intern_value("int64"))});
  if (k->is(VTKind::Tensor)) {
    const auto& m = k->meta();
    Tensor t = Tensor::meta(m.sizes, m.dtype, m.strides);
    out.trackers[t.impl()] = k;
    return Value::tensor(t);
  }
  if (k->is(VTKind::Constant)) return k->value;
  if (k->is(VTKind::Builtin) && is_ellipsis(k->value)) return k->value;
  if (k->is(VTKind::Tuple) || k->is(VTKind::List)) {
    std::vector<Value> items;
    for (const VT& x : k->items) items.push_back(key_value(tx, x, out));
    return k->is(VTKind::Tuple) ? make_tuple(std::move(items)) : make_list(std::move(items));
  }
  unsupported(BreakReason::traced_python_value, "indexing a tensor with " + k->str());
}

static TracedKey traced_key(InstructionTranslator& tx, const VT& x, const VT& key) {
  TracedKey tk;
  const Value k = key_value(tx, key, tk);
  try {
    tk.parts = normalize_index(int64_t(x->meta().sizes.size()), k);
  } catch (const Error& e) {
    // The VM raises the same error when it runs the subscript.
    unsupported(BreakReason::python_error, std::string("indexing fails: ") + e.what());
  }
  return tk;
}

// The tracker an index-tensor part stands for: an input's tracker, or a
// constant (a list in the key) registered with the graph.
static VT part_tensor(InstructionTranslator& tx, const TracedKey& tk, const Tensor& t) {
  if (!t.is_meta()) return tx.from_value(Value::tensor(t));
  auto it = tk.trackers.find(t.impl());
  if (it == tk.trackers.end()) unsupported(BreakReason::untraced_object, "an index tensor the trace cannot name");
  if (t.dim() == 0)  // selects by its value (a view), as torch does
    unsupported(BreakReason::tensor_to_python, "a 0-d tensor used as an index");
  return it->second;
}

// x[key]: ints, slices and None as view ops; the advanced parts (index
// tensors, lists) as one `index` node over the view, as torch lowers it.
static VT tensor_index(InstructionTranslator& tx, VT x, const VT& key) {
  const TracedKey tk = traced_key(tx, x, key);
  int64_t dim = 0;
  std::vector<std::pair<int64_t, VT>> adv;
  for (const IndexPart& p : tk.parts) {
    switch (p.k) {
      case IndexPart::K::Int:
        x = tx.tensor_op(OpId::select, {x, const_vt(Value::integer(dim)), const_vt(p.v)});
        break;
      case IndexPart::K::Slice: {
        auto* s = p.v.as<SliceObj>();
        x = tx.tensor_op(OpId::slice, {x, const_vt(Value::integer(dim)), const_vt(s->start), const_vt(s->stop),
                                       const_vt(s->step.is_none() ? Value::integer(1) : s->step)});
        ++dim;
        break;
      }
      case IndexPart::K::None:
        x = tx.tensor_op(OpId::unsqueeze, {x, const_vt(Value::integer(dim))});
        ++dim;
        break;
      case IndexPart::K::Tensor: {
        const Tensor t = p.v.as_tensor();
        if (t.dtype() == DType::Bool) {
          if (t.is_meta()) unsupported(BreakReason::data_dependent_shape, "indexing with a bool mask");
          // A constant mask (a list of bools): its positions are known now,
          // once its shape matches the dims it covers (else the VM raises
          // torch's error for it).
          const auto& sizes = x->meta().sizes;
          for (int64_t j = 0; j < t.dim(); ++j)
            if (size_t(dim + j) >= sizes.size() || sizes[size_t(dim + j)] != t.sizes()[size_t(j)])
              unsupported(BreakReason::python_error, "a bool mask whose shape does not match the tensor's");
          std::vector<Tensor> idx = mask_indices(t);
          for (size_t j = 0; j < idx.size(); ++j) adv.emplace_back(dim + int64_t(j), tx.from_value(Value::tensor(idx[j])));
          dim += t.dim();
          break;
        }
        if (p.on_new_axis) {
          adv.emplace_back(dim - 1, part_tensor(tx, tk, t));
          break;
        }
        adv.emplace_back(dim, part_tensor(tx, tk, t));
        ++dim;
        break;
      }
    }
  }
  if (adv.empty()) return x;
  // An index tensor whose values are known now (a list in the key, a
  // constant made in the trace) is checked against the size it indexes:
  // out of bounds, the graph would raise when it runs, after the trace's
  // effects before this line were deferred past it; the VM raises in order.
  const auto& meta = x->meta();
  for (const auto& [d, v] : adv) {
    auto known = v->node ? tx.ctx().constant_tensors.find(v->node) : tx.ctx().constant_tensors.end();
    if (known == tx.ctx().constant_tensors.end() || known->second.dtype() != DType::Int64) continue;
    if (!meta.sym.empty() && !meta.sym[size_t(d)].is_constant()) continue;  // a symbolic size: known at run time only
    const int64_t size = meta.sizes[size_t(d)];
    const Tensor vals = known->second.contiguous();
    for (int64_t i = 0; i < vals.numel(); ++i)
      if (const int64_t idx = vals.data<int64_t>()[i]; idx < -size || idx >= size)
        unsupported(BreakReason::python_error, "index " + std::to_string(idx) + " is out of bounds for dimension " +
                                                   std::to_string(d) + " with size " + std::to_string(size));
  }
  int64_t last = 0;
  for (auto& a : adv) last = std::max(last, a.first);
  std::vector<VT> indices(size_t(last + 1), nullptr);
  for (auto& [d, v] : adv) indices[size_t(d)] = v;
  for (VT& v : indices)
    if (!v) v = const_vt(Value::none());
  return tx.tensor_op(OpId::index, {x, vars::make_list(std::move(indices))});
}

// x[key] = value in a trace: a `setitem` node (a copy of x with the
// assignment applied), which x now denotes, written back into the tensor
// x's memory belongs to and into every live view of it (assign_tensor,
// translator_views.cpp). x's memory must be made in this graph: an input
// or a parameter (the caller would not see the write) breaks.
void InstructionTranslator::tensor_setitem_traced(const VT& x, const VT& key, const VT& value0) {
  VT value = realize(value0);
  if (x->source)
    unsupported(BreakReason::tensor_mutation, "assignment into " + x->source->str() + ", which the caller owns");
  if (x->node->op != output_graph::NodeOp::CallFunction)
    unsupported(BreakReason::tensor_mutation, "assignment into a graph input");
  if (!value->is(VTKind::Tensor) && !(value->is(VTKind::Constant) && value->value.is_number()))
    unsupported(BreakReason::untraced_object, "assigning " + value->str() + " into a tensor");
  const TracedKey tk = traced_key(*this, x, key);
  // A constant mask beside other index tensors: whether their shapes
  // broadcast depends on the mask's positions, which the shape rule (over
  // meta tensors) cannot see; the VM assigns it, raising in order.
  size_t index_tensors = 0;
  bool constant_mask = false;
  for (const IndexPart& p : tk.parts)
    if (p.k == IndexPart::K::Tensor && !p.on_new_axis) {
      ++index_tensors;
      constant_mask = constant_mask || (!p.v.as_tensor().is_meta() && p.v.as_tensor().dtype() == DType::Bool);
    }
  if (constant_mask && index_tensors > 1)
    unsupported(BreakReason::tensor_mutation, "assignment through a constant bool mask beside other index tensors");
  std::vector<VT> items;
  for (const IndexPart& p : tk.parts) {
    if (p.on_new_axis) {
      // A Python bool was normalized to None + [0] / []; the setitem op
      // normalizes its key again, so it gets the bool back.
      items.back() = const_vt(Value::boolean(p.v.as_tensor().numel() == 1));
      continue;
    }
    if (p.k == IndexPart::K::Tensor) {
      const Tensor t = p.v.as_tensor();
      items.push_back(t.is_meta() && t.dtype() == DType::Bool ? tk.trackers.at(t.impl()) : part_tensor(*this, tk, t));
    } else {
      items.push_back(const_vt(p.v));
    }
  }
  VT updated = tensor_op(OpId::setitem, {x, vars::make_tuple(std::move(items)), value});
  if (!assign_tensor(x, updated))  // translator_views.cpp
    unsupported(BreakReason::tensor_mutation, "assignment into a view kiln cannot write back (" + view_refusal_ + ")");
}

// A torch program's frames: x op= y on a tensor is in place, as torch's: x's memory changes and
// every name holding x, or a view of its memory, sees it. Traced like an
// assignment into x (tensor_setitem_traced's rule); a tensor the caller
// owns breaks, and CPython runs the in-place op on it. A result torch
// would refuse to write into x (another dtype, a broadcast shape) breaks
// too: the program raises it there.
VT InstructionTranslator::tensor_inplace(OpId op, const VT& x, const VT& y) {
  // `t[k] op= v`: CPython stores the result back (SWAP, SWAP, STORE_SUBSCR
  // follow), and that store is the write into t's memory, traced as an
  // assignment; the view t[k] itself need not change.
  auto next = [&](size_t k, Opcode o) { return pc_ + k < code_->instrs.size() && code_->instrs[pc_ + k].op == o; };
  if (next(1, Opcode::SWAP) && next(2, Opcode::SWAP) && next(3, Opcode::STORE_SUBSCR)) return tensor_op(op, {x, y});
  if (x->source)
    unsupported(BreakReason::tensor_mutation, "in-place operator on " + x->source->str() + ", which the caller owns");
  if (x->node->op != output_graph::NodeOp::CallFunction)
    unsupported(BreakReason::tensor_mutation, "in-place operator on a graph input");
  VT r = tensor_op(op, {x, y});
  if (r->meta().dtype != x->meta().dtype || r->meta().sizes != x->meta().sizes)
    unsupported(BreakReason::python_error, "an in-place result torch cannot write into the tensor (dtype or shape)");
  if (!assign_tensor(x, r))  // translator_views.cpp
    unsupported(BreakReason::tensor_mutation, "in-place operator on a view kiln cannot write back (" + view_refusal_ + ")");
  return x;
}

VT InstructionTranslator::binary(BinOp op, const VT& a, const VT& b, bool inplace) {
  if (is_module_slice(a) || is_module_slice(b))
    unsupported(BreakReason::untraced_object, std::string("operator ") + binop_symbol(op) + " on a slice of a module container");
  if (a->is(VTKind::Tensor) || b->is(VTKind::Tensor)) {
    int id = tensor_op_for(op);
    if (id < 0) unsupported(BreakReason::untraced_object, std::string("operator ") + binop_symbol(op) + " on a tensor");
    // In place for torch programs (torch's __iadd__); kiln's own tensors
    // have no in-place operators, so a KBC program's `+=`, and a Python
    // program's over kiln tensors, make a new one (their oracles: the VM,
    // CPython over kiln.Tensor).
    if (inplace && a->is(VTKind::Tensor) && ctx_.python_frames && host_tensors_in_place())
      return tensor_inplace(OpId(id), a, b);
    return tensor_op(OpId(id), {a, b});
  }
  if (op == BinOp::ADD && a->is(VTKind::List) && b->is(VTKind::List)) {
    if (inplace) {
      const std::vector<VT> more = b->items;  // a += a: inserting a vector into itself is undefined
      a->items.insert(a->items.end(), more.begin(), more.end());
      ctx_.side_effects.mark_mutated(a);
      return a;
    }
    std::vector<VT> items = a->items;
    items.insert(items.end(), b->items.begin(), b->items.end());
    return vars::make_list(std::move(items));
  }
  if (op == BinOp::ADD && a->is(VTKind::Tuple) && b->is(VTKind::Tuple)) {
    std::vector<VT> items = a->items;
    items.insert(items.end(), b->items.begin(), b->items.end());
    return vars::make_tuple(std::move(items));
  }
  if (op == BinOp::MUL && (a->is(VTKind::List) || a->is(VTKind::Tuple)) && is_constant(b) &&
      constant_value(b).is(Kind::Int)) {
    std::vector<VT> items;
    const int64_t n = constant_value(b).as_int();
    items.reserve(runtime::repeated_length(a->items.size(), n, sizeof(VT), "a traced sequence"));
    if (!a->items.empty())
      for (int64_t k = 0; k < n; ++k) items.insert(items.end(), a->items.begin(), a->items.end());
    if (inplace && a->is(VTKind::List)) {  // l *= n: the same list (aliases see it)
      a->items = std::move(items);
      ctx_.side_effects.mark_mutated(a);
      return a;
    }
    return a->is(VTKind::List) ? vars::make_list(std::move(items)) : vars::make_tuple(std::move(items));
  }
  if (inplace && a->is(VTKind::Constant) && a->value.is(Kind::Set) && is_constant(b)) {
    // s op= t mutates s: a caller's set on the VM, where the mutation is its
    // owner's; a set made here on a copy that becomes this tracker's value
    // (every name bound to the set holds this tracker, so all see it)
    if (a->source) unsupported(BreakReason::outside_mutation, std::string("operator ") + binop_symbol(op) +
                                                           "= on a set the function did not make");
    Value copy = set_clone(a->value, false);  // the same table: s changes as the VM's would
    Value other = constant_value(b);
    try {
      binary_op(op, copy, other.is_same(a->value) ? copy : other, true);
    } catch (const Error&) {
      unsupported(BreakReason::python_error, std::string("operator ") + binop_symbol(op) + " raising an error");
    }
    a->value = copy;
    return a;
  }
  if (is_constant(a) && is_constant(b) && !a->is(VTKind::List) && !b->is(VTKind::List)) {
    try {
      return from_value(binary_op(op, constant_value(a), constant_value(b), inplace));
    } catch (const Error&) {
      unsupported(BreakReason::python_error, std::string("operator ") + binop_symbol(op) + " raising an error");
    }
  }
  for (const VT& x : {a, b})  // a torch tensor kiln does not take: say why
    if (x->value.is(Kind::Foreign))
      if (const auto* f = x->value.as<ForeignObj>(); f->vt->untraced_reason)
        if (std::string why = f->vt->untraced_reason(f->handle); !why.empty())
          unsupported(BreakReason::library_fallback, std::string("operator ") + binop_symbol(op) + " on " + why);
  unsupported(BreakReason::traced_python_value, std::string("operator ") + binop_symbol(op) + " on " + a->str() + " and " +
                                            b->str());
}

static bool stands_for_one_object(const VT& v) {
  switch (v->kind) {
    // A constant holding a Python object itself (an exception a traced
    // handler caught): that object.
    case VTKind::Constant: return v->value.is(Kind::Foreign);
    case VTKind::Opaque:
    case VTKind::NNModule:
    case VTKind::UnspecializedNNModule:
    case VTKind::UserFunction:
    case VTKind::Builtin: return !v->value.is_null();
    default: return false;
  }
}

void InstructionTranslator::require_hashable(const Value& key, const char* where) {
  try {
    (void)value_hash(key);
  } catch (const Error& e) {
    unsupported(BreakReason::python_error, std::string(where) + ": " + e.what());
  }
}

// container[a:b] of a ModuleList / Sequential the trace holds: CPython
// makes a new container of the same class over those children. The trace
// keeps their trackers (read at their own paths under the parent, as
// iterating the parent reads them) in a Tuple marked by `path_parent` (the
// container): iterating, len(), indexing and unpacking it are the
// children's; its type, its methods and operators on it are a break
// (is_module_slice), and code CPython runs rebuilds it as the same slice of
// the real container (its source, Residual::reconstruct).
VT InstructionTranslator::module_slice(const VT& container, const Value& key) {
  std::vector<Value> names;
  for (const auto& [name, v] : container->value.as<ModuleObj>()->modules) names.push_back(Value::str(name->s));
  Value chosen;
  try {
    chosen = runtime::get_item(make_list(std::move(names)), key);
  } catch (const Error&) {
    unsupported(BreakReason::python_error, "module slice " + repr(key));
  }
  std::vector<VT> children;
  for (const Value& name : chosen.as<ListObj>()->items)
    children.push_back(nn_module::var_getattr(*this, container, name.as_str()));
  VT out = vars::make_tuple(std::move(children),
                            container->source ? output_graph::item_source(container->source, key) : nullptr);
  out->path_parent = container;
  return out;
}

// os.environ[name] (ForeignVTable::environ): the variable read now, under a
// guard on it (present with this value, or absent); absent is CPython's
// KeyError, which Mapping.get's and __contains__'s handlers catch in the
// trace. Null: not os.environ.
// (Here and in get_item, a lookup that fails raises the program's own
// exception: step() hands it to an inlined handler, or breaks there.)
VT InstructionTranslator::environ_item(const VT& obj, const Value& key) {
  if (!obj->value.is(Kind::Foreign)) return nullptr;
  const auto* f = obj->value.as<ForeignObj>();
  if (!f->vt->environ || !f->vt->environ(f->handle)) return nullptr;
  if (!key.is(Kind::Str)) unsupported(BreakReason::untraced_object, "os.environ[" + repr(key) + "]");
  const std::string& name = key.as_str();
  const output_graph::SourceRef source = output_graph::environ_source(name);
  const char* v = std::getenv(name.c_str());
  if (!v) {
    ctx_.builder.absent_guard(source);
    throw_key_error(key);
  }
  return ctx_.builder.wrap(Value::str(v), source);  // a str constant: guarded equal
}

bool is_module_slice(const VT& v) { return v->is(VTKind::Tuple) && v->path_parent && v->path_parent->is_module(); }

VT InstructionTranslator::compare(CmpOp op, const VT& a, const VT& b) {
  if (is_module_slice(a) || is_module_slice(b))
    unsupported(BreakReason::untraced_object, "comparing a slice of a module container");
  if (op == CmpOp::IS || op == CmpOp::IS_NOT) {
    bool same;
    if (a == b) same = true;
    else if (a->is(VTKind::Constant) && b->is(VTKind::Constant)) same = a->value.is_same(b->value);
    else if ((a->is(VTKind::Constant) && a->value.is_none()) || (b->is(VTKind::Constant) && b->value.is_none()))
      same = false;  // None is only ever a Constant tracker
    // Trackers that stand for one known object each (a class, a module, a
    // function, an opaque value: pinned by an identity guard, or made in
    // this trace): Python's `is` on those objects.
    else if (stands_for_one_object(a) && stands_for_one_object(b)) same = a->value.is_same(b->value);
    // Two tensors a module holds (get_attr nodes: one per tensor object,
    // kept by the modules' version guards): the same object iff the same
    // node. Any other pair of tensors may alias (an input that is a
    // parameter, an in-place op's result) and stays unsupported below.
    else if (a->is(VTKind::Tensor) && b->is(VTKind::Tensor) && a->node->op == output_graph::NodeOp::GetAttr &&
             b->node->op == output_graph::NodeOp::GetAttr)
      same = a->node == b->node;
    else if (a->kind != b->kind) same = false;
    // Lists and dicts: one tracker per object (the builder's for those the
    // program passed in, under aliasing guards; one per BUILD_LIST / dict
    // the trace made), so two trackers are two objects (copy.deepcopy's
    // `y is not _nil`).
    else if (a->is(VTKind::List) || a->is(VTKind::ConstDict)) same = false;
    else if (a->is(VTKind::Builtin) || a->is(VTKind::Opaque) || a->is(VTKind::UserFunction) || a->is_module())
      same = a->value.is_same(b->value);  // objects the trace holds themselves (type(x) is kiln.Tensor)
    else unsupported(BreakReason::traced_python_value, "`is` between two trackers");
    return const_vt(Value::boolean(op == CmpOp::IS ? same : !same));
  }
  if (op == CmpOp::IN || op == CmpOp::NOT_IN) {
    bool found = false;
    if (b->is(VTKind::ConstDict) && is_constant(a)) {
      Value k = constant_value(a);
      require_hashable(k, "`in`");
      for (const Value& key : b->keys) found = found || values_equal(key, k);
    } else if (is_constant(a) && is_constant(b)) {
      try {
        found = contains(constant_value(b), constant_value(a));
      } catch (const Error&) {
        unsupported(BreakReason::python_error, "`in` raising an error");  // e.g. an unhashable item: the VM raises it
      }
    } else if ((b->is(VTKind::Tuple) || b->is(VTKind::List)) && !a->is(VTKind::Tensor)) {
      // A sequence's `in` as CPython's tuplecontains / list_contains runs
      // it: item by item, `item is a or item == a`, stopping at the first
      // hit (`action in (Action.NOTIFY, Action.NOTIFY_ALWAYS)` over Enum
      // members). Each test must come out a known bool; one that does not
      // (a tensor item, an object whose == is user code) breaks as before.
      for (const VT& item : b->items) {
        if (item->is(VTKind::Tensor)) unsupported(BreakReason::traced_python_value, "`in` over " + b->str());
        VT same = compare(CmpOp::IS, item, a);
        if (same->value.as_bool()) {
          found = true;
          break;
        }
        VT eq = compare(CmpOp::EQ, item, a);
        if (!is_constant(eq) || !constant_value(eq).is(Kind::Bool))
          unsupported(BreakReason::traced_python_value, "`in` over " + b->str());
        if (constant_value(eq).as_bool()) {
          found = true;
          break;
        }
      }
    } else if (VT r = call_special_method(b, "__contains__", {a})) {
      // A Python class's own __contains__ (a Mapping's: try self[key]),
      // inlined; `in` takes the truth of what it returns.
      if (!is_constant(r)) unsupported(BreakReason::traced_python_value, "`in` over " + b->str());
      found = truth(constant_value(r));
    } else {
      unsupported(BreakReason::traced_python_value, "`in` over " + b->str());
    }
    return const_vt(Value::boolean(op == CmpOp::IN ? found : !found));
  }
  if (a->is(VTKind::Tensor) || b->is(VTKind::Tensor)) return tensor_op(OpId(tensor_op_for(op)), {a, b});
  if (is_constant(a) && is_constant(b)) {
    try {
      return from_value(compare_op(op, constant_value(a), constant_value(b)));
    } catch (const Error&) {
      unsupported(BreakReason::python_error, std::string("comparison ") + cmpop_symbol(op) + " raising an error");
    }
  }
  // A Python object its guards pin, compared by C slots alone (a str
  // Enum's member against a str): compared now.
  for (const auto& [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
    if (!x->is(VTKind::Opaque) || !x->value.is(Kind::Foreign) || !stands_for_one_object(x)) continue;
    if (!is_constant(y) && !(y->is(VTKind::Opaque) && stands_for_one_object(y))) continue;
    const auto* f = x->value.as<ForeignObj>();
    const Value other = is_constant(y) ? constant_value(y) : y->value;
    const CmpOp flipped = x == a ? op : reflected_cmpop(op);
    if (!f->vt->pure_compare || !f->vt->pure_compare(f->handle, int(flipped), other)) continue;
    try {
      return from_value(f->vt->compare(f->handle, int(flipped), other));
    } catch (const Error&) {
      unsupported(BreakReason::python_error, std::string("comparison ") + cmpop_symbol(op) + " raising an error");
    }
  }
  unsupported(BreakReason::traced_python_value, std::string("comparison ") + cmpop_symbol(op) + " of " + a->str() + " and " +
                                            b->str());
}

// ------------------------------------------------------------ sequences --

std::vector<VT> InstructionTranslator::unpack(const VT& seq0) {
  VT seq = realize(seq0);
  switch (seq->kind) {
    case VTKind::List:
    case VTKind::Tuple: return seq->items;
    case VTKind::Iterator: {
      std::vector<VT> rest;
      VT item;
      while (next_item(seq, item)) rest.push_back(std::move(item));
      return rest;
    }
    case VTKind::ConstDict: {
      std::vector<VT> keys;
      for (const Value& k : seq->keys) keys.push_back(const_vt(k));
      return keys;
    }
    case VTKind::Tensor: {
      ctx_.shape_read = true;
      const auto& sizes = seq->meta().sizes;
      if (sizes.empty()) unsupported(BreakReason::python_error, "iteration over a 0-d tensor");
      std::vector<VT> rows;
      for (int64_t i = 0; i < sizes[0]; ++i)
        rows.push_back(tensor_op(OpId::select, {seq, const_vt(Value::integer(0)), const_vt(Value::integer(i))}));
      return rows;
    }
    case VTKind::UnspecializedNNModule: return unpack(nn_module::specialized(*this, seq));
    case VTKind::NNModule: {
      nn_module::check_structure_unchanged(*this, seq->value.as<ModuleObj>(), "iterating over a module");
      std::vector<VT> out;
      for (const Value& child : module_iter_items(seq->value)) {
        if (!child.is(Kind::Module)) {
          out.push_back(from_value(child));  // ModuleDict keys
          continue;
        }
        for (const auto& [name, v] : seq->value.as<ModuleObj>()->modules)
          if (v.is_same(child)) {
            out.push_back(nn_module::var_getattr(*this, seq, name->s));
            break;
          }
      }
      return out;
    }
    case VTKind::Constant: {
      std::vector<VT> out;
      try {
        for (const Value& x : to_vector(seq->value)) out.push_back(from_value(x));
      } catch (const Error&) {
        unsupported(BreakReason::untraced_object, "iterating over " + seq->str());
      }
      return out;
    }
    default:
      if (VT it = python_iterator(seq)) return unpack(it);
      unsupported(BreakReason::untraced_object, "iterating over " + seq->str());
  }
}

VT InstructionTranslator::get_item(const VT& obj, const VT& key0) {
  if (obj->is(VTKind::Tensor))
    if (VT r = symbolic_tensor_index(obj, realize_sym(key0))) return r;
  VT key = realize(key0);
  if (obj->is(VTKind::Tensor)) {
    return tensor_index(*this, obj, key);
  }
  if (!is_constant(key)) unsupported(BreakReason::traced_python_value, "subscript with " + key->str());
  Value k = constant_value(key);
  if (obj->is(VTKind::List) || obj->is(VTKind::Tuple)) {
    int64_t n = int64_t(obj->items.size());
    if (k.is(Kind::Slice)) {
      std::vector<Value> idx;
      for (int64_t i = 0; i < n; ++i) idx.push_back(Value::integer(i));
      std::vector<VT> items;
      Value picked = runtime::get_item(make_list(std::move(idx)), k);
      for (const Value& i : picked.as<ListObj>()->items) items.push_back(obj->items[size_t(i.as_int())]);
      return obj->is(VTKind::List) ? vars::make_list(std::move(items)) : vars::make_tuple(std::move(items));
    }
    if (!k.is(Kind::Int)) unsupported(BreakReason::python_error, "sequence index " + repr(k));
    int64_t i = k.as_int() < 0 ? k.as_int() + n : k.as_int();
    if (i < 0 || i >= n)
      throw_error(ErrorKind::IndexError, std::string(obj->is(VTKind::List) ? "list" : "tuple") + " index out of range");
    return obj->items[size_t(i)];
  }
  if (obj->is(VTKind::ConstDict)) {
    require_hashable(k, "a dict subscript");
    for (size_t j = 0; j < obj->keys.size(); ++j)
      if (values_equal(obj->keys[j], k)) return obj->items[j];
    throw_key_error(k);
  }
  if (obj->is(VTKind::UnspecializedNNModule)) return get_item(nn_module::specialized(*this, obj), key);
  if (obj->is(VTKind::NNModule)) {
    nn_module::check_structure_unchanged(*this, obj->value.as<ModuleObj>(), "indexing a module");
    if (k.is(Kind::Slice)) {
      const auto kind = obj->value.as<ModuleObj>()->cls->builtin_kind();
      if (kind == BuiltinModule::Sequential || kind == BuiltinModule::ModuleList) return module_slice(obj, k);
    }
    Value child;
    try {
      child = module_getitem(obj->value, k);
    } catch (const Error&) {
      unsupported(BreakReason::python_error, "module subscript " + repr(k));
    }
    for (const auto& [name, v] : obj->value.as<ModuleObj>()->modules)
      if (v.is_same(child)) return nn_module::var_getattr(*this, obj, name->s);
    unsupported(BreakReason::untraced_object, "an item of a module container that is none of its children");
  }
  if (obj->is(VTKind::Constant)) {
    try {
      return from_value(runtime::get_item(obj->value, k));
    } catch (const Error&) {
      unsupported(BreakReason::python_error, "subscript raising an error");
    }
  }
  if (VT r = environ_item(obj, k)) return r;
  if (VT r = call_special_method(obj, "__getitem__", {key})) return r;  // a Python class's own, inlined
  unsupported(BreakReason::untraced_object, "subscript of " + obj->str());
}

}  // namespace kiln::interpreter

// Composite ops in a trace (ops.def's KILN_DECOMPOSE rows: split, topk,
// scaled_dot_product_attention, ...): the op's decomposition runs with meta
// tensors standing for the argument trackers, and each part it emits goes
// through tensor_op, so the graph holds the parts (views, fusable pointwise
// ops, ...) and the result is their trackers (a tuple for split or topk).
// The decomposition is the same function the eager call runs, so a traced
// composite computes exactly what the eager one does.
#include <unordered_map>

#include "interpreter/instruction_translator.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;

namespace {

// Values <-> trackers for one decomposition: a tensor tracker is seen as a
// meta tensor of its metadata, remembered by identity to map it back.
struct TracedValues {
  InstructionTranslator& tx;
  std::unordered_map<const TensorImpl*, VT> trackers;

  Value to_value(const VT& v0) {
    VT v = tx.realize(v0);
    if (v->is(VTKind::Tensor)) {
      const auto& m = v->meta();
      Tensor t = Tensor::meta(m.sizes, m.dtype, m.strides);
      trackers[t.impl()] = v;
      return Value::tensor(t);
    }
    if (v->is(VTKind::Constant)) return v->value;
    if (v->is(VTKind::Tuple) || v->is(VTKind::List)) {
      std::vector<Value> items;
      for (const VT& x : v->items) items.push_back(to_value(x));
      return v->is(VTKind::Tuple) ? make_tuple(std::move(items)) : make_list(std::move(items));
    }
    unsupported(BreakReason::untraced_object, "passing " + v->str() + " to a tensor op");
  }

  VT to_tracker(const Value& v) {
    if (v.is(Kind::Tensor)) {
      auto it = trackers.find(v.as_tensor().impl());
      if (it != trackers.end()) return it->second;
      return tx.from_value(v);  // a real tensor: a constant of the graph
    }
    if (v.is(Kind::Tuple) || v.is(Kind::List)) {
      std::vector<VT> items;
      for (const Value& x : v.is(Kind::Tuple) ? v.as<TupleObj>()->items : v.as<ListObj>()->items)
        items.push_back(to_tracker(x));
      return v.is(Kind::Tuple) ? vars::make_tuple(std::move(items)) : vars::make_list(std::move(items));
    }
    return vars::make_constant(v);
  }
};

// Each part becomes a node (through tensor_op: a part may be composite too).
struct TraceEmitter final : OpEmitter {
  TracedValues& values;
  explicit TraceEmitter(TracedValues& v) : values(v) {}
  Value call(OpId op, const CallArgs& args) override {
    std::vector<VT> vts;
    for (size_t i = 0; i < args.nargs; ++i) vts.push_back(values.to_tracker(args[i]));
    return values.to_value(values.tx.tensor_op(op, vts, args.kwnames));
  }
};

}  // namespace

VT InstructionTranslator::decomposed_op(OpId op, const std::vector<VT>& args, const TupleObj* kwnames) {
  const OpDef& def = op_def(op);
  TracedValues values{*this, {}};
  std::vector<Value> argv;
  for (const VT& a : args) argv.push_back(values.to_value(a));
  TraceEmitter e(values);
  Value result;
  try {
    const OpArgs bound = bind_op_args(def, CallArgs{argv.data(), argv.size(), kwnames});
    result = def.decompose(bound, e);
  } catch (const Error& err) {
    // A bad argument: the VM raises the same error when it runs the call.
    unsupported(BreakReason::python_error, std::string(def.name) + "() fails: " + err.what());
  }
  // The sizes its parts depend on are numbers now: a symbolic one is
  // specialized (only those dims; a split along a static dim keeps the
  // batch and sequence sizes symbolic).
  for (const auto& [impl, dim] : e.sizes_read) {
    auto it = values.trackers.find(impl);
    if (it == values.trackers.end() || !it->second->is(VTKind::Tensor)) continue;
    VT size = size_of(it->second, size_t(dim));
    if (size->is(VTKind::SymInt)) specialize(size, std::string(def.name) + "() splits by this size");
  }
  if (result.is_null()) return nullptr;
  return values.to_tracker(result);
}

}  // namespace kiln::interpreter

// The forward of every built-in module class (Linear, ..., LazyLinear),
// written once: the forward columns of KILN_BUILTIN_MODULES (expanded here
// into kBuiltinForwards) say which op it runs and which of the module's
// attributes feed which operand, and
// run_builtin_forward turns a row into calls on a backend. Two backends
// instantiate it: the eager call (module_classes.cpp: values, call_op) and
// the traced call (interpreter/nn_module.cpp: trackers, graph nodes), so a
// compiled module computes what the eager one computes by construction.
//
// Backend B provides:
//   using V;                                  a value (Value) or a tracker (VT)
//   V read(const ForwardOperand&);            the module's param/attr (None when absent)
//   V constant(Value);
//   V op(OpId, std::vector<V>);
//   bool records_grad(const V& x);            the input is recorded by an autograd library
//   void require_tensor(const V& x);          a non-tensor input raises (eager) or breaks (traced)
//   V sizes_of(const V& x);                   x's sizes as a tuple (symbolic where they are)
//   V call_children(const V& x);              a Sequential: each child in order
//   [[noreturn]] void fail(const std::string&);
#pragma once

#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/nn/module.h"
#include "runtime/tensor/ops.h"

namespace kiln::runtime {

// Where an operand of a built-in forward's op comes from.
enum class OperandFrom : uint8_t {
  End,        // no more operands (rows are zero-padded)
  Input,      // the forward's argument
  Param,      // the module's _parameters entry `name`
  Attr,       // the module's attribute `name`
  AttrIfSet,  // the attribute `name`, passed only when present and not None (then the last operand)
};
struct ForwardOperand {
  OperandFrom from = OperandFrom::End;
  const char* name = nullptr;
};

// How a row's forward is computed.
enum class ForwardHow : uint8_t {
  None,      // no forward (the Module base, ModuleList, ModuleDict): calling one is an error
  Op,        // op(operands...): one op over the input and the module's attributes
  Dropout,   // the one special case: its ops depend on training, p and autograd (run_builtin_forward)
  Children,  // Sequential: each child called on the previous result
};

struct ForwardRow {
  BuiltinModule kind;
  ForwardHow how;
  OpId op;
  ForwardOperand operands[5];
};

inline constexpr ForwardOperand kInput{OperandFrom::Input, nullptr};
constexpr ForwardOperand param_operand(const char* name) { return {OperandFrom::Param, name}; }
constexpr ForwardOperand attr_operand(const char* name) { return {OperandFrom::Attr, name}; }

constexpr ForwardOperand attr_if_set_operand(const char* name) { return {OperandFrom::AttrIfSet, name}; }

// The forward columns of KILN_BUILTIN_MODULES (semantics/class_model.h), one
// row per BuiltinModule in enum order by construction; `none` is no op.
namespace forward_op {
#define KILN_OP(name, ...) inline constexpr OpId name = OpId::name;
#include "runtime/tensor/ops.def"
#undef KILN_OP
inline constexpr OpId none{};
}  // namespace forward_op
#define KILN_FORWARD_OPERANDS(...) {__VA_ARGS__}
#define KILN_FORWARD_ROW(name, how, op, operands) \
  {BuiltinModule::name, ForwardHow::how, forward_op::op, KILN_FORWARD_OPERANDS operands},
inline constexpr ForwardRow kBuiltinForwards[] = {
    {BuiltinModule::None, ForwardHow::None, OpId{}, {}},
    KILN_BUILTIN_MODULES(KILN_FORWARD_ROW)
};
#undef KILN_FORWARD_ROW
#undef KILN_FORWARD_OPERANDS

constexpr bool builtin_forwards_in_enum_order() {
  for (size_t i = 0; i < std::size(kBuiltinForwards); ++i)
    if (size_t(kBuiltinForwards[i].kind) != i) return false;
  return true;
}
static_assert(std::size(kBuiltinForwards) == size_t(BuiltinModule::LazyLinear) + 1,
              "one kBuiltinForwards row per KILN_BUILTIN_MODULES row (and None)");
static_assert(builtin_forwards_in_enum_order(), "kBuiltinForwards rows in BuiltinModule order");

inline const ForwardRow& builtin_forward_row(BuiltinModule kind) { return kBuiltinForwards[size_t(kind)]; }

// The forward of the built-in class `kind` of module `m` on input `x`.
template <class B>
typename B::V run_builtin_forward(B& b, const ModuleObj* m, BuiltinModule kind, const typename B::V& x) {
  using V = typename B::V;
  const ForwardRow& row = builtin_forward_row(kind);
  switch (row.how) {
    case ForwardHow::None: break;
    case ForwardHow::Children: return b.call_children(x);
    case ForwardHow::Op: {
      std::vector<V> args;
      for (const ForwardOperand& o : row.operands) {
        if (o.from == OperandFrom::End) break;
        if (o.from == OperandFrom::Input) {
          args.push_back(x);
        } else if (o.from == OperandFrom::AttrIfSet) {
          const Value* v = m->attrs.find(o.name);
          if (v && !v->is_none()) args.push_back(b.read(ForwardOperand{OperandFrom::Attr, o.name}));
        } else {
          args.push_back(b.read(o));
        }
      }
      return b.op(row.op, std::move(args));
    }
    case ForwardHow::Dropout: {
      // Not a plain row: identity in eval or at p == 0; with gradients
      // recorded, the dropout op (run as the autograd library's own, its
      // random draws too); else the ops below, in this order, so eager and
      // compiled draw the same mask.
      const Value* pv = m->attrs.find("p");
      if (!pv || !pv->is_number()) b.fail("Dropout: its attribute 'p' is not a number");
      const double p = pv->as_number();
      if (!m->training || p == 0) return x;
      if (b.records_grad(x))
        return b.op(OpId::dropout, {x, b.constant(Value::floating(p)), b.constant(Value::boolean(true))});
      b.require_tensor(x);
      if (p == 1) return b.op(OpId::mul, {x, b.constant(Value::floating(0.0))});
      V keep = b.op(OpId::ge, {b.op(OpId::rand, {b.sizes_of(x)}), b.constant(Value::floating(p))});
      return b.op(OpId::mul, {b.op(OpId::mul, {x, keep}), b.constant(Value::floating(1.0 / (1.0 - p)))});
    }
  }
  b.fail("'" + m->class_name() + "' object has no forward to call");
}

}  // namespace kiln::runtime

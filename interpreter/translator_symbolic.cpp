// Symbolic sizes in traced Python (issue 14): a size read from a dynamic
// dimension is a SymInt, and stays one through int arithmetic, comparisons
// and into the sizes a tensor op takes; anything else that reads it gets
// its hint under a guard (InstructionTranslator::realize).
#include "interpreter/instruction_translator.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/tensor_index.h"
#include <spdlog/spdlog.h>

#include "runtime/base/log.h"

namespace kiln::interpreter {

namespace vars = kiln::variables;
using output_graph::Rel;
using output_graph::SymExpr;
using runtime::BinOp;
using runtime::CmpOp;
using runtime::UnOp;

namespace {

// The symbolic form of an operand that may join symbolic arithmetic: a
// SymInt, or a constant int (bools are ints in Python).
std::optional<SymExpr> as_sym(const VT& v) {
  if (v->is(VTKind::SymInt)) return v->sym;
  if (v->is(VTKind::Constant) && (v->value.is(runtime::Kind::Int) || v->value.is(runtime::Kind::Bool)))
    return SymExpr::constant(v->value.as_int());
  return std::nullopt;
}

}  // namespace

VT InstructionTranslator::specialize(const VT& symint, const std::string& why) {
  const std::string where = code_->name + " line " + std::to_string(code_->line_of(pc_ ? pc_ - 1 : 0));
  const int64_t v = ctx_.out.guards().shapes().specialize(symint->sym, why + " (" + where + ")");
  if (auto* lg = kiln::log::get("recompiles"))
    lg->info("{}: size {} specialized to {}: {} at {}", code_->qualname, symint->sym.str(), v, why, where);
  return vars::make_constant(runtime::Value::integer(v));
}

VT InstructionTranslator::size_of(const VT& tensor, size_t dim) {
  const output_graph::TensorMeta& m = tensor->meta();
  if (dim < m.sym.size()) return vars::make_symint(m.sym[dim], m.sizes[dim]);
  return vars::make_constant(runtime::Value::integer(m.sizes[dim]));
}

VT InstructionTranslator::symbolic_binary(BinOp op, const VT& a, const VT& b) {
  if (!a->is(VTKind::SymInt) && !b->is(VTKind::SymInt)) return nullptr;
  auto x = as_sym(a), y = as_sym(b);
  if (!x || !y) return nullptr;
  auto& env = ctx_.out.guards().shapes();
  SymExpr r;
  switch (op) {
    case BinOp::ADD: r = *x + *y; break;
    case BinOp::SUB: r = *x - *y; break;
    case BinOp::MUL: r = *x * *y; break;
    case BinOp::FLOORDIV:
    case BinOp::MOD:
      // A divisor of zero raises in Python: that stays the VM's to raise,
      // at a specialized value.
      if (env.hint(*y) == 0) return nullptr;
      env.evaluate_relation(*y, Rel::NE, SymExpr::constant(0));
      r = op == BinOp::FLOORDIV ? SymExpr::floordiv(*x, *y) : SymExpr::mod(*x, *y);
      break;
    default: return nullptr;  // /, **, bit operations: a number, specialized
  }
  return vars::make_symint(r, env.hint(r));
}

VT InstructionTranslator::symbolic_compare(CmpOp op, const VT& a, const VT& b) {
  if (!a->is(VTKind::SymInt) && !b->is(VTKind::SymInt)) return nullptr;
  auto x = as_sym(a), y = as_sym(b);
  if (!x || !y) return nullptr;
  Rel rel;
  switch (op) {
    case CmpOp::LT: rel = Rel::LT; break;
    case CmpOp::LE: rel = Rel::LE; break;
    case CmpOp::EQ: rel = Rel::EQ; break;
    case CmpOp::NE: rel = Rel::NE; break;
    case CmpOp::GT: rel = Rel::GT; break;
    case CmpOp::GE: rel = Rel::GE; break;
    default: return nullptr;
  }
  // The branch taken for the traced sizes, guarded as a relation.
  return vars::make_constant(runtime::Value::boolean(ctx_.out.guards().shapes().evaluate_relation(*x, rel, *y)));
}

// Python's max/min over int arguments compare and return one of them; over
// sizes that is an opaque max/min term (symbolic_shapes.h), which the
// relations it later meets are guarded on. Bools are left to the fold:
// min(True, T) is True, a bool, which no SymInt stands for.
VT InstructionTranslator::symbolic_min_max(bool is_max, const std::vector<VT>& args,
                                           const runtime::TupleObj* kwnames) {
  if (kwnames || args.size() < 2) return nullptr;
  bool symbolic = false;
  for (const VT& a : args) {
    if (a->is(VTKind::SymInt)) symbolic = true;
    else if (!(a->is(VTKind::Constant) && a->value.is(runtime::Kind::Int))) return nullptr;
  }
  if (!symbolic) return nullptr;
  SymExpr r = *as_sym(args[0]);
  for (size_t i = 1; i < args.size(); ++i) r = is_max ? SymExpr::max(r, *as_sym(args[i])) : SymExpr::min(r, *as_sym(args[i]));
  return vars::make_symint(r, ctx_.out.guards().shapes().hint(r));
}

VT InstructionTranslator::symbolic_unary(UnOp op, const VT& a) {
  if (!a->is(VTKind::SymInt)) return nullptr;
  auto& env = ctx_.out.guards().shapes();
  switch (op) {
    case UnOp::NEG: return vars::make_symint(-a->sym, -env.hint(a->sym));
    case UnOp::POS: return a;
    case UnOp::NOT:
      return vars::make_constant(runtime::Value::boolean(env.evaluate_relation(a->sym, Rel::EQ, SymExpr::constant(0))));
    default: return nullptr;
  }
}

VT InstructionTranslator::constant_slice(const VT& slice_of) {
  std::vector<Value> parts;
  for (const VT& p : slice_of->items) parts.push_back(constant_value(realize(p)));
  return vars::make_constant(runtime::make_slice(parts[0], parts[1], parts[2]));
}

// Only keys of slices, ints, None and Ellipsis: tensor and list indices
// take the general path (runtime/tensor/tensor_index.h), with the bounds
// specialized.
VT InstructionTranslator::symbolic_tensor_index(VT x, const VT& key) {
  std::vector<VT> parts = key->is(VTKind::Tuple) ? key->items : std::vector<VT>{key};
  bool symbolic = false;
  size_t consumed = 0;
  bool ellipsis = false;
  for (VT& p : parts) {
    p = realize_sym(p);
    if (p->is(VTKind::SliceOf)) {
      symbolic = true;
      ++consumed;
      continue;
    }
    if (p->is(VTKind::SymInt)) {
      ++consumed;
      continue;
    }
    const Value& v = p->value;
    if (v.is_same(runtime::ellipsis())) {  // a constant, or the builtin name Ellipsis
      if (ellipsis) return nullptr;  // the general path raises torch's error
      ellipsis = true;
    } else if (!p->is(VTKind::Constant)) {
      return nullptr;
    } else if (v.is(runtime::Kind::Slice) || v.is(runtime::Kind::Int)) {
      ++consumed;
    } else if (!v.is_none()) {
      return nullptr;
    }
  }
  const size_t rank = x->meta().sizes.size();
  if (!symbolic || consumed > rank) return nullptr;
  auto c = [](int64_t v) { return vars::make_constant(runtime::Value::integer(v)); };
  int64_t dim = 0;
  for (const VT& p : parts) {
    if (p->is(VTKind::SliceOf)) {
      const VT step = p->items[2]->is(VTKind::Constant) && p->items[2]->value.is_none() ? c(1) : p->items[2];
      x = tensor_op(runtime::OpId::slice, {x, c(dim++), p->items[0], p->items[1], step});
    } else if (p->value.is_same(runtime::ellipsis())) {  // the dims no other part takes
      dim += int64_t(rank - consumed);
    } else if (p->is(VTKind::SymInt) || p->value.is(runtime::Kind::Int)) {
      x = tensor_op(runtime::OpId::select, {x, c(dim), p});
    } else if (p->value.is(runtime::Kind::Slice)) {
      const auto* s = p->value.as<runtime::SliceObj>();
      x = tensor_op(runtime::OpId::slice, {x, c(dim++), vars::make_constant(s->start), vars::make_constant(s->stop),
                                           s->step.is_none() ? c(1) : vars::make_constant(s->step)});
    } else {  // None
      x = tensor_op(runtime::OpId::unsqueeze, {x, c(dim++)});
    }
  }
  return x;
}

}  // namespace kiln::interpreter

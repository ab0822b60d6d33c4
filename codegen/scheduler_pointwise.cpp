// The scheduler's pointwise family (scheduler_impl.h): an elementwise op
// extends its operands' pending expressions into one, so a chain of them
// is one loop with no buffer in between; a copy or dtype conversion is a
// pending load of its source, fused the same way.
#include <cmath>
#include <numeric>

#include "codegen/scheduler_impl.h"

namespace kiln::codegen::sched {

// Integer division and modulo raise on a zero divisor and integer pow on a
// negative exponent: eagerly, never inside a kernel.
static bool raises_per_element(OpId id, DType compute) {
  return runtime::is_integral(compute) && (id == OpId::floor_divide || id == OpId::remainder || id == OpId::pow);
}

void Scheduler::pointwise(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& tensor_of) {
  const runtime::OpDef& op = *args.op;
  const DType compute = runtime::pointwise_compute_dtype(args);
  const DType result = n.meta->dtype;
  if (raises_per_element(op.id, compute)) return eager(n, "integer " + std::string(op.name) + " can raise");
  Dims out;
  for (int i = 0; i < op.arity; ++i)
    if (tensor_of[size_t(i)]) out = broadcast(out, val(tensor_of[size_t(i)]).sizes, op.name);
  Val v;
  v.tensor = true;
  v.dtype = result;
  v.sizes = out;
  // Before any operand is loaded (a bail-out to eager after a take-over
  // would leave the taken value without its expression): scalar operands
  // that a kernel cannot hold, and open reductions that cannot fuse here.
  for (int i = 0; i < op.arity; ++i) {
    if (tensor_of[size_t(i)]) continue;
    const Value& s = args[size_t(i)];
    if (s.is(runtime::Kind::Int) && std::abs(double(s.as_int())) > 9007199254740992.0)
      return eager(n, "integer constant beyond 2^53");
  }
  for (int i = 0; i < op.arity; ++i) {
    const Node* tn = tensor_of[size_t(i)];
    if (!tn) continue;
    Val& src = val(tn);
    if (!src.materialized && src.open >= 0) {
      // A reduction's result fuses only elementwise (same dims) and only
      // one open reduction per kernel.
      if (src.sizes != out || (v.open >= 0 && v.open != src.open))
        materialize(src, "reduction result broadcast or combined");
      else
        v.open = src.open;
    }
  }
  // The largest pending operand is loaded first, so it can hand its arena
  // over (take_or_load); the others are copied after it.
  int first = -1;
  for (int i = 0; i < op.arity; ++i) {
    const Node* tn = tensor_of[size_t(i)];
    if (!tn || val(tn).materialized) continue;
    if (first < 0 || val(tn).arena.exprs.size() > val(tensor_of[size_t(first)]).arena.exprs.size()) first = i;
  }
  int operands[3] = {-1, -1, -1};
  for (int k = -1; k < op.arity; ++k) {
    const int i = k < 0 ? first : k;
    if (i < 0 || (k >= 0 && i == first)) continue;
    const DType want = (op.rule == runtime::PwRule::Where && i == 0) ? DType::Bool : compute;
    int e;
    if (const Node* tn = tensor_of[size_t(i)]) {
      e = take_or_load(tn, n, v.arena, broadcast_map(val(tn).sizes, out), out.size(), nullptr, &v.nodes);
    } else {
      const Value& s = args[size_t(i)];
      Expr c;
      c.kind = ExprKind::Const;
      c.dtype = want;
      c.value = s.is(runtime::Kind::Float) ? s.as_float() : double(s.is(runtime::Kind::Bool) ? s.as_bool() : s.as_int());
      e = v.arena.add(c);
    }
    operands[i] = cast(v.arena, e, want);
  }
  Expr e;
  e.kind = ExprKind::Op;
  e.op = op.id;
  // A comparison computes in the operands' dtype but yields bool.
  e.dtype = op.rule == runtime::PwRule::Compare ? DType::Bool : compute;
  e.a = operands[0];
  e.b = operands[1];
  e.c = operands[2];
  const int opnode = v.arena.add(e);
  v.root = cast(v.arena, opnode, result);
  v.nodes.push_back(n.name);
  val(&n) = std::move(v);
}

// contiguous / clone / to: a copy (or a conversion) is a pending load,
// fused into its consumer, or written out if it must exist.
void Scheduler::pending_copy(const Node& n, const Node* src) {
  Val& x = val(src);
  Val v;
  v.tensor = true;
  v.dtype = n.meta->dtype;
  v.sizes = x.sizes;
  if (!x.materialized && x.open >= 0) materialize(x, "copied by " + n.name);
  std::vector<int> idm(x.sizes.size());
  std::iota(idm.begin(), idm.end(), 0);
  v.root = cast(v.arena, take_or_load(src, n, v.arena, idm, x.sizes.size(), nullptr, &v.nodes), v.dtype);
  v.nodes.push_back(n.name);
  val(&n) = std::move(v);
}

}  // namespace kiln::codegen::sched

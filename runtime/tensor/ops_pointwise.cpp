// Pointwise ops: one shape rule and one kernel template for every
// Pointwise row of ops.def; the per-element work is the row's SCALAR_EXPR
// (scalar_expr.h) run by the eager evaluator (kernels/eager_eval.h).
//
// Typing follows torch's result_type. Operands fall in three tiers:
// dimensioned tensors, 0-d tensors, and Python scalars ("weak" operands, as
// in NEP 50). A lower tier only matters when its category (bool < integer <
// floating) is higher than everything above it, and then a scalar brings
// its category's default (int -> int64, float -> float32), never its
// precision: int64 tensor + 2.5 -> float32, float32 tensor + 2.0 -> float32,
// float32 tensor + float64 0-d tensor -> float32, bool tensor + 1 -> int64.
#include <optional>

#include "runtime/kernels/eager_eval.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/tensor/scalar_expr.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {
namespace {

int category(DType d) { return d == DType::Bool ? 0 : is_integral(d) ? 1 : 2; }

// torch's combine_categories: `higher` is the result of a higher tier.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (category(*lower) > category(*higher)) return promote(*higher, *lower);
  return higher;
}

struct PwPlan {
  Shape shape;
  DType compute = DType::Float32;
  DType result = DType::Float32;
};

void check_operand(const OpArgs& args, size_t i) {
  const Value& v = args[i];
  if (!v.is(Kind::Tensor) && !v.is_number())
    throw_error(ErrorKind::TypeError, std::string(args.op->name) + "(): argument '" + args.param_name(i) +
                                          "' must be Tensor or a number, not " + kind_name(v.kind()));
}

// Promoted dtype of operands [first, arity) under the three-tier rule.
DType operand_dtype(const OpArgs& args, size_t first, size_t arity) {
  std::optional<DType> dimensioned, zero_dim, scalar;
  auto join = [](std::optional<DType>& acc, DType d) { acc = acc ? promote(*acc, d) : d; };
  for (size_t i = first; i < arity; ++i) {
    const Value& v = args[i];
    if (v.is(Kind::Tensor)) {
      const Tensor t = v.as_tensor();
      join(t.dim() == 0 ? zero_dim : dimensioned, t.dtype());
    } else {
      join(scalar, v.is(Kind::Bool) ? DType::Bool : v.is(Kind::Int) ? DType::Int64 : kDefaultFloat);
    }
  }
  return *combine(dimensioned, combine(zero_dim, scalar));
}

PwPlan plan_pointwise(const OpArgs& args) {
  const OpDef& op = *args.op;
  const size_t arity = size_t(op.arity);
  PwPlan plan;
  for (size_t i = 0; i < arity; ++i) {
    check_operand(args, i);
    if (args[i].is(Kind::Tensor)) plan.shape = broadcast_shapes(op.name, plan.shape, args[i].as_tensor().sizes());
  }
  const std::string name = op.name;
  switch (op.rule) {
    case PwRule::Where: {
      const Value& cond = args[0];
      const bool is_bool = cond.is(Kind::Tensor) ? cond.as_tensor().dtype() == DType::Bool : cond.is(Kind::Bool);
      if (!is_bool)
        throw_error(ErrorKind::TypeError,
                    name + "(): argument 'condition' must be a bool tensor, not " +
                        (cond.is(Kind::Tensor) ? std::string(dtype_name(cond.as_tensor().dtype())) : kind_name(cond.kind())));
      plan.compute = plan.result = operand_dtype(args, 1, arity);
      break;
    }
    case PwRule::Fill: {
      // torch's masked_fill: the input keeps its dtype whatever the value's.
      if (!args[0].is(Kind::Tensor))
        throw_error(ErrorKind::TypeError, name + "(): argument 'input' must be Tensor, not " + kind_name(args[0].kind()));
      if (!args[1].is(Kind::Tensor) || args[1].as_tensor().dtype() != DType::Bool)
        throw_error(args[1].is(Kind::Tensor) ? ErrorKind::RuntimeError : ErrorKind::TypeError,
                    name + "(): only supports boolean masks, but got " +
                        (args[1].is(Kind::Tensor) ? "a mask of dtype " + std::string(dtype_name(args[1].as_tensor().dtype()))
                                                  : kind_name(args[1].kind())));
      if (args[2].is(Kind::Tensor) && args[2].as_tensor().dim() != 0)
        throw_error(ErrorKind::RuntimeError, name + "(): only supports a 0-dimensional value tensor, but got a tensor with " +
                                                 std::to_string(args[2].as_tensor().dim()) + " dimension(s)");
      plan.compute = plan.result = args[0].as_tensor().dtype();
      break;
    }
    case PwRule::Float:
      plan.compute = plan.result = operand_dtype(args, 0, arity);
      if (is_integral(plan.compute)) plan.compute = plan.result = kDefaultFloat;
      break;
    case PwRule::Compare:
      plan.compute = operand_dtype(args, 0, arity);
      plan.result = DType::Bool;
      break;
    case PwRule::Integral:
      plan.compute = plan.result = operand_dtype(args, 0, arity);
      if (is_floating(plan.compute))
        throw_error(ErrorKind::TypeError, name + "(): expected integral or bool operands, got " +
                                              dtype_name(plan.compute));
      break;
    case PwRule::Promote:
    case PwRule::None:
      plan.compute = plan.result = operand_dtype(args, 0, arity);
      break;
  }
  // Raised here, not only by the evaluator, so the tracer sees it too.
  if (plan.compute == DType::Bool && op.id == OpId::sub) EagerEval::bool_subtraction();
  if (plan.compute == DType::Bool && op.id == OpId::neg) EagerEval::bool_negation();
  return plan;
}

// Which compute types a rule can produce: only those are instantiated.
template <PwRule R, class T>
constexpr bool rule_allows() {
  if constexpr (R == PwRule::Float) return std::is_floating_point_v<T>;
  else if constexpr (R == PwRule::Integral) return !std::is_floating_point_v<T>;
  else return true;
}

// One operand as the loop sees it: typed base pointer plus strides over the
// output shape. A Python scalar is a single converted value read with
// stride 0 everywhere.
template <class T>
struct Operand {
  Operand() = default;
  Operand(const Operand&) = delete;  // `base` may point at `scalar`
  Tensor keep;  // holds a converted copy alive
  T scalar{};
  const T* base = nullptr;
  Shape strides;

  void init(const Value& v, const Shape& out) {
    if (v.is(Kind::Tensor)) {
      keep = v.as_tensor().to(dtype_of<T>::value);
      base = keep.data<T>();
      strides = broadcast_strides(keep, out);
    } else {
      scalar = v.is(Kind::Float) ? convert<T>(v.as_float()) : convert<T>(v.as_int());
      base = &scalar;
      strides.assign(out.size(), 0);
    }
  }
};

template <OpId Id, class T>
void run_pointwise(const OpArgs& args, const Tensor& out) {
  constexpr int N = op_arity(Id);
  constexpr bool where = op_rule(Id) == PwRule::Where;
  using A = std::conditional_t<where, bool, T>;
  using O = std::conditional_t<op_rule(Id) == PwRule::Compare, bool, T>;
  Operand<A> a;
  Operand<T> b, c;
  a.init(args[0], out.sizes());
  if constexpr (N >= 2) b.init(args[1], out.sizes());
  if constexpr (N >= 3) c.init(args[2], out.sizes());
  O* o = out.data<O>();
  EagerEval E;
  using Off = std::array<int64_t, N + 1>;
  std::array<const Shape*, N + 1> strides;
  strides[0] = &out.strides();
  strides[1] = &a.strides;
  if constexpr (N >= 2) strides[2] = &b.strides;
  if constexpr (N >= 3) strides[3] = &c.strides;

  for_each_strided<N + 1>(out.sizes(), strides, [&](const Off& off, int64_t n, const Off& st) {
    O* po = o + off[0];
    const A* pa = a.base + off[1];
    const T* pb = nullptr;
    const T* pc = nullptr;
    if constexpr (N >= 2) pb = b.base + off[2];
    if constexpr (N >= 3) pc = c.base + off[3];
    auto lb = [&](int64_t i) -> T {
      if constexpr (N >= 2) return pb[i * st[2]];
      else return T{};
    };
    auto lc = [&](int64_t i) -> T {
      if constexpr (N >= 3) return pc[i * st[3]];
      else return T{};
    };
    // Fast paths: the output is contiguous along the run and every operand
    // either steps with it or stays on one element (a scalar or broadcast
    // operand). The constant operand is hoisted so the loop vectorises.
    bool simple = st[0] == 1;
    for (size_t k = 1; k < st.size(); ++k) simple = simple && (st[k] == 0 || st[k] == 1);
    if constexpr (N <= 2) {
      if (simple) {
        auto run = [&](auto a_const, auto b_const) {
          const A av = *pa;
          const T bv = N >= 2 ? *pb : T{};
          for (int64_t i = 0; i < n; ++i) {
            const A x = decltype(a_const)::value ? av : pa[i];
            const T y = decltype(b_const)::value || N < 2 ? bv : pb[i];
            po[i] = convert<O>(ScalarExpr<Id>::eval(E, x, y, T{}));
          }
        };
        using Yes = std::true_type;
        using No = std::false_type;
        const bool ac = st[1] == 0, bc = st[N] == 0 && N == 2;
        if (!ac && !bc) run(No{}, No{});
        else if (ac && !bc) run(Yes{}, No{});
        else if (!ac && bc) run(No{}, Yes{});
        else run(Yes{}, Yes{});
        return;
      }
    } else {
      if (st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 1) {
        for (int64_t i = 0; i < n; ++i) po[i] = convert<O>(ScalarExpr<Id>::eval(E, pa[i], pb[i], pc[i]));
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i)
      po[i * st[0]] = convert<O>(ScalarExpr<Id>::eval(E, pa[i * st[1]], lb(i), lc(i)));
  });
}

}  // namespace

Tensor pointwise_shape(const OpArgs& args) {
  const PwPlan plan = plan_pointwise(args);
  return Tensor::meta(plan.shape, plan.result);
}

template <OpId Id>
Value pointwise_eager(const OpArgs& args) {
  const PwPlan plan = plan_pointwise(args);
  Tensor out = Tensor::empty(plan.shape, plan.result);
  dispatch_dtype(plan.compute, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (rule_allows<op_rule(Id), T>()) run_pointwise<Id, T>(args, out);
  });
  return Value::tensor(out);
}

// One instantiation per Pointwise row (the registry takes their addresses).
#define KILN_PW_INSTANTIATE_Pointwise(NAME) template Value pointwise_eager<OpId::NAME>(const OpArgs&);
#define KILN_PW_INSTANTIATE_Reduction(NAME)
#define KILN_PW_INSTANTIATE_Matmul(NAME)
#define KILN_PW_INSTANTIATE_View(NAME)
#define KILN_PW_INSTANTIATE_Other(NAME)
#define KILN_OP(NAME, TORCH, ARITY, KIND, ...) KILN_PW_INSTANTIATE_##KIND(NAME)
#include "runtime/tensor/ops.def"
#undef KILN_OP

DType pointwise_compute_dtype(const OpArgs& args) { return plan_pointwise(args).compute; }

}  // namespace kiln::runtime

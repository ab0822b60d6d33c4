// The per-element computation of every pointwise op, generated from the
// SCALAR_EXPR column of ops.def. `Ev` is an evaluator: eager kernels pass
// EagerEval (C++ scalars), codegen an LLVM IR emitter; each implements the
// primitives listed in ops.def's header. This header must stay free of
// anything eager-specific so codegen can include it unchanged.
//
// eval() takes the operands already converted to the compute dtype (for
// `where`, operand a is the bool condition); unused operands are ignored.
#pragma once

#include "runtime/tensor/ops.h"

namespace kiln::runtime {

template <OpId Id>
struct ScalarExpr;  // defined for Pointwise rows only

#define KILN_SCALAR_EXPR_Pointwise(NAME, EXPR)                                                       \
  template <>                                                                                        \
  struct ScalarExpr<OpId::NAME> {                                                                    \
    template <class Ev, class A, class B, class C>                                                   \
    static auto eval(Ev& E, [[maybe_unused]] A a, [[maybe_unused]] B b, [[maybe_unused]] C c) { \
      return (EXPR);                                                                                 \
    }                                                                                                \
  };
#define KILN_SCALAR_EXPR_Reduction(NAME, EXPR)
#define KILN_SCALAR_EXPR_Matmul(NAME, EXPR)
#define KILN_SCALAR_EXPR_View(NAME, EXPR)
#define KILN_SCALAR_EXPR_Other(NAME, EXPR)
#define KILN_OP(NAME, TORCH, ARITY, KIND, SIGNATURE, SHAPE, EAGER, RULE, EXPR) KILN_SCALAR_EXPR_##KIND(NAME, EXPR)
#include "runtime/tensor/ops.def"
#undef KILN_OP
#undef KILN_SCALAR_EXPR_Pointwise
#undef KILN_SCALAR_EXPR_Reduction
#undef KILN_SCALAR_EXPR_Matmul
#undef KILN_SCALAR_EXPR_View
#undef KILN_SCALAR_EXPR_Other

}  // namespace kiln::runtime

// Private to the runtime: the shape rules and eager kernels that ops.def
// names, declared from the table itself so they can never drift apart, plus
// the few helpers the kernel files share.
#pragma once

#include <array>
#include <optional>

#include "runtime/tensor/ops.h"

namespace kiln::runtime {

// ----- declarations generated from ops.def -----------------------------------
// A function named by several rows is simply redeclared; pointwise rows all
// share one template instantiated per op (ops_pointwise.cpp).
template <OpId Id>
Value pointwise_eager(const OpArgs& args);

#define KILN_DECLARE_EAGER_Pointwise(EAGER)
#define KILN_DECLARE_EAGER_Reduction(EAGER) Value EAGER(const OpArgs&);
#define KILN_DECLARE_EAGER_Matmul(EAGER) Value EAGER(const OpArgs&);
#define KILN_DECLARE_EAGER_View(EAGER) Value EAGER(const OpArgs&);
#define KILN_DECLARE_EAGER_Other(EAGER) Value EAGER(const OpArgs&);
#define KILN_OP(NAME, TORCH, ARITY, KIND, SIGNATURE, SHAPE, EAGER, RULE, EXPR) \
  Tensor SHAPE(const OpArgs&);                                                 \
  KILN_DECLARE_EAGER_##KIND(EAGER)
#include "runtime/tensor/ops.def"
#undef KILN_OP
#define KILN_OP(...)
#define KILN_DECOMPOSE(NAME, FN) Value FN(const OpArgs&, OpEmitter&);
#define KILN_MUTATES(NAME)
#include "runtime/tensor/ops.def"
#undef KILN_OP
#undef KILN_DECOMPOSE
#undef KILN_MUTATES

// Compile-time facts about each row, for templates instantiated per op.
constexpr int op_arity(OpId id) {
  constexpr int table[] = {
#define KILN_OP(NAME, TORCH, ARITY, ...) ARITY,
#include "runtime/tensor/ops.def"
#undef KILN_OP
  };
  return table[int(id)];
}
constexpr PwRule op_rule(OpId id) {
  constexpr PwRule table[] = {
#define KILN_OP(NAME, TORCH, ARITY, KIND, SIGNATURE, SHAPE, EAGER, RULE, EXPR) PwRule::RULE,
#include "runtime/tensor/ops.def"
#undef KILN_OP
  };
  return table[int(id)];
}

// ----- shared helpers ----------------------------------------------------------

// A tensor's dtype parameter: None gives `dflt`; otherwise a dtype name.
DType dtype_arg(const OpArgs& args, size_t i, DType dflt);

// A meta tensor describing a view: what view shape rules return.
Tensor meta_view(DType dtype, const Shape& sizes, const Shape& strides, int64_t offset);

// Geometry of a view of `t` (sizes, strides in elements, element offset).
struct ViewGeom {
  Shape sizes, strides;
  int64_t offset = 0;
};
// The view helpers behind select/slice/unsqueeze, shared with tensor
// indexing; `op` names the operation in error messages.
ViewGeom select_geom(const char* op, const Tensor& t, int64_t dim, int64_t index);
ViewGeom slice_geom(const char* op, const Tensor& t, int64_t dim, std::optional<int64_t> start,
                    std::optional<int64_t> end, int64_t step);
ViewGeom unsqueeze_geom(const char* op, const Tensor& t, int64_t dim);
// Strides that let `t` be viewed with `sizes` without a copy, if any
// (torch's computeStride); numel must already match.
std::optional<Shape> view_strides(const Tensor& t, const Shape& sizes);

// Matrix product with torch.matmul's shape semantics; a and b already have
// the compute dtype. `op` names the operation in errors.
Tensor matmul_tensors(const char* op, const Tensor& a, const Tensor& b);

// The global Philox generator (random.cpp): fill a float32/float64 tensor
// with uniform [0, 1) or standard normal samples.
// The tensor must be contiguous (constructors pass fresh ones).
void fill_uniform(const Tensor& t);
void fill_normal(const Tensor& t);
// The generator's building blocks, exposed for tests: one Philox 4x32-10
// block, and the platform-independent natural log used by randn.
std::array<uint32_t, 4> philox_block(std::array<uint32_t, 4> ctr, uint32_t k0, uint32_t k1);
double deterministic_log(double x);

}  // namespace kiln::runtime

// The op registry: every tensor operation kiln knows, described once in
// runtime/tensor/ops.def. Everything else (the builtins a KBC program sees, tensor
// methods, operator dispatch, the tracer's shape inference, codegen's
// lowering of pointwise ops) is derived from that table.
#pragma once

#include <utility>
#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/semantics/signature.h"
#include "runtime/value/code.h"
#include "runtime/value/value.h"

namespace kiln::runtime {

enum class OpKind : uint8_t { Pointwise, Reduction, Matmul, View, Other };

// What torch.<name> is to kiln: ops.def's TORCH column.
enum class TorchFunction : uint8_t { Same, Adapted, Unmapped, NoTorch };

// How a pointwise op types its result. All tensor operands are converted to
// the compute dtype before the scalar expression runs.
enum class PwRule : uint8_t {
  None,      // not a pointwise op
  Promote,   // compute and result: promoted dtype of the operands
  Float,     // as Promote, but integral/bool promote to float32
  Compare,   // compute: promoted; result: bool
  Integral,  // bool/int64 only (bitwise ops); compute and result: promoted
  Where,     // operand 0 is the bool condition; compute/result from operands 1, 2
  Fill,      // masked_fill: compute and result are operand 0's dtype (a tensor);
             // operand 1 a bool tensor, operand 2 a number or a 0-d tensor
};

enum class OpId : uint16_t {
#define KILN_OP(name, ...) name,
#include "runtime/tensor/ops.def"
#undef KILN_OP
};
constexpr int kNumOps = 0
#define KILN_OP(name, ...) +1
#include "runtime/tensor/ops.def"
#undef KILN_OP
    ;

struct OpDef;

// Arguments bound to an op's signature: one Value per parameter, in
// signature order, defaults filled in. A `*name` parameter holds a tuple.
// Tensor parameters may hold meta tensors when a shape rule runs for the
// tracer; eager kernels always get real ones.
struct OpArgs {
  const OpDef* op = nullptr;
  std::vector<Value> v;

  const Value& operator[](size_t i) const { return v[i]; }
  size_t size() const { return v.size(); }
  const std::string& param_name(size_t i) const;
  // Typed getters; errors name the op and the parameter.
  Tensor tensor(size_t i) const;
  int64_t integer(size_t i) const;
  double number(size_t i) const;
  bool boolean(size_t i) const;
  bool is_none(size_t i) const { return v[i].is_none(); }
  // An int, or a tuple/list of ints (for size/dims parameters).
  std::vector<int64_t> int_list(size_t i) const;
};

// Shape rule: returns a meta tensor (sizes, strides, dtype) of the result.
// Must not read tensor data. Errors name the op and the shapes involved.
using ShapeFn = Tensor (*)(const OpArgs&);
using EagerFn = Value (*)(const OpArgs&);

// Where the parts of a composite op go: each part is a call of another
// registry op. Eagerly a part runs its kernel (call_op); in a trace it
// becomes a graph node, and the OpArgs the decomposition reads hold meta
// tensors. A decomposition reads only metadata, never tensor data, and
// makes every tensor it returns through call().
class OpEmitter {
 public:
  virtual ~OpEmitter() = default;
  virtual Value call(OpId op, const CallArgs& args) = 0;
  Value call(OpId op, std::initializer_list<Value> positional);
  // Sizes a decomposition's parts depend on (split points, the pieces of a
  // roll): the tracer takes those dims of the traced tensors as numbers
  // (a symbolic size is specialized under a guard), and no others.
  void read_size(const Tensor& t, int64_t dim) { sizes_read.emplace_back(t.impl(), dim); }
  void read_sizes(const Tensor& t) {
    for (int64_t d = 0; d < t.dim(); ++d) read_size(t, d);
  }
  std::vector<std::pair<const TensorImpl*, int64_t>> sizes_read;
};
// A composite op's decomposition (ops.def's KILN_DECOMPOSE rows): the
// result of the call (a tensor, or a tuple of tensors for split, topk, ...),
// or Null when this call is the op itself (gelu with approximate='none'
// runs and is recorded as gelu).
using DecomposeFn = Value (*)(const OpArgs&, OpEmitter&);

struct OpDef {
  OpId id;
  const char* name;
  TorchFunction torch;
  int arity;  // tensor operands; -1: a list of tensors (cat)
  OpKind kind;
  const char* signature;
  PwRule rule;
  ShapeFn shape;
  EagerFn eager;
  Signature sig;  // `signature` parsed once, at startup
  DecomposeFn decompose = nullptr;  // composite ops only
  // The op writes into some of its tensor arguments (batch_norm's running
  // statistics when training): codegen keeps it an eager step and orders
  // every read of those arguments around it.
  bool mutates = false;
};

const OpDef& op_def(OpId id);
const OpDef* find_op(std::string_view name);

// Binds positional and keyword arguments to the op's signature.
// Errors: "add() missing required argument 'other'", "sum() got an
// unexpected keyword argument 'axis'", ...
OpArgs bind_op_args(const OpDef& op, const CallArgs& args);
// Bind, then run the eager kernel.
Value call_op(OpId id, const CallArgs& args);
// An op called with a foreign object among its arguments (directly or in a
// list or tuple argument: a torch tensor kiln does not take) goes to the
// embedder first: true and the result in `out` when it ran the op itself
// (python/: torch's function of the same name, so torch.relu on a float16
// tensor is torch's relu), false to raise kiln's own TypeError.
using ForeignOpHook = bool (*)(OpId id, const CallArgs& args, Value& out);
void set_foreign_op_hook(ForeignOpHook hook);
Value call_op(OpId id, std::initializer_list<Value> positional);
// The Builtin value for a registry op (what `add` names in KBC).
Value op_builtin(int op_id);
// The registry op behind an operator on tensors (value/operators.def's last
// column), or -1 when tensors do not support it.
int tensor_op_for(BinOp op);
int tensor_op_for(CmpOp op);
int tensor_op_for(UnOp op);
// Bind, then run the shape rule (tensor arguments may be meta tensors).
Tensor infer_meta(OpId id, const CallArgs& args);

// linear's result sizes and dtype from its operands' (bias: null when
// absent), raising the op's errors: its shape rule, and the tracer's
// built-in Linear leaves, which know the types but hold no input tensor.
std::pair<Shape, DType> linear_result(const Shape& x, DType x_dtype, const Shape& w, DType w_dtype,
                                      const Shape* bias, DType bias_dtype);

// A Pointwise op's compute dtype (operands are converted to it before its
// scalar expression runs) under torch's result_type rules; the result dtype
// is the shape rule's. Codegen types its fused expressions with this, so
// compiled and eager kernels compute in the same precision.
DType pointwise_compute_dtype(const OpArgs& args);

// The global random generator behind rand/randn/dropout (Philox 4x32-10):
// the same seed gives the same numbers on every machine.
void manual_seed(uint64_t seed);

}  // namespace kiln::runtime

// The scheduled program codegen lowers: what the scheduler (scheduler.cpp)
// makes of a Graph, and what lowering (lowering.cpp) turns into LLVM IR and
// the runner (program_runner.cpp) executes. No LLVM types here, so the
// scheduler and its tests compile without LLVM's headers.
//
// Shape of a program: buffers (inputs, attributes, temporaries, outputs),
// then steps in order — fused loop kernels, BLAS calls, and nodes run by
// their eager kernel. Every tensor a step touches is an Access: a buffer,
// an element offset and one stride per dimension of the step's iteration
// space, so views and broadcasting are index arithmetic, never copies.
#pragma once

#include <cstdint>
#include <string>
#include <memory>
#include <vector>

#include "output_graph/graph.h"
#include "runtime/tensor/ops.h"
#include "runtime/value/dtype.h"

namespace kiln::codegen {

using runtime::DType;

// A size, stride or offset: coef * dyn[s0] * dyn[s1] * ..., where dyn[] are
// the dynamic dimensions read from the inputs at call time. Static when
// `syms` is empty, and then lowering folds it into a constant.
struct Dim {
  int64_t coef = 0;
  std::vector<int> syms;  // sorted; a symbol may repeat (s0*s0)

  static Dim c(int64_t v) { return Dim{v, {}}; }
  static Dim sym(int s) { return Dim{1, {s}}; }
  bool is_static() const { return syms.empty(); }
  bool is(int64_t v) const { return syms.empty() && coef == v; }
  bool operator==(const Dim&) const = default;
  Dim operator*(const Dim& o) const;
  std::string str() const;  // "8", "s0", "4*s0*s1"
};
using Dims = std::vector<Dim>;
Dim product(const Dims& ds);
Dims contiguous(const Dims& sizes);

// Where a dynamic symbol's value comes from at call time: an input's size,
// an eager step's result size, or (Expr) a size the graph computes from
// the others, `expr` over earlier symbols (s1 - 1, (s0 + 1)//2: what a
// monomial Dim cannot say; codegen/symbolic_dims.h).
struct SymSource {
  enum class From : uint8_t { Input, Step, Expr } from = From::Input;
  int index = 0;  // input index, or the eager step whose result it sizes
  int dim = 0;
  output_graph::SymExpr expr;
};

struct Buffer {
  enum class Kind : uint8_t { Input, Attr, Temp, Output, Eager } kind = Kind::Temp;
  int index = -1;  // Input: placeholder index; Attr: index into Program::attrs; Eager: step index
  DType dtype = DType::Float32;
  Dims sizes;      // Temp/Output: the (contiguous) allocation; Input/Attr/Eager: the tensor
  Dims strides;    // of the tensor as it arrives (Temp/Output: contiguous)
  int slot = -1;   // Temp: arena slot from memory planning
  int64_t arena_offset = 0;  // Temp, static programs: byte offset in the arena
};

struct Access {
  int buffer = -1;
  Dim offset = Dim::c(0);
  Dims strides;  // one per dimension of the kernel's iteration space
};

// The per-element expression of a fused kernel: a DAG in an arena, each
// node's operands earlier in the arena (so emitting in order is a
// topological walk, and a shared operand is computed once).
enum class ExprKind : uint8_t {
  Load,    // access: read the element, convert to dtype
  Const,   // value, in dtype
  Op,      // a Pointwise op of ops.def over a, b, c, computed in dtype
  Cast,    // a converted to dtype
  Result,  // the reduction's value (Sum/Mean/Amax: per output row;
           // Softmax/LogSoftmax/LayerNorm: per element of the row)
};

struct Expr {
  ExprKind kind = ExprKind::Const;
  DType dtype = DType::Float32;
  runtime::OpId op{};
  int a = -1, b = -1, c = -1;
  int access = -1;
  double value = 0;
};

enum class KernelKind : uint8_t { Pointwise, Sum, Mean, Amax, Softmax, LogSoftmax, LayerNorm };
const char* kernel_kind_name(KernelKind k);
inline bool is_rowwise(KernelKind k) {  // the result has one value per element of the row
  return k == KernelKind::Softmax || k == KernelKind::LogSoftmax || k == KernelKind::LayerNorm;
}

// One loop nest. The iteration space is `outer` (then `inner` for
// reductions: the dims reduced over). Threads split outer[0].
// - Pointwise: store[outer] = epilogue.
// - Sum/Mean/Amax: r = reduce over inner of `input`; store[outer] = epilogue(r).
// - Softmax/LogSoftmax/LayerNorm: row statistics over inner of `input`, then
//   store[outer, inner] = epilogue(r) with r the normalised element.
// Accesses of `input`, `weight`, `bias` span outer+inner; those of the
// epilogue span the store's space.
struct Kernel {
  std::string name;  // kernel_0, ... (also the LLVM symbol)
  KernelKind kind = KernelKind::Pointwise;
  Dims outer, inner;
  std::vector<Expr> exprs;
  std::vector<Access> accesses;
  int input = -1, weight = -1, bias = -1;
  double eps = 0;
  int epilogue = -1;
  Access store;
  DType compute = DType::Float32;  // dtype of `input` and of Result
  // The program buffers it touches, in order of first use (accesses, then
  // the store): its function's own pointer table, bufs[l] = buffer
  // buffers[l], so kernels that differ only in which buffers they read are
  // one function (compiled once: jit.cpp kernel_key).
  std::vector<int> buffers;
  // Per entry of `buffers`: elements the caller adds to that buffer's
  // pointer (rebase_offsets), so kernels that differ only in where they
  // start in a buffer (an unrolled loop's steps, gi[t]) are one function.
  std::vector<int64_t> base_offsets;
  std::vector<std::string> fused;  // names of the graph nodes this kernel computes
  std::string why;                 // what made the result need memory (an output, a second user, ...)
  // Kernel-space rank as seen by the store's accesses.
  size_t store_rank() const { return outer.size() + (is_rowwise(kind) ? inner.size() : 0); }
};

// out[m, n] = sum_k a[m, k] * b[k, n] for each of `batch` matrices; operand
// layouts are row-major with leading dimensions, or transposed (BLAS flags).
struct Gemm {
  int a = -1, b = -1, out = -1;  // buffers
  Dim a_offset = Dim::c(0), b_offset = Dim::c(0);
  // Batched (matmul of >= 3-d operands): the broadcast batch dims, and each
  // operand's element stride along them (0 where it broadcasts). The output
  // is contiguous [batch..., m, n]. Empty: one matrix.
  Dims batch, a_batch, b_batch;
  bool trans_a = false, trans_b = false;
  Dim m, n, k, lda, ldb, ldc;
  DType dtype = DType::Float32;
  std::string node;
};

struct Step {
  enum class Kind : uint8_t { Kernel, Gemm, Eager } kind = Kind::Kernel;
  int index = -1;  // into Program::kernels / gemms / eager
};

// A node run by its eager kernel (an op codegen does not lower, a module or
// method call). Its tensor arguments are rebuilt as views at call time.
struct EagerStep {
  const output_graph::Node* node = nullptr;
  std::string why;                  // why codegen did not lower it
  std::vector<Access> tensor_args;  // per tensor argument node, in order of appearance
  std::vector<Dims> tensor_sizes;   // the view's sizes (strides in the Access)
  std::vector<const output_graph::Node*> arg_nodes;
  std::vector<int> arg_steps;       // per argument node: the eager step whose result it is (non-tensors), or -1
  int result = -1;                  // its Buffer (Kind::Eager)
};

// A graph output: a view of a buffer, or a value passed through unchanged
// (a constant, a module output that is not a tensor).
struct OutputSpec {
  enum class Kind : uint8_t { View, Value, Eager } kind = Kind::View;
  Access view;
  Dims sizes;
  runtime::Value value;
  int eager_step = -1;  // Kind::Eager: the eager step's whole result
};

// A runtime condition the compiled program assumes; a call that breaks it
// runs on the eager backend instead (never a wrong result).
struct Check {
  Dim lhs, rhs;             // lhs == rhs, or (at_least_two) lhs >= 2 and rhs unused
  bool at_least_two = false;
  std::string why;
};

struct Program {
  std::vector<Buffer> buffers;
  std::vector<runtime::Value> attrs;  // get_attr tensors, read at compile time
  std::vector<Kernel> kernels;
  std::vector<Gemm> gemms;
  std::vector<EagerStep> eager;
  // Nodes eager steps run that no graph holds (the _flash_attention call
  // standing for a hand-written attention: codegen/attention_pattern.h).
  std::vector<std::shared_ptr<const output_graph::Node>> synthetic_nodes;
  std::vector<Step> steps;
  std::vector<OutputSpec> outputs;
  std::vector<SymSource> syms;
  std::vector<Check> checks;
  size_t num_inputs = 0;
  int64_t arena_bytes = 0;  // static programs: all temporaries, planned by liveness
  // Expression nodes and loads the scheduler copied or re-expressed: O(graph
  // length) by design (scheduler.cpp), and what a test holds it to.
  int64_t schedule_work = 0;
  bool dynamic() const { return !syms.empty(); }
  std::string summary() const;  // one line per step: what it computes and which nodes it fused
};

// Graph -> Program. Throws Unsupported (with a reason) for a graph the
// backend cannot take at all; the backend then uses eager for it.
struct Unsupported {
  std::string reason;
};
Program schedule(const output_graph::Graph& graph);

// Passes (program_passes.cpp). simplify: drops size-1 dims and merges dims
// every access walks as one. plan_memory: places static temporaries in one
// arena by liveness (dynamic programs allocate per call).
void simplify(Kernel& k);
// Moves each buffer's smallest constant access offset into
// Kernel::base_offsets (k.buffers must be set): the kernel's own offsets
// become relative to it.
void rebase_offsets(Kernel& k);
void plan_memory(Program& prog);

}  // namespace kiln::codegen

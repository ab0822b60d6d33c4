// Private to the scheduler (codegen/scheduler*.cpp; the rest of codegen sees
// only `schedule()` in kernel_ir.h): the Scheduler class, the Val it keeps
// per graph node and the expression arena pending values are built in.
//
// The class is one, its definition is split by what it handles:
//   scheduler.cpp            the arena (copy, take over, re-express loads),
//                            materializing, inputs and outputs, the walk
//                            over the graph and the dispatch per op kind
//   scheduler_pointwise.cpp  pointwise ops and copies (pending expressions)
//   scheduler_reduce.cpp     reductions (open kernels pointwise consumers join)
//   scheduler_matmul.cpp     matmul / linear as BLAS calls (Gemm steps)
//   scheduler_view.cpp       views: folded into a consumer's indexing, or
//                            new strides over a materialized buffer
//   scheduler_eager.cpp      eager steps, and what must be computed before
//                            an op that writes its arguments
// No LLVM here: the scheduler and its tests build without LLVM's headers.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/symbolic_dims.h"
#include "output_graph/graph.h"
#include "runtime/tensor/ops.h"

namespace kiln::codegen::sched {

using output_graph::Arg;
using output_graph::Graph;
using output_graph::Node;
using output_graph::NodeOp;
using output_graph::SymExpr;
using runtime::OpId;
using runtime::OpKind;
using runtime::Tensor;
using runtime::Value;

[[noreturn]] inline void unsupported(std::string reason) { throw Unsupported{std::move(reason)}; }

// An expression DAG under construction (a pending value's, or a kernel's).
struct Arena {
  std::vector<Expr> exprs;
  std::vector<Access> accesses;
  int add(Expr e) {
    exprs.push_back(e);
    return int(exprs.size()) - 1;
  }
};

// A reduction whose kernel is open: its input side is built, its epilogue
// is whatever pointwise consumers add before something materializes it.
struct OpenReduction {
  Kernel kernel;              // input/weight/bias exprs in kernel.exprs
  std::vector<int> result_map;  // result dim -> kernel store-space dim (-1: a kept size-1 dim)
};

struct Val {
  bool tensor = false;
  DType dtype = DType::Float32;
  Dims sizes;
  // materialized
  bool materialized = false;
  Access view;  // strides over `sizes`
  // pending
  Arena arena;
  int root = -1;
  int open = -1;  // index into Scheduler::open_ (its Result nodes refer to it)
  std::vector<std::string> nodes;  // graph nodes folded into the pending expression
  // an eager step's non-tensor result
  int eager_step = -1;
  // Its arena was taken over by its only consumer: nothing may read it again.
  bool consumed = false;
};

class Scheduler {
 public:
  explicit Scheduler(const Graph& g) : g_(g) {}

  Program run();

 private:
  // -- values (scheduler.cpp)
  Val& val(const Node* n) { return vals_[size_t(n->index)]; }
  Dims dims_of(const output_graph::TensorMeta& m, int input_index);
  // A node's sizes: its symbolic sizes where the graph has them (issue 14).
  Dims sizes_of(const Node& n) {
    if (n.meta->sym.empty()) return dims_of(*n.meta, -1);
    return sym_.of(n.meta->sym);
  }
  int add_buffer(Buffer b) {
    prog_.buffers.push_back(std::move(b));
    return int(prog_.buffers.size()) - 1;
  }
  Val materialized(int buffer, const Dims& sizes, const Dims& strides, Dim offset, DType dt) {
    Val v;
    v.tensor = true;
    v.dtype = dt;
    v.sizes = sizes;
    v.materialized = true;
    v.view = Access{buffer, offset, strides};
    return v;
  }
  void materialize(Val& v, const std::string& why);
  // v (rank r) copied into a contiguous buffer of its own: a BLAS operand
  // whose layout no leading dimension describes.
  Val contiguous_copy(Val& v, size_t r, const std::string& why = "matmul operand layout");
  int emit_kernel(Kernel k);

  // -- expressions (scheduler.cpp)
  int copy_expr(const Arena& src, int root, Arena& dst, const std::vector<int>& dim_map, size_t dst_rank);
  void remap_in_place(Arena& a, const std::vector<int>& dim_map, size_t dst_rank);
  int load_of(Val& v, Arena& dst, const std::vector<int>& dim_map, size_t dst_rank, int* open_out);
  int take_or_load(const Node* src, const Node& consumer, Arena& dst, const std::vector<int>& dim_map,
                   size_t dst_rank, int* open_out, std::vector<std::string>* nodes_out);
  bool only_consumer(const Node* src, const Node& consumer) const;
  static int cast(Arena& a, int e, DType to) {
    if (a.exprs[size_t(e)].dtype == to) return e;
    Expr c;
    c.kind = ExprKind::Cast;
    c.dtype = to;
    c.a = e;
    return a.add(c);
  }
  std::vector<int> broadcast_map(const Dims& from, const Dims& to) const;
  Dims broadcast(const Dims& a, const Dims& b, const char* op);

  // -- nodes (scheduler.cpp)
  void placeholder(const Node& n);
  void get_attr(const Node& n);
  void call_function(const Node& n);
  void output(const Node& n);
  // -- one family each (the files above)
  void pointwise(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& tensor_of);
  void pending_copy(const Node& n, const Node* src);
  void reduction(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& pnode);
  void matmul(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& pnode);
  void batched_matmul(const Node& n, const Node* an, const Node* bn);
  // One BLAS call writing a fresh contiguous [out_sizes] temporary (gm.out, gm.ldc set here).
  Val add_gemm(Gemm gm, const Dims& out_sizes);
  void view(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& pnode);
  bool fold_view(const Node& n, const runtime::OpArgs& args, const Node* src);
  bool symbolic_view(const Node& n, const runtime::OpArgs& args, const Node* src);
  void eager(const Node& n, const std::string& why);
  void before_mutation(const Node& n, const EagerStep& s);

  const Graph& g_;
  Program prog_;
  SymDims sym_{prog_};
  std::vector<Val> vals_;
  std::vector<OpenReduction> open_;
  std::map<std::pair<int, int>, int> input_syms_;  // (input, dim) -> symbol
};

}  // namespace kiln::codegen::sched

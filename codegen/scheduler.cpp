// Graph -> Program: decides what fuses with what.
//
// Walks the graph in order, holding every tensor node as a Val: either
// *materialized* (a view of a buffer) or *pending* (an expression not yet in
// any kernel, possibly ending in a reduction whose kernel is still open).
// Pointwise ops extend pending expressions, so a chain of them becomes one
// loop with no intermediate buffers; a reduction takes its pending input as
// its producer and stays open so pointwise consumers of its result fuse in
// as the epilogue. A pending value is materialized (its kernel emitted)
// only when something needs memory: a second user, a BLAS call, an eager
// step, a view, a graph output, or a broadcast of a reduction's result.
//
// Index maps are affine: an expression's loads carry strides over the
// expression's own dims, and inlining it into a consumer re-expresses those
// strides over the consumer's dims (a permutation plus broadcast zeros), so
// fusion never needs more than stride arithmetic.
//
// Cost: linear in graph length. A pending value's only consumer takes its
// arena over (moved, its loads re-expressed in place) instead of copying it,
// so a chain of N pointwise ops builds one arena of O(N) nodes, not N
// arenas of 1..N nodes. When several pending operands meet, the largest is
// taken over and the others copied (small into large: O(N log N) at worst).
// Program::schedule_work counts the nodes copied or re-expressed, so a test
// can hold it to O(N) without a clock (tests/cpp/test_codegen.cpp).
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include "codegen/attention_pattern.h"
#include "codegen/kernel_ir.h"
#include "codegen/symbolic_dims.h"
#include "runtime/error.h"
#include "runtime/ops_kernels.h"
#include "runtime/tensor.h"

namespace kiln::codegen {

using output_graph::Arg;
using output_graph::Graph;
using output_graph::Node;
using output_graph::NodeOp;
using output_graph::SymExpr;
using runtime::OpId;
using runtime::OpKind;
using runtime::Tensor;
using runtime::Value;

namespace {

[[noreturn]] void unsupported(std::string reason) { throw Unsupported{std::move(reason)}; }

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
  // -- values
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
  // One BLAS call writing a fresh contiguous [out_sizes] temporary (gm.out, gm.ldc set here).
  Val add_gemm(Gemm gm, const Dims& out_sizes);
  int emit_kernel(Kernel k);

  // -- expressions
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

  // -- nodes
  void placeholder(const Node& n);
  void get_attr(const Node& n);
  void call_function(const Node& n);
  void pointwise(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& tensor_of);
  void reduction(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& pnode);
  void matmul(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& pnode);
  void batched_matmul(const Node& n, const Node* an, const Node* bn);
  void view(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& pnode);
  bool fold_view(const Node& n, const runtime::OpArgs& args, const Node* src);
  bool symbolic_view(const Node& n, const runtime::OpArgs& args, const Node* src);
  void eager(const Node& n, const std::string& why);
  void before_mutation(const Node& n, const EagerStep& s);
  void output(const Node& n);

  const Graph& g_;
  Program prog_;
  SymDims sym_{prog_};
  std::vector<Val> vals_;
  std::vector<OpenReduction> open_;
  std::vector<int> distinct_users_;
  std::map<std::pair<int, int>, int> input_syms_;  // (input, dim) -> symbol
};

std::vector<int> Scheduler::broadcast_map(const Dims& from, const Dims& to) const {
  // Right-aligned; a size-1 dim that the target has wider reads with stride 0.
  std::vector<int> map(from.size(), -1);
  const size_t shift = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    const Dim& t = to[i + shift];
    map[i] = (from[i].is(1) && !t.is(1)) ? -1 : int(i + shift);
  }
  return map;
}

Dims Scheduler::broadcast(const Dims& a, const Dims& b, const char* op) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim* x = i + a.size() >= r ? &a[i + a.size() - r] : nullptr;
    const Dim* y = i + b.size() >= r ? &b[i + b.size() - r] : nullptr;
    if (!x || x->is(1)) out[i] = y ? *y : *x;
    else if (!y || y->is(1) || *x == *y) out[i] = *x;
    else {
      // Equal when traced (the shape rule accepted them): a call where they
      // differ must not run this program.
      prog_.checks.push_back({*x, *y, false, std::string(op) + ": broadcast dims " + x->str() + " and " + y->str()});
      out[i] = x->is_static() ? *x : *y;
    }
  }
  return out;
}

Dims Scheduler::dims_of(const output_graph::TensorMeta& m, int input_index) {
  Dims d(m.sizes.size());
  for (size_t i = 0; i < m.sizes.size(); ++i) {
    const bool dyn = input_index >= 0 && i < m.dynamic.size() && m.dynamic[i];
    if (!dyn) {
      d[i] = Dim::c(m.sizes[i]);
      continue;
    }
    auto key = std::make_pair(input_index, int(i));
    auto it = input_syms_.find(key);
    int s;
    if (it != input_syms_.end()) {
      s = it->second;
    } else {
      s = int(prog_.syms.size());
      prog_.syms.push_back({SymSource::From::Input, input_index, int(i)});
      input_syms_[key] = s;
      // The kernels treat a dynamic dim as never broadcasting (Dynamo's 0/1
      // specialisation): a call with size 0 or 1 there runs eagerly instead.
      prog_.checks.push_back({Dim::sym(s), Dim::c(0), true, "dynamic dim s" + std::to_string(s) + " >= 2"});
    }
    d[i] = Dim::sym(s);
  }
  return d;
}

// Re-expresses one load's strides over dst's dims: src dim i becomes dst
// dim dim_map[i] (or is dropped: -1).
static Access remap_access(const Access& a, const std::vector<int>& dim_map, size_t dst_rank) {
  Access na{a.buffer, a.offset, Dims(dst_rank, Dim::c(0))};
  for (size_t i = 0; i < a.strides.size(); ++i) {
    if (dim_map[i] < 0) continue;
    Dim& s = na.strides[size_t(dim_map[i])];
    if (s.is(0)) s = a.strides[i];
    else unsupported("two source dims map onto one kernel dim");  // never made by this scheduler
  }
  return na;
}

static bool is_identity(const std::vector<int>& dim_map, size_t dst_rank) {
  if (dim_map.size() != dst_rank) return false;
  for (size_t i = 0; i < dim_map.size(); ++i)
    if (dim_map[i] != int(i)) return false;
  return true;
}

// Copies the DAG under `root` from src into dst (appended), re-expressing
// each load over dst's dims. Result nodes are kept; shared nodes stay
// shared. Iterative (operands precede their users in an arena), so a
// 10,000-op chain does not recurse 10,000 deep.
int Scheduler::copy_expr(const Arena& src, int root, Arena& dst, const std::vector<int>& dim_map, size_t dst_rank) {
  std::vector<int> at(size_t(root) + 1, -1);  // src node -> dst node; -2: needed, not yet copied
  at[size_t(root)] = -2;
  for (int i = root; i >= 0; --i) {
    if (at[size_t(i)] != -2) continue;
    const Expr& e = src.exprs[size_t(i)];
    for (int op : {e.a, e.b, e.c})
      if (op >= 0) at[size_t(op)] = -2;
  }
  const bool identity = is_identity(dim_map, dst_rank);
  for (int i = 0; i <= root; ++i) {
    if (at[size_t(i)] != -2) continue;
    Expr e = src.exprs[size_t(i)];
    if (e.kind == ExprKind::Load) {
      const Access& a = src.accesses[size_t(e.access)];
      dst.accesses.push_back(identity ? a : remap_access(a, dim_map, dst_rank));
      e.access = int(dst.accesses.size()) - 1;
    } else {
      for (int* op : {&e.a, &e.b, &e.c})
        if (*op >= 0) *op = at[size_t(*op)];
    }
    at[size_t(i)] = dst.add(e);
    ++prog_.schedule_work;
  }
  return at[size_t(root)];
}

// The arena's loads re-expressed over dst's dims where it lies.
void Scheduler::remap_in_place(Arena& a, const std::vector<int>& dim_map, size_t dst_rank) {
  if (is_identity(dim_map, dst_rank)) return;
  for (Access& acc : a.accesses) {
    acc = remap_access(acc, dim_map, dst_rank);
    ++prog_.schedule_work;
  }
}

// v as an expression in dst (whose dims are dst_rank wide, v's dims mapping
// by dim_map). A pending v is inlined (copied); an open reduction is
// reported in *open_out so the caller can check it fuses only one.
int Scheduler::load_of(Val& v, Arena& dst, const std::vector<int>& dim_map, size_t dst_rank, int* open_out) {
  if (v.consumed) unsupported("internal: a value read after its only consumer took it over");
  if (v.materialized) {
    Expr e;
    e.kind = ExprKind::Load;
    e.dtype = v.dtype;
    e.access = int(dst.accesses.size());
    dst.accesses.push_back(remap_access(v.view, dim_map, dst_rank));
    ++prog_.schedule_work;
    return dst.add(e);
  }
  if (v.open >= 0 && open_out) *open_out = v.open;
  return copy_expr(v.arena, v.root, dst, dim_map, dst_rank);
}

// Whether `consumer` is the only node that reads src, and reads it once.
bool Scheduler::only_consumer(const Node* src, const Node& consumer) const {
  for (const Node* u : src->users)
    if (u != &consumer) return false;
  int uses = 0;
  std::function<void(const Arg&)> count = [&](const Arg& a) {
    if (a.kind == Arg::Kind::Node) uses += a.node == src;
    else if (a.kind == Arg::Kind::List)
      for (const Arg& i : a.items) count(i);
  };
  for (const Arg& a : consumer.args) count(a);
  for (const auto& kv : consumer.kwargs) count(kv.second);
  return uses == 1;
}

// load_of, except that a pending src whose only reader is `consumer` hands
// its arena over when dst is still empty (the linear-cost path: see the top
// of this file); its graph-node names move to *nodes_out too. Otherwise a
// copy, and the names are appended.
int Scheduler::take_or_load(const Node* srcn, const Node& consumer, Arena& dst, const std::vector<int>& dim_map,
                            size_t dst_rank, int* open_out, std::vector<std::string>* nodes_out) {
  Val& src = val(srcn);
  if (!src.materialized && !src.consumed && dst.exprs.empty() && dst.accesses.empty() &&
      only_consumer(srcn, consumer)) {
    if (src.open >= 0 && open_out) *open_out = src.open;
    dst = std::move(src.arena);
    remap_in_place(dst, dim_map, dst_rank);
    if (nodes_out) {
      if (nodes_out->empty()) *nodes_out = std::move(src.nodes);
      else nodes_out->insert(nodes_out->end(), src.nodes.begin(), src.nodes.end());
    }
    const int root = src.root;
    src.arena = Arena{};
    src.nodes.clear();
    src.root = -1;
    src.consumed = true;
    return root;
  }
  const bool pending = !src.materialized;
  const int e = load_of(src, dst, dim_map, dst_rank, open_out);
  if (pending && nodes_out) nodes_out->insert(nodes_out->end(), src.nodes.begin(), src.nodes.end());
  return e;
}

Val Scheduler::contiguous_copy(Val& v, size_t r, const std::string& why) {
  Val copy = v;
  copy.materialized = false;
  copy.arena = Arena{};
  std::vector<int> id(r);
  std::iota(id.begin(), id.end(), 0);
  copy.root = load_of(v, copy.arena, id, r, nullptr);
  copy.open = -1;
  materialize(copy, why);
  return copy;
}

Val Scheduler::add_gemm(Gemm gm, const Dims& out_sizes) {
  Buffer ob;
  ob.kind = Buffer::Kind::Temp;
  ob.dtype = gm.dtype;
  ob.sizes = out_sizes;
  ob.strides = contiguous(out_sizes);
  gm.out = add_buffer(ob);
  gm.ldc = gm.n;
  prog_.gemms.push_back(gm);
  prog_.steps.push_back({Step::Kind::Gemm, int(prog_.gemms.size()) - 1});
  return materialized(prog_.gemms.back().out, out_sizes, ob.strides, Dim::c(0), gm.dtype);
}

int Scheduler::emit_kernel(Kernel k) {
  k.name = "kernel_" + std::to_string(prog_.kernels.size());
  simplify(k);
  auto uses = [&](const Access& acc) {
    if (std::find(k.buffers.begin(), k.buffers.end(), acc.buffer) == k.buffers.end()) k.buffers.push_back(acc.buffer);
  };
  for (const Access& acc : k.accesses) uses(acc);  // (the loads may be none: a kernel that only stores)
  uses(k.store);
  rebase_offsets(k);
  prog_.kernels.push_back(std::move(k));
  prog_.steps.push_back({Step::Kind::Kernel, int(prog_.kernels.size()) - 1});
  return int(prog_.kernels.size()) - 1;
}

// Gives a pending value memory: emits its kernel (a pointwise loop, or the
// open reduction with the value as its epilogue) into a fresh contiguous
// temporary, after which v is a plain view of it.
void Scheduler::materialize(Val& v, const std::string& why) {
  if (v.materialized || !v.tensor) return;
  Buffer b;
  b.kind = Buffer::Kind::Temp;
  b.dtype = v.dtype;
  b.sizes = v.sizes;
  b.strides = contiguous(v.sizes);
  const int buf = add_buffer(b);
  Kernel k;
  std::vector<int> map;
  size_t rank;
  if (v.open < 0) {
    k.kind = KernelKind::Pointwise;
    k.outer = v.sizes;
    if (k.outer.empty()) k.outer.push_back(Dim::c(1));  // a 0-d result: one iteration
    rank = k.outer.size();
    map.resize(v.sizes.size());
    std::iota(map.begin(), map.end(), int(rank - v.sizes.size()));
    k.compute = v.dtype;
  } else {
    OpenReduction& r = open_[size_t(v.open)];
    k = std::move(r.kernel);
    map = r.result_map;
    rank = k.store_rank();
  }
  if (v.consumed) unsupported("internal: a value materialized after its only consumer took it over");
  if (k.exprs.empty() && k.accesses.empty()) {
    // A pointwise kernel: v's arena becomes the kernel's (v turns into a
    // view of the buffer below, so nothing reads the arena again).
    remap_in_place(v.arena, map, rank);
    k.exprs = std::move(v.arena.exprs);
    k.accesses = std::move(v.arena.accesses);
    k.epilogue = v.root;
  } else {
    Arena ep{std::move(k.exprs), std::move(k.accesses)};
    k.epilogue = copy_expr(v.arena, v.root, ep, map, rank);
    k.exprs = std::move(ep.exprs);
    k.accesses = std::move(ep.accesses);
  }
  k.store = Access{buf, Dim::c(0), Dims(rank, Dim::c(0))};
  for (size_t i = 0; i < v.sizes.size(); ++i)
    if (map[i] >= 0) k.store.strides[size_t(map[i])] = b.strides[i];
  k.fused.insert(k.fused.end(), v.nodes.begin(), v.nodes.end());
  k.why = why;
  emit_kernel(std::move(k));
  Val m = materialized(buf, v.sizes, b.strides, Dim::c(0), v.dtype);
  v = std::move(m);
}

// ------------------------------------------------------------------ nodes --

void Scheduler::placeholder(const Node& n) {
  const int input = int(prog_.num_inputs++);
  if (!n.meta) unsupported("placeholder '" + n.name + "' is not a tensor");
  Buffer b;
  b.kind = Buffer::Kind::Input;
  b.index = input;
  b.dtype = n.meta->dtype;
  b.sizes = n.meta->sym.empty() ? dims_of(*n.meta, input) : sym_.of(n.meta->sym);
  // A dynamic contiguous input stays contiguous (the guard checks the
  // layout class), so its strides are products of its sizes.
  const bool contig = n.meta->strides == runtime::contiguous_strides(n.meta->sizes);
  if (contig) {
    b.strides = contiguous(b.sizes);
  } else {
    for (int64_t s : n.meta->strides) b.strides.push_back(Dim::c(s));
  }
  const int buf = add_buffer(b);
  val(&n) = materialized(buf, b.sizes, b.strides, Dim::c(0), b.dtype);
}

void Scheduler::get_attr(const Node& n) {
  const Value* v = g_.attr_of(n);
  if (!v || !v->is(runtime::Kind::Tensor)) unsupported("get_attr '" + n.target_str() + "' is not a tensor attribute");
  const Tensor t = v->as_tensor();
  prog_.attrs.push_back(*v);
  Buffer b;
  b.kind = Buffer::Kind::Attr;
  b.index = int(prog_.attrs.size()) - 1;
  b.dtype = t.dtype();
  for (int64_t s : t.sizes()) b.sizes.push_back(Dim::c(s));
  for (int64_t s : t.strides()) b.strides.push_back(Dim::c(s));
  const int buf = add_buffer(b);
  val(&n) = materialized(buf, b.sizes, b.strides, Dim::c(0), b.dtype);
}

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

void Scheduler::reduction(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& pnode) {
  Val& x = val(pnode[0]);
  if (!x.materialized && x.open >= 0) materialize(x, "input of another reduction");
  const OpId id = args.op->id;
  const size_t r = x.sizes.size();
  OpenReduction open;
  Kernel& k = open.kernel;
  k.compute = n.meta->dtype;
  std::vector<bool> reduced(r, false);
  if (id == OpId::softmax || id == OpId::log_softmax) {
    reduced[size_t(runtime::wrap_dim(args.op->name, args.integer(1), int64_t(r)))] = true;
    k.kind = id == OpId::softmax ? KernelKind::Softmax : KernelKind::LogSoftmax;
  } else if (id == OpId::layer_norm) {
    const size_t m = args.int_list(1).size();
    for (size_t d = r - m; d < r; ++d) reduced[d] = true;
    k.kind = KernelKind::LayerNorm;
    k.eps = args.number(4);
  } else {
    if (args.is_none(1) || args.int_list(1).empty()) reduced.assign(r, true);
    else
      for (int64_t d : args.int_list(1)) reduced[size_t(runtime::wrap_dim(args.op->name, d, int64_t(r)))] = true;
    k.kind = id == OpId::sum ? KernelKind::Sum : id == OpId::mean ? KernelKind::Mean : KernelKind::Amax;
    if (id == OpId::sum && runtime::is_integral(x.dtype)) k.compute = DType::Int64;
    if (id == OpId::amax) k.compute = x.dtype;
  }
  // Kernel space: kept dims in order, then reduced dims in order. A
  // reduction to a scalar gets one outer dim of size 1 (threads split outer[0]).
  std::vector<int> xmap(r);
  std::vector<size_t> kept, red;
  for (size_t d = 0; d < r; ++d) (reduced[d] ? red : kept).push_back(d);
  const bool scalar = kept.empty();
  if (scalar) k.outer.push_back(Dim::c(1));
  for (size_t d : kept) {
    xmap[d] = int(k.outer.size());
    k.outer.push_back(x.sizes[d]);
  }
  for (size_t d : red) {
    xmap[d] = int(k.outer.size() + k.inner.size());
    k.inner.push_back(x.sizes[d]);
  }
  const size_t full = k.outer.size() + k.inner.size();
  Arena in;
  k.input = cast(in, take_or_load(pnode[0], n, in, xmap, full, nullptr, &k.fused), k.compute);  // the producers it computes inline
  if (k.kind == KernelKind::LayerNorm) {
    for (auto [slot, i] : {std::pair{&k.weight, size_t(2)}, std::pair{&k.bias, size_t(3)}}) {
      if (!pnode[i]) continue;
      Val& w = val(pnode[i]);
      if (!w.materialized && w.open >= 0) materialize(w, "layer_norm parameter");
      // weight/bias span the trailing (normalized) dims, i.e. the inner ones.
      std::vector<int> wmap(w.sizes.size());
      for (size_t j = 0; j < w.sizes.size(); ++j) wmap[j] = int(k.outer.size() + j);
      *slot = cast(in, load_of(w, in, wmap, full, nullptr), k.compute);
    }
  }
  k.exprs = std::move(in.exprs);
  k.accesses = std::move(in.accesses);
  k.fused.push_back(n.name);
  // The result's dims in store space.
  if (is_rowwise(k.kind)) {
    open.result_map = xmap;
  } else {
    const bool keepdim = args.boolean(2);
    size_t next = scalar ? 1 : 0;
    for (size_t d = 0; d < r; ++d) {
      if (!reduced[d]) open.result_map.push_back(int(next++));
      else if (keepdim) open.result_map.push_back(-1);
    }
  }
  Val v;
  v.tensor = true;
  v.dtype = n.meta->dtype;
  for (size_t i = 0; i < n.meta->sizes.size(); ++i) {
    if (open.result_map[i] < 0) v.sizes.push_back(Dim::c(1));
    else if (is_rowwise(k.kind)) v.sizes.push_back(x.sizes[i]);
    else v.sizes.push_back(k.outer[size_t(open.result_map[i])]);
  }
  Expr res;
  res.kind = ExprKind::Result;
  res.dtype = k.compute;
  v.root = cast(v.arena, v.arena.add(res), v.dtype);
  open_.push_back(std::move(open));
  v.open = int(open_.size()) - 1;
  val(&n) = std::move(v);
}

void Scheduler::eager(const Node& n, const std::string& why) {
  EagerStep s;
  s.node = &n;
  s.why = why;
  auto add_arg = [&](const Node* a) {
    Val& v = val(a);
    if (v.tensor) {
      materialize(v, "argument of eager " + n.name);
      s.tensor_args.push_back(v.view);
      s.tensor_sizes.push_back(v.sizes);
    } else {
      s.tensor_args.push_back(Access{});
      s.tensor_sizes.push_back({});
    }
    s.arg_nodes.push_back(a);
    s.arg_steps.push_back(v.tensor ? -1 : v.eager_step);
  };
  std::function<void(const Arg&)> walk = [&](const Arg& a) {
    if (a.kind == Arg::Kind::Node) add_arg(a.node);
    else if (a.kind == Arg::Kind::List)
      for (const Arg& i : a.items) walk(i);
  };
  for (const Arg& a : n.args) walk(a);
  for (const auto& kv : n.kwargs) walk(kv.second);
  if (n.op == NodeOp::CallFunction && runtime::op_def(OpId(n.op_id)).mutates) before_mutation(n, s);
  const int step = int(prog_.eager.size());
  Val v;
  if (n.meta) {
    Buffer b;
    b.kind = Buffer::Kind::Eager;
    b.index = step;
    b.dtype = n.meta->dtype;
    // A graph with symbols says what every size is (TensorMeta::sym). In
    // another program with dynamic sizes, an eager result's sizes may
    // follow them (cat of a dynamic input): every dim is read from the
    // result at call time.
    const bool dynamic_program = !prog_.syms.empty() && g_.symbols.empty();
    if (!g_.symbols.empty()) b.sizes = sizes_of(n);
    else for (size_t d = 0; d < n.meta->sizes.size(); ++d) {
      const bool dyn = dynamic_program || (d < n.meta->dynamic.size() && n.meta->dynamic[d]);
      if (dyn) {
        b.sizes.push_back(Dim::sym(int(prog_.syms.size())));
        prog_.syms.push_back({SymSource::From::Step, step, int(d)});
      } else {
        b.sizes.push_back(Dim::c(n.meta->sizes[d]));
      }
    }
    b.strides = contiguous(b.sizes);  // the runner makes the result contiguous
    s.result = add_buffer(b);
    v = materialized(s.result, b.sizes, b.strides, Dim::c(0), b.dtype);
  }
  v.eager_step = step;
  prog_.eager.push_back(std::move(s));
  prog_.steps.push_back({Step::Kind::Eager, step});
  val(&n) = std::move(v);
}

// An op that writes into its tensor arguments (batch_norm's running
// statistics) runs as an eager step, in graph order. A pending value that
// reads one of those buffers was made by an earlier node, so it must see
// the old contents: it is computed now, before the write. (A materialized
// view reads the memory when its consumer runs, after the write, as eager
// does.) In a program with dynamic sizes a failed check after an eager step
// reruns the whole graph eagerly, which would write twice: such a graph
// runs on the eager backend.
void Scheduler::before_mutation(const Node& n, const EagerStep& s) {
  if (!prog_.syms.empty())
    unsupported(std::string(runtime::op_def(OpId(n.op_id)).name) + " writes its arguments in a program with dynamic sizes");
  std::vector<int> written;
  for (const Access& a : s.tensor_args)
    if (a.buffer >= 0) written.push_back(a.buffer);
  auto reads = [&](const std::vector<Access>& accesses) {
    for (const Access& a : accesses)
      if (std::find(written.begin(), written.end(), a.buffer) != written.end()) return true;
    return false;
  };
  for (const auto& np : g_.nodes()) {
    const Node& m = *np;
    if (m.index >= n.index) break;
    Val& v = val(&m);
    if (!v.tensor || v.materialized || v.consumed) continue;
    // Only a value some later node still reads is live (an open reduction
    // belongs to its latest consumer).
    bool live = false;
    for (const Node* u : m.users) live = live || u->index > n.index;
    if (!live) continue;
    if (reads(v.arena.accesses) || (v.open >= 0 && reads(open_[size_t(v.open)].kernel.accesses)))
      materialize(v, "read before " + n.name + " writes its arguments");
  }
}

// b == a * q for a monomial q with a positive coefficient: b >= a for
// every value of the symbols (all >= 2), and b is a multiple of a.
static bool multiple_of(const Dim& b, const Dim& a) {
  if (a.coef <= 0 || b.coef % a.coef != 0 || b.coef / a.coef < 1) return false;
  return std::includes(b.syms.begin(), b.syms.end(), a.syms.begin(), a.syms.end());
}

// a [..., M, K] @ b [..., K, N] with b at least 3-d (a 2-d b takes the
// plain path, A's leading dims as rows): one BLAS call per matrix of the
// broadcast batch, each operand read in place (row-major or transposed; a
// layout BLAS cannot read is copied contiguous first), the result one
// contiguous [batch..., M, N] buffer in the arena that consumers (scale,
// mask, softmax) fuse their loads from.
void Scheduler::batched_matmul(const Node& n, const Node* an, const Node* bn) {
  const DType dt = n.meta->dtype;
  Val& a = val(an);
  Val& b = val(bn);
  materialize(a, "matmul operand");
  materialize(b, "matmul operand");
  // BLAS's view of an operand's last two dims: row-major or transposed,
  // with its leading dimension; else a contiguous copy (then row-major).
  auto layout = [&](Val& v, bool& trans, Dim& ld) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      const size_t r = v.sizes.size();
      bool ok = v.view.offset.is_static();
      for (const Dim& st : v.view.strides) ok = ok && st.is_static();
      for (const Dim& sz : v.sizes) ok = ok && sz.is_static();
      if (!ok) {
        // Symbolic sizes (every symbol >= 2): a layout BLAS reads for every
        // size the guards admit, decided on the Dims themselves: unit
        // stride along one dim, and the other stride a multiple of the
        // unit dim's size (so it is a valid leading dimension).
        const Dim &rows = v.sizes[r - 2], &cols = v.sizes[r - 1];
        const Dim &rs = v.view.strides[r - 2], &cs = v.view.strides[r - 1];
        if ((cols.is(1) || cs.is(1)) && (rows.is(1) || multiple_of(rs, cols))) {
          trans = false;
          ld = rows.is(1) ? cols : rs;
          return;
        }
        if ((rows.is(1) || rs.is(1)) && (cols.is(1) || multiple_of(cs, rows))) {
          trans = true;
          ld = cols.is(1) ? rows : cs;
          return;
        }
      } else {
        const int64_t rows = v.sizes[r - 2].coef, cols = v.sizes[r - 1].coef;
        const int64_t rs = v.view.strides[r - 2].coef, cs = v.view.strides[r - 1].coef;
        if (rows == 0 || cols == 0) {  // nothing is read (k == 0: zeros; m or n == 0: nothing written)
          trans = false;
          ld = Dim::c(std::max<int64_t>(1, cols));
          return;
        }
        if ((cols == 1 || cs == 1) && (rows == 1 || rs >= std::max<int64_t>(1, cols))) {
          trans = false;
          ld = Dim::c(rows == 1 ? std::max<int64_t>(1, cols) : rs);
          return;
        }
        if ((rows == 1 || rs == 1) && (cols == 1 || cs >= std::max<int64_t>(1, rows))) {
          trans = true;
          ld = Dim::c(cols == 1 ? std::max<int64_t>(1, rows) : cs);
          return;
        }
      }
      v = contiguous_copy(v, r);
    }
    unsupported("internal: a contiguous matmul operand BLAS cannot read");
  };
  Gemm gm;
  gm.dtype = dt;
  gm.node = n.name;
  layout(a, gm.trans_a, gm.lda);
  layout(b, gm.trans_b, gm.ldb);
  const size_t ra = a.sizes.size(), rb = b.sizes.size();
  gm.a = a.view.buffer;
  gm.b = b.view.buffer;
  gm.a_offset = a.view.offset;
  gm.b_offset = b.view.offset;
  gm.m = a.sizes[ra - 2];
  gm.k = a.sizes[ra - 1];
  gm.n = b.sizes[rb - 1];
  const Dims a_lead(a.sizes.begin(), a.sizes.end() - 2), b_lead(b.sizes.begin(), b.sizes.end() - 2);
  gm.batch = broadcast(a_lead, b_lead, "matmul");
  const size_t nb = gm.batch.size();
  for (auto [lead, strides, out] : {std::tuple{&a_lead, &a.view.strides, &gm.a_batch},
                                    std::tuple{&b_lead, &b.view.strides, &gm.b_batch}}) {
    out->assign(nb, Dim::c(0));
    const size_t shift = nb - lead->size();
    for (size_t i = 0; i < lead->size(); ++i)
      if (!(*lead)[i].is(1)) (*out)[i + shift] = (*strides)[i];
  }
  Dims out_sizes = gm.batch;
  out_sizes.push_back(gm.m);
  out_sizes.push_back(gm.n);
  val(&n) = add_gemm(std::move(gm), out_sizes);
}

void Scheduler::matmul(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& pnode) {
  const bool linear = args.op->id == OpId::linear;
  const DType dt = n.meta->dtype;
  const Node* an = pnode[0];
  const Node* bn = pnode[1];
  const Node* biasn = linear ? pnode[2] : nullptr;
  if (!an || !bn || !runtime::is_floating(dt)) return eager(n, "matmul of non-float or non-tensor operands");
  if (val(an).dtype != dt || val(bn).dtype != dt) return eager(n, "matmul operands of mixed dtypes");
  const size_t ra = val(an).sizes.size(), rb = val(bn).sizes.size();
  if (ra < 2 || rb < 2) return eager(n, "1-d matmul");
  if (!linear && rb > 2) return batched_matmul(n, an, bn);
  if (rb != 2) return eager(n, "linear with a weight that is not 2-d");
  Val& a = val(an);
  Val& b = val(bn);
  materialize(a, "matmul operand");
  materialize(b, "matmul operand");

  // A as an [M, K] matrix: rows may span several leading dims if they are
  // laid out as one (linear over [B, T, K]); else a transposed 2-d view;
  // else a contiguous copy.
  auto as_matrix = [&](Val& v, Dim& rows, Dim& ld, bool& trans) {
    const size_t r = v.sizes.size();
    const Dims& s = v.view.strides;
    auto row_major = [&] {
      if (!s[r - 1].is(1)) return false;
      for (size_t i = 0; i + 2 < r; ++i)
        if (!(s[i] == s[i + 1] * v.sizes[i + 1])) return false;
      return true;
    };
    for (int attempt = 0; attempt < 2; ++attempt) {
      Dims lead(v.sizes.begin(), v.sizes.end() - 1);
      rows = product(lead);
      if (row_major() && (r == 1 || !s[r - 2].is(0))) {
        trans = false;
        ld = r >= 2 ? s[r - 2] : v.sizes[r - 1];
        if (ld.is(0) || (ld.is_static() && v.sizes[r - 1].is_static() && ld.coef < v.sizes[r - 1].coef))
          ld = v.sizes[r - 1];
        return;
      }
      if (r == 2 && s[0].is(1) && !s[1].is(0)) {
        trans = true;
        ld = s[1];
        return;
      }
      // Neither layout: copy to a contiguous buffer and retry.
      v = contiguous_copy(v, r);
    }
  };
  Gemm gm;
  gm.dtype = dt;
  gm.node = n.name;
  bool ta = false;
  Dim ma, lda, rowsb, ldb;
  as_matrix(a, ma, lda, ta);
  gm.a = a.view.buffer;
  gm.a_offset = a.view.offset;
  gm.trans_a = ta;
  gm.lda = lda;
  gm.m = ma;
  gm.k = a.sizes.back();
  // The contraction dims were equal when traced (the shape rule accepted
  // them); with dynamic sizes a call where they differ must run eagerly,
  // where the kernel raises the op's own error, never reach BLAS with a
  // leading dimension that does not fit (found by tests/fuzz: OpenBLAS
  // refused the call and the output stayed unwritten).
  {
    const Dim& kb = linear ? b.sizes[1] : b.sizes[0];
    if (!(gm.k == kb))
      prog_.checks.push_back({gm.k, kb, false, std::string(linear ? "linear" : "matmul") + ": contraction dims " +
                                                   gm.k.str() + " and " + kb.str()});
  }
  if (linear) {
    // out = A @ W^T with W [N, K]: W row-major is B transposed.
    Dim rows, ld;
    bool t = false;
    as_matrix(b, rows, ld, t);
    gm.trans_b = !t;
    gm.ldb = ld;
    gm.n = b.sizes[0];
  } else {
    Dim rows, ld;
    bool t = false;
    as_matrix(b, rows, ld, t);
    gm.trans_b = t;
    gm.ldb = ld;
    gm.n = b.sizes[1];
  }
  gm.b = b.view.buffer;
  gm.b_offset = b.view.offset;
  Dims out_sizes(a.sizes.begin(), a.sizes.end() - 1);
  out_sizes.push_back(gm.n);
  Val out = add_gemm(std::move(gm), out_sizes);
  if (!biasn) {
    val(&n) = std::move(out);
    return;
  }
  // The bias is the first op of the epilogue: a pending add that the
  // consumers (an activation, a layer_norm) fuse into their loop.
  Val& bias = val(biasn);
  if (!bias.materialized && bias.open >= 0) materialize(bias, "linear bias");
  Val v;
  v.tensor = true;
  v.dtype = dt;
  v.sizes = broadcast(out_sizes, bias.sizes, "linear");
  const int lhs = cast(v.arena, load_of(out, v.arena, broadcast_map(out.sizes, v.sizes), v.sizes.size(), nullptr), dt);
  const int rhs =
      cast(v.arena, load_of(bias, v.arena, broadcast_map(bias.sizes, v.sizes), v.sizes.size(), nullptr), dt);
  Expr add;
  add.kind = ExprKind::Op;
  add.op = OpId::add;
  add.dtype = dt;
  add.a = lhs;
  add.b = rhs;
  v.root = v.arena.add(add);
  v.nodes.push_back(n.name + " (bias)");
  val(&n) = std::move(v);
}

// A view of a pending value becomes its consumer's indexing: the value's
// expression re-indexed, no buffer. The view's layout is found by running
// its shape rule on a contiguous meta tensor of the value's sizes (a
// virtual buffer); each result dim's stride there must be a whole multiple
// k of one source dim's contiguous stride (a permutation, a new or removed
// size-1 dim, a broadcast, a slice with a step, a select, a split of a dim),
// or a merge of a run of whole source dims (flatten, view(B*T, C)), and the
// offset a start index per source dim, with no result index ever carrying
// out of its source dim. Then every load's strides follow:
// stride'[j] = k_j * stride[i_j], offset' = offset + sum start_i * stride[i];
// a merged run takes its finest dim's stride, when each load walks the run
// as one (stride[l] = stride[l+1] * size[l+1]; a load of a transposed
// input does not, and the view materializes). So do views of an open
// reduction and views with dynamic sizes.
bool Scheduler::fold_view(const Node& n, const runtime::OpArgs& args, const Node* srcn) {
  Val& x = val(srcn);
  if (x.materialized || x.consumed || x.open >= 0) return false;
  const size_t r = x.sizes.size();
  runtime::Shape S;
  for (const Dim& d : x.sizes) {
    if (!d.is_static() || d.coef == 0) return false;
    S.push_back(d.coef);
  }
  for (const Access& a : x.arena.accesses) {
    if (!a.offset.is_static()) return false;
    for (const Dim& st : a.strides)
      if (!st.is_static()) return false;
  }
  const runtime::Shape C = runtime::contiguous_strides(S);
  Tensor base = runtime::meta_view(x.dtype, S, C, 0);
  runtime::OpArgs a2 = args;
  a2.v[0] = Value::tensor(base);
  Tensor m = args.op->shape(a2);
  const runtime::Shape M = m.sizes();
  runtime::Shape R = m.strides();
  int64_t off = m.offset();
  const OpId id = args.op->id;
  if (id == OpId::reshape || id == OpId::view || id == OpId::flatten) {
    auto vs = runtime::view_strides(base, M);
    if (!vs) return false;
    R = *vs;
    off = 0;
  }
  // The offset as a start index per source dim (size-1 dims stay at 0).
  std::vector<int64_t> start(r, 0);
  for (size_t i = 0; i < r; ++i) {
    if (S[i] == 1) continue;
    start[i] = off / C[i];
    off %= C[i];
  }
  if (off != 0) return false;
  // Each result dim: a source dim and a multiple, a merged run of source
  // dims [run_lo, src], or none (size 1, broadcast).
  std::vector<int> src(M.size(), -1), run_lo(M.size(), -1);
  std::vector<int64_t> mult(M.size(), 0), reach(r, 0);
  for (size_t j = 0; j < M.size(); ++j) {
    if (M[j] == 1 || R[j] == 0) continue;
    if (R[j] < 0) return false;
    for (size_t i = 0; i < r; ++i) {  // the coarsest dim whose stride divides
      if (S[i] == 1 || R[j] % C[i] != 0) continue;
      src[j] = int(i);
      mult[j] = R[j] / C[i];
      break;
    }
    if (src[j] < 0) return false;
    const size_t i1 = size_t(src[j]);
    if (start[i1] + (M[j] - 1) * mult[j] > S[i1] - 1 && mult[j] == 1) {
      // A merge: whole dims i0..i1 walked as one (their starts all 0).
      int64_t prod = S[i1];
      size_t i0 = i1;
      while (prod < M[j] && i0 > 0) prod *= S[--i0];
      if (prod != M[j]) return false;
      for (size_t i = i0; i <= i1; ++i) {
        if (start[i] != 0) return false;
        reach[i] += S[i] - 1;
      }
      run_lo[j] = int(i0);
      continue;
    }
    reach[i1] += (M[j] - 1) * mult[j];
  }
  for (size_t i = 0; i < r; ++i)
    if (start[i] + reach[i] > S[i] - 1) return false;  // would carry into another dim
  // Every load must walk each merged run as one.
  for (size_t j = 0; j < M.size(); ++j) {
    if (run_lo[j] < 0) continue;
    std::vector<size_t> run;  // its dims of size > 1 (a size-1 dim's stride is never used)
    for (size_t l = size_t(run_lo[j]); l <= size_t(src[j]); ++l)
      if (S[l] != 1) run.push_back(l);
    for (const Access& a : x.arena.accesses)
      for (size_t q = 0; q + 1 < run.size(); ++q)
        if (a.strides[run[q]].coef != a.strides[run[q + 1]].coef * S[run[q + 1]]) return false;
  }
  Val v;
  v.tensor = true;
  v.dtype = x.dtype;
  for (int64_t d : M) v.sizes.push_back(Dim::c(d));
  std::vector<int> id_map(r);
  std::iota(id_map.begin(), id_map.end(), 0);
  v.root = take_or_load(srcn, n, v.arena, id_map, r, nullptr, &v.nodes);  // v.arena held nothing before
  for (Access& a : v.arena.accesses) {
    int64_t o = a.offset.coef;
    for (size_t i = 0; i < r; ++i) o += start[i] * a.strides[i].coef;
    Dims st(M.size(), Dim::c(0));
    for (size_t j = 0; j < M.size(); ++j)
      if (src[j] >= 0) st[j] = Dim::c(mult[j] * a.strides[size_t(src[j])].coef);
    a.offset = Dim::c(o);
    a.strides = std::move(st);
    ++prog_.schedule_work;
  }
  v.nodes.push_back(n.name);
  val(&n) = std::move(v);
  return true;
}

void Scheduler::view(const Node& n, const runtime::OpArgs& args, const std::vector<const Node*>& pnode) {
  if (fold_view(n, args, pnode[0])) return;
  Val& x = val(pnode[0]);
  materialize(x, "viewed by " + n.name);
  const OpId id = args.op->id;
  bool all_static = x.view.offset.is_static();
  for (size_t i = 0; i < x.sizes.size(); ++i) all_static = all_static && x.sizes[i].is_static() && x.view.strides[i].is_static();
  if (all_static) {
    runtime::Shape sizes, strides;
    for (size_t i = 0; i < x.sizes.size(); ++i) {
      sizes.push_back(x.sizes[i].coef);
      strides.push_back(x.view.strides[i].coef);
    }
    Tensor base = runtime::meta_view(x.dtype, sizes, strides, x.view.offset.coef);
    runtime::OpArgs a2 = args;
    a2.v[0] = Value::tensor(base);
    Tensor m = args.op->shape(a2);
    runtime::Shape st = m.strides();
    int64_t off = m.offset();
    if (id == OpId::reshape || id == OpId::view || id == OpId::flatten) {
      auto vs = runtime::view_strides(base, m.sizes());
      if (!vs) {
        // Not expressible as a view of this layout (eager copies too).
        Val copy = contiguous_copy(x, x.sizes.size(), "reshape of a non-viewable layout");
        Dims ms;
        for (int64_t s : m.sizes()) ms.push_back(Dim::c(s));
        val(&n) = materialized(copy.view.buffer, ms, contiguous(ms), Dim::c(0), x.dtype);
        return;
      }
      st = *vs;
      off = x.view.offset.coef;
    }
    Dims ms, mst;
    for (int64_t s : m.sizes()) ms.push_back(Dim::c(s));
    for (int64_t s : st) mst.push_back(Dim::c(s));
    val(&n) = materialized(x.view.buffer, ms, mst, Dim::c(off), x.dtype);
    return;
  }
  // Dynamic layouts: the views that only reorder or add dims.
  Dims sizes = x.sizes, strides = x.view.strides;
  const int64_t r = int64_t(sizes.size());
  if (id == OpId::transpose) {
    const int64_t a = runtime::wrap_dim("transpose", args.integer(1), r);
    const int64_t b = runtime::wrap_dim("transpose", args.integer(2), r);
    std::swap(sizes[size_t(a)], sizes[size_t(b)]);
    std::swap(strides[size_t(a)], strides[size_t(b)]);
  } else if (id == OpId::permute) {
    const auto dims = args.int_list(1);
    Dims ns, nst;
    for (int64_t d : dims) {
      const int64_t w = runtime::wrap_dim("permute", d, r);
      ns.push_back(sizes[size_t(w)]);
      nst.push_back(strides[size_t(w)]);
    }
    sizes = ns;
    strides = nst;
  } else if (id == OpId::unsqueeze) {
    const int64_t d = runtime::wrap_dim("unsqueeze", args.integer(1), r + 1);
    const Dim st = size_t(d) < sizes.size() ? strides[size_t(d)] * sizes[size_t(d)] : Dim::c(1);
    sizes.insert(sizes.begin() + d, Dim::c(1));
    strides.insert(strides.begin() + d, st);
  } else {
    if (symbolic_view(n, args, pnode[0])) return;
    return eager(n, std::string(args.op->name) + " of a tensor with dynamic dims");
  }
  val(&n) = materialized(x.view.buffer, sizes, strides, x.view.offset, x.dtype);
}

// The argument of parameter `i` (named `name`) as the node gives it, or null.
static const Arg* param_arg(const Node& n, size_t i, const char* name) {
  if (i < n.args.size()) return &n.args[i];
  for (const auto& kv : n.kwargs)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

// An int argument as an expression of the graph's symbols, with its value
// at the traced example.
static std::optional<std::pair<output_graph::SymExpr, int64_t>> int_arg(const Arg* a) {
  if (!a) return std::nullopt;
  if (a->kind == Arg::Kind::Sym) return std::make_pair(a->sym, a->value.as_int());
  if (a->kind == Arg::Kind::Const && a->value.is(runtime::Kind::Int))
    return std::make_pair(output_graph::SymExpr::constant(a->value.as_int()), a->value.as_int());
  return std::nullopt;
}

// A view of a materialized tensor whose layout has symbols: the result's
// sizes are the node's symbolic sizes; strides and offset follow from the
// source's as the op's eager kernel computes them. The decisions Python's
// index clamping takes are taken for the traced example, as the trace took
// them (its guards hold them). False: not expressible here.
bool Scheduler::symbolic_view(const Node& n, const runtime::OpArgs& args, const Node* srcn) {
  Val& x = val(srcn);
  if (!x.materialized || n.meta->sym.empty() || !srcn->meta) return false;
  const OpId id = OpId(n.op_id);
  const Dims out = sizes_of(n);
  const size_t r = x.sizes.size();
  Dims strides;
  Dim offset = x.view.offset;
  auto dim_arg = [&](size_t i, const char* name, size_t rank) -> std::optional<size_t> {
    auto v = int_arg(param_arg(n, i, name));
    if (!v || v->first.has_symbols()) return std::nullopt;
    const int64_t d = v->second < 0 ? v->second + int64_t(rank) : v->second;
    if (d < 0 || d >= int64_t(rank)) return std::nullopt;
    return size_t(d);
  };
  switch (id) {
    case OpId::view:
    case OpId::reshape:
    case OpId::flatten: {
      if (auto st = view_strides(x.sizes, x.view.strides, out)) {
        strides = std::move(*st);
        break;
      }
      // Not a view of this layout: a contiguous copy, then its view.
      Val copy = contiguous_copy(x, r, "reshape of a non-viewable layout");
      val(&n) = materialized(copy.view.buffer, out, contiguous(out), Dim::c(0), x.dtype);
      return true;
    }
    case OpId::expand: {
      if (out.size() < r) return false;
      const size_t lead = out.size() - r;
      strides.assign(out.size(), Dim::c(0));
      for (size_t i = 0; i < r; ++i)
        strides[lead + i] = x.sizes[i].is(1) && !out[lead + i].is(1) ? Dim::c(0) : x.view.strides[i];
      break;
    }
    case OpId::squeeze: {
      strides.clear();
      Dims kept;
      std::optional<size_t> only;
      const Arg* a = param_arg(n, 1, "dim");
      if (a && !(a->kind == Arg::Kind::Const && a->value.is_none())) {
        only = dim_arg(1, "dim", r);
        if (!only) return false;
      }
      for (size_t i = 0; i < r; ++i) {
        if (x.sizes[i].is(1) && (!only || *only == i)) continue;
        kept.push_back(x.sizes[i]);
        strides.push_back(x.view.strides[i]);
      }
      if (kept.size() != out.size()) return false;
      break;
    }
    case OpId::select:
    case OpId::slice: {
      const auto d = dim_arg(1, "dim", r);
      if (!d) return false;
      const SymExpr size = sym_.expr(x.sizes[*d]);
      const int64_t size_hint = srcn->meta->sizes[*d];
      SymExpr start = SymExpr::constant(0);
      const Arg* sa = param_arg(n, 2, id == OpId::select ? "index" : "start");
      if (sa && !(sa->kind == Arg::Kind::Const && sa->value.is_none())) {
        auto v = int_arg(sa);
        if (!v) return false;
        // Python's clamping (select's index is in range: the trace checked).
        start = v->first;
        int64_t hint = v->second;
        if (hint < 0) {
          start = start + size;
          hint += size_hint;
          if (hint < 0) start = SymExpr::constant(0);
        } else if (id == OpId::slice && hint > size_hint) {
          start = size;
        }
      }
      int64_t step = 1;
      if (id == OpId::slice) {
        const Arg* st = param_arg(n, 4, "step");
        if (st) {
          auto v = int_arg(st);
          if (!v || v->first.has_symbols() || v->second <= 0) return false;
          step = v->second;
        }
      }
      offset = sym_.add(offset, sym_.of(start) * x.view.strides[*d]);
      strides = x.view.strides;
      if (id == OpId::select) strides.erase(strides.begin() + ptrdiff_t(*d));
      else strides[*d] = strides[*d] * Dim::c(step);
      break;
    }
    default: return false;
  }
  (void)args;
  if (strides.size() != out.size()) return false;
  val(&n) = materialized(x.view.buffer, out, strides, offset, x.dtype);
  return true;
}

void Scheduler::call_function(const Node& n) {
  if (n.op_id < 0 || n.op_id >= runtime::kNumOps) unsupported("node '" + n.name + "' has no valid op id");
  const runtime::OpDef& def = runtime::op_def(OpId(n.op_id));
  if (!n.meta) return eager(n, "result is not a tensor");
  // Sizes computed from the graph's symbols at call time (issue 14): a view
  // takes its sizes from the node's symbolic meta; any other op runs its
  // eager kernel, which the runner gives the sizes' values.
  if (output_graph::takes_symbolic_sizes(n)) {
    const Node* src = !n.args.empty() && n.args[0].kind == Arg::Kind::Node ? n.args[0].node : nullptr;
    if (def.kind == OpKind::View && src && val(src).tensor) {
      materialize(val(src), "viewed by " + n.name);
      if (symbolic_view(n, runtime::OpArgs{}, src)) return;
    }
    return eager(n, std::string(def.name) + " of sizes computed from symbols");
  }
  // Bind the node's arguments like a call would, with meta tensors standing
  // in for node values, so every op parameter is read by name and default.
  std::unordered_map<const runtime::TensorImpl*, const Node*> node_of;
  bool foreign = false;
  std::function<Value(const Arg&)> arg_value = [&](const Arg& a) -> Value {
    switch (a.kind) {
      case Arg::Kind::Const: return a.value;
      case Arg::Kind::List: {
        std::vector<Value> items;
        for (const Arg& i : a.items) items.push_back(arg_value(i));
        return runtime::make_tuple(std::move(items));
      }
      case Arg::Kind::Node: {
        const Val& v = val(a.node);
        if (!v.tensor) {
          foreign = true;
          return Value();
        }
        runtime::Shape sizes;
        for (const Dim& d : v.sizes) sizes.push_back(d.is_static() ? d.coef : 2);
        Tensor t = Tensor::meta(sizes, v.dtype);
        node_of[t.impl()] = a.node;
        return Value::tensor(t);
      }
    }
    return Value();
  };
  std::vector<Value> argv;
  for (const Arg& a : n.args) argv.push_back(arg_value(a));
  std::vector<Value> names;
  for (const auto& kv : n.kwargs) {
    argv.push_back(arg_value(kv.second));
    names.push_back(runtime::intern_value(kv.first));
  }
  if (foreign) return eager(n, "an argument is not a tensor value");
  const bool has_kw = !names.empty();
  Value kwnames = has_kw ? runtime::make_tuple(std::move(names)) : Value();
  runtime::OpArgs args = runtime::bind_op_args(
      def, runtime::CallArgs{argv.data(), argv.size(), has_kw ? kwnames.as<runtime::TupleObj>() : nullptr});
  std::vector<const Node*> pnode(args.size(), nullptr);
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].is(runtime::Kind::Tensor))
      if (auto it = node_of.find(args[i].as_tensor().impl()); it != node_of.end()) pnode[i] = it->second;

  switch (def.kind) {
    case OpKind::Pointwise: return pointwise(n, args, pnode);
    case OpKind::Reduction:
      if (!pnode[0]) return eager(n, "reduction of a non-tensor");
      if (def.id == OpId::layer_norm && ((!args.is_none(2) && !pnode[2]) || (!args.is_none(3) && !pnode[3])))
        return eager(n, "layer_norm parameter is not a tensor node");
      return reduction(n, args, pnode);
    case OpKind::Matmul: return matmul(n, args, pnode);
    case OpKind::View: return view(n, args, pnode);
    case OpKind::Other:
      if ((def.id == OpId::contiguous || def.id == OpId::clone || def.id == OpId::to) && pnode[0]) {
        // A copy (or a conversion) is a pending load: fused into its
        // consumer, or written out if it must exist.
        Val& x = val(pnode[0]);
        Val v;
        v.tensor = true;
        v.dtype = n.meta->dtype;
        v.sizes = x.sizes;
        if (!x.materialized && x.open >= 0) materialize(x, "copied by " + n.name);
        std::vector<int> idm(x.sizes.size());
        std::iota(idm.begin(), idm.end(), 0);
        v.root = cast(v.arena, take_or_load(pnode[0], n, v.arena, idm, x.sizes.size(), nullptr, &v.nodes), v.dtype);
        v.nodes.push_back(n.name);
        val(&n) = std::move(v);
        return;
      }
      return eager(n, std::string(def.name) + " has no codegen lowering");
  }
}

void Scheduler::output(const Node& n) {
  for (const Arg& a : n.args) {
    OutputSpec o;
    if (a.kind == Arg::Kind::Const) {
      o.kind = OutputSpec::Kind::Value;
      o.value = a.value;
    } else if (a.kind == Arg::Kind::Node) {
      Val& v = val(a.node);
      if (!v.tensor) {
        if (v.eager_step < 0) unsupported("output '" + a.node->name + "' is neither a tensor nor an eager result");
        o.kind = OutputSpec::Kind::Eager;
        o.eager_step = v.eager_step;
      } else {
        materialize(v, "graph output");
        Buffer& b = prog_.buffers[size_t(v.view.buffer)];
        if (b.kind == Buffer::Kind::Temp) b.kind = Buffer::Kind::Output;
        o.view = v.view;
        o.sizes = v.sizes;
      }
    } else {
      unsupported("a list-valued graph output");
    }
    prog_.outputs.push_back(std::move(o));
  }
}

Program Scheduler::run() {
  const auto& nodes = g_.nodes();
  vals_.resize(nodes.size());
  // The graph's symbols are program symbols 0..G-1 (codegen/symbolic_dims.h).
  for (const Graph::Symbol& gs : g_.symbols) {
    const int s = int(prog_.syms.size());
    if (!gs.placeholder) {
      // Read by nothing (Graph::drop_unread_symbols): a stand-in value.
      prog_.syms.push_back({SymSource::From::Expr, 0, 0, output_graph::SymExpr::constant(2)});
      continue;
    }
    prog_.syms.push_back({SymSource::From::Input, gs.placeholder->index, gs.dim, {}});
    prog_.checks.push_back({Dim::sym(s), Dim::c(0), true, "dynamic dim s" + std::to_string(s) + " >= 2"});
  }
  // Hand-written attention runs as one call of the tiled kernel: its
  // scores, scaling, mask and softmax nodes are never scheduled.
  std::vector<char> absorbed(nodes.size(), 0);
  std::unordered_map<const Node*, const AttentionMatch*> attention_at;
  const std::vector<AttentionMatch> attention = find_attention(g_);
  for (const AttentionMatch& m : attention) {
    for (const Node* a : m.absorbed) absorbed[size_t(a->index)] = 1;
    attention_at[m.out] = &m;
  }
  for (const auto& np : nodes) {
    const Node& n = *np;
    if (absorbed[size_t(n.index)]) continue;
    if (auto it = attention_at.find(&n); it != attention_at.end()) {
      prog_.synthetic_nodes.push_back(attention_node(*it->second));
      eager(*prog_.synthetic_nodes.back(), "softmax(q @ k^T * scale + mask) @ v: the tiled attention kernel");
    } else switch (n.op) {
      case NodeOp::Placeholder: placeholder(n); break;
      case NodeOp::GetAttr: get_attr(n); break;
      case NodeOp::CallFunction: call_function(n); break;
      case NodeOp::CallModule: eager(n, "module call"); break;
      case NodeOp::CallMethod: eager(n, "method call"); break;
      case NodeOp::Output: output(n); break;
    }
    // A value read by several nodes is computed once.
    std::vector<const Node*> users(n.users.begin(), n.users.end());
    std::sort(users.begin(), users.end());
    users.erase(std::unique(users.begin(), users.end()), users.end());
    if (users.size() > 1) materialize(val(&n), "used by " + std::to_string(users.size()) + " nodes");
  }
  if (!g_.output_node()) unsupported("the graph has no output node");
  plan_memory(prog_);
  return std::move(prog_);
}

}  // namespace

Program schedule(const Graph& graph) { return Scheduler(graph).run(); }

}  // namespace kiln::codegen

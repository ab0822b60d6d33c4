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
//
// This file is the core: the arena (copying, taking over, re-expressing
// loads), materializing, inputs and outputs, and the walk over the graph
// with its dispatch per op kind. Each op family is a file of its own
// (scheduler_impl.h lists them); they share the Scheduler class declared
// there.
#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_map>

#include "codegen/attention_pattern.h"
#include "codegen/conv_pattern.h"
#include "codegen/scheduler_impl.h"
#include "runtime/value/tensor.h"

namespace kiln::codegen::sched {

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
      if ((def.id == OpId::contiguous || def.id == OpId::clone || def.id == OpId::to) && pnode[0])
        return pending_copy(n, pnode[0]);
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
  // So does a convolution with its evaluation BatchNorm and activation
  // (codegen/conv_pattern.h): one _conv2d_act call.
  std::vector<char> absorbed(nodes.size(), 0);
  std::unordered_map<const Node*, std::pair<std::shared_ptr<const Node>, std::string>> replaced_at;
  for (const AttentionMatch& m : find_attention(g_)) {
    for (const Node* a : m.absorbed) absorbed[size_t(a->index)] = 1;
    replaced_at[m.out] = {attention_node(m), "softmax(q @ k^T * scale + mask) @ v: the tiled attention kernel"};
  }
  for (const ConvMatch& m : find_conv_epilogues(g_)) {
    bool taken = replaced_at.count(m.out) > 0;  // never two rewrites of one node
    for (const Node* a : m.absorbed) taken = taken || absorbed[size_t(a->index)];
    if (taken) continue;
    for (const Node* a : m.absorbed) absorbed[size_t(a->index)] = 1;
    replaced_at[m.out] = {conv_epilogue_node(m), std::string("conv2d with its BatchNorm") +
                                                     (m.residual ? ", a residual" : "") + " and " +
                                                     runtime::conv_activation_name(m.act) + " in one pass"};
  }
  for (const auto& np : nodes) {
    const Node& n = *np;
    if (absorbed[size_t(n.index)]) continue;
    if (auto it = replaced_at.find(&n); it != replaced_at.end()) {
      prog_.synthetic_nodes.push_back(it->second.first);
      eager(*prog_.synthetic_nodes.back(), it->second.second);
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

}  // namespace kiln::codegen::sched

namespace kiln::codegen {

Program schedule(const output_graph::Graph& graph) { return sched::Scheduler(graph).run(); }

}  // namespace kiln::codegen

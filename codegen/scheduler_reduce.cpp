// The scheduler's reduction family (scheduler_impl.h): sum, mean, amax
// over any dims, softmax/log_softmax over one, layer_norm over trailing
// dims. A reduction takes its pending producer in as its input side and
// stays *open*: pointwise consumers of the same shape become its kernel's
// epilogue until something materializes it (scheduler.cpp `materialize`).
#include "codegen/scheduler_impl.h"
#include "runtime/value/tensor.h"

namespace kiln::codegen::sched {

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

}  // namespace kiln::codegen::sched

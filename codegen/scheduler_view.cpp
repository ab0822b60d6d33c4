// The scheduler's view family (scheduler_impl.h). A view of a pending
// value folds into its consumer's indexing (`fold_view`); a view of a
// materialized buffer is new strides and an offset over it (`view`): from
// the op's own shape rule when the layout is static, else by reordering
// dims (transpose, permute, unsqueeze) or from the graph's symbolic sizes
// (`symbolic_view`). A reshape no view can express copies, as eager does.
#include <numeric>
#include <optional>
#include <utility>

#include "codegen/scheduler_impl.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/value/tensor.h"

namespace kiln::codegen::sched {

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

}  // namespace kiln::codegen::sched

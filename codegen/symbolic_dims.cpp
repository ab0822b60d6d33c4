#include "codegen/symbolic_dims.h"

#include "runtime/base/error.h"

namespace kiln::codegen {

using output_graph::SymExpr;

Dim SymDims::of(const SymExpr& e) {
  if (auto m = e.as_monomial()) return Dim{m->coef, m->syms};
  const SymExpr content = e.content();
  const std::optional<SymExpr> rest = e.divide_exactly(content);
  if (!rest) throw_error(ErrorKind::SystemError, "symbolic size " + e.str() + " does not divide by its content");
  auto [it, fresh] = derived_.try_emplace(rest->str(), int(prog_.syms.size()));
  if (fresh) {
    SymSource s;
    s.from = SymSource::From::Expr;
    s.expr = *rest;
    prog_.syms.push_back(std::move(s));
  }
  const auto m = content.as_monomial();  // content is a monomial by construction
  return Dim{m->coef, m->syms} * Dim::sym(it->second);
}

Dims SymDims::of(const std::vector<SymExpr>& es) {
  Dims ds;
  ds.reserve(es.size());
  for (const SymExpr& e : es) ds.push_back(of(e));
  return ds;
}

SymExpr SymDims::expr(const Dim& d) const {
  SymExpr e = SymExpr::constant(d.coef);
  for (int s : d.syms) {
    const SymSource& src = prog_.syms[size_t(s)];
    e = e * (src.from == SymSource::From::Expr ? src.expr : SymExpr::symbol(s));
  }
  return e;
}

// torch's computeStride: walk the old dims from the innermost, grouping
// those that are contiguous with each other into chunks; each chunk's
// elements must be exactly a run of new dims, which then take strides
// inside the chunk. Equal products are equal monomials, so this holds for
// symbolic sizes wherever it can be decided without a number.
std::optional<Dims> view_strides(const Dims& old_sizes, const Dims& old_strides, const Dims& sizes) {
  Dims strides(sizes.size(), Dim::c(1));
  if (old_sizes.empty()) {
    for (const Dim& d : sizes)
      if (!d.is(1)) return std::nullopt;
    return strides;
  }
  int64_t view_d = int64_t(sizes.size()) - 1;
  Dim chunk_base = old_strides.back();
  Dim tensor_numel = Dim::c(1), view_numel = Dim::c(1);
  for (int64_t t = int64_t(old_sizes.size()) - 1; t >= 0; --t) {
    tensor_numel = tensor_numel * old_sizes[size_t(t)];
    const bool chunk_ends =
        t == 0 || (!old_sizes[size_t(t - 1)].is(1) && !(old_strides[size_t(t - 1)] == tensor_numel * chunk_base));
    if (!chunk_ends) continue;
    while (view_d >= 0 && (!(view_numel == tensor_numel) || sizes[size_t(view_d)].is(1))) {
      strides[size_t(view_d)] = view_numel * chunk_base;
      view_numel = view_numel * sizes[size_t(view_d)];
      --view_d;
    }
    if (!(view_numel == tensor_numel)) return std::nullopt;
    if (t > 0) {
      chunk_base = old_strides[size_t(t - 1)];
      tensor_numel = Dim::c(1);
      view_numel = Dim::c(1);
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

}  // namespace kiln::codegen

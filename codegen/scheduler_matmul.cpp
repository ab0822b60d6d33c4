// The scheduler's matmul family (scheduler_impl.h): `linear` and `matmul`
// as BLAS calls (Gemm steps). Operands are materialized and read in place
// when BLAS can describe their layout (row-major or transposed, with a
// leading dimension), else copied contiguous first; a linear's bias is a
// pending add, so it fuses into the consumer's loop.
#include <algorithm>
#include <tuple>

#include "codegen/scheduler_impl.h"

namespace kiln::codegen::sched {

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

}  // namespace kiln::codegen::sched

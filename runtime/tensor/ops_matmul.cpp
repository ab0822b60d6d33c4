// matmul and linear with torch's shape semantics. Float types go through
// OpenBLAS (one gemm per batch element, reading strided operands in place
// whenever BLAS can describe them); int64 uses a plain loop.

#include <climits>
#include <type_traits>

#include "runtime/kernels/blas.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {
namespace {

// The operands seen as batches of matrices: 1-D operands become a 1-row
// (left) or 1-column (right) matrix, and the output drops that dim again.
struct MatmulPlan {
  Shape batch;         // broadcast batch dims
  int64_t n, k, m;     // [n, k] @ [k, m]
  Shape a_batch_strides, b_batch_strides;
  int64_t a_rs, a_cs, b_rs, b_cs;  // row/column strides of one matrix
  Shape out_sizes;
  DType dtype;
};

MatmulPlan plan_matmul(const char* op, const Tensor& a, const Tensor& b) {
  const std::string name = op;
  if (a.dim() == 0 || b.dim() == 0)
    throw_error(ErrorKind::RuntimeError, name + ": both arguments need to be at least 1-D, but they are " +
                                             std::to_string(a.dim()) + "-D and " + std::to_string(b.dim()) + "-D");
  MatmulPlan p;
  p.dtype = promote(a.dtype(), b.dtype());
  if (p.dtype == DType::Bool)
    throw_error(ErrorKind::TypeError, name + "(): bool tensors are not supported");

  Shape as = a.sizes(), ast = a.strides(), bs = b.sizes(), bst = b.strides();
  if (a.dim() == 1) {
    as.insert(as.begin(), 1);
    ast.insert(ast.begin(), 0);
  }
  if (b.dim() == 1) {
    bs.push_back(1);
    bst.push_back(0);
  }
  const size_t ra = as.size(), rb = bs.size();
  p.n = as[ra - 2];
  p.k = as[ra - 1];
  p.m = bs[rb - 1];
  if (bs[rb - 2] != p.k)
    throw_error(ErrorKind::RuntimeError, name + ": shapes " + shape_str(a.sizes()) + " and " +
                                             shape_str(b.sizes()) + " are not aligned (" + std::to_string(p.k) +
                                             " != " + std::to_string(bs[rb - 2]) + ")");
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(a_batch.size(), b_batch.size());
  p.batch.assign(nb, 1);
  p.a_batch_strides.assign(nb, 0);
  p.b_batch_strides.assign(nb, 0);
  for (size_t i = 0; i < nb; ++i) {
    const size_t ia = i + a_batch.size(), ib = i + b_batch.size();  // i - (nb - size), kept unsigned
    const int64_t da = ia >= nb ? a_batch[ia - nb] : 1, db = ib >= nb ? b_batch[ib - nb] : 1;
    if (da != db && da != 1 && db != 1)
      throw_error(ErrorKind::RuntimeError, name + ": batch dimensions of shapes " + shape_str(a.sizes()) + " and " +
                                               shape_str(b.sizes()) + " cannot be broadcast");
    p.batch[i] = da == 1 ? db : da;
    if (ia >= nb && da != 1) p.a_batch_strides[i] = ast[ia - nb];
    if (ib >= nb && db != 1) p.b_batch_strides[i] = bst[ib - nb];
  }
  p.a_rs = ast[ra - 2];
  p.a_cs = ast[ra - 1];
  p.b_rs = bst[rb - 2];
  p.b_cs = bst[rb - 1];
  p.out_sizes = p.batch;
  if (a.dim() > 1) p.out_sizes.push_back(p.n);
  if (b.dim() > 1) p.out_sizes.push_back(p.m);
  return p;
}

// How BLAS can read an r x c matrix with strides (rs, cs), if at all:
// row-major as is (cs == 1) or as the transpose of a row-major matrix
// (rs == 1). Strides of size-1 dims are irrelevant and normalised away.
bool blas_layout(int64_t r, int64_t c, int64_t rs, int64_t cs, bool& trans, int64_t& ld) {
  if ((c == 1 || cs == 1) && (r == 1 || rs >= std::max<int64_t>(1, c))) {
    trans = false;
    ld = r == 1 ? std::max<int64_t>(1, c) : rs;
    return true;
  }
  if ((r == 1 || rs == 1) && (c == 1 || cs >= std::max<int64_t>(1, r))) {
    trans = true;
    ld = c == 1 ? std::max<int64_t>(1, r) : cs;
    return true;
  }
  return false;
}

template <class T>
void gemm(bool ta, bool tb, int64_t n, int64_t m, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c) {
  if constexpr (std::is_same_v<T, float>)
    gemm_f32(ta, tb, n, m, k, a, lda, b, ldb, c, m);
  else
    gemm_f64(ta, tb, n, m, k, a, lda, b, ldb, c, m);
}

// Runs f(a_offset, b_offset, batch_index) for each batch element, in the
// output's (row-major) batch order.
template <class F>
void for_each_batch(const MatmulPlan& p, F&& f) {
  int64_t idx = 0;
  for_each_strided<2>(p.batch, {&p.a_batch_strides, &p.b_batch_strides},
                      [&](const std::array<int64_t, 2>& off, int64_t cnt, const std::array<int64_t, 2>& st) {
                        for (int64_t i = 0; i < cnt; ++i) f(off[0] + i * st[0], off[1] + i * st[1], idx++);
                      });
}

template <class T>
void matmul_float(const MatmulPlan& p, const Tensor& a, const Tensor& b, const Tensor& out) {
  // A matrix BLAS cannot read in place is copied once: the whole operand is
  // made contiguous and its strides re-derived.
  Tensor ca = a, cb = b;
  MatmulPlan q = p;
  bool ta, tb;
  int64_t lda, ldb;
  if (!blas_layout(p.n, p.k, p.a_rs, p.a_cs, ta, lda)) {
    ca = a.clone();
    q = plan_matmul("matmul", ca, b);
    blas_layout(q.n, q.k, q.a_rs, q.a_cs, ta, lda);
  }
  if (!blas_layout(p.k, p.m, p.b_rs, p.b_cs, tb, ldb)) {
    cb = b.clone();
    q = plan_matmul("matmul", ca, cb);
    blas_layout(q.k, q.m, q.b_rs, q.b_cs, tb, ldb);
  }
  const T* pa = ca.data<T>();
  const T* pb = cb.data<T>();
  T* pc = out.data<T>();
  for_each_batch(q, [&](int64_t ao, int64_t bo, int64_t i) {
    gemm<T>(ta, tb, q.n, q.m, q.k, pa + ao, lda, pb + bo, ldb, pc + i * q.n * q.m);
  });
}

// T: int64_t or int32_t; U its unsigned twin, so a product wraps around
// as torch's does (signed overflow would be undefined).
template <class T, class U = std::make_unsigned_t<T>>
void matmul_int(const MatmulPlan& p, const Tensor& a, const Tensor& b, const Tensor& out) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = out.data<T>();
  for_each_batch(p, [&](int64_t ao, int64_t bo, int64_t bi) {
    U* c = reinterpret_cast<U*>(pc + bi * p.n * p.m);
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const U x = U(pa[ao + i * p.a_rs + kk * p.a_cs]);
        for (int64_t j = 0; j < p.m; ++j) c[i * p.m + j] += U(x * U(pb[bo + kk * p.b_rs + j * p.b_cs]));
      }
  });
}

}  // namespace

Tensor matmul_tensors(const char* op, const Tensor& a0, const Tensor& b0) {
  const MatmulPlan p0 = plan_matmul(op, a0, b0);
  const Tensor a = a0.to(p0.dtype), b = b0.to(p0.dtype);
  const MatmulPlan p = plan_matmul(op, a, b);  // strides of the converted operands
  Tensor out = Tensor::empty(p.out_sizes, p.dtype);
  if (p.n == 0 || p.m == 0 || shape_numel(p.batch) == 0) return out;
  if (p.k == 0) return out;  // empty sum: zeros (the storage starts zeroed)
  if (p.n > INT_MAX || p.m > INT_MAX || p.k > INT_MAX)
    throw_error(ErrorKind::RuntimeError, std::string(op) + ": matrix dimensions exceed the BLAS index range");
  switch (p.dtype) {
    case DType::Float32: matmul_float<float>(p, a, b, out); break;
    case DType::Float64: matmul_float<double>(p, a, b, out); break;
    case DType::Int32: matmul_int<int32_t>(p, a, b, out); break;
    case DType::Int64: matmul_int<int64_t>(p, a, b, out); break;
    case DType::Bool: break;  // rejected by plan_matmul
  }
  return out;
}

Tensor matmul_shape(const OpArgs& args) {
  const MatmulPlan p = plan_matmul("matmul", args.tensor(0), args.tensor(1));
  return Tensor::meta(p.out_sizes, p.dtype);
}

Value matmul_eager(const OpArgs& args) { return Value::tensor(matmul_tensors("matmul", args.tensor(0), args.tensor(1))); }

// ----- linear ------------------------------------------------------------------

namespace {

// The output meta of linear, validating every shape.
Tensor plan_linear(const OpArgs& args) {
  const Tensor x = args.tensor(0), w = args.tensor(1);
  const Tensor bias = args.is_none(2) ? Tensor() : args.tensor(2);
  auto [out, dtype] = linear_result(x.sizes(), x.dtype(), w.sizes(), w.dtype(),
                                    bias.defined() ? &bias.sizes() : nullptr, bias.defined() ? bias.dtype() : x.dtype());
  return Tensor::meta(out, dtype);
}

}  // namespace

std::pair<Shape, DType> linear_result(const Shape& x, DType x_dtype, const Shape& w, DType w_dtype,
                                      const Shape* bias, DType bias_dtype) {
  if (w.size() != 2) throw_error(ErrorKind::RuntimeError, "linear: weight must be 2-D, got shape " + shape_str(w));
  if (x.empty()) throw_error(ErrorKind::RuntimeError, "linear: input must be at least 1-D, got a 0-d tensor");
  const int64_t in = x.back();
  if (in != w[1])
    throw_error(ErrorKind::RuntimeError, "linear: input shape " + shape_str(x) + " and weight shape " + shape_str(w) +
                                             " are not aligned (" + std::to_string(in) + " != " +
                                             std::to_string(w[1]) + ")");
  Shape out(x);
  out.back() = w[0];
  DType dtype = promote(x_dtype, w_dtype);
  if (bias) {
    // broadcast_shapes(out, bias) == out, without building the result.
    bool fits = bias->size() <= out.size();
    for (size_t i = 1; fits && i <= bias->size(); ++i) {
      const int64_t d = (*bias)[bias->size() - i];
      fits = d == 1 || d == out[out.size() - i];
    }
    // Otherwise broadcast_shapes names an incompatible pair; a compatible
    // bias that would grow the output is refused here.
    if (!fits && broadcast_shapes("linear", out, *bias) != out)
      throw_error(ErrorKind::RuntimeError, "linear: bias shape " + shape_str(*bias) + " cannot be added to output shape " +
                                               shape_str(out));
    dtype = promote(dtype, bias_dtype);
  }
  if (dtype == DType::Bool) throw_error(ErrorKind::TypeError, "linear(): bool tensors are not supported");
  return {std::move(out), dtype};
}

Tensor linear_shape(const OpArgs& args) { return plan_linear(args); }

Value linear_eager(const OpArgs& args) {
  const Tensor meta = plan_linear(args);
  const Tensor x = args.tensor(0).to(meta.dtype()), w = args.tensor(1).to(meta.dtype());
  // weight.T as a view: BLAS reads it transposed, nothing is copied.
  const Tensor wt = w.as_strided({w.sizes()[1], w.sizes()[0]}, {w.strides()[1], w.strides()[0]}, w.offset());
  Tensor out = matmul_tensors("linear", x, wt);
  if (!args.is_none(2)) {
    const Tensor bias = args.tensor(2).to(meta.dtype());
    const Value sum = call_op(OpId::add, {Value::tensor(out), Value::tensor(bias)});
    out = sum.as_tensor();
  }
  return Value::tensor(out);
}

}  // namespace kiln::runtime

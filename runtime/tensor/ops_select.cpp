// Selection and ordering: argmax/argmin, argsort, topk's indices, gather,
// tril/triu; and cumsum, a scan, which walks the lanes of a dim as these do.
//
// Ties follow torch on CPU, which users see (a top-k sampler's choice, the
// order of equal logits): argmax/argmin return the first extreme, and a NaN
// is the extreme (the first NaN wins). argsort and topk order ties the way
// torch's own algorithms do, so they run the same standard-library
// algorithms over the same (value, index) sequence with the same
// comparators: std::sort (std::stable_sort when stable) for sort; for topk,
// std::partial_sort when k * 64 <= n (then the order is sorted whatever
// `sorted` says), else nth_element and a sort of the first k - 1. The
// comparators put NaN above every number.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/tensor/ops_kernels.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {
namespace {

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// Calls f(offsets) for each lane of `sizes` along `dim` (every position of
// the other dims, in row-major order); offsets[k] is operand k's element
// offset of the lane's first element.
template <size_t N, class F>
void for_each_lane(const Shape& sizes, const std::array<const Shape*, N>& strides, int64_t dim, F&& f) {
  Shape s = sizes;
  std::array<Shape, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = *strides[k];
  if (dim >= 0) {
    s.erase(s.begin() + dim);
    for (size_t k = 0; k < N; ++k) st[k].erase(st[k].begin() + dim);
  }
  std::array<const Shape*, N> p;
  for (size_t k = 0; k < N; ++k) p[k] = &st[k];
  for_each_strided<N>(s, p, [&](const std::array<int64_t, N>& off, int64_t n, const std::array<int64_t, N>& step) {
    std::array<int64_t, N> o = off;
    for (int64_t i = 0; i < n; ++i) {
      f(o);
      for (size_t k = 0; k < N; ++k) o[k] += step[k];
    }
  });
}

// A dim argument that may be given for a 0-d tensor (torch treats a 0-d
// tensor as having one dim of size 1 there).
int64_t wrap_dim_0d(const char* op, int64_t dim, int64_t ndim) {
  return wrap_dim(op, dim, std::max<int64_t>(ndim, 1));
}

// ----- argmax / argmin ----------------------------------------------------------

struct ArgReducePlan {
  bool all;      // dim=None: over the flattened input
  int64_t dim = 0;
  Shape out;
};

ArgReducePlan plan_arg_reduce(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  const std::string op = args.op->name;
  if (x.dtype() == DType::Bool)
    throw_error(ErrorKind::RuntimeError, op + "(): bool tensors are not supported (convert to int64 first)");
  const bool keepdim = args.boolean(2);
  ArgReducePlan p;
  p.all = args.is_none(1);
  if (p.all) {
    if (x.numel() == 0)
      throw_error(ErrorKind::IndexError, op + "(): cannot reduce an empty tensor (shape " + shape_str(x.sizes()) +
                                               "): the operation has no identity");
    if (keepdim) p.out.assign(size_t(x.dim()), 1);
    return p;
  }
  p.dim = wrap_dim_0d(op.c_str(), args.integer(1), x.dim());
  if (x.dim() == 0) return p;  // a 0-d result either way
  if (x.sizes()[size_t(p.dim)] == 0)
    throw_error(ErrorKind::IndexError, op + "(): cannot reduce over dim " + std::to_string(p.dim) +
                                           " of size 0 (input shape " + shape_str(x.sizes()) + ")");
  p.out = x.sizes();
  if (keepdim) p.out[size_t(p.dim)] = 1;
  else p.out.erase(p.out.begin() + p.dim);
  return p;
}

// The index of the first extreme of n elements at base + i * step; a NaN
// is the extreme.
template <class T, bool Max>
int64_t arg_extreme(const T* base, int64_t n, int64_t step) {
  int64_t best = 0;
  T bv = base[0];
  if (is_nan(bv)) return 0;
  for (int64_t i = 1; i < n; ++i) {
    const T v = base[i * step];
    if (is_nan(v)) return i;
    if (Max ? v > bv : v < bv) {
      bv = v;
      best = i;
    }
  }
  return best;
}

template <bool Max>
Value arg_reduce(const OpArgs& args) {
  const ArgReducePlan p = plan_arg_reduce(args);
  const Tensor x = args.tensor(0);
  Tensor out = Tensor::empty(p.out, DType::Int64);
  int64_t* o = out.data<int64_t>();
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      if (p.all || x.dim() == 0) {
        const Tensor c = x.contiguous();  // flattened in row-major order
        o[0] = arg_extreme<T, Max>(c.data<T>(), c.numel(), 1);
        return;
      }
      const T* in = x.data<T>();
      const int64_t n = x.sizes()[size_t(p.dim)], step = x.strides()[size_t(p.dim)];
      int64_t k = 0;
      for_each_lane<1>(x.sizes(), {&x.strides()}, p.dim,
                       [&](const std::array<int64_t, 1>& off) { o[k++] = arg_extreme<T, Max>(in + off[0], n, step); });
    }
  });
  return Value::tensor(out);
}

// ----- sort order ---------------------------------------------------------------

template <class T>
struct Ascending {  // torch's KeyValueCompAsc: NaN last
  bool operator()(const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) const {
    return (!is_nan(a.first) && is_nan(b.first)) || a.first < b.first;
  }
};
template <class T>
struct Descending {  // torch's KeyValueCompDesc: NaN first
  bool operator()(const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) const {
    return (is_nan(a.first) && !is_nan(b.first)) || a.first > b.first;
  }
};

// torch sorts 1-d integer tensors of at least this many elements in
// ascending order with a radix sort, which is stable.
constexpr int64_t kTorchRadixSortMin = 32768;

struct SortPlan {
  int64_t dim;
  bool descending, stable;
};

SortPlan plan_sort(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  SortPlan p;
  p.dim = wrap_dim_0d(args.op->name, args.integer(1), x.dim());
  p.descending = args.boolean(2);
  p.stable = args.boolean(3);
  return p;
}

template <class T, class Cmp>
void sort_lane(std::vector<std::pair<T, int64_t>>& q, bool stable) {
  if (stable) std::stable_sort(q.begin(), q.end(), Cmp());
  else std::sort(q.begin(), q.end(), Cmp());
}

// ----- topk ---------------------------------------------------------------------

struct TopkPlan {
  int64_t k, dim;
  bool largest, sorted;
  Shape out;
};

TopkPlan plan_topk(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  TopkPlan p;
  p.k = args.integer(1);
  p.dim = wrap_dim_0d("topk", args.integer(2), x.dim());
  p.largest = args.boolean(3);
  p.sorted = args.boolean(4);
  if (x.dtype() == DType::Bool) throw_error(ErrorKind::RuntimeError, "topk(): bool tensors are not supported");
  const int64_t n = x.dim() == 0 ? 1 : x.sizes()[size_t(p.dim)];
  if (p.k < 0 || p.k > n)
    throw_error(ErrorKind::RuntimeError, "topk(): k (" + std::to_string(p.k) + ") is out of range for dimension " +
                                             std::to_string(p.dim) + " of size " + std::to_string(n));
  p.out = x.sizes();
  if (x.dim() > 0) p.out[size_t(p.dim)] = p.k;
  return p;
}

template <class T, class Cmp>
void topk_lane(std::vector<std::pair<T, int64_t>>& q, const T* in, int64_t n, int64_t step, int64_t k, bool sorted) {
  const Cmp comp;
  q.resize(size_t(n));
  for (int64_t j = 0; j < n; ++j) q[size_t(j)] = {in[j * step], j};
  if (k * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), comp);
  } else {
    std::nth_element(q.begin(), q.begin() + (k - 1), q.end(), comp);
    if (sorted) std::sort(q.begin(), q.begin() + (k - 1), comp);
  }
}

// ----- gather -------------------------------------------------------------------

struct GatherPlan {
  int64_t dim;
  Tensor index;
};

GatherPlan plan_gather(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  GatherPlan p;
  p.index = args.tensor(2);
  if (p.index.dtype() != DType::Int64)
    throw_error(ErrorKind::RuntimeError,
                std::string("gather(): expected an int64 index tensor, got ") + dtype_name(p.index.dtype()));
  p.dim = wrap_dim_0d("gather", args.integer(1), x.dim());
  const int64_t xd = std::max<int64_t>(x.dim(), 1), id = std::max<int64_t>(p.index.dim(), 1);
  if (xd != id)
    throw_error(ErrorKind::RuntimeError, "gather(): index " + shape_str(p.index.sizes()) +
                                             " must have as many dimensions as input " + shape_str(x.sizes()));
  for (int64_t d = 0; d < x.dim() && p.index.dim() > 0; ++d)
    if (d != p.dim && p.index.sizes()[size_t(d)] > x.sizes()[size_t(d)])
      throw_error(ErrorKind::RuntimeError, "gather(): index " + shape_str(p.index.sizes()) +
                                               " is larger than input " + shape_str(x.sizes()) +
                                               " at dimension " + std::to_string(d));
  return p;
}

// ----- tril / triu --------------------------------------------------------------

void check_triangle(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  if (x.dim() < 2)
    throw_error(ErrorKind::RuntimeError, std::string(args.op->name) +
                                             "(): input must have at least 2 dimensions, got shape " +
                                             shape_str(x.sizes()));
  args.integer(1);
}

template <bool Lower>
Value triangle(const OpArgs& args) {
  check_triangle(args);
  const Tensor x = args.tensor(0);
  const int64_t k = args.integer(1);
  Tensor out = Tensor::empty(x.sizes(), x.dtype());  // zeroed: only the kept part is copied
  const int64_t r = x.dim();
  const int64_t rows = x.sizes()[size_t(r - 2)], cols = x.sizes()[size_t(r - 1)];
  if (out.numel() == 0) return Value::tensor(out);
  const Shape batch(x.sizes().begin(), x.sizes().end() - 2);
  const Shape xb(x.strides().begin(), x.strides().end() - 2);
  const Shape ob(out.strides().begin(), out.strides().end() - 2);
  const int64_t xrs = x.strides()[size_t(r - 2)], xcs = x.strides()[size_t(r - 1)];
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    auto matrix = [&](int64_t xo, int64_t oo) {
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          if (Lower ? j - i <= k : j - i >= k) o[oo + i * cols + j] = in[xo + i * xrs + j * xcs];
    };
    if (batch.empty()) {
      matrix(0, 0);
      return;
    }
    for_each_strided<2>(batch, {&xb, &ob},
                        [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                          for (int64_t b = 0; b < n; ++b) matrix(off[0] + b * st[0], off[1] + b * st[1]);
                        });
  });
  return Value::tensor(out);
}

}  // namespace

Tensor arg_reduce_shape(const OpArgs& args) { return Tensor::meta(plan_arg_reduce(args).out, DType::Int64); }
Value argmax_eager(const OpArgs& args) { return arg_reduce<true>(args); }
Value argmin_eager(const OpArgs& args) { return arg_reduce<false>(args); }

Tensor argsort_shape(const OpArgs& args) {
  plan_sort(args);
  return Tensor::meta(args.tensor(0).sizes(), DType::Int64);
}

Value argsort_eager(const OpArgs& args) {
  const SortPlan p = plan_sort(args);
  const Tensor x = args.tensor(0);
  Tensor out = Tensor::empty(x.sizes(), DType::Int64);
  if (x.dim() == 0 || x.numel() == 0) return Value::tensor(out);  // 0-d: index 0
  const int64_t n = x.sizes()[size_t(p.dim)], step = x.strides()[size_t(p.dim)];
  const int64_t ostep = out.strides()[size_t(p.dim)];
  int64_t* o = out.data<int64_t>();
  // torch leaves a lane read with stride 0 (an expanded dim) in index order.
  const bool identity = step == 0;
  const bool stable = p.stable || (x.dim() == 1 && x.dtype() == DType::Int64 && !p.descending && n >= kTorchRadixSortMin);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    std::vector<std::pair<T, int64_t>> q(static_cast<size_t>(n));
    for_each_lane<2>(x.sizes(), {&x.strides(), &out.strides()}, p.dim, [&](const std::array<int64_t, 2>& off) {
      for (int64_t j = 0; j < n; ++j) q[size_t(j)] = {in[off[0] + j * step], j};
      if (!identity) {
        if (p.descending) sort_lane<T, Descending<T>>(q, stable);
        else sort_lane<T, Ascending<T>>(q, stable);
      }
      for (int64_t j = 0; j < n; ++j) o[off[1] + j * ostep] = q[size_t(j)].second;
    });
  });
  return Value::tensor(out);
}

Tensor topk_indices_shape(const OpArgs& args) { return Tensor::meta(plan_topk(args).out, DType::Int64); }

Value topk_indices_eager(const OpArgs& args) {
  const TopkPlan p = plan_topk(args);
  const Tensor x = args.tensor(0);
  Tensor out = Tensor::empty(p.out, DType::Int64);
  if (p.k == 0 || x.numel() == 0) return Value::tensor(out);
  if (x.dim() == 0) return Value::tensor(out);  // k == 1: index 0
  const int64_t n = x.sizes()[size_t(p.dim)], step = x.strides()[size_t(p.dim)];
  const int64_t ostep = out.strides()[size_t(p.dim)];
  int64_t* o = out.data<int64_t>();
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      const T* in = x.data<T>();
      std::vector<std::pair<T, int64_t>> q;
      // x's and out's lanes side by side (out has k where x has n along dim).
      for_each_lane<2>(x.sizes(), {&x.strides(), &out.strides()}, p.dim, [&](const std::array<int64_t, 2>& off) {
        if (p.largest) topk_lane<T, Descending<T>>(q, in + off[0], n, step, p.k, p.sorted);
        else topk_lane<T, Ascending<T>>(q, in + off[0], n, step, p.k, p.sorted);
        for (int64_t j = 0; j < p.k; ++j) o[off[1] + j * ostep] = q[size_t(j)].second;
      });
    }
  });
  return Value::tensor(out);
}

Tensor gather_shape(const OpArgs& args) {
  const GatherPlan p = plan_gather(args);
  return Tensor::meta(p.index.sizes(), args.tensor(0).dtype());
}

Value gather_eager(const OpArgs& args) {
  const GatherPlan p = plan_gather(args);
  const Tensor x = args.tensor(0);
  const Tensor& idx = p.index;
  Tensor out = Tensor::empty(idx.sizes(), x.dtype());
  if (out.numel() == 0) return Value::tensor(out);
  const int64_t n = x.dim() == 0 ? 1 : x.sizes()[size_t(p.dim)];
  const int64_t xstep = x.dim() == 0 ? 0 : x.strides()[size_t(p.dim)];
  // out[..., j, ...] = x[..., idx[..., j, ...], ...]: walk idx's positions;
  // x's strides in every other dim line up with idx's positions.
  Shape xs = x.strides();
  if (x.dim() > 0) xs[size_t(p.dim)] = 0;
  else xs = Shape(size_t(idx.dim()), 0);
  const int64_t* ip = idx.data<int64_t>();
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const Shape os = out.strides();
    for_each_strided<3>(idx.sizes(), {&os, &xs, &idx.strides()},
                        [&](const std::array<int64_t, 3>& off, int64_t cnt, const std::array<int64_t, 3>& st) {
                          for (int64_t i = 0; i < cnt; ++i) {
                            const int64_t j = ip[off[2] + i * st[2]];
                            if (j < 0 || j >= n)
                              throw_error(ErrorKind::RuntimeError,
                                          "gather(): index " + std::to_string(j) + " is out of bounds for dimension " +
                                              std::to_string(p.dim) + " with size " + std::to_string(n));
                            o[off[0] + i * st[0]] = in[off[1] + i * st[1] + j * xstep];
                          }
                        });
  });
  return Value::tensor(out);
}

// torch.cumsum's result dtype: `dtype` when given (the input is converted
// first), else the input's, integers and bool widened to int64.
static DType cumsum_dtype(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  const DType given = dtype_arg(args, 2, x.dtype());
  return is_floating(given) ? given : DType::Int64;
}

Tensor cumsum_shape(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  wrap_dim("cumsum", args.integer(1), std::max<int64_t>(x.dim(), 1));
  return Tensor::meta(x.sizes(), cumsum_dtype(args));
}

Value cumsum_eager(const OpArgs& args) {
  const DType dtype = cumsum_dtype(args);
  const Tensor x = args.tensor(0).to(dtype);
  const int64_t dim = wrap_dim("cumsum", args.integer(1), std::max<int64_t>(x.dim(), 1));
  Tensor out = Tensor::empty(x.sizes(), dtype);
  if (x.numel() == 0) return Value::tensor(out);
  if (x.dim() == 0) return Value::tensor(x.clone());
  const int64_t n = x.sizes()[size_t(dim)], step = x.strides()[size_t(dim)];
  const int64_t ostep = out.strides()[size_t(dim)];
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      // torch's CPU kernel (cpu_cum_base_kernel) accumulates in
      // at::acc_type: double for float and double, int64 for integers.
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
      const T* in = x.data<T>();
      T* o = out.data<T>();
      for_each_lane<2>(x.sizes(), {&x.strides(), &out.strides()}, dim, [&](const std::array<int64_t, 2>& off) {
        Acc acc = 0;
        for (int64_t j = 0; j < n; ++j) {
          acc += Acc(in[off[0] + j * step]);
          o[off[1] + j * ostep] = T(acc);
        }
      });
    }
  });
  return Value::tensor(out);
}

Tensor triangle_shape(const OpArgs& args) {
  check_triangle(args);
  const Tensor x = args.tensor(0);
  return Tensor::meta(x.sizes(), x.dtype());
}
Value tril_eager(const OpArgs& args) { return triangle<true>(args); }
Value triu_eager(const OpArgs& args) { return triangle<false>(args); }

}  // namespace kiln::runtime

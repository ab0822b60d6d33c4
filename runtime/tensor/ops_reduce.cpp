// Reductions (sum, mean, amax) and the normalisations built on them
// (softmax, log_softmax, layer_norm).
//
// This is the reference backend: float32 data is accumulated in double, so
// results are the exactly rounded float32 of a double-precision computation
// (torch accumulates in float32; the two can differ in the last bit, and
// other backends are compared against these with a tolerance). Integer sums
// accumulate in int64 with wrap-around, like torch.
#include <cmath>
#include <limits>

#include "runtime/tensor/ops_kernels.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {
namespace {

// Which dims a reduction removes: `dim` is None (all), an int, or a
// tuple/list of ints. An empty tuple also means all dims, as in torch.
std::vector<bool> reduced_dims(const OpArgs& args, size_t i, int64_t ndim) {
  const char* op = args.op->name;
  std::vector<bool> mask(size_t(ndim), args.is_none(i));
  if (args.is_none(i)) return mask;
  const std::vector<int64_t> dims = args.int_list(i);
  if (dims.empty()) return std::vector<bool>(size_t(ndim), true);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(op, d, ndim);
    if (mask[size_t(w)])
      throw_error(ErrorKind::RuntimeError, std::string(op) + ": dim " + std::to_string(w) +
                                               " appears multiple times in the list of dims");
    mask[size_t(w)] = true;
  }
  return mask;
}

struct ReducePlan {
  Shape out_sizes;               // with or without the kept size-1 dims
  Shape kept_sizes, kept_strides;  // input dims that survive, in order
  Shape red_sizes, red_strides;    // input dims reduced over
  LoopPlan<1> red_loop;            // red_sizes/red_strides coalesced, planned once
  DType out_dtype;
};

ReducePlan plan_reduce(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  const std::string op = args.op->name;
  const std::vector<bool> mask = reduced_dims(args, 1, x.dim());
  const bool keepdim = args.boolean(2);
  ReducePlan p;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) {
      p.red_sizes.push_back(x.sizes()[d]);
      p.red_strides.push_back(x.strides()[d]);
      if (keepdim) p.out_sizes.push_back(1);
    } else {
      p.kept_sizes.push_back(x.sizes()[d]);
      p.kept_strides.push_back(x.strides()[d]);
      p.out_sizes.push_back(x.sizes()[d]);
    }
  }
  p.red_loop = plan_loop<1>(p.red_sizes, {&p.red_strides});
  const OpId id = args.op->id;
  if (id == OpId::sum) {
    p.out_dtype = is_integral(x.dtype()) ? DType::Int64 : x.dtype();
  } else if (id == OpId::mean) {
    if (!is_floating(x.dtype()))
      throw_error(ErrorKind::TypeError,
                  "mean(): could not infer output dtype. Input dtype must be floating point, got " +
                      std::string(dtype_name(x.dtype())));
    p.out_dtype = x.dtype();
  } else {
    p.out_dtype = x.dtype();
    for (size_t d = 0; d < mask.size(); ++d)
      if (mask[d] && x.sizes()[d] == 0)
        throw_error(ErrorKind::RuntimeError, op + ": cannot reduce over dim " + std::to_string(d) +
                                                 " of size 0 (input shape " + shape_str(x.sizes()) +
                                                 "): the reduction has no identity");
  }
  return p;
}

// Calls f(in_offset) for every input element that reduces into one output
// element, given the input offset of that output element's first input.
template <class F>
void for_each_reduced(const ReducePlan& p, int64_t base, F&& f) {
  run_loop(p.red_loop, [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
    const int64_t o = base + off[0];
    for (int64_t i = 0; i < n; ++i) f(o + i * st[0]);
  });
}

// Runs `reduce(in_offset) -> output value` for each output element, in
// output order (the output is contiguous; kept dims keep their order).
template <class O, class F>
Tensor reduce_into(const ReducePlan& p, F&& reduce) {
  Tensor out = Tensor::empty(p.out_sizes, dtype_of<O>::value);
  O* o = out.data<O>();
  const Shape out_strides = contiguous_strides(p.kept_sizes);
  for_each_strided<2>(p.kept_sizes, {&out_strides, &p.kept_strides},
                      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                        for (int64_t i = 0; i < n; ++i) o[off[0] + i * st[0]] = reduce(off[1] + i * st[1]);
                      });
  return out;
}

}  // namespace

Tensor reduce_shape(const OpArgs& args) {
  const ReducePlan p = plan_reduce(args);
  return Tensor::meta(p.out_sizes, p.out_dtype);
}

Value sum_eager(const OpArgs& args) {
  const ReducePlan p = plan_reduce(args);
  const Tensor x = args.tensor(0);
  return dispatch_dtype(x.dtype(), [&](auto tag) -> Value {
    using T = decltype(tag);
    const T* in = x.data<T>();
    if constexpr (std::is_floating_point_v<T>) {
      return Value::tensor(reduce_into<T>(p, [&](int64_t base) {
        double acc = 0;
        for_each_reduced(p, base, [&](int64_t k) { acc += double(in[k]); });
        return T(acc);
      }));
    } else {
      // bool sums count the Trues; int64 sums wrap (uint64 arithmetic).
      return Value::tensor(reduce_into<int64_t>(p, [&](int64_t base) {
        uint64_t acc = 0;
        for_each_reduced(p, base, [&](int64_t k) { acc += uint64_t(in[k]); });
        return int64_t(acc);
      }));
    }
  });
}

Value mean_eager(const OpArgs& args) {
  const ReducePlan p = plan_reduce(args);
  const Tensor x = args.tensor(0);
  const double count = double(shape_numel(p.red_sizes));
  return dispatch_dtype(p.out_dtype, [&](auto tag) -> Value {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      const T* in = x.data<T>();
      return Value::tensor(reduce_into<T>(p, [&](int64_t base) {
        double acc = 0;
        for_each_reduced(p, base, [&](int64_t k) { acc += double(in[k]); });
        return T(acc / count);  // 0/0 = nan for an empty reduction, as in torch
      }));
    }
    return Value::none();  // unreachable: the plan rejects integral input
  });
}

Value amax_eager(const OpArgs& args) {
  const ReducePlan p = plan_reduce(args);
  const Tensor x = args.tensor(0);
  return dispatch_dtype(p.out_dtype, [&](auto tag) -> Value {
    using T = decltype(tag);
    const T* in = x.data<T>();
    return Value::tensor(reduce_into<T>(p, [&](int64_t base) {
      bool first = true;
      T best{};
      for_each_reduced(p, base, [&](int64_t k) {
        const T v = in[k];
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(best)) return;  // NaN wins, as in torch.amax
          if (std::isnan(v)) {
            best = v;
            first = false;
            return;
          }
        }
        if (first || best < v) best = v;
        first = false;
      });
      return best;
    }));
  });
}

// ----- softmax / log_softmax -------------------------------------------------

Tensor softmax_shape(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  wrap_dim(args.op->name, args.integer(1), x.dim());
  return Tensor::meta(x.sizes(), is_floating(x.dtype()) ? x.dtype() : kDefaultFloat);
}

namespace {

// x viewed as [outer, n, inner] around `dim`; f(row base, n, step) per row.
template <class F>
void for_each_row(const Shape& sizes, int64_t dim, F&& f) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= sizes[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < sizes.size(); ++d) inner *= sizes[d];
  const int64_t n = sizes[size_t(dim)];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) f(o * n * inner + i, n, inner);
}

Value softmax_common(const OpArgs& args, bool log) {
  const Tensor meta = softmax_shape(args);
  const Tensor x = args.tensor(0);
  const int64_t dim = wrap_dim(args.op->name, args.integer(1), x.dim());
  Tensor out = Tensor::empty(x.sizes(), meta.dtype());
  dispatch_dtype(meta.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      const Tensor in = x.to(meta.dtype()).contiguous();
      const T* src = in.data<T>();
      T* dst = out.data<T>();
      for_each_row(x.sizes(), dim, [&](int64_t base, int64_t n, int64_t step) {
        if (n == 0) return;
        // Subtracting the row max keeps exp() from overflowing.
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k < n; ++k) mx = std::max(mx, double(src[base + k * step]));
        double total = 0;
        for (int64_t k = 0; k < n; ++k) total += std::exp(double(src[base + k * step]) - mx);
        const double log_total = std::log(total);
        for (int64_t k = 0; k < n; ++k) {
          const double z = double(src[base + k * step]) - mx;
          dst[base + k * step] = T(log ? z - log_total : std::exp(z) / total);
        }
      });
    }
  });
  return Value::tensor(out);
}

}  // namespace

Value softmax_eager(const OpArgs& args) { return softmax_common(args, false); }
Value log_softmax_eager(const OpArgs& args) { return softmax_common(args, true); }

// ----- layer_norm --------------------------------------------------------------

namespace {

struct LayerNormPlan {
  Shape norm;  // normalized_shape
  DType dtype;
  bool has_weight, has_bias;
};

LayerNormPlan plan_layer_norm(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  LayerNormPlan p;
  p.norm = args.int_list(1);
  p.has_weight = !args.is_none(2);
  p.has_bias = !args.is_none(3);
  args.number(4);  // eps must be a number
  const size_t k = p.norm.size();
  bool ok = k <= x.sizes().size();
  for (size_t i = 0; ok && i < k; ++i) ok = x.sizes()[x.sizes().size() - k + i] == p.norm[i];
  if (!ok)
    throw_error(ErrorKind::RuntimeError, "layer_norm: normalized_shape " + shape_str(p.norm) +
                                             " does not match the trailing dimensions of input shape " +
                                             shape_str(x.sizes()));
  p.dtype = x.dtype();
  for (size_t i : {size_t(2), size_t(3)}) {
    if (args.is_none(i)) continue;
    const Tensor w = args.tensor(i);
    if (w.sizes() != p.norm)
      throw_error(ErrorKind::RuntimeError, std::string("layer_norm: ") + args.param_name(i) + " shape " +
                                               shape_str(w.sizes()) + " does not match normalized_shape " +
                                               shape_str(p.norm));
    p.dtype = promote(p.dtype, w.dtype());
  }
  if (!is_floating(p.dtype))
    throw_error(ErrorKind::TypeError,
                std::string("layer_norm(): expected a floating point input, got ") + dtype_name(p.dtype));
  return p;
}

}  // namespace

Tensor layer_norm_shape(const OpArgs& args) {
  const LayerNormPlan p = plan_layer_norm(args);
  return Tensor::meta(args.tensor(0).sizes(), p.dtype);
}

Value layer_norm_eager(const OpArgs& args) {
  const LayerNormPlan p = plan_layer_norm(args);
  const Tensor x = args.tensor(0);
  const double eps = args.number(4);
  Tensor out = Tensor::empty(x.sizes(), p.dtype);
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      const Tensor in = x.to(p.dtype).contiguous();
      const Tensor w = p.has_weight ? args.tensor(2).to(p.dtype).contiguous() : Tensor();
      const Tensor b = p.has_bias ? args.tensor(3).to(p.dtype).contiguous() : Tensor();
      const T* src = in.data<T>();
      const T* pw = p.has_weight ? w.data<T>() : nullptr;
      const T* pb = p.has_bias ? b.data<T>() : nullptr;
      T* dst = out.data<T>();
      const int64_t m = shape_numel(p.norm);
      const int64_t rows = m == 0 ? 0 : x.numel() / m;
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = src + r * m;
        double mean = 0;
        for (int64_t j = 0; j < m; ++j) mean += double(row[j]);
        mean /= double(m);
        double var = 0;  // biased (divides by m), as torch's layer_norm
        for (int64_t j = 0; j < m; ++j) var += (double(row[j]) - mean) * (double(row[j]) - mean);
        var /= double(m);
        const double rstd = 1.0 / std::sqrt(var + eps);
        for (int64_t j = 0; j < m; ++j) {
          double y = (double(row[j]) - mean) * rstd;
          if (pw) y *= double(pw[j]);
          if (pb) y += double(pb[j]);
          dst[r * m + j] = T(y);
        }
      }
    }
  });
  return Value::tensor(out);
}

}  // namespace kiln::runtime

// Pooling (max, average, adaptive average; 1-d and 2-d), torch's
// semantics and output sizes, on the 2-d layout of spatial_geometry.h (a
// 1-d op is the 2-d one with a height of 1, so one kernel per operation).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/tensor/spatial_geometry.h"

namespace kiln::runtime {
namespace {

using namespace spatial;

struct PoolPlan {
  Geometry g;
  bool ceil_mode = false, count_include_pad = true;
  int64_t divisor = 0;  // divisor_override, 0: none
};

bool is_max_pool(const OpArgs& args) { return std::string(args.op->name).rfind("max_pool", 0) == 0; }

// torch's pooling_output_shape.
int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t o = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (o - 1) * stride >= in + pad) --o;
  return o;
}

PoolPlan plan_pool(const OpArgs& args) {
  PoolPlan p;
  Geometry& g = p.g;
  g.R = spatial_rank(args);
  const int R = g.R;
  const std::string op = args.op->name;
  const bool is_max = is_max_pool(args);
  const Tensor x = args.tensor(0);
  read_input(args, x, g);
  check_floating(args, x);
  const std::vector<int64_t> k = spatial_arg(args, 1, R);
  const bool default_stride = args.is_none(2) || (args[2].is(Kind::Tuple) && args[2].as<TupleObj>()->items.empty()) ||
                              (args[2].is(Kind::List) && args[2].as<ListObj>()->items.empty());
  const std::vector<int64_t> stride = default_stride ? k : spatial_arg(args, 2, R);
  const std::vector<int64_t> pad = spatial_arg(args, 3, R);
  const std::vector<int64_t> dil = is_max ? spatial_arg(args, 4, R) : std::vector<int64_t>(size_t(R), 1);
  p.ceil_mode = truth(args[is_max ? 5 : 4]);
  if (is_max && truth(args[6]))
    throw_error(ErrorKind::NotImplementedError, op + "(): return_indices=True is not supported by kiln");
  if (!is_max) {
    p.count_include_pad = truth(args[5]);
    if (args.size() > 6 && !args.is_none(6)) {  // avg_pool1d has no divisor_override
      p.divisor = args.integer(6);
      if (p.divisor == 0) throw_error(ErrorKind::RuntimeError, op + "(): divisor must be not zero");
    }
  }
  for (int r = 0; r < R; ++r) {
    const size_t i = size_t(r);
    if (k[i] <= 0) throw_error(ErrorKind::RuntimeError, op + "(): kernel size should be greater than zero, but got " + shape_str(k));
    if (stride[i] <= 0) throw_error(ErrorKind::RuntimeError, op + "(): stride should be greater than zero, but got " + shape_str(stride));
    if (dil[i] <= 0) throw_error(ErrorKind::RuntimeError, op + "(): dilation should be greater than zero, but got " + shape_str(dil));
    if (pad[i] < 0) throw_error(ErrorKind::RuntimeError, op + "(): pad must be non-negative, but got " + shape_str(pad));
    const int64_t half = is_max ? ((k[i] - 1) * dil[i] + 1) / 2 : k[i] / 2;
    if (pad[i] > half)
      throw_error(ErrorKind::RuntimeError, op + "(): pad should be at most half of " +
                                               (is_max ? "effective kernel size" : "kernel size") + ", but got pad=" +
                                               std::to_string(pad[i]) + ", kernel_size=" + std::to_string(k[i]) +
                                               (is_max ? " and dilation=" + std::to_string(dil[i]) : std::string()));
  }
  auto h = [&](const std::vector<int64_t>& v, int64_t dflt) { return R == 2 ? v[0] : dflt; };
  g.kh = h(k, 1), g.kw = k.back(), g.sh = h(stride, 1), g.sw = stride.back();
  g.dh = h(dil, 1), g.dw = dil.back();
  g.ph_lo = g.ph_hi = h(pad, 0);
  g.pw_lo = g.pw_hi = pad.back();
  g.oh = R == 2 ? pool_out(g.H, g.kh, g.ph_lo, g.sh, g.dh, p.ceil_mode) : 1;
  g.ow = pool_out(g.W, g.kw, g.pw_lo, g.sw, g.dw, p.ceil_mode);
  if (g.oh < 1 || g.ow < 1 || g.H < 1 || g.W < 1) {
    std::vector<int64_t> in{g.C, g.H, g.W}, o{g.C, g.oh, g.ow};
    if (R == 1) in = {g.C, g.W}, o = {g.C, g.ow};
    throw_error(ErrorKind::RuntimeError, "Given input size: (" + join(in, "x") + "). Calculated output size: (" +
                                             join(o, "x") + "). Output size is too small");
  }
  return p;
}

// max with torch's NaN rule: a NaN wins, and once the best is NaN nothing
// replaces it; among equal values (0.0 and -0.0) the first one seen stays.
// Selects, not branches, so the loops over a row vectorize.
template <class T>
inline T nan_max(T best, T v) {
  T m = v > best ? v : best;
  m = v != v ? v : m;
  return best != best ? best : m;
}

template <class T>
void max_pool_run(const Geometry& g, const T* in, T* o) {
  // Separable: the max over each window's columns for every input row,
  // then over the window's rows, each with its in-range taps precomputed
  // (no bounds test per element; the second pass runs along contiguous
  // rows). Row-major order within the window is kept: of equal values the
  // first row's first one wins, as in torch's single pass.
  std::vector<int64_t> ilo(size_t(g.oh)), ihi(size_t(g.oh));
  for (int64_t oi = 0; oi < g.oh; ++oi) window_in_range(oi, g.sh, g.ph_lo, g.dh, g.kh, g.H, ilo[size_t(oi)], ihi[size_t(oi)]);
  std::vector<T> rows(size_t(g.H * g.ow));
  const T lowest = -std::numeric_limits<T>::infinity();
  for (int64_t plane = 0; plane < g.N * g.C; ++plane) {
    const T* src = in + plane * g.H * g.W;
    for (int64_t i = 0; i < g.H; ++i) {
      const T* row = src + i * g.W;
      T* hm = rows.data() + i * g.ow;
      std::fill(hm, hm + g.ow, lowest);
      // Tap by tap (the window's column order), over the output columns
      // where that tap is inside the row.
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t off = kj * g.dw - g.pw_lo;
        int64_t a = 0, b = 0;
        columns_in_range(off, g.sw, g.W, g.ow, a, b);
        const T* base = row + off;
        if (g.sw == 1) {
          for (int64_t oj = a; oj < b; ++oj) hm[oj] = nan_max(hm[oj], base[oj]);
        } else {
          for (int64_t oj = a; oj < b; ++oj) hm[oj] = nan_max(hm[oj], base[oj * g.sw]);
        }
      }
    }
    T* dst = o + plane * g.oh * g.ow;
    for (int64_t oi = 0; oi < g.oh; ++oi) {
      T* out = dst + oi * g.ow;
      std::fill(out, out + g.ow, lowest);
      const int64_t i0 = oi * g.sh - g.ph_lo;
      for (int64_t ki = ilo[size_t(oi)]; ki < ihi[size_t(oi)]; ++ki) {
        const T* hm = rows.data() + (i0 + ki * g.dh) * g.ow;
        for (int64_t oj = 0; oj < g.ow; ++oj) out[oj] = nan_max(out[oj], hm[oj]);
      }
    }
  }
}

// torch's AvgPool kernel: the window is clipped to the padded input for
// count_include_pad's divisor, then to the input for the sum.
template <class T>
void avg_pool_run(const PoolPlan& p, const T* in, T* o) {
  const Geometry& g = p.g;
  for (int64_t plane = 0; plane < g.N * g.C; ++plane) {
    const T* src = in + plane * g.H * g.W;
    for (int64_t oi = 0; oi < g.oh; ++oi)
      for (int64_t oj = 0; oj < g.ow; ++oj) {
        int64_t i0 = oi * g.sh - g.ph_lo, j0 = oj * g.sw - g.pw_lo;
        int64_t i1 = std::min(i0 + g.kh, g.H + g.ph_lo), j1 = std::min(j0 + g.kw, g.W + g.pw_lo);
        const int64_t pool_size = (i1 - i0) * (j1 - j0);
        i0 = std::max<int64_t>(i0, 0), j0 = std::max<int64_t>(j0, 0);
        i1 = std::min(i1, g.H), j1 = std::min(j1, g.W);
        T& dst = o[(plane * g.oh + oi) * g.ow + oj];
        if (i0 >= i1 || j0 >= j1) {
          dst = T(0);
          continue;
        }
        double sum = 0;
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j) sum += double(src[i * g.W + j]);
        const int64_t div = p.divisor ? p.divisor : p.count_include_pad ? pool_size : (i1 - i0) * (j1 - j0);
        dst = T(sum / double(div));
      }
  }
}

// ----- adaptive average pooling ------------------------------------------------------

struct AdaptivePlan {
  Geometry g;
};

AdaptivePlan plan_adaptive(const OpArgs& args) {
  AdaptivePlan p;
  Geometry& g = p.g;
  g.R = spatial_rank(args);
  const int R = g.R;
  const Tensor x = args.tensor(0);
  read_input(args, x, g);
  check_floating(args, x);
  for (int64_t d = g.batched ? 1 : 0; d < x.dim(); ++d)
    if (x.sizes()[size_t(d)] == 0)
      throw_error(ErrorKind::RuntimeError, std::string(args.op->name) +
                                               "(): expected input to have non-zero size for non-batch dimensions, "
                                               "but input has sizes " + shape_str(x.sizes()));
  // output_size: an int, or R entries where None keeps the input's size.
  std::vector<int64_t> out;
  const Value& os = args[1];
  const std::vector<int64_t> in_sp = R == 2 ? std::vector<int64_t>{g.H, g.W} : std::vector<int64_t>{g.W};
  if (os.is(Kind::Int)) {
    out.assign(size_t(R), os.as_int());
  } else if (os.is(Kind::Tuple) || os.is(Kind::List)) {
    const std::vector<Value>& items = os.is(Kind::Tuple) ? os.as<TupleObj>()->items : os.as<ListObj>()->items;
    if (int(items.size()) != R)
      throw_error(ErrorKind::RuntimeError, std::string(args.op->name) + "(): output_size must be " + std::to_string(R) +
                                               " values, got " + repr(os));
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].is_none()) out.push_back(in_sp[i]);
      else if (items[i].is(Kind::Int)) out.push_back(items[i].as_int());
      else throw_error(ErrorKind::TypeError, std::string(args.op->name) + "(): output_size entries must be int or None");
    }
  } else {
    throw_error(ErrorKind::TypeError, std::string(args.op->name) + "(): output_size must be an int or a tuple, not " +
                                          kind_name(os.kind()));
  }
  for (int64_t v : out)
    if (v < 0) throw_error(ErrorKind::RuntimeError, std::string(args.op->name) + "(): output_size must be non-negative");
  g.oh = R == 2 ? out[0] : 1;
  g.ow = out.back();
  return p;
}

template <class T>
void adaptive_run(const Geometry& g, const T* in, T* o) {
  for (int64_t plane = 0; plane < g.N * g.C; ++plane) {
    const T* src = in + plane * g.H * g.W;
    for (int64_t oi = 0; oi < g.oh; ++oi) {
      const int64_t i0 = (oi * g.H) / g.oh, i1 = ((oi + 1) * g.H + g.oh - 1) / g.oh;
      for (int64_t oj = 0; oj < g.ow; ++oj) {
        const int64_t j0 = (oj * g.W) / g.ow, j1 = ((oj + 1) * g.W + g.ow - 1) / g.ow;
        double sum = 0;
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j) sum += double(src[i * g.W + j]);
        o[(plane * g.oh + oi) * g.ow + oj] = T(sum / double((i1 - i0) * (j1 - j0)));
      }
    }
  }
}

}  // namespace

Tensor pool_shape(const OpArgs& args) {
  const PoolPlan p = plan_pool(args);
  return Tensor::meta(p.g.out_sizes(p.g.C), args.tensor(0).dtype());
}

namespace {
// A pooling op's output over x (its geometry g): `run(in, out)` writes every
// output element from x laid out as contiguous NCHW, in x's own dtype.
template <class Run>
Value pool_eager(const Geometry& g, const Tensor& x, Run run) {
  Tensor out = Tensor::uninitialized(g.out_sizes(g.C), x.dtype());
  if (out.numel() == 0) return Value::tensor(out);
  const Tensor x4 = as_nchw(x, g, x.dtype());
  if (x.dtype() == DType::Float32) run(x4.data<float>(), out.data<float>());
  else run(x4.data<double>(), out.data<double>());
  return Value::tensor(out);
}
}  // namespace

Value max_pool_eager(const OpArgs& args) {
  const PoolPlan p = plan_pool(args);
  return pool_eager(p.g, args.tensor(0), [&](const auto* in, auto* out) { max_pool_run(p.g, in, out); });
}

Value avg_pool_eager(const OpArgs& args) {
  const PoolPlan p = plan_pool(args);
  return pool_eager(p.g, args.tensor(0), [&](const auto* in, auto* out) { avg_pool_run(p, in, out); });
}

Tensor adaptive_pool_shape(const OpArgs& args) {
  const AdaptivePlan p = plan_adaptive(args);
  return Tensor::meta(p.g.out_sizes(p.g.C), args.tensor(0).dtype());
}

Value adaptive_avg_pool_eager(const OpArgs& args) {
  const AdaptivePlan p = plan_adaptive(args);
  return pool_eager(p.g, args.tensor(0), [&](const auto* in, auto* out) { adaptive_run(p.g, in, out); });
}

}  // namespace kiln::runtime

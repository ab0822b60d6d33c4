// Neural-network ops with kernels of their own: dropout's random mask,
// cross_entropy, batch_norm (which updates running statistics in place) and
// pad. Statistics and losses accumulate in double, as the reductions do.
#include <cmath>
#include <limits>

#include "runtime/kernels/attention.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {
namespace {

Value tv(const Tensor& t) { return Value::tensor(t); }

std::vector<Value> dims_of(const Shape& s) {
  std::vector<Value> d;
  for (int64_t x : s) d.push_back(Value::integer(x));
  return d;
}

// A float64 contiguous copy of t (or t itself): what the double loops read.
Tensor as_f64(const Tensor& t) { return t.to(DType::Float64).contiguous(); }

}  // namespace

// ----- dropout ------------------------------------------------------------------
// Reached only when training with 0 < p (dropout_parts handles the rest):
// the Dropout module's computation, so both draw the same numbers.

Tensor dropout_shape(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  return Tensor::meta(x.sizes(), x.dtype());
}

Value dropout_eager(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  const double p = args.number(1);
  if (p == 1) return call_op(OpId::mul, {tv(x), Value::floating(0.0)});
  const Value keep = call_op(OpId::ge, {call_op(OpId::rand, {make_tuple(dims_of(x.sizes()))}), Value::floating(p)});
  return call_op(OpId::mul, {call_op(OpId::mul, {tv(x), keep}), Value::floating(1.0 / (1.0 - p))});
}

// ----- cross_entropy --------------------------------------------------------------
// input (C), (N, C) or (N, C, d1, ...); target class indices (input's shape
// without C, int64) or class probabilities (input's shape, floating).
// torch's formulas, including label smoothing and the weighted mean
// (divided by the weights of the targets that count).

namespace {

struct CePlan {
  int64_t classes = 0;
  bool probs = false;     // target holds probabilities
  Shape out;              // reduction 'none'
  std::string reduction;
  DType dtype;
};

CePlan plan_cross_entropy(const OpArgs& args) {
  const Tensor x = args.tensor(0), t = args.tensor(1);
  CePlan p;
  if (!is_floating(x.dtype()))
    throw_error(ErrorKind::RuntimeError,
                std::string("cross_entropy(): expected a floating point input, got ") + dtype_name(x.dtype()));
  if (x.dim() == 0) throw_error(ErrorKind::RuntimeError, "cross_entropy(): input must have a class dimension, got a 0-d tensor");
  const int64_t cdim = x.dim() == 1 ? 0 : 1;
  p.classes = x.sizes()[size_t(cdim)];
  p.dtype = x.dtype();
  Shape positions = x.sizes();
  positions.erase(positions.begin() + cdim);
  if (is_floating(t.dtype())) {
    if (t.sizes() != x.sizes())
      throw_error(ErrorKind::RuntimeError, "cross_entropy(): probability targets " + shape_str(t.sizes()) +
                                               " must have the input's shape " + shape_str(x.sizes()));
    p.probs = true;
  } else if (t.dtype() == DType::Int64) {
    if (x.dim() >= 2 && (t.dim() == 0 || t.sizes()[0] != x.sizes()[0]))
      throw_error(ErrorKind::ValueError, "cross_entropy(): expected input batch size (" + std::to_string(x.sizes()[0]) +
                                             ") to match target batch size (" +
                                             (t.dim() ? std::to_string(t.sizes()[0]) : std::string("none")) + ")");
    if (t.sizes() != positions)
      throw_error(ErrorKind::RuntimeError, "cross_entropy(): size mismatch (input " + shape_str(x.sizes()) +
                                               ", target " + shape_str(t.sizes()) + ")");
  } else {
    throw_error(ErrorKind::RuntimeError, std::string("cross_entropy(): expected int64 class indices or floating point "
                                                     "probabilities as target, got ") + dtype_name(t.dtype()));
  }
  if (!args.is_none(2)) {
    const Tensor w = args.tensor(2);
    if (w.dim() != 1 || w.sizes()[0] != p.classes)
      throw_error(ErrorKind::RuntimeError, "cross_entropy(): weight " + shape_str(w.sizes()) +
                                               " must be 1-D with one value per class (" + std::to_string(p.classes) + ")");
  }
  args.integer(4);
  const double eps = args.number(7);
  if (eps < 0 || eps > 1)
    throw_error(ErrorKind::RuntimeError, "cross_entropy(): label_smoothing must be between 0.0 and 1.0, got " + repr(args[7]));
  // size_average / reduce are torch's legacy spelling of reduction.
  if (!args.is_none(3) || !args.is_none(5)) {
    const bool avg = args.is_none(3) || truth(args[3]);
    const bool red = args.is_none(5) || truth(args[5]);
    p.reduction = !red ? "none" : avg ? "mean" : "sum";
  } else {
    if (!args[6].is(Kind::Str))
      throw_error(ErrorKind::TypeError, std::string("cross_entropy(): argument 'reduction' must be str, not ") +
                                            kind_name(args[6].kind()));
    p.reduction = args[6].as_str();
    if (p.reduction != "mean" && p.reduction != "sum" && p.reduction != "none")
      throw_error(ErrorKind::ValueError, "'" + p.reduction + "' is not a valid value for reduction");
  }
  if (p.reduction == "none") p.out = positions;
  return p;
}

}  // namespace

Tensor cross_entropy_shape(const OpArgs& args) {
  const CePlan p = plan_cross_entropy(args);
  return Tensor::meta(p.out, p.dtype);
}

Value cross_entropy_eager(const OpArgs& args) {
  const CePlan p = plan_cross_entropy(args);
  const Tensor x = args.tensor(0);
  const int64_t cdim = x.dim() == 1 ? 0 : 1;
  const int64_t C = p.classes;
  // log_softmax over the classes, laid out [outer, C, inner].
  const Tensor logp = as_f64(call_op(OpId::log_softmax, {tv(x), Value::integer(cdim)}).as_tensor());
  const double* lp = logp.data<double>();
  const int64_t outer = x.dim() == 1 ? 1 : x.sizes()[0];
  int64_t inner = 1;
  for (int64_t d = cdim + 1; d < x.dim(); ++d) inner *= x.sizes()[size_t(d)];
  const int64_t positions = outer * inner;
  const Tensor wt = args.is_none(2) ? Tensor() : as_f64(args.tensor(2));
  const double* w = wt.defined() ? wt.data<double>() : nullptr;
  const double eps = args.number(7);
  auto logp_at = [&](int64_t pos, int64_t c) { return lp[(pos / inner) * C * inner + c * inner + pos % inner]; };
  std::vector<double> loss(size_t(positions), 0.0);
  double denom = 0;  // what 'mean' divides by
  if (p.probs) {
    const Tensor tt = as_f64(args.tensor(1));
    const double* tp = tt.data<double>();
    for (int64_t pos = 0; pos < positions; ++pos) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) {
        double target = tp[(pos / inner) * C * inner + c * inner + pos % inner];
        if (eps > 0) target = target * (1 - eps) + eps / double(C);
        acc += logp_at(pos, c) * target * (w ? w[c] : 1.0);
      }
      loss[size_t(pos)] = -acc;
    }
    denom = double(positions);
  } else {
    const Tensor tt = args.tensor(1).contiguous();
    const int64_t* tp = tt.data<int64_t>();
    const int64_t ignore = args.integer(4);
    for (int64_t pos = 0; pos < positions; ++pos) {
      const int64_t target = tp[pos];
      if (target == ignore) continue;
      if (target < 0 || target >= C)
        throw_error(ErrorKind::IndexError, "cross_entropy(): target " + std::to_string(target) +
                                               " is out of bounds for " + std::to_string(C) + " classes");
      const double wt_t = w ? w[target] : 1.0;
      const double nll = -wt_t * logp_at(pos, target);
      double s = 0;
      if (eps > 0)
        for (int64_t c = 0; c < C; ++c) s -= logp_at(pos, c) * (w ? w[c] : 1.0);
      loss[size_t(pos)] = (1 - eps) * nll + s * (eps / double(C));
      denom += wt_t;
    }
  }
  if (p.reduction == "none") {
    Tensor out = Tensor::empty(p.out, p.dtype);
    dispatch_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<T>)
        for (int64_t i = 0; i < positions; ++i) out.data<T>()[i] = T(loss[size_t(i)]);
    });
    return tv(out);
  }
  double total = 0;
  for (double l : loss) total += l;
  // 'mean' over nothing (every target ignored) is 0/0 = nan, as in torch.
  const double r = p.reduction == "sum" ? total : total / denom;
  return tv(Tensor::scalar(r, p.dtype));
}

// ----- batch_norm -----------------------------------------------------------------

namespace {

struct BnPlan {
  int64_t channels = 0, count = 0;  // values per channel
  bool training;
  DType dtype;
};

BnPlan plan_batch_norm(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  BnPlan p;
  if (x.dim() < 2)
    throw_error(ErrorKind::RuntimeError,
                "batch_norm(): expected an input of at least 2 dimensions (N, C, ...), got shape " + shape_str(x.sizes()));
  if (!is_floating(x.dtype()))
    throw_error(ErrorKind::RuntimeError,
                std::string("batch_norm(): expected a floating point input, got ") + dtype_name(x.dtype()));
  p.channels = x.sizes()[1];
  p.count = p.channels ? x.numel() / p.channels : 0;
  p.training = truth(args[5]);
  p.dtype = x.dtype();
  for (size_t i : {size_t(1), size_t(2), size_t(3), size_t(4)}) {
    if (args.is_none(i)) continue;
    const Tensor t = args.tensor(i);
    if (t.dim() != 1 || t.sizes()[0] != p.channels)
      throw_error(ErrorKind::RuntimeError, "batch_norm(): " + args.param_name(i) + " " + shape_str(t.sizes()) +
                                               " must have one value per channel (" + std::to_string(p.channels) + ")");
    if ((i == 1 || i == 2) && !is_floating(t.dtype()))
      throw_error(ErrorKind::RuntimeError, "batch_norm(): " + args.param_name(i) + " must be floating point");
  }
  if (args.is_none(1) != args.is_none(2))
    throw_error(ErrorKind::RuntimeError, "batch_norm(): running_mean and running_var must both be given or both be None");
  if (!p.training && args.is_none(1))
    throw_error(ErrorKind::RuntimeError, "batch_norm(): running_mean and running_var must be defined in evaluation mode");
  if (p.training && p.count <= 1)
    throw_error(ErrorKind::ValueError, "Expected more than 1 value per channel when training, got input size " +
                                           shape_str(x.sizes()));
  args.number(7);
  if (!args.is_none(8)) {
    const Tensor n = args.tensor(8);
    if (n.dtype() != DType::Int64 || n.numel() != 1)
      throw_error(ErrorKind::RuntimeError, "batch_norm(): num_batches_tracked must be a one-element int64 tensor");
  }
  if (p.training && !args.is_none(1) && args.is_none(6) && args.is_none(8))
    throw_error(ErrorKind::RuntimeError,
                "batch_norm(): momentum=None (a cumulative average) needs num_batches_tracked");
  if (!args.is_none(6)) args.number(6);
  return p;
}

// Writes double values into a (possibly strided) float tensor, in place.
void store_f64(const Tensor& dst, const std::vector<double>& v) {
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = dst.data<T>();
    const int64_t st = dst.strides()[0];
    for (size_t i = 0; i < v.size(); ++i) d[int64_t(i) * st] = convert<T>(v[i]);
  });
}

}  // namespace

Tensor batch_norm_shape(const OpArgs& args) {
  const BnPlan p = plan_batch_norm(args);
  return Tensor::meta(args.tensor(0).sizes(), p.dtype);
}

// Training only: evaluation decomposes (batch_norm_parts, ops.def), and
// call_op runs the decomposition before any kernel.
Value batch_norm_eager(const OpArgs& args) {
  const BnPlan p = plan_batch_norm(args);
  if (!p.training)
    throw_error(ErrorKind::RuntimeError, "batch_norm(): evaluation reached the training kernel (a kiln bug)");
  const Tensor x = args.tensor(0);
  const Tensor xd = as_f64(x);
  const double* in = xd.data<double>();
  const int64_t C = p.channels, N = x.sizes()[0], inner = C && N ? x.numel() / (N * C) : 0;
  const double eps = args.number(7);
  std::vector<double> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C));  // var: biased, what normalizes
  {
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < inner; ++i) s += in[(n * C + c) * inner + i];
      const double m = s / double(p.count);
      double q = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < inner; ++i) {
          const double d = in[(n * C + c) * inner + i] - m;
          q += d * d;
        }
      mean[size_t(c)] = m;
      var[size_t(c)] = q / double(p.count);
    }
    if (!args.is_none(8)) {  // the module's counter, then its factor
      const Tensor n = args.tensor(8);
      n.data<int64_t>()[0] += 1;
    }
    if (!args.is_none(1)) {
      const double factor =
          args.is_none(6) ? 1.0 / double(args.tensor(8).data<int64_t>()[0]) : args.number(6);
      const Tensor rm = args.tensor(1), rv = args.tensor(2);
      const Tensor rmd = rm.to(DType::Float64), rvd = rv.to(DType::Float64);
      std::vector<double> nm(static_cast<size_t>(C)), nv(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) {
        const double old_m = rmd.item_as_double({c}), old_v = rvd.item_as_double({c});
        const double unbiased = var[size_t(c)] * double(p.count) / double(p.count - 1);
        nm[size_t(c)] = (1 - factor) * old_m + factor * mean[size_t(c)];
        nv[size_t(c)] = (1 - factor) * old_v + factor * unbiased;
      }
      store_f64(rm, nm);
      store_f64(rv, nv);
    }
  }
  const Tensor w = args.is_none(3) ? Tensor() : args.tensor(3).to(DType::Float64);
  const Tensor b = args.is_none(4) ? Tensor() : args.tensor(4).to(DType::Float64);
  Tensor out = Tensor::uninitialized(x.sizes(), p.dtype);
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      T* o = out.data<T>();
      for (int64_t c = 0; c < C; ++c) {
        const double scale = (w.defined() ? w.item_as_double({c}) : 1.0) / std::sqrt(var[size_t(c)] + eps);
        const double shift = b.defined() ? b.item_as_double({c}) : 0.0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t at = (n * C + c) * inner + i;
            o[at] = T((in[at] - mean[size_t(c)]) * scale + shift);
          }
      }
    }
  });
  return tv(out);
}

// ----- _flash_attention ---------------------------------------------------------

Tensor attention_shape(const OpArgs& args) {
  const Tensor mask = args.is_none(3) ? Tensor() : args.tensor(3);
  return Tensor::meta(attention_result_sizes(args.tensor(0), args.tensor(1), args.tensor(2), mask),
                      args.tensor(0).dtype());
}

Value attention_eager(const OpArgs& args) {
  const Tensor meta = attention_shape(args);
  const Tensor mask = args.is_none(3) ? Tensor() : args.tensor(3);
  Tensor out = Tensor::uninitialized(meta.sizes(), meta.dtype());
  flash_attention(args.tensor(0), args.tensor(1), args.tensor(2), mask, truth(args[4]), args.number(5), out,
                  AttentionOptions{truth(args[6]), truth(args[7])});
  return tv(out);
}

// ----- pad ------------------------------------------------------------------------
// pad = (left, right) pairs from the last dim backwards; negative sizes crop.
// 'constant' fills with value (0 by default); 'reflect', 'replicate' and
// 'circular' read the input at a mirrored, clamped or wrapped index.

namespace {

struct PadPlan {
  std::vector<int64_t> before, after;  // per dim
  std::string mode;
  Shape out;
};

PadPlan plan_pad(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  const std::vector<int64_t> pad = args.int_list(1);
  PadPlan p;
  if (!args[2].is(Kind::Str))
    throw_error(ErrorKind::TypeError, std::string("pad(): argument 'mode' must be str, not ") + kind_name(args[2].kind()));
  p.mode = args[2].as_str();
  if (p.mode != "constant" && p.mode != "reflect" && p.mode != "replicate" && p.mode != "circular")
    throw_error(ErrorKind::NotImplementedError, "pad(): mode '" + p.mode +
                                                    "' is not one of 'constant', 'reflect', 'replicate', 'circular'");
  if (pad.size() % 2 != 0)
    throw_error(ErrorKind::RuntimeError, "pad(): padding length must be divisible by 2, got " + std::to_string(pad.size()));
  if (int64_t(pad.size() / 2) > x.dim())
    throw_error(ErrorKind::RuntimeError, "pad(): padding length " + std::to_string(pad.size()) +
                                             " is too large for a tensor of rank " + std::to_string(x.dim()));
  // torch pads the last k dims of a (C, ...) or (N, C, ...) input in the
  // other modes, k <= 3.
  const int64_t k = int64_t(pad.size() / 2);
  if (p.mode != "constant" && (k < 1 || k > 3 || (x.dim() != k + 1 && x.dim() != k + 2)))
    throw_error(ErrorKind::NotImplementedError, "pad(): padding size " + std::to_string(pad.size()) +
                                                    " is not supported for a " + std::to_string(x.dim()) +
                                                    "-D input in mode '" + p.mode + "' (it pads the last " +
                                                    "dims of a (C, ...) or (N, C, ...) input, at most 3)");
  if (p.mode != "constant" && !args.is_none(3))
    throw_error(ErrorKind::RuntimeError, "pad(): padding mode '" + p.mode + "' does not take a value");
  if (!args.is_none(3) && !args[3].is_number())
    throw_error(ErrorKind::TypeError, std::string("pad(): argument 'value' must be a number, not ") + kind_name(args[3].kind()));
  p.before.assign(size_t(x.dim()), 0);
  p.after.assign(size_t(x.dim()), 0);
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const size_t d = size_t(x.dim()) - 1 - i;
    p.before[d] = pad[2 * i];
    p.after[d] = pad[2 * i + 1];
  }
  p.out = x.sizes();
  for (size_t d = 0; d < p.out.size(); ++d) {
    const int64_t n = x.sizes()[d];
    if (p.mode != "constant" && (p.before[d] < 0 || p.after[d] < 0))
      throw_error(ErrorKind::RuntimeError, "pad(): negative padding is only supported in 'constant' mode");
    if (p.mode == "reflect" && (p.before[d] >= n || p.after[d] >= n) && (p.before[d] || p.after[d]))
      throw_error(ErrorKind::RuntimeError, "pad(): reflect padding (" + std::to_string(p.before[d]) + ", " +
                                               std::to_string(p.after[d]) + ") must be less than the size " +
                                               std::to_string(n) + " of dimension " + std::to_string(d));
    if (p.mode == "circular" && (p.before[d] > n || p.after[d] > n))
      throw_error(ErrorKind::RuntimeError, "pad(): circular padding (" + std::to_string(p.before[d]) + ", " +
                                               std::to_string(p.after[d]) + ") must be at most the size " +
                                               std::to_string(n) + " of dimension " + std::to_string(d));
    if (p.mode != "constant" && n == 0 && (p.before[d] || p.after[d]))
      throw_error(ErrorKind::RuntimeError, "pad(): cannot pad an empty dimension in mode '" + p.mode + "'");
    p.out[d] = n + p.before[d] + p.after[d];
    if (p.out[d] < 0)
      throw_error(ErrorKind::RuntimeError, "pad(): the padded size of dimension " + std::to_string(d) + " would be " +
                                               std::to_string(p.out[d]));
  }
  return p;
}

}  // namespace

Tensor pad_shape(const OpArgs& args) {
  const PadPlan p = plan_pad(args);
  return Tensor::meta(p.out, args.tensor(0).dtype());
}

Value pad_eager(const OpArgs& args) {
  const PadPlan p = plan_pad(args);
  const Tensor x = args.tensor(0);
  Tensor out = Tensor::empty(p.out, x.dtype());
  if (out.numel() == 0) return tv(out);
  // Per dim: the input index each output index reads, or -1 (the fill value).
  std::vector<std::vector<int64_t>> src(size_t(x.dim()));
  for (size_t d = 0; d < src.size(); ++d) {
    const int64_t n = x.sizes()[d];
    for (int64_t o = 0; o < p.out[d]; ++o) {
      int64_t i = o - p.before[d];
      if (i < 0 || i >= n) {
        if (p.mode == "constant") i = -1;
        else if (p.mode == "replicate") i = i < 0 ? 0 : n - 1;
        else if (p.mode == "reflect") i = i < 0 ? -i : 2 * (n - 1) - i;
        else i = ((i % n) + n) % n;
      }
      src[d].push_back(i);
    }
  }
  const Value& fill = args[3];
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T fv = fill.is_none() ? T{} : fill.is(Kind::Float) ? convert<T>(fill.as_float()) : convert<T>(fill.as_int());
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const int64_t r = x.dim();
    Shape idx(size_t(r), 0);
    for (int64_t k = 0; k < out.numel(); ++k) {
      int64_t off = 0;
      bool inside = true;
      for (int64_t d = 0; d < r && inside; ++d) {
        const int64_t s = src[size_t(d)][size_t(idx[size_t(d)])];
        inside = s >= 0;
        off += s * x.strides()[size_t(d)];
      }
      o[k] = inside ? in[off] : fv;
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < p.out[size_t(d)]) break;
        idx[size_t(d)] = 0;
      }
    }
  });
  return tv(out);
}

}  // namespace kiln::runtime

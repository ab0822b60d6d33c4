// Composite ops: each is a decomposition into other registry ops, run by an
// OpEmitter (ops.h). Eagerly every part runs its kernel; in a trace every
// part becomes a graph node, so codegen fuses the pointwise parts (clamp's
// halves, attention's scale, mask and softmax) and a split is plain views.
// One function gives both, so a compiled composite computes what the eager
// one does, part for part.
//
// A decomposition validates its arguments with torch's errors first, then
// emits; it reads shapes and dtypes (meta tensors in a trace), never data.
#include <cmath>
#include <limits>

#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops_kernels.h"

namespace kiln::runtime {
namespace {

Value tensor_value(const Tensor& t) { return Value::tensor(t); }
Value i64(int64_t v) { return Value::integer(v); }
Value f64(double v) { return Value::floating(v); }

// Keyword arguments for an emitted call, as CallArgs wants them.
struct Call {
  std::vector<Value> values;
  Value names;
  Call(std::initializer_list<Value> pos, std::initializer_list<std::pair<const char*, Value>> kw = {}) : values(pos) {
    std::vector<Value> n;
    for (const auto& [k, v] : kw) {
      values.push_back(v);
      n.push_back(intern_value(k));
    }
    if (!n.empty()) names = make_tuple(std::move(n));
  }
  CallArgs args() const {
    return CallArgs{values.data(), values.size(), names.is(Kind::Tuple) ? names.as<TupleObj>() : nullptr};
  }
};

Tensor emit(OpEmitter& e, OpId op, const Call& c) { return e.call(op, c.args()).as_tensor(); }

Tensor slice_of(OpEmitter& e, const Tensor& t, int64_t dim, int64_t start, int64_t end) {
  return emit(e, OpId::slice, {tensor_value(t), i64(dim), i64(start), i64(end)});
}

// The dim a tensor-splitting op works along; the tensor must have one.
int64_t split_dim(const OpArgs& args, size_t i, const Tensor& t) {
  if (t.dim() == 0)
    throw_error(ErrorKind::RuntimeError, std::string(args.op->name) + "(): expects at least a 1-dimensional tensor");
  return wrap_dim(args.op->name, args.integer(i), t.dim());
}

// torch's legacy size_average/reduce arguments, else `reduction`.
std::string reduction_of(const OpArgs& args, size_t size_average, size_t reduce, size_t reduction) {
  if (!args.is_none(size_average) || !args.is_none(reduce)) {
    const bool avg = args.is_none(size_average) || truth(args[size_average]);
    const bool red = args.is_none(reduce) || truth(args[reduce]);
    return !red ? "none" : avg ? "mean" : "sum";
  }
  if (!args[reduction].is(Kind::Str))
    throw_error(ErrorKind::TypeError, std::string(args.op->name) + "(): argument 'reduction' must be str, not " +
                                          kind_name(args[reduction].kind()));
  const std::string r = args[reduction].as_str();
  if (r != "mean" && r != "sum" && r != "none")
    throw_error(ErrorKind::ValueError, "'" + r + "' is not a valid value for reduction");
  return r;
}

Value reduce_loss(OpEmitter& e, const Tensor& loss, const std::string& reduction) {
  if (reduction == "none") return tensor_value(loss);
  return e.call(reduction == "mean" ? OpId::mean : OpId::sum, {tensor_value(loss)});
}

}  // namespace

// gelu(input, approximate): 'none' is the row itself, 'tanh' its own row.
Value gelu_parts(const OpArgs& args, OpEmitter& e) {
  const Value& a = args[1];
  if (!a.is(Kind::Str))
    throw_error(ErrorKind::TypeError, std::string("gelu(): argument 'approximate' must be str, not ") + kind_name(a.kind()));
  if (a.as_str() == "none") return Value::null();
  if (a.as_str() == "tanh") return e.call(OpId::_gelu_tanh, {args[0]});
  throw_error(ErrorKind::RuntimeError, "gelu(): approximate must be 'none' or 'tanh', got '" + a.as_str() + "'");
}

// split(tensor, split_size_or_sections, dim): views (slices) of the input.
// An int gives pieces of that size (the last may be shorter); a list gives
// the pieces' sizes, which must add up to the dim's size.
Value split_parts(const OpArgs& args, OpEmitter& e) {
  const Tensor t = args.tensor(0);
  const int64_t dim = split_dim(args, 2, t);
  const int64_t n = t.sizes()[size_t(dim)];
  e.read_size(t, dim);
  std::vector<int64_t> sizes;
  const Value& s = args[1];
  if (s.is(Kind::Int) || s.is(Kind::Bool)) {
    const int64_t step = s.as_int();
    if (step < 0)
      throw_error(ErrorKind::RuntimeError, "split(): split_size must be non-negative, got " + std::to_string(step));
    if (step == 0 && n != 0)
      throw_error(ErrorKind::RuntimeError,
                  "split(): split_size can only be 0 if the dimension's size is 0, but it is " + std::to_string(n));
    if (n == 0) sizes.push_back(0);
    for (int64_t at = 0; at < n; at += step) sizes.push_back(std::min(step, n - at));
  } else {
    sizes = args.int_list(1);
    int64_t total = 0;
    for (int64_t x : sizes) {
      if (x < 0)
        throw_error(ErrorKind::RuntimeError,
                    "split(): split sizes must be non-negative, got " + shape_str(sizes));
      total += x;
    }
    if (total != n)
      throw_error(ErrorKind::RuntimeError, "split(): split sizes " + shape_str(sizes) + " must add up to " +
                                               std::to_string(n) + " (the size of dimension " + std::to_string(dim) +
                                               " of input " + shape_str(t.sizes()) + ")");
  }
  std::vector<Value> out;
  int64_t at = 0;
  for (int64_t x : sizes) {
    out.push_back(tensor_value(slice_of(e, t, dim, at, at + x)));
    at += x;
  }
  return make_tuple(std::move(out));
}

// chunk(input, chunks, dim): split by ceil(size / chunks), so fewer chunks
// may come back, as in torch.
Value chunk_parts(const OpArgs& args, OpEmitter& e) {
  const Tensor t = args.tensor(0);
  const int64_t chunks = args.integer(1);
  const int64_t dim = split_dim(args, 2, t);
  if (chunks <= 0)
    throw_error(ErrorKind::RuntimeError, "chunk(): chunks must be greater than 0, got " + std::to_string(chunks));
  e.read_size(t, dim);
  const int64_t n = t.sizes()[size_t(dim)];
  const int64_t step = (n + chunks - 1) / chunks;
  std::vector<Value> out;
  if (step == 0) {
    // An empty dim: torch gives `chunks` empty pieces.
    for (int64_t i = 0; i < chunks; ++i) out.push_back(tensor_value(slice_of(e, t, dim, 0, 0)));
    return make_tuple(std::move(out));
  }
  for (int64_t at = 0; at < n; at += step) out.push_back(tensor_value(slice_of(e, t, dim, at, std::min(n, at + step))));
  return make_tuple(std::move(out));
}

// unbind(input, dim): the slices along dim, each without it (select views).
Value unbind_parts(const OpArgs& args, OpEmitter& e) {
  const Tensor t = args.tensor(0);
  const int64_t dim = split_dim(args, 1, t);
  e.read_size(t, dim);
  std::vector<Value> out;
  for (int64_t i = 0; i < t.sizes()[size_t(dim)]; ++i)
    out.push_back(e.call(OpId::select, {tensor_value(t), i64(dim), i64(i)}));
  return make_tuple(std::move(out));
}

// stack(tensors, dim): each unsqueezed at dim, then one cat (which promotes).
Value stack_parts(const OpArgs& args, OpEmitter& e) {
  const Value& seq = args[0];
  if (!seq.is(Kind::List) && !seq.is(Kind::Tuple))
    throw_error(ErrorKind::TypeError,
                std::string("stack(): argument 'tensors' must be a tuple or list of Tensors, not ") + kind_name(seq.kind()));
  const std::vector<Value>& items = seq.is(Kind::List) ? seq.as<ListObj>()->items : seq.as<TupleObj>()->items;
  if (items.empty()) throw_error(ErrorKind::RuntimeError, "stack(): expects a non-empty list of tensors");
  for (size_t i = 0; i < items.size(); ++i)
    if (!items[i].is(Kind::Tensor))
      throw_error(ErrorKind::TypeError, "stack(): expected a tuple or list of Tensors, but element " + std::to_string(i) +
                                            " is " + kind_name(items[i].kind()));
  const Tensor first = items[0].as_tensor();
  for (size_t i = 1; i < items.size(); ++i)
    if (items[i].as_tensor().sizes() != first.sizes())
      throw_error(ErrorKind::RuntimeError, "stack(): expects each tensor to be equal size, but got " +
                                               shape_str(first.sizes()) + " at entry 0 and " +
                                               shape_str(items[i].as_tensor().sizes()) + " at entry " + std::to_string(i));
  const int64_t dim = wrap_dim("stack", args.integer(1), first.dim() + 1);
  std::vector<Value> parts;
  for (const Value& v : items) parts.push_back(e.call(OpId::unsqueeze, {v, i64(dim)}));
  return e.call(OpId::cat, {make_list(std::move(parts)), i64(dim)});
}

// clamp(input, min, max) = clamp_max(clamp_min(input, min), max): a bound
// that is None is left out. Promotion step by step equals torch's joint
// result_type (each step can only raise the category), and min > max
// gives max, as torch.
Value clamp_parts(const OpArgs& args, OpEmitter& e) {
  const Tensor x = args.tensor(0);
  if (args.is_none(1) && args.is_none(2))
    throw_error(ErrorKind::RuntimeError,
                std::string(args.op->name) + "(): at least one of 'min' or 'max' must not be None");
  Value r = tensor_value(x);
  if (!args.is_none(1)) r = e.call(OpId::clamp_min, {r, args[1]});
  if (!args.is_none(2)) r = e.call(OpId::clamp_max, {r, args[2]});
  return r;
}

// roll(input, shifts, dims): per dim, the tail moved to the front (a cat of
// two slices); dims=None rolls the flattened tensor. Always a new tensor.
Value roll_parts(const OpArgs& args, OpEmitter& e) {
  const Tensor x = args.tensor(0);
  const std::vector<int64_t> shifts = args.int_list(1);
  e.read_sizes(x);
  if (args.is_none(2)) {
    if (shifts.size() != 1)
      throw_error(ErrorKind::RuntimeError, "roll(): shifts and dims must align (shifts: " +
                                               std::to_string(shifts.size()) + ", dims: 0)");
    Tensor flat = emit(e, OpId::flatten, {tensor_value(x)});
    const Value rolled = e.call(OpId::roll, {tensor_value(flat), i64(shifts[0]), i64(0)});
    std::vector<Value> shape;
    for (int64_t s : x.sizes()) shape.push_back(i64(s));
    return e.call(OpId::view, {rolled, make_tuple(std::move(shape))});
  }
  const std::vector<int64_t> dims = args.int_list(2);
  if (dims.size() != shifts.size())
    throw_error(ErrorKind::RuntimeError, "roll(): shifts and dims must align (shifts: " + std::to_string(shifts.size()) +
                                             ", dims: " + std::to_string(dims.size()) + ")");
  Tensor r = x;
  bool copied = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim("roll", dims[i], std::max<int64_t>(x.dim(), 1));
    if (x.dim() == 0) continue;
    const int64_t n = x.sizes()[size_t(d)];
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    std::vector<Value> halves{tensor_value(slice_of(e, r, d, n - s, n)), tensor_value(slice_of(e, r, d, 0, n - s))};
    r = emit(e, OpId::cat, {make_list(std::move(halves)), i64(d)});
    copied = true;
  }
  if (!copied) r = emit(e, OpId::clone, {tensor_value(x)});
  return tensor_value(r);
}

// topk(input, k, dim, largest, sorted) -> (values, indices): the indices in
// torch's order (_topk_indices), and the values read through them.
Value topk_parts(const OpArgs& args, OpEmitter& e) {
  const Tensor x = args.tensor(0);
  std::vector<Value> pos(args.v.begin(), args.v.end());
  const Value idx = e.call(OpId::_topk_indices, CallArgs{pos.data(), pos.size(), nullptr});
  const int64_t dim = wrap_dim("topk", args.integer(2), std::max<int64_t>(x.dim(), 1));
  const Value values = e.call(OpId::gather, {tensor_value(x), i64(dim), idx});
  return make_tuple({values, idx});
}

// sort(input, dim, descending, stable) -> (values, indices).
Value sort_parts(const OpArgs& args, OpEmitter& e) {
  const Tensor x = args.tensor(0);
  const int64_t dim = wrap_dim("sort", args.integer(1), std::max<int64_t>(x.dim(), 1));
  const Value idx = e.call(OpId::argsort, {tensor_value(x), i64(dim), args[2], args[3]});
  const Value values = e.call(OpId::gather, {tensor_value(x), i64(dim), idx});
  return make_tuple({values, idx});
}

// scaled_dot_product_attention, torch's reference computation:
//   softmax(q @ k^T * scale + mask) @ v
// with is_causal masking key positions after the query's (top-left
// aligned), a bool mask keeping where True, a float mask added. A row whose
// every score is masked gives zeros, not NaN (torch's safe softmax). Where
// it can, one call of the tiled kernel (_flash_attention) computes it all.
Value sdpa_parts(const OpArgs& args, OpEmitter& e) {
  Tensor q = args.tensor(0), k = args.tensor(1), v = args.tensor(2);
  const char* op = "scaled_dot_product_attention";
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    throw_error(ErrorKind::RuntimeError, std::string(op) + "(): query, key and value must be at least 2-dimensional, got " +
                                             shape_str(q.sizes()) + ", " + shape_str(k.sizes()) + " and " +
                                             shape_str(v.sizes()));
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype())
    throw_error(ErrorKind::RuntimeError, std::string(op) + "(): query, key and value must have the same dtype, got " +
                                             dtype_name(q.dtype()) + ", " + dtype_name(k.dtype()) + " and " +
                                             dtype_name(v.dtype()));
  if (!is_floating(q.dtype()))
    throw_error(ErrorKind::RuntimeError,
                std::string(op) + "(): expected floating point query, key and value, got " + dtype_name(q.dtype()));
  const bool causal = truth(args[5]);
  const double dropout_p = args.number(4);
  Tensor mask;
  if (!args.is_none(3)) {
    mask = args.tensor(3);
    if (mask.dtype() != DType::Bool && mask.dtype() != q.dtype())
      throw_error(ErrorKind::RuntimeError, std::string(op) + "(): attn_mask must be bool or have the query's dtype (" +
                                               dtype_name(q.dtype()) + "), got " + dtype_name(mask.dtype()));
  }
  const int64_t E = q.sizes().back(), L = q.sizes()[size_t(q.dim() - 2)], S = k.sizes()[size_t(k.dim() - 2)];
  const double scale = args.is_none(6) ? 1.0 / std::sqrt(double(E)) : args.number(6);
  if (args.is_none(6)) e.read_size(q, q.dim() - 1);
  if (truth(args[7]) && q.dim() >= 3 && k.dim() >= 3) {
    e.read_size(q, q.dim() - 3);
    e.read_size(k, k.dim() - 3);
    // Grouped-query attention: each key/value head serves hq / hk query heads.
    const int64_t hq = q.sizes()[size_t(q.dim() - 3)], hk = k.sizes()[size_t(k.dim() - 3)];
    if (hk != hq) {
      if (hk == 0 || hq % hk != 0 || v.sizes()[size_t(v.dim() - 3)] != hk)
        throw_error(ErrorKind::RuntimeError, std::string(op) + "(): with enable_gqa, the query heads (" +
                                                 std::to_string(hq) + ") must be a multiple of the key/value heads (" +
                                                 std::to_string(hk) + ")");
      e.read_sizes(k);
      e.read_sizes(v);
      auto repeat = [&](const Tensor& t) {
        const int64_t r = t.dim();
        Tensor u = emit(e, OpId::unsqueeze, {tensor_value(t), i64(r - 2)});
        std::vector<Value> big, flat;
        for (int64_t d = 0; d < r + 1; ++d) big.push_back(i64(d == r - 2 ? hq / hk : u.sizes()[size_t(d)]));
        Tensor x = emit(e, OpId::expand, {tensor_value(u), make_tuple(std::move(big))});
        for (int64_t d = 0; d < r; ++d) flat.push_back(i64(d == r - 3 ? hq : t.sizes()[size_t(d)]));
        return emit(e, OpId::reshape, {tensor_value(x), make_tuple(std::move(flat))});
      };
      k = repeat(k);
      v = repeat(v);
    }
  }
  // The tiled kernel (runtime/kernels/attention.h) when it computes exactly this:
  // no dropout, float32/float64, the operands' batch dims equal (the
  // composite below also broadcasts them) and a mask of no higher rank. It
  // never holds more than a tile of the scores; the composite holds them all.
  bool tiled = dropout_p == 0 && (q.dtype() == DType::Float32 || q.dtype() == DType::Float64) &&
               k.dim() == q.dim() && v.dim() == q.dim() && (!mask.defined() || mask.dim() <= q.dim());
  for (int64_t d = 0; tiled && d + 2 < q.dim(); ++d)
    tiled = k.sizes()[size_t(d)] == q.sizes()[size_t(d)] && v.sizes()[size_t(d)] == q.sizes()[size_t(d)];
  if (tiled)
    return e.call(OpId::_flash_attention, {tensor_value(q), tensor_value(k), tensor_value(v),
                                           mask.defined() ? tensor_value(mask) : Value::none(), Value::boolean(causal),
                                           f64(scale)});
  const Tensor kt = emit(e, OpId::transpose, {tensor_value(k), i64(-2), i64(-1)});
  Tensor scores = emit(e, OpId::mul, {e.call(OpId::matmul, {tensor_value(q), tensor_value(kt)}), f64(scale)});
  const double ninf = -std::numeric_limits<double>::infinity();
  if (causal) {
    // The (L, S) mask is made like one plane of the scores, not from the
    // numbers L and S, so a trace over symbolic sizes keeps them symbolic.
    // (A leading dim of 0 has no plane: then the sizes, read as numbers.)
    Tensor plane = scores;
    bool empty = false;
    for (int64_t d = 0; d + 2 < scores.dim(); ++d) empty = empty || scores.sizes()[size_t(d)] == 0;
    Tensor ones;
    if (empty) {
      e.read_size(q, q.dim() - 2);
      e.read_size(k, k.dim() - 2);
      ones = emit(e, OpId::ones, Call({i64(L), i64(S)}, {{"dtype", intern_value("bool")}}));
    } else {
      while (plane.dim() > 2) plane = emit(e, OpId::select, {tensor_value(plane), i64(0), i64(0)});
      ones = emit(e, OpId::ones_like, Call({tensor_value(plane)}, {{"dtype", intern_value("bool")}}));
    }
    const Tensor above = emit(e, OpId::triu, {tensor_value(ones), i64(1)});
    scores = emit(e, OpId::masked_fill, {tensor_value(scores), tensor_value(above), f64(ninf)});
  }
  if (mask.defined()) {
    if (mask.dtype() == DType::Bool)
      scores = emit(e, OpId::masked_fill,
                    {tensor_value(scores), e.call(OpId::bitwise_not, {tensor_value(mask)}), f64(ninf)});
    else
      scores = emit(e, OpId::add, {tensor_value(scores), tensor_value(mask)});
  }
  Tensor attn = emit(e, OpId::softmax, {tensor_value(scores), i64(-1)});
  if (mask.defined()) {
    const Tensor rowmax = emit(e, OpId::amax, {tensor_value(scores), i64(-1), Value::boolean(true)});
    const Value dead = e.call(OpId::eq, {tensor_value(rowmax), f64(ninf)});
    attn = emit(e, OpId::where, {dead, f64(0.0), tensor_value(attn)});
  }
  if (dropout_p > 0) attn = emit(e, OpId::dropout, {tensor_value(attn), f64(dropout_p), Value::boolean(true)});
  return e.call(OpId::matmul, {tensor_value(attn), tensor_value(v)});
}

// binary_cross_entropy: -(t * log(x) + (1 - t) * log(1 - x)), each log
// clamped at -100 as torch does, times weight, reduced.
Value binary_cross_entropy_parts(const OpArgs& args, OpEmitter& e) {
  const Tensor x = args.tensor(0), t = args.tensor(1);
  if (x.sizes() != t.sizes())
    throw_error(ErrorKind::ValueError, "binary_cross_entropy(): target size " + shape_str(t.sizes()) +
                                           " is different from the input size " + shape_str(x.sizes()));
  if (!is_floating(x.dtype()) || !is_floating(t.dtype()))
    throw_error(ErrorKind::RuntimeError, "binary_cross_entropy(): expected floating point input and target");
  const std::string red = reduction_of(args, 3, 4, 5);
  const Value xv = tensor_value(x), tv = tensor_value(t);
  const Value log_x = e.call(OpId::clamp_min, {e.call(OpId::log, {xv}), f64(-100.0)});
  const Value log_1mx =
      e.call(OpId::clamp_min, {e.call(OpId::log, {e.call(OpId::sub, {f64(1.0), xv})}), f64(-100.0)});
  // (t - 1) * log(1 - x) - t * log(x): torch's order of operations.
  Value loss = e.call(OpId::sub, {e.call(OpId::mul, {e.call(OpId::sub, {tv, f64(1.0)}), log_1mx}),
                                  e.call(OpId::mul, {tv, log_x})});
  if (!args.is_none(2)) loss = e.call(OpId::mul, {loss, args[2]});
  return reduce_loss(e, loss.as_tensor(), red);
}

// mse_loss: (input - target)^2 (broadcast), reduced.
Value mse_loss_parts(const OpArgs& args, OpEmitter& e) {
  const Tensor x = args.tensor(0), t = args.tensor(1);
  const std::string red = reduction_of(args, 2, 3, 4);
  const Value d = e.call(OpId::sub, {tensor_value(x), tensor_value(t)});
  return reduce_loss(e, e.call(OpId::mul, {d, d}).as_tensor(), red);
}

// dropout: the input itself unless training with p > 0; else the row's own
// kernel (random: a graph node of its own, drawing each time it runs).
Value dropout_parts(const OpArgs& args, OpEmitter&) {
  const Tensor x = args.tensor(0);
  const double p = args[1].is_number() ? args[1].as_number() : -1.0;
  if (!(p >= 0 && p <= 1))
    throw_error(ErrorKind::ValueError, "dropout probability has to be between 0 and 1, but got " + repr(args[1]));
  const bool training = truth(args[2]);
  if (!training || p == 0) return tensor_value(x);
  if (truth(args[3]))
    throw_error(ErrorKind::NotImplementedError, "dropout(): inplace=True is not supported in training (kiln's ops "
                                                "make new tensors)");
  if (!is_floating(x.dtype()))
    throw_error(ErrorKind::RuntimeError,
                std::string("dropout(): expected a floating point input, got ") + dtype_name(x.dtype()));
  return Value::null();
}

// batch_norm in evaluation mode, as torch computes it: per channel
// a = weight / sqrt(running_var + eps) and b = bias - running_mean * a (in
// the statistics' dtype), then x * a + b. As pointwise parts the scheduler
// fuses it into its neighbours (a ResNet's relu and residual add) instead
// of a pass of its own. Training updates the running statistics in place:
// that call is the op itself.
Value batch_norm_parts(const OpArgs& args, OpEmitter& e) {
  batch_norm_shape(args);  // torch's errors first
  if (truth(args[5])) return Value::null();
  const Tensor x = args.tensor(0);
  const Value inv = e.call(OpId::rsqrt, {e.call(OpId::add, {args[2], f64(args.number(7))})});
  const Value a = args.is_none(3) ? inv : e.call(OpId::mul, {args[3], inv});
  const Value shift = e.call(OpId::mul, {args[1], a});
  const Value b = args.is_none(4) ? e.call(OpId::neg, {shift}) : e.call(OpId::sub, {args[4], shift});
  // [C] -> [C, 1, ...]: broadcast over the dims after the channels.
  std::vector<Value> per_channel{i64(-1)};
  for (int64_t d = 2; d < x.dim(); ++d) per_channel.push_back(i64(1));
  const Value shape = make_tuple(std::move(per_channel));
  const Value scaled = e.call(OpId::mul, {tensor_value(x), e.call(OpId::reshape, {a, shape})});
  return e.call(OpId::add, {scaled, e.call(OpId::reshape, {b, shape})});
}

}  // namespace kiln::runtime

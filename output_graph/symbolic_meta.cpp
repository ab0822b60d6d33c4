#include "output_graph/symbolic_meta.h"

#include <unordered_map>

#include "runtime/semantics/signature.h"

namespace kiln::output_graph {

using runtime::Kind;
using runtime::OpId;
using runtime::Tensor;
using runtime::Value;

SymArg SymArg::tensor(const Tensor& meta, SymShape shape) {
  SymArg a;
  a.hint = Value::tensor(meta);
  a.shape = std::move(shape);
  return a;
}

SymArg SymArg::integer(SymExpr e, int64_t hint) {
  SymArg a;
  a.hint = Value::integer(hint);
  a.scalar = std::move(e);
  return a;
}

SymArg SymArg::constant(const Value& v) {
  SymArg a;
  a.hint = v;
  if (v.is(Kind::Int) || v.is(Kind::Bool)) a.scalar = SymExpr::constant(v.as_int());
  if (v.is(Kind::Tuple) || v.is(Kind::List)) {
    const auto& items = v.is(Kind::Tuple) ? v.as<runtime::TupleObj>()->items : v.as<runtime::ListObj>()->items;
    for (const Value& x : items) a.items.push_back(constant(x));
  }
  return a;
}

namespace {

// The call's arguments by the op's parameters, as runtime::Signature binds
// them (defaults, `*size` packing, keywords): bound once on marker objects
// standing for the arguments, then each marker is traced back to its
// argument, so the binding rules exist once.
class Params {
 public:
  Params(const runtime::OpDef& op, const std::vector<SymArg>& args,
         const std::vector<std::pair<std::string, SymArg>>& kwargs) {
    std::vector<Value> markers;
    std::vector<Value> names;
    std::unordered_map<const void*, const SymArg*> by_marker;
    auto marker = [&](const SymArg& a) {
      // A sequence stays a sequence (a lone `*size` argument may be one);
      // lists are always fresh objects, so identity finds them again.
      Value m = (a.hint.is(Kind::Tuple) || a.hint.is(Kind::List)) ? runtime::make_list(std::vector<Value>(a.items.size()))
                                                                   : Value::tensor(Tensor::meta({}, runtime::DType::Float32));
      by_marker.emplace(m.obj(), &a);
      return m;
    };
    for (const SymArg& a : args) markers.push_back(marker(a));
    for (const auto& [k, a] : kwargs) {
      markers.push_back(marker(a));
      names.push_back(runtime::intern_value(k));
    }
    Value kwnames = names.empty() ? Value::none() : runtime::make_tuple(names);
    const std::vector<Value> bound =
        op.sig.bind(runtime::CallArgs{markers.data(), markers.size(),
                                      kwnames.is(Kind::Tuple) ? kwnames.as<runtime::TupleObj>() : nullptr});
    for (const Value& v : bound) {
      if (v.is_heap())
        if (auto it = by_marker.find(v.obj()); it != by_marker.end()) {
          params_.push_back(*it->second);
          continue;
        }
      if (v.is(Kind::Tuple)) {  // `*size` packed from several arguments
        SymArg packed;
        std::vector<Value> hints;
        for (const Value& x : v.as<runtime::TupleObj>()->items) {
          auto it = by_marker.find(x.obj());
          packed.items.push_back(it != by_marker.end() ? *it->second : SymArg::constant(x));
          hints.push_back(packed.items.back().hint);
        }
        packed.hint = runtime::make_tuple(std::move(hints));
        params_.push_back(std::move(packed));
        continue;
      }
      params_.push_back(SymArg::constant(v));  // a default
    }
  }
  const SymArg& operator[](size_t i) const { return params_[i]; }
  size_t size() const { return params_.size(); }

 private:
  std::vector<SymArg> params_;
};

struct Rule {
  const runtime::OpDef& op;
  const Params& p;
  const runtime::Shape& out_hint;
  ShapeEnv& env;

  const SymShape& shape(size_t i) const { return p[i].shape; }
  // The index of the parameter called `name`, or -1.
  int param(std::string_view name) const {
    const auto& params = op.sig.params();
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].name == name) return int(i);
    return -1;
  }
  bool none(size_t i) const { return p[i].hint.is_none(); }
  bool is_tensor(size_t i) const { return p[i].hint.is(Kind::Tensor); }
  // An argument that must be a number here (a dim): specialized if symbolic.
  int64_t number(const SymArg& a, const char* why) const {
    if (a.hint.is(Kind::Int) || a.hint.is(Kind::Bool)) return env.specialize(a.scalar, why);
    return a.hint.as_int();
  }
  int64_t number(size_t i, const char* why) const { return number(p[i], why); }
  // An int argument, or a tuple of ints, as expressions.
  std::vector<SymExpr> exprs(const SymArg& a) const {
    if (a.hint.is(Kind::Tuple) || a.hint.is(Kind::List)) {
      std::vector<SymExpr> out;
      for (const SymArg& x : a.items) out.push_back(x.scalar);
      return out;
    }
    return {a.scalar};
  }
  // An int or a tuple of ints that must be numbers (dims, kernel sizes).
  std::vector<int64_t> numbers(const SymArg& a, const char* why) const {
    std::vector<int64_t> out;
    if (a.hint.is(Kind::Tuple) || a.hint.is(Kind::List))
      for (const SymArg& x : a.items) out.push_back(number(x, why));
    else
      out.push_back(number(a, why));
    return out;
  }
  static int64_t wrap(int64_t d, size_t rank) { return d < 0 ? d + int64_t(rank) : d; }
  static SymExpr c(int64_t v) { return SymExpr::constant(v); }

  // Two sizes the concrete rule required equal: guarded so (true at the hints).
  void require_equal(const SymExpr& a, const SymExpr& b) const {
    if (a != b) env.evaluate_relation(a, Rel::EQ, b);
  }
  // numpy-style broadcasting of two shapes (a symbol, >= 2, never broadcasts).
  SymShape broadcast(const SymShape& a, const SymShape& b) const {
    const size_t n = std::max(a.size(), b.size());
    SymShape out(n, c(1));
    for (size_t i = 0; i < n; ++i) {
      SymExpr r = c(1);
      for (const SymShape* s : {&a, &b}) {
        if (i >= s->size()) continue;
        const SymExpr& e = (*s)[s->size() - 1 - i];
        if (e.is_constant() && e.constant_value() == 1) continue;
        if (r.is_constant() && r.constant_value() == 1) r = e;
        else require_equal(r, e);
      }
      out[n - 1 - i] = r;
    }
    return out;
  }
  SymExpr numel(const SymShape& s) const {
    SymExpr n = c(1);
    for (const SymExpr& e : s) n = n * e;
    return n;
  }
  // Where a slice bound falls in [0, n]: Python's clamping, each choice a
  // guarded relation.
  SymExpr clamp_index(SymExpr i, const SymExpr& n) const {
    if (env.evaluate_relation(i, Rel::LT, c(0))) {
      i = i + n;
      return env.evaluate_relation(i, Rel::LT, c(0)) ? c(0) : i;
    }
    return env.evaluate_relation(i, Rel::GT, n) ? n : i;
  }
};

using SymShapeFn = std::optional<SymShape> (*)(const Rule&);
std::optional<SymShape> none_shape(const Rule&) { return std::nullopt; }

std::optional<SymShape> sym_pointwise_shape(const Rule& r) {
  SymShape out;
  for (size_t i = 0; i < r.p.size(); ++i)
    if (r.is_tensor(i)) out = r.broadcast(out, r.shape(i));
  return out;
}
std::optional<SymShape> sym_same_as_input(const Rule& r) { return r.shape(0); }
#define sym_like_shape sym_same_as_input
#define sym_softmax_shape sym_same_as_input
#define sym_layer_norm_shape sym_same_as_input
#define sym_contiguous_shape sym_same_as_input
#define sym_to_shape sym_same_as_input
#define sym_dropout_shape sym_same_as_input
#define sym_triangle_shape sym_same_as_input
#define sym_batch_norm_shape sym_same_as_input
#define sym_argsort_shape sym_same_as_input
#define sym_cumsum_shape sym_same_as_input
#define sym_setitem_shape sym_same_as_input

std::optional<SymShape> sym_constructor_shape(const Rule& r) { return r.exprs(r.p[0]); }
std::optional<SymShape> sym_full_shape(const Rule& r) { return r.exprs(r.p[0]); }

std::optional<SymShape> sym_arange_shape(const Rule& r) {
  // arange(end) or arange(start, end, step), ints only (a float bound has
  // no symbolic length here).
  for (size_t i = 0; i < 3; ++i)
    if (!r.none(i) && !r.p[i].hint.is(Kind::Int)) return std::nullopt;
  SymExpr start = r.p[0].scalar, end = r.p[1].scalar;
  if (r.none(1)) {
    end = start;
    start = Rule::c(0);
  }
  const int64_t step = r.number(2, "an arange step");
  SymExpr span = step > 0 ? end - start : start - end;
  const int64_t s = step > 0 ? step : -step;
  if (!r.env.evaluate_relation(span, Rel::GT, Rule::c(0))) return SymShape{Rule::c(0)};
  return SymShape{SymExpr::floordiv(span + Rule::c(s - 1), Rule::c(s))};
}

// sum/mean/amax/argmax/argmin: the reduced dims dropped, or kept as 1.
std::optional<SymShape> reduced(const Rule& r, bool all_when_none) {
  const SymShape& in = r.shape(0);
  const bool keepdim = r.p[2].hint.is(Kind::Bool) && r.p[2].hint.as_int();
  std::vector<bool> reduce(in.size(), false);
  if (r.none(1)) {
    if (!all_when_none) return std::nullopt;
    reduce.assign(in.size(), true);
  } else {
    for (int64_t d : r.numbers(r.p[1], "a reduced dim")) reduce[size_t(Rule::wrap(d, in.size()))] = true;
  }
  SymShape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!reduce[d]) out.push_back(in[d]);
    else if (keepdim) out.push_back(Rule::c(1));
  }
  return out;
}
std::optional<SymShape> sym_reduce_shape(const Rule& r) { return reduced(r, true); }
std::optional<SymShape> sym_arg_reduce_shape(const Rule& r) {
  if (r.none(1)) {  // the index into the flattened input: 0-d, or all ones with keepdim
    const bool keepdim = r.p[2].hint.as_int();
    return SymShape(keepdim ? r.shape(0).size() : 0, Rule::c(1));
  }
  return reduced(r, false);
}

std::optional<SymShape> sym_matmul_shape(const Rule& r) {
  SymShape a = r.shape(0), b = r.shape(1);
  if (a.empty() || b.empty()) return std::nullopt;
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), Rule::c(1));
  if (b_vec) b.push_back(Rule::c(1));
  r.require_equal(a.back(), b[b.size() - 2]);
  SymShape batch = r.broadcast(SymShape(a.begin(), a.end() - 2), SymShape(b.begin(), b.end() - 2));
  if (!a_vec) batch.push_back(a[a.size() - 2]);
  if (!b_vec) batch.push_back(b.back());
  return batch;
}

std::optional<SymShape> sym_linear_shape(const Rule& r) {
  SymShape out = r.shape(0);
  const SymShape& w = r.shape(1);
  if (out.empty() || w.empty()) return std::nullopt;
  r.require_equal(out.back(), w.back());
  if (w.size() == 1) out.pop_back();
  else out.back() = w[0];
  return out;
}

// reshape/view: -1 is what the other sizes leave of the input's numel.
std::optional<SymShape> sym_view_like(const Rule& r) {
  SymShape out = r.exprs(r.p[1]);
  int infer = -1;
  SymExpr known = Rule::c(1);
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].is_constant() && out[i].constant_value() == -1) infer = int(i);
    else known = known * out[i];
  }
  const SymExpr total = r.numel(r.shape(0));
  if (infer < 0) {
    r.require_equal(total, known);
    return out;
  }
  auto q = total.divide_exactly(known);
  if (!q) return std::nullopt;
  out[size_t(infer)] = *q;
  return out;
}
#define sym_reshape_shape sym_view_like
#define sym_view_shape sym_view_like

std::optional<SymShape> sym_transpose_shape(const Rule& r) {
  SymShape out = r.shape(0);
  if (out.empty()) return out;
  const size_t a = size_t(Rule::wrap(r.number(1, "a dim"), out.size()));
  const size_t b = size_t(Rule::wrap(r.number(2, "a dim"), out.size()));
  std::swap(out[a], out[b]);
  return out;
}

std::optional<SymShape> sym_permute_shape(const Rule& r) {
  const SymShape& in = r.shape(0);
  SymShape out;
  for (int64_t d : r.numbers(r.p[1], "a dim")) out.push_back(in[size_t(Rule::wrap(d, in.size()))]);
  return out;
}

std::optional<SymShape> sym_expand_shape(const Rule& r) {
  const SymShape& in = r.shape(0);
  SymShape out = r.exprs(r.p[1]);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < out.size(); ++i) {
    const bool keep = out[i].is_constant() && out[i].constant_value() == -1;
    if (i < lead) continue;
    const SymExpr& have = in[i - lead];
    if (keep) out[i] = have;
    else if (!(have.is_constant() && have.constant_value() == 1)) r.require_equal(have, out[i]);
  }
  return out;
}

std::optional<SymShape> sym_select_shape(const Rule& r) {
  SymShape out = r.shape(0);
  const size_t d = size_t(Rule::wrap(r.number(1, "a dim"), out.size()));
  // The index is in range (the concrete rule checked it at the hints): keep it so.
  const SymExpr& index = r.p[2].scalar;
  if (index.has_symbols()) {
    if (r.env.evaluate_relation(index, Rel::GE, Rule::c(0))) r.env.evaluate_relation(index, Rel::LT, out[d]);
    else r.env.evaluate_relation(index + out[d], Rel::GE, Rule::c(0));
  } else if (out[d].has_symbols()) {
    const int64_t i = index.constant_value();
    if (i >= 0) r.env.evaluate_relation(Rule::c(i), Rel::LT, out[d]);
    else r.env.evaluate_relation(Rule::c(-i), Rel::LE, out[d]);
  }
  out.erase(out.begin() + ptrdiff_t(d));
  return out;
}

std::optional<SymShape> sym_slice_shape(const Rule& r) {
  SymShape out = r.shape(0);
  const size_t d = size_t(Rule::wrap(r.number(1, "a dim"), out.size()));
  const int64_t step = r.number(4, "a slice step");
  if (step <= 0) return std::nullopt;
  const SymExpr& n = out[d];
  const SymExpr start = r.none(2) ? Rule::c(0) : r.clamp_index(r.p[2].scalar, n);
  const SymExpr end = r.none(3) ? n : r.clamp_index(r.p[3].scalar, n);
  if (!r.env.evaluate_relation(end, Rel::GT, start)) out[d] = Rule::c(0);
  else out[d] = SymExpr::floordiv(end - start + Rule::c(step - 1), Rule::c(step));
  return out;
}

std::optional<SymShape> sym_unsqueeze_shape(const Rule& r) {
  SymShape out = r.shape(0);
  const size_t d = size_t(Rule::wrap(r.number(1, "a dim"), out.size() + 1));
  out.insert(out.begin() + ptrdiff_t(d), Rule::c(1));
  return out;
}

std::optional<SymShape> sym_squeeze_shape(const Rule& r) {
  // A symbol is never 1, so only static ones go.
  const SymShape& in = r.shape(0);
  std::vector<bool> candidate(in.size(), r.none(1));
  if (!r.none(1))
    for (int64_t d : r.numbers(r.p[1], "a dim")) candidate[size_t(Rule::wrap(d, in.size()))] = true;
  SymShape out;
  for (size_t d = 0; d < in.size(); ++d)
    if (!(candidate[d] && in[d].is_constant() && in[d].constant_value() == 1)) out.push_back(in[d]);
  return out;
}

std::optional<SymShape> sym_flatten_shape(const Rule& r) {
  const SymShape& in = r.shape(0);
  if (in.empty()) return SymShape{Rule::c(1)};
  const size_t s = size_t(Rule::wrap(r.number(1, "a dim"), in.size()));
  const size_t e = size_t(Rule::wrap(r.number(2, "a dim"), in.size()));
  SymShape out(in.begin(), in.begin() + ptrdiff_t(s));
  SymExpr n = Rule::c(1);
  for (size_t d = s; d <= e; ++d) n = n * in[d];
  out.push_back(n);
  out.insert(out.end(), in.begin() + ptrdiff_t(e) + 1, in.end());
  return out;
}

std::optional<SymShape> sym_cat_shape(const Rule& r) {
  const SymArg& list = r.p[0];
  std::vector<const SymShape*> parts;
  for (const SymArg& t : list.items) {
    // torch skips 1-d empty tensors in cat
    if (t.shape.size() == 1 && t.shape[0].is_constant() && t.shape[0].constant_value() == 0) continue;
    parts.push_back(&t.shape);
  }
  if (parts.empty()) return SymShape{Rule::c(0)};
  SymShape out = *parts[0];
  const size_t d = size_t(Rule::wrap(r.number(1, "a dim"), out.size()));
  for (size_t k = 1; k < parts.size(); ++k) {
    for (size_t i = 0; i < out.size(); ++i)
      if (i != d) r.require_equal(out[i], (*parts[k])[i]);
    out[d] = out[d] + (*parts[k])[d];
  }
  return out;
}

std::optional<SymShape> sym_embedding_shape(const Rule& r) {
  SymShape out = r.shape(0);
  out.push_back(r.shape(1).back());
  return out;
}

std::optional<SymShape> sym_gather_shape(const Rule& r) { return r.shape(2); }

std::optional<SymShape> sym_topk_indices_shape(const Rule& r) {
  SymShape out = r.shape(0);
  if (out.empty()) return out;
  const size_t d = size_t(Rule::wrap(r.number(2, "a dim"), out.size()));
  r.env.evaluate_relation(r.p[1].scalar, Rel::LE, out[d]);
  out[d] = r.p[1].scalar;
  return out;
}

std::optional<SymShape> sym_cross_entropy_shape(const Rule& r) {
  // reduction='none' keeps the batch (and any extra dims); the class dim goes.
  if (!(r.p[6].hint.is(Kind::Str) && r.p[6].hint.as_str() == "none")) return SymShape{};
  SymShape out = r.shape(0);
  out.erase(out.begin() + (out.size() == 1 ? 0 : 1));
  return out;
}

// _flash_attention: q's sizes with v's last; the batch dims, k's E and
// v's S agree with q's and k's (guarded as relations).
std::optional<SymShape> sym_attention_shape(const Rule& r) {
  const SymShape &q = r.shape(0), &k = r.shape(1), &v = r.shape(2);
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size()) return std::nullopt;
  auto same = [&](const SymExpr& a, const SymExpr& b) {
    if (a != b) r.env.evaluate_relation(a, Rel::EQ, b);
  };
  for (size_t d = 0; d + 2 < q.size(); ++d) same(k[d], q[d]), same(v[d], q[d]);
  same(k.back(), q.back());
  same(v[v.size() - 2], k[k.size() - 2]);
  SymShape out = q;
  out.back() = v.back();
  return out;
}

// conv1d/conv2d: each spatial dim (L + 2p - d*(k - 1) - 1) // s + 1.
std::optional<SymShape> sym_conv_shape(const Rule& r) {
  const SymShape& in = r.shape(0);
  const SymShape& w = r.shape(1);
  const size_t spatial = w.size() - 2;  // weight: (out channels, in channels / groups, *kernel)
  const size_t first = in.size() - spatial;
  auto per_dim = [&](size_t param) {
    std::vector<int64_t> v = r.numbers(r.p[param], "a conv parameter");
    if (v.size() == 1) v.assign(spatial, v[0]);
    return v;
  };
  if (r.p[4].hint.is(Kind::Str)) return std::nullopt;  // padding='same'/'valid'
  const auto stride = per_dim(3), padding = per_dim(4), dilation = per_dim(5);
  SymShape out(in.begin(), in.begin() + ptrdiff_t(first));
  out.back() = w[0];  // channels
  for (size_t i = 0; i < spatial; ++i) {
    const SymExpr& k = w[w.size() - spatial + i];
    if (k.has_symbols()) return std::nullopt;
    const int64_t span = dilation[i] * (k.constant_value() - 1) + 1;
    out.push_back(SymExpr::floordiv(in[first + i] + Rule::c(2 * padding[i] - span), Rule::c(stride[i])) + Rule::c(1));
    r.env.evaluate_relation(out.back(), Rel::GE, Rule::c(1));  // the concrete rule refuses an empty output
  }
  return out;
}

// _conv2d_act: conv2d's shape (its epilogue is per element).
#define sym_conv_act_shape sym_conv_shape

// The spatial dims of a 1d/2d pooling op: what its name ends in.
size_t spatial_dims(const Rule& r) { return std::string_view(r.op.name).ends_with("2d") ? 2 : 1; }

// max/avg pooling: (L + 2p - d*(k - 1) - 1) // s + 1; with ceil_mode, as
// torch's pooling_output_shape: rounded up, less one when the last window
// would start in the right padding (a guarded relation).
std::optional<SymShape> sym_pool_shape(const Rule& r) {
  const SymShape& in = r.shape(0);
  const size_t spatial = spatial_dims(r);
  const int ceil_at = r.param("ceil_mode");
  const bool ceil = ceil_at >= 0 && !r.none(size_t(ceil_at)) && r.p[size_t(ceil_at)].hint.as_int();
  auto per_dim = [&](const char* name, int64_t fallback) {
    const int i = r.param(name);
    if (i < 0 || r.none(size_t(i))) return std::vector<int64_t>(spatial, fallback);
    std::vector<int64_t> v = r.numbers(r.p[size_t(i)], "a pooling parameter");
    if (v.size() == 1) v.assign(spatial, v[0]);
    return v;
  };
  const auto kernel = per_dim("kernel_size", 1);
  const int si = r.param("stride");
  const auto stride = (si < 0 || r.none(size_t(si))) ? kernel : per_dim("stride", 1);
  const auto padding = per_dim("padding", 0), dilation = per_dim("dilation", 1);
  SymShape out(in.begin(), in.end() - ptrdiff_t(spatial));
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t span = dilation[i] * (kernel[i] - 1) + 1;
    const SymExpr& L = in[in.size() - spatial + i];
    SymExpr o = SymExpr::floordiv(L + Rule::c(2 * padding[i] - span + (ceil ? stride[i] - 1 : 0)), Rule::c(stride[i])) +
                Rule::c(1);
    if (ceil && r.env.evaluate_relation((o - Rule::c(1)) * Rule::c(stride[i]), Rel::GE, L + Rule::c(padding[i])))
      o = o - Rule::c(1);
    out.push_back(o);
    r.env.evaluate_relation(out.back(), Rel::GE, Rule::c(1));
  }
  return out;
}

std::optional<SymShape> sym_adaptive_pool_shape(const Rule& r) {
  SymShape out = r.shape(0);
  const size_t spatial = spatial_dims(r);
  const SymArg& sizes = r.p[1];
  std::vector<SymArg> items = sizes.items;
  if (items.empty()) items.assign(spatial, sizes);  // one int for every spatial dim
  for (size_t i = 0; i < spatial; ++i)
    if (!items[i].hint.is_none()) out[out.size() - spatial + i] = Rule::c(r.number(items[i], "an output size"));
  return out;
}

// pad: (left, right) pairs from the last dim backwards.
std::optional<SymShape> sym_pad_shape(const Rule& r) {
  SymShape out = r.shape(0);
  const auto pads = r.numbers(r.p[1], "a pad");
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    SymExpr& d = out[out.size() - 1 - i];
    d = d + Rule::c(pads[2 * i] + pads[2 * i + 1]);
  }
  return out;
}

// index(input, indices): aten's advanced indexing with int index tensors
// (None: the whole dim). The index shapes broadcast together and replace
// the dims they index: in place when those dims are adjacent, else first.
std::optional<SymShape> sym_index_shape(const Rule& r) {
  const SymShape& in = r.shape(0);
  const SymArg& list = r.p[1];
  SymShape broadcast;
  int first = -1, last = -1;
  bool adjacent = true;
  for (size_t d = 0; d < list.items.size(); ++d) {
    const SymArg& idx = list.items[d];
    if (idx.hint.is_none()) continue;
    if (!idx.hint.is(Kind::Tensor) || idx.hint.as_tensor().dtype() == runtime::DType::Bool) return std::nullopt;
    broadcast = r.broadcast(broadcast, idx.shape);
    if (last >= 0 && int(d) != last + 1) adjacent = false;
    if (first < 0) first = int(d);
    last = int(d);
  }
  if (first < 0) return in;
  SymShape out;
  if (adjacent) {
    out.assign(in.begin(), in.begin() + first);
    out.insert(out.end(), broadcast.begin(), broadcast.end());
    out.insert(out.end(), in.begin() + last + 1, in.end());
    return out;
  }
  out = broadcast;
  for (size_t d = 0; d < in.size(); ++d) {
    const bool indexed = d < list.items.size() && !list.items[d].hint.is_none();
    if (!indexed) out.push_back(in[d]);
  }
  return out;
}
#define sym_decomposed_shape none_shape

const SymShapeFn* sym_rules() {
  static const auto* table = [] {
    auto* t = new SymShapeFn[runtime::kNumOps];
#define KILN_OP(NAME, TORCH, ARITY, KIND, SIG, SHAPE, ...) t[size_t(OpId::NAME)] = &sym_##SHAPE;
#include "runtime/tensor/ops.def"
#undef KILN_OP
    return t;
  }();
  return table;
}

}  // namespace

std::optional<SymShape> symbolic_shape(OpId op, const std::vector<SymArg>& args,
                                       const std::vector<std::pair<std::string, SymArg>>& kwargs,
                                       const runtime::Shape& out_hint, ShapeEnv& env) {
  const runtime::OpDef& def = runtime::op_def(op);
  const Params p(def, args, kwargs);
  const Rule rule{def, p, out_hint, env};
  std::optional<SymShape> out = sym_rules()[size_t(op)](rule);
  if (!out) return out;
  // The rule must agree with the concrete one at the hints; a rule that
  // does not is a kiln bug, and the caller specializes rather than trust it.
  if (out->size() != out_hint.size()) return std::nullopt;
  for (size_t d = 0; d < out->size(); ++d)
    if (env.hint((*out)[d]) != out_hint[d]) return std::nullopt;
  return out;
}

}  // namespace kiln::output_graph

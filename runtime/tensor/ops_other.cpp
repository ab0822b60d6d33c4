// Copies and conversions (contiguous, clone, to), cat, embedding, and the
// tensor constructors (zeros, ones, empty, full, arange, rand, randn and
// their *_like forms).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {

// ----- contiguous / clone / to -------------------------------------------------

Tensor contiguous_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  return Tensor::meta(t.sizes(), t.dtype());
}
Value contiguous_eager(const OpArgs& args) { return Value::tensor(args.tensor(0).contiguous()); }
Value clone_eager(const OpArgs& args) { return Value::tensor(args.tensor(0).clone()); }

Tensor to_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  const DType d = dtype_arg(args, 1, t.dtype());
  // Same dtype: `to` returns its input, so the result keeps its layout.
  if (d == t.dtype()) return meta_view(d, t.sizes(), t.strides(), t.offset());
  return Tensor::meta(t.sizes(), d);
}
Value to_eager(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  return Value::tensor(t.to(dtype_arg(args, 1, t.dtype())));
}

// ----- cat -----------------------------------------------------------------------

namespace {

struct CatPlan {
  std::vector<Tensor> inputs;
  int64_t dim;
  Shape sizes;
  DType dtype;
};

CatPlan plan_cat(const OpArgs& args) {
  const Value& seq = args[0];
  const std::vector<Value>* items = nullptr;
  if (seq.is(Kind::List)) items = &seq.as<ListObj>()->items;
  else if (seq.is(Kind::Tuple)) items = &seq.as<TupleObj>()->items;
  else
    throw_error(ErrorKind::TypeError,
                std::string("cat(): argument 'tensors' must be a tuple or list of Tensors, not ") + kind_name(seq.kind()));
  if (items->empty()) throw_error(ErrorKind::RuntimeError, "cat: expected a non-empty list of tensors");
  CatPlan p;
  // torch's legacy rule: a 1-d empty tensor takes part in the result's
  // dtype only, whatever the others' rank (transformers' KV cache starts
  // as torch.tensor([]) and grows by cat along dim -2). When every input
  // is one, the result is the first.
  std::vector<Tensor> all;
  for (size_t i = 0; i < items->size(); ++i) {
    const Value& v = (*items)[i];
    if (!v.is(Kind::Tensor))
      throw_error(ErrorKind::TypeError, "cat(): expected a tuple or list of Tensors, but element " + std::to_string(i) +
                                            " is " + kind_name(v.kind()));
    all.push_back(v.as_tensor());
    if (all.back().dim() == 0)
      throw_error(ErrorKind::RuntimeError, "cat: zero-dimensional tensors cannot be concatenated");
    if (!(all.back().dim() == 1 && all.back().sizes()[0] == 0)) p.inputs.push_back(all.back());
  }
  if (p.inputs.empty()) p.inputs.push_back(all[0]);
  const Tensor& first = p.inputs[0];
  p.dim = wrap_dim("cat", args.integer(1), first.dim());
  p.sizes = first.sizes();
  p.dtype = all[0].dtype();
  for (const Tensor& t : all) p.dtype = promote(p.dtype, t.dtype());
  for (size_t i = 1; i < p.inputs.size(); ++i) {
    const Tensor& t = p.inputs[i];
    bool ok = t.dim() == first.dim();
    for (size_t d = 0; ok && d < p.sizes.size(); ++d) ok = int64_t(d) == p.dim || t.sizes()[d] == first.sizes()[d];
    if (!ok)
      throw_error(ErrorKind::RuntimeError, "cat: shapes " + shape_str(first.sizes()) + " and " + shape_str(t.sizes()) +
                                               " do not match outside dimension " + std::to_string(p.dim));
    p.sizes[size_t(p.dim)] += t.sizes()[size_t(p.dim)];
  }
  return p;
}

}  // namespace

Tensor cat_shape(const OpArgs& args) {
  const CatPlan p = plan_cat(args);
  return Tensor::meta(p.sizes, p.dtype);
}

Value cat_eager(const OpArgs& args) {
  const CatPlan p = plan_cat(args);
  Tensor out = Tensor::empty(p.sizes, p.dtype);
  const size_t d = size_t(p.dim);
  int64_t at = 0;
  for (const Tensor& t : p.inputs) {
    // The slab of `out` this input fills, as a view; copy_into converts.
    Shape sizes = out.sizes();
    sizes[d] = t.sizes()[d];
    if (sizes[d] > 0) copy_into(out.as_strided(sizes, out.strides(), at * out.strides()[d]), t);
    at += sizes[d];
  }
  return Value::tensor(out);
}

// ----- embedding -----------------------------------------------------------------

Tensor embedding_shape(const OpArgs& args) {
  const Tensor idx = args.tensor(0), w = args.tensor(1);
  if (idx.dtype() != DType::Int64 && idx.dtype() != DType::Int32)  // torch takes both
    throw_error(ErrorKind::TypeError, std::string("embedding(): argument 'input' must be an int64 tensor, got ") +
                                          dtype_name(idx.dtype()));
  if (w.dim() != 2)
    throw_error(ErrorKind::RuntimeError, "embedding: weight must be 2-D, got shape " + shape_str(w.sizes()));
  Shape out = idx.sizes();
  out.push_back(w.sizes()[1]);
  return Tensor::meta(out, w.dtype());
}

Value embedding_eager(const OpArgs& args) {
  const Tensor meta = embedding_shape(args);
  const Tensor idx = args.tensor(0).to(DType::Int64).contiguous();
  const Tensor w = args.tensor(1).contiguous();
  const int64_t rows = w.sizes()[0], dim = w.sizes()[1];
  const size_t row_bytes = size_t(dim) * itemsize(w.dtype());
  Tensor out = Tensor::empty(meta.sizes(), meta.dtype());
  const int64_t* ip = idx.data<int64_t>();
  const char* src = static_cast<const char*>(w.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (ip[i] < 0 || ip[i] >= rows)
      throw_error(ErrorKind::IndexError, "embedding: index " + std::to_string(ip[i]) +
                                             " is out of range for a table of size " + std::to_string(rows));
    if (row_bytes) std::memcpy(dst + size_t(i) * row_bytes, src + size_t(ip[i]) * row_bytes, row_bytes);
  }
  return Value::tensor(out);
}

// ----- constructors --------------------------------------------------------------

namespace {

// device=: kiln tensors live on the CPU. None, "cpu", "cpu:0" or an object
// whose str() is one of those (kiln.device, a torch.device) is accepted.
void check_device(const OpArgs& args, size_t i) {
  const Value& d = args[i];
  if (d.is_none()) return;
  if (!d.is(Kind::Str) && !d.is(Kind::Foreign))
    throw_error(ErrorKind::TypeError, std::string(args.op->name) + "(): argument 'device' must be a device or a str, not " +
                                          kind_name(d.kind()));
  const std::string s = to_str(d);
  if (s != "cpu" && s != "cpu:0")
    throw_error(ErrorKind::RuntimeError, std::string(args.op->name) + "(): kiln has only the cpu device, not '" + s + "'");
}

Shape size_arg(const OpArgs& args, size_t i) {
  Shape s = args.int_list(i);
  for (int64_t d : s)
    if (d < 0)
      throw_error(ErrorKind::RuntimeError, std::string(args.op->name) + ": negative dimension " + std::to_string(d) +
                                               " in size " + shape_str(s));
  return s;
}

}  // namespace

// zeros, ones, empty, rand, randn: "*size, dtype=None, device=None".
Tensor constructor_shape(const OpArgs& args) {
  const DType d = dtype_arg(args, 1, kDefaultFloat);
  check_device(args, 2);
  const OpId id = args.op->id;
  if ((id == OpId::rand || id == OpId::randn) && !is_floating(d))
    throw_error(ErrorKind::NotImplementedError, std::string(args.op->name) + "(): only floating point dtypes are supported, got " +
                                          dtype_name(d));
  return Tensor::meta(size_arg(args, 0), d);
}

Value zeros_eager(const OpArgs& args) {
  const Tensor m = constructor_shape(args);
  return Value::tensor(Tensor::empty(m.sizes(), m.dtype()));  // storage starts zeroed
}

Value ones_eager(const OpArgs& args) {
  const Tensor m = constructor_shape(args);
  Tensor t = Tensor::empty(m.sizes(), m.dtype());
  fill_tensor(t, int64_t(1));
  return Value::tensor(t);
}

Value rand_eager(const OpArgs& args) {
  const Tensor m = constructor_shape(args);
  Tensor t = Tensor::empty(m.sizes(), m.dtype());
  fill_uniform(t);
  return Value::tensor(t);
}

Value randn_eager(const OpArgs& args) {
  const Tensor m = constructor_shape(args);
  Tensor t = Tensor::empty(m.sizes(), m.dtype());
  fill_normal(t);
  return Value::tensor(t);
}

// full(size, fill_value, dtype=None): with no dtype the fill value decides,
// as in torch (bool -> bool, int -> int64, float -> float32).
Tensor full_shape(const OpArgs& args) {
  const Value& fill = args[1];
  if (!fill.is_number())
    throw_error(ErrorKind::TypeError,
                std::string("full(): argument 'fill_value' must be a number, not ") + kind_name(fill.kind()));
  const DType natural = fill.is(Kind::Bool) ? DType::Bool : fill.is(Kind::Int) ? DType::Int64 : kDefaultFloat;
  check_device(args, 3);
  return Tensor::meta(size_arg(args, 0), dtype_arg(args, 2, natural));
}

Value full_eager(const OpArgs& args) {
  const Tensor m = full_shape(args);
  Tensor t = Tensor::empty(m.sizes(), m.dtype());
  const Value& fill = args[1];
  if (fill.is(Kind::Float)) fill_tensor(t, fill.as_float());
  else fill_tensor(t, fill.as_int());  // exact for every int64
  return Value::tensor(t);
}

// ----- arange ----------------------------------------------------------------------

namespace {

struct ArangePlan {
  bool integral;  // every bound is an int: exact int64 arithmetic
  int64_t istart = 0, istep = 1;
  double fstart = 0, fstep = 1;
  int64_t count = 0;
  DType dtype;
};

ArangePlan plan_arange(const OpArgs& args) {
  for (size_t i : {size_t(0), size_t(1), size_t(2)})
    if (!args[i].is_none() && !args[i].is_number())
      throw_error(ErrorKind::TypeError, std::string("arange(): argument '") + args.param_name(i) +
                                            "' must be a number, not " + kind_name(args[i].kind()));
  // arange(end) is arange(0, end).
  const bool one_arg = args.is_none(1);
  const Value start = one_arg ? Value::integer(0) : args[0];
  const Value end = one_arg ? args[0] : args[1];
  const Value& step = args[2];
  ArangePlan p;
  check_device(args, 4);
  p.integral = !start.is(Kind::Float) && !end.is(Kind::Float) && !step.is(Kind::Float);
  p.dtype = dtype_arg(args, 3, p.integral ? DType::Int64 : kDefaultFloat);
  const auto num = [](const Value& v) {
    if (!v.is(Kind::Float)) return std::to_string(v.as_int());
    char buf[32];
    for (int prec = 1; prec <= 17; ++prec) {  // shortest text that reads back exactly, as Python prints
      std::snprintf(buf, sizeof buf, "%.*g", prec, v.as_float());
      if (std::strtod(buf, nullptr) == v.as_float()) break;
    }
    return std::string(buf);
  };
  const auto bad = [&](const std::string& why) {
    throw_error(ErrorKind::RuntimeError,
                "arange: " + why + " (start " + num(start) + ", end " + num(end) + ", step " + num(step) + ")");
  };
  if (p.integral) {
    p.istart = start.as_int();
    p.istep = step.as_int();
    const int64_t e = end.as_int();
    if (p.istep == 0) bad("step must be nonzero");
    if ((e > p.istart && p.istep < 0) || (e < p.istart && p.istep > 0)) bad("the end is not reachable with this step");
    // ceil((e - start) / step) without overflow: the span fits in uint64.
    const uint64_t span = e >= p.istart ? uint64_t(e) - uint64_t(p.istart) : uint64_t(p.istart) - uint64_t(e);
    const uint64_t st = p.istep > 0 ? uint64_t(p.istep) : uint64_t(0) - uint64_t(p.istep);
    p.count = int64_t((span + st - 1) / st);
    p.fstart = double(p.istart);
    p.fstep = double(p.istep);
  } else {
    p.fstart = start.as_number();
    p.fstep = step.as_number();
    const double e = end.as_number();
    if (!std::isfinite(p.fstart) || !std::isfinite(e) || !std::isfinite(p.fstep)) bad("bounds must be finite");
    if (p.fstep == 0) bad("step must be nonzero");
    if ((e > p.fstart && p.fstep < 0) || (e < p.fstart && p.fstep > 0)) bad("the end is not reachable with this step");
    const double n = std::ceil((e - p.fstart) / p.fstep);
    if (n > 9.0e15) bad("too many elements");
    p.count = int64_t(n);
  }
  return p;
}

}  // namespace

Tensor arange_shape(const OpArgs& args) {
  const ArangePlan p = plan_arange(args);
  return Tensor::meta({p.count}, p.dtype);
}

Value arange_eager(const OpArgs& args) {
  const ArangePlan p = plan_arange(args);
  Tensor t = Tensor::empty({p.count}, p.dtype);
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out = t.data<T>();
    for (int64_t i = 0; i < p.count; ++i) {
      if (p.integral && std::is_same_v<T, int64_t>)
        out[i] = convert<T>(int64_t(uint64_t(p.istart) + uint64_t(i) * uint64_t(p.istep)));
      else
        out[i] = convert<T>(p.fstart + double(i) * p.fstep);  // in double, then rounded once, like torch
    }
  });
  return Value::tensor(t);
}

// ----- *_like: input's shape, input's dtype unless dtype says otherwise --------

// zeros_like, ones_like, empty_like, rand_like, randn_like: "input, *,
// dtype=None, device=None"; full_like: "input, fill_value, *, dtype=None,
// device=None". The result is contiguous (torch keeps a dense input's
// strides; the values are the same).
Tensor like_shape(const OpArgs& args) {
  const Tensor x = args.tensor(0);
  const OpId id = args.op->id;
  const size_t at = id == OpId::full_like ? 2 : 1;
  const DType d = dtype_arg(args, at, x.dtype());
  check_device(args, at + 1);
  if ((id == OpId::rand_like || id == OpId::randn_like) && !is_floating(d))
    throw_error(ErrorKind::NotImplementedError, std::string(args.op->name) + "(): only floating point dtypes are supported, got " +
                                          dtype_name(d));
  if (id == OpId::full_like && !args[1].is_number())
    throw_error(ErrorKind::TypeError,
                std::string("full_like(): argument 'fill_value' must be a number, not ") + kind_name(args[1].kind()));
  return Tensor::meta(x.sizes(), d);
}

Value zeros_like_eager(const OpArgs& args) {
  const Tensor m = like_shape(args);
  return Value::tensor(Tensor::empty(m.sizes(), m.dtype()));
}

Value ones_like_eager(const OpArgs& args) {
  const Tensor m = like_shape(args);
  Tensor t = Tensor::empty(m.sizes(), m.dtype());
  fill_tensor(t, int64_t(1));
  return Value::tensor(t);
}

Value full_like_eager(const OpArgs& args) {
  const Tensor m = like_shape(args);
  Tensor t = Tensor::empty(m.sizes(), m.dtype());
  if (args[1].is(Kind::Float)) fill_tensor(t, args[1].as_float());
  else fill_tensor(t, args[1].as_int());
  return Value::tensor(t);
}

Value rand_like_eager(const OpArgs& args) {
  const Tensor m = like_shape(args);
  Tensor t = Tensor::empty(m.sizes(), m.dtype());
  fill_uniform(t);
  return Value::tensor(t);
}

Value randn_like_eager(const OpArgs& args) {
  const Tensor m = like_shape(args);
  Tensor t = Tensor::empty(m.sizes(), m.dtype());
  fill_normal(t);
  return Value::tensor(t);
}

}  // namespace kiln::runtime

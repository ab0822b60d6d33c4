// Tensor subscripting. A key is an int, a slice, None, or a tuple of those,
// applied left to right: an int selects (and removes) the current dim, a
// slice narrows it and moves on, None inserts a size-1 dim. The result is a
// view of the input; assignment writes through such a view.
#include "runtime/ops_kernels.h"
#include "runtime/strided.h"
#include "runtime/tensor_index.h"

namespace kiln::runtime {
namespace {

[[noreturn]] void bad_index(const Value& k) {
  throw_error(ErrorKind::TypeError, std::string("only integers, slices, None and tuples of those are valid tensor "
                                                "indices, not ") +
                                        kind_name(k.kind()));
}

std::optional<int64_t> slice_bound(const Value& v) {
  if (v.is_none()) return std::nullopt;
  if (!v.is(Kind::Int) && !v.is(Kind::Bool))
    throw_error(ErrorKind::TypeError,
                std::string("slice indices must be integers or None, not ") + kind_name(v.kind()));
  return v.as_int();
}

Tensor apply(const Tensor& t, const ViewGeom& g) { return t.as_strided(g.sizes, g.strides, g.offset); }

Tensor index_view(const Tensor& t, const Value& key) {
  const std::vector<Value> single{key};
  const std::vector<Value>& items = key.is(Kind::Tuple) ? key.as<TupleObj>()->items : single;
  int64_t consumed = 0;  // input dims an int or slice refers to
  for (const Value& k : items) {
    if (k.is(Kind::Int) || k.is(Kind::Slice)) ++consumed;
    else if (!k.is_none()) bad_index(k);
  }
  if (consumed > t.dim()) {
    if (t.dim() == 0)
      throw_error(ErrorKind::IndexError, "invalid index of a 0-dim tensor. Use `tensor.item()` to convert a 0-dim "
                                         "tensor to a number");
    throw_error(ErrorKind::IndexError, "too many indices for tensor of dimension " + std::to_string(t.dim()));
  }
  Tensor v = t;
  int64_t dim = 0;  // the dim of `v` the next key applies to
  for (const Value& k : items) {
    if (k.is(Kind::Int)) {
      v = apply(v, select_geom("index", v, dim, k.as_int()));
    } else if (k.is(Kind::Slice)) {
      const auto* s = k.as<SliceObj>();
      const std::optional<int64_t> step = slice_bound(s->step);
      if (step && *step == 0) throw_error(ErrorKind::ValueError, "slice step cannot be zero");
      if (step && *step < 0) throw_error(ErrorKind::ValueError, "step must be greater than zero");
      v = apply(v, slice_geom("index", v, dim, slice_bound(s->start), slice_bound(s->stop), step.value_or(1)));
      ++dim;
    } else {
      v = apply(v, unsqueeze_geom("index", v, dim));
      ++dim;
    }
  }
  return v;
}

}  // namespace

Value tensor_getitem(const Tensor& t, const Value& key) { return Value::tensor(index_view(t, key)); }

void tensor_setitem(const Tensor& t, const Value& key, const Value& value) {
  const Tensor dst = index_view(t, key);
  if (value.is_number()) {
    if (value.is(Kind::Float)) fill_tensor(dst, value.as_float());
    else fill_tensor(dst, value.as_int());
    return;
  }
  if (!value.is(Kind::Tensor))
    throw_error(ErrorKind::TypeError,
                std::string("can only assign a Tensor or a number to a tensor index, not ") + kind_name(value.kind()));
  Tensor src = value.as_tensor();
  bool fits = src.dim() <= dst.dim();
  for (int64_t i = 1; fits && i <= src.dim(); ++i) {
    const int64_t have = src.sizes()[size_t(src.dim() - i)];
    fits = have == 1 || have == dst.sizes()[size_t(dst.dim() - i)];
  }
  if (!fits)
    throw_error(ErrorKind::RuntimeError, "setitem: value of shape " + shape_str(src.sizes()) +
                                             " cannot be broadcast to the indexed shape " + shape_str(dst.sizes()));
  // x[1:] = x[:-1] reads what it writes: copy the source first when the two
  // share storage (cheaper than proving the views disjoint).
  if (!src.is_meta() && !dst.is_meta() && src.impl()->storage.get() == dst.impl()->storage.get())
    src = src.clone();
  copy_into(dst, src);
}

}  // namespace kiln::runtime

// Tensor subscripting with torch's semantics (torch/csrc/autograd/
// python_variable_indexing.cpp and ATen's TensorIndexing are the reference).
//
// A key is normalized first (normalize_index): Ellipsis expanded, Python
// bools and lists turned into index tensors, 0-d int tensors into ints. Then
// it is applied left to right over a view: an int selects (and removes) the
// current dim, a slice narrows it, None inserts a size-1 dim, an index
// tensor is recorded against the current dim (a k-dim bool mask against k
// dims). The recorded tensors then gather from the view (index_tensor, aten's
// `index`). Errors carry torch's exception types and words.
#include <algorithm>

#include "runtime/tensor/tensor_index.h"

#include "runtime/semantics/builtins.h"
#include "runtime/semantics/census.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {


namespace {

// An int32 index tensor as the int64 one the indexing code reads (torch
// takes both: "long, int, byte or bool").
Tensor as_long_index(const Tensor& t) { return t.defined() && t.dtype() == DType::Int32 ? t.to(DType::Int64) : t; }

// torch's names for dtypes in its messages ("got Float for the destination").
const char* torch_scalar_name(DType d) {
  switch (d) {
    case DType::Bool: return "Bool";
    case DType::Int32: return "Int";
    case DType::Int64: return "Long";
    case DType::Float32: return "Float";
    case DType::Float64: return "Double";
  }
  return "?";
}

[[noreturn]] void bad_index(const Value& k) {
  throw_error(ErrorKind::IndexError, std::string("only integers, slices (`:`), ellipsis (`...`), None and long or "
                                                 "byte Variables are valid indices (got ") +
                                         kind_name(k.kind()) + ")");
}

std::optional<int64_t> slice_bound(const Value& v) {
  if (v.is_none()) return std::nullopt;
  // A one-element int tensor is an index (torch's __index__); the tracer's
  // meta tensors have no value, so a traced x[:n] with a tensor n breaks.
  if (v.is(Kind::Tensor) && !v.as_tensor().is_meta() && v.as_tensor().dtype() == DType::Int64 &&
      v.as_tensor().numel() == 1)
    return int64_t(v.as_tensor().item());
  if (!v.is(Kind::Int) && !v.is(Kind::Bool))
    throw_error(ErrorKind::TypeError,
                "slice indices must be integers or None or have an __index__ method");
  return v.as_int();
}

// A (nested) list of ints or bools as an int64 or bool tensor, as torch
// makes one from a Python sequence used as an index.
void flatten_seq(const Value& v, size_t depth, Shape& sizes, std::vector<Value>& out) {
  const bool seq = v.is(Kind::List) || v.is(Kind::Tuple);
  if (!seq) {
    if (depth != sizes.size()) throw_error(ErrorKind::ValueError, "expected a sequence of equal-length sequences");
    if (!v.is(Kind::Int) && !v.is(Kind::Bool))
      throw_error(ErrorKind::IndexError, "tensors used as indices must be long, int, byte or bool tensors");
    out.push_back(v);
    return;
  }
  const auto& items = v.is(Kind::List) ? v.as<ListObj>()->items : v.as<TupleObj>()->items;
  if (depth == sizes.size()) {
    if (!out.empty()) throw_error(ErrorKind::ValueError, "expected a sequence of equal-length sequences");
    sizes.push_back(int64_t(items.size()));
  } else if (depth > sizes.size() || sizes[depth] != int64_t(items.size())) {
    throw_error(ErrorKind::ValueError, "expected a sequence of equal-length sequences");
  }
  for (const Value& x : items) flatten_seq(x, depth + 1, sizes, out);
}

Tensor seq_to_index(const Value& v) {
  Shape sizes;
  std::vector<Value> flat;
  flatten_seq(v, 0, sizes, flat);
  const bool all_bool = !flat.empty() && std::all_of(flat.begin(), flat.end(), [](const Value& x) { return x.is(Kind::Bool); });
  Tensor t = Tensor::empty(sizes, all_bool ? DType::Bool : DType::Int64);
  for (size_t i = 0; i < flat.size(); ++i) {
    if (all_bool) t.data<bool>()[i] = flat[i].as_bool();
    else t.data<int64_t>()[i] = flat[i].as_int();
  }
  return t;
}

// torch's treatSequenceAsTuple: a list key (not a tuple) shorter than 32
// holding a tensor, a sequence, a slice, None or Ellipsis is read as a tuple
// of indices (deprecated in torch, still its behaviour).
bool list_as_tuple(const Value& key) {
  const auto& items = key.as<ListObj>()->items;
  if (items.size() >= 32) return false;
  for (const Value& x : items)
    if (x.is(Kind::Tensor) || x.is(Kind::List) || x.is(Kind::Tuple) || x.is(Kind::Slice) || x.is_none() ||
        is_ellipsis(x))
      return true;
  return false;
}

bool is_mask(const Tensor& t) { return t.dtype() == DType::Bool; }

[[noreturn]] void out_of_bounds(int64_t i, int64_t dim, int64_t size) {
  throw_error(ErrorKind::IndexError, "index " + std::to_string(i) + " is out of bounds for dimension " +
                                         std::to_string(dim) + " with size " + std::to_string(size));
}

Tensor apply(const Tensor& t, const ViewGeom& g) { return t.as_strided(g.sizes, g.strides, g.offset); }

// The view after the basic part of a key, and the index tensors recorded
// per dim of that view (undefined: not indexed).
struct Applied {
  Tensor view;
  std::vector<Tensor> adv;
  bool has_adv = false;
};

Applied apply_key(const Tensor& t, const Value& key) {
  const std::vector<IndexPart> parts = normalize_index(t.dim(), key);
  Applied a;
  Tensor v = t;
  std::vector<std::pair<int64_t, Tensor>> recorded;
  int64_t dim = 0;
  int64_t orig = 0;  // the dim of t the next part consumes (torch's messages name it)
  for (const IndexPart& p : parts) {
    switch (p.k) {
      case IndexPart::K::Int: {
        const int64_t n = v.sizes()[size_t(dim)];
        const int64_t i = p.v.as_int();
        if (i < -n || i >= n) out_of_bounds(i, orig, n);
        v = apply(v, select_geom("index", v, dim, i));
        ++orig;
        break;
      }
      case IndexPart::K::Slice: {
        const auto* s = p.v.as<SliceObj>();
        v = apply(v, slice_geom("index", v, dim, slice_bound(s->start), slice_bound(s->stop),
                                slice_bound(s->step).value_or(1)));
        ++dim;
        ++orig;
        break;
      }
      case IndexPart::K::None:
        v = apply(v, unsqueeze_geom("index", v, dim));
        ++dim;
        break;
      case IndexPart::K::Tensor: {
        const Tensor idx = p.v.as_tensor();
        if (p.on_new_axis) {
          recorded.emplace_back(dim - 1, idx);
          break;
        }
        if (is_mask(idx)) {
          // Its shape is checked against the final view (check_masks), as
          // torch does after all basic parts.
          recorded.emplace_back(dim, idx);
          dim += idx.dim();
          orig += idx.dim();
        } else {
          recorded.emplace_back(dim, idx);
          ++dim;
          ++orig;
        }
        break;
      }
    }
  }
  a.view = v;
  a.has_adv = !recorded.empty();
  for (auto& [d, idx] : recorded) {
    if (a.adv.size() < size_t(d) + 1) a.adv.resize(size_t(d) + 1);
    a.adv[size_t(d)] = idx;
  }
  return a;
}

// A bool mask over dims [d, d + k) as k int64 index tensors (nonzero).
std::vector<Tensor> mask_to_indices(const Tensor& mask) {
  if (mask.is_meta())
    throw_error(ErrorKind::RuntimeError, "indexing with a bool mask has a data-dependent result shape");
  const Tensor m = mask.contiguous();
  const bool* p = m.data<bool>();
  int64_t count = 0;
  for (int64_t i = 0; i < m.numel(); ++i) count += p[i];
  const int64_t k = std::max<int64_t>(m.dim(), 1);
  std::vector<Tensor> out;
  for (int64_t j = 0; j < k; ++j) out.push_back(Tensor::uninitialized({count}, DType::Int64));
  int64_t w = 0;
  const Shape st = contiguous_strides(m.sizes());
  for (int64_t i = 0; i < m.numel(); ++i) {
    if (!p[i]) continue;
    int64_t rest = i;
    for (int64_t j = 0; j < m.dim(); ++j) {
      out[size_t(j)].data<int64_t>()[w] = rest / st[size_t(j)];
      rest %= st[size_t(j)];
    }
    if (m.dim() == 0) out[0].data<int64_t>()[w] = 0;
    ++w;
  }
  return out;
}

// A mask over dims [d, d + k) of v must have exactly their sizes.
void check_mask(const Tensor& v, const Tensor& mask, size_t d) {
  if (d + size_t(mask.dim()) > size_t(v.dim()))
    throw_error(ErrorKind::IndexError, "too many indices for tensor of dimension " + std::to_string(v.dim()));
  for (int64_t j = 0; j < mask.dim(); ++j)
    if (mask.sizes()[size_t(j)] != v.sizes()[d + size_t(j)])
      throw_error(ErrorKind::IndexError, "The shape of the mask " + shape_str(mask.sizes()) + " at index " +
                                             std::to_string(j) + " does not match the shape of the indexed tensor " +
                                             shape_str(v.sizes()) + " at index " + std::to_string(d + size_t(j)));
}

// The advanced part of an index over `v`: result shape, and (for real
// tensors) the element offset into v of every result element, row-major.
struct Gather {
  Shape shape;
  std::vector<int64_t> offsets;
};

Gather plan_gather(const Tensor& v, const std::vector<Tensor>& indices0) {
  // Masks expand to one index tensor per masked dim.
  std::vector<Tensor> idx(size_t(v.dim()));
  for (size_t d = 0; d < indices0.size(); ++d) {
    const Tensor t = as_long_index(indices0[d]);
    if (!t.defined()) continue;
    if (t.dtype() != DType::Int64 && t.dtype() != DType::Bool)
      throw_error(ErrorKind::IndexError, "tensors used as indices must be long, int, byte or bool tensors");
    if (is_mask(t)) {
      check_mask(v, t, d);
      if (t.dim() == 0)
        throw_error(ErrorKind::IndexError, "a 0-d bool index is only valid in a subscript (x[True])");
      std::vector<Tensor> parts = mask_to_indices(t);
      for (size_t j = 0; j < parts.size(); ++j) idx[d + j] = parts[j];
    } else {
      if (d >= size_t(v.dim()))
        throw_error(ErrorKind::IndexError, "too many indices for tensor of dimension " + std::to_string(v.dim()));
      idx[d] = t;
    }
  }
  std::vector<size_t> dims;
  for (size_t d = 0; d < idx.size(); ++d)
    if (idx[d].defined()) dims.push_back(d);
  Gather g;
  if (dims.empty()) {
    g.shape = v.sizes();
    return g;
  }
  // Broadcast the index shapes (torch's message when they do not).
  Shape b = idx[dims[0]].sizes();
  for (size_t k = 1; k < dims.size(); ++k) {
    const Shape& s = idx[dims[k]].sizes();
    Shape r(std::max(b.size(), s.size()), 1);
    bool ok = true;
    for (size_t i = 0; i < r.size(); ++i) {
      const int64_t x = i < r.size() - b.size() ? 1 : b[i - (r.size() - b.size())];
      const int64_t y = i < r.size() - s.size() ? 1 : s[i - (r.size() - s.size())];
      if (x != y && x != 1 && y != 1) ok = false;
      r[i] = x == 1 ? y : x;
    }
    if (!ok) {
      std::string shapes;
      for (size_t j = 0; j < dims.size(); ++j) shapes += (j ? ", " : "") + shape_str(idx[dims[j]].sizes());
      throw_error(ErrorKind::IndexError, "shape mismatch: indexing tensors could not be broadcast together with shapes " +
                                             shapes);
    }
    b = r;
  }
  const bool adjacent = dims.back() - dims.front() + 1 == dims.size();
  // Result dims: (size, stride in v, stride in the flattened broadcast index).
  struct RDim { int64_t size, vstride, bstride; };
  std::vector<RDim> rd;
  const Shape bst = contiguous_strides(b);
  auto push_b = [&] {
    for (size_t i = 0; i < b.size(); ++i) rd.push_back({b[i], 0, bst[i]});
  };
  if (!adjacent) push_b();
  for (size_t d = 0; d < size_t(v.dim()); ++d) {
    if (idx[d].defined()) {
      if (adjacent && d == dims.front()) push_b();
      continue;
    }
    rd.push_back({v.sizes()[d], v.strides()[d], 0});
  }
  for (const RDim& r : rd) g.shape.push_back(r.size);
  // torch checks an index only when it reads through it: an empty result
  // (x[:0, [99]]) raises nothing.
  if (v.is_meta() || shape_numel(g.shape) == 0) return g;
  // The v-offset of each broadcast index position.
  const int64_t nb = shape_numel(b);
  std::vector<int64_t> boff(size_t(nb), v.offset());
  for (size_t k = 0; k < dims.size(); ++k) {
    const size_t d = dims[k];
    const Tensor& t = idx[d];
    const Shape tst = broadcast_strides(t, b);
    const int64_t* data = static_cast<const int64_t*>(t.impl()->storage->data);
    const int64_t size = v.sizes()[d], stride = v.strides()[d];
    for (int64_t lin = 0; lin < nb; ++lin) {
      int64_t rest = lin, off = t.offset();
      for (size_t i = 0; i < b.size(); ++i) {
        off += (rest / bst[i]) * tst[i];
        rest %= bst[i];
      }
      int64_t x = data[off];
      // torch names the index tensor's position among the index tensors
      if (x < -size || x >= size) out_of_bounds(x, int64_t(k), size);
      if (x < 0) x += size;
      boff[size_t(lin)] += x * stride;
    }
  }
  const int64_t n = shape_numel(g.shape);
  g.offsets.resize(size_t(n));
  std::vector<int64_t> ctr(rd.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0, bl = 0;
    for (size_t i = 0; i < rd.size(); ++i) {
      off += ctr[i] * rd[i].vstride;
      bl += ctr[i] * rd[i].bstride;
    }
    g.offsets[size_t(e)] = boff[size_t(bl)] + off;
    for (size_t i = rd.size(); i-- > 0;) {
      if (++ctr[i] < rd[i].size) break;
      ctr[i] = 0;
    }
  }
  return g;
}

// Python bools and 0-d bool tensors index a new size-1 dim: unsqueeze, then
// index it with [0] (True) or [] (False), as torch does.
Tensor bool_scalar_index(bool b) {
  Tensor t = Tensor::empty({b ? 1 : 0}, DType::Int64);
  return t;
}

// Drops the value's leading size-1 dims beyond the target's rank (torch's
// slicePrefix1sDims): x[0] = ones(1, n) works.
Tensor strip_leading_ones(Tensor v, size_t rank) {
  while (size_t(v.dim()) > rank && v.sizes()[0] == 1) {
    Shape s(v.sizes().begin() + 1, v.sizes().end()), st(v.strides().begin() + 1, v.strides().end());
    v = v.as_strided(s, st, v.offset());
  }
  return v;
}

// torch's expand error, as copy_ raises it.
void check_expandable(const Tensor& src, const Shape& target) {
  if (src.dim() > int64_t(target.size()))
    throw_error(ErrorKind::RuntimeError, "expand: the number of sizes provided (" + std::to_string(target.size()) +
                                             ") must be greater or equal to the number of dimensions in the tensor (" +
                                             std::to_string(src.dim()) + ")");
  for (int64_t i = 1; i <= src.dim(); ++i) {
    const int64_t have = src.sizes()[size_t(src.dim() - i)], want = target[target.size() - size_t(i)];
    if (have != 1 && have != want)
      throw_error(ErrorKind::RuntimeError,
                  "The expanded size of the tensor (" + std::to_string(want) + ") must match the existing size (" +
                      std::to_string(have) + ") at non-singleton dimension " +
                      std::to_string(int64_t(target.size()) - i) + ".  Target sizes: " + shape_str(target) +
                      ".  Tensor sizes: " + shape_str(src.sizes()));
  }
}

}  // namespace

std::vector<Tensor> mask_indices(const Tensor& mask) { return mask_to_indices(mask); }

std::vector<IndexPart> normalize_index(int64_t ndim, const Value& key) {
  std::vector<Value> items;
  if (key.is(Kind::Tuple)) items = key.as<TupleObj>()->items;
  else if (key.is(Kind::List) && list_as_tuple(key)) items = key.as<ListObj>()->items;
  else items = {key};
  // Each item as a part; Ellipsis kept as a marker until the count is known.
  std::vector<IndexPart> parts;
  std::vector<size_t> ellipses;
  int64_t consumed = 0;
  for (const Value& k : items) {
    if (k.is(Kind::Bool)) {
      parts.push_back({IndexPart::K::None, Value::none()});
      parts.push_back({IndexPart::K::Tensor, Value::tensor(bool_scalar_index(k.as_bool())), true});
      continue;
    }
    if (k.is(Kind::Int)) {
      parts.push_back({IndexPart::K::Int, k});
      ++consumed;
    } else if (k.is(Kind::Slice)) {
      const auto* s = k.as<SliceObj>();
      slice_bound(s->start);
      slice_bound(s->stop);
      const std::optional<int64_t> step = slice_bound(s->step);
      if (step && *step == 0) throw_error(ErrorKind::ValueError, "slice step cannot be zero");
      if (step && *step < 0) throw_error(ErrorKind::ValueError, "step must be greater than zero");
      parts.push_back({IndexPart::K::Slice, k});
      ++consumed;
    } else if (k.is_none()) {
      parts.push_back({IndexPart::K::None, k});
    } else if (is_ellipsis(k)) {
      ellipses.push_back(parts.size());
      parts.push_back({IndexPart::K::None, k});  // placeholder, replaced below
    } else if (k.is(Kind::Tensor)) {
      const Tensor t = as_long_index(k.as_tensor());
      if (t.dtype() != DType::Int64 && t.dtype() != DType::Bool)
        throw_error(ErrorKind::IndexError, "tensors used as indices must be long, int, byte or bool tensors");
      if (t.dim() == 0 && !t.is_meta()) {
        // A 0-d int tensor selects (a view, as in torch); a 0-d bool one is a Python bool.
        if (t.dtype() == DType::Int64) {
          parts.push_back({IndexPart::K::Int, Value::integer(int64_t(t.item()))});
          ++consumed;
        } else {
          parts.push_back({IndexPart::K::None, Value::none()});
          parts.push_back({IndexPart::K::Tensor, Value::tensor(bool_scalar_index(t.item() != 0)), true});
        }
        continue;
      }
      if (t.dim() == 0 && t.dtype() == DType::Bool) {
        // Meta 0-d bool: its value decides the size; the tracer breaks before this.
        throw_error(ErrorKind::RuntimeError, "indexing with a 0-d bool tensor has a data-dependent result shape");
      }
      parts.push_back({IndexPart::K::Tensor, Value::tensor(t)});
      consumed += t.dtype() == DType::Bool ? t.dim() : 1;
    } else if (k.is(Kind::List) || k.is(Kind::Tuple)) {
      Tensor t = seq_to_index(k);
      parts.push_back({IndexPart::K::Tensor, Value::tensor(t)});
      consumed += t.dtype() == DType::Bool ? t.dim() : 1;
    } else {
      bad_index(k);
    }
  }
  if (consumed > ndim) {
    if (ndim == 0)
      throw_error(ErrorKind::IndexError, "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                                         "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number");
    throw_error(ErrorKind::IndexError, "too many indices for tensor of dimension " + std::to_string(ndim));
  }
  // Ellipsis: as many full slices as the dims no other item consumes (torch
  // applies this per Ellipsis).
  std::vector<IndexPart> out;
  size_t e = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (e < ellipses.size() && ellipses[e] == i) {
      ++e;
      for (int64_t j = 0; j < ndim - consumed; ++j)
        out.push_back({IndexPart::K::Slice, make_slice(Value::none(), Value::none(), Value::none())});
      continue;
    }
    out.push_back(parts[i]);
  }
  return out;
}

Tensor index_tensor(const Tensor& t, const std::vector<Tensor>& indices) {
  // A 0-d bool index (from a Python bool) is already an int64 [0] or [] here.
  Gather g = plan_gather(t, indices);
  if (t.is_meta()) return Tensor::meta(g.shape, t.dtype());
  Tensor out = Tensor::uninitialized(g.shape, t.dtype());
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(t.impl()->storage->data);
    T* dst = out.data<T>();
    for (size_t i = 0; i < g.offsets.size(); ++i) dst[i] = src[g.offsets[i]];
  });
  return out;
}

Value tensor_getitem(const Tensor& t, const Value& key) {
  Applied a = apply_key(t, key);
  if (!a.has_adv) return Value::tensor(a.view);
  return Value::tensor(index_tensor(a.view, a.adv));
}

static void index_put_into(const Tensor& t, const Applied& a, const Value& value);

void tensor_setitem(const Tensor& t, const Value& key, const Value& value) {
  if (!value.is_number() && !value.is(Kind::Tensor))
    throw_error(ErrorKind::TypeError,
                std::string("can't assign a ") + kind_name(value.kind()) + " to a " + dtype_name(t.dtype()) + " tensor");
  Applied a = apply_key(t, key);
  if (!a.has_adv) {
    const Tensor& dst = a.view;
    if (value.is_number()) {
      if (dst.is_meta()) return;
      if (value.is(Kind::Float)) fill_tensor(dst, value.as_float());
      else fill_tensor(dst, value.as_int());
      return;
    }
    Tensor src = strip_leading_ones(value.as_tensor(), size_t(dst.dim()));
    check_expandable(src, dst.sizes());
    if (dst.is_meta() || src.is_meta()) return;
    // x[1:] = x[:-1] reads what it writes: copy the source first when the
    // two share storage (cheaper than proving the views disjoint).
    if (src.impl()->storage.get() == dst.impl()->storage.get()) src = src.clone();
    copy_into(dst, src);
    return;
  }
  // One bool mask and a one-element value: torch's index_put_ dispatches
  // to masked_fill_ with the value's item (any dtype: it is a number then).
  Value val = value;
  if (value.is(Kind::Tensor) && value.as_tensor().numel() == 1) {
    int defined = 0, masks = 0;
    for (const Tensor& i : a.adv)
      if (i.defined()) {
        ++defined;
        masks += is_mask(i);
      }
    if (defined == 1 && masks == 1) {
      const Tensor& v = value.as_tensor();
      if (v.is_meta()) {
        if (t.is_meta()) {
          for (size_t d = 0; d < a.adv.size(); ++d)
            if (a.adv[d].defined()) check_mask(a.view, a.adv[d], d);
          return;
        }
      } else {
        val = v.dtype() == DType::Float32 || v.dtype() == DType::Float64 ? Value::floating(v.item())
              : v.dtype() == DType::Bool                                 ? Value::boolean(v.item() != 0)
                                                                         : Value::integer(int64_t(v.item()));
      }
    }
  }
  return index_put_into(t, a, val);
}

// The advanced half of tensor_setitem (after apply_key).
static void index_put_into(const Tensor& t, const Applied& a, const Value& value) {
  // index_put: torch requires a tensor value of the destination's dtype.
  if (value.is(Kind::Tensor) && value.as_tensor().dtype() != t.dtype())
    throw_error(ErrorKind::RuntimeError, std::string("Index put requires the source and destination dtypes match, got ") +
                                             torch_scalar_name(t.dtype()) + " for the destination and " +
                                             torch_scalar_name(value.as_tensor().dtype()) + " for the source.");
  if (t.is_meta()) {  // a mask's count is data: only its shape can be checked
    bool masked = false;
    for (size_t d = 0; d < a.adv.size(); ++d)
      if (a.adv[d].defined() && is_mask(a.adv[d])) {
        check_mask(a.view, a.adv[d], d);
        masked = true;
      }
    if (masked) return;
  }
  Gather g = plan_gather(a.view, a.adv);
  Tensor src;
  if (value.is(Kind::Tensor)) {
    src = strip_leading_ones(value.as_tensor(), g.shape.size());
    bool fits = src.dim() <= int64_t(g.shape.size());
    for (int64_t i = 1; fits && i <= src.dim(); ++i) {
      const int64_t have = src.sizes()[size_t(src.dim() - i)];
      fits = have == 1 || have == g.shape[g.shape.size() - size_t(i)];
    }
    if (!fits)
      throw_error(ErrorKind::RuntimeError, "shape mismatch: value tensor of shape " +
                                               shape_str(value.as_tensor().sizes()) +
                                               " cannot be broadcast to indexing result of shape " + shape_str(g.shape));
    if (t.is_meta() || src.is_meta()) return;
    // A contiguous copy in index order: the value may alias t.
    src = src.as_strided(g.shape, broadcast_strides(src, g.shape), src.offset()).clone();
  } else {
    if (t.is_meta()) return;
    src = Tensor::empty({}, t.dtype());
    if (value.is(Kind::Float)) fill_tensor(src, value.as_float());
    else fill_tensor(src, value.as_int());
  }
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dst = static_cast<T*>(a.view.impl()->storage->data);
    const T* s = src.data<T>();
    const bool scalar = src.dim() == 0;
    for (size_t i = 0; i < g.offsets.size(); ++i) dst[g.offsets[i]] = scalar ? s[0] : s[i];
  });
}

// ----- the `index` and `setitem` ops ------------------------------------------

static std::vector<Tensor> index_list(const OpArgs& args) {
  const Value& v = args[1];
  if (!v.is(Kind::Tuple) && !v.is(Kind::List))
    throw_error(ErrorKind::TypeError, "index(): argument 'indices' must be a tuple of tensors or None, not " +
                                          std::string(kind_name(v.kind())));
  std::vector<Tensor> out;
  for (const Value& x : v.is(Kind::Tuple) ? v.as<TupleObj>()->items : v.as<ListObj>()->items) {
    if (x.is_none()) out.emplace_back();
    else if (x.is(Kind::Tensor)) out.push_back(x.as_tensor());
    else
      throw_error(ErrorKind::TypeError, "index(): indices must be tensors or None, not " + std::string(kind_name(x.kind())));
  }
  if (int64_t(out.size()) > args.tensor(0).dim())
    throw_error(ErrorKind::IndexError, "too many indices for tensor of dimension " + std::to_string(args.tensor(0).dim()));
  return out;
}

Tensor index_shape(const OpArgs& args) { return index_tensor(args.tensor(0), index_list(args)); }
Value index_eager(const OpArgs& args) { return Value::tensor(index_tensor(args.tensor(0), index_list(args))); }

Tensor setitem_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  tensor_setitem(t, args[1], args[2]);  // checks shapes and dtypes; writes nothing on a meta tensor
  return Tensor::meta(t.sizes(), t.dtype());
}
Value setitem_eager(const OpArgs& args) {
  Tensor out = args.tensor(0).clone();
  tensor_setitem(out, args[1], args[2]);
  return Value::tensor(out);
}

}  // namespace kiln::runtime

// View ops. Each shape rule computes the view's sizes, strides and offset
// on metadata alone (so it runs on meta tensors for the tracer), and the
// eager kernel applies that geometry to the real input with as_strided:
// the result shares the input's storage. reshape/flatten copy only when no
// strides can express the new shape.
#include <algorithm>

#include "runtime/tensor/ops_kernels.h"

namespace kiln::runtime {
namespace {

Tensor meta_of(const Tensor& t, const ViewGeom& g) { return meta_view(t.dtype(), g.sizes, g.strides, g.offset); }

// The target shape of reshape/view: at most one -1, inferred from numel.
Shape infer_shape(const char* op, const Tensor& t, std::vector<int64_t> shape) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw_error(ErrorKind::RuntimeError, std::string(op) + ": only one dimension can be inferred");
      infer = int(i);
    } else if (shape[i] < 0) {
      throw_error(ErrorKind::RuntimeError,
                  std::string(op) + ": invalid shape dimension " + std::to_string(shape[i]) + " in " + shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  const int64_t numel = t.numel();
  if (infer >= 0 && known != 0 && numel % known == 0) shape[size_t(infer)] = numel / known;
  if ((infer >= 0 && shape[size_t(infer)] == -1) || shape_numel(shape) != numel)
    throw_error(ErrorKind::RuntimeError, std::string(op) + ": shape " + shape_str(shape) +
                                             " is invalid for input of size " + std::to_string(numel));
  return shape;
}

// flatten's target shape.
Shape flatten_sizes(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  if (t.dim() == 0) return {1};  // torch: flattening a scalar gives one element
  const int64_t s = wrap_dim("flatten", args.integer(1), t.dim());
  const int64_t e = wrap_dim("flatten", args.integer(2), t.dim());
  if (s > e)
    throw_error(ErrorKind::RuntimeError, "flatten: start_dim " + std::to_string(s) + " cannot come after end_dim " +
                                             std::to_string(e));
  Shape out(t.sizes().begin(), t.sizes().begin() + s);
  int64_t mid = 1;
  for (int64_t d = s; d <= e; ++d) mid *= t.sizes()[size_t(d)];
  out.push_back(mid);
  out.insert(out.end(), t.sizes().begin() + e + 1, t.sizes().end());
  return out;
}

// The target shape of a reshape-like op (reshape, view, flatten).
Shape reshape_target(const OpArgs& args) {
  if (args.op->id == OpId::flatten) return flatten_sizes(args);
  return infer_shape(args.op->name, args.tensor(0), args.int_list(1));
}

// Meta result of a reshape-like op: a view when possible, else the
// contiguous copy's layout.
Tensor reshape_meta(const OpArgs& args, bool must_view) {
  const Tensor t = args.tensor(0);
  const Shape sizes = reshape_target(args);
  if (auto st = view_strides(t, sizes)) return meta_view(t.dtype(), sizes, *st, t.offset());
  if (must_view)
    throw_error(ErrorKind::RuntimeError, std::string(args.op->name) + ": shape " + shape_str(sizes) +
                                             " is not compatible with input shape " + shape_str(t.sizes()) +
                                             " and strides " + shape_str(t.strides()) +
                                             " without a copy (use reshape)");
  return Tensor::meta(sizes, t.dtype());
}

}  // namespace

// torch's computeStride: walks the old dims from the innermost, grouping
// them into chunks that are contiguous with one another; each chunk must be
// covered exactly by a run of new dims.
std::optional<Shape> view_strides(const Tensor& t, const Shape& sizes) {
  const Shape& old_sizes = t.sizes();
  const Shape& old_strides = t.strides();
  Shape st(sizes.size(), 0);
  if (old_sizes.empty() || t.numel() == 0) return contiguous_strides(sizes);
  int64_t view_d = int64_t(sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[size_t(d)];
    if (d == 0 || (old_sizes[size_t(d - 1)] != 1 && old_strides[size_t(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || sizes[size_t(view_d)] == 1)) {
        st[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= sizes[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[size_t(d - 1)];
        tensor_numel = view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

ViewGeom select_geom(const char* op, const Tensor& t, int64_t dim, int64_t index) {
  const int64_t d = wrap_dim(op, dim, t.dim());
  const int64_t n = t.sizes()[size_t(d)];
  if (index < -n || index >= n)
    throw_error(ErrorKind::IndexError, std::string(op) + ": index " + std::to_string(index) +
                                           " is out of range for dimension " + std::to_string(d) + " of size " +
                                           std::to_string(n));
  if (index < 0) index += n;
  ViewGeom g{t.sizes(), t.strides(), t.offset() + index * t.strides()[size_t(d)]};
  g.sizes.erase(g.sizes.begin() + d);
  g.strides.erase(g.strides.begin() + d);
  return g;
}

ViewGeom slice_geom(const char* op, const Tensor& t, int64_t dim, std::optional<int64_t> start,
                    std::optional<int64_t> end, int64_t step) {
  const int64_t d = wrap_dim(op, dim, t.dim());
  if (step <= 0)
    throw_error(ErrorKind::ValueError, std::string(op) + ": slice step must be positive, got " + std::to_string(step));
  const int64_t n = t.sizes()[size_t(d)];
  // Python's slice.indices for a positive step: negative bounds count from
  // the end, then everything is clamped to [0, n].
  auto clamp = [n](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp<int64_t>(x, 0, n);
  };
  const int64_t s = clamp(start, 0);
  const int64_t e = std::max(clamp(end, n), s);
  ViewGeom g{t.sizes(), t.strides(), t.offset() + s * t.strides()[size_t(d)]};
  g.sizes[size_t(d)] = (e - s + step - 1) / step;
  g.strides[size_t(d)] *= step;
  return g;
}

ViewGeom unsqueeze_geom(const char* op, const Tensor& t, int64_t dim) {
  const int64_t n = t.dim();
  if (dim < -n - 1 || dim > n)
    throw_error(ErrorKind::IndexError, std::string(op) + ": dim " + std::to_string(dim) +
                                           " is out of range for inserting into a tensor of rank " + std::to_string(n) +
                                           " (expected " + std::to_string(-n - 1) + " to " + std::to_string(n) + ")");
  const int64_t d = dim < 0 ? dim + n + 1 : dim;
  ViewGeom g{t.sizes(), t.strides(), t.offset()};
  // Any stride works for a size-1 dim; torch's choice keeps contiguity visible.
  const int64_t st = d < t.dim() ? t.sizes()[size_t(d)] * t.strides()[size_t(d)] : 1;
  g.sizes.insert(g.sizes.begin() + d, 1);
  g.strides.insert(g.strides.begin() + d, st);
  return g;
}

// ----- shape rules ---------------------------------------------------------------

Tensor reshape_shape(const OpArgs& args) { return reshape_meta(args, false); }
Tensor view_shape(const OpArgs& args) { return reshape_meta(args, true); }
Tensor flatten_shape(const OpArgs& args) { return reshape_meta(args, false); }

Tensor transpose_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  // A 0-d tensor takes dims 0 and -1, as torch's (a scalar wraps dims as
  // one dimension), and stays itself.
  const int64_t a = wrap_dim("transpose", args.integer(1), std::max<int64_t>(t.dim(), 1));
  const int64_t b = wrap_dim("transpose", args.integer(2), std::max<int64_t>(t.dim(), 1));
  ViewGeom g{t.sizes(), t.strides(), t.offset()};
  if (t.dim() == 0) return meta_of(t, g);
  std::swap(g.sizes[size_t(a)], g.sizes[size_t(b)]);
  std::swap(g.strides[size_t(a)], g.strides[size_t(b)]);
  return meta_of(t, g);
}

Tensor permute_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  const std::vector<int64_t> dims = args.int_list(1);
  if (int64_t(dims.size()) != t.dim())
    throw_error(ErrorKind::RuntimeError, "permute: dims " + shape_str(dims) + " do not match a tensor of rank " +
                                             std::to_string(t.dim()));
  ViewGeom g;
  std::vector<bool> seen(dims.size(), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim("permute", d, t.dim());
    if (seen[size_t(w)])
      throw_error(ErrorKind::RuntimeError, "permute: dims " + shape_str(dims) + " are not a permutation (dim " +
                                               std::to_string(w) + " repeats)");
    seen[size_t(w)] = true;
    g.sizes.push_back(t.sizes()[size_t(w)]);
    g.strides.push_back(t.strides()[size_t(w)]);
  }
  g.offset = t.offset();
  return meta_of(t, g);
}

Tensor expand_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  const std::vector<int64_t> size = args.int_list(1);
  const std::string where = "; target shape " + shape_str(size) + ", input shape " + shape_str(t.sizes());
  if (size.size() < t.sizes().size())
    throw_error(ErrorKind::RuntimeError, "expand: the number of sizes (" + std::to_string(size.size()) +
                                             ") must be at least the tensor's rank (" + std::to_string(t.dim()) +
                                             ")" + where);
  const size_t lead = size.size() - t.sizes().size();
  ViewGeom g{Shape(size.size()), Shape(size.size(), 0), t.offset()};
  for (size_t i = 0; i < size.size(); ++i) {
    if (i < lead) {  // new leading dims: every row reads the same data
      if (size[i] < 0)
        throw_error(ErrorKind::RuntimeError,
                    "expand: the size " + std::to_string(size[i]) + " is not allowed for a new leading dimension" + where);
      g.sizes[i] = size[i];
      continue;
    }
    const int64_t have = t.sizes()[i - lead];
    const int64_t want = size[i] == -1 ? have : size[i];
    if (want == have) {
      g.sizes[i] = have;
      g.strides[i] = t.strides()[i - lead];
    } else if (have == 1 && want >= 0) {
      g.sizes[i] = want;  // stride stays 0
    } else {
      throw_error(ErrorKind::RuntimeError, "expand: the expanded size " + std::to_string(size[i]) +
                                               " must match the existing size " + std::to_string(have) +
                                               " at non-singleton dimension " + std::to_string(i) + where);
    }
  }
  return meta_of(t, g);
}

Tensor select_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  return meta_of(t, select_geom("select", t, args.integer(1), args.integer(2)));
}

Tensor slice_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  auto opt = [&](size_t i) -> std::optional<int64_t> {
    if (args.is_none(i)) return std::nullopt;
    return args.integer(i);
  };
  return meta_of(t, slice_geom("slice", t, args.integer(1), opt(2), opt(3), args.integer(4)));
}

Tensor unsqueeze_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  return meta_of(t, unsqueeze_geom("unsqueeze", t, args.integer(1)));
}

Tensor squeeze_shape(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  std::vector<bool> drop(size_t(t.dim()), args.is_none(1));
  if (!args.is_none(1))
    for (int64_t d : args.int_list(1)) drop[size_t(wrap_dim("squeeze", d, t.dim()))] = true;
  ViewGeom g;
  g.offset = t.offset();
  for (size_t i = 0; i < drop.size(); ++i) {
    if (drop[i] && t.sizes()[i] == 1) continue;  // squeezing a dim of another size is a no-op, as in torch
    g.sizes.push_back(t.sizes()[i]);
    g.strides.push_back(t.strides()[i]);
  }
  return meta_of(t, g);
}

// ----- eager kernels ---------------------------------------------------------------

Value view_from_shape_eager(const OpArgs& args) {
  const Tensor m = args.op->shape(args);
  return Value::tensor(args.tensor(0).as_strided(m.sizes(), m.strides(), m.offset()));
}

Value view_eager(const OpArgs& args) { return view_from_shape_eager(args); }

Value reshape_eager(const OpArgs& args) {
  const Tensor t = args.tensor(0);
  const Shape sizes = reshape_target(args);
  if (auto st = view_strides(t, sizes)) return Value::tensor(t.as_strided(sizes, *st, t.offset()));
  const Tensor c = t.clone();
  return Value::tensor(c.as_strided(sizes, contiguous_strides(sizes), 0));
}

}  // namespace kiln::runtime

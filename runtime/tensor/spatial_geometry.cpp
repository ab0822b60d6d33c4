#include "runtime/tensor/spatial_geometry.h"

#include "runtime/semantics/value_ops.h"
#include "runtime/value/strided.h"

namespace kiln::runtime::spatial {

// Spatial rank of a row: 1 for *1d, 2 for *2d.
int spatial_rank(const OpArgs& args) {
  const std::string n = args.op->name;
  return n.find("1d") != std::string::npos ? 1 : 2;
}

std::string join(const std::vector<int64_t>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

// An int, or a tuple/list of R ints (torch's _pair / _single).
std::vector<int64_t> spatial_arg(const OpArgs& args, size_t i, int R) {
  const std::vector<int64_t> v = args.int_list(i);
  if (args[i].is(Kind::Int) || args[i].is(Kind::Bool)) return std::vector<int64_t>(size_t(R), v[0]);
  if (v.size() == 1) return std::vector<int64_t>(size_t(R), v[0]);
  if (int(v.size()) != R)
    throw_error(ErrorKind::RuntimeError, std::string(args.op->name) + "(): " + args.param_name(i) + " must be an int or " +
                                             std::to_string(R) + " ints, got " + shape_str(v));
  return v;
}


// Reads input dims into g; the input must be (C, *spatial) or (N, C, *spatial).
void read_input(const OpArgs& args, const Tensor& x, Geometry& g) {
  const int R = g.R;
  if (x.dim() != R + 1 && x.dim() != R + 2)
    throw_error(ErrorKind::RuntimeError, "Expected " + std::to_string(R + 1) + "D (unbatched) or " +
                                             std::to_string(R + 2) + "D (batched) input to " + args.op->name +
                                             ", but got input of size: " + shape_str(x.sizes()));
  g.batched = x.dim() == R + 2;
  const size_t b = g.batched ? 1 : 0;
  g.N = g.batched ? x.sizes()[0] : 1;
  g.C = x.sizes()[b];
  g.H = R == 2 ? x.sizes()[b + 1] : 1;
  g.W = x.sizes().back();
}

// The input as a contiguous [N, C, H, W] tensor.
Tensor as_nchw(const Tensor& x, const Geometry& g, DType dt) {
  const Tensor c = x.to(dt).contiguous();  // may be x itself: a view keeps its offset
  return c.as_strided({g.N, g.C, g.H, g.W}, contiguous_strides({g.N, g.C, g.H, g.W}), c.offset());
}

void check_floating(const OpArgs& args, const Tensor& x) {
  if (!is_floating(x.dtype()))
    throw_error(ErrorKind::RuntimeError, std::string(args.op->name) + "(): expected a floating point input, got " +
                                             dtype_name(x.dtype()));
}

}  // namespace kiln::runtime::spatial

// Tensor::repr, following torch/_tensor_str.py (linewidth 80, precision 4,
// threshold 1000, edgeitems 3) so that printed tensors read the same as in
// torch; the only difference is the dtype suffix (`dtype=float64` without
// the `torch.` prefix, as kiln's dtypes are plain names).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "runtime/value/tensor.h"

namespace kiln::runtime {
namespace {

constexpr int kLineWidth = 80;
constexpr int kEdgeItems = 3;
constexpr int64_t kThreshold = 1000;

std::string printf_str(const char* fmt, int width, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, width, v);
  return buf;
}

// Python's spelling of non-finite floats (C may print "-nan").
bool nonfinite_str(double v, std::string& out) {
  if (std::isnan(v)) out = "nan";
  else if (std::isinf(v)) out = v > 0 ? "inf" : "-inf";
  else return false;
  return true;
}

std::string pad_left(std::string s, size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

// torch's _Formatter: one width for every element; floats print as
// integers ("1."), fixed ("1.2500") or scientific ("1.2500e+08") depending
// on the values being printed.
class Formatter {
 public:
  Formatter(DType dtype, const std::vector<double>& fvals, const std::vector<std::string>& ivals)
      : floating_(is_floating(dtype)) {
    if (!floating_) {
      for (const auto& s : ivals) width_ = std::max(width_, s.size());
      return;
    }
    std::vector<double> nz;
    for (double v : fvals)
      if (std::isfinite(v) && v != 0) nz.push_back(v);
    if (nz.empty()) return;
    double lo = std::abs(nz[0]), hi = lo;
    for (double v : nz) {
      lo = std::min(lo, std::abs(v));
      hi = std::max(hi, std::abs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    if (int_mode_) {
      sci_mode_ = hi / lo > 1000.0 || hi > 1.0e8;
      for (double v : nz)
        width_ = std::max(width_, sci_mode_ ? printf_str("%*.4e", 0, v).size() : printf_str("%*.0f", 0, v).size() + 1);
    } else {
      sci_mode_ = hi / lo > 1000.0 || hi > 1.0e8 || lo < 1.0e-4;
      for (double v : nz) width_ = std::max(width_, printf_str(sci_mode_ ? "%*.4e" : "%*.4f", 0, v).size());
    }
  }

  size_t width() const { return width_; }

  std::string format_float(double v) const {
    std::string s;
    if (nonfinite_str(v, s)) return pad_left(s, width_);
    if (sci_mode_) s = printf_str("%*.4e", int(width_), v);
    else if (int_mode_) s = printf_str("%*.0f", 0, v) + ".";
    else s = printf_str("%*.4f", 0, v);
    return pad_left(s, width_);
  }
  std::string format_text(const std::string& s) const { return pad_left(s, width_); }

 private:
  bool floating_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  size_t width_ = 1;
};

class Printer {
 public:
  explicit Printer(const Tensor& t) : t_(t), summarize_(t.numel() > kThreshold) {}

  std::string body(int indent) {
    std::vector<double> fvals;
    std::vector<std::string> ivals;
    collect(0, 0, fvals, ivals);
    fmt_.emplace(t_.dtype(), fvals, ivals);
    if (t_.dim() == 0) return element(0);
    return tensor_str(0, 0, indent);
  }

 private:
  // Indices of dimension d that are printed (edge items when summarising).
  std::vector<int64_t> shown(int64_t d) const {
    const int64_t n = t_.sizes()[size_t(d)];
    std::vector<int64_t> idx;
    if (summarize_ && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    }
    return idx;
  }
  bool elided(int64_t d) const { return summarize_ && t_.sizes()[size_t(d)] > 2 * kEdgeItems; }

  std::string text(int64_t off) const {
    return dispatch_dtype(t_.dtype(), [&](auto tag) -> std::string {
      using T = decltype(tag);
      const T v = t_.data<T>()[off];
      if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
      else return std::to_string(v);
    });
  }
  double value(int64_t off) const {
    return dispatch_dtype(t_.dtype(), [&](auto tag) -> double {
      using T = decltype(tag);
      return double(t_.data<T>()[off]);
    });
  }

  // The formatter sees exactly the elements that get printed.
  void collect(int64_t d, int64_t off, std::vector<double>& fvals, std::vector<std::string>& ivals) const {
    if (d == t_.dim()) {
      if (is_floating(t_.dtype())) fvals.push_back(value(off));
      else ivals.push_back(text(off));
      return;
    }
    for (int64_t i : shown(d)) collect(d + 1, off + i * t_.strides()[size_t(d)], fvals, ivals);
  }

  std::string element(int64_t off) const {
    return is_floating(t_.dtype()) ? fmt_->format_float(value(off)) : fmt_->format_text(text(off));
  }

  std::string tensor_str(int64_t d, int64_t off, int indent) const {
    const int64_t stride = t_.strides()[size_t(d)];
    const std::vector<int64_t> idx = shown(d);
    std::vector<std::string> items;
    const bool gap = elided(d);
    const bool last = d == t_.dim() - 1;
    for (size_t k = 0; k < idx.size(); ++k) {
      if (gap && k == size_t(kEdgeItems)) items.push_back(last ? " ..." : "...");
      items.push_back(last ? element(off + idx[k] * stride) : tensor_str(d + 1, off + idx[k] * stride, indent + 1));
    }
    std::string out = "[";
    if (last) {
      // Elements wrap at the line width, as torch's _vector_str does.
      const int elem_len = int(fmt_->width()) + 2;
      const int per_line = std::max(1, (kLineWidth - indent) / elem_len);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += k % size_t(per_line) == 0 ? ",\n" + std::string(size_t(indent + 1), ' ') : ", ";
        out += items[k];
      }
    } else {
      const std::string sep = "," + std::string(size_t(t_.dim() - d - 1), '\n') + std::string(size_t(indent + 1), ' ');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += sep;
        out += items[k];
      }
    }
    return out + "]";
  }

  const Tensor& t_;
  bool summarize_;
  std::optional<Formatter> fmt_;
};

std::string size_tuple(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

std::string Tensor::repr() const {
  const std::string prefix = "tensor(";
  const int indent = int(prefix.size());
  std::vector<std::string> suffixes;
  std::string body;
  // Int64 and bool values show their type by how they print; float32 is the
  // default dtype. Anything else names its dtype.
  const bool default_dtype = dtype() == kDefaultFloat || dtype() == DType::Int64 || dtype() == DType::Bool;
  const std::string dtype_suffix = std::string("dtype=") + dtype_name(dtype());
  if (is_meta()) {
    body = "...";
    suffixes.push_back("device='meta'");
    suffixes.push_back("size=" + size_tuple(sizes()));
    if (dtype() != kDefaultFloat) suffixes.push_back(dtype_suffix);
  } else if (numel() == 0) {
    body = "[]";
    if (dim() != 1) suffixes.push_back("size=" + size_tuple(sizes()));
    if (dtype() != kDefaultFloat) suffixes.push_back(dtype_suffix);
  } else {
    body = Printer(*this).body(indent);
    if (!default_dtype) suffixes.push_back(dtype_suffix);
  }
  // torch's _add_suffixes: a suffix that would pass the line width goes on
  // its own line.
  std::string out = prefix + body;
  // (Measured as torch measures it: from the body alone.)
  const size_t nl = body.rfind('\n');
  size_t last_line = body.size() - (nl == std::string::npos ? size_t(-1) : nl) + 1;
  for (const auto& s : suffixes) {
    if (last_line + s.size() + 2 > size_t(kLineWidth)) {
      out += ",\n" + std::string(size_t(indent), ' ') + s;
      last_line = size_t(indent) + s.size();
    } else {
      out += ", " + s;
      last_line += s.size() + 2;
    }
  }
  return out + ")";
}

}  // namespace kiln::runtime

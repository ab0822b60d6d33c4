// The plain-data side of kernel_ir.h: Dim arithmetic, names, the summary
// KILN_LOGS=output_code prints.
#include <algorithm>
#include <sstream>

#include "codegen/kernel_ir.h"

#include "runtime/kernels/blas.h"

namespace kiln::codegen {

Dim Dim::operator*(const Dim& o) const {
  Dim r{coef * o.coef, syms};
  if (r.coef == 0) return Dim::c(0);
  r.syms.insert(r.syms.end(), o.syms.begin(), o.syms.end());
  std::sort(r.syms.begin(), r.syms.end());
  return r;
}

std::string Dim::str() const {
  if (syms.empty()) return std::to_string(coef);
  std::string s = coef == 1 ? "" : std::to_string(coef) + "*";
  for (size_t i = 0; i < syms.size(); ++i) s += (i ? "*s" : "s") + std::to_string(syms[i]);
  return s;
}

Dim product(const Dims& ds) {
  Dim p = Dim::c(1);
  for (const Dim& d : ds) p = p * d;
  return p;
}

Dims contiguous(const Dims& sizes) {
  Dims st(sizes.size(), Dim::c(1));
  for (size_t i = sizes.size(); i-- > 1;) st[i - 1] = st[i] * sizes[i];
  return st;
}

const char* kernel_kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::Pointwise: return "pointwise";
    case KernelKind::Sum: return "sum";
    case KernelKind::Mean: return "mean";
    case KernelKind::Amax: return "amax";
    case KernelKind::Softmax: return "softmax";
    case KernelKind::LogSoftmax: return "log_softmax";
    case KernelKind::LayerNorm: return "layer_norm";
  }
  return "?";
}

static std::string dims_str(const Dims& ds) {
  std::string s = "[";
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? ", " : "") + ds[i].str();
  return s + "]";
}

std::string Program::summary() const {
  std::ostringstream o;
  for (size_t s = 0; s < steps.size(); ++s) {
    const Step& st = steps[s];
    if (st.kind == Step::Kind::Kernel) {
      const Kernel& k = kernels[size_t(st.index)];
      o << k.name << ": " << kernel_kind_name(k.kind) << " outer=" << dims_str(k.outer);
      if (!k.inner.empty()) o << " inner=" << dims_str(k.inner);
      o << " " << runtime::dtype_name(k.compute) << " loads=" << k.accesses.size() << " fused=[";
      for (size_t i = 0; i < k.fused.size(); ++i) o << (i ? ", " : "") << k.fused[i];
      o << "] (" << k.why << ")\n";
    } else if (st.kind == Step::Kind::Gemm) {
      const Gemm& g = gemms[size_t(st.index)];
      o << "gemm " << g.node << ": ";
      if (!g.batch.empty()) o << dims_str(g.batch) << " x ";
      o << g.m.str() << "x" << g.n.str() << "x" << g.k.str()
        << (g.trans_a ? " A^T" : "") << (g.trans_b ? " B^T" : "") << " ("
        << (g.trans_a ? "OpenBLAS" : runtime::gemm_impl(g.dtype == DType::Float64)) << ")\n";
    } else {
      const EagerStep& e = eager[size_t(st.index)];
      o << "eager " << e.node->name << ": " << e.why << "\n";
    }
  }
  if (arena_bytes) o << "arena: " << arena_bytes << " bytes for the temporaries\n";
  return o.str();
}

}  // namespace kiln::codegen

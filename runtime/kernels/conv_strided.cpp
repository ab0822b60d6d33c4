#include "runtime/kernels/conv_strided.h"

#include <algorithm>
#include <vector>

#include "runtime/base/thread_pool.h"
#include "runtime/kernels/gemm_avx512.h"

namespace kiln::runtime {

void conv2d_phases_f32(const ConvWindow& g, const float* sample, int64_t cin, const float* w, int64_t cout,
                       const float* bias, float* out, bool inner_parallel) {
  const PhaseLayout l = phase_layout(g);
  const int64_t per_c = l.phases * l.S, kk = g.kh * g.kw, K = cin * kk, E = l.E, HW = g.H * g.W;
  thread_local std::vector<float> planes, ext;
  thread_local std::vector<int64_t> offsets;
  if (planes.size() < size_t(cin * per_c)) planes.resize(size_t(cin * per_c));
  if (ext.size() < size_t(cout * E)) ext.resize(size_t(cout * E));
  offsets.resize(size_t(K));
  for (int64_t k = 0; k < K; ++k) offsets[size_t(k)] = (k / kk) * per_c + l.tap[size_t(k % kk)];
  // Pointers, not the thread_locals: the loops below may run on workers.
  float* const pl = planes.data();
  float* const e = ext.data();
  const int64_t* const off = offsets.data();
  auto fill = [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) fill_phases(g, l, sample + c * HW, pl + c * per_c);
  };
  auto columns = [&](int64_t lo, int64_t hi) {  // in units of 32 columns
    const int64_t j0 = lo * 32, j1 = std::min(E, hi * 32);
    gemm_f32_avx512_rows(cout, j1 - j0, K, w, K, pl + j0, off, e + j0, E);
  };
  auto finish = [&](int64_t lo, int64_t hi) {  // output channels, bias added
    for (int64_t c = lo; c < hi; ++c) {
      const float add = bias ? bias[c] : 0.0f;
      const float* src = e + c * E;
      float* dst = out + c * g.oh * g.ow;
      for (int64_t oi = 0; oi < g.oh; ++oi)
        for (int64_t oj = 0; oj < g.ow; ++oj) dst[oi * g.ow + oj] = src[oi * l.L + oj] + add;
    }
  };
  const int64_t panels = (E + 31) / 32;
  if (inner_parallel) {
    parallel_for(cin, std::max<int64_t>(1, 8192 / per_c), fill);
    parallel_for(panels, 1, columns);
    parallel_for(cout, std::max<int64_t>(1, 4096 / (g.oh * g.ow)), finish);
  } else {
    fill(0, cin);
    columns(0, panels);
    finish(0, cout);
  }
}

}  // namespace kiln::runtime

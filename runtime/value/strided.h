// Private helpers for kernels that walk strided tensors: element conversion
// with defined behaviour for every input, broadcast strides, and a loop
// driver that coalesces dimensions so that contiguous data becomes one flat
// inner loop. Not part of the public runtime API.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/value/tensor.h"

namespace kiln::runtime {

// static_cast with the undefined cases pinned down: float -> int64 of NaN or
// an out-of-range value gives INT64_MIN (what x86's cvttsd2si, and therefore
// torch on CPU, produces) instead of undefined behaviour.
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, int64_t> && std::is_floating_point_v<From>) {
    if (!(v >= From(-9223372036854775808.0) && v < From(9223372036854775808.0)))
      return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(v);
  } else {
    return static_cast<To>(v);
  }
}

// Strides that read `t` as if expanded to `out` (trailing dims aligned, 0 for
// broadcast and missing leading dims). `out` must be a broadcast of t's shape.
inline Shape broadcast_strides(const Tensor& t, const Shape& out) {
  Shape s(out.size(), 0);
  const size_t lead = out.size() - t.sizes().size();
  for (size_t i = 0; i < t.sizes().size(); ++i)
    if (t.sizes()[i] != 1) s[lead + i] = t.strides()[i];
  return s;
}

// The iteration space of N operands over one shape, with size-1 dims dropped
// and adjacent dims merged wherever every operand steps through them as one.
template <size_t N>
struct LoopPlan {
  Shape sizes;  // outermost first
  std::array<Shape, N> strides;
};

template <size_t N>
LoopPlan<N> plan_loop(const Shape& sizes, const std::array<const Shape*, N>& strides) {
  LoopPlan<N> p;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !p.sizes.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = p.strides[k].back() == (*strides[k])[d] * sizes[d];
    if (merge) {
      p.sizes.back() *= sizes[d];
      for (size_t k = 0; k < N; ++k) p.strides[k].back() = (*strides[k])[d];
    } else {
      p.sizes.push_back(sizes[d]);
      for (size_t k = 0; k < N; ++k) p.strides[k].push_back((*strides[k])[d]);
    }
  }
  return p;
}

// Calls inner(offsets, n, steps) once per run of the innermost dimension:
// operand k's elements are at offsets[k] + i * steps[k] for i in [0, n).
// Offsets are in elements. A 0-d space is one run of length 1.
template <size_t N, class F>
void run_loop(const LoopPlan<N>& p, F&& inner) {
  for (int64_t s : p.sizes)
    if (s == 0) return;
  std::array<int64_t, N> off{};
  if (p.sizes.empty()) {
    std::array<int64_t, N> zero{};
    inner(off, int64_t(1), zero);
    return;
  }
  const size_t nd = p.sizes.size();
  std::array<int64_t, N> step;
  for (size_t k = 0; k < N; ++k) step[k] = p.strides[k][nd - 1];
  const int64_t n = p.sizes[nd - 1];
  if (nd == 1) {
    inner(off, n, step);
    return;
  }
  Shape idx(nd - 1, 0);
  for (;;) {
    inner(off, n, step);
    // Odometer increment over the outer dims, keeping offsets in sync.
    size_t d = nd - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++idx[d] < p.sizes[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += p.strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= p.strides[k][d] * (p.sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

template <size_t N, class F>
void for_each_strided(const Shape& sizes, const std::array<const Shape*, N>& strides, F&& inner) {
  run_loop(plan_loop<N>(sizes, strides), inner);
}

// dst[...] = src[...] converted to dst's dtype; src must broadcast to dst's
// shape. dst and src must not overlap in memory unless they are the same view.
void copy_into(const Tensor& dst, const Tensor& src);

// Sets every element of dst to v converted to dst's dtype.
template <class S>
void fill_tensor(const Tensor& dst, S v) {
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T x = convert<T>(v);
    T* base = dst.data<T>();
    for_each_strided<1>(dst.sizes(), {&dst.strides()},
                        [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
                          T* p = base + off[0];
                          for (int64_t i = 0; i < n; ++i) p[i * st[0]] = x;
                        });
  });
}

}  // namespace kiln::runtime

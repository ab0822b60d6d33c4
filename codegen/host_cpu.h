// What the host CPU can do, as codegen needs it: the name and feature
// string LLVM targets (the `-march=native` equivalent), and the vector width
// the kernels use per dtype. Part of every compile-cache key: an object file
// built for one CPU must never be loaded on another.
#pragma once

#include <string>

namespace kiln::codegen {

struct HostCpu {
  std::string triple;    // x86_64-pc-linux-gnu
  std::string name;      // skylake-avx512, znver4, ...
  std::string features;  // "+avx2,-avx512f,...": every feature the host reports, with its sign, sorted
  bool avx512f = false;
  bool avx2 = false;
  // Lanes of a vector register for float32 (16 with AVX-512, 8 with AVX2,
  // 4 otherwise); float64 and int64 get half.
  int f32_lanes = 4;
  std::string fingerprint() const { return triple + "|" + name + "|" + features; }
};

// Detected once per process.
const HostCpu& host_cpu();

}  // namespace kiln::codegen

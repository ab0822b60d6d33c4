#include "codegen/host_cpu.h"

#include <algorithm>
#include <vector>

#include <llvm/ADT/StringMap.h>
#include <llvm/TargetParser/Host.h>

namespace kiln::codegen {

static HostCpu detect() {
  HostCpu cpu;
  cpu.triple = llvm::sys::getProcessTriple();
  cpu.name = llvm::sys::getHostCPUName().str();
  // Every feature the host reports, the ones it lacks too ("-avx512f"):
  // the CPU name alone implies features, and a virtual machine may hide
  // some of them. An AMD EPYC guest without AVX-512 is named znver4, whose
  // defaults include AVX-512; with only the "+" list the JIT emitted
  // AVX-512 code there and every kernel died of SIGILL (clang's
  // -march=native passes both signs for the same reason).
  std::vector<std::string> on, all;
  for (const auto& f : llvm::sys::getHostCPUFeatures()) {
    all.push_back((f.getValue() ? "+" : "-") + f.getKey().str());
    if (f.getValue()) on.push_back(all.back());
  }
  std::sort(all.begin(), all.end());  // StringMap order is unspecified: the key must be stable
  for (size_t i = 0; i < all.size(); ++i) cpu.features += (i ? "," : "") + all[i];
  auto has = [&](const char* f) { return std::find(on.begin(), on.end(), std::string("+") + f) != on.end(); };
  cpu.avx512f = has("avx512f");
  cpu.avx2 = has("avx2") && has("fma");
  cpu.f32_lanes = cpu.avx512f ? 16 : cpu.avx2 ? 8 : 4;
  return cpu;
}

const HostCpu& host_cpu() {
  static const HostCpu cpu = detect();
  return cpu;
}

}  // namespace kiln::codegen

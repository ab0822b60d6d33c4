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
  std::vector<std::string> on;
  for (const auto& f : llvm::sys::getHostCPUFeatures())
    if (f.getValue()) on.push_back("+" + f.getKey().str());
  std::sort(on.begin(), on.end());  // StringMap order is unspecified: the key must be stable
  for (size_t i = 0; i < on.size(); ++i) cpu.features += (i ? "," : "") + on[i];
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

// Native code for a Program's kernels: one ORC LLJIT per process, the new
// pass manager at O3 for the host CPU, and the compile cache (memory, then
// disk) in front of it, keyed by the kernels' own content. A cache hit
// loads the object file without running LLVM's optimizer or code generator.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/lowering.h"

namespace kiln::codegen {

struct CompiledKernels {
  std::vector<KernelFn> fns;  // one per Program::kernels entry
  enum class From : uint8_t { Compiled, MemoryCache, DiskCache, Process } from = From::Compiled;
  double lower_ms = 0, optimize_ms = 0, codegen_ms = 0, load_ms = 0;  // zero on a cache hit
  std::string key;  // hex content hash
};

// The text every cache key starts from: kiln's and LLVM's versions and the
// host CPU (name and features).
const std::string& codegen_environment();

// Content of the kernels (everything lowering reads): equal strings give
// identical machine code on one host.
std::string kernel_fingerprint(const Program& program);

CompiledKernels compile_kernels(const Program& program);

// The object file of the program's kernels (what the disk cache and the
// multi-rank exchange carry), compiled without loading it.
struct CompileTimes {
  double lower_ms = 0, optimize_ms = 0, codegen_ms = 0;
};
std::string compile_object(const Program& program, const std::string& symbol_prefix, CompileTimes* times = nullptr);

}  // namespace kiln::codegen

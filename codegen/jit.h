// Native code for a Program's kernels: one ORC LLJIT per process, the new
// pass manager with 8 clean-up passes for the host CPU (llvm_pipeline()),
// and the compile cache (memory, then
// disk) in front of it, keyed by the kernels' own content. A cache hit
// loads the object file without running LLVM's optimizer or code generator.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/lowering.h"

namespace kiln::codegen {

struct CompiledKernels {
  std::vector<KernelFn> fns;  // one per Program::kernels entry
  enum class From : uint8_t { Compiled, MemoryCache, DiskCache, Process } from = From::Compiled;
  double lower_ms = 0, optimize_ms = 0, codegen_ms = 0, load_ms = 0;  // zero on a cache hit
  std::string key;  // hex content hash
  // Shared compile work (multi-rank, output_graph::current_shared_compile()):
  int ranks = 1;              // ranks the kernels were split across (1: compiled or loaded alone)
  uint32_t compiled_here = 0; // kernels this process ran LLVM for (all on a lone compile, none on a hit)
  uint32_t received = 0;      // kernels whose object code came from other ranks (verified, then linked)
  size_t objects = 0;         // object files linked (1, or one per rank's non-empty share)
  double exchange_ms = 0;     // the plan and object-code all-gathers, waiting for other ranks included
  size_t object_bytes = 0;    // object code linked (all shares), 0 when the process already had it
};

// The text every cache key starts from: kiln's and LLVM's versions and the
// host CPU (name and features).
const std::string& codegen_environment();

// The LLVM optimisation pipeline that runs: "kiln" (8 clean-up passes:
// SROA, EarlyCSE, InstCombine, SimplifyCFG, LICM, then EarlyCSE,
// InstCombine, SimplifyCFG again; code generation at CodeGenOptLevel::Less),
// or what KILN_LLVM_PIPELINE asks for: "O1", "O2", "O3" (the new pass
// manager's default pipelines, code generation at Less / Default /
// Aggressive). Part of every cache key.
const std::string& llvm_pipeline();

// Content of the kernels (everything lowering reads): equal strings give
// identical machine code on one host.
std::string kernel_fingerprint(const Program& program);
// One kernel's content with its buffers numbered as its own (Kernel::buffers):
// equal keys compile to the same function, lowered once per object file.
std::string kernel_key(const Program& program, const Kernel& kernel);
size_t distinct_kernels(const Program& program);  // distinct kernel_keys

CompiledKernels compile_kernels(const Program& program);

// The object file of the program's kernels (what the disk cache and the
// multi-rank exchange carry), compiled without loading it.
struct CompileTimes {
  double lower_ms = 0, optimize_ms = 0, codegen_ms = 0;
};
// Kernels [begin, end) only, when given: symbol_prefix_<i> keeps each
// kernel's index in the program, so every rank resolves the same names
// whichever rank compiled them.
std::string compile_object(const Program& program, const std::string& symbol_prefix, CompileTimes* times = nullptr,
                           size_t begin = 0, size_t end = SIZE_MAX);

// Shared compile work. A kernel's estimated compile time in arbitrary units
// (its kind's base cost, plus its expressions and accesses; measured costs
// in benchmarks/RESULTS.md), and the program's kernels split into `parts`
// contiguous ranges [begin, end) balanced by that estimate, one per rank
// (a range may be empty when there are more ranks than kernels). Integer
// arithmetic: every rank computes the same split.
uint64_t kernel_compile_cost(const Kernel& kernel);
std::vector<std::pair<uint32_t, uint32_t>> partition_kernels(const Program& program, int parts);
// The same over given per-kernel costs.
std::vector<std::pair<uint32_t, uint32_t>> partition_by_cost(const std::vector<uint64_t>& cost, int parts);

}  // namespace kiln::codegen

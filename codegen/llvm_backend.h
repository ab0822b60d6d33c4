// The `llvm` backend: schedule the graph into kernels (scheduler.cpp),
// compile them (jit.cpp, through the compile cache), and run the program
// (buffers, the thread pool, BLAS, eager steps). A graph the scheduler
// cannot take, or a call whose sizes break the program's assumptions, runs
// on the eager backend instead, logged under KILN_LOGS=output_code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "output_graph/backend.h"

namespace kiln::codegen {

output_graph::CompiledGraph llvm_backend(std::shared_ptr<const output_graph::Graph> graph,
                                         const std::vector<runtime::Value>& example_inputs);

// What the last llvm_backend() call in this thread did (tests, explain and
// the benchmarks read it).
struct BackendReport {
  bool fell_back = false;  // the whole graph went to the eager backend
  std::string reason;      // why, when it did
  size_t kernels = 0, gemms = 0, eager_steps = 0;
  // Distinct kernels among them (jit.cpp kernel_key): each is lowered and
  // optimized once per object file, the others are aliases of it.
  size_t kernels_distinct = 0;
  std::string summary;     // Program::summary()
  std::string cache;       // "compiled", "memory", "disk", "process"; "none" without kernels
  double schedule_ms = 0, compile_ms = 0, total_ms = 0;
  // Shared compile work (issue 7): ranks the kernels were split across (1:
  // alone), kernels this process compiled and kernels received from other
  // ranks, object files linked, and the time in the two exchanges.
  int ranks = 1;
  size_t kernels_compiled = 0, kernels_received = 0, objects = 0, object_bytes = 0;
  double exchange_ms = 0, load_ms = 0;  // load: linking the object files into the JIT
};
const BackendReport& last_report();

// Registers "llvm" with output_graph's registry. Runs at static
// initialisation of this library (linked whole, see codegen/CMakeLists.txt);
// calling it again is harmless.
void register_llvm_backend();

}  // namespace kiln::codegen

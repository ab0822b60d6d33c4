// Kernel -> LLVM IR. Each kernel becomes one function
//   void <symbol>(char* const* bufs, const int64_t* dyn, int64_t begin, int64_t end)
// over outer[0] in [begin, end): bufs[l] points at element 0 of the kernel's
// l-th buffer (Kernel::buffers[l]: the kernel's own table, not the
// program's), dyn[s] is dynamic symbol s. Only jit.cpp includes this (LLVM headers
// stay out of headers that many files include).
#pragma once

#include <string>

#include "codegen/host_cpu.h"
#include "codegen/kernel_ir.h"

namespace llvm {
class Module;
}

namespace kiln::codegen {

using KernelFn = void (*)(char* const* bufs, const int64_t* dyn, int64_t begin, int64_t end);

// Identifies this build of the lowering (and so of the code it makes).
const char* lowering_build_stamp();

void lower_kernel(llvm::Module& module, const Program& program, const Kernel& kernel, const std::string& symbol,
                  const HostCpu& cpu);

}  // namespace kiln::codegen

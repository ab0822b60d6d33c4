// The KBC verifier: proves, before a Code runs, the facts the VM and the
// tracer rely on without checking them again at run time:
//
//   - every operand is in range for its kind (constant, local, name, cell,
//     operator, count, flags) and opcode-specific ranges hold;
//   - every jump lands on an instruction;
//   - on every path the stack never underflows, every merge point is
//     reached with one single depth, and execution never falls off the end;
//   - code constants are verified too (recursively).
//
// It then records max_stack, fills cell_from_arg and sets verified.
// Rejections are kiln::Error(VerifyError) naming the function, and where
// there is one, the instruction index, opcode and source line:
//   "function 'f', instruction 4 (POP_TOP), line 3: stack underflow (needs 1, has 0)"
#pragma once

#include "runtime/value/code.h"

namespace kiln::interpreter {

// Limits beyond which code is rejected rather than trusted: a count operand
// (arguments, tuple size, ...) and the stack depth. They keep every stack
// computation far from int32 overflow and the VM's frame allocation sane.
constexpr int32_t kMaxCountOperand = 1 << 16;
constexpr int32_t kMaxStackDepth = 1 << 16;

void verify(runtime::Code& code);

}  // namespace kiln::interpreter

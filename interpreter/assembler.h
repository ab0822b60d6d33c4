// The KBC assembler: the text format of docs/kbc.md to a Program.
//
// Every Code it makes is verified (interpreter/verifier.h) before assemble()
// returns, so a Program from here is ready to run. Errors are kiln::Error:
//   SyntaxError  "FILE:LINE: what went wrong" for anything the text itself
//                gets wrong (unknown opcode, undeclared local, bad literal,
//                missing .end, invalid UTF-8, ...);
//   VerifyError  from the verifier, naming function, instruction, opcode and
//                line (stack underflow, unbalanced merge, bad jump, ...).
#pragma once

#include <string>
#include <string_view>

#include "interpreter/program.h"

namespace kiln::interpreter {

Program assemble(std::string_view text, std::string filename);

// Reads and assembles a file; an unreadable file is a RuntimeError naming it.
Program assemble_file(const std::string& path);

}  // namespace kiln::interpreter

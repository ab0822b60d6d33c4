// The KBC disassembler: Code and Programs to the canonical text form of
// docs/kbc.md.
//
// Round-trip contract (tests/cpp/test_assembler.cpp): for every valid text
// T, D = disassemble(assemble(T)) is a fixed point (disassemble(assemble(D))
// == D) and assemble(D) is structurally equal to assemble(T).
//
// Canonical form: one item per block separated by blank lines; in each
// .func, the parameters with their defaults, then `.firstline` (only when it
// differs from the first instruction's line), `.locals`, `.cellvars`,
// `.freevars`, then the body: jump targets as labels L0, L1, ... in
// instruction order, `.line N` before the first instruction and wherever the
// line changes, one instruction per line indented by two spaces.
//
// Code constants print as `@name`. Code objects that are not items of the
// program (built in C++) are printed after it as extra .func blocks, under
// their name made a unique identifier.
#pragma once

#include <string>

#include "interpreter/program.h"

namespace kiln::interpreter {

std::string disassemble(const Program& program);
// One function (without defaults, which live in a FunctionObj) and, after
// it, every code object its constants reach.
std::string disassemble(const Code& code);
// One function with its defaults; nested code constants as above.
std::string disassemble(const FunctionObj& fn);

}  // namespace kiln::interpreter

// The assembler and the verifier on arbitrary text.
//
// Invariant: text is either rejected with a SyntaxError or VerifyError (no
// other error, no crash, no sanitizer report), or it assembles into verified
// code whose disassembly is a fixed point of assemble∘disassemble (the
// disassembler's contract, interpreter/disassembler.h).
#include "fuzz_common.h"
#include "kbc_mutator.h"
#include "interpreter/disassembler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<kiln::Program> p = kiln_fuzz::assemble_input(data, size);
  if (!p) return 0;
  const std::string d = kiln::interpreter::disassemble(*p);
  std::string d2;
  try {
    d2 = kiln::interpreter::disassemble(kiln::assemble(d, "fuzz.kbc"));
  } catch (const kiln::Error& e) {
    kiln_fuzz::fail(std::string("the disassembly of accepted text does not assemble: ") + e.what() + "\n" + d);
  }
  if (d2 != d) kiln_fuzz::fail("disassembly is not a fixed point:\n" + d + "\n---- then ----\n" + d2);
  return 0;
}

// The verifier and the assembler's rejections: a corpus of malformed .kbc
// files (tests/corpus/malformed/, each stating its expected error on its
// first line), generated hostile inputs, and Code built directly in C++ to
// reach what the text format cannot express.
#include <catch2/catch.hpp>

#include "interpreter/assembler.h"
#include "interpreter/code_builder.h"
#include "interpreter/verifier.h"
#include "kbc_test_util.h"

using namespace kiln;
using namespace kiln::interpreter;
using runtime::Kind;
using runtime::Opcode;
using runtime::Value;

namespace {

const std::filesystem::path kCorpusDir = std::filesystem::path(KILN_SOURCE_DIR) / "tests" / "corpus" / "malformed";

// Assembles `text` and returns the error's what() ("Kind: message").
std::string rejection(const std::string& text, const std::string& name, ErrorKind expected_kind) {
  try {
    assemble(text, name);
  } catch (const Error& e) {
    CHECK(error_kind_name(e.kind()) == std::string(error_kind_name(expected_kind)));
    return e.what();
  }
  FAIL("assembled without error: " << name);
  return {};
}

// Verifies `code` and returns the VerifyError message.
std::string verify_error(runtime::Code& code) {
  try {
    verify(code);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::VerifyError);
    CHECK_FALSE(code.verified);
    return e.message();
  }
  FAIL("verified without error: " << code.name);
  return {};
}

// A small valid function to corrupt: f(x) at lines 10.. : LOAD_FAST x;
// LOAD_CONST 1; BINARY_OP +; RETURN_VALUE.
runtime::Ref<runtime::Code> sample(bool verified = false) {
  CodeBuilder b("f", "direct.kbc");
  b.arg("x");
  b.set_line(10);
  b.emit(Opcode::LOAD_FAST, 0);
  b.set_line(11);
  b.emit(Opcode::LOAD_CONST, b.constant(Value::integer(1)));
  b.set_line(12);
  b.emit(Opcode::BINARY_OP, int32_t(runtime::BinOp::ADD));
  b.set_line(13);
  b.emit(Opcode::RETURN_VALUE);
  return b.finish(verified);
}

}  // namespace

TEST_CASE("every malformed program gives its specific error", "[verify]") {
  auto files = test::files_in(kCorpusDir, ".kbc");
  REQUIRE(files.size() >= 40);
  for (const auto& f : files) {
    std::string text = test::read_text_file(f);
    std::string name = f.filename().string();
    INFO("corpus file " << name);
    const std::string header = "# error: ";
    REQUIRE(text.rfind(header, 0) == 0);
    std::string expected = text.substr(header.size(), text.find('\n') - header.size());
    if (!expected.empty() && expected.back() == '\r') expected.pop_back();
    // The expectation starts with the kind, so what() ("Kind: message")
    // checks both.
    bool syntax = expected.rfind("SyntaxError: ", 0) == 0;
    REQUIRE((syntax || expected.rfind("VerifyError: ", 0) == 0));
    std::string got = rejection(text, name, syntax ? ErrorKind::SyntaxError : ErrorKind::VerifyError);
    INFO("got: " << got);
    CHECK(got.find(expected) != std::string::npos);
  }
}

TEST_CASE("hostile sizes are clean errors", "[verify]") {
  // A 10,000-digit integer.
  std::string digits(10000, '7');
  std::string what = rejection(".func f()\n  LOAD_CONST " + digits + "\n  RETURN_VALUE\n.end\n", "big.kbc",
                               ErrorKind::SyntaxError);
  CHECK(what.find("big.kbc:2: integer constant 7777777777") != std::string::npos);
  CHECK(what.size() < 200);  // the message shows a prefix, not 10k digits
  // Tuple nesting deep enough to exhaust a recursive parser's stack.
  std::string deep = std::string(100000, '(') + std::string(100000, ')');
  what = rejection(".func f()\n  LOAD_CONST " + deep + "\n  RETURN_VALUE\n.end\n", "deep.kbc", ErrorKind::SyntaxError);
  CHECK(what.find("deep.kbc:2: constant tuple nested deeper than") != std::string::npos);
  // A line that is one huge identifier.
  what = rejection(std::string(200000, 'A') + "\n", "ident.kbc", ErrorKind::SyntaxError);
  CHECK(what.find("ident.kbc:1: expected .func or .class") != std::string::npos);
  // NUL bytes are valid UTF-8 but no token.
  std::string nul = ".func f()\n  ";
  nul += '\0';
  nul += "\n.end\n";
  what = rejection(nul, "nul.kbc", ErrorKind::SyntaxError);
  CHECK(what.find("nul.kbc:2: expected an instruction or label") != std::string::npos);
  // Empty input is an empty program.
  CHECK(assemble("", "empty.kbc").items.empty());
  CHECK(assemble("# only a comment", "empty.kbc").items.empty());
}

TEST_CASE("verifier on directly built code: operands out of range", "[verify]") {
  SECTION("jump target out of range") {
    auto code = sample();
    code->instrs[2] = runtime::Instr{Opcode::JUMP, 99, 0, 12};
    CHECK(verify_error(*code) ==
          "function 'f', instruction 2 (JUMP), line 12: jump target 99 out of range (function has 4 instructions)");
  }
  SECTION("negative jump target") {
    auto code = sample();
    code->instrs[2] = runtime::Instr{Opcode::POP_JUMP_IF_TRUE, -1, 0, 12};
    CHECK(verify_error(*code) == "function 'f', instruction 2 (POP_JUMP_IF_TRUE), line 12: jump target -1 out of "
                                 "range (function has 4 instructions)");
  }
  SECTION("constant index out of range") {
    auto code = sample();
    code->instrs[1].a = 5;
    CHECK(verify_error(*code) ==
          "function 'f', instruction 1 (LOAD_CONST), line 11: constant index 5 out of range (the constant table has 1)");
  }
  SECTION("local, name and cell indices") {
    auto code = sample();
    code->instrs[0].a = 1;
    CHECK(verify_error(*code) ==
          "function 'f', instruction 0 (LOAD_FAST), line 10: local index 1 out of range (the local table has 1)");
    code = sample();
    code->instrs[0] = runtime::Instr{Opcode::LOAD_GLOBAL, 0, 0, 10};
    CHECK(verify_error(*code) ==
          "function 'f', instruction 0 (LOAD_GLOBAL), line 10: name index 0 out of range (the name table has 0)");
    code = sample();
    code->instrs[0] = runtime::Instr{Opcode::LOAD_DEREF, 0, 0, 10};
    CHECK(verify_error(*code) ==
          "function 'f', instruction 0 (LOAD_DEREF), line 10: cell index 0 out of range (the cell table has 0)");
  }
  SECTION("operator indices") {
    auto code = sample();
    code->instrs[2].a = runtime::num_binops();
    CHECK(verify_error(*code).find("instruction 2 (BINARY_OP), line 12: binary operator") != std::string::npos);
    code = sample();
    code->instrs[2].b = 2;
    CHECK(verify_error(*code) == "function 'f', instruction 2 (BINARY_OP), line 12: in-place flag 2 out of range (0..1)");
    code = sample();
    code->instrs[2] = runtime::Instr{Opcode::COMPARE_OP, -1, 0, 12};
    CHECK(verify_error(*code).find("(COMPARE_OP), line 12: comparison operator -1 out of range") != std::string::npos);
  }
  SECTION("unused operands must be zero, opcodes must exist") {
    auto code = sample();
    code->instrs[3].a = 7;
    CHECK(verify_error(*code) == "function 'f', instruction 3 (RETURN_VALUE), line 13: operand a must be 0, is 7");
    code = sample();
    code->instrs[3].op = Opcode(250);
    CHECK(verify_error(*code) == "function 'f', instruction 3 (opcode 250), line 13: unknown opcode");
  }
  SECTION("count and flags ranges") {
    auto code = sample();
    code->instrs[2] = runtime::Instr{Opcode::BUILD_TUPLE, -2, 0, 12};
    CHECK(verify_error(*code).find("instruction 2 (BUILD_TUPLE), line 12: count -2 out of range") != std::string::npos);
    code = sample();
    code->instrs[2] = runtime::Instr{Opcode::BUILD_TUPLE, kMaxCountOperand + 1, 0, 12};
    CHECK(verify_error(*code).find("count " + std::to_string(kMaxCountOperand + 1) + " out of range") !=
          std::string::npos);
    code = sample();
    code->instrs[2] = runtime::Instr{Opcode::CALL_EX, 2, 0, 12};
    CHECK(verify_error(*code).find("(CALL_EX), line 12: call flags 2 out of range (0..1)") != std::string::npos);
  }
}

TEST_CASE("verifier on directly built code: stack and frame", "[verify]") {
  SECTION("records max_stack and cell_from_arg") {
    auto code = sample();
    code->cellvars = {"y", "x"};
    verify(*code);
    CHECK(code->verified);
    CHECK(code->max_stack == 2);
    CHECK(code->cell_from_arg == std::vector<int32_t>{-1, 0});
  }
  SECTION("COPY's peak counts") {
    CodeBuilder b("copy");
    b.emit(Opcode::LOAD_CONST, b.constant(Value::integer(1)));
    b.emit(Opcode::COPY, 1);
    b.emit(Opcode::COPY, 2);
    b.emit(Opcode::BUILD_TUPLE, 3);
    b.emit(Opcode::RETURN_VALUE);
    CHECK(b.finish()->max_stack == 3);
  }
  SECTION("empty body") {
    auto code = sample();
    code->instrs.clear();
    CHECK(verify_error(*code) == "function 'f': no instructions (execution falls off the end)");
  }
  SECTION("frame layout") {
    auto code = sample();
    code->argcount = 2;
    CHECK(verify_error(*code) == "function 'f': 2 parameters but only 1 local names");
    code = sample();
    code->varnames = {"x", "x"};
    CHECK(verify_error(*code) == "function 'f': duplicate local 'x'");
    code = sample();
    code->flags = 8;
    CHECK(verify_error(*code) == "function 'f': unknown code flags 8");
    code = sample();
    code->consts[0] = Value::null();
    CHECK(verify_error(*code) == "function 'f': constant 0 is NULL");
  }
  SECTION("stack depth limit") {
    CodeBuilder b("deep");
    b.emit(Opcode::LOAD_CONST, b.constant(Value::none()));
    b.emit(Opcode::UNPACK_SEQUENCE, kMaxCountOperand);
    b.emit(Opcode::LOAD_CONST, 0);
    b.emit(Opcode::RETURN_VALUE);
    auto code = b.finish(false);
    CHECK(verify_error(*code).find("instruction 2 (LOAD_CONST), line 0: stack depth " +
                                   std::to_string(kMaxStackDepth + 1) + " exceeds the limit") != std::string::npos);
  }
  SECTION("nested code constants are verified, cycles terminate") {
    auto inner = sample();
    inner->instrs[1].a = 3;  // broken
    CodeBuilder b("outer");
    b.emit(Opcode::LOAD_CONST, b.constant(Value::object(Kind::Code, inner)));
    b.emit(Opcode::RETURN_VALUE);
    auto outer = b.finish(false);
    CHECK(verify_error(*outer).find("function 'f', instruction 1 (LOAD_CONST), line 11: constant index 3") == 0);
    inner->instrs[1].a = 0;
    // A cycle: inner's constants reach outer.
    inner->consts.push_back(Value::object(Kind::Code, outer));
    verify(*outer);
    CHECK(outer->verified);
    CHECK(inner->verified);
    inner->consts.pop_back();  // break the reference cycle
  }
}

TEST_CASE("verified text programs satisfy the invariants the VM relies on", "[verify]") {
  Program p = assemble(test::read_text_file(std::filesystem::path(KILN_SOURCE_DIR) / "examples" / "hello.kbc"),
                       "hello.kbc");
  for (const auto& item : p.items) {
    const auto& c = *item.function->code;
    CHECK(c.verified);
    CHECK(c.max_stack >= 1);
    CHECK(c.cell_from_arg.size() == c.cellvars.size());
  }
}

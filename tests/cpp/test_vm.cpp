// The VM against its corpus (tests/corpus/vm), plus behaviour that needs C++
// to observe: instruction counting, frame cleanup, recursion safety.
#include <catch2/catch.hpp>

#include <set>

#include "corpus.h"
#include "interpreter/assembler.h"
#include "interpreter/vm.h"
#include "runtime/semantics/value_ops.h"

using namespace kiln;
using namespace kiln::runtime;
using kiln::interpreter::ProgramItem;
using kiln::interpreter::VM;

namespace {

struct RunResult {
  std::string repr, error_kind, error_message, traceback, out;
};

RunResult run_case(const CorpusCase& c) {
  RunResult r;
  auto program = interpreter::assemble(c.source, c.path);
  interpreter::VMOptions opts;
  opts.stdout_sink = [&](std::string_view s) { r.out += s; };
  VM vm(opts);
  try {
    r.repr = repr(vm.run(program, "main"));
  } catch (const Error& e) {
    r.error_kind = error_kind_name(e.kind());
    r.error_message = e.message();
    for (const auto& f : e.traceback()) {
      std::string fn = f.function.substr(f.function.rfind('.') == std::string::npos ? 0 : f.function.rfind('.') + 1);
      r.traceback += (r.traceback.empty() ? "" : ", ") + fn + ":" + std::to_string(f.line);
    }
  }
  return r;
}

std::string unbar(std::string s) {  // '|' stands for a newline in headers
  for (char& ch : s)
    if (ch == '|') ch = '\n';
  return s;
}

void check_corpus(const std::string& dir, size_t at_least) {
  auto cases = load_corpus(dir);
  REQUIRE(cases.size() >= at_least);
  for (const auto& c : cases) {
    INFO(c.path);
    REQUIRE((!c.expect.empty() || !c.error.empty()));
    RunResult r = run_case(c);
    if (!c.error.empty()) {
      // "# error: Kind: substring of the message"
      size_t colon = c.error.find(": ");
      CHECK(r.error_kind == c.error.substr(0, colon));
      CHECK(r.error_message.find(c.error.substr(colon + 2)) != std::string::npos);
      CHECK(r.repr.empty());
    } else {
      INFO(r.error_kind + ": " + r.error_message);
      CHECK(r.error_kind.empty());
      CHECK(r.repr == unbar(c.expect));
    }
    if (!c.traceback.empty()) CHECK(r.traceback == c.traceback);
    if (c.has_stdout) CHECK(r.out == unbar(c.stdout_text) + "\n");
  }
}

}  // namespace

TEST_CASE("VM corpus: every program gives its pinned result", "[vm]") {
  check_corpus(KILN_SOURCE_DIR "/tests/corpus/vm", 25);
}

TEST_CASE("examples give their pinned results", "[vm]") { check_corpus(KILN_SOURCE_DIR "/examples", 2); }

TEST_CASE("VM corpus executes every opcode of the table", "[vm]") {
  // A new opcode without a corpus program exercising it fails here.
  std::set<Opcode> seen;
  for (const auto& c : load_corpus(KILN_SOURCE_DIR "/tests/corpus/vm")) {
    auto program = interpreter::assemble(c.source, c.path);
    std::vector<const Code*> codes;
    for (const auto& item : program.items) {
      if (item.function) codes.push_back(item.function->code.get());
      for (const auto& m : item.methods) codes.push_back(m->code.get());
    }
    for (const Code* code : codes)
      for (const Instr& i : code->instrs) seen.insert(i.op);
  }
  for (int op = 0; op < kNumOpcodes; ++op) {
    INFO(opcode_info(Opcode(op)).name);
    CHECK(seen.count(Opcode(op)) == 1);
  }
}

TEST_CASE("VM counts executed instructions only when asked", "[vm]") {
  auto program = interpreter::assemble(read_text(KILN_SOURCE_DIR "/tests/corpus/vm/int_loop.kbc"), "int_loop.kbc");
  interpreter::VMOptions opts;
  opts.count_instructions = true;
  VM counting(opts);
  CHECK(repr(counting.run(program, "main")) == "4950");
  // 4 setup + 100 iterations x 13 + final test (4) + return (2)
  CHECK(counting.instructions_executed() == 4 + 100 * 13 + 4 + 2);
  VM plain;
  plain.run(program, "main");
  CHECK(plain.instructions_executed() == 0);
}

TEST_CASE("VM releases every frame's values, also when an error unwinds", "[vm]") {
  auto program = interpreter::assemble(R"(
.func keep(x)
    LOAD_FAST x
    LOAD_GLOBAL missing_name
    RETURN_VALUE
.end
.func main(x)
    LOAD_GLOBAL keep
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
)", "leak.kbc");
  Value list = make_list({});
  VM vm;
  CHECK_THROWS_AS(vm.run(program, "main", {list}), Error);
  // Only our local reference remains: the frames, the value stack and the
  // error path dropped theirs.
  CHECK(list.obj()->refcount() == 1);
  CHECK(vm.depth() == 0);
  CHECK(repr(vm.run(interpreter::assemble(".func main()\n LOAD_CONST 7\n RETURN_VALUE\n.end\n", "again.kbc"), "main")) ==
        "7");
}

TEST_CASE("VM recursion limit is an error, not a crash, for module recursion too", "[vm]") {
  auto program = interpreter::assemble(R"(
.class Loop
.func forward(self, x)
    LOAD_FAST self
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
.endclass
.func main()
    LOAD_GLOBAL Loop
    CALL 0
    LOAD_CONST 1
    CALL 1
    RETURN_VALUE
.end
)", "loop.kbc");
  VM vm;
  try {
    vm.run(program, "main");
    FAIL("expected RecursionError");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::RecursionError);
    CHECK(e.traceback().size() > 100);
  }
  CHECK(vm.depth() == 0);
}

TEST_CASE("a function that needs a closure cannot be called without one", "[vm]") {
  auto program = interpreter::assemble(R"(
.func inner()
  .freevars n
    LOAD_DEREF n
    RETURN_VALUE
.end
)", "closure.kbc");
  ProgramItem item = program.items.at(0);  // listed, not bound: it has free variables
  REQUIRE(program.global("inner").is_null());
  VM vm;
  CHECK_THROWS_WITH(vm.call(Value::object(Kind::Function, item.function), {}), Catch::Contains("needs a closure"));
}

// The seeded KBC program generator (kbc_generator.h): every program it makes
// assembles, verifies and runs on the VM, and a seed always gives the same
// text. The differential harness (test_differential.cpp.in) builds on this.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "interpreter/assembler.h"
#include "interpreter/vm.h"
#include "kbc_generator.h"
#include "runtime/base/error.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/code.h"

using namespace kiln;
using kiln::test::generate_program;
using kiln::test::GeneratorOptions;

namespace {

struct Outcome {
  std::string repr, out, error;
};

Outcome run_main(const std::string& text, const std::string& name) {
  Outcome o;
  try {
    auto program = interpreter::assemble(text, name);  // assembles and verifies every function
    interpreter::VMOptions opts;
    opts.stdout_sink = [&](std::string_view s) { o.out += s; };
    interpreter::VM vm(opts);
    o.repr = runtime::repr(vm.run(program, "main"));
  } catch (const Error& e) {
    o.error = e.what();
  }
  return o;
}

void check_seeds(const GeneratorOptions& options, const char* what) {
  for (uint64_t seed = 0; seed < 500; ++seed) {
    std::string text = generate_program(seed, options);
    INFO(what << ", seed " << seed << "\n" << text);
    Outcome o = run_main(text, "gen_" + std::to_string(seed) + ".kbc");
    REQUIRE(o.error.empty());
    CHECK(!o.repr.empty());
    REQUIRE(generate_program(seed, options) == text);
  }
}

}  // namespace

TEST_CASE("generator: seeds 0..499 assemble, verify and run on the VM", "[gen]") {
  check_seeds(GeneratorOptions{}, "default options");
}

TEST_CASE("generator: with prints, tensor branches and item reads too", "[gen]") {
  check_seeds(test::generator_options_with_breaks(), "all breaks on");
}

TEST_CASE("generator: small and large option settings stay valid", "[gen]") {
  GeneratorOptions tiny;
  tiny.num_inputs = 1;
  tiny.min_statements = tiny.max_statements = 1;
  tiny.max_helpers = 0;
  tiny.max_expr_depth = 0;
  tiny.reductions = tiny.matmul = tiny.views = false;
  GeneratorOptions big = test::generator_options_with_breaks();
  big.num_inputs = 4;
  big.max_statements = 25;
  big.max_helpers = 4;
  big.max_expr_depth = 4;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    for (const GeneratorOptions* o : {&tiny, &big}) {
      std::string text = generate_program(seed, *o);
      INFO("seed " << seed << "\n" << text);
      Outcome r = run_main(text, "gen.kbc");
      REQUIRE(r.error.empty());
    }
  }
}

TEST_CASE("generator: the same seed gives the same text, different seeds differ", "[gen]") {
  std::set<std::string> texts;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::string a = generate_program(seed);
    CHECK(a == generate_program(seed));
    texts.insert(a);
  }
  CHECK(texts.size() == 50);
  // Options change the program; the break options actually produce breaks.
  bool printed = false, branched = false, read = false;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::string t = generate_program(seed, test::generator_options_with_breaks());
    printed |= t.find("LOAD_GLOBAL print") != std::string::npos;
    branched |= t.find("COMPARE_OP >\n  POP_JUMP_IF_FALSE") != std::string::npos;
    read |= t.find("LOAD_METHOD item") != std::string::npos;
    CHECK(generate_program(seed).find("LOAD_GLOBAL print") == std::string::npos);
  }
  CHECK(printed);
  CHECK(branched);
  CHECK(read);
}

TEST_CASE("generator: programs use a broad set of opcodes", "[gen]") {
  std::set<runtime::Opcode> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto program = interpreter::assemble(generate_program(seed, test::generator_options_with_breaks()), "gen.kbc");
    for (const auto& item : program.items)
      if (item.function)
        for (const auto& i : item.function->code->instrs) seen.insert(i.op);
  }
  using runtime::Opcode;
  for (Opcode op : {Opcode::LOAD_FAST, Opcode::STORE_FAST, Opcode::BINARY_OP, Opcode::CALL, Opcode::CALL_KW,
                    Opcode::CALL_METHOD, Opcode::CALL_METHOD_KW, Opcode::CALL_EX, Opcode::FOR_ITER,
                    Opcode::POP_JUMP_IF_FALSE, Opcode::POP_JUMP_IF_TRUE, Opcode::BUILD_SLICE, Opcode::BINARY_SUBSCR,
                    Opcode::UNPACK_SEQUENCE, Opcode::COPY, Opcode::SWAP, Opcode::BUILD_STRING, Opcode::BUILD_DICT,
                    Opcode::LOAD_ATTR, Opcode::UNARY_OP}) {
    INFO(runtime::opcode_info(op).name);
    CHECK(seen.count(op) == 1);
  }
}

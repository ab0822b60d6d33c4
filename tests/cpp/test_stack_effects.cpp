// Every VM and translator handler pops and pushes what runtime/value/opcodes.def
// declares (interpreter/stack_effects.h): the KBC corpora, the examples and
// generated programs run with the checks on, on the VM and compiled (the
// translator, and the VM again for residual and resume functions), plus a
// few programs below for what only a host makes (a module import, a
// null-context manager, a Python generator). Then every opcode must have
// been checked on each edge its FLOW declares, by each engine, except
// where an engine by design never finishes the instruction (listed with
// why, and checked to stay so): a new opcode without a program that runs
// it fails here, by name.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "corpus.h"
#include "interpreter/instruction_translator.h"
#include "interpreter/kiln_api.h"
#include "interpreter/stack_effects.h"
#include "interpreter/vm.h"
#include "runtime/base/budget.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"
#include "tracer/kbc_generator.h"

using namespace kiln;
using namespace kiln::runtime;
namespace se = kiln::interpreter::stack_effects;
using se::Engine;

namespace {

// Checks on for the VMs and traces made in its lifetime, counted from zero.
struct Checking {
  const bool was = se::enabled();
  Checking() {
    kiln::reset();  // no compiled entry made before holds an unchecked state
    se::set_enabled(true);
    se::reset();
  }
  ~Checking() {
    se::set_enabled(was);
    kiln::reset();
  }
  Checking(const Checking&) = delete;
  Checking& operator=(const Checking&) = delete;
};

// A mismatch is collected with the program it came from, and the run goes
// on: one report lists them all.
struct Runs {
  std::vector<std::string> mismatches;
  int programs = 0;

  template <class F>
  void guarded(const std::string& what, F&& f) {
    // A bound for programs written to exhaust something (tests/corpus/fuzz):
    // what is checked is each instruction, not that a program finishes.
    runtime::ScopedBudget budget(2'000'000, size_t(64) << 20, size_t(1) << 30);
    try {
      f();
    } catch (const se::Mismatch& m) {
      mismatches.push_back(what + ": " + m.what());
    } catch (const Error&) {
      // the program's own error, or a limit of kiln's: not this test's business
    } catch (const runtime::BudgetExceeded&) {
    }
  }

  // The corpus convention (tests/cpp/test_tracer.cpp): inputs() and f(...),
  // or main() alone. The VM runs it, then kiln::compile, twice (a trace,
  // then the cached entry and its residual), on fresh inputs each time.
  void program(const std::string& source, const std::string& path) {
    ++programs;
    Program p;
    try {
      p = assemble(source, path);
    } catch (const Error& e) {
      FAIL_CHECK(path << " does not assemble: " << e.what());
      return;
    }
    const bool has_f = !p.global("f").is_null() && !p.global("inputs").is_null();
    const Value fn = p.global(has_f ? "f" : "main");
    if (fn.is_null()) {
      FAIL_CHECK(path << " has neither inputs() and f() nor main()");
      return;
    }
    auto args = [&] {
      interpreter::VMOptions vo;
      vo.stdout_sink = [](std::string_view) {};
      interpreter::VM vm(vo);
      runtime::manual_seed(0);
      return has_f ? to_vector(vm.run(p, "inputs")) : std::vector<Value>{};
    };
    guarded(path + " (VM)", [&] {
      interpreter::VMOptions vo;
      vo.stdout_sink = [](std::string_view) {};
      interpreter::VM vm(vo);
      std::vector<Value> a = args();
      vm.call(fn, CallArgs{a.data(), a.size(), nullptr});
    });
    kiln::reset();
    Options options;
    options.backend = "eager";  // the tracer is what runs here; kernels are not
    options.stdout_sink = [](std::string_view) {};
    CompiledFunction compiled = compile(fn, options);
    for (int call = 0; call < 2; ++call) guarded(path + " (compiled, call " + std::to_string(call + 1) + ")", [&] {
      compiled(args());
    });
    kiln::reset();
  }

  void corpus(const std::string& dir) {
    for (const auto& c : load_corpus(dir)) program(c.source, c.path);
  }
};

// The KBC for what a host provides, which no corpus program can make.

// `import fake` answered by a host that has it loaded already (the tracer
// folds an import only then): a str stands for the module, whose `upper`
// IMPORT_FROM reads (tests/corpus/tracer/imports.kbc does the same).
Value fake_import(const StrObj* name, const Value&, const Value&, bool loaded_only) {
  if (name->s == "fake") return Value::str("fake module");
  if (loaded_only) return Value::null();
  throw_error(ErrorKind::ModuleNotFoundError, "No module named '" + name->s + "'");
}
struct HostImport {
  HostImport() { runtime::set_import_hook(fake_import); }
  ~HostImport() { runtime::set_import_hook(nullptr); }
};
const char* kImport = R"(
.func inputs()
    LOAD_GLOBAL tensor
    LOAD_CONST 1.5
    BUILD_LIST 1
    CALL 1
    BUILD_TUPLE 1
    RETURN_VALUE
.end
.func f(x)
  .locals upper
    LOAD_CONST 0
    LOAD_CONST None
    IMPORT_NAME "fake"
    IMPORT_FROM upper
    STORE_FAST upper
    POP_TOP
    LOAD_FAST x
    LOAD_CONST 2.0
    BINARY_OP *
    LOAD_FAST upper
    CALL 0
    BUILD_TUPLE 2
    RETURN_VALUE
.end
)";

// A null-context manager (torch.no_grad's ForeignVTable::null_context): the
// tracer traces its block, the VM calls its __enter__ and __exit__.
const ForeignVTable kNullContext = [] {
  ForeignVTable vt{};
  vt.type_name = "NullContext";
  vt.destroy = [](void*) {};
  vt.getattr = [](void*, std::string_view name) -> Value {
    if (name != "__enter__" && name != "__exit__") throw_error(ErrorKind::AttributeError, std::string(name));
    return make_builtin(std::string(name), [](CallContext&, const BuiltinObj&, const CallArgs&) { return Value::none(); });
  };
  vt.repr = [](void*) { return std::string("<NullContext>"); };
  vt.null_context = [](void*) { return true; };
  return vt;
}();
const char* kNullWith = R"(
.func f(x, mgr)
  .locals ignored
    LOAD_FAST mgr
    BEFORE_WITH
    STORE_FAST ignored
    LOAD_FAST x
    LOAD_CONST 2.0
    BINARY_OP *
    STORE_FAST x
    LOAD_CONST None
    LOAD_CONST None
    LOAD_CONST None
    CALL 3
    POP_TOP
    LOAD_FAST x
    RETURN_VALUE
.end
)";

// The same manager's block raising, in an inlined frame: the trace takes
// the raise to the block's handler, whose WITH_EXCEPT_START (__exit__ with
// the exception) breaks; the VM runs it.
const char* kNullWithRaise = R"(
.func g(mgr)
  .except w0 w1 wh 1 lasti
  .except wh wh_end wh_end 3 lasti
    LOAD_FAST mgr
    BEFORE_WITH
w0:
    POP_TOP
    LOAD_GLOBAL ZeroDivisionError
    LOAD_CONST "in the block"
    CALL 1
    RAISE 1
w1:
wh:
    PUSH_EXC_INFO
    WITH_EXCEPT_START
    POP_JUMP_IF_TRUE sup
    RERAISE 2
wh_end:
    COPY 3
    POP_EXCEPT
    RERAISE 1
sup:
    POP_TOP
    POP_EXCEPT
    POP_TOP
    POP_TOP
    LOAD_CONST "suppressed"
    RETURN_VALUE
.end
.func f(x, mgr)
    LOAD_GLOBAL g
    LOAD_FAST mgr
    CALL 1
    RETURN_VALUE
.end
)";

// A generator's body runs in the tracer only for a Python frame
// (Options::python_frames; the VM raises at the call of a `.generator`
// function): f iterates one, traced directly, as the frame hook's trace is.
const char* kGeneratorProgram = R"(
.func countdown(n)
  .generator
loop:
    LOAD_FAST n
    LOAD_CONST 0
    COMPARE_OP >
    POP_JUMP_IF_FALSE done
    LOAD_FAST n
    YIELD_VALUE
    POP_TOP
    LOAD_FAST n
    LOAD_CONST 1
    BINARY_OP -
    STORE_FAST n
    JUMP loop
done:
    LOAD_CONST None
    RETURN_VALUE
.end
.func f()
  .locals s i
    LOAD_CONST 0
    STORE_FAST s
    LOAD_GLOBAL countdown
    LOAD_CONST 3
    CALL 1
    GET_ITER
loop:
    FOR_ITER done
    STORE_FAST i
    LOAD_FAST s
    LOAD_FAST i
    BINARY_OP +
    STORE_FAST s
    JUMP loop
done:
    LOAD_FAST s
    RETURN_VALUE
.end
)";

// The edges of `op` its FLOW declares, each of which an engine that runs
// the opcode must have been checked on; "" when all were. A missing one
// comes with what the engine did do with the opcode, for whoever writes
// the program that runs it.
std::string unchecked_edges(Engine engine, Opcode op) {
  const se::Counts c = se::counts(engine, op);
  std::string missing;
  auto need = [&](uint64_t n, const char* edge) {
    if (n == 0) missing += std::string(missing.empty() ? "" : "+") + edge;
  };
  switch (opcode_info(op).flow) {
    case Flow::Next: need(c.next, "fall-through"); break;
    case Flow::Jump: need(c.taken, "taken"); break;
    case Flow::Branch:
      need(c.next, "fall-through");
      need(c.taken, "taken");
      break;
    case Flow::Return: need(c.returned, "return"); break;
    // It leaves by raising, which has no effect to compare: it must have
    // run and raised.
    case Flow::Raise: need(c.raised, "raised"); break;
  }
  if (missing.empty()) return missing;
  return missing + "; entered " + std::to_string(c.entered) + ", raised " + std::to_string(c.raised) + ", broke " +
         std::to_string(c.broke);
}

std::string names(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : separator) + i;
  return s;
}

}  // namespace

TEST_CASE("a stack effect that differs from opcodes.def is reported with the opcode and both effects", "[stack_effects]") {
  Program p = assemble(".func f(x)\n    LOAD_FAST x\n    POP_JUMP_IF_NONE out\n    LOAD_CONST 1\n    RETURN_VALUE\nout:\n"
                       "    LOAD_CONST 2\n    RETURN_VALUE\n.end\n",
                       "effects.kbc");
  const Code& code = *p.global("f").as<FunctionObj>()->code;
  se::reset();
  se::check(Engine::VM, code, 2, se::Edge::Next, 1);  // LOAD_CONST: +1
  se::check(Engine::Translator, code, 1, se::Edge::Taken, -1);  // POP_JUMP_IF_NONE: jpops 1
  se::check(Engine::VM, code, 3, se::Edge::Return, -1);
  CHECK(se::counts(Engine::VM, Opcode::LOAD_CONST).next == 1);
  CHECK(se::counts(Engine::Translator, Opcode::POP_JUMP_IF_NONE).taken == 1);
  CHECK(se::counts(Engine::VM, Opcode::RETURN_VALUE).returned == 1);
  CHECK(se::mismatches().empty());

  auto message = [&](Engine e, size_t pc, se::Edge edge, ptrdiff_t actual) {
    try {
      se::check(e, code, pc, edge, actual);
    } catch (const se::Mismatch& m) {
      return std::string(m.what());
    }
    return std::string("(no mismatch)");
  };
  CHECK(message(Engine::VM, 2, se::Edge::Next, 0) ==
        "stack effect: the VM's LOAD_CONST (0, 0) left by its fall-through edge, opcodes.def declares 1 (pops 0, "
        "pushes 1), the handler changed the depth by 0 (f instruction 2, effects.kbc:4)");
  CHECK(message(Engine::Translator, 1, se::Edge::Taken, 0) ==
        "stack effect: the translator's POP_JUMP_IF_NONE (4, 0) left by its taken edge, opcodes.def declares -1 "
        "(jpops 1, jpushes 0), the handler changed the depth by 0 (f instruction 1, effects.kbc:3)");
  CHECK(message(Engine::VM, 2, se::Edge::Taken, 1) ==
        "stack effect: the VM's LOAD_CONST (0, 0) left by its taken edge, which opcodes.def does not declare "
        "(FLOW Next); depth changed by 1 (f instruction 2, effects.kbc:4)");
  CHECK(se::mismatches().size() == 3);  // recorded as thrown
  se::reset();
  CHECK(se::mismatches().empty());
}

TEST_CASE("every VM and translator handler pops and pushes what opcodes.def declares", "[stack_effects]") {
  Checking checking;
  Runs runs;
  for (const char* dir : {"/tests/corpus/vm", "/tests/corpus/tracer", "/tests/corpus/fuzz", "/examples"})
    runs.corpus(std::string(KILN_SOURCE_DIR) + dir);
  // Generated programs: other operands of the same opcodes (BUILD_TUPLE n,
  // COPY n, ...) and the tracer's residuals for each kind of break.
  for (uint64_t seed = 0; seed < 200; ++seed) {
    test::GeneratorOptions options;
    if (seed % 2) options = test::generator_options_with_breaks();
    runs.program(test::generate_program(seed, options), "gen_" + std::to_string(seed) + ".kbc");
  }
  {
    HostImport hook;
    runs.program(kImport, "import.kbc");
  }
  for (auto [source, path, expect] : {std::tuple{kNullWith, "null_with.kbc", "6.0"},
                                      std::tuple{kNullWithRaise, "null_with_raise.kbc", "ZeroDivisionError"}}) {
    Program p = assemble(source, path);
    Value mgr = Value::object(Kind::Foreign, make_ref<ForeignObj>(&kNullContext, nullptr));
    auto outcome = [&](auto&& call) {
      try {
        return repr(call());
      } catch (const Error& e) {
        return std::string(error_kind_name(e.kind()));
      }
    };
    Options options;
    options.backend = "eager";
    CompiledFunction compiled = compile(p.global("f"), options);
    for (int call = 0; call < 2; ++call)
      runs.guarded(std::string(path) + " (compiled)", [&] {
        CHECK(outcome([&] { return compiled({Value::floating(3.0), mgr}); }) == expect);
      });
    runs.guarded(std::string(path) + " (VM)", [&] {
      interpreter::VM vm;
      CHECK(outcome([&] { return vm.call(p.global("f"), {Value::floating(3.0), mgr}); }) == expect);
    });
    kiln::reset();
  }
  runs.guarded("generator.kbc (translator, python_frames)", [&] {
    Program p = assemble(kGeneratorProgram, "generator.kbc");
    interpreter::VM vm;
    interpreter::TraceContext ctx(vm);
    ctx.python_frames = true;
    interpreter::InstructionTranslator tx(ctx, Ref<FunctionObj>(p.global("f").as<FunctionObj>()), {}, nullptr);
    tx.run();
    REQUIRE(tx.returned());
    CHECK(tx.result()->str() == "ConstantVariable(6)");
  });

  INFO("programs run: " << runs.programs);
  {
    INFO("mismatches: " << runs.mismatches.size());
    CHECK(names(runs.mismatches, "\n") == "");
    CHECK(se::mismatches().size() == runs.mismatches.size());  // none was swallowed on the way
  }

  // What each engine never finishes, by design. Each must stay so (a
  // handler that starts finishing it is checked by removing it here).
  // The VM: YIELD_VALUE is in `.generator` code only, whose call raises
  // (interpreter/vm.cpp: bind_arguments); the tracer runs generators.
  auto vm_never = [](Opcode op) { return op == Opcode::YIELD_VALUE; };
  // The translator: WITH_EXCEPT_START (a `with` block's __exit__ called
  // with an exception) always breaks: the VM runs the handler.
  auto translator_never = [](Opcode op) { return op == Opcode::WITH_EXCEPT_START; };

  std::vector<std::string> vm_missing, translator_missing, vm_stale, translator_stale;
  int vm_checked = 0, translator_checked = 0;
  for (int i = 0; i < kNumOpcodes; ++i) {
    const Opcode op = Opcode(i);
    const std::string name = opcode_info(op).name;
    const se::Counts v = se::counts(Engine::VM, op), t = se::counts(Engine::Translator, op);
    if (vm_never(op)) {
      if (v.entered) vm_stale.push_back(name);
    } else if (std::string e = unchecked_edges(Engine::VM, op); !e.empty()) {
      vm_missing.push_back(name + " (" + e + ")");
    } else {
      ++vm_checked;
    }
    if (translator_never(op)) {
      if (t.next + t.taken + t.returned) translator_stale.push_back(name);
      if (!t.broke) translator_missing.push_back(name + " (its break; entered " + std::to_string(t.entered) + ")");
    } else if (std::string e = unchecked_edges(Engine::Translator, op); !e.empty()) {
      translator_missing.push_back(name + " (" + e + ")");
    } else {
      ++translator_checked;
    }
  }
  WARN("stack effects checked: the VM " << vm_checked << " of " << kNumOpcodes << " opcodes, the translator "
                                        << translator_checked << " (" << runs.programs << " programs)");
  {
    INFO("opcodes the checked VM never ran to the end of each edge: add a program to tests/corpus/vm");
    CHECK(names(vm_missing) == "");
  }
  {
    INFO("opcodes the checked translator never ran to the end of each edge: add a program to tests/corpus/tracer "
         "(or above, for what needs a host)");
    CHECK(names(translator_missing) == "");
  }
  {
    INFO("an engine now runs an opcode listed as never run: check it and take it off that list");
    CHECK(names(vm_stale) == "");
    CHECK(names(translator_stale) == "");
  }
}

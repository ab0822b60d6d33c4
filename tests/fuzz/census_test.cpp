// The object census's tests (runtime/semantics/census.h), in the fuzz tree where it is
// compiled in; tests/fuzz/run.sh runs them before the fuzz targets (so
// `make test` does).
//
// 1. The check can fail: an object with a reference nobody owns is a
//    leak (by type, with what only it keeps alive), an interned string
//    held once more than the intern table holds it too, and a traverse that
//    reports a reference it does not own is caught (`overcounted`).
// 2. A program's own cycles are not leaks, and collect() frees them: a
//    list appended to itself, a module holding itself, a module whose hook
//    is its own hook handle (the handle's traverse reports its module: a
//    fuzz finding, defect 37), a closure over itself, an exception inside
//    its own args, a function kept past its program (its globals).
// 3. The corpus: every KBC program of tests/corpus/{vm,tracer,fuzz} and
//    examples/ runs on the VM, then compiled (eager; llvm with --llvm), and
//    leaves nothing alive but its cycles once dropped. This is the
//    traversal's completeness test too: an object kind reached whose
//    traverse missed a reference would show as a leak here.
//
//   census_test ROOT [--llvm]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fuzz_common.h"
#include "runtime/semantics/census.h"
#include "runtime/value/value.h"

namespace census = kiln::runtime::census;
using kiln::runtime::Object;
using kiln::runtime::Ref;
using kiln::runtime::Value;
using kiln::runtime::Visitor;

namespace {

int failures = 0;
int passed = 0;

void expect(bool ok, const std::string& what, const census::Report* r = nullptr) {
  if (ok) {
    ++passed;
    return;
  }
  ++failures;
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  if (r) std::fprintf(stderr, "  %s\n", r->text().c_str());
}

kiln::Program assemble(const std::string& text, const std::string& name) {
  return kiln::assemble(text, name);
}

// Runs main() of `text` on a VM of its own; the result is dropped with
// everything else (program, VM) before this returns.
void run_main(const std::string& text, const std::string& name) {
  kiln::Program p = assemble(text, name);
  kiln::interpreter::VM vm;
  Value result = vm.call(p.global("main"), kiln::runtime::CallArgs{});
}

// ---------------------------------------------------------------- 1. fails --
void test_extra_reference_is_a_leak() {
  const uint64_t m = census::mark();
  Object* leaked;
  {
    Value inner = kiln::runtime::make_list({Value::str("payload, not interned")});
    Value outer = kiln::runtime::make_list({inner});
    leaked = outer.obj();
    leaked->incref();  // a reference nobody owns: what a missing decref is
  }
  census::Report r = census::check(m);
  expect(!r.ok() && r.leaked == 1 && r.leaked_types["ListObj"] == 1 && r.held_by_leaks == 2,
         "an extra incref is one leaked ListObj keeping two objects alive", &r);
  expect(r.text().find("ListObj x1") != std::string::npos, "the report names the leaked type", &r);
  leaked->decref();
  r = census::check(m);
  expect(r.ok() && r.checked == 0, "after the decref nothing made since the mark is alive", &r);
}

void test_interned_string() {
  const uint64_t m = census::mark();
  Ref<kiln::runtime::StrObj> s = kiln::runtime::intern("census_test: a name never interned before");
  const kiln::runtime::StrObj* raw = s.get();
  s = nullptr;
  census::Report r = census::check(m);
  expect(r.ok() && r.checked == 1, "an interned string held by the intern table alone is no leak", &r);
  raw->incref();
  r = census::check(m);
  expect(!r.ok() && r.leaked_types["StrObj"] == 1, "an interned string with one reference more is a leak", &r);
  raw->decref();
}

// Owns one reference to `target` but reports it twice: what a traverse
// reporting a reference it does not own looks like.
struct Overreporting final : Object {
  Ref<Object> target;
  void traverse(Visitor& v) const override {
    visit(v, target);
    visit(v, target);
  }
};

void test_overcounting_traverse() {
  const uint64_t m = census::mark();
  {
    auto liar = kiln::runtime::make_ref<Overreporting>();
    Value list = kiln::runtime::make_list({});
    liar->target = Ref<Object>(list.obj());
    list = Value();
    census::Report r = census::check(m);
    expect(!r.ok() && r.overcounted == 1 && r.overcounted_types["ListObj"] == 1,
           "a traverse reporting a reference it does not own is caught", &r);
  }
  census::Report r = census::check(m);
  expect(r.ok() && r.checked == 0, "the overreporting object and its list are freed", &r);
}

// --------------------------------------------------------------- 2. cycles --
struct CycleCase {
  const char* what;
  const char* kbc;
};

const CycleCase kCycles[] = {
    {"a list appended to itself", R"(
.func main()
  .locals l
    BUILD_LIST 0
    STORE_FAST l
    LOAD_FAST l
    LOAD_METHOD append
    LOAD_FAST l
    CALL_METHOD 1
    POP_TOP
    LOAD_CONST None
    RETURN_VALUE
.end
)"},
    {"a dict holding itself", R"(
.func main()
  .locals d
    BUILD_DICT 0
    STORE_FAST d
    LOAD_FAST d
    LOAD_FAST d
    LOAD_CONST "me"
    STORE_SUBSCR
    LOAD_CONST None
    RETURN_VALUE
.end
)"},
    {"a module holding itself", R"(
.class Node
.func __init__(self)
    LOAD_FAST self
    LOAD_FAST self
    STORE_ATTR me
    LOAD_CONST None
    RETURN_VALUE
.end
.endclass

.func main()
    LOAD_GLOBAL Node
    CALL 0
    POP_TOP
    LOAD_CONST None
    RETURN_VALUE
.end
)"},
    {"a module whose pre-hook is its own hook handle", R"(
.class Node
.func forward(self, x)
    LOAD_FAST x
    RETURN_VALUE
.end
.endclass

.func main()
  .locals m
    LOAD_GLOBAL Node
    CALL 0
    STORE_FAST m
    LOAD_FAST m
    LOAD_METHOD register_forward_pre_hook
    LOAD_FAST m
    LOAD_METHOD register_forward_hook
    LOAD_GLOBAL print
    CALL_METHOD 1
    CALL_METHOD 1
    POP_TOP
    LOAD_CONST None
    RETURN_VALUE
.end
)"},
    {"a closure over itself", R"(
.func inner()
  .freevars inner
    LOAD_DEREF inner
    RETURN_VALUE
.end

.func main()
  .cellvars inner
    LOAD_CLOSURE inner
    BUILD_TUPLE 1
    LOAD_CONST @inner
    MAKE_FUNCTION 4
    STORE_DEREF inner
    LOAD_DEREF inner
    CALL 0
    POP_TOP
    LOAD_CONST None
    RETURN_VALUE
.end
)"},
    {"an exception inside its own args", R"(
.func main()
  .locals e
    LOAD_GLOBAL ValueError
    BUILD_LIST 0
    CALL 1
    STORE_FAST e
    LOAD_FAST e
    LOAD_ATTR args
    LOAD_CONST 0
    BINARY_SUBSCR
    LOAD_METHOD append
    LOAD_FAST e
    CALL_METHOD 1
    POP_TOP
    LOAD_CONST None
    RETURN_VALUE
.end
)"},
};

void test_cycles_are_not_leaks() {
  for (const CycleCase& c : kCycles) {
    run_main(c.kbc, "cycle.kbc");  // warm-up: what kiln builds lazily is old at the mark
    census::collect();
    const uint64_t m = census::mark();
    run_main(c.kbc, "cycle.kbc");
    kiln::reset();
    census::Report r = census::check(m);
    expect(r.ok() && r.in_cycles > 0, std::string(c.what) + ": a garbage cycle, not a leak", &r);
    const size_t freed = census::collect();
    r = census::check(m);
    expect(freed > 0 && r.checked == 0, std::string(c.what) + ": collect() frees the cycle", &r);
  }
}

void test_function_kept_past_its_program() {
  const char* kbc = R"(
.func helper()
    LOAD_CONST 1
    RETURN_VALUE
.end

.func main()
    LOAD_GLOBAL helper
    RETURN_VALUE
.end
)";
  run_main(kbc, "keep.kbc");
  const uint64_t m = census::mark();
  {
    Value kept;
    {
      kiln::Program p = assemble(kbc, "keep.kbc");
      kiln::interpreter::VM vm;
      kept = vm.call(p.global("main"), kiln::runtime::CallArgs{});
    }
    census::Report r = census::check(m);
    expect(!r.ok(), "a function the caller still holds is held from outside (the check sees the caller's Value)", &r);
  }
  census::Report r = census::check(m);
  expect(r.ok() && r.checked == 0, "a function and its globals die with the last reference", &r);
}

// --------------------------------------------------------------- 3. corpus --
struct Tally {
  int programs = 0, vm = 0, compiled = 0, cycles = 0;
};

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The same runs a fuzz target makes (fuzz_common.h): f(*inputs()) or main(),
// under the fuzz budget; errors are outcomes, not failures.
int ran = 0;  // runs that ended in a result or an error within the budget

void run_vm(const std::string& text, const std::string& name) {
  std::optional<kiln::Program> p = kiln_fuzz::assemble_input(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  if (!p) return;
  std::optional<kiln_fuzz::Entry> e = kiln_fuzz::entry_of(*p);
  if (!e) return;
  kiln::interpreter::VMOptions vo;
  vo.stdout_sink = [](std::string_view) {};
  kiln::interpreter::VM vm(vo);
  ran += !kiln_fuzz::run_entry(vm, *e, kiln_fuzz::kVmSteps, [&](const std::vector<Value>& args) {
            return vm.call(e->fn, kiln::runtime::CallArgs{args.data(), args.size(), nullptr});
          }).exhausted;
}

void run_compiled(const std::string& text, const std::string& backend) {
  std::optional<kiln::Program> p = kiln_fuzz::assemble_input(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  if (!p) return;
  std::optional<kiln_fuzz::Entry> e = kiln_fuzz::entry_of(*p);
  if (!e) return;
  kiln::interpreter::VMOptions vo;
  vo.stdout_sink = [](std::string_view) {};
  kiln::interpreter::VM vm(vo);
  kiln::Options options;
  options.backend = backend;
  options.stdout_sink = vo.stdout_sink;
  kiln::CompiledFunction compiled = kiln::compile(e->fn, options);
  for (int k = 0; k < 2; ++k)
    ran += !kiln_fuzz::run_entry(vm, *e, 50 * kiln_fuzz::kVmSteps, [&](const std::vector<Value>& args) {
              return compiled(args);
            }).exhausted;
}

void test_corpus(const std::filesystem::path& root, bool llvm, Tally& t) {
  std::vector<std::filesystem::path> files;
  for (const char* dir : {"tests/corpus/vm", "tests/corpus/tracer", "tests/corpus/fuzz", "examples"})
    for (const auto& f : std::filesystem::directory_iterator(root / dir))
      if (f.path().extension() == ".kbc") files.push_back(f.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> backends{"eager"};
  if (llvm) backends.push_back("llvm");
  for (const auto& path : files) {
    const std::string text = read(path), name = path.filename().string();
    ++t.programs;
    run_vm(text, name);  // warm-up
    uint64_t m = census::mark();
    run_vm(text, name);
    kiln::reset();
    census::Report r = census::check(m);
    expect(r.ok(), path.string() + ": the VM's run leaks", &r);
    t.cycles += r.in_cycles > 0;
    ++t.vm;
    for (const std::string& backend : backends) {
      kiln::reset();
      m = census::mark();
      run_compiled(text, backend);
      kiln::reset();
      r = census::check(m);
      expect(r.ok(), path.string() + ": the compiled runs (" + backend + ") leak", &r);
      t.cycles += r.in_cycles > 0;
      ++t.compiled;
    }
    census::collect();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: census_test ROOT [--llvm]\n");
    return 2;
  }
  setenv("KILN_CACHE_DIR", "off", 1);
  const bool llvm = argc > 2 && std::string(argv[2]) == "--llvm";
  for (void (*test)() : {test_extra_reference_is_a_leak, test_interned_string, test_overcounting_traverse,
                         test_cycles_are_not_leaks, test_function_kept_past_its_program}) {
    try {
      test();
    } catch (const kiln::Error& e) {
      expect(false, std::string("a unit test raised ") + e.what());
    }
  }
  const int unit = passed + failures;
  Tally t;
  test_corpus(argv[1], llvm, t);
  std::printf("census_test: %d unit checks; corpus: %d programs, %d VM runs and %d compiled runs (%s) checked (%d runs "
              "ended within the budget), %d left garbage cycles; %d failures\n",
              unit, t.programs, t.vm, t.compiled, llvm ? "eager, llvm" : "eager", ran, t.cycles, failures);
  return failures ? 1 : 0;
}

// Tracer benchmarks (issue 3), one JSON object per line:
//   bench_tracer trace N        straight-line f(x) with N tensor ops:
//                               trace+compile time of the first call
//   bench_tracer call_inputs N  cached-call overhead, f with N tensor inputs
//   bench_tracer call_inputs_dynamic N   the same, every size symbolic
//                               (dynamic=true): the symbols read and the
//                               relation x0 + x1 relies on (s0 == s1) checked
//   bench_tracer call_modules N cached-call overhead, a root module whose
//                               tree has N layers (unchanged between calls)
//   bench_tracer call_modules_walk N   the same, forward calling every layer
//   bench_tracer unroll N       a Python-level loop of N iterations, which
//                               the trace unrolls (one op in the graph, eager
//                               backend): the translator's time per step;
//                               KILN_CHECK_STACK_EFFECTS=1 times it with the
//                               stack-effect check on ("checks" in the output)
// "Overhead" is the cached call minus running the same graph's kernels:
// the guard tree, argument binding and dispatch.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "interpreter/kiln_api.h"
#include "interpreter/stack_effects.h"
#include "interpreter/vm.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::runtime;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

static std::string straight_line(int n) {
  std::string s = ".func f(x)\n";
  for (int i = 0; i < n; ++i) s += "    LOAD_FAST x\n    LOAD_CONST 1.0\n    BINARY_OP +\n    STORE_FAST x\n";
  return s + "    LOAD_FAST x\n    RETURN_VALUE\n.end\n";
}

// f(x0, ..., xN-1) reads every input's ndim (so each is a guarded graph
// input) and returns x0 + x1: the kernel time is one tiny add.
static std::string many_inputs(int n) {
  std::string s = ".func f(";
  for (int i = 0; i < n; ++i) s += (i ? ", x" : "x") + std::to_string(i);
  s += ")\n";
  for (int i = 0; i < n; ++i) s += "    LOAD_FAST x" + std::to_string(i) + "\n    LOAD_ATTR ndim\n    POP_TOP\n";
  return s + "    LOAD_FAST x0\n    LOAD_FAST x1\n    BINARY_OP +\n    RETURN_VALUE\n.end\n";
}

// f(x) sums range(N) in Python ints, then scales x by the sum: the trace
// folds every iteration (7 translator steps each: FOR_ITER to JUMP) into
// a constant.
static std::string unrolled_loop(int n) {
  return R"(
.func f(x)
  .locals s i
    LOAD_CONST 0
    STORE_FAST s
    LOAD_GLOBAL range
    LOAD_CONST )" + std::to_string(n) + R"(
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
    LOAD_FAST x
    LOAD_FAST s
    BINARY_OP *
    RETURN_VALUE
.end
)";
}

// A module tree N layers deep (Block -> Block -> ...), forward reads a
// scale on the root only: the guard is the root's identity and version
// tags. `walk`: each forward also calls its child, so every module of the
// tree is read (and guarded) by the trace.
static std::string module_tree(bool walk = false) {
  const std::string forward = walk ? R"(
.func forward(self, x)
  .locals c
    LOAD_FAST x
    LOAD_FAST self
    LOAD_ATTR scale
    BINARY_OP *
    STORE_FAST x
    LOAD_FAST self
    LOAD_ATTR child
    STORE_FAST c
    LOAD_FAST c
    LOAD_CONST None
    COMPARE_OP is
    POP_JUMP_IF_FALSE deeper
    LOAD_FAST x
    RETURN_VALUE
deeper:
    LOAD_FAST c
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
)"
                                   : R"(
.func forward(self, x)
    LOAD_FAST x
    LOAD_FAST self
    LOAD_ATTR scale
    BINARY_OP *
    RETURN_VALUE
.end
)";
  return R"(
.class Block
.func __init__(self, depth)
    LOAD_CONST 2.0
    LOAD_FAST self
    STORE_ATTR scale
    LOAD_CONST None
    LOAD_FAST self
    STORE_ATTR child
    LOAD_FAST depth
    LOAD_CONST 0
    COMPARE_OP >
    POP_JUMP_IF_FALSE leaf
    LOAD_GLOBAL Block
    LOAD_FAST depth
    LOAD_CONST 1
    BINARY_OP -
    CALL 1
    LOAD_FAST self
    STORE_ATTR child
leaf:
    LOAD_CONST None
    RETURN_VALUE
.end
)" + forward + R"(
.endclass
.func make(depth)
    LOAD_GLOBAL Block
    LOAD_FAST depth
    CALL 1
    RETURN_VALUE
.end
.func f(m, x)
    LOAD_FAST m
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
)";
}

static double best_of(int reps, int iters, const std::function<void()>& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) fn();
    best = std::min(best, seconds_since(t0) / iters);
  }
  return best;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_tracer trace|call_inputs|call_inputs_dynamic|call_modules|call_modules_walk|unroll N\n");
    return 2;
  }
  std::string mode = argv[1];
  int n = std::atoi(argv[2]);
  Value x = call_op(OpId::ones, {Value::integer(4)});
  try {
    if (mode == "trace") {
      Program p = assemble(straight_line(n), "trace.kbc");
      size_t instrs = p.global("f").as<FunctionObj>()->code->instrs.size();
      double best = 1e30, cold = 0;
      for (int r = 0; r < 3; ++r) {
        reset();
        CompiledFunction f = compile(p.global("f"));
        auto t0 = Clock::now();
        f({x});  // trace + compile + one run
        double first = seconds_since(t0);
        auto t1 = Clock::now();
        f({x});  // cached: the graph's kernels and dispatch only
        double cached = seconds_since(t1);
        best = std::min(best, first - cached);
        if (r == 0) cold = first - cached;  // the kernels compiled (with KILN_CACHE_DIR=off)
      }
      std::printf("{\"mode\": \"trace\", \"ops\": %d, \"instructions\": %zu, \"seconds\": %.6f, "
                  "\"us_per_op\": %.3f, \"instr_per_s\": %.0f, \"backend\": \"%s\", \"cold_seconds\": %.6f, "
                  "\"cold_us_per_op\": %.3f}\n",
                  n, instrs, best, best * 1e6 / n, double(instrs) / best, Options{}.backend.c_str(), cold,
                  cold * 1e6 / n);
    } else if (mode == "unroll") {
      Program p = assemble(unrolled_loop(n), "unroll.kbc");
      Options options;
      options.backend = "eager";
      double best = 1e30;
      for (int r = 0; r < 7; ++r) {
        reset();
        CompiledFunction f = compile(p.global("f"), options);
        auto t0 = Clock::now();
        f({x});  // the trace (and a one-op graph)
        double first = seconds_since(t0);
        auto t1 = Clock::now();
        f({x});
        best = std::min(best, first - seconds_since(t1));
      }
      std::printf("{\"mode\": \"unroll\", \"iterations\": %d, \"seconds\": %.6f, \"ns_per_iteration\": %.1f, "
                  "\"checks\": %s}\n",
                  n, best, best * 1e9 / n, interpreter::stack_effects::enabled() ? "true" : "false");
    } else if (mode == "call_inputs" || mode == "call_inputs_dynamic") {
      Program p = assemble(many_inputs(n), "inputs.kbc");
      std::vector<Value> args;
      for (int i = 0; i < n; ++i) args.push_back(call_op(OpId::ones, {Value::integer(4)}));
      Options options;
      if (mode == "call_inputs_dynamic") options.dynamic = true;
      CompiledFunction f = compile(p.global("f"), options);
      f(args);
      interpreter::VM vm;
      Value graph_add = call_op(OpId::add, {args[0], args[1]});  // warm the kernel
      double call = best_of(5, 20000, [&] { f(args); });
      double kernel = best_of(5, 20000, [&] { call_op(OpId::add, {args[0], args[1]}); });
      std::printf("{\"mode\": \"%s\", \"inputs\": %d, \"call_us\": %.3f, \"kernel_us\": %.3f, "
                  "\"overhead_us\": %.3f}\n",
                  mode.c_str(), n, call * 1e6, kernel * 1e6, (call - kernel) * 1e6);
    } else if (mode == "call_modules" || mode == "call_modules_walk") {
      Program p = assemble(module_tree(mode == "call_modules_walk"), "tree.kbc");
      interpreter::VM vm;
      Value m = vm.call(p.global("make"), {Value::integer(n - 1)});
      CompiledFunction f = compile(p.global("f"));
      f({m, x});
      double call = best_of(5, 20000, [&] { f({m, x}); });
      double kernel = best_of(5, 20000, [&] { call_op(OpId::mul, {x, Value::floating(2.0)}); });
      std::printf("{\"mode\": \"%s\", \"layers\": %d, \"call_us\": %.3f, \"kernel_us\": %.3f, "
                  "\"overhead_us\": %.3f}\n",
                  mode.c_str(), n, call * 1e6, kernel * 1e6, (call - kernel) * 1e6);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_tracer: %s\n", e.full().c_str());
    return 1;
  }
  return 0;
}

// Multi-rank compiles through the public header only (issue 7: "a C++
// program using only kiln/kiln.h"). ctest runs each mode as one job under
// `mpirun -np 2|3` (a timeout leaves the compile group unusable, so modes do
// not share a job), and the modes that make sense on one rank once without
// mpirun, where distributed::init() is the single-rank world.
//
//   kiln_mpi_compile_tests agree    rank r traces x of size 4+r: with the compiler
//                                   collective every rank ends with the same graphs
//                                   and guards (dim 0 dynamic), and VM-correct results
//   kiln_mpi_compile_tests diverge  the same program with collectives off: the ranks'
//                                   guards differ (what the collective prevents)
//   kiln_mpi_compile_tests lone     only the last rank changes its input shape: with
//                                   guard collectives every rank recompiles with it
//   kiln_mpi_compile_tests raise    the last rank raises before compiling: the
//                                   others get CollectiveTimeout within the limit
//   kiln_mpi_compile_tests stall    the last rank sleeps past the limit: the same
//   kiln_mpi_compile_tests bench [N]  whole-frame compile time, collectives on vs off
//   kiln_mpi_compile_tests share S   shared compile work on a many-kernel graph (salt S):
//                                   each rank compiles its share, every rank ends with
//                                   every kernel, results equal eager, the disk cache
//                                   gets one entry; a corrupted share is refused
//                                   naming its rank; collectives off: each compiles all
//   kiln_mpi_compile_tests share_warm S  a new process on the cache `share S` filled:
//                                   every rank loads the kernels without compiling
//   kiln_mpi_compile_tests sharebench [N]  wall-clock compile of the many-kernel model
//   kiln_mpi_compile_tests sharelink [K]   one process: K kernels compiled as P shares and
//                                   linked as P objects (the cost of splitting)
//
// Each rank prints PASS/FAIL lines and exits non-zero on any failure.
#include <kiln/kiln.h>

#include "interpreter/vm.h"  // the reference results only
// Shared compile work: what the llvm backend did (kernels compiled here and
// received) and the compile cache's write counter.
#include "codegen/compile_cache.h"
#include "codegen/jit.h"
#include "codegen/llvm_backend.h"
#include "output_graph/output_graph.h"
#include "output_graph/source.h"
#include "runtime/tensor/ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using kiln::Tensor;
using kiln::Value;

int g_rank = 0;
int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("[rank %d] %s %s\n", g_rank, ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failures;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// f: one graph. g: a graph break (print) between two graphs, so its resume
// function is a second compiled frame. h: no graph at all (it still takes
// part in the compiler collective).
const char* kProgram = R"(
.func f(x)
    LOAD_FAST x
    LOAD_CONST 2.0
    BINARY_OP *
    LOAD_CONST 1.0
    BINARY_OP +
    LOAD_METHOD sum
    LOAD_CONST 0
    CALL_METHOD 1
    RETURN_VALUE
.end

.func g(x)
  .locals y
    LOAD_FAST x
    LOAD_CONST 3.0
    BINARY_OP *
    STORE_FAST y
    LOAD_GLOBAL print
    LOAD_CONST "between the graphs"
    CALL 1
    POP_TOP
    LOAD_FAST y
    LOAD_CONST 1.0
    BINARY_OP -
    LOAD_METHOD sum
    LOAD_CONST 1
    CALL_METHOD 1
    RETURN_VALUE
.end

.func h(x)
    LOAD_FAST x
    RETURN_VALUE
.end
)";

// x[i][j] = 0.5 i - j + rank: different values per rank, exact in float.
Tensor input(int64_t rows, int rank) {
  std::vector<float> v;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < 3; ++j) v.push_back(0.5f * float(i) - float(j) + float(rank));
  return Tensor::from_vector(v, {rows, 3});
}

std::vector<double> elements(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<double> out;
  for (int64_t i = 0; i < c.numel(); ++i) out.push_back(double(c.data<float>()[i]));
  return out;
}

bool same_tensor(const Value& a, const Value& b) {
  if (!a.is(kiln::runtime::Kind::Tensor) || !b.is(kiln::runtime::Kind::Tensor)) return false;
  Tensor x = a.as_tensor(), y = b.as_tensor();
  if (x.sizes() != y.sizes()) return false;
  std::vector<double> p = elements(x), q = elements(y);
  for (size_t i = 0; i < p.size(); ++i)
    if (std::fabs(p[i] - q[i]) > 1e-5 * (1 + std::fabs(q[i]))) return false;
  return true;
}

kiln::Options quiet(bool compiler, bool guard) {
  kiln::Options o;
  o.stdout_sink = [](std::string_view) {};
  o.enable_compiler_collectives = compiler;
  o.enable_guard_collectives = guard;
  return o;
}

// The oracle: the original function on the VM. The one thing the public
// header does not offer (an embedder has no need to bypass the compiler).
Value on_vm(const Value& fn, const std::vector<Value>& args) {
  kiln::interpreter::VMOptions vo;
  vo.stdout_sink = [](std::string_view) {};
  kiln::interpreter::VM vm(vo);
  return vm.call(fn, kiln::runtime::CallArgs{args.data(), args.size(), nullptr});
}

// Every rank's 8 bytes, through the compile group itself (no MPI in the test).
std::vector<uint64_t> all_gather_u64(kiln::collectives::ProcessGroup& group, uint64_t mine) {
  uint8_t b[8];
  std::memcpy(b, &mine, 8);
  auto far = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto all = group.all_gather_bytes(std::span<const uint8_t>(b, 8), "test all_gather_u64", far);
  std::vector<uint64_t> out;
  for (int r = 0; r < all.size(); ++r) {
    uint64_t v = 0;
    std::memcpy(&v, all.of(r).data(), 8);
    out.push_back(v);
  }
  return out;
}

void barrier(kiln::collectives::ProcessGroup& group) { all_gather_u64(group, 0); }

// What a report says about the compile: every graph's code and every
// entry's guards. Ranks that compiled the same thing have the same text.
std::string compiled_text(const kiln::ExplainReport& r) {
  std::string s;
  for (const auto& g : r.graphs) s += g + "\n--\n";
  for (const auto& g : r.guards) s += g + "\n--\n";
  return s;
}

struct Traced {
  std::string text;  // f's, g's and h's graphs and guards
  int collectives = 0;
  int restarts = 0;
  bool results_ok = true;
};

Traced trace_all(const kiln::Program& p, int rank, bool collectives) {
  Traced t;
  Tensor x = input(4 + rank, rank);
  for (const char* name : {"f", "g", "h"}) {
    Value fn = p.global(name);
    kiln::ExplainReport r = kiln::explain(fn, {Value::tensor(x)}, quiet(collectives, collectives));
    if (!r.error.empty()) std::printf("[rank %d] %s raised: %s\n", rank, name, r.error.c_str());
    t.results_ok = t.results_ok && r.error.empty() && same_tensor(r.result, on_vm(fn, {Value::tensor(x)}));
    t.text += std::string(name) + ":\n" + compiled_text(r);
    t.collectives += r.collective_count;
    t.restarts += r.collective_restarts;
    if (rank == 0 && std::string(name) == "g") std::printf("explain(g) on rank 0:\n%s", r.str().c_str());
  }
  return t;
}

void mode_agree(kiln::collectives::ProcessGroup& world, const kiln::Program& p) {
  int r = world.rank(), n = world.size();
  Traced t = trace_all(p, r, true);
  check(t.results_ok, "f, g and h agree with the VM on this rank's input (size " + std::to_string(4 + r) + ")");
  std::vector<uint64_t> hashes = all_gather_u64(world, std::hash<std::string>{}(t.text));
  bool same = std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; });
  check(same, "every rank has the same graphs and guards");
  if (!same) std::printf("[rank %d] compiled:\n%s", r, t.text.c_str());
  if (n > 1) {
    // f, g, g's resume function and h: four compiled frames, four exchanges,
    // h's included although it makes no graph.
    check(t.collectives == 4, "one compiler collective per compiled frame, graphless h included (" +
                                  std::to_string(t.collectives) + ")");
    check(t.restarts >= 1, "the differing sizes restarted the analysis (" + std::to_string(t.restarts) + ")");
    check(contains(t.text, "TensorMatch L['x'] f32[s0, 3]") || contains(t.text, "TENSOR_MATCH L['x'] f32[s0, 3]"),
          "dim 0 of x is dynamic in the guards");
  } else {
    check(t.collectives == 0, "a single rank makes no exchange");
  }

  // The cached path: a second call with this rank's size hits on every rank.
  kiln::CompiledFunction f = kiln::compile(p.global("f"), quiet(true, true));
  Tensor x = input(4 + r, r);
  Value a = f({Value::tensor(x)});
  Value b = f({Value::tensor(x)});
  check(same_tensor(a, b) && same_tensor(a, on_vm(p.global("f"), {Value::tensor(x)})),
        "compiled calls agree with the VM");
  check(kiln::cache_entries(p.global("f")) == 1, "one entry serves this rank's size");
}

void mode_diverge(kiln::collectives::ProcessGroup& world, const kiln::Program& p) {
  int r = world.rank(), n = world.size();
  Traced t = trace_all(p, r, false);
  check(t.results_ok, "f, g and h agree with the VM");
  check(t.collectives == 0, "no collective ran");
  std::vector<uint64_t> hashes = all_gather_u64(world, std::hash<std::string>{}(t.text));
  bool same = std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; });
  if (n > 1) {
    check(!same, "without the collective the ranks' guards differ (each specialised on its own size)");
    check(contains(t.text, "f32[" + std::to_string(4 + r) + ", 3]"), "this rank's guard holds its own size");
  } else {
    check(same, "a single rank agrees with itself");
  }
}

void mode_lone(kiln::collectives::ProcessGroup& world, const kiln::Program& p) {
  int r = world.rank(), n = world.size();
  bool lone = r == n - 1;
  kiln::CompiledFunction f = kiln::compile(p.global("f"), quiet(true, true));
  auto call = [&](int64_t rows, const std::string& what) {
    Tensor x = input(rows, r);
    Value y = f({Value::tensor(x)});
    check(same_tensor(y, on_vm(p.global("f"), {Value::tensor(x)})), what + ": the result agrees with the VM");
  };
  call(4, "call 1 (size 4 everywhere)");
  size_t e1 = kiln::cache_entries(p.global("f"));
  call(lone ? 6 : 4, "call 2 (size 6 on the last rank only)");
  size_t e2 = kiln::cache_entries(p.global("f"));
  call(7, "call 3 (size 7 everywhere)");
  size_t e3 = kiln::cache_entries(p.global("f"));
  std::vector<uint64_t> counts = all_gather_u64(world, e1 * 100 + e2 * 10 + e3);
  bool same = std::all_of(counts.begin(), counts.end(), [&](uint64_t c) { return c == counts[0]; });
  check(same, "every rank has the same number of entries after each call");
  check(e1 == 1, "call 1 compiled once");
  check(e2 == 2, "call 2: " + std::string(lone ? "this rank missed" : "this rank hit") +
                     ", and every rank recompiled");
  // Size 7 is new on every rank: only a dynamic dim 0 serves it, so a hit
  // here means every rank's recompile agreed to make it dynamic.
  check(e3 == 2, "call 3 hits the agreed dynamic entry on every rank (" + std::to_string(e3) + " entries)");
}

// A rank that never arrives: the others must raise CollectiveTimeout within
// the limit, naming it. `guard`: the first collective of the call is the
// guard collective; otherwise the compiler collective after the analysis.
void expect_timeout(const kiln::Program& p, int missing, double limit, bool guard) {
  kiln::CompiledFunction f = kiln::compile(p.global("f"), quiet(true, guard));
  auto t0 = std::chrono::steady_clock::now();
  try {
    f({Value::tensor(input(4 + g_rank, g_rank))});
    check(false, "the compile finished although a rank never came");
  } catch (const kiln::collectives::CollectiveTimeout& e) {
    double s = seconds_since(t0);
    check(s < limit + 1.5, "CollectiveTimeout after " + std::to_string(s) + " s (limit " + std::to_string(limit) + ")");
    check(contains(e.what(), "rank " + std::to_string(missing)), std::string("it names the missing rank: ") + e.what());
    check(contains(e.what(), guard ? "guard_outcome" : "compiler_state"),
          std::string("in the ") + (guard ? "guard" : "compiler") + " collective");
  } catch (const std::exception& e) {
    check(false, std::string("another error instead of CollectiveTimeout: ") + e.what());
  }
}

void mode_raise(kiln::collectives::ProcessGroup& world, const kiln::Program& p) {
  int r = world.rank(), n = world.size();
  double limit = kiln::Options{}.collective_timeout_s;
  if (n < 2) return check(true, "raise needs two ranks; nothing to test on one");
  if (r == n - 1) {
    try {
      kiln::compile(p.global("f"), quiet(true, false))({Value::integer(1), Value::integer(2)});
      check(false, "a call with the wrong arity raised nothing");
    } catch (const kiln::Error& e) {
      check(true, std::string("this rank raised before its compile and leaves: ") + e.what());
    }
    return;
  }
  expect_timeout(p, n - 1, limit, /*guard=*/false);
}

void mode_stall(kiln::collectives::ProcessGroup& world, const kiln::Program& p) {
  int r = world.rank(), n = world.size();
  double limit = kiln::Options{}.collective_timeout_s;
  if (n < 2) return check(true, "stall needs two ranks; nothing to test on one");
  if (r != n - 1) return expect_timeout(p, n - 1, limit, /*guard=*/true);
  std::this_thread::sleep_for(std::chrono::duration<double>(limit * 2.5));
  // The others gave up. This rank may still complete its first exchange
  // (the others' parts were sent before they left), but it must fail by
  // its next compile, never hang.
  kiln::CompiledFunction f = kiln::compile(p.global("f"), quiet(true, true));
  std::string how = "no error";
  for (int64_t rows : {4, 9}) {
    try {
      f({Value::tensor(input(rows, r))});
    } catch (const kiln::collectives::CollectiveTimeout& e) {
      how = std::string("at the compile for size ") + std::to_string(rows) + ": " + e.what();
      break;
    } catch (const kiln::Error& e) {
      how = std::string("(poisoned group) ") + e.what();
      break;
    }
  }
  check(how != "no error", "the late rank fails too, " + how);
}

// Whole-frame compile time: the first call after reset() (trace, the
// collectives, the restart, the backend, running it once), with the
// compiler collective off and on, every rank starting together; the median
// over `iters` compiles of the slowest rank's time. Each compile's frame has
// its own constant (the same on every rank), so the llvm backend really
// runs LLVM instead of finding the kernels in its cache; the eager backend
// shows the tracer alone, where an exchange weighs most.
void mode_bench(kiln::collectives::ProcessGroup& world, const kiln::Program&, int iters) {
  int r = world.rank(), n = world.size();
  // A salt from rank 0, so no run finds last run's kernels in the disk cache.
  uint64_t salt = all_gather_u64(
      world, uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000003)[0];
  uint64_t serial = 0;
  auto fresh_g = [&]() {
    std::string text = kProgram;
    std::string c = std::to_string(3.0 + double((salt * 7919 + ++serial) % 1000003) * 1e-6);
    text.replace(text.find("LOAD_CONST 3.0"), 14, "LOAD_CONST " + c);
    return kiln::assemble(text, "mpi_compile_bench.kbc");
  };
  auto max_over_ranks = [&](double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    double worst = 0;
    for (uint64_t b : all_gather_u64(world, bits)) {
      double x;
      std::memcpy(&x, &b, 8);
      worst = std::max(worst, x);
    }
    return worst;
  };
  auto median_ms = [&](bool compiler, bool guard, bool differ, const std::string& backend) {
    Tensor x = input(differ ? 4 + r : 4, r);
    std::vector<double> ms;
    for (int i = 0; i < iters; ++i) {
      kiln::Program prog = fresh_g();
      kiln::reset();
      kiln::Options o = quiet(compiler, guard);
      o.backend = backend;
      kiln::CompiledFunction f = kiln::compile(prog.global("g"), o);
      barrier(world);
      auto t0 = std::chrono::steady_clock::now();
      f({Value::tensor(x)});
      // The program goes on at the pace of its slowest rank (its next
      // collective waits for it), with or without kiln's collectives.
      ms.push_back(max_over_ranks(seconds_since(t0) * 1e3));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  // The exchange itself in the same run: 8 bytes through the compile group.
  std::vector<double> us;
  for (int i = 0; i < iters * 20; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    barrier(world);
    us.push_back(seconds_since(t0) * 1e6);
  }
  std::sort(us.begin(), us.end());
  double exchange_us = max_over_ranks(us[us.size() / 2]);
  if (r == 0) std::printf("BENCH ranks=%d exchange_8B_median_us=%.1f\n", n, exchange_us);
  for (const std::string backend : {"llvm", "eager"}) {
    median_ms(false, false, false, backend);  // warm up (allocators, LLVM's first use)
    double off = median_ms(false, false, false, backend);
    double on = median_ms(true, false, false, backend);
    double off_d = median_ms(false, false, true, backend);
    double on_d = median_ms(true, false, true, backend);
    double both_d = median_ms(true, true, true, backend);
    if (r == 0)
      std::printf("BENCH ranks=%d backend=%s iters=%d frame=g (2 graphs, 1 break: 2 compiled frames) "
                  "compile_ms: same sizes off=%.3f on=%.3f (%.2fx) | sizes differ per rank off=%.3f "
                  "on=%.3f (%.2fx, analysis restarted) on+guard=%.3f (%.2fx)\n",
                  n, backend.c_str(), iters, off, on, on / off, off_d, on_d, on_d / off_d, both_d,
                  both_d / off_d);
    check(off > 0 && on > 0 && off_d > 0 && on_d > 0 && both_d > 0, "the " + backend + " benchmark ran");
  }
}

// ---- shared compile work ------------------------------------------------

constexpr int kShareKernels = 36;

// m(x): a chain of kShareKernels row-wise kernels, softmax and log_softmax
// in turn, each with its own constants (from `salt`), so a new salt is a
// program no cache has seen. Each kernel is its own loop nest: the next
// one needs the previous one's rows whole.
kiln::Program many_kernel_program(uint64_t salt, int kernels = kShareKernels) {
  auto L = [](const std::string& s) { return "    " + s + "\n"; };
  std::string b = ".func m(x)\n  .locals y\n" + L("LOAD_FAST x") + L("STORE_FAST y");
  for (int i = 0; i < kernels; ++i) {
    char c1[32];
    std::snprintf(c1, sizeof c1, "%.12f", 1.0 + double((salt * 2654435761ull) % 100000007ull) * 1e-9 + 1e-3 * i);
    const std::string c2 = std::to_string(0.25 + 0.001 * i);
    if (i % 2 == 0)
      b += L("LOAD_GLOBAL softmax") + L("LOAD_FAST y") + L("LOAD_CONST " + std::string(c1)) + L("BINARY_OP *") +
           L("LOAD_CONST " + c2) + L("BINARY_OP +") + L("LOAD_CONST -1") + L("CALL 2") + L("STORE_FAST y");
    else
      b += L("LOAD_GLOBAL log_softmax") + L("LOAD_GLOBAL tanh") + L("LOAD_FAST y") + L("CALL 1") +
           L("LOAD_CONST " + std::string(c1)) + L("BINARY_OP *") + L("LOAD_CONST -1") + L("CALL 2") + L("STORE_FAST y");
  }
  b += L("LOAD_FAST y") + L("RETURN_VALUE") + ".end\n";
  return kiln::assemble(b, "many_kernels_" + std::to_string(salt) + ".kbc");
}

Tensor share_input(int rank) {
  std::vector<float> v;
  for (int64_t i = 0; i < 64 * 96; ++i) v.push_back(float((i * 37 + rank * 11) % 101) * 0.03f - 1.5f);
  return Tensor::from_vector(v, {64, 96});
}

uint64_t disk_writes() {
  return kiln::codegen::CompileCache::global(kiln::codegen::codegen_environment()).stats().writes;
}

// One compile and call of m with the llvm backend: its result, and the
// backend's report of that compile.
struct ShareRun {
  Value result;
  kiln::codegen::BackendReport report;
};
ShareRun run_many(const kiln::Program& prog, const Tensor& x, bool collectives, bool share = true) {
  kiln::Options o = quiet(collectives, false);
  o.share_compile_work = share;
  kiln::CompiledFunction f = kiln::compile(prog.global("m"), o);
  ShareRun r;
  r.result = f({Value::tensor(x)});
  r.report = kiln::codegen::last_report();
  return r;
}

Value eager_many(const kiln::Program& prog, const Tensor& x) {
  kiln::Options o = quiet(false, false);
  o.backend = "eager";
  return kiln::compile(prog.global("m"), o)({Value::tensor(x)});
}

std::string describe(const kiln::codegen::BackendReport& r) {
  return "kernels " + std::to_string(r.kernels) + ", ranks " + std::to_string(r.ranks) + ", compiled here " +
         std::to_string(r.kernels_compiled) + ", received " + std::to_string(r.kernels_received) + ", objects " +
         std::to_string(r.objects) + ", cache " + r.cache;
}

void mode_share(kiln::collectives::ProcessGroup& world, uint64_t salt) {
  int r = world.rank(), n = world.size();
  Tensor x = share_input(r);

  // 1. Collectives on: each rank compiles its share, links every rank's.
  kiln::Program prog = many_kernel_program(salt);
  uint64_t writes0 = disk_writes();
  kiln::reset();
  ShareRun run = run_many(prog, x, true);
  const auto& rep = run.report;
  std::printf("[rank %d] shared compile: %s, exchanges %.2f ms, compile %.1f ms\n", r, describe(rep).c_str(),
              rep.exchange_ms, rep.compile_ms);
  check(!rep.fell_back && rep.kernels >= 32, "the model is one graph of 32+ kernels (" + describe(rep) + ")");
  check(same_tensor(run.result, eager_many(prog, x)), "the result equals the eager backend's");
  check(rep.cache == "compiled", "the kernels were compiled in this run (cache: " + rep.cache + ")");
  std::vector<uint64_t> compiled = all_gather_u64(world, rep.kernels_compiled);
  uint64_t sum = 0;
  for (uint64_t c : compiled) sum += c;
  check(sum == rep.kernels, "every kernel was compiled by exactly one rank (" + std::to_string(sum) + " of " +
                                std::to_string(rep.kernels) + ")");
  check(rep.kernels_compiled + rep.kernels_received == rep.kernels, "this rank has every kernel");
  if (n > 1) {
    check(rep.ranks == n, "the kernels were split across " + std::to_string(n) + " ranks");
    uint64_t fair = (rep.kernels + uint64_t(n) - 1) / uint64_t(n);
    check(rep.kernels_compiled >= 1 && rep.kernels_compiled <= fair + 2,
          "this rank compiled only its share (" + std::to_string(rep.kernels_compiled) + ", fair share " +
              std::to_string(fair) + ")");
    check(rep.objects == size_t(n), "one object file per rank's share was linked (" + std::to_string(rep.objects) + ")");
  } else {
    check(rep.ranks == 1 && rep.kernels_compiled == rep.kernels && rep.objects >= 1,
          "a single rank compiles everything (in parts on its thread pool)");
  }
  uint64_t writes = 0;
  for (uint64_t w : all_gather_u64(world, disk_writes() - writes0)) writes += w;
  check(writes == 1, "the disk cache was filled once (" + std::to_string(writes) + " writes over all ranks)");

  // The second call in the same process: the loaded kernels, no exchange of code.
  kiln::reset();
  ShareRun again = run_many(prog, x, true);
  check(again.report.cache == "process" && again.report.kernels_compiled == 0 && again.report.ranks == 1,
        "a recompile of the same graph reuses the loaded kernels (" + describe(again.report) + ")");
  check(same_tensor(again.result, run.result), "and gives the same result");

  if (n > 1) {
    // 2. A corrupted share: the last rank flips a byte of what it sends.
    kiln::Program bad = many_kernel_program(salt + 1);
    std::string victim = std::to_string(n - 1);
    setenv("KILN_TEST_CORRUPT_KERNEL_BLOB", victim.c_str(), 1);
    kiln::reset();
    std::string error;
    try {
      run_many(bad, x, true);
    } catch (const kiln::Error& e) {
      error = e.what();
    }
    unsetenv("KILN_TEST_CORRUPT_KERNEL_BLOB");
    check(contains(error, "rank " + victim) && contains(error, "rejected and not linked") &&
              contains(error, "corrupt"),
          "a corrupted share is refused on every rank, naming rank " + victim + ": " + error);
    // Nothing of it was linked or cached: the same program compiles afresh.
    kiln::reset();
    ShareRun retry = run_many(bad, x, true);
    check(retry.report.cache == "compiled" && retry.report.ranks == n,
          "after the refusal the program compiles afresh, shared (" + describe(retry.report) + ")");
    check(same_tensor(retry.result, eager_many(bad, x)), "and its result equals eager");

    // 3. Collectives off, or sharing off: every rank compiles everything.
    for (bool collectives : {false, true}) {
      kiln::Program lone = many_kernel_program(salt + (collectives ? 3 : 2));
      kiln::reset();
      ShareRun alone = run_many(lone, x, collectives, /*share=*/!collectives);
      check(alone.report.ranks == 1 && alone.report.kernels_compiled == alone.report.kernels &&
                alone.report.kernels_received == 0,
            std::string(collectives ? "share_compile_work off" : "collectives off") +
                ": this rank compiled every kernel itself (" + describe(alone.report) + ")");
      check(same_tensor(alone.result, eager_many(lone, x)), "and its result equals eager");
    }

    // 4. Different programs on different ranks (a rank-dependent constant):
    // the plan sees it and every rank compiles its own, no mismatch, no hang.
    kiln::Program mine = many_kernel_program(salt + 10 + uint64_t(r), 8);
    kiln::reset();
    ShareRun own = run_many(mine, x, true);
    check(own.report.ranks == 1 && own.report.kernels_compiled == own.report.kernels,
          "ranks with different graphs each compile their own (" + describe(own.report) + ")");
    check(same_tensor(own.result, eager_many(mine, x)), "and get their own correct result");
  }
}

// A new process on the cache that `share S` filled: no rank compiles.
void mode_share_warm(kiln::collectives::ProcessGroup& world, uint64_t salt) {
  int r = world.rank();
  Tensor x = share_input(r);
  kiln::Program prog = many_kernel_program(salt);
  ShareRun run = run_many(prog, x, true);
  std::printf("[rank %d] warm start: %s, compile %.2f ms\n", r, describe(run.report).c_str(), run.report.compile_ms);
  check(run.report.cache == "disk" && run.report.kernels_compiled == 0 && run.report.kernels_received == 0,
        "the kernels load from the disk cache without compiling or exchanging code (" + describe(run.report) + ")");
  check(same_tensor(run.result, eager_many(prog, x)), "the result equals the eager backend's");
}

// Wall-clock compile time of the many-kernel model: the first call after
// reset() of a model no cache has seen (trace, the compiler collective, the
// backend with its shared compile, one run), every rank starting together,
// the slowest rank's time; median over `iters`. Also with sharing off
// (every rank compiles everything) at the same rank count.
void mode_sharebench(kiln::collectives::ProcessGroup& world, int iters) {
  int r = world.rank(), n = world.size();
  uint64_t salt = all_gather_u64(
      world, uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000003)[0];
  Tensor x = share_input(r);
  auto max_over_ranks = [&](double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    double worst = 0;
    for (uint64_t b : all_gather_u64(world, bits)) {
      double y;
      std::memcpy(&y, &b, 8);
      worst = std::max(worst, y);
    }
    return worst;
  };
  uint64_t serial = 0;
  struct Stats {
    double wall = 0, compile = 0, exchange = 0;
    kiln::codegen::BackendReport last;
  };
  auto measure = [&](bool share) {
    std::vector<double> wall, compile, exchange;
    Stats s;
    for (int i = 0; i < iters; ++i) {
      kiln::Program prog = many_kernel_program(salt * 1000 + ++serial);
      kiln::reset();
      kiln::Options o = quiet(true, false);
      o.share_compile_work = share;
      kiln::CompiledFunction f = kiln::compile(prog.global("m"), o);
      barrier(world);
      auto t0 = std::chrono::steady_clock::now();
      f({Value::tensor(x)});
      double ms = seconds_since(t0) * 1e3;
      s.last = kiln::codegen::last_report();
      wall.push_back(max_over_ranks(ms));
      compile.push_back(max_over_ranks(s.last.compile_ms));
      exchange.push_back(max_over_ranks(s.last.exchange_ms));
    }
    for (auto* v : {&wall, &compile, &exchange}) std::sort(v->begin(), v->end());
    s.wall = wall[wall.size() / 2];
    s.compile = compile[compile.size() / 2];
    s.exchange = exchange[exchange.size() / 2];
    return s;
  };
  measure(true);  // warm up: the JIT's start-up, allocators
  Stats on = measure(true);
  Stats off = measure(false);
  if (r == 0) {
    std::printf("SHAREBENCH ranks=%d kernels=%zu iters=%d shared: first_call_ms=%.1f backend_compile_ms=%.1f "
                "exchange_ms=%.2f load_ms=%.2f compiled_here=%zu objects=%zu object_bytes=%zu | share off: "
                "first_call_ms=%.1f backend_compile_ms=%.1f\n",
                n, on.last.kernels, iters, on.wall, on.compile, on.exchange, on.last.load_ms,
                on.last.kernels_compiled, on.last.objects, on.last.object_bytes, off.wall, off.compile);
    std::fflush(stdout);
  }
  check(on.wall > 0 && off.wall > 0, "the shared compile benchmark ran");
}

// The cost of splitting, in one process: the many-kernel program's kernels
// compiled as P shares one after another (what P ranks do in parallel) and
// linked as P objects, under a scripted SharedCompile whose "other ranks"
// are this process. Prints per P: the sum and the largest of the share
// compile times, and the link time.
void mode_sharelink(int kernels) {
  using kiln::output_graph::Arg;
  auto program = [&](double c) {
    kiln::output_graph::OutputGraph out;
    Tensor x = share_input(0);
    kiln::output_graph::Node* y = out.add_input(kiln::output_graph::local_source("x", 0), x);
    for (int i = 0; i < kernels; ++i) {
      auto* scaled = out.create_call(kiln::runtime::OpId::mul, {Arg::of(y), Arg::constant(Value::floating(c + 1e-4 * i))});
      y = out.create_call(i % 2 ? kiln::runtime::OpId::log_softmax : kiln::runtime::OpId::softmax,
                          {Arg::of(scaled), Arg::constant(Value::integer(-1))});
    }
    out.graph().output({Arg::of(y)});
    return kiln::codegen::schedule(out.graph());
  };
  uint64_t salt = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) % 100000;
  kiln::codegen::compile_kernels(program(0.5));  // the JIT's start-up
  for (int P : {1, 2, 4, 8, 16, 32, kernels}) {
    kiln::codegen::Program p = program(1.0 + 1e-7 * double(salt) + 0.01 * P);
    const std::string prefix = "kiln_" + kiln::codegen::cache_key({"kernels", kiln::codegen::kernel_fingerprint(p)}).hex();
    auto ranges = kiln::codegen::partition_kernels(p, P);
    std::vector<double> share_ms(size_t(P), 0.0);
    kiln::output_graph::SharedCompile sc;
    sc.rank = 0;
    sc.size = P;
    sc.agree = [](uint64_t, uint64_t, uint32_t, bool) { return 0; };
    sc.exchange = [&](const kiln::output_graph::KernelPart& mine) {
      std::vector<kiln::output_graph::KernelPart> all{mine};
      for (int r = 1; r < P; ++r) {
        auto [b, e] = ranges[size_t(r)];
        auto t0 = std::chrono::steady_clock::now();
        all.push_back({b, e, b < e ? kiln::codegen::compile_object(p, prefix, nullptr, b, e) : std::string()});
        share_ms[size_t(r)] = seconds_since(t0) * 1e3;
      }
      return all;
    };
    kiln::codegen::CompiledKernels k;
    auto t0 = std::chrono::steady_clock::now();
    if (P == 1) {
      k = kiln::codegen::compile_kernels(p);
      share_ms[0] = seconds_since(t0) * 1e3 - k.load_ms;
    } else {
      kiln::output_graph::SharedCompileScope scope(&sc);
      k = kiln::codegen::compile_kernels(p);
      share_ms[0] = k.lower_ms + k.optimize_ms + k.codegen_ms;
    }
    double sum = 0, worst = 0;
    for (double m : share_ms) sum += m, worst = std::max(worst, m);
    std::printf("SHARELINK kernels=%zu shares=%d objects=%zu object_bytes=%zu compile_sum_ms=%.1f "
                "largest_share_ms=%.1f link_ms=%.2f\n",
                p.kernels.size(), P, k.objects, k.object_bytes, sum, worst, k.load_ms);
    std::fflush(stdout);
  }
  check(true, "the split-cost measurement ran");
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    auto world = kiln::distributed::init();
    g_rank = world->rank();
    kiln::Program p = kiln::assemble(kProgram, "mpi_compile.kbc");
    if (mode == "agree") mode_agree(*world, p);
    else if (mode == "diverge") mode_diverge(*world, p);
    else if (mode == "lone") mode_lone(*world, p);
    else if (mode == "raise") mode_raise(*world, p);
    else if (mode == "stall") mode_stall(*world, p);
    else if (mode == "bench") mode_bench(*world, p, argc > 2 ? std::atoi(argv[2]) : 30);
    else if (mode == "share") mode_share(*world, argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1);
    else if (mode == "share_warm") mode_share_warm(*world, argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1);
    else if (mode == "sharebench") mode_sharebench(*world, argc > 2 ? std::atoi(argv[2]) : 5);
    else if (mode == "sharelink") mode_sharelink(argc > 2 ? std::atoi(argv[2]) : 64);
    else {
      std::fprintf(stderr, "usage: kiln_mpi_compile_tests agree|diverge|lone|raise|stall|bench [iters]|share S|share_warm S|sharebench [iters]|sharelink [kernels]\n");
      return 2;
    }
  } catch (const std::exception& e) {
    check(false, std::string("uncaught: ") + e.what());
  }
  std::printf("[rank %d] %s: %s (%d failures)\n", g_rank, mode.c_str(), g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}

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
//
// Each rank prints PASS/FAIL lines and exits non-zero on any failure.
#include <kiln/kiln.h>

#include "interpreter/vm.h"  // the reference results only

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
    else {
      std::fprintf(stderr, "usage: kiln_mpi_compile_tests agree|diverge|lone|raise|stall|bench [iters]\n");
      return 2;
    }
  } catch (const std::exception& e) {
    check(false, std::string("uncaught: ") + e.what());
  }
  std::printf("[rank %d] %s: %s (%d failures)\n", g_rank, mode.c_str(), g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}

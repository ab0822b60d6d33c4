// Multi-rank tests of collectives/, run by ctest under `mpirun -np 2|3`, and
// once without mpirun (then init() is the single-rank world). Each mode is
// its own mpirun job because a timeout leaves its group unusable:
//
//   kiln_mpi_tests gather     every kind, every rank's object in rank order
//   kiln_mpi_tests mismatch   disagreeing headers -> CollectiveMismatch everywhere
//   kiln_mpi_tests stall      the last rank sleeps past the timeout
//   kiln_mpi_tests raise      the last rank raises and never arrives
//   kiln_mpi_tests subgroup   a group of some world ranks, in a chosen order
//   kiln_mpi_tests bench [N]  allgather time of 64 B: MPI itself, kiln's bytes, all_gather_object
//
// Each rank prints PASS/FAIL lines and exits non-zero on any failure.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectives/all_gather_object.h"
#include "collectives/codec.h"
#include "collectives/distributed.h"
#include "collectives/errors.h"
#include "collectives/kernel_blob.h"

using namespace kiln;
using namespace kiln::collectives;

namespace {

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

const Hash128 kGraph{0x1111, 0x2222};

CompilerLocalState state_of(int rank) {
  CompilerLocalState s;
  s.frame_id = "f";
  s.inputs.push_back({"L['x']", {rank + 1, 16}});
  s.inputs.push_back({"L['y']", std::vector<int64_t>(static_cast<size_t>(rank), -rank)});
  return s;
}

GuardOutcome outcome_of(int rank) {
  GuardOutcome g;
  g.frame_id = "f";
  g.missed = rank % 2 == 1;
  if (g.missed) g.reason = "rank " + std::to_string(rank) + " saw L['x'] size 1 change";
  return g;
}

KernelBlob blob_of(int rank) {
  std::vector<uint8_t> obj(static_cast<size_t>(rank + 1) * 100000);
  for (size_t i = 0; i < obj.size(); ++i) obj[i] = static_cast<uint8_t>(i * 13 + rank);
  return make_kernel_blob(kGraph, static_cast<uint32_t>(rank * 4), static_cast<uint32_t>(rank * 4 + 4), obj);
}

template <class T, class Make>
void gather_and_check(ProcessGroup& g, Make make, const char* name) {
  std::vector<T> out;
  all_gather_object(out, make(g.rank()), g, CollectiveHeader{"f", 1, kGraph});
  bool ok = out.size() == static_cast<size_t>(g.size());
  for (int r = 0; ok && r < g.size(); ++r) ok = out[static_cast<size_t>(r)] == make(r);
  check(ok, std::string("all_gather_object(") + name + ") gives every rank's object in rank order");
}

void mode_gather() {
  auto g = init();
  int n = g->size();
  if (launched_by_mpi()) {
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    check(n == world, "the world group has MPI_COMM_WORLD's size");
    check(kiln_initialised_mpi(), "init() initialised MPI (so it finalizes it at exit)");
    check(mpi_thread_level() >= MPI_THREAD_SINGLE, "the provided thread level is recorded (" +
                                                       std::to_string(mpi_thread_level()) + ")");
  } else {
    check(n == 1, "outside mpirun the world is one rank");
  }
  check(init() == g && default_group() == g, "init() is idempotent and sets the default group");
  gather_and_check<CompilerLocalState>(*g, state_of, "compiler_state");
  gather_and_check<GuardOutcome>(*g, outcome_of, "guard_outcome");
  gather_and_check<KernelBlob>(*g, blob_of, "kernel_blob");

  std::vector<KernelBlob> blobs;
  all_gather_object(blobs, blob_of(g->rank()), *g, CollectiveHeader{"f", 2, kGraph});
  bool verified = true;
  for (const KernelBlob& b : blobs) {
    try {
      verify_kernel_blob(b, kGraph);
    } catch (const Error&) {
      verified = false;
    }
  }
  check(verified, "every received kernel blob passes verify_kernel_blob");

  // Raw bytes of mixed sizes: empty, inline (fits the first exchange) and
  // large (needs the second), all in one collective.
  {
    auto bytes_of = [](int rank) {
      std::vector<uint8_t> b(static_cast<size_t>(rank) * 200);
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i + static_cast<size_t>(rank));
      return b;
    };
    GatheredBytes all = g->all_gather_bytes(bytes_of(g->rank()), "mixed sizes",
                                            Clock::now() + std::chrono::seconds(30));
    bool same = all.size() == n;
    for (int r = 0; same && r < n; ++r) {
      auto want = bytes_of(r);
      same = std::equal(want.begin(), want.end(), all.of(r).begin(), all.of(r).end());
    }
    check(same, "all_gather_bytes of 0, 200, 400 ... bytes gives every rank's bytes");
  }

  // Many back-to-back collectives of varying sizes stay in step.
  bool ok = true;
  for (uint64_t seq = 0; seq < 300 && ok; ++seq) {
    std::vector<CompilerLocalState> out;
    CompilerLocalState s = state_of(g->rank());
    s.inputs[0].sizes.assign(static_cast<size_t>((seq * 7 + static_cast<uint64_t>(g->rank())) % 50), static_cast<int64_t>(seq));
    all_gather_object(out, s, *g, CollectiveHeader{"loop", seq, kGraph});
    for (int r = 0; r < n && ok; ++r)
      ok = out[static_cast<size_t>(r)].inputs[0].sizes.size() == (seq * 7 + static_cast<uint64_t>(r)) % 50;
  }
  check(ok, "300 consecutive collectives of varying sizes stay in step");
}

// Runs `f`, expecting CollectiveMismatch whose message contains every part.
template <class F>
void expect_mismatch(F f, const std::vector<std::string>& parts, const std::string& what) {
  try {
    f();
    check(false, what + ": no CollectiveMismatch was raised");
  } catch (const CollectiveMismatch& e) {
    bool ok = contains(e.what(), "CollectiveMismatch in group");
    for (const std::string& p : parts) ok = ok && contains(e.what(), p);
    check(ok, what + ": " + e.what());
  } catch (const std::exception& e) {
    check(false, what + ": wrong error: " + e.what());
  }
}

void mode_mismatch() {
  auto g = init();
  int r = g->rank(), n = g->size();
  if (n < 2) {
    check(true, "mismatch needs two ranks; nothing to test on one");
    return;
  }
  // Rank 1 is in another frame; rank 2 (if any) has another graph.
  CollectiveHeader h{r == 1 ? "g" : "f", 3, r == 2 ? Hash128{9, 9} : kGraph};
  std::vector<std::string> parts{"rank 1 is compiling frame 'g' #3 but rank 0 is compiling frame 'f' #3"};
  if (n >= 3) parts.push_back("rank 2 has graph " + Hash128{9, 9}.hex());
  expect_mismatch([&] {
    std::vector<CompilerLocalState> out;
    all_gather_object(out, state_of(r), *g, h);
  }, parts, "different frames and graphs");

  // The last rank is one compile ahead.
  expect_mismatch([&] {
    std::vector<GuardOutcome> out;
    all_gather_object(out, outcome_of(r), *g, CollectiveHeader{"f", r == n - 1 ? 5u : 4u, kGraph});
  }, {"rank " + std::to_string(n - 1) + " is compiling frame 'f' #5 but rank 0 is compiling frame 'f' #4"},
     "different compile numbers");

  // Rank 1 is checking guards while the others gather compiler state.
  expect_mismatch([&] {
    CollectiveHeader hh{"f", 6, kGraph};
    if (r == 1) {
      std::vector<GuardOutcome> out;
      all_gather_object(out, outcome_of(r), *g, hh);
    } else {
      std::vector<CompilerLocalState> out;
      all_gather_object(out, state_of(r), *g, hh);
    }
  }, {"rank 1 is in all_gather_object(guard_outcome)", "rank 0 is in all_gather_object(compiler_state)"},
     "different collectives");

  // A mismatch is detected after a completed exchange: the group still works.
  gather_and_check<CompilerLocalState>(*g, state_of, "compiler_state after mismatches");
}

void expect_timeout_and_poison(ProcessGroup& g, int late_rank, double limit) {
  auto t0 = std::chrono::steady_clock::now();
  try {
    std::vector<CompilerLocalState> out;
    all_gather_object(out, state_of(g.rank()), g, CollectiveHeader{"f", 1, kGraph});
    check(false, "no error although rank " + std::to_string(late_rank) + " never arrived");
  } catch (const CollectiveTimeout& e) {
    double t = seconds_since(t0);
    std::string m = e.what();
    check(t >= limit * 0.9 && t < limit + 3.0, "timed out after " + std::to_string(t) + " s (limit " + std::to_string(limit) + " s)");
    bool named = std::find(e.missing().begin(), e.missing().end(), late_rank) != e.missing().end();
    check(contains(m, "CollectiveTimeout in group 'world'") && contains(m, "all_gather_object(compiler_state) for frame 'f' #1") &&
              contains(m, "gave up after") && named && contains(m, "rank " + std::to_string(late_rank)),
          "the timeout names group, operation, time and the missing rank: " + m);
  } catch (const std::exception& e) {
    check(false, std::string("wrong error: ") + e.what());
  }
  auto t1 = std::chrono::steady_clock::now();
  try {
    std::vector<GuardOutcome> out;
    all_gather_object(out, outcome_of(g.rank()), g, CollectiveHeader{"f", 2, kGraph});
    check(false, "a poisoned group ran another collective");
  } catch (const Error& e) {
    check(seconds_since(t1) < 0.5 && contains(e.what(), "cannot be used any more"),
          std::string("the poisoned group refuses at once: ") + e.what());
  }
}

void mode_stall() {
  auto g = init();
  int r = g->rank(), n = g->size();
  double limit = g->config().collective_timeout_s;
  if (n < 2) {
    check(true, "stall needs two ranks; nothing to test on one");
    return;
  }
  if (r == n - 1) {
    std::this_thread::sleep_for(std::chrono::duration<double>(limit * 2.5));
    // The others have given up. This rank may still complete the first
    // collective (a small message is one exchange, and the others' parts
    // were sent before they gave up), but it must fail by the next one,
    // never hang.
    std::string how = "no error";
    for (uint64_t seq = 1; seq <= 2; ++seq) {
      try {
        std::vector<CompilerLocalState> out;
        all_gather_object(out, state_of(r), *g, CollectiveHeader{"f", seq, kGraph});
      } catch (const CollectiveTimeout& e) {
        how = std::string("at collective #") + std::to_string(seq) + ": " + e.what();
        break;
      }
    }
    check(how != "no error", "the late rank times out too, " + how);
    return;
  }
  expect_timeout_and_poison(*g, n - 1, limit);
}

void user_code_that_raises() { throw_error(ErrorKind::RuntimeError, "user code failed on this rank"); }

void mode_raise() {
  auto g = init();
  int r = g->rank(), n = g->size();
  if (n < 2) {
    check(true, "raise needs two ranks; nothing to test on one");
    return;
  }
  if (r == n - 1) {
    try {
      user_code_that_raises();
      std::vector<CompilerLocalState> out;
      all_gather_object(out, state_of(r), *g, CollectiveHeader{"f", 1, kGraph});
    } catch (const Error& e) {
      check(true, std::string("this rank raised before the collective and leaves: ") + e.what());
    }
    return;  // exits (MPI_Finalize at exit) without joining
  }
  expect_timeout_and_poison(*g, n - 1, g->config().collective_timeout_s);
}

void mode_subgroup() {
  auto world = init();
  int r = world->rank(), n = world->size();
  if (n < 2) {
    auto one = new_group({0});
    gather_and_check<CompilerLocalState>(*one, state_of, "compiler_state in the single-rank group [0]");
    return;
  }
  std::vector<int> members{n - 1, 0};  // reversed: group rank 0 is the last world rank
  bool member = r == 0 || r == n - 1;
  if (member) {
    auto g = new_group(members);
    int expect_rank = r == n - 1 ? 0 : 1;
    check(g->size() == 2 && g->rank() == expect_rank, "the group has 2 ranks in the listed order");
    check(contains(g->describe_rank(0), "world rank " + std::to_string(n - 1)),
          "errors name world ranks: " + g->describe_rank(0));
    auto make = [&](int group_rank) { return state_of(members[static_cast<size_t>(group_rank)]); };
    gather_and_check<CompilerLocalState>(*g, make, "compiler_state in a sub-group");
    expect_mismatch([&] {
      std::vector<GuardOutcome> out;
      all_gather_object(out, outcome_of(r), *g, CollectiveHeader{r == 0 ? "g" : "f", 1, kGraph});
    }, {"group 'world[" + std::to_string(n - 1) + ", 0]'", "rank 1 (world rank 0) is compiling frame 'g' #1"},
       "mismatch in a sub-group");
  } else {
    try {
      new_group(members);
      check(false, "a rank outside the list made the group");
    } catch (const Error& e) {
      check(contains(e.what(), "is not in it"), std::string("a rank outside the list is refused: ") + e.what());
    }
  }
  // The world is unaffected by the sub-group's traffic.
  gather_and_check<GuardOutcome>(*world, outcome_of, "guard_outcome in the world after the sub-group");
}

void mode_bench(int iters) {
  auto g = init();
  int n = g->size();
  auto per_op = [&](auto&& op) {
    for (int i = 0; i < iters / 10 + 1; ++i) op(i);  // warm up
    if (launched_by_mpi()) MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) op(i);
    double us = seconds_since(t0) * 1e6 / iters;
    if (launched_by_mpi()) MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return us;
  };
  char send[64] = {};
  std::vector<char> recv(64 * static_cast<size_t>(n));
  double mpi_us = -1;
  if (launched_by_mpi())
    mpi_us = per_op([&](int) { MPI_Allgather(send, 64, MPI_BYTE, recv.data(), 64, MPI_BYTE, MPI_COMM_WORLD); });
  auto far = std::chrono::steady_clock::now() + std::chrono::hours(1);
  double bytes_us = per_op([&](int) { g->all_gather_bytes(std::span(reinterpret_cast<uint8_t*>(send), 64), "bench", far); });
  CompilerLocalState s;
  s.frame_id = "f";
  s.inputs.push_back({"L['x']", {8, 16}});
  size_t msg = encode(CollectiveHeader{"f", 0, kGraph}, s).size();
  double obj_us = per_op([&](int i) {
    std::vector<CompilerLocalState> out;
    all_gather_object(out, s, *g, CollectiveHeader{"f", static_cast<uint64_t>(i), kGraph});
  });
  if (g->rank() == 0)
    std::printf("BENCH ranks=%d iters=%d mpi_allgather_64B_us=%.3f kiln_allgather_bytes_64B_us=%.3f "
                "all_gather_object_compiler_state_us=%.3f message_bytes=%zu\n",
                n, iters, mpi_us, bytes_us, obj_us, msg);
  check(bytes_us > 0 && obj_us > 0, "the microbenchmark ran");
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  bool mpi = launched_by_mpi();
  try {
    auto world = init();
    g_rank = world->rank();
    if (mode == "gather") mode_gather();
    else if (mode == "mismatch") mode_mismatch();
    else if (mode == "stall") mode_stall();
    else if (mode == "raise") mode_raise();
    else if (mode == "subgroup") mode_subgroup();
    else if (mode == "bench") mode_bench(argc > 2 ? std::atoi(argv[2]) : 2000);
    else {
      std::fprintf(stderr, "usage: kiln_mpi_tests gather|mismatch|stall|raise|subgroup|bench [iters]\n");
      return 2;
    }
  } catch (const std::exception& e) {
    check(false, std::string("uncaught: ") + e.what());
  }
  if (!mpi) {
    int initialized = 1;
    MPI_Initialized(&initialized);
    check(!initialized, "without mpirun MPI was never initialised");
  }
  std::printf("[rank %d] %s: %s (%d failures)\n", g_rank, mode.c_str(), g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}

// Shared compile work (issue 7), codegen's side without MPI: the split of a
// program's kernels across ranks, and compile_kernels under a scripted
// SharedCompile (what output_graph offers the backend on a multi-rank
// compile): a share from "another rank" is linked only when it is the
// share this rank expects, and a refused exchange links nothing.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/compile_cache.h"
#include "codegen/jit.h"
#include "codegen/kernel_ir.h"
#include "output_graph/backend.h"
#include "output_graph/output_graph.h"
#include "output_graph/source.h"
#include "runtime/base/error.h"
#include "runtime/base/thread_pool.h"
#include "runtime/tensor/ops.h"
#include "runtime/value/tensor.h"

using namespace kiln;
using codegen::Kernel;
using codegen::KernelKind;
using codegen::Program;
using output_graph::Arg;
using runtime::OpId;
using runtime::Tensor;
using runtime::Value;

namespace {

Program program_of(const std::vector<KernelKind>& kinds, const std::vector<size_t>& exprs = {}) {
  Program p;
  for (size_t i = 0; i < kinds.size(); ++i) {
    Kernel k;
    k.kind = kinds[i];
    k.exprs.resize(i < exprs.size() ? exprs[i] : 3);
    p.kernels.push_back(std::move(k));
  }
  return p;
}

// A graph of `n` row-wise kernels (softmax / log_softmax in turn), scheduled.
// `c` makes the constants, so each value is a program no cache has seen.
Program chain_program(int n, double c) {
  output_graph::OutputGraph out;
  Tensor x = runtime::call_op(OpId::randn, {Value::integer(8), Value::integer(40)}).as_tensor();
  output_graph::Node* y = out.add_input(output_graph::local_source("x", 0), x);
  for (int i = 0; i < n; ++i) {
    output_graph::Node* scaled = out.create_call(OpId::mul, {Arg::of(y), Arg::constant(Value::floating(c + i))});
    y = out.create_call(i % 2 ? OpId::log_softmax : OpId::softmax, {Arg::of(scaled), Arg::constant(Value::integer(-1))});
  }
  out.graph().output({Arg::of(y)});
  return codegen::schedule(out.graph());
}

// Rank `rank` of `size`, with the other ranks' shares compiled here (what
// they would send), optionally tampered with by `tamper`.
struct Scripted {
  output_graph::SharedCompile sc;
  int agreed = 0, exchanged = 0;
};
std::unique_ptr<Scripted> scripted(const Program& p, int rank, int size, bool others_have,
                                   std::function<void(std::vector<output_graph::KernelPart>&)> tamper = {}) {
  auto s = std::make_unique<Scripted>();
  s->sc.rank = rank;
  s->sc.size = size;
  Scripted* self = s.get();
  s->sc.agree = [self, rank, others_have](uint64_t, uint64_t, uint32_t, bool have) {
    ++self->agreed;
    if (have && others_have) return -1;
    return have ? (rank == 0 ? 1 : 0) : rank;  // the lowest rank lacking it
  };
  s->sc.exchange = [self, &p, size, tamper](const output_graph::KernelPart& mine) {
    ++self->exchanged;
    auto ranges = codegen::partition_kernels(p, size);
    const std::string prefix = "kiln_" + codegen::cache_key({"kernels", codegen::kernel_fingerprint(p)}).hex();
    std::vector<output_graph::KernelPart> all;
    for (int r = 0; r < size; ++r) {
      if (r == self->sc.rank) {
        all.push_back(mine);
        continue;
      }
      auto [b, e] = ranges[size_t(r)];
      all.push_back({b, e, b < e ? codegen::compile_object(p, prefix, nullptr, b, e) : std::string()});
    }
    if (tamper) tamper(all);
    return all;
  };
  return s;
}

}  // namespace

TEST_CASE("partition_kernels: contiguous, covering, balanced by estimated cost", "[codegen][shared]") {
  std::vector<KernelKind> kinds;
  for (int i = 0; i < 37; ++i)
    kinds.push_back(i % 5 == 0 ? KernelKind::LogSoftmax : i % 3 == 0 ? KernelKind::Sum : KernelKind::Pointwise);
  Program p = program_of(kinds);
  uint64_t total = 0, biggest = 0;
  for (const Kernel& k : p.kernels) {
    total += codegen::kernel_compile_cost(k);
    biggest = std::max(biggest, codegen::kernel_compile_cost(k));
  }
  for (int parts : {1, 2, 3, 4, 7, 16, 37, 64}) {
    auto ranges = codegen::partition_kernels(p, parts);
    REQUIRE(ranges.size() == size_t(parts));
    uint32_t next = 0;
    for (auto [b, e] : ranges) {
      CHECK(b == next);
      CHECK(e >= b);
      uint64_t cost = 0;
      for (uint32_t i = b; i < e; ++i) cost += codegen::kernel_compile_cost(p.kernels[i]);
      CHECK(cost <= total / uint64_t(parts) + biggest);
      next = e;
    }
    CHECK(next == p.kernels.size());
    CHECK(ranges == codegen::partition_kernels(p, parts));  // deterministic
  }
  // Costly kernels weigh more: one softmax against many cheap pointwise ones.
  Program skew = program_of({KernelKind::LogSoftmax, KernelKind::Pointwise, KernelKind::Pointwise,
                             KernelKind::Pointwise, KernelKind::Pointwise});
  auto two = codegen::partition_kernels(skew, 2);
  CHECK(two[0] == std::pair<uint32_t, uint32_t>{0, 1});
  CHECK(two[1] == std::pair<uint32_t, uint32_t>{1, 5});
  // More ranks than kernels: some shares are empty, none overlap.
  auto many = codegen::partition_kernels(program_of({KernelKind::Sum, KernelKind::Sum}), 5);
  int nonempty = 0;
  for (auto [b, e] : many) nonempty += e > b;
  CHECK(nonempty == 2);
}

TEST_CASE("compile_kernels under a shared compile: own share compiled, the others linked", "[codegen][shared]") {
  Program p = chain_program(12, 1.0 + 1e-7 * double(std::random_device{}() % 100000));
  REQUIRE(p.kernels.size() == 12);
  auto s = scripted(p, 1, 3, false);
  codegen::CompiledKernels k;
  {
    output_graph::SharedCompileScope scope(&s->sc);
    k = codegen::compile_kernels(p);
  }
  CHECK(s->agreed == 1);
  CHECK(s->exchanged == 1);
  auto ranges = codegen::partition_kernels(p, 3);
  CHECK(k.ranks == 3);
  CHECK(k.compiled_here == ranges[1].second - ranges[1].first);
  CHECK(k.received == 12 - k.compiled_here);
  CHECK(k.objects == 3);
  CHECK(k.fns.size() == 12);
  for (auto fn : k.fns) CHECK(fn != nullptr);
  // Alone afterwards: the process already has it.
  codegen::CompiledKernels again = codegen::compile_kernels(p);
  CHECK(again.from == codegen::CompiledKernels::From::Process);
}

TEST_CASE("compile_kernels under a shared compile: a wrong share is refused and nothing links", "[codegen][shared]") {
  Program p = chain_program(6, 2.0 + 1e-7 * double(std::random_device{}() % 100000));
  auto s = scripted(p, 0, 2, false, [](std::vector<output_graph::KernelPart>& all) {
    all[1].begin += 1;  // rank 1 claims other kernels than its share
  });
  {
    output_graph::SharedCompileScope scope(&s->sc);
    try {
      codegen::compile_kernels(p);
      FAIL("a share with the wrong range was linked");
    } catch (const Error& e) {
      CHECK(e.message().find("rank 1 sent kernels") != std::string::npos);
      CHECK(e.message().find("not linking them") != std::string::npos);
    }
  }
  // Nothing was linked or cached: a lone compile compiles it afresh.
  codegen::CompiledKernels k = codegen::compile_kernels(p);
  CHECK(k.from == codegen::CompiledKernels::From::Compiled);
  CHECK(k.compiled_here == 6);
  // A lone compile splits the program over the thread pool: an object per part.
  CHECK(k.objects >= 1);
  CHECK(k.objects <= size_t(runtime::num_threads()));
}

TEST_CASE("compile_kernels alone compiles its parts on the thread pool, an object each", "[codegen][shared]") {
  Program p = chain_program(8, 5.0 + 1e-7 * double(std::random_device{}() % 100000));
  codegen::CompiledKernels k = codegen::compile_kernels(p);
  CHECK(k.from == codegen::CompiledKernels::From::Compiled);
  CHECK(k.compiled_here == p.kernels.size());
  CHECK(k.objects == size_t(std::min(runtime::num_threads(), 8)));
  REQUIRE(k.fns.size() == p.kernels.size());
  for (auto* f : k.fns) CHECK(f != nullptr);
}

TEST_CASE("compile_kernels under a shared compile: every rank has it, nobody compiles", "[codegen][shared]") {
  Program p = chain_program(4, 3.0 + 1e-7 * double(std::random_device{}() % 100000));
  codegen::compile_kernels(p);  // this process has it now
  auto s = scripted(p, 0, 2, /*others_have=*/true);
  output_graph::SharedCompileScope scope(&s->sc);
  codegen::CompiledKernels k = codegen::compile_kernels(p);
  CHECK(s->agreed == 1);
  CHECK(s->exchanged == 0);
  CHECK(k.from == codegen::CompiledKernels::From::Process);
  CHECK(k.compiled_here == 0);
}

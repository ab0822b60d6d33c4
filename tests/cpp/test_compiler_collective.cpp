// The compiler and guard collectives without MPI: the merge rules on their
// own, and the tracer against a scripted two-rank group in this process
// (rank 0 here; rank 1's messages are written by the test), so the restart,
// the agreed dynamic dims and the lockstep recompile are checked exactly.
// tests/mpi_compile runs the same paths between real ranks.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>

#include "collectives/codec.h"
#include "collectives/errors.h"
#include "interpreter/kiln_api.h"
#include "output_graph/compiler_collective.h"
#include "output_graph/guards.h"
#include "output_graph/source.h"

using namespace kiln;
using namespace kiln::runtime;
using collectives::CompilerLocalState;
using collectives::GuardOutcome;
using output_graph::DynamicDims;
using output_graph::merge_compiler_states;

namespace {

CompilerLocalState state(std::vector<collectives::InputSizes> inputs) {
  CompilerLocalState s;
  s.frame_id = "f:1";
  s.inputs = std::move(inputs);
  return s;
}

// Rank 0 of two; rank 1 answers each collective with what `peer_*` make of
// rank 0's own message (same header unless the test changes it).
class ScriptedPeer final : public collectives::ProcessGroup {
 public:
  ScriptedPeer() : ProcessGroup(collectives::Config{}) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }

  std::function<CompilerLocalState(const CompilerLocalState&)> peer_state = [](const CompilerLocalState& s) { return s; };
  std::function<GuardOutcome(const GuardOutcome&)> peer_outcome = [](const GuardOutcome& g) { return g; };
  std::function<void(collectives::CollectiveHeader&)> peer_header = [](collectives::CollectiveHeader&) {};
  std::vector<collectives::CollectiveHeader> headers;  // rank 0's, in order
  std::vector<CompilerLocalState> states_sent;

  collectives::GatheredBytes all_gather_bytes(std::span<const uint8_t> mine, std::string_view,
                                              collectives::Clock::time_point) override {
    collectives::Message m = collectives::decode(mine);
    headers.push_back(m.header);
    collectives::CollectiveHeader h = m.header;
    peer_header(h);
    std::vector<uint8_t> theirs;
    if (m.kind == collectives::MessageKind::CompilerState) {
      states_sent.push_back(std::get<CompilerLocalState>(m.body));
      theirs = collectives::encode(h, peer_state(std::get<CompilerLocalState>(m.body)));
    } else {
      theirs = collectives::encode(h, peer_outcome(std::get<GuardOutcome>(m.body)));
    }
    collectives::GatheredBytes out;
    out.bytes.assign(mine.begin(), mine.end());
    out.bytes.insert(out.bytes.end(), theirs.begin(), theirs.end());
    out.offsets = {0, mine.size(), mine.size() + theirs.size()};
    return out;
  }

 private:
  std::string name_ = "scripted";
};

// Rank 1 saw every input with dim 0 one larger.
CompilerLocalState one_larger(const CompilerLocalState& s) {
  CompilerLocalState t = s;
  for (auto& in : t.inputs)
    if (!in.sizes.empty() && in.sizes[0] >= 0) ++in.sizes[0];
  return t;
}

const char* kProgram = R"(
.func f(x, y)
    LOAD_FAST x
    LOAD_CONST 2.0
    BINARY_OP *
    LOAD_FAST y
    BINARY_OP +
    RETURN_VALUE
.end
.func noop(x)
    LOAD_CONST 1
    RETURN_VALUE
.end
)";

Value T(int64_t rows, int64_t cols) {
  std::vector<float> v(size_t(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.25f;
  return Value::tensor(Tensor::from_vector<float>(v, {rows, cols}));
}

Options with(const std::shared_ptr<ScriptedPeer>& g, bool compiler, bool guard) {
  Options o;
  o.backend = "eager";
  o.compile_group = g;
  o.enable_compiler_collectives = compiler;
  o.enable_guard_collectives = guard;
  return o;
}

std::string all_guards(const ExplainReport& r) {
  std::string s;
  for (const auto& g : r.guards) s += g;
  return s;
}

struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~EnvVar() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("merge: a dim that differs on any rank, or is dynamic on any, is dynamic", "[collectives][tracer]") {
  CHECK(merge_compiler_states({state({{"L['x']", {4, 3}}}), state({{"L['x']", {4, 3}}})}).empty());
  DynamicDims d = merge_compiler_states({state({{"L['x']", {4, 3}}, {"L['y']", {2}}}),
                                         state({{"L['x']", {5, 3}}, {"L['y']", {2}}}),
                                         state({{"L['x']", {4, 3}}, {"L['y']", {-1}}})});
  CHECK(d == DynamicDims{{"L['x']", {true, false}}, {"L['y']", {true}}});
  // Only the third rank differs from the first: still dynamic everywhere.
  CHECK(merge_compiler_states({state({{"L['x']", {4, 3}}}), state({{"L['x']", {4, 3}}}),
                               state({{"L['x']", {4, 7}}})}) == DynamicDims{{"L['x']", {false, true}}});
  // A source only one rank saw, or one whose rank differs, has nothing to agree on.
  CHECK(merge_compiler_states({state({{"L['x']", {4}}}), state({{"L['z']", {9}}})}).empty());
  CHECK(merge_compiler_states({state({{"L['x']", {4, 3}}}), state({{"L['x']", {4}}})}).empty());
}

TEST_CASE("local state: the sizes of every wrapped tensor, -1 where already dynamic", "[collectives][tracer]") {
  output_graph::GuardSet gs;
  output_graph::Guard g;
  g.source = output_graph::local_source("x", 0);
  g.kind = output_graph::GuardKind::TensorMatch;
  g.tensor.sizes = {4, 3};
  g.tensor.strides = {3, 1};
  g.tensor.dynamic = {false, true};
  gs.add(g);
  output_graph::Guard c;
  c.source = output_graph::local_source("n", 1);
  c.kind = output_graph::GuardKind::ConstantMatch;
  c.expected = Value::integer(3);
  gs.add(c);
  CompilerLocalState s = output_graph::compiler_local_state(gs, "f:1");
  REQUIRE(s.inputs.size() == 1);
  CHECK(s.inputs[0].source == "L['x']");
  CHECK(s.inputs[0].sizes == std::vector<int64_t>{4, -1});
  CHECK_FALSE(output_graph::compiler_collective_changes_trace(gs, {{"L['x']", {false, true}}}));
  CHECK(output_graph::compiler_collective_changes_trace(gs, {{"L['x']", {true, false}}}));
  CHECK_FALSE(output_graph::compiler_collective_changes_trace(gs, {{"L['other']", {true}}}));
}

TEST_CASE("compiler collective: sizes another rank saw make the dims dynamic here", "[collectives][tracer]") {
  Program p = assemble(kProgram, "cc.kbc");
  auto group = std::make_shared<ScriptedPeer>();
  group->peer_state = one_larger;
  ExplainReport r = explain(p.global("f"), {T(4, 3), T(4, 3)}, with(group, true, false));
  REQUIRE(r.error.empty());
  CHECK(r.collective_count == 1);
  CHECK(r.collective_restarts == 1);
  CHECK(r.collective_ms >= 0);
  std::string guards = all_guards(r);
  CHECK(guards.find("L['x'] f32[s0, 3] contiguous") != std::string::npos);
  CHECK(guards.find("L['y'] f32[s1, 3]") != std::string::npos);  // each dynamic dim its own symbol
  CHECK(r.str().find("Compiler collective:") != std::string::npos);
  // What rank 0 sent: its own sizes, frame id = qualname:first line, seq 1, no graph hash yet.
  REQUIRE(group->states_sent.size() == 1);
  CHECK(group->states_sent[0].inputs ==
        std::vector<collectives::InputSizes>{{"L['x']", {4, 3}}, {"L['y']", {4, 3}}});
  CHECK(group->headers[0].frame_id == "f:" + std::to_string(p.global("f").as<FunctionObj>()->code->first_line));
  CHECK(group->headers[0].compile_seq == 1);
  CHECK(group->headers[0].graph_hash == collectives::Hash128{});
  // The result is the same maths whatever the guards.
  CHECK(repr(r.result) == repr(explain(p.global("f"), {T(4, 3), T(4, 3)}).result));
}

TEST_CASE("compiler collective: equal sizes keep the first analysis, graphless frames still exchange",
          "[collectives][tracer]") {
  Program p = assemble(kProgram, "cc.kbc");
  auto group = std::make_shared<ScriptedPeer>();
  ExplainReport r = explain(p.global("f"), {T(4, 3), T(4, 3)}, with(group, true, false));
  CHECK(r.collective_count == 1);
  CHECK(r.collective_restarts == 0);
  CHECK(all_guards(r).find("f32[4, 3]") != std::string::npos);
  ExplainReport n = explain(p.global("noop"), {T(2, 2)}, with(group, true, false));
  CHECK(n.graph_count == 0);
  CHECK(n.collective_count == 1);
}

TEST_CASE("compiler collective: ranks in different compiles raise CollectiveMismatch", "[collectives][tracer]") {
  Program p = assemble(kProgram, "cc.kbc");
  auto group = std::make_shared<ScriptedPeer>();
  group->peer_header = [](collectives::CollectiveHeader& h) { h.compile_seq += 1; };
  CompiledFunction f = compile(p.global("f"), with(group, true, false));
  CHECK_THROWS_AS(f({T(4, 3), T(4, 3)}), collectives::CollectiveMismatch);
}

TEST_CASE("guard collective: a miss on another rank recompiles here too", "[collectives][tracer]") {
  reset();
  Program p = assemble(kProgram, "cc.kbc");
  auto group = std::make_shared<ScriptedPeer>();
  bool peer_misses = false;
  group->peer_outcome = [&](const GuardOutcome& g) {
    GuardOutcome o = g;
    if (peer_misses) {
      o.missed = true;
      o.reason = "TensorMatch L['x'] f32[4, 3]: size 6 in dim 0";
    }
    return o;
  };
  CompiledFunction f = compile(p.global("f"), with(group, true, true));
  Value first = f({T(4, 3), T(4, 3)});
  CHECK(cache_entries(p.global("f")) == 1);
  f({T(4, 3), T(4, 3)});  // every rank hits
  CHECK(cache_entries(p.global("f")) == 1);
  peer_misses = true;
  group->peer_state = one_larger;
  Value again = f({T(4, 3), T(4, 3)});  // this rank hits, the peer missed: both recompile
  CHECK(cache_entries(p.global("f")) == 2);
  CHECK(repr(again) == repr(first));
  // The recompile agreed on a dynamic dim 0 (the peer saw 5): a new size hits it.
  peer_misses = false;
  f({T(9, 3), T(9, 3)});
  CHECK(cache_entries(p.global("f")) == 2);
  // Headers in order: lookups and compiles are numbered per frame
  // (guard #1, compile #1, guard #2, guard #3, compile #2, guard #4).
  std::vector<uint64_t> seqs;
  for (const auto& h : group->headers) seqs.push_back(h.compile_seq);
  CHECK(seqs == std::vector<uint64_t>{1, 1, 2, 3, 2, 4});
  CHECK(group->states_sent.size() == 2);
  reset();
}

TEST_CASE("single rank or collectives off: no exchange at all", "[collectives][tracer]") {
  Program p = assemble(kProgram, "cc.kbc");
  Options o;
  o.backend = "eager";
  o.enable_compiler_collectives = true;
  o.enable_guard_collectives = true;
  REQUIRE(o.compile_group);
  CHECK(o.compile_group->size() == 1);  // no mpirun: the single-rank default group
  ExplainReport r = explain(p.global("f"), {T(4, 3), T(4, 3)}, o);
  CHECK(r.collective_count == 0);
  CHECK(r.guard_collective_count == 0);
  CHECK(r.str().find("collective") == std::string::npos);
  auto group = std::make_shared<ScriptedPeer>();
  ExplainReport off = explain(p.global("f"), {T(4, 3), T(4, 3)}, with(group, false, false));
  CHECK(group->headers.empty());
  CHECK(off.collective_count == 0);
}

TEST_CASE("Options read the collective settings from the environment", "[collectives]") {
  {
    Options o;
    CHECK_FALSE(o.enable_compiler_collectives);
    CHECK_FALSE(o.enable_guard_collectives);
    CHECK(o.collective_timeout_s == 60.0);
  }
  {
    EnvVar a("KILN_COMPILER_COLLECTIVES", "1"), b("KILN_GUARD_COLLECTIVES", "1"), c("KILN_COLLECTIVE_TIMEOUT_S", "2.5");
    Options o;
    CHECK(o.enable_compiler_collectives);
    CHECK(o.enable_guard_collectives);
    CHECK(o.collective_timeout_s == 2.5);
  }
  {
    EnvVar a("KILN_COMPILER_COLLECTIVES", "yes");
    CHECK_THROWS_WITH(Options{}, Catch::Contains("KILN_COMPILER_COLLECTIVES='yes' should be 1 (on) or 0 (off)"));
  }
  {
    EnvVar a("KILN_COLLECTIVE_TIMEOUT_S", "-1");
    CHECK_THROWS_AS(Options{}, Error);
  }
  CHECK(distributed::init()->size() == 1);
}

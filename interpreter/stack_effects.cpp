#include "interpreter/stack_effects.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln::interpreter::stack_effects {

using runtime::Flow;
using runtime::Instr;
using runtime::Opcode;

namespace detail {
// Read once, before main: a VM or trace made later takes its default from
// here. On for "1" only, as kiln's other flags (options_env::flag), which
// raise for any other value; read this early it cannot, so that is off.
std::atomic<bool> g_enabled{[] {
  const char* v = std::getenv("KILN_CHECK_STACK_EFFECTS");
  return v && std::strcmp(v, "1") == 0;
}()};
}  // namespace detail

void set_enabled(bool on) { detail::g_enabled.store(on, std::memory_order_relaxed); }

namespace {

// Counters per engine and opcode. Checking VMs may run on several threads
// (each VM is one thread's, but the counts are the process's): atomic, so
// that is no data race, but bumped by a plain load and store, not a locked
// add, which would cost more than the rest of a check. Two threads may
// lose a count; coverage asks only whether one happened.
struct AtomicCounts {
  std::atomic<uint64_t> entered{0}, next{0}, taken{0}, returned{0}, raised{0}, broke{0};
};
std::array<std::array<AtomicCounts, runtime::kNumOpcodes>, 2> g_counts;

AtomicCounts& at(Engine engine, Opcode op) { return g_counts[size_t(engine)][size_t(op)]; }
void bump(std::atomic<uint64_t>& n) { n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

// Each row's effect on each edge, and its flow, in one switch over the
// table (runtime/value/code.cpp's accessors are a call and a switch each, and
// the check runs after every instruction).
struct RowEffects {
  int next, taken;
  Flow flow;
};
RowEffects row_effects(const Instr& ins) {
  [[maybe_unused]] const int32_t a = ins.a, b = ins.b;  // what the table's expressions name
  switch (ins.op) {
#define KILN_OPCODE(name, oa, ob, pops, pushes, flow, jpops, jpushes, brk) \
  case Opcode::name: return {(pushes) - (pops), (jpushes) - (jpops), Flow::flow};
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
  }
  return {0, 0, Flow::Raise};
}

std::mutex g_mismatches_mu;
std::vector<std::string> g_mismatches;

const char* engine_name(Engine e) { return e == Engine::VM ? "the VM" : "the translator"; }
const char* edge_name(Edge e) {
  switch (e) {
    case Edge::Next: return "fall-through";
    case Edge::Taken: return "taken";
    case Edge::Return: return "return";
  }
  return "?";
}
const char* flow_name(Flow f) {
  switch (f) {
    case Flow::Next: return "Next";
    case Flow::Jump: return "Jump";
    case Flow::Branch: return "Branch";
    case Flow::Return: return "Return";
    case Flow::Raise: return "Raise";
  }
  return "?";
}

}  // namespace

bool declared(const Instr& ins, Edge edge, int& effect) {
  const RowEffects row = row_effects(ins);
  switch (edge) {
    case Edge::Next:
      effect = row.next;
      return row.flow == Flow::Next || row.flow == Flow::Branch;
    case Edge::Taken:
      effect = row.taken;
      return row.flow == Flow::Jump || row.flow == Flow::Branch;
    case Edge::Return:
      effect = row.next;
      return row.flow == Flow::Return;
  }
  return false;
}

void check(Engine engine, const runtime::Code& code, size_t pc, Edge edge, ptrdiff_t actual) {
  const Instr& ins = code.instrs[pc];
  int want = 0;
  const bool has_edge = declared(ins, edge, want);
  if (has_edge && actual == want) [[likely]] {
    AtomicCounts& c = at(engine, ins.op);
    bump(edge == Edge::Next ? c.next : edge == Edge::Taken ? c.taken : c.returned);
    return;
  }
  const runtime::OpcodeInfo& info = runtime::opcode_info(ins.op);
  std::string what = std::string("stack effect: ") + engine_name(engine) + "'s " + info.name + " (" +
                     std::to_string(ins.a) + ", " + std::to_string(ins.b) + ") left by its " + edge_name(edge) +
                     " edge, ";
  if (!has_edge) {
    what += std::string("which opcodes.def does not declare (FLOW ") + flow_name(info.flow) + "); depth changed by " +
            std::to_string(actual);
  } else {
    const bool taken = edge == Edge::Taken;
    const int pops = taken ? runtime::opcode_jump_pops(ins.op, ins.a, ins.b) : runtime::opcode_pops(ins.op, ins.a, ins.b);
    const int pushes =
        taken ? runtime::opcode_jump_pushes(ins.op, ins.a, ins.b) : runtime::opcode_pushes(ins.op, ins.a, ins.b);
    what += "opcodes.def declares " + std::to_string(want) + " (" + (taken ? "jpops " : "pops ") +
            std::to_string(pops) + ", " + (taken ? "jpushes " : "pushes ") + std::to_string(pushes) +
            "), the handler changed the depth by " + std::to_string(actual);
  }
  what += " (" + code.qualname + " instruction " + std::to_string(pc) + ", " + code.filename + ":" +
          std::to_string(ins.line) + ")";
  {
    std::lock_guard<std::mutex> lock(g_mismatches_mu);
    g_mismatches.push_back(what);
  }
  throw Mismatch(what);
}

namespace {

// KILN_CHECK_STACK_EFFECTS=1: the process says at exit what the checks
// found, and every mismatch, also those a host swallowed (python/'s frame
// hook runs a frame on CPython when its compile fails in any way, this
// one included), and that they ran at all.
void report_at_exit() {
  uint64_t checked[2] = {0, 0};
  for (size_t e = 0; e < 2; ++e)
    for (const AtomicCounts& c : g_counts[e]) checked[e] += c.next.load() + c.taken.load() + c.returned.load();
  const std::vector<std::string> found = mismatches();
  std::fprintf(stderr, "kiln: KILN_CHECK_STACK_EFFECTS: %llu instructions checked (the VM %llu, the translator %llu), ",
               (unsigned long long)(checked[0] + checked[1]), (unsigned long long)checked[0],
               (unsigned long long)checked[1]);
  if (found.empty()) {
    std::fprintf(stderr, "no mismatch\n");
    return;
  }
  std::fprintf(stderr, "%zu MISMATCHES:\n", found.size());
  for (const std::string& m : found) std::fprintf(stderr, "  %s\n", m.c_str());
}

// Registered after the counts and the list above are made, so it runs
// before they are destroyed.
[[maybe_unused]] const bool g_reports_at_exit = [] {
  if (enabled()) std::atexit(report_at_exit);
  return true;
}();

}  // namespace

void entered(Engine engine, Opcode op) { bump(at(engine, op).entered); }
void raised(Engine engine, Opcode op) { bump(at(engine, op).raised); }
void broke(Engine engine, Opcode op) { bump(at(engine, op).broke); }

Counts counts(Engine engine, Opcode op) {
  const AtomicCounts& c = at(engine, op);
  return {c.entered.load(), c.next.load(), c.taken.load(), c.returned.load(), c.raised.load(), c.broke.load()};
}

std::vector<std::string> mismatches() {
  std::lock_guard<std::mutex> lock(g_mismatches_mu);
  return g_mismatches;
}

void reset() {
  for (auto& engine : g_counts)
    for (AtomicCounts& c : engine)
      for (auto* n : {&c.entered, &c.next, &c.taken, &c.returned, &c.raised, &c.broke}) n->store(0);
  std::lock_guard<std::mutex> lock(g_mismatches_mu);
  g_mismatches.clear();
}

}  // namespace kiln::interpreter::stack_effects

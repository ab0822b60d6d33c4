// Checked stack effects: the VM's and the translator's handlers against the
// opcode table (runtime/value/opcodes.def), instruction by instruction.
//
// The verifier proves a program's depths from the table alone (max_stack,
// one depth per merge point), and the VM trusts them: its frames have
// exactly max_stack slots and no bounds checks. So a handler that pops or
// pushes other than its row says corrupts memory in the VM and desyncs the
// translator's symbolic stack (the residual then rebuilds the wrong values),
// and nothing else would notice. The Python frontend checks each of its
// translations against its own rows (kiln/_frontend.py's _step); this is
// the same check for the two engines that run KBC.
//
// When checking is on, after each instruction whose handler finished, the
// change of the stack's depth is compared with the table's effect on the
// edge the instruction left by:
//   Next    fell through to the next instruction: PUSHES - POPS
//   Taken   jumped (a Jump, or a Branch's taken edge): JPUSHES - JPOPS
//   Return  left the frame with its value (FLOW Return): PUSHES - POPS
// An edge the row's FLOW does not have (a Next row that jumped, a Jump row
// that fell through) is a mismatch too. Not compared, because the table
// declares nothing for them: an instruction that raises (a Raise row, or
// any handler's error; the unwinding cuts the stack to the handler row's
// depth, which the verifier checks), and a translator step that breaks the
// graph (its stack is thrown away: the trace restarts and stops before it).
// Those are counted (raised, broke) so coverage can tell them apart.
//
// Cost: nothing when off. The VM checks in an instantiation of its loop
// of its own (VM::Loop::Checked, compiled in vm_checked.cpp), chosen per
// VM when it is made (VMOptions::check_stack_effects); the loop every
// other VM runs has no check compiled in, and its machine code is what it
// was before the check existed. The translator tests one flag per step
// (TraceContext::check_stack_effects).
//
// On: KILN_CHECK_STACK_EFFECTS=1 in the environment (any run: the fuzzers,
// the Python tests), or set_enabled (tests/cpp/test_stack_effects.cpp),
// for the VMs and traces made from then on. Under the variable the process
// also reports at exit, on stderr, how many instructions were checked and
// every mismatch: a host may swallow the exception (python/'s frame hook
// runs the frame on CPython when a compile fails in any way).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/value/code.h"

namespace kiln::interpreter::stack_effects {

enum class Engine : uint8_t { VM, Translator };
enum class Edge : uint8_t { Next, Taken, Return };

// Deliberately not a kiln::Error (as runtime::BudgetExceeded): a KBC
// handler (`except Exception`) must not catch a broken invariant of kiln's
// own, nor the translator turn it into a graph break. It unwinds to whoever
// ran the code.
struct Mismatch : std::logic_error {
  using std::logic_error::logic_error;
};

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail

// Whether VMs and traces made now check (the default of
// VMOptions::check_stack_effects and TraceContext::check_stack_effects).
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
void set_enabled(bool on);

// The effect the table declares for `ins` on `edge`; false when its FLOW
// has no such edge.
bool declared(const runtime::Instr& ins, Edge edge, int& effect);

// After an instruction's handler finished: `actual` is the depth after it
// minus the depth before it. A mismatch is recorded (mismatches()) and
// thrown as Mismatch, naming the engine, the opcode, the edge, both
// effects and where; a match is counted.
void check(Engine engine, const runtime::Code& code, size_t pc, Edge edge, ptrdiff_t actual);

// Coverage: what the checking engines did with each opcode, counted since
// the last reset(). `entered` counts every instruction started; each one
// then ends on an edge that was checked, raised, or (the translator's)
// broke the graph.
struct Counts {
  uint64_t entered = 0, next = 0, taken = 0, returned = 0, raised = 0, broke = 0;
};
void entered(Engine engine, runtime::Opcode op);
void raised(Engine engine, runtime::Opcode op);
void broke(Engine engine, runtime::Opcode op);
Counts counts(Engine engine, runtime::Opcode op);
// Every mismatch found since the last reset(), as thrown (a caller that
// swallows exceptions cannot hide one).
std::vector<std::string> mismatches();
void reset();

}  // namespace kiln::interpreter::stack_effects

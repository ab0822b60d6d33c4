// Resume functions (Dynamo's resume_execution): after a graph break, the
// rest of a frame runs as a new function made from the frame's *original*
// code, with a prologue that pushes the saved stack and jumps to the
// instruction after the break. Made once per (original, target, stack
// shape, live locals) and shared by every break there, so a break inside a
// loop reuses one resume function for every iteration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "interpreter/code_builder.h"
#include "runtime/value/code.h"
#include "runtime/value/value.h"

namespace kiln::interpreter {

// How a saved stack slot crosses into a resume function.
enum class Slot : uint8_t {
  Value,     // a parameter, pushed by the prologue
  Iterator,  // a loop's iterator, passed as the list of its remaining items and re-iterated
  // A loop's iterator over a list, passed as the list itself and the
  // iterator's position: Python's list iterator is live (it sees what the
  // loop body appends or removes), so it must go on over the same list.
  // The prologue iterates the list and steps over `position` items, so a
  // resumed trace unrolls the rest of the loop. (A dict's or set's iterator
  // crosses as a real iterator, Slot::Value: it must remember the size it
  // started with across any number of breaks; see PositionedIterator.)
  AtPosition,
  Null,      // LOAD_METHOD's NULL under a pending call: no parameter, the prologue pushes it (PUSH_NULL)
};

inline bool at_position(Slot s) { return s == Slot::AtPosition; }

// The resume function of `fn` (an original or itself a resume function)
// at instruction `target` of fn's code, taking the `nstack` saved stack
// slots (crossing as `slots` says; missing: Slot::Value) and then the live
// locals `live` as parameters. Its closure is fn's cells, in order.
runtime::Ref<runtime::FunctionObj> make_resume(const runtime::FunctionObj& fn, size_t target, size_t nstack,
                                               const std::vector<std::string>& live, const std::vector<Slot>& slots);

// With a list on top of the stack: replaces it by its iterator stepped
// over the number of items in local `pos` (an exhausted iterator if there
// are fewer): how a loop's iterator over a list crosses a break.
void emit_step_over(CodeBuilder& b, int32_t pos);

// `code` is a resume function whose resumed instruction is pc.
bool resumes_at(const runtime::Code& code, size_t pc);

// Names the residual and resume code add, never user state to carry over.
bool is_stack_temp(const std::string& name);

// Drops the cached resume functions (kiln::reset).
void reset_resume_functions();

}  // namespace kiln::interpreter

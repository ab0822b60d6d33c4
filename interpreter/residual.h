// The residual: the KBC a traced frame runs instead of its own code. It
// calls the compiled graph, rebuilds the values the rest of the frame needs
// (reconstruct: from sources, graph outputs, constants), replays the
// trace's side effects on the real objects in program order, runs the
// breaking instruction on the VM and calls the resume function
// (resume_execution.h) with the saved stack and live locals.
#pragma once

#include <functional>

#include <cstdint>
#include <set>
#include <unordered_map>
#include <vector>

#include "interpreter/code_builder.h"
#include "interpreter/convert_frame.h"
#include "interpreter/instruction_translator.h"
#include "interpreter/resume_execution.h"

namespace kiln::interpreter {

struct Residual {
  Residual(const Code& code, TraceContext& ctx, size_t trace_cells);

  const Code& code;
  TraceContext& ctx;
  CodeBuilder b;
  size_t trace_cells;  // the residual's own cellvars: trace-made cells, then the frame's freevars
  std::unordered_map<const variables::VariableTracker*, int32_t> cell_slot;
  int32_t graph_out;
  std::unordered_map<const output_graph::Node*, int64_t> output_index;
  // Containers made during the trace, already rebuilt into a temporary:
  // one object, however many places (stack, locals) refer to it.
  std::unordered_map<const variables::VariableTracker*, int32_t> rebuilt;
  // The object on top of the stack, just rebuilt for `v`, into a temporary
  // of `rebuilt` (it stays on the stack).
  void keep_rebuilt(const VT& v);

  void emit_const(const Value& v) { b.emit(Opcode::LOAD_CONST, b.constant(v)); }

  // BUILD_LIST / BUILD_TUPLE / BUILD_DICT of n items, `push(i)` pushing
  // item i (a dict's: key, then value). Past the count an instruction can
  // carry (kMaxCountOperand) the container is built in chunks (a list
  // extended chunk by chunk; tuple() or dict() of it), so a list of 10^5
  // items the trace made still rebuilds.
  void emit_build(Opcode op, size_t n, const std::function<void(size_t)>& push);

  // The frame's cells as one tuple in a temporary, made before any branch
  // (emit_cell fills a trace-made cell only the first time, which a
  // branch's other edge would skip). -1 when the frame has no cells.
  int32_t resume_cells = -1;
  void park_cells(const std::vector<VT>& cells);
  // Pushes the compiled resume function: a constant, or, for a frame with
  // cells, a function made now over the parked cells, compiled when called.
  void emit_resume_callee(const Ref<FunctionObj>& rf, const Options& options);

  void emit_source(const output_graph::SourceRef& s);
  // Pushes a symbolic size computed from the input sizes it is made of
  // (`x.shape[0] * 2`); false, having emitted nothing, when a symbol's
  // tensor cannot be reloaded here.
  bool emit_sym(const output_graph::SymExpr& e);

  // Options::python_frames: the code made from this residual runs on
  // CPython, so every value it rebuilds must be a CPython object (no
  // kiln-only iterator).
  bool python_frames = false;
  // python_frames: a loop's iterator over a container the program can
  // reach, for stack slot temporary `slot`: the container and position are
  // parked now, and make_deferred_iterators (after the side effects are
  // replayed, as PositionedIterator is made when first advanced) stores
  // CPython's own iterator over it, stepped to the trace's position.
  // False (nothing emitted) when `v` is no such iterator.
  bool defer_container_iterator(const VT& v, int32_t slot);
  void make_deferred_iterators();
  struct DeferredIterator {
    int32_t container, pos, slot;
    variables::DictView view;
  };
  std::vector<DeferredIterator> deferred_iterators;

  // `as_list`: an iterator is rebuilt for a Slot::Iterator (the list of
  // its remaining items) or an AtPosition slot (its container and position).
  void reconstruct(const VT& v0, bool as_list = false);
  // An object made in the trace (variables::MadeHere), made once where it
  // is first needed: new_fn(cls), then its dict storage filled through its
  // base's __setitem__ and its __dict__ through object.__setattr__, in the
  // orders the trace stored them (its own __setitem__ and __setattr__ ran
  // in the trace; running them again would repeat their effects).
  void rebuild_made(const VT& v);

  // Pushes a real cell for a Cell tracker: the frame's own closure cell,
  // or one of the residual's cellvars filled (once) with the content.
  void emit_cell(const VT& c);
  // The residual's cellvar for a trace-made cell, named as the program
  // names it where that name is free (named_slots) and filled with its
  // content the first time it is asked for (a frame's own cell under
  // python_frames is filled by fill_own_cells instead).
  int32_t trace_cell_slot(const VT& c);
  // The frame's own cells, in its order (python_frames; empty otherwise):
  // only these take their program name, which kiln/_frames.py maps to the
  // frame's real cell of that name; a cell of an inlined function named
  // alike would alias it.
  std::vector<VT> own_cells;
  std::set<int32_t> named_slots;  // residual cellvars that carry their program name
  // Options::python_frames: the frame's own cells hold what the trace left
  // in them. The CPython code made from the residual has the frame's real
  // cells (MAKE_CELL in its prologue: fresh, or holding the argument of
  // the same name); each residual cellvar carries its program name, so
  // kiln/_frames.py stores into those cells by name, and a resume function
  // then shares them through its closure. Two steps, around the replay of
  // side effects: park_own_cells rebuilds each content into a temporary
  // first (before anything is stored: a value whose source is a parameter
  // that is also a cell, L['a2'], reads that cell, which must still hold the
  // argument), and fill_own_cells stores them last. Until then a closure
  // rebuilt over a cell gets the cell itself (trace_cell_slot stores no
  // content into an own cell).
  // (cell slot, temporary); `only`: just these cells (null: every one).
  std::vector<std::pair<int32_t, int32_t>> park_own_cells(
      const std::set<const variables::VariableTracker*>* only = nullptr);
  void fill_own_cells(const std::vector<std::pair<int32_t, int32_t>>& parked);

  // Every tensor the residual code needs from the graph.
  void collect(const VT& v0, std::vector<output_graph::Node*>& out, std::set<const variables::VariableTracker*>& seen);

  // The live locals rebuilt into temporaries (before side effects are
  // replayed, which may rebind what their sources name); their slots.
  std::vector<int32_t> park_live_locals(const std::vector<VT>& live_locals);

  // Is item i of a traced list still the list's own item i from when the
  // frame started (its source is list[i])?
  static bool is_original_item(const VT& list, size_t i);

  // Container contents first: their sources are paths as they were when
  // the frame started, which a replayed attribute/global store may rebind.
  void replay_side_effects();
};

// How stack slot `v` crosses into the resume function: a loop's iterator
// as its remaining items or its list and position, anything else (and an
// iterator in `shared`) as a value.
Slot iterator_slot(const VT& v, const std::set<const variables::VariableTracker*>& shared);

// Iterators the resumed frame can reach other than through one stack slot
// (a live local, a cell, a container, a second slot): these cross as one
// real iterator object (Slot::Value), so every holder sees it advance.
std::set<const variables::VariableTracker*> shared_iterators(const std::vector<VT>& stack,
                                                              const std::vector<VT>& locals,
                                                              const std::vector<VT>& cells);

// The cells `v` holds (a closure's, at any depth), into `cells`.
void reachable_cells(const VT& v, std::set<const variables::VariableTracker*>& seen,
                     std::set<const variables::VariableTracker*>& cells);

// kiln.compile as a KBC callable: for functions the residual makes at run
// time (a closure made in the trace, a resume function over its cells).
runtime::Value compile_when_called(const Options& options);

// The result as a template over graph outputs, parameters and constants;
// false when it needs anything else (a source that is not a parameter, a
// container that must keep its identity, ...).
bool result_template(const VT& v, const Residual& r, TraceContext& ctx, int32_t nparams, ResultTemplate& t);

}  // namespace kiln::interpreter

// Tracing a frame and generating its residual code.
//
// Graph breaks follow Dynamo's speculation: the first attempt traces until
// an instruction cannot be traced, remembers how many steps it got, and a
// second attempt (fresh graph, fresh trackers, deterministic) stops right
// before that step. Nothing half-done by the failing instruction survives.
#include "interpreter/convert_frame.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "interpreter/code_builder.h"
#include "interpreter/disassembler.h"
#include "interpreter/frame_cache.h"
#include "interpreter/instruction_translator.h"
#include "interpreter/residual.h"
#include "interpreter/resume_execution.h"
#include "runtime/base/fault_injection.h"
#include "runtime/base/log.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/name_map.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
using output_graph::Node;
using output_graph::NodeOp;
using output_graph::SourceKind;
using output_graph::SourceRef;
namespace vars = kiln::variables;

// What explain and the logs say about a break. A break inside an inlined
// function also says what broke there: that function may never be traced
// on its own (a module's forward the residual hands to the embedder), so
// "see its own break" alone would name nothing.
std::string break_text(const Unsupported& u) {
  std::string text = break_reason_text(u.reason, u.detail);
  if (u.reason == BreakReason::inlined_break && !u.cause.empty()) text += ": " + u.cause;
  return text;
}

// The whole frame runs on the VM (its trace could not be completed or
// could not be turned into residual code), with the reason recorded.
TraceOutcome run_on_vm(const Ref<FunctionObj>& fn, const Unsupported& u) {
  const Code& code = *fn->code;
  TraceOutcome out;
  out.residual = fn;
  out.graph_break = GraphBreak{break_reason_id(u.reason), break_text(u), code.qualname,
                               code.filename, code.first_line, break_reason_hint(u.reason)};
  return out;
}

// Options::python_frames: the residual rebuilds the whole stack and the
// live locals into temporaries, replays the side effects and ends there
// (Continuation); the embedder (python/, kiln/_frames.py) appends the
// CPython code that runs the breaking instruction and the rest of the
// frame: a resume function over the original bytecode, or a jump into a
// copy of it under its exception table. Nothing after the break runs on
// the VM.
void emit_continuation(Residual& r, InstructionTranslator& tx, const std::vector<VT>& live_locals,
                       const std::vector<std::string>& live_names, TraceOutcome& out) {
  const std::vector<VT>& stack = tx.stack();
  const auto shared = shared_iterators(stack, live_locals, tx.cells());
  // A closure's free variables are the frame's own (COPY_FREE_VARS copies
  // them again; a store into one is replayed with the other side effects);
  // its own cells are made afresh, empty, by MAKE_CELL and are filled
  // below with what the trace left in them.
  Continuation c;
  c.pc = tx.pc();
  for (size_t i = 0; i < stack.size(); ++i) {
    if (!stack[i]) {
      c.stack.push_back(-1);
      continue;
    }
    c.stack.push_back(r.b.local("__stack" + std::to_string(i)));
    VT sv = stack[i]->is(VTKind::Lazy) ? stack[i]->realized : stack[i];
    const Slot slot = iterator_slot(sv, shared);
    // A loop's iterator over a container (iterator_slot's AtPosition and
    // its dict/set Value) crosses as CPython's own iterator over it, made
    // after the replay; one held elsewhere too (shared) is refused by
    // reconstruct, as there is no one CPython object to hand both holders.
    if (!shared.count(sv.get()) && r.defer_container_iterator(sv, c.stack.back())) continue;
    r.reconstruct(stack[i], slot == Slot::Iterator);
    if (slot == Slot::Iterator) r.b.emit(Opcode::GET_ITER);  // its remaining items, iterated again
    r.b.emit(Opcode::STORE_FAST, c.stack.back());
  }
  c.live_temps = r.park_live_locals(live_locals);
  c.live_names = live_names;
  const auto own_cells = r.park_own_cells();
  r.replay_side_effects();
  r.fill_own_cells(own_cells);
  r.make_deferred_iterators();
  r.b.emit(Opcode::LOAD_CONST, r.b.constant(Value::none()));
  r.b.emit(Opcode::RETURN_VALUE);  // never run: the embedder's code replaces it
  out.continuation = std::move(c);
}

namespace {

// compile_subgraph's steps, over what they share: the frame, the trace
// that stopped in it, and the residual being emitted. The steps run in the
// order their code runs in the residual: collect live state, call the
// graph, reconstruct, replay side effects, emit the resume. The one
// ordering that matters: everything the rest of the frame needs is
// rebuilt before side effects are replayed, as a value read from G['x']
// must not become the x a replayed STORE_GLOBAL x put there.
class SubgraphCompiler {
 public:
  SubgraphCompiler(const Ref<FunctionObj>& fn, TraceContext& ctx, InstructionTranslator& tx, const Instr* brk,
                   const std::optional<Unsupported>& why, const Options& options, bool in_try)
      : fn_(fn), code_(*fn->code), ctx_(ctx), tx_(tx), brk_(brk), why_(why), options_(options), in_try_(in_try),
        r_(code_, ctx_, count_trace_cells(ctx_, tx_)) {
    r_.python_frames = options_.python_frames;
    if (r_.python_frames)
      for (size_t i = 0; i < code_.cellvars.size() && i < tx_.cells().size(); ++i) r_.own_cells.push_back(tx_.cells()[i]);
  }

  TraceOutcome run();

 private:
  // The frame's state as the resume function takes it: how each stack
  // slot crosses (a break outside a try block: the slots its breaking
  // instruction leaves alone), and the live locals parked in temporaries.
  // A break outside a try block also keeps how its instruction is run.
  struct Crossing {
    std::vector<Slot> slots;
    size_t nulls = 0;  // NULLs among the slots: the resume function's prologue pushes them again
    std::vector<int32_t> live_temps;
    Opcode op{};                  // the breaking instruction as the residual runs it
    int pops = 0;                 // the stack slots it takes
    size_t callee_slot = SIZE_MAX;  // an inlined call that broke: where its callee is
    size_t operands_emitted = 0;  // its own operands rebuilt on the stack
    int32_t extra_args = 0;       // a module callee replaced by (compiled forward, module)
    VT module_in_front_of_args;   // the same for CALL_EX: the module goes first in its args
  };

  static size_t count_trace_cells(TraceContext& ctx, const InstructionTranslator& tx);
  void collect_live_state();
  output_graph::CompiledGraph call_graph();
  void find_fast_path(const output_graph::CompiledGraph& compiled);
  void emit_return();
  Crossing reconstruct_in_try();
  Crossing reconstruct_at_break();
  bool emit_compiled_callee(const VT& slot, Crossing& c);
  void emit_break_and_resume(Crossing& c);
  void emit_resume_call(size_t target, size_t depth, const Crossing& c);
  void record_break();
  Ref<FunctionObj> residual_function();

  const Ref<FunctionObj>& fn_;
  const Code& code_;
  TraceContext& ctx_;
  InstructionTranslator& tx_;
  const Instr* brk_;  // null: the trace ended in a return
  const std::optional<Unsupported>& why_;
  const Options& options_;
  const bool in_try_;
  spdlog::logger* log_ = kiln::log::get("graph_breaks");
  Residual r_;
  // collect_live_state's results
  std::vector<Node*> outputs_;  // graph outputs: every computed tensor the residual needs
  std::vector<VT> live_locals_;
  std::vector<std::string> live_names_;
  std::set<const vars::VariableTracker*> shared_;  // iterators reachable from more than one place
  TraceOutcome out_;
};

// Cells made during the trace (a closure's captured variables, the
// frame's own) that the residual code must turn into real cells: counted
// before any code is emitted, because cellvars are declared first.
size_t SubgraphCompiler::count_trace_cells(TraceContext& ctx, const InstructionTranslator& tx) {
  size_t trace_cells = 0;
  std::set<const vars::VariableTracker*> seen, cells;
  if (tx.returned()) reachable_cells(tx.result(), seen, cells);
  for (const VT& v : tx.stack()) reachable_cells(v, seen, cells);
  for (const VT& v : tx.locals()) reachable_cells(v, seen, cells);
  for (const VT& c : tx.cells()) reachable_cells(c, seen, cells);
  for (const auto& e : ctx.side_effects.attr_stores) reachable_cells(e.value, seen, cells);
  for (const auto& e : ctx.side_effects.global_stores) reachable_cells(e.value, seen, cells);
  for (const VT& c : ctx.side_effects.mutated) reachable_cells(c, seen, cells);
  for (const vars::VariableTracker* c : cells) trace_cells += c->source ? 0 : 1;
  return trace_cells;
}

// Collect live state: the locals the rest of the frame may read, and the
// graph's outputs, every tensor the residual rebuilds something from (the
// result or the stack, at a break the live locals and cells too, and what
// the replayed side effects store). The graph is compiled after this, so
// anything missed here would be a value the residual cannot rebuild.
void SubgraphCompiler::collect_live_state() {
  std::set<const vars::VariableTracker*> seen;
  // Cells cross the break as the resume function's closure (make_resume);
  // a local named like a cellvar is never read by code with that cellvar.
  std::set<std::string> cell_names(code_.cellvars.begin(), code_.cellvars.end());
  for (size_t i = 0; i < tx_.locals().size(); ++i)
    if (tx_.locals()[i] && !is_stack_temp(code_.varnames[i]) && !cell_names.count(code_.varnames[i])) {
      live_locals_.push_back(tx_.locals()[i]);
      live_names_.push_back(code_.varnames[i]);
    }
  shared_ = shared_iterators(tx_.stack(), live_locals_, tx_.cells());
  if (tx_.returned()) r_.collect(tx_.result(), outputs_, seen);
  for (const VT& v : tx_.stack()) r_.collect(v, outputs_, seen);
  if (brk_)
    for (const VT& v : live_locals_) r_.collect(v, outputs_, seen);
  if (brk_)
    for (const VT& c : tx_.cells()) r_.collect(c, outputs_, seen);
  for (const auto& s : ctx_.side_effects.cell_stores) r_.collect(s.cell, outputs_, seen);  // replayed stores
  for (const auto& s : ctx_.side_effects.attr_stores) r_.collect(s.value, outputs_, seen);
  for (const auto& s : ctx_.side_effects.global_stores) r_.collect(s.value, outputs_, seen);
  for (const VT& c : ctx_.side_effects.mutated) r_.collect(c, outputs_, seen);
}

// Call the graph: the backend compiles it now, and the residual calls it
// first, its inputs reloaded from their Sources, the outputs kept in
// __graph_out for what is rebuilt from them. A trace with no op has no
// graph (and an empty CompiledGraph).
output_graph::CompiledGraph SubgraphCompiler::call_graph() {
  size_t ops = ctx_.out.graph().op_count();
  output_graph::CompiledGraph compiled;
  if (ops > 0) {
    out_.graph_ops = int(ops);
    compiled = ctx_.out.compile_and_call_fx_graph(options_.backend, outputs_);
    out_.graph = ctx_.out.graph_ptr();
    Value graph_fn = make_builtin_closure(code_.qualname + ".graph", [compiled](CallContext& c, const CallArgs& a) {
      std::vector<Value> inputs(a.args, a.args + a.nargs);
      try {
        return make_tuple(compiled(c, inputs));
      } catch (...) {
        graph_call_failed() = true;
        throw;
      }
    });
    r_.emit_const(graph_fn);
    for (const auto& in : ctx_.out.inputs()) r_.emit_source(in.source);
    r_.b.emit(Opcode::CALL, int32_t(ctx_.out.inputs().size()));
    r_.b.emit(Opcode::STORE_FAST, r_.graph_out);
  }
  return compiled;
}

// A plain return with no side effects: a cache hit may skip the residual
// and call the graph straight from the parameters (FastPath), when every
// graph input is a parameter or an item of one and the result a template
// over outputs, parameters and constants.
void SubgraphCompiler::find_fast_path(const output_graph::CompiledGraph& compiled) {
  FastPath fast;
  fast.graph = compiled;
  bool ok = true;
  auto param = [&](const output_graph::Source* s) {
    return s && s->kind == SourceKind::Local && s->local_index >= 0 && s->local_index < code_.nparams();
  };
  for (const auto& in : ctx_.out.inputs()) {
    const output_graph::Source* s = in.source.get();
    if (param(s))
      fast.inputs.push_back({size_t(s->local_index)});
    else if (s->kind == SourceKind::Item && param(s->base.get()) && s->key.is(Kind::Int) && s->key.as_int() >= 0)
      fast.inputs.push_back({size_t(s->base->local_index), s->key.as_int()});
    else
      ok = false;
  }
  if (ok && result_template(tx_.result(), r_, ctx_, code_.nparams(), fast.result)) out_.fast = std::move(fast);
}

// The trace returned: reconstruct the result, replay the side effects,
// return it. No resume function.
void SubgraphCompiler::emit_return() {
  r_.reconstruct(tx_.result());
  int32_t ret = r_.b.local("__return");
  r_.b.emit(Opcode::STORE_FAST, ret);
  // (python_frames: a closure the residual rebuilds over the frame's
  // cells, returned or stored, needs what they hold; nothing else reads
  // them after a return, so only those are filled)
  std::set<const vars::VariableTracker*> seen_vts, closed_over;
  reachable_cells(tx_.result(), seen_vts, closed_over);
  for (const auto& s : ctx_.side_effects.attr_stores) reachable_cells(s.value, seen_vts, closed_over);
  for (const auto& s : ctx_.side_effects.global_stores) reachable_cells(s.value, seen_vts, closed_over);
  for (const auto& s : ctx_.side_effects.cell_stores) reachable_cells(s.cell->items[0], seen_vts, closed_over);
  for (const VT& c : ctx_.side_effects.mutated) reachable_cells(c, seen_vts, closed_over);
  const auto own_cells = r_.park_own_cells(&closed_over);
  r_.replay_side_effects();
  r_.fill_own_cells(own_cells);
  r_.b.emit(Opcode::LOAD_FAST, ret);
  r_.b.emit(Opcode::RETURN_VALUE);
}

// Reconstruct, for a break inside a try block: the whole stack crosses
// (the breaking instruction's operands too), as the resume function runs
// from the breaking instruction on, under the frame's exception table.
SubgraphCompiler::Crossing SubgraphCompiler::reconstruct_in_try() {
  const std::vector<VT>& stack = tx_.stack();
  Crossing c;
  c.slots.assign(stack.size(), Slot::Value);
  for (size_t i = 0; i < stack.size(); ++i) {
    if (!stack[i]) {
      c.slots[i] = Slot::Null;
      ++c.nulls;
      continue;
    }
    VT sv = stack[i]->is(VTKind::Lazy) ? stack[i]->realized : stack[i];
    // A deferred attribute read (LOAD_METHOD's GetAttr) is what may raise:
    // reconstructed here it would raise outside the try block's handler.
    if (sv && sv->is(VTKind::GetAttr))
      unsupported(BreakReason::in_try_block, "an attribute read split from its call by the break");
    // (an iterator that raises crosses as itself: it is one already)
    c.slots[i] = iterator_slot(sv, shared_);
    r_.reconstruct(stack[i], c.slots[i] != Slot::Value);
  }
  c.live_temps = r_.park_live_locals(live_locals_);
  r_.park_cells(tx_.cells());
  return c;
}

// Reconstruct, for a break outside a try block: the stack the breaking
// instruction leaves alone crosses into the resume function, its own
// operands are rebuilt for it to run on in the residual, then the live
// locals and cells are parked.
SubgraphCompiler::Crossing SubgraphCompiler::reconstruct_at_break() {
  const std::vector<VT>& stack = tx_.stack();
  Crossing c;
  c.op = brk_->op;
  c.pops = opcode_pops(brk_->op, brk_->a, brk_->b);
  if (why_->reason == BreakReason::inlined_break &&
      (brk_->op == Opcode::CALL || brk_->op == Opcode::CALL_KW || brk_->op == Opcode::CALL_METHOD ||
       brk_->op == Opcode::CALL_METHOD_KW || brk_->op == Opcode::CALL_EX))
    c.callee_slot = stack.size() - size_t(c.pops);
  const size_t untouched = stack.size() - size_t(c.pops);  // slots the breaking instruction leaves alone
  c.slots.assign(untouched, Slot::Value);
  for (size_t i = 0; i < stack.size(); ++i) {
    if (i == c.callee_slot && emit_compiled_callee(stack[i], c)) continue;
    if (c.module_in_front_of_args && i == c.callee_slot + 1) {  // CALL_EX's args: [module, *args]
      r_.reconstruct(c.module_in_front_of_args);
      r_.b.emit(Opcode::BUILD_LIST, 1);
      r_.reconstruct(stack[i]);
      r_.b.emit(Opcode::LIST_EXTEND, 1);
      continue;
    }
    if (!stack[i] && i == stack.size() - size_t(c.pops) + 1 &&
        (c.op == Opcode::CALL_METHOD || c.op == Opcode::CALL_METHOD_KW)) {
      c.op = c.op == Opcode::CALL_METHOD ? Opcode::CALL : Opcode::CALL_KW;  // NULL self: a plain call
      continue;
    }
    if (!stack[i] && i < untouched) {  // a call pending under the breaking instruction
      c.slots[i] = Slot::Null;
      ++c.nulls;
      continue;
    }
    VT sv = stack[i] && stack[i]->is(VTKind::Lazy) ? stack[i]->realized : stack[i];
    if (i < untouched) c.slots[i] = iterator_slot(sv, shared_);
    r_.reconstruct(stack[i], i < untouched && c.slots[i] != Slot::Value);
    if (i >= untouched) ++c.operands_emitted;
  }
  // An instruction the trace knows raises, and MAKE_FUNCTION whatever the
  // reason, runs on operands parked in temporaries: rebuilt in place (a
  // constant that is not code, BUILD_TUPLE 0 for a closure) they could be
  // what the verifier rejects statically, and the residual would not
  // verify where the VM raises.
  if ((why_->reason == BreakReason::python_error || brk_->op == Opcode::MAKE_FUNCTION) && c.operands_emitted) {
    std::vector<int32_t> parked;
    for (size_t k = 0; k < c.operands_emitted; ++k) parked.push_back(r_.b.local("__raising_operand" + std::to_string(k)));
    for (size_t k = c.operands_emitted; k-- > 0;) r_.b.emit(Opcode::STORE_FAST, parked[k]);
    for (int32_t t : parked) r_.b.emit(Opcode::LOAD_FAST, t);
  }
  c.live_temps = r_.park_live_locals(live_locals_);
  r_.park_cells(tx_.cells());
  return c;
}

// The callee of a call whose inlining broke runs as its own compiled
// frame; true when it was emitted so (false: it is rebuilt as a value).
// Realizing it guards its identity, which baking in its compiled form
// relies on (the restarted trace stopped before the CALL).
bool SubgraphCompiler::emit_compiled_callee(const VT& slot, Crossing& c) {
  VT callee = ctx_.builder.realize(slot);
  if (callee && (callee->is(VTKind::UserFunction) || callee->is(VTKind::UserMethod)) &&
      callee->value.is(Kind::Function)) {
    if (callee->is(VTKind::UserMethod))
      unsupported(BreakReason::resume_state, "a bound method held across the break");
    r_.emit_const(compiled_value(Ref<FunctionObj>(callee->value.as<FunctionObj>()), options_));
    return true;
  }
  // A closure made in the trace: rebuilt, then compiled when it runs.
  if (callee && callee->is(VTKind::NestedFunction)) {
    r_.emit_const(compile_when_called(options_));
    r_.reconstruct(callee);
    r_.b.emit(Opcode::CALL, 1);
    return true;
  }
  // A module: its compiled forward, with the module as the first
  // argument (one more argument for the call; for m(*args, **kw), the
  // module put in front of args). A module with hooks gets
  // __call__'s sequence around it: its pre-hooks and hooks, read
  // when the call runs, with the compiled forward between them.
  if (callee && callee->is_module()) {
    auto* m = callee->value.as<ModuleObj>();
    static const Ref<StrObj> forward = intern("forward");
    const Value* fwd = m->cls->lookup(forward.get());
    if (fwd && fwd->is(Kind::Function) && !m->lazy) {
      Value compiled = compiled_value(Ref<FunctionObj>(fwd->as<FunctionObj>()), options_);
      if (!m->forward_pre_hooks.empty() || !m->forward_hooks.empty()) {
        Object* inner = compiled.obj();
        compiled = make_builtin_closure(
            "kiln.hooked_call",
            [inner](CallContext& cc, const CallArgs& a) {
              const Value forward = Value::object(Kind::Builtin, inner);
              return module_call(cc, a[0], CallArgs{a.args + 1, a.nargs - 1, a.kwnames}, &forward);
            },
            {Ref<Object>(inner)});
      }
      r_.emit_const(compiled);
      if (brk_->op == Opcode::CALL_EX) {
        c.module_in_front_of_args = callee;
        return true;
      }
      r_.reconstruct(callee);
      c.extra_args = 1;
      return true;
    }
  }
  return false;
}

// Emit the resume, after a break outside a try block: the breaking
// instruction runs in the residual (on the VM), then the resume function
// is called on the stack it leaves, once per way out of it (a branch has
// two: each edge its own resume function).
void SubgraphCompiler::emit_break_and_resume(Crossing& c) {
  const std::vector<VT>& stack = tx_.stack();
  const OpcodeInfo& info = opcode_info(brk_->op);
  auto operand = [&](OperandKind k, int32_t v) -> int32_t {
    switch (k) {
      case OperandKind::Const: return r_.b.constant(code_.consts[size_t(v)]);
      case OperandKind::Name: return r_.b.name(code_.names[size_t(v)]->s);
      default: return v;
    }
  };
  // The residual's frame still binds every parameter; one the trace
  // deleted (DELETE_FAST) is unbound again before the breaking read, which
  // then raises UnboundLocalError as the VM does (a fuzz finding, defect 31).
  if ((brk_->op == Opcode::LOAD_FAST || brk_->op == Opcode::DELETE_FAST) && brk_->a < code_.nparams() &&
      !tx_.locals()[size_t(brk_->a)])
    r_.b.emit(Opcode::DELETE_FAST, brk_->a);
  size_t base = stack.size() - size_t(c.pops);
  int32_t b_operand = operand(info.b, brk_->b);
  if (info.flow == Flow::Branch) {
    auto taken = r_.b.new_label();
    r_.b.emit(c.op, taken, b_operand);
    emit_resume_call(tx_.pc() + 1, base + size_t(opcode_pushes(brk_->op, brk_->a, brk_->b)), c);
    r_.b.bind(taken);
    r_.b.set_line(brk_->line);
    // The taken edge has its own effect (JUMP_IF_TRUE_OR_POP keeps TOS).
    emit_resume_call(size_t(brk_->a),
                     stack.size() - size_t(opcode_jump_pops(brk_->op, brk_->a, brk_->b)) +
                         size_t(opcode_jump_pushes(brk_->op, brk_->a, brk_->b)),
                     c);
  } else if (brk_->op == Opcode::LOAD_METHOD) {
    // Its second slot may be the NULL of a method call, which no
    // temporary can hold (the verifier refuses to store one): run it as
    // CPython's own fallback, the attribute (bound, when a method) and a
    // NULL, which CALL_METHOD calls alike. The NULL crosses like the
    // pending calls' NULLs: the resume function's prologue pushes it.
    r_.b.emit(Opcode::LOAD_ATTR, operand(info.a, brk_->a));
    c.slots.push_back(Slot::Value);
    c.slots.push_back(Slot::Null);
    ++c.nulls;
    emit_resume_call(tx_.pc() + 1, base + 2, c);
  } else {
    r_.b.emit(c.op, operand(info.a, brk_->a) + c.extra_args, b_operand);
    if (info.flow == Flow::Next)
      emit_resume_call(tx_.pc() + 1, base + size_t(opcode_pushes(brk_->op, brk_->a, brk_->b)), c);
  }
}

// Park the stack in temporaries, then call the resume function for
// `target` with the stack's `depth` slots and the live locals, and return
// what it returns. The NULLs are all among the slots the breaking
// instruction left alone, under whatever it pushed; a list and position
// slot passes two values.
void SubgraphCompiler::emit_resume_call(size_t target, size_t depth, const Crossing& c) {
  std::vector<Slot> kept(c.slots.begin(), c.slots.begin() + ptrdiff_t(std::min(depth, c.slots.size())));
  const size_t passed = depth - c.nulls + size_t(std::count_if(kept.begin(), kept.end(), at_position));
  std::vector<int32_t> temps;
  for (size_t i = 0; i < passed; ++i) temps.push_back(r_.b.local("__resume_arg" + std::to_string(i)));
  for (size_t i = passed; i-- > 0;) r_.b.emit(Opcode::STORE_FAST, temps[i]);
  Ref<FunctionObj> rf = make_resume(*fn_, target, depth, live_names_, kept);
  r_.emit_resume_callee(rf, options_);
  for (int32_t t : temps) r_.b.emit(Opcode::LOAD_FAST, t);
  for (int32_t t : c.live_temps) r_.b.emit(Opcode::LOAD_FAST, t);
  r_.b.emit(Opcode::CALL, int32_t(passed + live_locals_.size()));
  r_.b.emit(Opcode::RETURN_VALUE);
}

void SubgraphCompiler::record_break() {
  out_.graph_break = GraphBreak{break_reason_id(why_->reason), break_text(*why_), code_.qualname,
                                code_.filename, brk_->line, break_reason_hint(why_->reason)};
}

// The residual as a function taking the frame's parameters in the same
// slots: zero-argument super() in it reads the same first argument (none
// for a resume function of a function without one: "super(): no
// arguments"), and its defaults, closure and globals are the frame's.
Ref<FunctionObj> SubgraphCompiler::residual_function() {
  auto residual = make_ref<FunctionObj>();
  residual->code = r_.b.finish();
  residual->code->first_arg_local = code_.first_arg_local;
  residual->code->continues = code_.continues;
  residual->defaults = fn_->defaults;
  residual->kwdefaults = fn_->kwdefaults;
  residual->closure = fn_->closure;
  residual->globals = fn_->globals;
  return residual;
}

TraceOutcome SubgraphCompiler::run() {
  collect_live_state();
  if (brk_) r_.b.set_line(brk_->line);
  else if (!code_.instrs.empty()) r_.b.set_line(code_.instrs[tx_.pc() - 1].line);
  const output_graph::CompiledGraph compiled = call_graph();
  if (!brk_ && ctx_.side_effects.empty()) find_fast_path(compiled);
  if (!brk_) {
    emit_return();
  } else if (options_.python_frames) {
    emit_continuation(r_, tx_, live_locals_, live_names_, out_);
    record_break();
    if (log_)
      log_->info("{} at {}:{} in {}: {} (CPython continues the frame)", out_.graph_break->id, code_.filename,
                 brk_->line, code_.qualname, out_.graph_break->reason);
  } else if (in_try_) {
    Crossing c = reconstruct_in_try();
    r_.replay_side_effects();
    emit_resume_call(tx_.pc(), tx_.stack().size(), c);
    record_break();
    if (log_)
      log_->info("{} at {}:{} in {} (inside a try block: resumed there)", out_.graph_break->id, code_.filename,
                 brk_->line, code_.qualname);
  } else {
    Crossing c = reconstruct_at_break();
    r_.replay_side_effects();
    emit_break_and_resume(c);
    record_break();
    if (log_)
      log_->info("{} at {}:{} in {}: {}", out_.graph_break->id, code_.filename, brk_->line, code_.qualname,
                 out_.graph_break->reason);
  }
  out_.residual = residual_function();
  out_.inline_depth = ctx_.max_inline_depth;
  out_.guards = ctx_.out.guards();
  if (ctx_.shape_read) out_.guards.specialize_all();
  if (auto* blog = kiln::log::get("bytecode"))
    blog->info("residual of {}:\n{}", code_.qualname, disassemble(*out_.residual->code));
  return std::move(out_);
}

}  // namespace

// compile_subgraph: the trace stopped (a return, or just before the
// breaking instruction `brk`): compile the graph so far and build the
// residual function that runs it, rebuilds the live state, replays side
// effects, runs `brk` on the VM and continues in a resume function
// (SubgraphCompiler's steps, above).
TraceOutcome compile_subgraph(const Ref<FunctionObj>& fn, TraceContext& ctx, InstructionTranslator* tx,
                              const Instr* brk, const std::optional<Unsupported>& why, const Options& options) {
  const Code& code = *fn->code;
  // A break inside a protected range (a try body, a with block, a
  // handler): the residual code must not run the breaking instruction, as
  // it has no exception table and the raise it may make must reach the
  // handler. It resumes *at* the breaking instruction instead, in a resume
  // function that keeps the table. That resume function, breaking again
  // at its very first instruction, runs on the VM.
  const bool in_try = brk && code.handler_for(tx->pc());
  if (in_try && resumes_at(code, tx->pc()))
    return run_on_vm(fn, Unsupported{BreakReason::in_try_block, break_text(*why), {}});
  try {
    return SubgraphCompiler(fn, ctx, *tx, brk, why, options, in_try).run();
  } catch (const Unsupported& u) {
    if (u.restart_at >= 0) throw;  // the caller restarts the trace (a generator reached the residual)
    return run_on_vm(fn, u);
  }
}

TraceOutcome convert_frame(const Ref<FunctionObj>& fn, const std::vector<Value>& args, const Options& options,
                           CallContext& vm, const std::map<std::string, std::vector<bool>>& dynamic_dims,
                           output_graph::DistributedState* distributed) {
  const Code& code = *fn->code;
  runtime::fault_point("tracer");
  int64_t stop = -1;
  std::optional<Unsupported> why;
  std::map<std::string, std::vector<bool>> dims = dynamic_dims;
  output_graph::DynamicDims agreed;
  bool restarted = false;
  // After the first analysis (however it ended) the ranks exchange what
  // they saw. True: the speculation log is cleared and the analysis starts
  // over with the agreed dynamic dims. When those change nothing this rank
  // traced (the usual case: equal sizes everywhere), the first analysis is
  // already what a restart would produce (tracing is deterministic), so it
  // is kept.
  auto collective_restarts = [&](TraceContext& ctx) {
    if (!distributed || distributed->all_states) return false;
    output_graph::run_compiler_collective(ctx.out.guards(), *distributed);
    agreed = output_graph::merge_compiler_states(*distributed->all_states);
    if (ctx.builder.never_dynamic || !output_graph::compiler_collective_changes_trace(ctx.out.guards(), agreed))
      return false;
    for (const auto& [source, mask] : agreed) {
      std::vector<bool>& m = dims[source];
      if (m.size() < mask.size()) m.resize(mask.size(), false);
      for (size_t d = 0; d < mask.size(); ++d) m[d] = m[d] || mask[d];
    }
    stop = -1;
    why.reset();
    restarted = true;
    return true;
  };
  auto finish = [&](TraceOutcome out) {
    out.agreed_dynamic_dims = std::move(agreed);
    out.collective_restarted = restarted;
    return out;
  };
  // A generator function's own frame is CPython's: kiln makes generators
  // only inside a trace (translator_generators.cpp).
  if (code.flags & runtime::kGenerator)
    return finish(run_on_vm(fn, Unsupported{BreakReason::untraced_object, "a generator function's own frame", {}}));
  // At most: the first analysis, its restart after the compiler
  // collective, the speculation restart before a breaking step, and one
  // more before the step that made a generator the residual would hold.
  for (int attempt = 0; attempt < 4; ++attempt) {
    TraceContext ctx(vm);
    ctx.python_frames = options.python_frames;
    ctx.random_is_hosts = options.random_is_hosts;
    ctx.out.set_distributed(distributed);
    ctx.builder.all_dynamic = options.dynamic.has_value() && *options.dynamic;
    ctx.builder.never_dynamic = options.dynamic.has_value() && !*options.dynamic;
    ctx.builder.dynamic_dims = dims;
    std::vector<VT> locals(code.varnames.size());
    for (size_t i = 0; i < args.size() && i < locals.size(); ++i)
      if (!args[i].is_null()) locals[i] = vars::make_lazy(args[i], output_graph::local_source(code.varnames[i], int(i)));
    std::optional<InstructionTranslator> tx;
    try {
      tx.emplace(ctx, fn, std::move(locals), nullptr);
      tx->run(stop);
    } catch (const Unsupported& u) {
      // A frame that breaks, or cannot be traced at all, still takes part
      // in the collective: the other ranks are in it.
      if (collective_restarts(ctx)) continue;
      if (stop >= 0 || !tx) {
        // Not reproducible at the same step, or the frame cannot be traced
        // at all: run it on the VM, and say why.
        return finish(run_on_vm(fn, u));
      }
      stop = u.restart_at >= 0 ? u.restart_at : tx->steps();
      why = u;
      continue;
    }
    if (collective_restarts(ctx)) continue;
    const Instr* brk = why ? &code.instrs[tx->pc()] : nullptr;
    if (brk && options.fullgraph)
      throw ProgramError(ErrorKind::RuntimeError, "graph break in fullgraph mode: " +
                                               (why->cause.empty() ? break_reason_text(why->reason, why->detail)
                                                                   : why->cause) +
                                               " (" + code.qualname + ", " +
                                               code.filename + ":" + std::to_string(brk->line) + "); hint: " +
                                               break_reason_hint(why->reason));
    try {
      return finish(compile_subgraph(fn, ctx, &*tx, brk, why, options));
    } catch (const Unsupported& u) {
      // The residual would hold a generator the trace made: stop before
      // the step that made it, once (a second time is no progress).
      if (u.restart_at < 0 || (stop >= 0 && u.restart_at >= stop))
        return finish(run_on_vm(fn, u));
      stop = u.restart_at;
      if (why) {
        // The break's own reason stays what the report says.
        why->detail += " (the break moves before the step that made a generator the code after it holds)";
      } else {
        why = u;
      }
      continue;
    }
  }
  throw_error(ErrorKind::RuntimeError, "convert_frame: the trace did not settle");
}

}  // namespace kiln::interpreter

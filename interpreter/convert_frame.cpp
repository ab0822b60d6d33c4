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
#include "runtime/builtins.h"
#include "runtime/fault_injection.h"
#include "runtime/set_ops.h"
#include "runtime/log.h"
#include "runtime/module.h"
#include "runtime/name_map.h"
#include "runtime/value_ops.h"

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

// compile_subgraph: the trace stopped (a return, or just before the
// breaking instruction `brk`): compile the graph so far and build the
// residual function that runs it, rebuilds the live state, replays side
// effects, runs `brk` on the VM and continues in a resume function.
TraceOutcome compile_subgraph(const Ref<FunctionObj>& fn, TraceContext& ctx, InstructionTranslator* tx,
                              const Instr* brk, const std::optional<Unsupported>& why, const Options& options) {
  const Code& code = *fn->code;
  auto* log = kiln::log::get("graph_breaks");
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
  // Cells made during the trace (a closure's captured variables, the
  // frame's own) that the residual code must turn into real cells: counted
  // before any code is emitted, because cellvars are declared first.
  size_t trace_cells = 0;
  {
    std::set<const vars::VariableTracker*> seen, cells;
    if (tx->returned()) reachable_cells(tx->result(), seen, cells);
    for (const VT& v : tx->stack()) reachable_cells(v, seen, cells);
    for (const VT& v : tx->locals()) reachable_cells(v, seen, cells);
    for (const VT& c : tx->cells()) reachable_cells(c, seen, cells);
    for (const auto& e : ctx.side_effects.attr_stores) reachable_cells(e.value, seen, cells);
    for (const auto& e : ctx.side_effects.global_stores) reachable_cells(e.value, seen, cells);
    for (const VT& c : ctx.side_effects.mutated) reachable_cells(c, seen, cells);
    for (const vars::VariableTracker* c : cells) trace_cells += c->source ? 0 : 1;
  }
  Residual r(code, ctx, trace_cells);
  r.python_frames = options.python_frames;
  if (r.python_frames)
    for (size_t i = 0; i < code.cellvars.size() && i < tx->cells().size(); ++i) r.own_cells.push_back(tx->cells()[i]);
  // Graph outputs: every computed tensor the residual needs.
  std::vector<Node*> outputs;
  std::set<const vars::VariableTracker*> seen;
  std::vector<VT> live_locals;
  std::vector<std::string> live_names;
  // Cells cross the break as the resume function's closure (make_resume);
  // a local named like a cellvar is never read by code with that cellvar.
  std::set<std::string> cell_names(code.cellvars.begin(), code.cellvars.end());
  for (size_t i = 0; i < tx->locals().size(); ++i)
    if (tx->locals()[i] && !is_stack_temp(code.varnames[i]) && !cell_names.count(code.varnames[i])) {
      live_locals.push_back(tx->locals()[i]);
      live_names.push_back(code.varnames[i]);
    }
  const auto shared = shared_iterators(tx->stack(), live_locals, tx->cells());
  if (tx->returned()) r.collect(tx->result(), outputs, seen);
  for (const VT& v : tx->stack()) r.collect(v, outputs, seen);
  if (brk)
    for (const VT& v : live_locals) r.collect(v, outputs, seen);
  if (brk)
    for (const VT& c : tx->cells()) r.collect(c, outputs, seen);
  for (const auto& s : ctx.side_effects.cell_stores) r.collect(s.cell, outputs, seen);  // replayed stores
  for (const auto& s : ctx.side_effects.attr_stores) r.collect(s.value, outputs, seen);
  for (const auto& s : ctx.side_effects.global_stores) r.collect(s.value, outputs, seen);
  for (const VT& c : ctx.side_effects.mutated) r.collect(c, outputs, seen);

  TraceOutcome out;
  size_t ops = ctx.out.graph().op_count();
  if (brk) r.b.set_line(brk->line);
  else if (!code.instrs.empty()) r.b.set_line(code.instrs[tx->pc() - 1].line);
  output_graph::CompiledGraph compiled;
  if (ops > 0) {
    out.graph_ops = int(ops);
    compiled = ctx.out.compile_and_call_fx_graph(options.backend, outputs);
    out.graph = ctx.out.graph_ptr();
    Value graph_fn = make_builtin_closure(code.qualname + ".graph", [compiled](CallContext& c, const CallArgs& a) {
      std::vector<Value> inputs(a.args, a.args + a.nargs);
      try {
        return make_tuple(compiled(c, inputs));
      } catch (...) {
        graph_call_failed() = true;
        throw;
      }
    });
    r.emit_const(graph_fn);
    for (const auto& in : ctx.out.inputs()) r.emit_source(in.source);
    r.b.emit(Opcode::CALL, int32_t(ctx.out.inputs().size()));
    r.b.emit(Opcode::STORE_FAST, r.graph_out);
  }
  // Everything the continuation needs is loaded before side effects are
  // replayed: a value read from G['x'] must not become the x a replayed
  // STORE_GLOBAL x put there.
  if (!brk && ctx.side_effects.empty()) {
    FastPath fast;
    fast.graph = compiled;
    bool ok = true;
    auto param = [&](const output_graph::Source* s) {
      return s && s->kind == SourceKind::Local && s->local_index >= 0 && s->local_index < code.nparams();
    };
    for (const auto& in : ctx.out.inputs()) {
      const output_graph::Source* s = in.source.get();
      if (param(s))
        fast.inputs.push_back({size_t(s->local_index)});
      else if (s->kind == SourceKind::Item && param(s->base.get()) && s->key.is(Kind::Int) && s->key.as_int() >= 0)
        fast.inputs.push_back({size_t(s->base->local_index), s->key.as_int()});
      else
        ok = false;
    }
    if (ok && result_template(tx->result(), r, ctx, code.nparams(), fast.result)) out.fast = std::move(fast);
  }
  if (!brk) {
    r.reconstruct(tx->result());
    int32_t ret = r.b.local("__return");
    r.b.emit(Opcode::STORE_FAST, ret);
    // (python_frames: a closure the residual rebuilds over the frame's
    // cells, returned or stored, needs what they hold; nothing else reads
    // them after a return, so only those are filled)
    std::set<const vars::VariableTracker*> seen_vts, closed_over;
    reachable_cells(tx->result(), seen_vts, closed_over);
    for (const auto& s : ctx.side_effects.attr_stores) reachable_cells(s.value, seen_vts, closed_over);
    for (const auto& s : ctx.side_effects.global_stores) reachable_cells(s.value, seen_vts, closed_over);
    for (const auto& s : ctx.side_effects.cell_stores) reachable_cells(s.cell->items[0], seen_vts, closed_over);
    for (const VT& c : ctx.side_effects.mutated) reachable_cells(c, seen_vts, closed_over);
    const auto own_cells = r.park_own_cells(&closed_over);
    r.replay_side_effects();
    r.fill_own_cells(own_cells);
    r.b.emit(Opcode::LOAD_FAST, ret);
    r.b.emit(Opcode::RETURN_VALUE);
  } else if (options.python_frames) {
    emit_continuation(r, *tx, live_locals, live_names, out);
    out.graph_break = GraphBreak{break_reason_id(why->reason), break_text(*why),
                                 code.qualname, code.filename, brk->line, break_reason_hint(why->reason)};
    if (log)
      log->info("{} at {}:{} in {}: {} (CPython continues the frame)", out.graph_break->id, code.filename,
                brk->line, code.qualname, out.graph_break->reason);
  } else if (in_try) {
    // The whole stack crosses (the breaking instruction's operands too),
    // then the resume function runs from the breaking instruction on.
    const std::vector<VT>& stack = tx->stack();
    std::vector<Slot> slots(stack.size(), Slot::Value);
    size_t passed = 0;  // the slots that are values (NULLs are pushed again by the prologue)
    for (size_t i = 0; i < stack.size(); ++i) {
      if (!stack[i]) {
        slots[i] = Slot::Null;
        continue;
      }
      VT sv = stack[i]->is(VTKind::Lazy) ? stack[i]->realized : stack[i];
      // A deferred attribute read (LOAD_METHOD's GetAttr) is what may raise:
      // reconstructed here it would raise outside the try block's handler.
      if (sv && sv->is(VTKind::GetAttr))
        unsupported(BreakReason::in_try_block, "an attribute read split from its call by the break");
      // (an iterator that raises crosses as itself: it is one already)
      slots[i] = iterator_slot(sv, shared);
      r.reconstruct(stack[i], slots[i] != Slot::Value);
      passed += at_position(slots[i]) ? 2 : 1;
    }
    std::vector<int32_t> live_temps = r.park_live_locals(live_locals);
    r.park_cells(tx->cells());
    r.replay_side_effects();
    std::vector<int32_t> temps;
    for (size_t i = 0; i < passed; ++i) temps.push_back(r.b.local("__resume_arg" + std::to_string(i)));
    for (size_t i = passed; i-- > 0;) r.b.emit(Opcode::STORE_FAST, temps[i]);
    Ref<FunctionObj> rf = make_resume(*fn, tx->pc(), stack.size(), live_names, slots);
    r.emit_resume_callee(rf, options);
    for (int32_t t : temps) r.b.emit(Opcode::LOAD_FAST, t);
    for (int32_t t : live_temps) r.b.emit(Opcode::LOAD_FAST, t);
    r.b.emit(Opcode::CALL, int32_t(passed + live_locals.size()));
    r.b.emit(Opcode::RETURN_VALUE);
    out.graph_break = GraphBreak{break_reason_id(why->reason), break_text(*why),
                                 code.qualname, code.filename, brk->line, break_reason_hint(why->reason)};
    if (log)
      log->info("{} at {}:{} in {} (inside a try block: resumed there)", out.graph_break->id, code.filename,
                brk->line, code.qualname);
  } else {
    const std::vector<VT>& stack = tx->stack();
    const OpcodeInfo& info = opcode_info(brk->op);
    int pops = opcode_pops(brk->op, brk->a, brk->b);
    size_t callee_slot = SIZE_MAX;
    if (why->reason == BreakReason::inlined_break &&
        (brk->op == Opcode::CALL || brk->op == Opcode::CALL_KW || brk->op == Opcode::CALL_METHOD ||
         brk->op == Opcode::CALL_METHOD_KW || brk->op == Opcode::CALL_EX))
      callee_slot = stack.size() - size_t(pops);
    Opcode op = brk->op;
    int32_t extra_args = 0;  // a module callee replaced by (compiled forward, module)
    VT module_in_front_of_args;  // the same for CALL_EX: the module goes first in its args
    const size_t untouched = stack.size() - size_t(pops);  // slots the breaking instruction leaves alone
    std::vector<Slot> slots(untouched, Slot::Value);
    size_t nulls = 0;  // NULLs among them: the resume function's prologue pushes them again
    size_t operands_emitted = 0;  // the breaking instruction's own operands rebuilt below
    for (size_t i = 0; i < stack.size(); ++i) {
      if (i == callee_slot) {
        // The callee broke while inlined: it runs as its own compiled frame.
        // Realizing it guards its identity, which baking in its compiled
        // form relies on (the restarted trace stopped before the CALL).
        VT callee = ctx.builder.realize(stack[i]);
        if (callee && (callee->is(VTKind::UserFunction) || callee->is(VTKind::UserMethod)) &&
            callee->value.is(Kind::Function)) {
          if (callee->is(VTKind::UserMethod))
            unsupported(BreakReason::resume_state, "a bound method held across the break");
          r.emit_const(compiled_value(Ref<FunctionObj>(callee->value.as<FunctionObj>()), options));
          continue;
        }
        // A closure made in the trace: rebuilt, then compiled when it runs.
        if (callee && callee->is(VTKind::NestedFunction)) {
          r.emit_const(compile_when_called(options));
          r.reconstruct(callee);
          r.b.emit(Opcode::CALL, 1);
          continue;
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
            Value compiled = compiled_value(Ref<FunctionObj>(fwd->as<FunctionObj>()), options);
            if (!m->forward_pre_hooks.empty() || !m->forward_hooks.empty()) {
              Object* inner = compiled.obj();
              compiled = make_builtin_closure(
                  "kiln.hooked_call",
                  [inner](CallContext& c, const CallArgs& a) {
                    const Value forward = Value::object(Kind::Builtin, inner);
                    return module_call(c, a[0], CallArgs{a.args + 1, a.nargs - 1, a.kwnames}, &forward);
                  },
                  {Ref<Object>(inner)});
            }
            r.emit_const(compiled);
            if (brk->op == Opcode::CALL_EX) {
              module_in_front_of_args = callee;
              continue;
            }
            r.reconstruct(callee);
            extra_args = 1;
            continue;
          }
        }
      }
      if (module_in_front_of_args && i == callee_slot + 1) {  // CALL_EX's args: [module, *args]
        r.reconstruct(module_in_front_of_args);
        r.b.emit(Opcode::BUILD_LIST, 1);
        r.reconstruct(stack[i]);
        r.b.emit(Opcode::LIST_EXTEND, 1);
        continue;
      }
      if (!stack[i] && i == stack.size() - size_t(pops) + 1 &&
          (op == Opcode::CALL_METHOD || op == Opcode::CALL_METHOD_KW)) {
        op = op == Opcode::CALL_METHOD ? Opcode::CALL : Opcode::CALL_KW;  // NULL self: a plain call
        continue;
      }
      if (!stack[i] && i < untouched) {  // a call pending under the breaking instruction
        slots[i] = Slot::Null;
        ++nulls;
        continue;
      }
      VT sv = stack[i] && stack[i]->is(VTKind::Lazy) ? stack[i]->realized : stack[i];
      if (i < untouched) slots[i] = iterator_slot(sv, shared);
      r.reconstruct(stack[i], i < untouched && slots[i] != Slot::Value);
      if (i >= untouched) ++operands_emitted;
    }
    // An instruction the trace knows raises, and MAKE_FUNCTION whatever the
    // reason, runs on operands parked in temporaries: rebuilt in place (a
    // constant that is not code, BUILD_TUPLE 0 for a closure) they could be
    // what the verifier rejects statically, and the residual would not
    // verify where the VM raises.
    if ((why->reason == BreakReason::python_error || brk->op == Opcode::MAKE_FUNCTION) && operands_emitted) {
      std::vector<int32_t> parked;
      for (size_t k = 0; k < operands_emitted; ++k) parked.push_back(r.b.local("__raising_operand" + std::to_string(k)));
      for (size_t k = operands_emitted; k-- > 0;) r.b.emit(Opcode::STORE_FAST, parked[k]);
      for (int32_t t : parked) r.b.emit(Opcode::LOAD_FAST, t);
    }
    std::vector<int32_t> live_temps = r.park_live_locals(live_locals);
    r.park_cells(tx->cells());
    r.replay_side_effects();
    auto operand = [&](OperandKind k, int32_t v) -> int32_t {
      switch (k) {
        case OperandKind::Const: return r.b.constant(code.consts[size_t(v)]);
        case OperandKind::Name: return r.b.name(code.names[size_t(v)]->s);
        default: return v;
      }
    };
    auto resume = [&](size_t target, size_t depth) {
      // Park the stack in temporaries, then call the resume function
      // with the stack and the live locals. The NULLs are all among the
      // untouched slots, under whatever the breaking instruction pushed.
      std::vector<Slot> kept(slots.begin(), slots.begin() + ptrdiff_t(std::min(depth, slots.size())));
      const size_t passed = depth - nulls + size_t(std::count_if(kept.begin(), kept.end(), at_position));
      std::vector<int32_t> temps;
      for (size_t i = 0; i < passed; ++i) temps.push_back(r.b.local("__resume_arg" + std::to_string(i)));
      for (size_t i = passed; i-- > 0;) r.b.emit(Opcode::STORE_FAST, temps[i]);
      Ref<FunctionObj> rf = make_resume(*fn, target, depth, live_names, kept);
      r.emit_resume_callee(rf, options);
      for (int32_t t : temps) r.b.emit(Opcode::LOAD_FAST, t);
      for (int32_t t : live_temps) r.b.emit(Opcode::LOAD_FAST, t);
      r.b.emit(Opcode::CALL, int32_t(passed + live_locals.size()));
      r.b.emit(Opcode::RETURN_VALUE);
    };
    // The residual's frame still binds every parameter; one the trace
    // deleted (DELETE_FAST) is unbound again before the breaking read, which
    // then raises UnboundLocalError as the VM does (a fuzz finding, defect 31).
    if ((brk->op == Opcode::LOAD_FAST || brk->op == Opcode::DELETE_FAST) && brk->a < code.nparams() &&
        !tx->locals()[size_t(brk->a)])
      r.b.emit(Opcode::DELETE_FAST, brk->a);
    size_t base = stack.size() - size_t(pops);
    int32_t b_operand = operand(info.b, brk->b);
    if (info.flow == Flow::Branch) {
      auto taken = r.b.new_label();
      r.b.emit(op, taken, b_operand);
      resume(tx->pc() + 1, base + size_t(opcode_pushes(brk->op, brk->a, brk->b)));
      r.b.bind(taken);
      r.b.set_line(brk->line);
      // The taken edge has its own effect (JUMP_IF_TRUE_OR_POP keeps TOS).
      resume(size_t(brk->a), stack.size() - size_t(opcode_jump_pops(brk->op, brk->a, brk->b)) +
                                 size_t(opcode_jump_pushes(brk->op, brk->a, brk->b)));
    } else if (brk->op == Opcode::LOAD_METHOD) {
      // Its second slot may be the NULL of a method call, which no
      // temporary can hold (the verifier refuses to store one): run it as
      // CPython's own fallback, the attribute (bound, when a method) and a
      // NULL, which CALL_METHOD calls alike. The NULL crosses like the
      // pending calls' NULLs: the resume function's prologue pushes it.
      r.b.emit(Opcode::LOAD_ATTR, operand(info.a, brk->a));
      slots.push_back(Slot::Value);
      slots.push_back(Slot::Null);
      ++nulls;
      resume(tx->pc() + 1, base + 2);
    } else {
      r.b.emit(op, operand(info.a, brk->a) + extra_args, b_operand);
      if (info.flow == Flow::Next)
        resume(tx->pc() + 1, base + size_t(opcode_pushes(brk->op, brk->a, brk->b)));
    }
    out.graph_break = GraphBreak{break_reason_id(why->reason), break_text(*why),
                                 code.qualname, code.filename, brk->line, break_reason_hint(why->reason)};
    if (log)
      log->info("{} at {}:{} in {}: {}", out.graph_break->id, code.filename, brk->line, code.qualname,
                out.graph_break->reason);
  }
  auto residual = make_ref<FunctionObj>();
  residual->code = r.b.finish();
  // The residual takes the frame's parameters in the same slots: zero-
  // argument super() in it reads the same first argument (none for a
  // resume function of a function without one: "super(): no arguments").
  residual->code->first_arg_local = code.first_arg_local;
  residual->code->continues = code.continues;
  residual->defaults = fn->defaults;
  residual->kwdefaults = fn->kwdefaults;
  residual->closure = fn->closure;
  residual->globals = fn->globals;
  out.residual = residual;
  out.guards = ctx.out.guards();
  if (ctx.shape_read) out.guards.specialize_all();
  if (auto* blog = kiln::log::get("bytecode")) blog->info("residual of {}:\n{}", code.qualname, disassemble(*residual->code));
  return out;
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

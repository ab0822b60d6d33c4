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
#include "interpreter/instruction_translator.h"
#include "runtime/builtins.h"
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

namespace {

// ---------------------------------------------------------- resume functions
// A resume function is a copy of an original code object with a prologue
// that pushes the saved stack and jumps to the target. It is made from the
// *original* code even when the break happens inside a resume function, so
// a break inside a loop reuses one resume function for every iteration.

// How a saved stack slot crosses into a resume function.
enum class Slot : uint8_t {
  Value,     // a parameter, pushed by the prologue
  Iterator,  // a loop's iterator, passed as the list of its remaining items and re-iterated
  Null,      // LOAD_METHOD's NULL under a pending call: no parameter, the prologue pushes it (PUSH_NULL)
};

struct ResumeOrigin {
  Ref<Code> original;
  size_t offset;  // instructions of prologue before the copied code
  size_t target;  // where it resumes, in the original's numbering
};
struct ResumeKey {
  const Code* original;
  size_t target;
  size_t nstack;
  std::vector<std::string> live;
  std::vector<Slot> slots;  // how each of the nstack slots crosses (missing: Slot::Value)
  bool operator<(const ResumeKey& o) const {
    return std::tie(original, target, nstack, live, slots) < std::tie(o.original, o.target, o.nstack, o.live, o.slots);
  }
};
std::mutex resume_mu;
std::map<const Code*, ResumeOrigin>& resume_origins() {
  static auto* m = new std::map<const Code*, ResumeOrigin>();
  return *m;
}
std::map<ResumeKey, Ref<FunctionObj>>& resume_cache() {
  static auto* m = new std::map<ResumeKey, Ref<FunctionObj>>();
  return *m;
}

// Names the residual and resume code add, never user state to carry over.
bool is_stack_temp(const std::string& n) {
  for (const char* prefix : {"__stack", "__resume_arg", "__resume_cells", "__cell_value", "__target", "__contents", "__store_value", "__store_object", "__global_value", "__rebuilt", "__dict_contents", "__live", "__graph_out", "__return"})
    if (n.rfind(prefix, 0) == 0) return true;
  return false;
}

// Copies `code`'s instructions into `b` from label `labels[i]` on,
// remapping operands through the builder.
void copy_code(CodeBuilder& b, const Code& code, const std::vector<CodeBuilder::Label>& labels) {
  for (size_t p = 0; p < code.instrs.size(); ++p) {
    const Instr& ins = code.instrs[p];
    b.bind(labels[p]);
    b.set_line(ins.line);
    const OpcodeInfo& info = opcode_info(ins.op);
    auto map = [&](OperandKind k, int32_t v) -> int32_t {
      switch (k) {
        case OperandKind::Const: return b.constant(code.consts[size_t(v)]);
        case OperandKind::Local: return *b.find_local(code.varnames[size_t(v)]);
        case OperandKind::Name: return b.name(code.names[size_t(v)]->s);
        default: return v;
      }
    };
    if (info.a == OperandKind::Jump) b.emit(ins.op, labels[size_t(ins.a)], map(info.b, ins.b));
    else b.emit(ins.op, map(info.a, ins.a), map(info.b, ins.b));
  }
}

// The exception table of `code`, over the labels copy_code bound: a
// resume function resumes inside the original's try blocks with their
// handlers (the prologue pushes exactly the saved stack, so the rows'
// depths hold). An end one past the last instruction gets its own label.
void copy_exception_table(CodeBuilder& b, const Code& code, const std::vector<CodeBuilder::Label>& labels) {
  if (code.exception_table.empty()) return;
  CodeBuilder::Label end = b.new_label();
  b.bind(end);
  auto at = [&](int32_t p) { return size_t(p) < labels.size() ? labels[size_t(p)] : end; };
  for (const ExceptionEntry& e : code.exception_table) b.handler(at(e.start), at(e.end), at(e.target), e.depth, e.lasti);
}

// `slots[i]`: how stack slot i crosses. A loop's iterator is passed as the
// list of its remaining items (a resumed trace can unroll a list; a live
// iterator object it could only treat as opaque). A NULL (a call pending
// across the break: `self.b(self.a(x))` breaking in self.a, with b's
// LOAD_METHOD pair under it) is no value a caller can pass: the prologue
// pushes it again, so the resumed CALL_METHOD sees CPython's stack shape.
Ref<FunctionObj> make_resume(const FunctionObj& fn, size_t target, size_t nstack, const std::vector<std::string>& live,
                             const std::vector<Slot>& slots) {
  const Code* code = fn.code.get();
  Ref<Code> original(const_cast<Code*>(code));
  size_t orig_target = target;
  {
    std::lock_guard<std::mutex> lock(resume_mu);
    auto it = resume_origins().find(code);
    if (it != resume_origins().end()) {
      original = it->second.original;
      orig_target = target - it->second.offset;
    }
    ResumeKey key{original.get(), orig_target, nstack, live, slots};
    auto hit = resume_cache().find(key);
    if (hit != resume_cache().end()) return hit->second;
  }
  const Code& orig = *original;
  CodeBuilder b(orig.name + "_resume_at_" + std::to_string(orig_target), orig.filename);
  b.set_qualname(orig.qualname + "_resume_at_" + std::to_string(orig_target));
  auto slot = [&](size_t i) { return i < slots.size() ? slots[i] : Slot::Value; };
  size_t nparams = 0;
  for (size_t i = 0; i < nstack; ++i)
    if (slot(i) != Slot::Null) b.arg("__stack" + std::to_string(nparams++));
  for (const std::string& n : live) b.arg(n);
  // The frame's cells (cellvars, then freevars) are the resume function's
  // closure, in the same order, so cell operands carry over unchanged: the
  // residual passes the very cells (resume_closure), and a closure made
  // before the break shares them with the resumed frame, as in Python.
  for (const std::string& n : orig.cellvars) b.freevar(n);
  for (const std::string& n : orig.freevars) b.freevar(n);
  for (const std::string& n : orig.varnames) b.local(n);
  std::vector<CodeBuilder::Label> labels;
  for (size_t p = 0; p < orig.instrs.size(); ++p) labels.push_back(b.new_label());
  b.set_line(orig.instrs[orig_target].line);
  for (size_t i = 0, k = 0; i < nstack; ++i) {
    if (slot(i) == Slot::Null) {
      b.emit(Opcode::PUSH_NULL);
      continue;
    }
    b.emit(Opcode::LOAD_FAST, *b.find_local("__stack" + std::to_string(k++)));
    if (slot(i) == Slot::Iterator) b.emit(Opcode::GET_ITER);
  }
  b.emit(Opcode::JUMP, labels[orig_target]);
  size_t offset = b.size();
  copy_code(b, orig, labels);
  copy_exception_table(b, orig, labels);
  Ref<Code> rc = b.finish();
  // Zero-argument super() reads the original's first argument, which
  // crossed as the live parameter of its name (runtime/code.h).
  if (orig.argcount == 0) {
    rc->first_arg_local = Code::kNoFirstArg;
  } else {
    auto it = std::find(live.begin(), live.end(), orig.varnames[0]);
    rc->first_arg_local = it == live.end() ? Code::kFirstArgGone : int32_t(nparams + size_t(it - live.begin()));
  }
  auto f = make_ref<FunctionObj>();
  f->code = rc;
  f->globals = fn.globals;
  // A resume function with a closure is made per call over that call's
  // cells (Residual::emit_resume_callee); only its code is used then.
  if (rc->freevars.empty()) f->closure = fn.closure;
  std::lock_guard<std::mutex> lock(resume_mu);
  resume_origins()[rc.get()] = {original, offset, orig_target};
  resume_cache()[ResumeKey{original.get(), orig_target, nstack, live, slots}] = f;
  return f;
}

// -------------------------------------------------------------- residual --

// The iterator of a dict or set that changed size while a loop ran over it:
// its next step raises CPython's RuntimeError, and every one after.
struct RaisingIterator final : runtime::IteratorObj {
  explicit RaisingIterator(std::string m) : message(std::move(m)) {}
  std::string message;
  bool next(Value&) override { throw_error(ErrorKind::RuntimeError, message); }
};

// kiln.compile as a KBC callable: for functions the residual makes at run
// time (a closure made in the trace, a resume function over its cells).
Value compile_when_called(const Options& options) {
  return make_builtin_closure("kiln.compile", [options](CallContext&, const CallArgs& a) {
    if (a.nargs != 1 || !a[0].is(Kind::Function)) throw_error(ErrorKind::TypeError, "kiln.compile expects a function");
    return compiled_value(Ref<FunctionObj>(a[0].as<FunctionObj>()), options);
  });
}

// Cells made during the trace (a closure's captured variables) that the
// residual code must turn into real cells: counted before any code is
// emitted, because cellvars are declared first.
void count_trace_cells(const VT& v0, std::set<const vars::VariableTracker*>& seen, size_t& n) {
  VT v = v0 && v0->is(VTKind::Lazy) ? v0->realized : v0;
  if (!v || !seen.insert(v.get()).second) return;
  if (v->is(VTKind::Cell) && !v->source) ++n;
  for (const VT& x : v->items) count_trace_cells(x, seen, n);
  if (v->self) count_trace_cells(v->self, seen, n);
}

struct Residual {
  Residual(const Code& code, TraceContext& ctx, size_t trace_cells)
      : code(code), ctx(ctx), b(code.name, code.filename), trace_cells(trace_cells) {
    b.set_qualname(code.qualname);
    b.set_first_line(code.first_line);
    // Same parameters and locals, in the same order: local indices carry over.
    for (int32_t i = 0; i < code.argcount; ++i) {
      b.arg(code.varnames[size_t(i)]);
      if (i + 1 == code.posonlyargcount) b.posonly_marker();
    }
    size_t next = size_t(code.argcount);
    size_t kw_end = next + size_t(code.kwonlyargcount);
    if (code.flags & kVarArgs) b.var_args(code.varnames[kw_end]);
    for (size_t i = next; i < kw_end; ++i) b.kwonly_arg(code.varnames[i], Value::none());
    if (code.flags & kVarKw) b.var_kw(code.varnames[kw_end + ((code.flags & kVarArgs) ? 1 : 0)]);
    for (size_t i = 0; i < trace_cells; ++i) b.cellvar("__cell" + std::to_string(i));
    for (const std::string& n : code.freevars) b.freevar(n);
    for (const std::string& n : code.varnames) b.local(n);
    graph_out = b.local("__graph_out");
  }

  const Code& code;
  TraceContext& ctx;
  CodeBuilder b;
  size_t trace_cells;  // the residual's own cellvars: trace-made cells, then the frame's freevars
  std::unordered_map<const vars::VariableTracker*, int32_t> cell_slot;
  int32_t graph_out;
  std::unordered_map<const Node*, int64_t> output_index;
  // Containers made during the trace, already rebuilt into a temporary:
  // one object, however many places (stack, locals) refer to it.
  std::unordered_map<const vars::VariableTracker*, int32_t> rebuilt;

  void emit_const(const Value& v) { b.emit(Opcode::LOAD_CONST, b.constant(v)); }

  // The frame's cells as one tuple in a temporary, made before any branch
  // (emit_cell fills a trace-made cell only the first time, which a
  // branch's other edge would skip). -1 when the frame has no cells.
  int32_t resume_cells = -1;
  void park_cells(const std::vector<VT>& cells) {
    if (cells.empty()) return;
    for (const VT& c : cells) emit_cell(c);
    b.emit(Opcode::BUILD_TUPLE, int32_t(cells.size()));
    resume_cells = b.local("__resume_cells");
    b.emit(Opcode::STORE_FAST, resume_cells);
  }
  // Pushes the compiled resume function: a constant, or, for a frame with
  // cells, a function made now over the parked cells, compiled when called.
  void emit_resume_callee(const Ref<FunctionObj>& rf, const Options& options) {
    if (resume_cells < 0) return emit_const(compiled_value(rf, options));
    emit_const(compile_when_called(options));
    b.emit(Opcode::LOAD_FAST, resume_cells);
    emit_const(Value::object(Kind::Code, rf->code));
    b.emit(Opcode::MAKE_FUNCTION, 4);
    b.emit(Opcode::CALL, 1);
  }

  void emit_source(const SourceRef& s) {
    switch (s->kind) {
      case SourceKind::Local: b.emit(Opcode::LOAD_FAST, s->local_index); return;
      case SourceKind::Global:
        if (s->globals) {
          // Another namespace's global: a constant reader of that namespace
          // (LOAD_GLOBAL would read the frame's own).
          emit_const(runtime::make_builtin_closure(
              "G*['" + s->name + "']", [ns = s->globals, name = runtime::intern(s->name)](runtime::CallContext&,
                                                                                   const runtime::CallArgs&) {
                const Value* v = ns->map.find(name.get());
                if (!v) throw_error(ErrorKind::NameError, "name '" + name->s + "' is not defined");
                return *v;
              }));
          b.emit(Opcode::CALL, 0);
          return;
        }
        b.emit(Opcode::LOAD_GLOBAL, b.name(s->name));
        return;
      case SourceKind::Attr:
        emit_source(s->base);
        b.emit(Opcode::LOAD_ATTR, b.name(s->name));
        return;
      case SourceKind::Item:
        emit_source(s->base);
        emit_const(s->key);
        b.emit(Opcode::BINARY_SUBSCR);
        return;
      case SourceKind::Cell:
        if (s->base) unsupported(BreakReason::resume_state, "reloading another function's closure cell");
        b.emit(Opcode::LOAD_DEREF, int32_t(trace_cells) + s->local_index);
        return;
    }
  }

  // `as_list`: an iterator is rebuilt as the list of its remaining items.
  void reconstruct(const VT& v0, bool as_list = false) {
    VT v = v0;
    if (v && v->is(VTKind::Lazy)) {
      if (!v->realized) return emit_source(v->source);
      v = v->realized;
    }
    if (!v) unsupported(BreakReason::resume_state, "a method call split across the break");
    switch (v->kind) {
      case VTKind::Tensor:
        // An input (the graph may not even take it, if it was only guarded).
        if (v->node->op == NodeOp::Placeholder) return emit_source(v->source);
        if (v->node->op == NodeOp::GetAttr) return emit_const(*ctx.out.graph().attr(v->node->target));
        b.emit(Opcode::LOAD_FAST, graph_out);
        emit_const(Value::integer(output_index.at(v->node)));
        b.emit(Opcode::BINARY_SUBSCR);
        return;
      case VTKind::Constant:
        if (v->value.is(Kind::Set)) {
          // A mutable set: the caller's own object, or a fresh one per run
          // (a constant would be one object shared by every call).
          if (v->source) return emit_source(v->source);
          auto done = rebuilt.find(v.get());
          if (done != rebuilt.end()) return b.emit(Opcode::LOAD_FAST, done->second);
          // An exact copy of the trace's set (its table: the order the VM's
          // set would have), made anew by each run.
          emit_const(make_builtin_closure("set", [snapshot = runtime::set_clone(v->value, true)](
                                                     CallContext&, const CallArgs&) {
            return runtime::set_clone(snapshot, false);
          }));
          b.emit(Opcode::CALL, 0);
          int32_t tmp = b.local("__rebuilt" + std::to_string(rebuilt.size()));
          rebuilt.emplace(v.get(), tmp);
          b.emit(Opcode::COPY, 1);
          b.emit(Opcode::STORE_FAST, tmp);
          return;
        }
        return emit_const(v->value);
      case VTKind::List:
      case VTKind::ConstDict: {
        if (v->source) return emit_source(v->source);
        auto done = rebuilt.find(v.get());
        if (done != rebuilt.end()) return b.emit(Opcode::LOAD_FAST, done->second);
        if (v->is(VTKind::List)) {
          for (const VT& x : v->items) reconstruct(x);
          b.emit(Opcode::BUILD_LIST, int32_t(v->items.size()));
        } else {
          for (size_t i = 0; i < v->keys.size(); ++i) {
            emit_const(v->keys[i]);
            reconstruct(v->items[i]);
          }
          b.emit(Opcode::BUILD_DICT, int32_t(v->keys.size()));
        }
        int32_t tmp = b.local("__rebuilt" + std::to_string(rebuilt.size()));
        rebuilt.emplace(v.get(), tmp);
        b.emit(Opcode::COPY, 1);
        b.emit(Opcode::STORE_FAST, tmp);
        return;
      }
      case VTKind::Tuple:
        for (const VT& x : v->items) reconstruct(x);
        b.emit(Opcode::BUILD_TUPLE, int32_t(v->items.size()));
        return;
      case VTKind::Iterator: {
        if (vars::lazy_iteration(*v) != vars::LazyIteration::None)
          unsupported(BreakReason::resume_state, "a map() or filter() iterator held across the break");
        if (const char* error = vars::iteration_error(*v)) {
          // Its dict or set changed size: an iterator whose next step
          // raises, as Python's (GET_ITER of an iterator is itself).
          emit_const(make_builtin_closure("iter", [message = std::string(error)](CallContext&, const CallArgs&) {
            return Value::object(Kind::Iterator, make_ref<RaisingIterator>(message));
          }));
          b.emit(Opcode::CALL, 0);
          return;
        }
        const std::vector<VT> rest = vars::remaining_items(*v);
        for (const VT& x : rest) reconstruct(x);
        b.emit(Opcode::BUILD_LIST, int32_t(rest.size()));
        if (!as_list) b.emit(Opcode::GET_ITER);
        return;
      }
      case VTKind::UserMethod:
        unsupported(BreakReason::resume_state, "a bound method held across the break");
      case VTKind::GetAttr:
        reconstruct(v->self);
        b.emit(Opcode::LOAD_ATTR, b.name(v->module_path));
        return;
      case VTKind::NestedFunction: {
        // MAKE_FUNCTION again, over real cells: [defaults] (cells...) code.
        int32_t flags = 4;
        if (v->self) {
          reconstruct(v->self);
          flags |= 1;
        }
        for (const VT& c : v->items) emit_cell(c);
        b.emit(Opcode::BUILD_TUPLE, int32_t(v->items.size()));
        emit_const(v->value);
        b.emit(Opcode::MAKE_FUNCTION, flags);
        return;
      }
      case VTKind::Cell:
        unsupported(BreakReason::resume_state, "a closure cell held across the break");
      case VTKind::Opaque:
        if (v->value.is(Kind::Super) && v->self && !v->source) {
          // super(type, obj) again, over the obj this run has (a baked-in
          // super object would hold on to the traced call's module).
          emit_const(*runtime::builtins().find("super"));
          reconstruct(v->items[0]);
          reconstruct(v->self);
          b.emit(Opcode::CALL, 2);
          return;
        }
        [[fallthrough]];
      default:
        if (v->source) return emit_source(v->source);
        return emit_const(v->value);
    }
  }

  // Pushes a real cell for a Cell tracker: the frame's own closure cell,
  // or one of the residual's cellvars filled (once) with the content.
  void emit_cell(const VT& c) {
    if (c->source) {
      if (c->source->base) unsupported(BreakReason::resume_state, "another function's closure cell");
      b.emit(Opcode::LOAD_CLOSURE, int32_t(trace_cells) + c->source->local_index);
      return;
    }
    auto it = cell_slot.find(c.get());
    if (it == cell_slot.end()) {
      int32_t slot = int32_t(cell_slot.size());
      if (size_t(slot) >= trace_cells) unsupported(BreakReason::resume_state, "an uncounted closure cell");
      it = cell_slot.emplace(c.get(), slot).first;
      if (c->items[0]) {
        reconstruct(c->items[0]);
        b.emit(Opcode::STORE_DEREF, slot);
      }
    }
    b.emit(Opcode::LOAD_CLOSURE, it->second);
  }

  // Every tensor the residual code needs from the graph.
  void collect(const VT& v0, std::vector<Node*>& out, std::set<const vars::VariableTracker*>& seen) {
    VT v = v0;
    if (!v) return;
    if (v->is(VTKind::Lazy)) v = v->realized;
    if (!v || !seen.insert(v.get()).second) return;
    if (v->is(VTKind::Tensor)) {
      NodeOp op = v->node->op;
      if (op != NodeOp::Placeholder && op != NodeOp::GetAttr && !output_index.count(v->node)) {
        output_index[v->node] = int64_t(out.size());
        out.push_back(v->node);
      }
      return;
    }
    for (const VT& x : v->items) collect(x, out, seen);
    if (v->self) collect(v->self, out, seen);
  }

  // The live locals rebuilt into temporaries (before side effects are
  // replayed, which may rebind what their sources name); their slots.
  std::vector<int32_t> park_live_locals(const std::vector<VT>& live_locals) {
    std::vector<int32_t> temps;
    for (size_t i = 0; i < live_locals.size(); ++i) {
      reconstruct(live_locals[i]);
      temps.push_back(b.local("__live" + std::to_string(i)));
      b.emit(Opcode::STORE_FAST, temps.back());
    }
    return temps;
  }

  // Is item i of a traced list still the list's own item i from when the
  // frame started (its source is list[i])?
  static bool is_original_item(const VT& list, size_t i) {
    const VT& x = list->items[i];
    const output_graph::Source* s = x ? x->source.get() : nullptr;
    return s && s->kind == SourceKind::Item && s->base.get() == list->source.get() && s->key.is(Kind::Int) &&
           s->key.as_int() == int64_t(i);
  }

  // Container contents first: their sources are paths as they were when
  // the frame started, which a replayed attribute/global store may rebind.
  void replay_side_effects() {
    // Deepest sources first: L['acc'][0] must still be the list the trace
    // mutated when its contents are written, before L['acc'] itself is
    // rewritten (which may put another object at [0]).
    // What the frame's cells end up holding is read first too (parked):
    // a value whose source is an item of a list the frame then cleared.
    // The residual shares the frame's closure. A store made by an inlined
    // function names the cell by that function's numbering: the cell's
    // source has the frame's own. One store per cell: its final content.
    std::vector<std::pair<int32_t, int32_t>> cell_values;  // (cell operand, temp)
    std::set<const vars::VariableTracker*> stored_cells;
    for (const auto& s : ctx.side_effects.cell_stores) {
      if (!stored_cells.insert(s.cell.get()).second) continue;
      reconstruct(s.cell->items[0]);
      int32_t tmp = b.local("__cell_value" + std::to_string(cell_values.size()));
      b.emit(Opcode::STORE_FAST, tmp);
      cell_values.push_back({int32_t(trace_cells) + s.cell->source->local_index, tmp});
    }
    // So are attribute and global stores' values and objects (G = a[1]
    // after a.reverse() stores the item the trace saw, not the one the
    // rewritten list has there).
    std::vector<std::pair<int32_t, int32_t>> attr_parked;  // (value, object)
    for (const auto& s : ctx.side_effects.attr_stores) {
      const int32_t value = b.local("__store_value" + std::to_string(attr_parked.size()));
      if (s.value) {  // null: a deletion, nothing to park
        reconstruct(s.value);
        b.emit(Opcode::STORE_FAST, value);
      }
      emit_source(s.object->source);
      const int32_t object = b.local("__store_object" + std::to_string(attr_parked.size()));
      b.emit(Opcode::STORE_FAST, object);
      attr_parked.push_back({value, object});
    }
    std::vector<int32_t> global_parked;
    for (const auto& s : ctx.side_effects.global_stores) {
      reconstruct(s.value);
      global_parked.push_back(b.local("__global_value" + std::to_string(global_parked.size())));
      b.emit(Opcode::STORE_FAST, global_parked.back());
    }
    std::vector<VT> mutated = ctx.side_effects.mutated;
    std::stable_sort(mutated.begin(), mutated.end(),
                     [](const VT& a, const VT& b) { return a->source->depth > b->source->depth; });
    // Two phases: every container's object and new contents are read
    // first (an item of one may be read by its source from another the
    // trace also changed: a1.extend(v) with v holding a3[3] after del
    // a3[0]), then they are all written.
    struct Write {
      const VT* c;
      int32_t target, contents;
      size_t keep;  // a list: the first `keep` items stay
    };
    std::vector<Write> writes;
    for (const VT& c : mutated) {
      Write w{&c, b.local("__target" + std::to_string(writes.size())),
              b.local("__contents" + std::to_string(writes.size())), 0};
      emit_source(c->source);
      b.emit(Opcode::STORE_FAST, w.target);
      if (c->is(VTKind::List)) {  // list[k:] = new contents after the unchanged first k items
        // Items the trace left where they were stay the caller's very
        // objects (an append only appends, as in Python).
        while (w.keep < c->items.size() && is_original_item(c, w.keep)) ++w.keep;
        for (size_t i = w.keep; i < c->items.size(); ++i) reconstruct(c->items[i]);
        b.emit(Opcode::BUILD_LIST, int32_t(c->items.size() - w.keep));
      } else {  // dict: the new contents (reading the old), then clear, update
        for (size_t i = 0; i < c->keys.size(); ++i) {
          emit_const(c->keys[i]);
          reconstruct(c->items[i]);
        }
        b.emit(Opcode::BUILD_DICT, int32_t(c->keys.size()));
      }
      b.emit(Opcode::STORE_FAST, w.contents);
      writes.push_back(w);
    }
    for (const Write& w : writes) {
      if ((*w.c)->is(VTKind::List)) {
        b.emit(Opcode::LOAD_FAST, w.contents);
        b.emit(Opcode::LOAD_FAST, w.target);
        emit_const(w.keep ? Value::integer(int64_t(w.keep)) : Value::none());
        emit_const(Value::none());
        b.emit(Opcode::BUILD_SLICE, 2);
        b.emit(Opcode::STORE_SUBSCR);
      } else {
        b.emit(Opcode::LOAD_FAST, w.target);
        b.emit(Opcode::LOAD_METHOD, b.name("clear"));
        b.emit(Opcode::CALL_METHOD, 0);
        b.emit(Opcode::POP_TOP);
        b.emit(Opcode::LOAD_FAST, w.target);
        b.emit(Opcode::LOAD_METHOD, b.name("update"));
        b.emit(Opcode::LOAD_FAST, w.contents);
        b.emit(Opcode::CALL_METHOD, 1);
        b.emit(Opcode::POP_TOP);
      }
    }
    for (size_t i = 0; i < ctx.side_effects.attr_stores.size(); ++i) {
      const auto& s = ctx.side_effects.attr_stores[i];
      if (s.value) b.emit(Opcode::LOAD_FAST, attr_parked[i].first);
      b.emit(Opcode::LOAD_FAST, attr_parked[i].second);
      b.emit(s.value ? Opcode::STORE_ATTR : Opcode::DELETE_ATTR, b.name(s.name));
    }
    for (size_t i = 0; i < ctx.side_effects.global_stores.size(); ++i) {
      b.emit(Opcode::LOAD_FAST, global_parked[i]);
      b.emit(Opcode::STORE_GLOBAL, b.name(ctx.side_effects.global_stores[i].name));
    }
    for (const auto& [cell, tmp] : cell_values) {
      b.emit(Opcode::LOAD_FAST, tmp);
      b.emit(Opcode::STORE_DEREF, cell);
    }
  }
};

// The result as a template over graph outputs, parameters and constants;
// false when it needs anything else (a source that is not a parameter, a
// container that must keep its identity, ...).
bool result_template(const VT& v0, const Residual& r, TraceContext& ctx, int32_t nparams, ResultTemplate& t) {
  VT v = v0;
  if (v && v->is(VTKind::Lazy)) {
    if (!v->realized) {
      if (v->source->kind != SourceKind::Local || v->source->local_index >= nparams) return false;
      t.kind = ResultTemplate::Kind::Param;
      t.index = size_t(v->source->local_index);
      return true;
    }
    v = v->realized;
  }
  if (!v) return false;
  switch (v->kind) {
    case VTKind::Tensor:
      if (v->node->op == NodeOp::Placeholder) {
        if (v->source->kind != SourceKind::Local || v->source->local_index >= nparams) return false;
        t.kind = ResultTemplate::Kind::Param;
        t.index = size_t(v->source->local_index);
        return true;
      }
      if (v->node->op == NodeOp::GetAttr) {
        t.kind = ResultTemplate::Kind::Const;
        t.value = *ctx.out.graph().attr(v->node->target);
        return true;
      }
      t.kind = ResultTemplate::Kind::Output;
      t.index = size_t(r.output_index.at(v->node));
      return true;
    case VTKind::Constant:
      if (v->value.is(Kind::Set)) return false;  // a fresh set per call: the residual builds it
      t.kind = ResultTemplate::Kind::Const;
      t.value = v->value;
      return true;
    case VTKind::Tuple:
    case VTKind::List:
      if (v->is(VTKind::List) && v->source) return false;  // the caller's own list: identity matters
      t.kind = v->is(VTKind::Tuple) ? ResultTemplate::Kind::Tuple : ResultTemplate::Kind::List;
      for (const VT& x : v->items) {
        t.items.emplace_back();
        if (!result_template(x, r, ctx, nparams, t.items.back())) return false;
      }
      return true;
    default: return false;
  }
}

}  // namespace

// `code` is a resume function whose resumed instruction is pc.
static bool resumes_at(const Code& code, size_t pc) {
  std::lock_guard<std::mutex> lock(resume_mu);
  auto it = resume_origins().find(&code);
  return it != resume_origins().end() && it->second.offset + it->second.target == pc;
}

void reset_resume_functions() {
  std::lock_guard<std::mutex> lock(resume_mu);
  resume_cache().clear();
  resume_origins().clear();
}

// The whole frame runs on the VM (its trace could not be completed or
// could not be turned into residual code), with the reason recorded.
TraceOutcome run_on_vm(const Ref<FunctionObj>& fn, const Unsupported& u) {
  const Code& code = *fn->code;
  TraceOutcome out;
  out.residual = fn;
  out.graph_break = GraphBreak{break_reason_id(u.reason), break_reason_text(u.reason, u.detail), code.qualname,
                               code.filename, code.first_line, break_reason_hint(u.reason)};
  return out;
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
    return run_on_vm(fn, Unsupported{BreakReason::in_try_block, break_reason_text(why->reason, why->detail), {}});
  try {
  size_t trace_cells = 0;
  {
    std::set<const vars::VariableTracker*> seen;
    if (tx->returned()) count_trace_cells(tx->result(), seen, trace_cells);
    for (const VT& v : tx->stack()) count_trace_cells(v, seen, trace_cells);
    for (const VT& v : tx->locals()) count_trace_cells(v, seen, trace_cells);
    for (const VT& c : tx->cells()) count_trace_cells(c, seen, trace_cells);
    for (const auto& e : ctx.side_effects.attr_stores) count_trace_cells(e.value, seen, trace_cells);
    for (const auto& e : ctx.side_effects.global_stores) count_trace_cells(e.value, seen, trace_cells);
    for (const VT& c : ctx.side_effects.mutated) count_trace_cells(c, seen, trace_cells);
  }
  Residual r(code, ctx, trace_cells);
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
    out.graph_code = ctx.out.graph().code();
    out.graph = ctx.out.graph_ptr();
    Value graph_fn = make_builtin_closure(code.qualname + ".graph", [compiled](CallContext& c, const CallArgs& a) {
      std::vector<Value> inputs(a.args, a.args + a.nargs);
      return make_tuple(compiled(c, inputs));
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
    for (const auto& in : ctx.out.inputs()) {
      if (in.source->kind != SourceKind::Local || in.source->local_index >= code.nparams()) ok = false;
      else fast.inputs.push_back(size_t(in.source->local_index));
    }
    if (ok && result_template(tx->result(), r, ctx, code.nparams(), fast.result)) out.fast = std::move(fast);
  }
  if (!brk) {
    r.reconstruct(tx->result());
    int32_t ret = r.b.local("__return");
    r.b.emit(Opcode::STORE_FAST, ret);
    r.replay_side_effects();
    r.b.emit(Opcode::LOAD_FAST, ret);
    r.b.emit(Opcode::RETURN_VALUE);
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
      if (sv && sv->is(VTKind::Iterator) && !vars::iteration_error(*sv)) slots[i] = Slot::Iterator;
      r.reconstruct(stack[i], slots[i] == Slot::Iterator);
      ++passed;
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
    out.graph_break = GraphBreak{break_reason_id(why->reason), break_reason_text(why->reason, why->detail),
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
            if (!m->forward_pre_hooks.empty() || !m->forward_hooks.empty())
              compiled = make_builtin_closure("kiln.hooked_call", [compiled](CallContext& c, const CallArgs& a) {
                return module_call(c, a[0], CallArgs{a.args + 1, a.nargs - 1, a.kwnames}, &compiled);
              });
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
      bool iter = i < untouched && sv && sv->is(VTKind::Iterator) && !vars::iteration_error(*sv);
      if (iter) slots[i] = Slot::Iterator;
      r.reconstruct(stack[i], iter);
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
      const size_t passed = depth - nulls;
      std::vector<int32_t> temps;
      for (size_t i = 0; i < passed; ++i) temps.push_back(r.b.local("__resume_arg" + std::to_string(i)));
      for (size_t i = passed; i-- > 0;) r.b.emit(Opcode::STORE_FAST, temps[i]);
      std::vector<Slot> kept(slots.begin(), slots.begin() + ptrdiff_t(std::min(depth, slots.size())));
      Ref<FunctionObj> rf = make_resume(*fn, target, depth, live_names, kept);
      r.emit_resume_callee(rf, options);
      for (int32_t t : temps) r.b.emit(Opcode::LOAD_FAST, t);
      for (int32_t t : live_temps) r.b.emit(Opcode::LOAD_FAST, t);
      r.b.emit(Opcode::CALL, int32_t(passed + live_locals.size()));
      r.b.emit(Opcode::RETURN_VALUE);
    };
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
    } else {
      r.b.emit(op, operand(info.a, brk->a) + extra_args, b_operand);
      if (info.flow == Flow::Next)
        resume(tx->pc() + 1, base + size_t(opcode_pushes(brk->op, brk->a, brk->b)));
    }
    out.graph_break = GraphBreak{break_reason_id(why->reason), break_reason_text(why->reason, why->detail),
                                 code.qualname, code.filename, brk->line, break_reason_hint(why->reason)};
    if (log)
      log->info("{} at {}:{} in {}: {}", out.graph_break->id, code.filename, brk->line, code.qualname,
                out.graph_break->reason);
  }
  auto residual = make_ref<FunctionObj>();
  residual->code = r.b.finish();
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
    return run_on_vm(fn, u);
  }
}

TraceOutcome convert_frame(const Ref<FunctionObj>& fn, const std::vector<Value>& args, const Options& options,
                           CallContext& vm, const std::map<std::string, std::vector<bool>>& dynamic_dims,
                           output_graph::DistributedState* distributed) {
  const Code& code = *fn->code;
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
  // At most: the first analysis, its restart after the compiler
  // collective, and the speculation restart before a breaking step.
  for (int attempt = 0; attempt < 3; ++attempt) {
    TraceContext ctx(vm);
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
      stop = tx->steps();
      why = u;
      continue;
    }
    if (collective_restarts(ctx)) continue;
    const Instr* brk = why ? &code.instrs[tx->pc()] : nullptr;
    if (brk && options.fullgraph)
      throw_error(ErrorKind::RuntimeError, "graph break in fullgraph mode: " +
                                               (why->cause.empty() ? break_reason_text(why->reason, why->detail)
                                                                   : why->cause) +
                                               " (" + code.qualname + ", " +
                                               code.filename + ":" + std::to_string(brk->line) + "); hint: " +
                                               break_reason_hint(why->reason));
    return finish(compile_subgraph(fn, ctx, &*tx, brk, why, options));
  }
  throw_error(ErrorKind::RuntimeError, "convert_frame: the trace did not settle");
}

}  // namespace kiln::interpreter

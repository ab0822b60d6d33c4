// The translator's step loop and the handlers of the stack, locals,
// constants, containers and control flow, with iteration and truth.
// What the handlers call on trackers lives beside them, each group of
// instruction_translator.h naming its file: calls and attribute reads in
// translator_invoke.cpp, operators, compares, items and unpacking in
// translator_operators.cpp.
#include "interpreter/instruction_translator.h"
#include "interpreter/nn_module.h"

#include <algorithm>
#include <cstdio>

#include "runtime/base/budget.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/name_map.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;
using output_graph::attr_source;
using output_graph::global_source;
using output_graph::local_source;

// ------------------------------------------------------------ break table --

const char* break_reason_id(BreakReason r) {
  switch (r) {
#define KILN_BREAK(id, reason, hint) \
  case BreakReason::id: return #id;
#include "interpreter/graph_breaks.def"
#undef KILN_BREAK
  }
  return "?";
}

std::string break_reason_text(BreakReason r, const std::string& detail) {
  const char* fmt = "";
  switch (r) {
#define KILN_BREAK(id, reason, hint) \
  case BreakReason::id: fmt = reason; break;
#include "interpreter/graph_breaks.def"
#undef KILN_BREAK
  }
  std::string s = fmt;
  size_t at = s.find("%s");
  if (at != std::string::npos) s.replace(at, 2, detail);
  return s;
}

const char* break_reason_hint(BreakReason r) {
  switch (r) {
#define KILN_BREAK(id, reason, hint) \
  case BreakReason::id: return hint;
#include "interpreter/graph_breaks.def"
#undef KILN_BREAK
  }
  return "";
}


// ------------------------------------------------------------------ setup --

InstructionTranslator::InstructionTranslator(TraceContext& ctx, Ref<FunctionObj> fn, std::vector<VT> locals,
                                             const InstructionTranslator* parent, VT fn_vt, std::vector<VT> closure)
    : ctx_(ctx), fn_(std::move(fn)), code_(fn_->code.get()), parent_(parent), fn_vt_(std::move(fn_vt)),
      depth_(parent ? parent->depth_ + 1 : 0), locals_(std::move(locals)) {
  locals_.resize(code_->varnames.size());
  ctx_.max_inline_depth = std::max(ctx_.max_inline_depth, depth_);
  if (code_->max_stack > 0) stack_.reserve(size_t(code_->max_stack));  // no regrowth per push
  // The frame being traced counts as active for the recursion check
  // (inlined frames are registered by inline_call, with their self).
  if (!parent_) {
    ctx_.active_frames.insert({code_, nullptr});
    ctx_.root_globals = fn_->globals.get();
  }
  // Cellvars start empty, or hold the parameter of the same name.
  for (size_t i = 0; i < code_->cellvars.size(); ++i) {
    int32_t from = i < code_->cell_from_arg.size() ? code_->cell_from_arg[i] : -1;
    cells_.push_back(variables::make_cell(from >= 0 ? locals_[size_t(from)] : nullptr, nullptr, code_->cellvars[i]));
  }
  if (!closure.empty()) {
    cells_.insert(cells_.end(), closure.begin(), closure.end());
    return;
  }
  // Free variables of a real function read its closure's cells, guarded
  // like any input: a cell changed between calls must recompile. A function
  // reached without a source would have unguarded cells: refuse it.
  for (size_t i = 0; i < code_->freevars.size(); ++i) {
    const runtime::CellObj* cell = fn_->closure[i].get();
    if (auto known = ctx_.cell_trackers.find(cell); known != ctx_.cell_trackers.end()) {
      cells_.push_back(known->second);  // the same cell reached another way: the same tracker
      continue;
    }
    const Value& v = fn_->closure[i]->v;
    // A method's `__class__` (what zero-argument super() reads) is set once,
    // when its class is made, to that class: a constant wherever the method
    // was found (a module's class, itself pinned by the module's guards).
    if (parent_ && code_->freevars[i] == "__class__" && v.is(Kind::Class)) {
      cells_.push_back(variables::make_cell(variables::make_opaque(v, nullptr)));
      continue;
    }
    // A function reached without a source of its own (a module's forward,
    // found on its class) is pinned as itself: the path to it is guarded
    // by the guards of what it was found on, its cells at this source.
    output_graph::SourceRef fn_source;
    if (parent_) {
      fn_source = fn_vt_ && fn_vt_->source ? fn_vt_->source
                                            : output_graph::const_source(Value::object(Kind::Function, fn_), code_->qualname);
    }
    auto source = output_graph::cell_source(fn_source, int(i));
    // An empty cell of the root frame (a resume function's cellvar not yet
    // bound) needs no guard: reading it breaks (LOAD_DEREF), and a store
    // is replayed on the real cell whatever it held.
    if (v.is_null() && !parent_) {
      cells_.push_back(variables::make_cell(nullptr, source));
    } else {
      if (v.is_null()) unsupported(BreakReason::python_error, "an empty closure cell");
      cells_.push_back(variables::make_cell(ctx_.builder.wrap(v, source), source));
    }
    ctx_.cell_trackers.emplace(cell, cells_.back());
  }
}

VT InstructionTranslator::pop() {
  VT v = std::move(stack_.back());
  stack_.pop_back();
  return v;
}

std::vector<VT> InstructionTranslator::pop_n(size_t n) {
  std::vector<VT> out(stack_.end() - ptrdiff_t(n), stack_.end());
  stack_.resize(stack_.size() - n);
  return out;
}

void InstructionTranslator::run(int64_t stop_at_step) {
  while (!returned_ && !yielded_) {  // (only a generator's body yields: resume)
    if (stop_at_step >= 0 && steps_ == stop_at_step) return;
    if (pc_ >= code_->instrs.size()) throw_error(ErrorKind::RuntimeError, "translator ran off the end of the code");
    step();
  }
}

std::string InstructionTranslator::where(const Instr& ins) const {
  return code_->filename + ":" + std::to_string(ins.line);
}

// The edge a finished handler left by, for the stack-effect check: a jump
// (JUMP sets jumped_), a return (RETURN_VALUE, the only Return row), or the
// fall-through.
static stack_effects::Edge edge_taken(const Instr& ins, bool jumped) {
  if (jumped) return stack_effects::Edge::Taken;
  return opcode_info(ins.op).flow == Flow::Return ? stack_effects::Edge::Return : stack_effects::Edge::Next;
}

void InstructionTranslator::step() {
  runtime::spend_step();  // an unrolled loop is as long as the VM's (runtime/base/budget.h)
  const Instr& ins = code_->instrs[pc_];
  jumped_ = false;
  // Only a handler that finished is compared with the table: one that
  // raised or broke the graph leaves a stack nobody uses (a handler of the
  // trace cuts it to its depth; a break restarts the trace before this
  // step). Those are counted, for the coverage of the check.
  const bool check = ctx_.check_stack_effects;
  size_t pc = 0, depth = 0;
  if (check) [[unlikely]] {
    pc = pc_;
    depth = stack_.size();
    stack_effects::entered(stack_effects::Engine::Translator, ins.op);
  }
  try {
    switch (ins.op) {
#define KILN_OPCODE(name, ...) \
  case Opcode::name: op_##name(ins); break;
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
    }
    if (check) [[unlikely]]
      stack_effects::check(stack_effects::Engine::Translator, *code_, pc, edge_taken(ins, jumped_),
                           ptrdiff_t(stack_.size()) - ptrdiff_t(depth));
  } catch (const Error& e) {
    if (check) stack_effects::raised(stack_effects::Engine::Translator, ins.op);
    // The instruction raises when the program runs (an error folding
    // constants, a bad subscript, a `raise`). Inside an inlined frame whose
    // handler (or an inlined caller's) covers it, the trace goes on in that
    // handler (translator_exceptions.cpp). Otherwise the graph breaks there
    // and CPython (the VM) raises it, where the frame's handlers can catch
    // it. symbolic_trace has no VM to run the rest: the error is its caller's.
    if (!catch_in_trace(e)) {
      if (caught_further_out(e)) throw;
      ctx_.raising = nullptr;
      if (ctx_.tracer) {
        if (ctx_.error_where.empty()) ctx_.error_where = where(ins);
        throw;
      }
      restart_before_null_with([&] {
        unsupported(BreakReason::python_error, std::string(opcode_info(ins.op).name) + ": " + e.what());
      });
    }
  } catch (Unsupported& u) {
    if (check) stack_effects::broke(stack_effects::Engine::Translator, ins.op);
    if (u.where.empty()) u.where = where(ins);
    // Python's lookup proved an attribute missing (guarded absent): an
    // AttributeError, which an inlined handler may catch.
    const bool missing = u.reason == BreakReason::attribute_error && u.missing_attribute;
    if (!missing || !in_traced_try()) restart_before_null_with([&] { throw; });
    Error e(ErrorKind::AttributeError, u.detail);
    if (!catch_in_trace(e)) {
      if (caught_further_out(e)) throw e;
      restart_before_null_with([&] { throw; });
    }
  }
  ++steps_;
  if (!jumped_) ++pc_;
}

// ------------------------------------------------------------- handlers --

#define JUMP(target) \
  do {               \
    pc_ = size_t(target); \
    jumped_ = true;  \
  } while (0)

void InstructionTranslator::op_NOP(const Instr&) {}
void InstructionTranslator::op_POP_TOP(const Instr&) { pop(); }
void InstructionTranslator::op_COPY(const Instr& i) { push(stack_[stack_.size() - size_t(i.a)]); }
void InstructionTranslator::op_SWAP(const Instr& i) { std::swap(stack_.back(), stack_[stack_.size() - size_t(i.a)]); }
void InstructionTranslator::op_LOAD_CONST(const Instr& i) { push(from_value(code_->consts[size_t(i.a)])); }

void InstructionTranslator::op_LOAD_FAST(const Instr& i) {
  if (!locals_[size_t(i.a)]) unsupported(BreakReason::python_error, "read of an unbound local");
  push(locals_[size_t(i.a)]);
}
void InstructionTranslator::op_STORE_FAST(const Instr& i) { locals_[size_t(i.a)] = pop(); }
void InstructionTranslator::op_DELETE_FAST(const Instr& i) {
  if (!locals_[size_t(i.a)]) unsupported(BreakReason::python_error, "delete of an unbound local");
  locals_[size_t(i.a)] = nullptr;
}

void InstructionTranslator::op_LOAD_GLOBAL(const Instr& i) {
  const std::string& name = code_->names[size_t(i.a)]->s;
  const runtime::StrObj* key = code_->names[size_t(i.a)].get();
  if (fn_->globals) {
    // The root frame's globals are keyed by name (STORE_GLOBAL writes
    // there); an inlined function of another namespace (a Python function
    // from another module) reads and guards its own.
    const bool own = fn_->globals.get() == ctx_.root_globals;
    auto foreign_key = std::make_pair(static_cast<const void*>(fn_->globals.get()), name);
    if (own) {
      if (auto it = ctx_.globals.find(name); it != ctx_.globals.end()) return push(it->second);
    } else if (auto it = ctx_.foreign_globals.find(foreign_key); it != ctx_.foreign_globals.end()) {
      return push(it->second);
    }
    if (const Value* v = fn_->globals->map.find(key)) {
      if (own) return push(make_lazy_global(name, *v));
      VT vt = variables::make_lazy(*v, output_graph::global_source(name, fn_->globals));
      ctx_.foreign_globals[foreign_key] = vt;
      return push(vt);
    }
  }
  const NameMap& b = fn_->globals && fn_->globals->builtins ? *fn_->globals->builtins : builtins();
  if (const Value* v = b.find(key)) {
    VT vt = from_value(*v);
    if (fn_->globals) {
      // The builtin holds only while no global of its name shadows it: the
      // program (or Python) may store one later, and a cached entry must
      // then recompile rather than call the builtin. Remembered like a
      // global, so the name is guarded once per trace.
      const bool own = fn_->globals.get() == ctx_.root_globals;
      ctx_.builder.absent_guard(own ? global_source(name) : global_source(name, fn_->globals));
      if (own) ctx_.globals[name] = vt;
      else ctx_.foreign_globals[std::make_pair(static_cast<const void*>(fn_->globals.get()), name)] = vt;
    }
    return push(vt);
  }
  unsupported(BreakReason::python_error, "name '" + name + "' is not defined");
}

void InstructionTranslator::op_STORE_GLOBAL(const Instr& i) {
  const std::string& name = code_->names[size_t(i.a)]->s;
  if (fn_->globals && fn_->globals.get() != ctx_.root_globals)
    unsupported(BreakReason::outside_mutation, "assignment to global '" + name + "' of another module");
  VT v = pop();
  ctx_.globals[name] = v;
  ctx_.side_effects.global_stores.push_back({name, v});
}

void InstructionTranslator::op_LOAD_DEREF(const Instr& i) {
  const VT& content = cells_.at(size_t(i.a))->items[0];
  if (!content) unsupported(BreakReason::python_error, "read of an unbound closure variable");
  push(content);
}
void InstructionTranslator::op_STORE_DEREF(const Instr& i) {
  VT cell = cells_.at(size_t(i.a));
  // A real cell of the root frame's own closure can be stored back by the
  // residual code (same closure); another function's cannot.
  if (cell->source && cell->source->base)
    unsupported(BreakReason::outside_mutation, "assignment to another function's closure variable");
  cell->items[0] = pop();
  if (cell->source) ctx_.side_effects.cell_stores.push_back({cell, size_t(i.a)});
}
void InstructionTranslator::op_LOAD_CLOSURE(const Instr& i) { push(cells_.at(size_t(i.a))); }
// The VM's checks, in its order, as breaks: a function made with the wrong
// closure must not be traced into (its LOAD_DEREFs would read cells that are
// not there); the VM raises the TypeError at this instruction instead. The
// verifier rejects the cases it can see (a closure tuple built in place).
void InstructionTranslator::op_MAKE_FUNCTION(const Instr& i) {
  VT code = pop();
  if (!code->is(VTKind::Constant) || !code->value.is(Kind::Code)) {
    if (is_constant(code)) unsupported(BreakReason::python_error, "MAKE_FUNCTION expects a code object");
    unsupported(BreakReason::untraced_object, "MAKE_FUNCTION of " + code->str());
  }
  const Code* body = code->value.as<Code>();
  std::vector<VT> closure;
  if (i.a & 4) {
    VT cells = realize(pop());
    if (cells->is(VTKind::Tuple) || cells->is(VTKind::List)) {
      closure = cells->items;
    } else if (is_constant(cells)) {
      // A constant holds no cells: only an empty one can be a closure.
      std::vector<Value> items;
      try {
        items = to_vector(constant_value(cells));
      } catch (const Error& e) {
        unsupported(BreakReason::python_error, std::string("MAKE_FUNCTION: ") + e.what());
      }
      if (!items.empty()) unsupported(BreakReason::python_error, "closure items must be cells");
    } else {
      unsupported(BreakReason::untraced_object, "a closure that is not a tuple of cells: " + cells->str());
    }
    for (const VT& c : closure)
      if (!c || !c->is(VTKind::Cell)) unsupported(BreakReason::python_error, "closure items must be cells");
  }
  if (closure.size() != body->freevars.size())
    unsupported(BreakReason::python_error, body->qualname + " requires a closure of " +
                                               std::to_string(body->freevars.size()) + " cells, got " +
                                               std::to_string(closure.size()));
  if (i.a & 2) unsupported(BreakReason::untraced_object, "keyword-only defaults of a function made in the trace");
  VT defaults = (i.a & 1) ? realize(pop()) : nullptr;
  push(variables::make_nested_function(code->value, std::move(closure), defaults));
}

void InstructionTranslator::op_LOAD_ATTR(const Instr& i) {
  VT obj = realize(pop());
  push(get_attr(obj, code_->names[size_t(i.a)]->s));
}

void InstructionTranslator::op_STORE_ATTR(const Instr& i) {
  VT obj = realize(pop());
  VT value = pop();
  store_attr(obj, code_->names[size_t(i.a)]->s, value);
}

// obj.name = value (STORE_ATTR, setattr with a literal name).
void InstructionTranslator::store_attr(const VT& obj, const std::string& name, const VT& value) {
  if (!obj->is_module() && (obj->source || obj->made) && user_object_setattr(obj, name, value))
    return;  // translator_user_defined.cpp
  if (!obj->is_module() || !obj->source) unsupported(BreakReason::outside_mutation, "attribute store on " + obj->str());
  // A property: its setter inlined (without one, the VM raises
  // AttributeError at this line).
  if (nn_module::store_through_property(*this, obj, name, value)) return;
  ctx_.attr_overlay[{obj->value.obj(), name}] = value;
  ctx_.side_effects.attr_stores.push_back({obj, name, value});
}

void InstructionTranslator::op_LOAD_METHOD(const Instr& i) {
  VT obj = realize(pop());
  const std::string& name = code_->names[size_t(i.a)]->s;
  VT method;
  try {
    method = get_attr(obj, name);
  } catch (const Unsupported& u) {
    // A plain value without that attribute: the lookup raises here on the
    // VM (AttributeError); explain() says so in the VM's words.
    if (is_constant(obj)) {
      const Value v = constant_value(obj);
      const bool plain = v.is(Kind::Str) || v.is_number() || v.is_none() || v.is(Kind::Tuple);
      if (plain && get_attr_or_null(ctx_.vm, v, intern(name).get()).is_null())
        unsupported(BreakReason::attribute_error, "'" + type_name(v) + "' object has no attribute '" + name + "'");
    }
    // Only a module's or a foreign object's attributes depend on what they
    // hold when the code runs: their lookup is deferred to the call, so the
    // arguments between are traced first and the break lands on
    // CALL_METHOD. Every other tracker's attributes are all get_attr knows
    // (a tensor's, a list's, an iterator's, ...): the lookup raises here on
    // the VM, and deferred, that error was lost when nothing called the
    // method (found by tests/fuzz). The break stays here; the residual runs
    // the lookup (convert_frame: LOAD_ATTR and a NULL).
    if (!obj->is_module() && !obj->is(VTKind::Opaque) && !obj->is(VTKind::GetAttr)) throw;
    // An opaque value of a built-in type whose attributes are its type's (an
    // iterator that crossed a break, a range, ...): the lookup is decided
    // now, and one that fails raises here on the VM (found by tests/fuzz).
    if (obj->is(VTKind::Opaque)) {
      const Kind k = obj->value.kind();
      // A super object's too: its type and object are fixed when it is
      // made (an unbound super(T) has none but its own: defect 30).
      const bool fixed = k == Kind::Iterator || k == Kind::Range || k == Kind::Slice || k == Kind::Code ||
                         k == Kind::Cell || k == Kind::Super;
      if (fixed && get_attr_or_null(ctx_.vm, obj->value, intern(name).get()).is_null())
        unsupported(BreakReason::attribute_error,
                    "'" + type_name(obj->value) + "' object has no attribute '" + name + "'");
    }
    // A module that lacks the name (its dicts, class and __getattr__ say
    // so, under its version guard) raises here too (found by tests/fuzz).
    if (u.reason == BreakReason::attribute_error) throw;
    push(variables::make_getattr(obj, name));
    push(nullptr);
    return;
  }
  // Methods come back bound (UserMethod); split them as the VM's
  // LOAD_METHOD does: only a function bound to the receiver itself. A
  // classmethod (bound to the class) or a method found through super() is
  // a bound method and a NULL on the VM, and a program that moves the pair
  // (SWAP, COPY) sees the difference (fuzz finding, defect 32).
  if (method->is(VTKind::UserMethod) && method->self == obj) {
    push(variables::make_user_function(method->value));
    push(method->self);
    return;
  }
  push(method);
  push(nullptr);
}

void InstructionTranslator::op_BINARY_SUBSCR(const Instr&) {
  VT key = realize(pop());
  VT obj = realize(pop());
  push(get_item(obj, key));
}

void InstructionTranslator::op_STORE_SUBSCR(const Instr&) {
  VT key = realize(pop());
  VT obj = realize(pop());
  VT value = pop();
  if (obj->is(VTKind::Tensor)) return tensor_setitem_traced(obj, key, value);
  if (obj->is(VTKind::List) && is_constant(key) && constant_value(key).is(Kind::Int)) {
    int64_t k = constant_value(key).as_int();
    int64_t n = int64_t(obj->items.size());
    if (k < 0) k += n;
    if (k < 0 || k >= n) unsupported(BreakReason::python_error, "list index out of range");
    refuse_cycle(obj, value);
    obj->items[size_t(k)] = value;
    ctx_.side_effects.mark_mutated(obj);
    return;
  }
  if (obj->is(VTKind::ConstDict) && is_constant(key) && variables::is_literal(constant_value(key))) {
    Value k = constant_value(key);
    refuse_cycle(obj, value);
    for (size_t j = 0; j < obj->keys.size(); ++j)
      if (values_equal(obj->keys[j], k)) {
        obj->items[j] = value;
        ctx_.side_effects.mark_mutated(obj);
        return;
      }
    obj->keys.push_back(k);
    obj->items.push_back(value);
    ctx_.side_effects.mark_mutated(obj);
    return;
  }
  // An object made in this trace: its class's __setitem__ (a Python
  // function inlined, or dict's own on its storage tracker).
  if (obj->made && call_special_method(obj, "__setitem__", {key, value})) return;
  unsupported(BreakReason::outside_mutation, "item assignment on " + obj->str());
}

void InstructionTranslator::op_DELETE_SUBSCR(const Instr&) {
  VT key = realize(pop());
  VT obj = realize(pop());
  if (!is_constant(key)) unsupported(BreakReason::traced_python_value, "item deletion with " + key->str());
  Value k = constant_value(key);
  if (obj->is(VTKind::ConstDict)) {
    require_hashable(k, "a dict item deletion");
    for (size_t j = 0; j < obj->keys.size(); ++j)
      if (values_equal(obj->keys[j], k)) {
        obj->keys.erase(obj->keys.begin() + ptrdiff_t(j));
        obj->items.erase(obj->items.begin() + ptrdiff_t(j));
        ctx_.side_effects.mark_mutated(obj);
        return;
      }
  } else if (obj->is(VTKind::List) && k.is(Kind::Int)) {
    int64_t n = int64_t(obj->items.size()), i = k.as_int() < 0 ? k.as_int() + n : k.as_int();
    if (i >= 0 && i < n) {
      obj->items.erase(obj->items.begin() + i);
      ctx_.side_effects.mark_mutated(obj);
      return;
    }
  }
  unsupported(BreakReason::outside_mutation, "item deletion on " + obj->str());
}

void InstructionTranslator::op_BUILD_SLICE(const Instr& i) {
  std::vector<VT> parts = pop_n(size_t(i.a));
  bool symbolic = false;
  for (auto& p : parts) {
    p = realize_sym(p);
    symbolic = symbolic || p->is(VTKind::SymInt);
  }
  if (symbolic)
    return push(variables::make_slice_of(parts[0], parts[1],
                                         parts.size() == 3 ? parts[2] : variables::make_constant(Value::none())));
  for (auto& p : parts) {
    p = realize(p);
    if (!is_constant(p)) unsupported(BreakReason::traced_python_value, "a slice bound that is not a Python value");
    // A slice holds its bounds as they are: a list bound is that list,
    // which later stores change (the slice shows them). A constant slice
    // would hold a copy (fuzz finding, defect 36): the VM builds this one.
    if (p->is(VTKind::List) || p->is(VTKind::ConstDict) ||
        (p->is(VTKind::Constant) && (p->value.is(Kind::Set) || p->value.is(Kind::List) || p->value.is(Kind::Dict))))
      unsupported(BreakReason::untraced_object, "a slice whose bound is a mutable " + p->str());
  }
  push(variables::make_constant(make_slice(constant_value(parts[0]), constant_value(parts[1]),
                                           parts.size() == 3 ? constant_value(parts[2]) : Value::none())));
}

void InstructionTranslator::op_BINARY_OP(const Instr& i) {
  VT b = realize_sym(pop());
  VT a = realize_sym(pop());
  if (VT r = symbolic_binary(BinOp(i.a), a, b)) return push(r);
  // A tensor with a size (x * T): the node takes the size as it is, so a
  // new T reuses the graph instead of specializing it.
  if ((a->is(VTKind::Tensor) && b->is(VTKind::SymInt)) || (a->is(VTKind::SymInt) && b->is(VTKind::Tensor)))
    return push(binary(BinOp(i.a), a, b, i.b != 0));
  push(binary(BinOp(i.a), realize(a), realize(b), i.b != 0));
}

void InstructionTranslator::op_UNARY_OP(const Instr& i) {
  VT a = realize_sym(pop());
  UnOp op = UnOp(i.a);
  if (VT r = symbolic_unary(op, a)) return push(r);
  a = realize(a);
  if (a->is(VTKind::Tensor)) {
    if (op == UnOp::POS) return push(a);
    if (op == UnOp::NOT) unsupported(BreakReason::data_dependent_branch, "");
    push(tensor_op(OpId(tensor_op_for(op)), {a}));
    return;
  }
  if (op == UnOp::NOT && (a->is(VTKind::List) || a->is(VTKind::Tuple) || a->is(VTKind::ConstDict))) {
    push(variables::make_constant(Value::boolean(a->items.empty())));
    return;
  }
  if (!is_constant(a)) unsupported(BreakReason::traced_python_value, std::string("unary ") + unop_symbol(op) + " on " + a->str());
  push(from_value(unary_op(op, constant_value(a))));
}

void InstructionTranslator::op_COMPARE_OP(const Instr& i) {
  VT b = realize_sym(pop());
  VT a = realize_sym(pop());
  if (VT r = symbolic_compare(CmpOp(i.a), a, b)) return push(r);
  push(compare(CmpOp(i.a), realize(a), realize(b)));
}

void InstructionTranslator::op_BUILD_TUPLE(const Instr& i) { push(variables::make_tuple(pop_n(size_t(i.a)))); }
void InstructionTranslator::op_BUILD_LIST(const Instr& i) { push(variables::make_list(pop_n(size_t(i.a)))); }

void InstructionTranslator::op_BUILD_DICT(const Instr& i) {
  std::vector<VT> kv = pop_n(2 * size_t(i.a));
  std::vector<Value> keys;
  std::vector<VT> values;
  for (size_t k = 0; k < kv.size(); k += 2) {
    VT key = realize(kv[k]);
    if (!is_constant(key) || !variables::is_literal(constant_value(key)))
      unsupported(BreakReason::traced_python_value, "a dict key that is not a constant");
    Value kval = constant_value(key);
    bool replaced = false;
    for (size_t j = 0; j < keys.size(); ++j)
      if (values_equal(keys[j], kval)) {
        values[j] = kv[k + 1];
        replaced = true;
      }
    if (!replaced) {
      keys.push_back(kval);
      values.push_back(kv[k + 1]);
    }
  }
  push(variables::make_const_dict(std::move(keys), std::move(values)));
}

void InstructionTranslator::op_BUILD_STRING(const Instr& i) {
  std::vector<VT> parts = pop_n(size_t(i.a));
  std::string s;
  for (auto& p : parts) {
    p = realize(p);
    if (!is_constant(p)) unsupported(BreakReason::traced_python_value, "formatting " + p->str() + " into a string");
    s += to_str(constant_value(p));
  }
  push(variables::make_constant(Value::str(s)));
}

void InstructionTranslator::op_LIST_APPEND(const Instr& i) {
  VT item = pop();
  VT list = realize(stack_[stack_.size() - size_t(i.a)]);
  if (!list->is(VTKind::List)) unsupported(BreakReason::untraced_object, "LIST_APPEND to " + list->str());
  refuse_cycle(list, item);
  list->items.push_back(item);
  ctx_.side_effects.mark_mutated(list);
}

void InstructionTranslator::op_LIST_EXTEND(const Instr& i) {
  VT items = realize(pop());
  VT list = realize(stack_[stack_.size() - size_t(i.a)]);
  if (!list->is(VTKind::List)) unsupported(BreakReason::untraced_object, "LIST_EXTEND to " + list->str());
  for (VT& v : unpack(items)) {
    refuse_cycle(list, v);
    list->items.push_back(v);
  }
  ctx_.side_effects.mark_mutated(list);
}

void InstructionTranslator::op_UNPACK_SEQUENCE(const Instr& i) {
  VT seq = realize(pop());
  std::vector<VT> items = unpack(seq);
  if (items.size() != size_t(i.a)) unsupported(BreakReason::python_error, "unpacking a sequence of the wrong length");
  for (size_t k = items.size(); k-- > 0;) push(items[k]);
}

void InstructionTranslator::op_CALL(const Instr& i) {
  std::vector<VT> args = pop_n(size_t(i.a));
  VT callee = realize(pop());
  push(call_function(callee, std::move(args), nullptr));
}

void InstructionTranslator::op_CALL_KW(const Instr& i) {
  std::vector<VT> args = pop_n(size_t(i.a));
  VT callee = realize(pop());
  push(call_function(callee, std::move(args), code_->consts[size_t(i.b)].as<TupleObj>()));
}

void InstructionTranslator::op_CALL_METHOD(const Instr& i) {
  std::vector<VT> args = pop_n(size_t(i.a));
  VT self = pop();
  VT callee = realize(pop());
  if (self) args.insert(args.begin(), self);
  push(call_function(callee, std::move(args), nullptr));
}

void InstructionTranslator::op_CALL_METHOD_KW(const Instr& i) {
  std::vector<VT> args = pop_n(size_t(i.a));
  VT self = pop();
  VT callee = realize(pop());
  if (self) args.insert(args.begin(), self);
  push(call_function(callee, std::move(args), code_->consts[size_t(i.b)].as<TupleObj>()));
}

void InstructionTranslator::op_CALL_EX(const Instr& i) {
  VT kwargs = (i.a & 1) ? realize(pop()) : nullptr;
  VT args = realize(pop());
  VT callee = realize(pop());
  std::vector<VT> all = unpack(args);
  Value names;
  if (kwargs) {
    if (!kwargs->is(VTKind::ConstDict)) unsupported(BreakReason::untraced_object, "** of " + kwargs->str());
    std::vector<Value> keys;
    for (size_t k = 0; k < kwargs->keys.size(); ++k) {
      if (!kwargs->keys[k].is(Kind::Str)) unsupported(BreakReason::python_error, "non-string keyword");
      keys.push_back(intern_value(kwargs->keys[k].as_str()));
      all.push_back(kwargs->items[k]);
    }
    if (!keys.empty()) names = make_tuple(std::move(keys));
  }
  push(call_function(callee, std::move(all), names.is(Kind::Tuple) ? names.as<TupleObj>() : nullptr));
}

void InstructionTranslator::op_GET_ITER(const Instr&) { push(iter_of(pop())); }

VT InstructionTranslator::iter_of(const VT& v0) {
  VT v = realize(v0);
  if (v->is(VTKind::Iterator)) return v;
  if (v->iterated) {  // a dict view (realize read it fresh): its dict must not change size from here
    VT it = variables::make_iterator(v->items);
    it->iterated = v->iterated;
    it->iterated_size = variables::container_size(*v->iterated);
    it->view = v->view;
    return it;
  }
  if (VT it = python_iterator(v)) return it;
  const bool set = v->is(VTKind::Constant) && is_set_like(v->value);  // read live by next_item
  VT it = variables::make_iterator(set ? std::vector<VT>{} : unpack(v));
  if (const size_t n = variables::container_size(*v); n != SIZE_MAX) {
    it->iterated = v;
    it->iterated_size = n;
  }
  return it;
}

// len(obj) for a Python object whose class defines __len__ in Python: that
// method inlined; its result must be a known int >= 0 (CPython's checks
// raise otherwise, and CPython runs the call then). Null: no such method.
VT InstructionTranslator::python_len(const VT& obj) {
  if (!obj->is(VTKind::Opaque)) return nullptr;
  VT n = call_special_method(obj, "__len__", {});
  if (!n) return nullptr;
  n = realize(n);
  if (!n->is(VTKind::Constant) || !n->value.is(Kind::Int) || n->value.as_int() < 0)
    unsupported(BreakReason::traced_python_value, "a __len__ that gives " + n->str());
  return n;
}

// iter(obj) for a Python object whose class defines __iter__ in Python
// (collections.abc.Sequence's, a generator): that method inlined; it must
// give an iterator kiln traces. Null when the class has no such method.
VT InstructionTranslator::python_iterator(const VT& obj) {
  if (!obj->is(VTKind::Opaque)) return nullptr;
  VT it = call_special_method(obj, "__iter__", {});
  if (!it) return nullptr;
  it = realize(it);
  if (!it->is(VTKind::Iterator)) unsupported(BreakReason::untraced_object, "an __iter__ that gives " + it->str());
  return it;
}

void InstructionTranslator::op_FOR_ITER(const Instr& i) {
  VT it = stack_.back();
  if (!it->is(VTKind::Iterator)) unsupported(BreakReason::untraced_object, "iteration over " + it->str());
  VT item;
  if (next_item(it, item)) {
    push(std::move(item));
    return;
  }
  pop();
  JUMP(i.a);
}

bool InstructionTranslator::next_item(const VT& it, VT& out) {
  if (const char* error = variables::iteration_error(*it))
    unsupported(BreakReason::python_error, error);  // the residual's iterator raises it (reconstruct)
  if (it->iterated && it->iterated->is(VTKind::ConstDict)) {  // the dict as it is now (its size is checked above)
    if (it->pos >= it->iterated->keys.size()) return false;
    out = variables::dict_view_item(*it->iterated, it->view, it->pos++);
    return true;
  }
  if (it->iterated && it->iterated->is(VTKind::List)) {  // live, as Python's list iterator
    const std::vector<VT>& items = it->iterated->items;
    if (it->pos >= items.size()) return false;
    out = items[it->pos++];
    return true;
  }
  if (variables::iterates_set(*it)) {  // live, as Python's set iterator: the table from pos on
    const auto* s = it->iterated->value.as<SetObj>();
    while (it->pos < size_t(s->capacity()) && !s->table()[it->pos].active()) ++it->pos;
    if (it->pos >= size_t(s->capacity())) {
      it->iterated = nullptr;  // exhausted for good, as CPython's (no size check after)
      it->pos = 0;
      return false;
    }
    out = from_value(s->table()[it->pos++].key);
    return true;
  }
  switch (vars::lazy_iteration(*it)) {
    case vars::LazyIteration::None:
      if (it->pos >= it->items.size()) return false;
      out = it->items[it->pos++];
      return true;
    case vars::LazyIteration::Zip:
    case vars::LazyIteration::ZipStrict:
    case vars::LazyIteration::Map: {
      if (it->items.empty()) return false;  // zip(): nothing (map needs one: trace_map)
      const vars::LazyIteration how = vars::lazy_iteration(*it);
      std::vector<VT> row;
      for (size_t i = 0; i < it->items.size(); ++i) {
        VT x;
        if (!next_item(it->items[i], x)) {  // what earlier ones gave is lost, as in Python
          if (how == vars::LazyIteration::ZipStrict)
            runtime::zip_check_strict(i, it->items.size(), [&](size_t j) { return next_item(it->items[j], x); });
          return false;
        }
        row.push_back(std::move(x));
      }
      out = how == vars::LazyIteration::Map ? call_function(it->self, std::move(row), nullptr)
                                            : vars::make_tuple(std::move(row));
      return true;
    }
    case vars::LazyIteration::Enumerate: {
      VT x;
      if (!next_item(it->items[0], x)) return false;
      out = vars::make_tuple({vars::make_constant(it->value), std::move(x)});
      it->value = binary_op(BinOp::ADD, it->value, Value::integer(1));
      return true;
    }
    case vars::LazyIteration::Generator: return resume_generator(it, out);
    case vars::LazyIteration::Filter: {
      VT x;
      while (next_item(it->items[0], x)) {
        const bool keep = it->self->is(VTKind::Constant) && it->self->value.is_none()
                              ? truth_of(x)
                              : truth_of(realize(call_function(it->self, {x}, nullptr)));
        if (keep) {
          out = std::move(x);
          return true;
        }
      }
      return false;
    }
  }
  return false;
}

void InstructionTranslator::op_JUMP(const Instr& i) { JUMP(i.a); }

// The truth of a tracker known at trace time; a tensor's is data.
bool InstructionTranslator::truth_of(const VT& c) {
  if (c->is(VTKind::Tensor)) unsupported(BreakReason::data_dependent_branch, "");
  if (c->is(VTKind::List) || c->is(VTKind::Tuple) || c->is(VTKind::ConstDict)) return !c->items.empty();
  if (c->is_module() || c->is(VTKind::UserFunction) || c->is(VTKind::Builtin)) return true;
  if (c->is(VTKind::Opaque)) {  // a Python class's own __bool__, else its __len__, inlined
    if (VT b = call_special_method(c, "__bool__", {})) {
      b = realize(b);
      if (!b->is(VTKind::Constant) || !b->value.is(Kind::Bool))
        unsupported(BreakReason::traced_python_value, "a __bool__ that gives " + b->str());
      return b->value.as_bool();
    }
    if (VT n = python_len(c)) return n->value.as_int() != 0;
  }
  if (!is_constant(c)) unsupported(BreakReason::traced_python_value, "truth of " + c->str());
  return truth(constant_value(c));
}

void InstructionTranslator::op_POP_JUMP_IF_TRUE(const Instr& i) {
  VT c = realize(stack_.back());
  bool t = truth_of(c);
  pop();
  if (t) JUMP(i.a);
}
void InstructionTranslator::op_POP_JUMP_IF_FALSE(const Instr& i) {
  VT c = realize(stack_.back());
  bool t = truth_of(c);
  pop();
  if (!t) JUMP(i.a);
}
void InstructionTranslator::op_POP_JUMP_IF_NONE(const Instr& i) {
  VT c = realize(pop());
  if (c->is(VTKind::Constant) && c->value.is_none()) JUMP(i.a);
}
void InstructionTranslator::op_POP_JUMP_IF_NOT_NONE(const Instr& i) {
  VT c = realize(pop());
  if (!(c->is(VTKind::Constant) && c->value.is_none())) JUMP(i.a);
}
void InstructionTranslator::op_JUMP_IF_TRUE_OR_POP(const Instr& i) {
  VT c = realize(stack_.back());
  if (truth_of(c)) JUMP(i.a);
  else pop();
}
void InstructionTranslator::op_JUMP_IF_FALSE_OR_POP(const Instr& i) {
  VT c = realize(stack_.back());
  if (!truth_of(c)) JUMP(i.a);
  else pop();
}

void InstructionTranslator::op_RETURN_VALUE(const Instr&) {
  result_ = pop();
  returned_ = true;
}


#undef JUMP

}  // namespace kiln::interpreter

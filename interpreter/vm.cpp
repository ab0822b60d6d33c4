// The KBC interpreter loop. Dispatch is a computed-goto table generated
// from opcodes.def: an opcode without a handler here fails to compile.
//
// The loop is one template, VM::execute<Loop>, instantiated here as the
// shipped loop (Loop::Plain) and the counting one, and in vm_checked.cpp,
// which compiles this file again with KILN_VM_CHECKED_LOOP defined, as the
// loop that checks stack effects (Loop::Checked) and nothing else. Apart
// on purpose: in one unit, the checking instantiation changed the machine
// code of the Plain loop (GCC weighs inlining per unit: it inlined other
// calls there), which the check must never do. Apart, Plain compiles to
// the instructions it had before the check existed (objdump, GCC 12: one
// cold block of the budget's slow path is laid out elsewhere).
//
// Frame layout: each call takes locals + max_stack Value slots from a LIFO
// arena. Invariant: an arena slot that is not in use holds no reference
// (None, or a leftover immediate), so a frame never constructs its slots
// and only clears what it used.
#include "interpreter/vm.h"

#include "runtime/base/budget.h"

#include "interpreter/stack_guard.h"

#include <cstdio>
#include <new>

#include <spdlog/spdlog.h>

#include "runtime/base/host_python.h"
#include "runtime/base/log.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/format.h"
#include "runtime/semantics/kwargs.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/name_map.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
using runtime::ExceptionEntry;

#ifndef KILN_VM_CHECKED_LOOP  // (up to the loop's helpers: vm_checked.cpp has only the loop)
namespace {
// CPython's words, and only those: which frame or which check (the depth or
// the C stack) trips first depends on how many frames the callers took, and
// a compiled caller's residual and resume frames count too, so naming either
// would make a compiled run's error differ from the VM's (found by
// tests/fuzz). The traceback says where it happened.
[[noreturn]] void recursion_error() { throw_error(ErrorKind::RecursionError, "maximum recursion depth exceeded"); }
}  // namespace

// Compiled in vm_checked.cpp only (see the top of this file).
extern template Value VM::execute<VM::Loop::Checked>(FunctionObj*, Value*, Value*, Ref<CellObj>*);

struct VM::Arena {
  // Chunks grow from small (a VM that runs a few frames, like every cached
  // compiled call, stays cheap to make) to kMaxChunk; a chunk is never
  // moved, so frame pointers stay valid.
  static constexpr size_t kFirstChunk = 256;
  static constexpr size_t kMaxChunk = 1 << 16;
  struct Chunk {
    std::unique_ptr<Value[]> slots;
    size_t size;
  };
  std::vector<Chunk> chunks;
  size_t chunk = 0, offset = 0;

  struct Mark {
    size_t chunk, offset;
  };
  Value* take(size_t n, Mark& mark) {
    mark = {chunk, offset};
    if (chunks.empty() || offset + n > chunks[chunk].size) {
      if (n > kMaxChunk) throw_error(ErrorKind::RuntimeError, "function frame too large for the VM");
      if (!chunks.empty()) {
        ++chunk;
        offset = 0;
      }
      while (chunk < chunks.size() && chunks[chunk].size < n) ++chunk;  // skip a chunk too small for this frame
      if (chunk == chunks.size()) {
        size_t size = chunks.empty() ? kFirstChunk : std::min(kMaxChunk, chunks.back().size * 2);
        while (size < n) size *= 2;
        chunks.push_back({std::unique_ptr<Value[]>(new Value[size]), size});
      }
    }
    Value* p = chunks[chunk].slots.get() + offset;
    offset += n;
    return p;
  }
  void release(const Mark& mark) {
    chunk = mark.chunk;
    offset = mark.offset;
  }
};

VM::VM(VMOptions options)
    : arena_(std::make_unique<Arena>()),
      options_(std::move(options)),
      loop_(options_.check_stack_effects  ? Loop::Checked
            : options_.count_instructions ? Loop::Counting
                                          : Loop::Plain) {
  log_ = kiln::log::get("vm");
}
VM::~VM() = default;

void VM::write_stdout(std::string_view text) {
  if (options_.stdout_sink) {
    options_.stdout_sink(text);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
}

// ---------------------------------------------------------------- binding --

static std::string plural(size_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// CPython's list for the error: every keyword naming a positional-only
// parameter, in call order, joined by ", ".
static std::string posonly_passed_as_keyword(const Code* code, const CallArgs& args) {
  std::string out;
  for (size_t k = 0; k < args.nkw(); ++k) {
    const std::string& kw = args.kwnames->items[k].as_str();
    for (int32_t i = 0; i < code->posonlyargcount; ++i)
      if (code->varnames[size_t(i)] == kw) {
        out += (out.empty() ? "" : ", ") + kw;
        break;
      }
  }
  return out;
}

void bind_arguments(const FunctionObj* fn, const CallArgs& args, Value* locals) {
  const Code* code = fn->code.get();
  const size_t argc = size_t(code->argcount), kwonly = size_t(code->kwonlyargcount);
  const size_t npos = args.npos();
  const std::string& name = code->qualname;  // CPython's messages name the qualname (f.<locals>.g, Box.push)

  // Fast path: exactly the positional parameters, nothing else.
  if (args.kwnames == nullptr && npos == argc && code->flags == 0 && kwonly == 0) {
    for (size_t i = 0; i < argc; ++i) locals[i] = args[i];
    return;
  }

  // A `.generator` function is the tracer's view of a Python generator
  // (kiln/_frontend.py); the VM has no generators to make.
  if (code->flags & kGenerator)
    throw_error(ErrorKind::RuntimeError, name + "() is a generator function: KBC generators run only in the "
                                                "tracer's view of Python code, not on the VM");
  const bool varargs = code->flags & kVarArgs, varkw = code->flags & kVarKw;
  const size_t varargs_slot = argc + kwonly, varkw_slot = argc + kwonly + (varargs ? 1 : 0);
  for (size_t i = 0; i < argc + kwonly; ++i) locals[i] = Value::null();

  size_t take = std::min(npos, argc);
  for (size_t i = 0; i < take; ++i) locals[i] = args[i];
  if (npos > argc) {
    if (!varargs)
      throw_error(ErrorKind::TypeError, name + "() takes " + plural(argc, "positional argument") + " but " +
                                            std::to_string(npos) + (npos == 1 ? " was" : " were") + " given");
    locals[varargs_slot] = make_tuple(std::vector<Value>(args.args + argc, args.args + npos));
  } else if (varargs) {
    locals[varargs_slot] = make_tuple({});
  }
  if (varkw) locals[varkw_slot] = make_dict();

  for (size_t k = 0; k < args.nkw(); ++k) {
    const Value& key = args.kwnames->items[k];
    const std::string& kw = key.as_str();
    size_t slot = argc + kwonly;
    // Positional-only parameters have no keyword: their names are free
    // for **kwargs (def f(a, /, **kw): f(1, a=2) gives kw == {'a': 2}).
    for (size_t i = size_t(code->posonlyargcount); i < argc + kwonly; ++i)
      if (code->varnames[i] == kw) {
        slot = i;
        break;
      }
    if (slot < argc + kwonly) {
      if (!locals[slot].is_null())
        throw_error(ErrorKind::TypeError, name + "() got multiple values for argument '" + kw + "'");
      locals[slot] = args[npos + k];
    } else if (varkw) {
      locals[varkw_slot].as<DictObj>()->set(key, args[npos + k]);
    } else {
      if (std::string posonly = posonly_passed_as_keyword(code, args); !posonly.empty())
        throw_error(ErrorKind::TypeError,
                    name + "() got some positional-only arguments passed as keyword arguments: '" + posonly + "'");
      throw_error(ErrorKind::TypeError, name + "() got an unexpected keyword argument '" + kw + "'");
    }
  }

  // Defaults cover the last defaults.size() positional parameters.
  const size_t first_default = argc - std::min(argc, fn->defaults.size());
  std::string missing;
  size_t nmissing = 0;
  for (size_t i = 0; i < argc; ++i) {
    if (!locals[i].is_null()) continue;
    if (i >= first_default) {
      locals[i] = fn->defaults[i - first_default];
    } else {
      missing += (nmissing ? ", '" : "'") + code->varnames[i] + "'";
      ++nmissing;
    }
  }
  if (nmissing)
    throw_error(ErrorKind::TypeError, name + "() missing " + std::to_string(nmissing) + " required positional argument" +
                                          (nmissing == 1 ? "" : "s") + ": " + missing);
  for (size_t i = argc; i < argc + kwonly; ++i) {
    if (!locals[i].is_null()) continue;
    const Value* d = (i - argc) < fn->kwdefaults.size() ? &fn->kwdefaults[i - argc] : nullptr;
    if (!d || d->is_null())
      throw_error(ErrorKind::TypeError, name + "() missing required keyword-only argument: '" + code->varnames[i] + "'");
    locals[i] = *d;
  }
}

// ------------------------------------------------------------------ calls --

Value VM::call(const Value& callee, const CallArgs& args) {
  CallContext::Scope scope(this);  // natives called from here may call back later (map, filter)
  switch (callee.kind()) {
    case Kind::Function: return call_function(callee.as<FunctionObj>(), args);
    case Kind::BoundMethod: {
      auto* bm = callee.as<BoundMethodObj>();
      std::vector<Value> full;
      full.reserve(args.nargs + 1);
      full.push_back(bm->self);
      full.insert(full.end(), args.args, args.args + args.nargs);
      return call(bm->func, CallArgs{full.data(), full.size(), args.kwnames});
    }
    case Kind::Builtin: {
      auto* b = callee.as<BuiltinObj>();
      return b->fn(*this, *b, args);
    }
    case Kind::Class: return instantiate(*this, Ref<ClassObj>(callee.as<ClassObj>()), args);
    case Kind::Module: {
      if (++depth_ > options_.recursion_limit) {
        --depth_;
        recursion_error();
      }
      struct Leave {
        int& d;
        ~Leave() { --d; }
      } leave{depth_};
      return module_call(*this, callee, args);
    }
    case Kind::Foreign: {
      auto* f = callee.as<ForeignObj>();
      if (f->vt->call) return f->vt->call(f->handle, args);
      break;
    }
    default: break;
  }
  throw_error(ErrorKind::TypeError, "'" + type_name(callee) + "' object is not callable");
}

Value VM::call_function(FunctionObj* fn, const CallArgs& args) {
  Code* code = fn->code.get();
  if (!code->verified)
    throw_error(ErrorKind::VerifyError, "function '" + code->qualname + "' has not been verified");
  kiln::runtime::spend_step();
  // A continuation of a counted frame (runtime/value/code.h) adds no depth; the
  // C stack it takes is still checked.
  const int counted = code->continues.empty() ? 1 : 0;
  if ((counted && depth_ >= options_.recursion_limit) || stack_nearly_exhausted()) recursion_error();

  if (fn->closure.size() != code->freevars.size())
    throw_error(ErrorKind::TypeError, code->qualname + "() needs a closure of " +
                                          std::to_string(code->freevars.size()) + " cell(s); make it with MAKE_FUNCTION");

  const size_t nlocals = code->varnames.size();
  Arena::Mark mark;
  Value* slots = arena_->take(nlocals + size_t(code->max_stack), mark);
  Value* stack = slots + nlocals;
  struct Frame {
    VM* vm;
    Value* slots;
    size_t n;
    Arena::Mark mark;
    int counted;
    ~Frame() {
      // Restore the arena invariant: unused slots hold None.
      for (size_t i = 0; i < n; ++i) slots[i] = Value();
      vm->arena_->release(mark);
      vm->depth_ -= counted;
    }
  } frame{this, slots, nlocals + size_t(code->max_stack), mark, counted};
  depth_ += counted;

  try {
    bind_arguments(fn, args, slots);
  } catch (Error& e) {
    e.add_frame({code->user_qualname(), code->filename, code->first_line});
    throw;
  }
  for (size_t i = size_t(code->nparams()); i < nlocals; ++i) slots[i] = Value::null();

  std::vector<Ref<CellObj>> cells;
  if (code->ncells()) {
    cells.reserve(size_t(code->ncells()));
    for (size_t i = 0; i < code->cellvars.size(); ++i) {
      auto c = make_ref<CellObj>();
      int32_t from = i < code->cell_from_arg.size() ? code->cell_from_arg[i] : -1;
      if (from >= 0) c->v = slots[from];
      cells.push_back(std::move(c));
    }
    for (const auto& c : fn->closure) cells.push_back(c);
  }
  ActiveFrame active{fn, slots, cells.data(), frame_};
  struct Enter {
    const ActiveFrame*& top;
    const ActiveFrame* saved;
    ~Enter() { top = saved; }
  } enter{frame_, frame_};
  frame_ = &active;
  if (log_) log_->debug("{:>{}}call {} ({} args)", "", depth_ * 2, code->qualname, args.nargs);
  if (loop_ != Loop::Plain)
    return loop_ == Loop::Counting ? execute<Loop::Counting>(fn, slots, stack, cells.data())
                                   : execute<Loop::Checked>(fn, slots, stack, cells.data());
  return execute<Loop::Plain>(fn, slots, stack, cells.data());
}

// CPython 3.11's super_init_without_args, over the calling KBC frame: its
// first argument (its cell, when a closure captured it) and its __class__
// free variable, with CPython's RuntimeErrors.
void VM::zero_arg_super(Value& type, Value& obj) {
  if (!frame_) throw_error(ErrorKind::RuntimeError, "super(): no arguments");
  const Code* code = frame_->fn->code.get();
  int32_t first = code->first_arg_local;
  if (first == 0 && code->argcount == 0) first = Code::kNoFirstArg;
  if (first == Code::kNoFirstArg) throw_error(ErrorKind::RuntimeError, "super(): no arguments");
  obj = first >= 0 ? frame_->locals[first] : Value::null();
  for (size_t j = 0; first >= 0 && j < code->cell_from_arg.size(); ++j)
    if (code->cell_from_arg[j] == first) obj = frame_->cells[j]->v;
  if (obj.is_null()) throw_error(ErrorKind::RuntimeError, "super(): arg[0] deleted");
  for (size_t i = 0; i < code->freevars.size(); ++i)
    if (code->freevars[i] == "__class__") {
      type = frame_->cells[code->cellvars.size() + i]->v;
      if (type.is_null()) throw_error(ErrorKind::RuntimeError, "super(): empty __class__ cell");
      if (!type.is(Kind::Class) && !type.is(Kind::Foreign))
        throw_error(ErrorKind::RuntimeError, "super(): __class__ is not a type (" + type_name(type) + ")");
      return;
    }
  throw_error(ErrorKind::RuntimeError, "super(): __class__ cell not found");
}

Value VM::run(const Program& program, std::string_view entry, const std::vector<Value>& args) {
  Value f = program.global(entry);
  if (f.is_null())
    throw_error(ErrorKind::NameError, "entry point '" + std::string(entry) + "' is not defined in " + program.filename);
  return call(f, CallArgs{args.data(), args.size(), nullptr});
}
#endif  // KILN_VM_CHECKED_LOOP

// -------------------------------------------------------------- the loop --

[[noreturn]] static void unbound_local(const Code* code, int32_t i) {
  const std::string& name = code->varnames[size_t(i)];
  throw_error(ErrorKind::UnboundLocalError,
              runtime::host_python().minor >= 11  // (the words of the CPython kiln runs in)
                  ? "cannot access local variable '" + name + "' where it is not associated with a value"
                  : "local variable '" + name + "' referenced before assignment");
}

static const Value& lookup_global(const FunctionObj* fn, const StrObj* name) {
  if (fn->globals)
    if (const Value* v = fn->globals->map.find(name)) return *v;
  const NameMap& b = fn->globals && fn->globals->builtins ? *fn->globals->builtins : builtins();
  if (const Value* v = b.find(name)) return *v;
  throw_error(ErrorKind::NameError, "name '" + name->s + "' is not defined");
}

static Value call_ex(VM& vm, const Value& callee, const Value& args, const Value* kwargs_in) {
  std::vector<Value> all = to_vector(args);
  Value names;
  if (kwargs_in) {
    const Value kwargs = native_container(*kwargs_in);  // f(**d) with the caller's own dict reads it
    if (!kwargs.is(Kind::Dict))
      throw_error(ErrorKind::TypeError, "argument after ** must be a dict, not " + type_name(kwargs));
    std::vector<Value> keys;
    for (const auto& [k, v] : kwargs.as<DictObj>()->entries) {
      if (!k.is(Kind::Str)) throw_error(ErrorKind::TypeError, "keywords must be strings");
      keys.push_back(k);
      all.push_back(v);
    }
    if (!keys.empty()) names = make_tuple(std::move(keys));
  }
  return vm.call(callee, CallArgs{all.data(), all.size(), names.is(Kind::Tuple) ? names.as<TupleObj>() : nullptr});
}

// BEFORE_WITH's lookups, in CPython 3.11's order and with its errors.
static void before_with(CallContext& ctx, const Value& mgr, Value& exit, Value& enter) {
  static const Ref<StrObj> enter_name = intern("__enter__"), exit_name = intern("__exit__");
  auto lookup = [&](const StrObj* name, const char* missed) {
    Value v;
    try {
      v = get_attr_or_null(ctx, mgr, name);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::AttributeError) throw;
      v = Value::null();
    }
    if (v.is_null()) {
      if (runtime::host_python().minor < 11)  // 3.10: its special lookup's error, naming the method
        throw_error(ErrorKind::AttributeError, name->s);
      throw_error(ErrorKind::TypeError,
                  "'" + type_name(mgr) + "' object does not support the context manager protocol" + missed);
    }
    return v;
  };
  enter = lookup(enter_name.get(), "");
  exit = lookup(exit_name.get(), " (missed __exit__ method)");
}

// type(exc) for WITH_EXCEPT_START: the built-in class, or a Python
// exception's own class.
static Value exception_type_of(CallContext& ctx, const Value& exc) {
  ExceptionData* d = exception_data(exc);
  if (!d) return Value::none();
  if (!d->foreign.is_null()) {
    static const Ref<StrObj> cls = intern("__class__");
    return get_attr(ctx, d->foreign, cls.get());
  }
  return exception_class(d->kind);
}

template <VM::Loop kLoop>
Value VM::execute(FunctionObj* fn, Value* locals, Value* stack, Ref<CellObj>* cells) {
  constexpr bool kCount = kLoop == Loop::Counting;
  constexpr bool kCheck = kLoop == Loop::Checked;  // (it counts too, if the options ask)
  static void* const labels[] = {
#define KILN_OPCODE(name, ...) &&op_##name,
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
  };
  static_assert(std::size(labels) == size_t(kNumOpcodes), "one handler per opcode");

  const Code* code = fn->code.get();
  const Instr* const begin = code->instrs.data();
  const Instr* ip = begin;
  const Value* consts = code->consts.data();
  if (code->attr_caches.size() != code->instrs.size()) code->attr_caches.resize(code->instrs.size());
  Code::AttrCache* const attr_caches = code->attr_caches.data();
  Value* sp = stack;
  // Scratch for handlers. TRAP: a computed goto that leaves a scope does
  // not run destructors (GCC), so every handler keeps its Values in a
  // block that closes before it dispatches; only trivial state lives here.
  bool jump = false;
  int64_t r = 0;
  // Checked: where the stack was when the instruction started. Each way
  // out of a handler (NEXT, JUMP_TO, RETURN_VALUE) compares the change
  // with the table's (interpreter/stack_effects.h); a raise is not compared.
  [[maybe_unused]] const Value* at_start = sp;

#define DISPATCH()                                                 \
  do {                                                             \
    if constexpr (kCount) ++executed_;                             \
    if constexpr (kCheck) {                                        \
      if (options_.count_instructions) ++executed_;                \
      at_start = sp;                                               \
      stack_effects::entered(stack_effects::Engine::VM, ip->op);   \
    }                                                              \
    goto* labels[size_t(ip->op)];                                  \
  } while (0)
#define CHECK_EFFECT(edge)                                                                                   \
  do {                                                                                                       \
    if constexpr (kCheck)                                                                                    \
      stack_effects::check(stack_effects::Engine::VM, *code, size_t(ip - begin), stack_effects::Edge::edge, \
                           sp - at_start);                                                                   \
  } while (0)
#define NEXT()          \
  do {                  \
    CHECK_EFFECT(Next); \
    ++ip;               \
    DISPATCH();         \
  } while (0)
// A backward jump spends a step of the run's budget (runtime/base/budget.h):
// every loop passes one.
#define JUMP_TO(target)                            \
  do {                                             \
    CHECK_EFFECT(Taken);                           \
    const Instr* to_ = begin + (target);           \
    if (to_ <= ip) kiln::runtime::spend_step();    \
    ip = to_;                                      \
    DISPATCH();                                    \
  } while (0)
#define POP() (std::move(*--sp))
#define TOP() (sp[-1])
// Replaces the n items on top of the stack by `result`.
#define REPLACE_TOP(n, result)                       \
  {                                                  \
    Value res_ = (result);                           \
    for (Value* p_ = sp - (n); p_ < sp; ++p_) *p_ = Value(); \
    sp -= (n);                                       \
    *sp++ = std::move(res_);                         \
  }

  // The exception being handled when the frame started: restored if an
  // exception leaves the frame from inside one of its handlers.
  const Value handled_on_entry = handled_;
  for (;;) {
  try {
    DISPATCH();

  op_NOP:
    NEXT();
  op_POP_TOP:
    *--sp = Value();
    NEXT();
  op_COPY:
    *sp = sp[-ip->a];
    ++sp;
    NEXT();
  op_SWAP:
    std::swap(sp[-1], sp[-ip->a]);
    NEXT();
  op_LOAD_CONST:
    *sp++ = consts[ip->a];
    NEXT();
  op_LOAD_FAST:
    if (locals[ip->a].is_null()) unbound_local(code, ip->a);
    *sp++ = locals[ip->a];
    NEXT();
  op_STORE_FAST:
    locals[ip->a] = POP();
    NEXT();
  op_DELETE_FAST:
    if (locals[ip->a].is_null()) unbound_local(code, ip->a);
    locals[ip->a] = Value::null();
    NEXT();
  op_LOAD_GLOBAL:
    *sp++ = lookup_global(fn, code->names[size_t(ip->a)].get());
    NEXT();
  op_STORE_GLOBAL:
    if (!fn->globals) throw_error(ErrorKind::RuntimeError, "function has no global namespace");
    {
      Value v = POP();
      fn->globals->map.set(code->names[size_t(ip->a)], v);
      if (fn->globals->on_store) fn->globals->on_store(fn->globals.get(), code->names[size_t(ip->a)].get(), v);
    }
    NEXT();
  op_LOAD_DEREF:
    if (cells[ip->a]->v.is_null()) {
      size_t i = size_t(ip->a);
      throw_error(ErrorKind::NameError,
                  "free variable '" +
                      (i < code->cellvars.size() ? code->cellvars[i] : code->freevars[i - code->cellvars.size()]) +
                      "' referenced before assignment");
    }
    *sp++ = cells[ip->a]->v;
    NEXT();
  op_STORE_DEREF:
    {
      CellObj* c = cells[ip->a].get();
      c->v = POP();
      if (c->host) [[unlikely]]
        host_cell_stored(c);  // a Python closure cell: Python sees the store
    }
    NEXT();
  op_LOAD_CLOSURE:
    *sp++ = Value::object(Kind::Cell, cells[ip->a]);
    NEXT();
  op_MAKE_FUNCTION:
    {
      Value code_v = POP();
      if (!code_v.is(Kind::Code)) throw_error(ErrorKind::TypeError, "MAKE_FUNCTION expects a code object");
      auto f = make_ref<FunctionObj>();
      f->code = Ref<Code>(code_v.as<Code>());
      f->globals = fn->globals;
      if (ip->a & 4) {
        Value closure = POP();
        for (const Value& c : to_vector(closure)) {
          if (!c.is(Kind::Cell)) throw_error(ErrorKind::TypeError, "closure items must be cells");
          f->closure.emplace_back(c.as<CellObj>());
        }
      }
      if (f->closure.size() != f->code->freevars.size())
        throw_error(ErrorKind::TypeError, f->code->qualname + " requires a closure of " +
                                              std::to_string(f->code->freevars.size()) + " cells, got " +
                                              std::to_string(f->closure.size()));
      if (ip->a & 2) {
        Value kwd = POP();
        f->kwdefaults.assign(size_t(f->code->kwonlyargcount), Value::null());
        if (kwd.is(Kind::Dict))
          for (const auto& [k, v] : kwd.as<DictObj>()->entries)
            for (int32_t i = 0; i < f->code->kwonlyargcount; ++i)
              if (k.is(Kind::Str) && f->code->varnames[size_t(f->code->argcount + i)] == k.as_str())
                f->kwdefaults[size_t(i)] = v;
      }
      if (ip->a & 1) f->defaults = to_vector(POP());
      *sp++ = Value::object(Kind::Function, f);
    }
    NEXT();
  op_LOAD_ATTR:
    if (sp[-1].is(Kind::Module)) {
      const auto* m = sp[-1].as<ModuleObj>();
      Code::AttrCache& c = attr_caches[ip - begin];
      if (c.module != m || c.version != m->version) {
        c.slot = module_instance_slot(m, code->names[size_t(ip->a)].get());
        c.module = c.slot ? m : nullptr;
        c.version = m->version;
      }
      if (c.slot) {
        // Copy before overwriting: the stack may hold the module's last reference.
        REPLACE_TOP(1, *c.slot);
        NEXT();
      }
    }
    REPLACE_TOP(1, get_attr(*this, sp[-1], code->names[size_t(ip->a)].get()));
    NEXT();
  op_STORE_ATTR:
    set_attr(*this, sp[-1], code->names[size_t(ip->a)], sp[-2]);
    sp[-1] = Value();
    sp[-2] = Value();
    sp -= 2;
    NEXT();
  op_DELETE_ATTR:
    del_attr(*this, sp[-1], code->names[size_t(ip->a)].get());
    *--sp = Value();
    NEXT();
  op_PUSH_NULL:
    *sp++ = Value::null();
    NEXT();
  op_LOAD_METHOD:
    {
      Value method, self;
      load_method(*this, sp[-1], code->names[size_t(ip->a)].get(), method, self);
      sp[-1] = std::move(method);
      *sp++ = std::move(self);
    }
    NEXT();
  op_BINARY_SUBSCR:
    REPLACE_TOP(2, get_item(sp[-2], sp[-1]));
    NEXT();
  op_STORE_SUBSCR:
    set_item(sp[-2], sp[-1], sp[-3]);
    for (int i = 1; i <= 3; ++i) sp[-i] = Value();
    sp -= 3;
    NEXT();
  op_DELETE_SUBSCR:
    del_item(sp[-2], sp[-1]);
    sp[-1] = Value();
    sp[-2] = Value();
    sp -= 2;
    NEXT();
  op_BUILD_SLICE:
    REPLACE_TOP(ip->a, make_slice(sp[-ip->a], sp[1 - ip->a], ip->a == 3 ? sp[-1] : Value::none()));
    NEXT();
  op_BINARY_OP:
    // Fast path: int op int is what loops spend their time on.
    if (sp[-2].is(Kind::Int) && sp[-1].is(Kind::Int)) {
      int64_t x = sp[-2].as_int(), y = sp[-1].as_int();
      bool overflow = true;
      switch (BinOp(ip->a)) {
        case BinOp::ADD: overflow = __builtin_add_overflow(x, y, &r); break;
        case BinOp::SUB: overflow = __builtin_sub_overflow(x, y, &r); break;
        case BinOp::MUL: overflow = __builtin_mul_overflow(x, y, &r); break;
        default: break;
      }
      if (!overflow) {
        --sp;  // ints hold no reference: no need to clear the slot
        sp[-1] = Value::integer(r);
        NEXT();
      }
    }
    REPLACE_TOP(2, binary_op(BinOp(ip->a), sp[-2], sp[-1], ip->b != 0));
    NEXT();
  op_UNARY_OP:
    REPLACE_TOP(1, unary_op(UnOp(ip->a), sp[-1]));
    NEXT();
  op_COMPARE_OP:
    if (sp[-2].is(Kind::Int) && sp[-1].is(Kind::Int) && ip->a <= int32_t(CmpOp::GE)) {
      int64_t x = sp[-2].as_int(), y = sp[-1].as_int();
      switch (CmpOp(ip->a)) {
        case CmpOp::LT: jump = x < y; break;
        case CmpOp::LE: jump = x <= y; break;
        case CmpOp::EQ: jump = x == y; break;
        case CmpOp::NE: jump = x != y; break;
        case CmpOp::GT: jump = x > y; break;
        default: jump = x >= y; break;
      }
      --sp;
      sp[-1] = Value::boolean(jump);
      NEXT();
    }
    REPLACE_TOP(2, compare_op(CmpOp(ip->a), sp[-2], sp[-1]));
    NEXT();
  op_BUILD_TUPLE:
    REPLACE_TOP(ip->a, make_tuple(std::vector<Value>(sp - ip->a, sp)));
    NEXT();
  op_BUILD_LIST:
    REPLACE_TOP(ip->a, make_list(std::vector<Value>(sp - ip->a, sp)));
    NEXT();
  op_BUILD_DICT:
    {
      Value d = make_dict();
      Value* base = sp - 2 * ip->a;
      for (int32_t i = 0; i < ip->a; ++i) d.as<DictObj>()->set(base[2 * i], base[2 * i + 1]);
      REPLACE_TOP(2 * ip->a, std::move(d));
    }
    NEXT();
  op_BUILD_STRING:
    {
      std::string s;
      for (Value* p = sp - ip->a; p < sp; ++p) s += to_str(*p);
      REPLACE_TOP(ip->a, Value::str(s));
    }
    NEXT();
  op_LIST_APPEND:
    if (!sp[-1 - ip->a].is(Kind::List)) throw_error(ErrorKind::TypeError, "LIST_APPEND target is not a list");
    {
      Value item = POP();
      sp[-ip->a].as<ListObj>()->items.push_back(std::move(item));
    }
    NEXT();
  op_LIST_EXTEND:
    if (!sp[-1 - ip->a].is(Kind::List)) throw_error(ErrorKind::TypeError, "LIST_EXTEND target is not a list");
    {
      auto more = to_vector(sp[-1]);
      auto& dst = sp[-1 - ip->a].as<ListObj>()->items;
      dst.insert(dst.end(), more.begin(), more.end());
      *--sp = Value();
    }
    NEXT();
  op_BUILD_SET:
    {
      Value set = make_set();
      for (Value* p = sp - ip->a; p < sp; ++p) set.as<SetObj>()->add(*p);
      REPLACE_TOP(ip->a, std::move(set));
    }
    NEXT();
  op_SET_ADD:
    if (!sp[-1 - ip->a].is(Kind::Set)) throw_error(ErrorKind::TypeError, "SET_ADD target is not a set");
    sp[-1 - ip->a].as<SetObj>()->add(sp[-1]);
    *--sp = Value();
    NEXT();
  op_SET_UPDATE:
    if (!sp[-1 - ip->a].is(Kind::Set)) throw_error(ErrorKind::TypeError, "SET_UPDATE target is not a set");
    set_update(sp[-1 - ip->a], sp[-1]);  // set_update_internal: a set's table is merged
    *--sp = Value();
    NEXT();
  op_DICT_MERGE:
    if (!sp[-1 - ip->a].is(Kind::Dict)) throw_error(ErrorKind::TypeError, "DICT_MERGE target is not a dict");
    dict_merge(*this, sp[-1 - ip->a], sp[-1], sp[-3 - ip->a]);
    *--sp = Value();
    NEXT();
  op_FORMAT_VALUE:
    {
      const bool has_spec = ip->a & 4;
      if (has_spec && !TOP().is(Kind::Str)) throw_error(ErrorKind::TypeError, "FORMAT_VALUE spec is not a str");
      std::string s = format_field(sp[has_spec ? -2 : -1], ip->a & 3, has_spec ? std::string_view(TOP().as_str()) : "");
      REPLACE_TOP(has_spec ? 2 : 1, Value::str(s));
    }
    NEXT();
  op_LOAD_ASSERTION_ERROR:
    *sp++ = assertion_error();
    NEXT();
  op_IMPORT_NAME:
    REPLACE_TOP(2, import_module(code->consts[size_t(ip->a)].as<StrObj>(), sp[-1], sp[-2], false));
    NEXT();
  op_IMPORT_FROM:
    {
      const StrObj* name = code->names[size_t(ip->a)].get();
      Value attr;
      try {
        attr = get_attr(*this, sp[-1], name);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::AttributeError) throw;
        throw_error(ErrorKind::ImportError, "cannot import name '" + name->s + "'");
      }
      *sp++ = std::move(attr);
    }
    NEXT();
  op_UNPACK_SEQUENCE:
    {
      std::vector<Value> items = to_vector(sp[-1]);
      if (items.size() < size_t(ip->a))
        throw_error(ErrorKind::ValueError, "not enough values to unpack (expected " + std::to_string(ip->a) +
                                               ", got " + std::to_string(items.size()) + ")");
      if (items.size() > size_t(ip->a))
        throw_error(ErrorKind::ValueError, "too many values to unpack (expected " + std::to_string(ip->a) + ")");
      *--sp = Value();
      for (size_t i = items.size(); i-- > 0;) *sp++ = std::move(items[i]);
    }
    NEXT();
  op_CALL:
    REPLACE_TOP(ip->a + 1, call(sp[-ip->a - 1], CallArgs{sp - ip->a, size_t(ip->a), nullptr}));
    NEXT();
  op_CALL_KW:
    REPLACE_TOP(ip->a + 1, call(sp[-ip->a - 1], CallArgs{sp - ip->a, size_t(ip->a), consts[ip->b].as<TupleObj>()}));
    NEXT();
  op_CALL_METHOD:
  op_CALL_METHOD_KW:
    {
      Value* base = sp - ip->a - 2;
      const TupleObj* names = ip->op == Opcode::CALL_METHOD_KW ? consts[ip->b].as<TupleObj>() : nullptr;
      // [method, self, args...] is already the argument vector with self first.
      REPLACE_TOP(ip->a + 2, base[1].is_null() ? call(base[0], CallArgs{base + 2, size_t(ip->a), names})
                                               : call(base[0], CallArgs{base + 1, size_t(ip->a) + 1, names}));
    }
    NEXT();
  op_CALL_EX:
    {
      int n = 2 + (ip->a & 1);
      REPLACE_TOP(n, call_ex(*this, sp[-n], sp[1 - n], (ip->a & 1) ? &sp[-1] : nullptr));
    }
    NEXT();
  op_GET_ITER:
    REPLACE_TOP(1, get_iter(sp[-1]));
    NEXT();
  op_FOR_ITER:
    if (!TOP().is(Kind::Iterator)) throw_error(ErrorKind::TypeError, "FOR_ITER expects an iterator");
    {
      Value item;
      jump = !TOP().as<IteratorObj>()->next(item);
      if (!jump) *sp++ = std::move(item);
    }
    if (!jump) NEXT();
    *--sp = Value();
    JUMP_TO(ip->a);
  op_JUMP:
    JUMP_TO(ip->a);
  op_POP_JUMP_IF_TRUE:
    jump = TOP().is(Kind::Bool) ? TOP().as_bool() : truth(TOP());
    *--sp = Value();
    if (jump) JUMP_TO(ip->a);
    NEXT();
  op_POP_JUMP_IF_FALSE:
    jump = TOP().is(Kind::Bool) ? TOP().as_bool() : truth(TOP());
    *--sp = Value();
    if (!jump) JUMP_TO(ip->a);
    NEXT();
  op_POP_JUMP_IF_NONE:
    jump = TOP().is_none();
    *--sp = Value();
    if (jump) JUMP_TO(ip->a);
    NEXT();
  op_POP_JUMP_IF_NOT_NONE:
    jump = !TOP().is_none();
    *--sp = Value();
    if (jump) JUMP_TO(ip->a);
    NEXT();
  op_JUMP_IF_TRUE_OR_POP:
    if (truth(TOP())) JUMP_TO(ip->a);
    *--sp = Value();
    NEXT();
  op_JUMP_IF_FALSE_OR_POP:
    if (!truth(TOP())) JUMP_TO(ip->a);
    *--sp = Value();
    NEXT();
  op_RETURN_VALUE:
    // A frame's handled exception never outlives it: KBC may return from
    // inside a handler without the POP_EXCEPT CPython's compiler always
    // emits, and the caller must not find the callee's exception "being
    // handled" (found by tests/fuzz: a bare raise, or the next
    // PUSH_EXC_INFO, saw it).
    handled_ = handled_on_entry;
    if constexpr (kCheck) {
      Value result = POP();
      CHECK_EFFECT(Return);
      return result;
    }
    return POP();
  op_YIELD_VALUE:
    // Unreachable: a generator function's call raises (bind_arguments).
    throw_error(ErrorKind::SystemError, code->user_qualname() + ": YIELD_VALUE on the VM");
  op_RAISE:
    if (ip->a == 0) {
      // A bare `raise`: the handled exception again, traceback unchanged.
      if (handled_.is_none()) throw_error(ErrorKind::RuntimeError, "No active exception to reraise");
      reraise_exception(handled_);
    }
    if (ip->a == 2) raise_exception(sp[-2], sp[-1]);
    raise_exception(TOP(), Value::null());
  op_PUSH_EXC_INFO:
    {
      Value exc = TOP();
      sp[-1] = handled_;
      handled_ = exc;
      *sp++ = std::move(exc);
    }
    NEXT();
  op_POP_EXCEPT:
    handled_ = POP();
    NEXT();
  op_CHECK_EXC_MATCH:
    jump = exception_matches(sp[-2], sp[-1]);
    sp[-1] = Value::boolean(jump);
    NEXT();
  op_RERAISE:
    reraise_exception(TOP());
  op_BEFORE_WITH:
    {
      Value exit, enter;
      before_with(*this, TOP(), exit, enter);
      sp[-1] = std::move(exit);
      *sp++ = Value();  // a placeholder while __enter__ runs: the slot is counted by max_stack
      Value result = call(enter, CallArgs{});
      sp[-1] = std::move(result);
    }
    NEXT();
  op_WITH_EXCEPT_START:
    {
      Value args[] = {exception_type_of(*this, sp[-1]), sp[-1], Value::none()};
      Value res = call(sp[-4], CallArgs{args, 3, nullptr});
      *sp++ = std::move(res);
    }
    NEXT();
  } catch (Error& e) {
    if constexpr (kCheck) stack_effects::raised(stack_effects::Engine::VM, ip->op);
    // CPython's PyTraceBack_Here: the frame joins the traceback where the
    // exception passes through it, unless RERAISE put it there already.
    // A residual whose continuation raised: the continuation's entry,
    // under the user's name, already stands for this frame (runtime/value/code.h).
    if (!e.reraised && !e.continued)
      e.add_frame({code->user_qualname(), code->filename, ip->line});
    e.reraised = false;
    e.continued = false;
    const size_t pc = size_t(ip - begin);
    if (const ExceptionEntry* h = code->handler_for(pc)) {
      Value exc = caught_exception(e);
      Value* base = stack + h->depth;
      if (sp < base)  // the verifier rules this out for the VM's own instructions
        throw_error(ErrorKind::SystemError, code->user_qualname() + ": stack below the exception handler's depth");
      while (sp > base) *--sp = Value();
      if (h->lasti) *sp++ = Value::integer(int64_t(pc) - code->prologue);
      *sp++ = std::move(exc);
      ip = begin + h->target;
      kiln::runtime::spend_step();  // a handler may loop back without a jump
      continue;
    }
    handled_ = handled_on_entry;
    e.continued = !code->continues.empty();
    throw;
  } catch (const std::bad_alloc&) {
    Error e(ErrorKind::RuntimeError, "out of memory");
    e.add_frame({code->user_qualname(), code->filename, ip->line});
    throw e;
  }
  }
#undef DISPATCH
#undef CHECK_EFFECT
#undef NEXT
#undef JUMP_TO
#undef POP
#undef TOP
#undef REPLACE_TOP
}

#ifndef KILN_VM_CHECKED_LOOP
template Value VM::execute<VM::Loop::Counting>(FunctionObj*, Value*, Value*, Ref<CellObj>*);
template Value VM::execute<VM::Loop::Plain>(FunctionObj*, Value*, Value*, Ref<CellObj>*);
#else
template Value VM::execute<VM::Loop::Checked>(FunctionObj*, Value*, Value*, Ref<CellObj>*);
#endif

}  // namespace kiln::interpreter

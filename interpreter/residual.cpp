// The residual code of a traced frame: see residual.h.
#include "interpreter/residual.h"

#include <algorithm>

#include "interpreter/verifier.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/super.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/dtype.h"
#include "runtime/value/name_map.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
using output_graph::Node;
using output_graph::NodeOp;
using output_graph::SourceKind;
using output_graph::SourceRef;
namespace vars = kiln::variables;

namespace {

// An iterator over a container the program can reach (Python's iterator
// over it is live), rather than over items the trace computed.
bool container_iterator(const vars::VariableTracker& it) {
  return it.is(VTKind::Iterator) && vars::lazy_iteration(it) == vars::LazyIteration::None &&
         !vars::iteration_error(it) && it.iterated;
}

// A container's iterator at a position, held by something other than one
// stack slot across a break. It is made when first advanced, which is after
// the residual replayed the trace's writes (made at once, a dict's iterator
// would count the size before a replayed insertion). A dict or set whose
// size is not the one the trace iterated raises then, as Python's would.
struct PositionedIterator final : runtime::IteratorObj {
  Value of, it = Value::null();  // it: the real iterator once made
  vars::DictView view = vars::DictView::Keys;
  int64_t pos = 0;
  int64_t expected = -1;  // -1: a list (no size check)
  bool of_a_set = false;
  bool next(Value& out) override {
    if (it.is_null()) {
      if (expected >= 0 && runtime::length(of) != expected)
        throw_error(ErrorKind::RuntimeError, of_a_set ? "Set changed size during iteration"
                                                      : "dictionary changed size during iteration");
      Value src = of;
      if (view != vars::DictView::Keys) {
        static const Ref<StrObj> values = intern("values"), items = intern("items");
        CallContext& c = *CallContext::current();
        src = c.call(runtime::get_attr(c, src, view == vars::DictView::Values ? values.get() : items.get()), {});
      }
      it = runtime::get_iter(src);
      Value skipped;
      for (; pos > 0 && it.as<runtime::IteratorObj>()->next(skipped); --pos) {
      }
    }
    return it.as<runtime::IteratorObj>()->next(out);
  }
  void traverse(runtime::Visitor& v) const override {
    visit(v, of);
    visit(v, it);
  }
  void clear() override {
    of = Value::none();
    it = Value::null();
  }
};

// The iterator of a dict or set that changed size while a loop ran over it:
// its next step raises CPython's RuntimeError, and every one after.
struct RaisingIterator final : runtime::IteratorObj {
  explicit RaisingIterator(std::string m) : message(std::move(m)) {}
  std::string message;
  bool next(Value&) override { throw_error(ErrorKind::RuntimeError, message); }
  void traverse(runtime::Visitor&) const override {}
};

}  // namespace

std::set<const vars::VariableTracker*> shared_iterators(const std::vector<VT>& stack, const std::vector<VT>& locals,
                                                         const std::vector<VT>& cells) {
  std::set<const vars::VariableTracker*> out, on_stack, visited;
  auto walk = [&](auto&& self, const VT& v0) -> void {
    const VT v = v0 && v0->is(VTKind::Lazy) ? v0->realized : v0;
    if (!v || !visited.insert(v.get()).second) return;
    if (v->is(VTKind::Iterator)) out.insert(v.get());
    for (const VT& x : v->items) self(self, x);
  };
  for (const VT& v : locals) walk(walk, v);
  for (const VT& c : cells) walk(walk, c);
  for (const VT& v0 : stack) {
    const VT v = v0 && v0->is(VTKind::Lazy) ? v0->realized : v0;
    if (v && v->is(VTKind::Iterator) && !on_stack.insert(v.get()).second) out.insert(v.get());
  }
  return out;
}

Slot iterator_slot(const VT& v, const std::set<const vars::VariableTracker*>& shared) {
  if (!v || !v->is(VTKind::Iterator) || vars::iteration_error(*v) || shared.count(v.get())) return Slot::Value;
  if (vars::lazy_iteration(*v) != vars::LazyIteration::None) return Slot::Value;  // a real zip / enumerate
  if (!container_iterator(*v)) return Slot::Iterator;
  return v->iterated->is(VTKind::List) ? Slot::AtPosition : Slot::Value;
}

// -------------------------------------------------------------- residual --

Value compile_when_called(const Options& options) {
  return make_builtin_closure("kiln.compile", [options](CallContext&, const CallArgs& a) {
    if (a.nargs != 1 || !a[0].is(Kind::Function)) throw_error(ErrorKind::TypeError, "kiln.compile expects a function");
    return compiled_value(Ref<FunctionObj>(a[0].as<FunctionObj>()), options);
  });
}

void reachable_cells(const VT& v0, std::set<const vars::VariableTracker*>& seen,
                     std::set<const vars::VariableTracker*>& cells) {
  VT v = v0 && v0->is(VTKind::Lazy) ? v0->realized : v0;
  if (!v || !seen.insert(v.get()).second) return;
  if (v->is(VTKind::Cell)) cells.insert(v.get());
  for (const VT& x : v->items) reachable_cells(x, seen, cells);
  if (v->self) reachable_cells(v->self, seen, cells);
}

Residual::Residual(const Code& code, TraceContext& ctx, size_t trace_cells)
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

void Residual::keep_rebuilt(const VT& v) {
  const int32_t tmp = b.local("__rebuilt" + std::to_string(rebuilt.size()));
  rebuilt.emplace(v.get(), tmp);
  b.emit(Opcode::COPY, 1);
  b.emit(Opcode::STORE_FAST, tmp);
}

void Residual::park_cells(const std::vector<VT>& cells) {
  if (cells.empty()) return;
  for (const VT& c : cells) emit_cell(c);
  b.emit(Opcode::BUILD_TUPLE, int32_t(cells.size()));
  resume_cells = b.local("__resume_cells");
  b.emit(Opcode::STORE_FAST, resume_cells);
}

void Residual::emit_resume_callee(const Ref<FunctionObj>& rf, const Options& options) {
  if (resume_cells < 0) return emit_const(compiled_value(rf, options));
  emit_const(compile_when_called(options));
  b.emit(Opcode::LOAD_FAST, resume_cells);
  emit_const(Value::object(Kind::Code, rf->code));
  b.emit(Opcode::MAKE_FUNCTION, 4);
  b.emit(Opcode::CALL, 1);
}

void Residual::emit_source(const SourceRef& s) {
  switch (s->kind) {
    case SourceKind::Local: b.emit(Opcode::LOAD_FAST, s->local_index); return;
    case SourceKind::Global:
      if (s->globals) {
        // Another namespace's global: a constant reader of that namespace
        // (LOAD_GLOBAL would read the frame's own).
        Ref<StrObj> name = runtime::intern(s->name);
        emit_const(runtime::make_builtin_closure(
            "G*['" + s->name + "']",
            [ns = s->globals.get(), key = name.get()](runtime::CallContext&, const runtime::CallArgs&) {
              const Value* v = ns->map.find(key);
              if (!v) throw_error(ErrorKind::NameError, "name '" + key->s + "' is not defined");
              return *v;
            },
            {s->globals, name}));
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
    case SourceKind::Const: return emit_const(s->key);
    case SourceKind::Cell:
      if (s->base) unsupported(BreakReason::resume_state, "reloading another function's closure cell");
      b.emit(Opcode::LOAD_DEREF, int32_t(trace_cells) + s->local_index);
      return;
    case SourceKind::GenericAttr:
      // object.__getattribute__(base, name): not base.name, which runs the
      // class's own __getattribute__ (the trace read past it).
      emit_const(runtime::object_getattribute());
      emit_source(s->base);
      emit_const(runtime::intern_value(s->name));
      b.emit(Opcode::CALL, 2);
      return;
    case SourceKind::Environ:
      // Only guards read it: what the trace read is a constant there.
      unsupported(BreakReason::resume_state, "an environment variable's source");
    case SourceKind::DictItem:
      // dict.__getitem__(base, key): the storage, past the subclass's own
      // __getitem__ (the guard that read it found the key there).
      emit_const(runtime::type_method(Kind::Dict, runtime::intern("__getitem__").get()));
      emit_source(s->base);
      emit_const(s->key);
      b.emit(Opcode::CALL, 2);
      return;
    case SourceKind::TypeAttr:
      unsupported(BreakReason::resume_state, "reloading what a class lookup found (" + s->str() + ")");
  }
}

namespace {

// Whether the residual can load the value at `s` again (another
// function's cell it cannot).
bool reloadable(const output_graph::SourceRef& s) {
  if (!s) return false;
  if ((s->kind == SourceKind::Cell && s->base) || s->kind == SourceKind::TypeAttr) return false;
  return !s->base || s->kind == SourceKind::Global || reloadable(s->base);
}

class SymBytecode final : public output_graph::SymEmitter {
 public:
  explicit SymBytecode(Residual& r) : r_(r) {}
  void symbol(int id) override {
    const auto& guards = r_.ctx.out.guards();
    r_.emit_source(guards.symbol_sources()[size_t(id)]);
    r_.b.emit(Opcode::LOAD_ATTR, r_.b.name("shape"));
    r_.emit_const(Value::integer(guards.symbol_dims()[size_t(id)]));
    r_.b.emit(Opcode::BINARY_SUBSCR);
  }
  void constant(int64_t v) override { r_.emit_const(Value::integer(v)); }
  void binary(Op op) override {
    switch (op) {
      case Op::Add: return r_.b.emit(Opcode::BINARY_OP, int32_t(runtime::BinOp::ADD));
      case Op::Mul: return r_.b.emit(Opcode::BINARY_OP, int32_t(runtime::BinOp::MUL));
      case Op::FloorDiv: return r_.b.emit(Opcode::BINARY_OP, int32_t(runtime::BinOp::FLOORDIV));
      case Op::Mod: return r_.b.emit(Opcode::BINARY_OP, int32_t(runtime::BinOp::MOD));
      case Op::Max:
      case Op::Min:
        // max(*(a, b)): the callee goes under its arguments.
        r_.b.emit(Opcode::BUILD_TUPLE, 2);
        r_.emit_const(*runtime::builtins().find(op == Op::Max ? "max" : "min"));
        r_.b.emit(Opcode::SWAP, 2);
        r_.b.emit(Opcode::CALL_EX, 0);
        return;
    }
  }

 private:
  Residual& r_;
};

}  // namespace

bool Residual::emit_sym(const output_graph::SymExpr& e) {
  const auto& sources = ctx.out.guards().symbol_sources();
  for (int id : e.symbols())
    if (size_t(id) >= sources.size() || !reloadable(sources[size_t(id)])) return false;
  SymBytecode out(*this);
  e.emit(out);
  return true;
}

void Residual::emit_build(Opcode op, size_t n, const std::function<void(size_t)>& push) {
  if (n <= size_t(kMaxCountOperand)) {
    for (size_t i = 0; i < n; ++i) push(i);
    b.emit(op, int32_t(n));
    return;
  }
  // tuple(list) / dict(list of (key, value)): the callable goes first.
  if (op != Opcode::BUILD_LIST) emit_const(*runtime::builtins().find(op == Opcode::BUILD_TUPLE ? "tuple" : "dict"));
  constexpr size_t kChunk = size_t(1) << 15;
  b.emit(Opcode::BUILD_LIST, 0);
  for (size_t at = 0; at < n; at += kChunk) {
    const size_t m = std::min(kChunk, n - at);
    for (size_t i = at; i < at + m; ++i) {
      push(i);
      if (op == Opcode::BUILD_DICT) b.emit(Opcode::BUILD_TUPLE, 2);
    }
    b.emit(Opcode::BUILD_LIST, int32_t(m));
    b.emit(Opcode::LIST_EXTEND, 1);
  }
  if (op != Opcode::BUILD_LIST) b.emit(Opcode::CALL, 1);
}

namespace {

// A constant kiln spells its own way that CPython must get as torch's object:
// a dtype is its name in kiln (t.dtype, torch.long). Read again where the
// trace read it: the tensor's attribute, or the source (strings are
// immutable and the source was guarded at entry, so it reads the same).
// Found by the zoo: transformers' caches call torch.tensor(n,
// dtype=torch.long) after a break, which CPython then gave a str.
bool is_torch_spelling(const VT& v) {
  if (!v->is(VTKind::Constant)) return false;
  if (v->self && !v->module_path.empty()) return true;
  return v->source && v->value.is(Kind::Str) && runtime::dtype_from_name(v->value.as_str());
}

}  // namespace

void Residual::reconstruct(const VT& v0, bool as_list) {
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
      if (v->node->op == NodeOp::GetAttr) return emit_const(*ctx.out.graph().attr_of(*v->node));
      b.emit(Opcode::LOAD_FAST, graph_out);
      emit_const(Value::integer(output_index.at(v->node)));
      b.emit(Opcode::BINARY_SUBSCR);
      return;
    case VTKind::Constant:
      if (v->fake_id_step >= 0) {
        // An id() the trace made up (trace_id): the program would see a
        // number that is no object's id. The trace restarts and stops
        // before the step that asked, so that CPython asks.
        Unsupported u{BreakReason::resume_state, "an id() of an object the trace made, held across the break or returned", {}};
        u.restart_at = v->fake_id_step;
        throw u;
      }
      if (v->value.is(Kind::Set)) {
        // A mutable set: the caller's own object, or a fresh one per run
        // (a constant would be one object shared by every call).
        if (v->source) return emit_source(v->source);
        auto done = rebuilt.find(v.get());
        if (done != rebuilt.end()) return b.emit(Opcode::LOAD_FAST, done->second);
        // An exact copy of the trace's set (its table: the order the VM's
        // set would have), made anew by each run.
        const Value snapshot = runtime::set_clone(v->value, true);
        emit_const(make_builtin_closure(
            "set",
            [kind = snapshot.kind(), set = snapshot.obj()](CallContext&, const CallArgs&) {
              return runtime::set_clone(Value::object(kind, set), false);
            },
            {Ref<Object>(snapshot.obj())}));
        b.emit(Opcode::CALL, 0);
        keep_rebuilt(v);
        return;
      }
      if (python_frames && is_torch_spelling(v)) {
        if (v->self) {  // t.dtype
          reconstruct(v->self);
          b.emit(Opcode::LOAD_ATTR, b.name(v->module_path));
          return;
        }
        return emit_source(v->source);  // torch.long
      }
      return emit_const(v->value);
    case VTKind::List:
    case VTKind::ConstDict: {
      if (v->source) return emit_source(v->source);
      auto done = rebuilt.find(v.get());
      if (done != rebuilt.end()) return b.emit(Opcode::LOAD_FAST, done->second);
      if (v->is(VTKind::List)) {
        emit_build(Opcode::BUILD_LIST, v->items.size(), [&](size_t i) { reconstruct(v->items[i]); });
      } else {
        emit_build(Opcode::BUILD_DICT, v->keys.size(), [&](size_t i) {
          emit_const(v->keys[i]);
          reconstruct(v->items[i]);
        });
      }
      keep_rebuilt(v);
      return;
    }
    case VTKind::Tuple:
      if (is_module_slice(v)) {  // CPython's own slice of the real container: a new one of its class
        if (v->source) return emit_source(v->source);
        unsupported(BreakReason::resume_state, "a slice of a module container the trace reached without a source");
      }
      emit_build(Opcode::BUILD_TUPLE, v->items.size(), [&](size_t i) { reconstruct(v->items[i]); });
      return;
    case VTKind::Iterator: {
      const vars::LazyIteration lazy = vars::lazy_iteration(*v);
      if (lazy == vars::LazyIteration::Map || lazy == vars::LazyIteration::Filter)
        unsupported(BreakReason::resume_state, "a map() or filter() iterator held across the break");
      if (lazy == vars::LazyIteration::Generator) {
        // No generator can be made stopped at a given yield: the trace
        // restarts and stops before the step that made this one, so that
        // CPython makes it (translator_generators.cpp).
        Unsupported u{BreakReason::resume_state, "a generator the trace made, held across the break or returned", {}};
        u.restart_at = v->value.as_int();
        throw u;
      }
      if (lazy == vars::LazyIteration::Zip || lazy == vars::LazyIteration::ZipStrict ||
          lazy == vars::LazyIteration::Enumerate) {
        // Python's own zip / enumerate over the real iterators, one object
        // per tracker (its inner iterators go on where the trace left them).
        if (auto done = rebuilt.find(v.get()); done != rebuilt.end()) return b.emit(Opcode::LOAD_FAST, done->second);
        const bool enumerate = lazy == vars::LazyIteration::Enumerate;
        emit_const(*runtime::builtins().find(enumerate ? "enumerate" : "zip"));
        for (const VT& inner : v->items) reconstruct(inner);
        if (enumerate) emit_const(v->value);
        if (lazy == vars::LazyIteration::ZipStrict) {
          emit_const(Value::boolean(true));
          b.emit(Opcode::CALL_KW, int32_t(v->items.size() + 1), b.constant(runtime::make_tuple({Value::str("strict")})));
        } else {
          b.emit(Opcode::CALL, int32_t(v->items.size() + (enumerate ? 1 : 0)));
        }
        keep_rebuilt(v);
        return;
      }
      if (python_frames && (vars::iteration_error(*v) || (container_iterator(*v) && !as_list)))
        unsupported(BreakReason::resume_state, "an iterator over a container held across the break other than by the loop");
      if (const char* error = vars::iteration_error(*v)) {
        // Its dict or set changed size: an iterator whose next step
        // raises, as Python's (GET_ITER of an iterator is itself).
        emit_const(make_builtin_closure("iter", [message = std::string(error)](CallContext&, const CallArgs&) {
          return Value::object(Kind::Iterator, make_ref<RaisingIterator>(message));
        }));
        b.emit(Opcode::CALL, 0);
        return;
      }
      if (container_iterator(*v)) {
        // The same container, at the same position (see Slot::AtPosition);
        // off the stack, one real iterator per tracker, made when first
        // advanced (after the residual's writes: PositionedIterator).
        if (as_list) {
          reconstruct(v->iterated);
          return emit_const(Value::integer(int64_t(vars::items_yielded(*v))));
        }
        auto done = rebuilt.find(v.get());
        if (done != rebuilt.end()) return b.emit(Opcode::LOAD_FAST, done->second);
        const vars::DictView view = v->iterated->is(VTKind::ConstDict) ? v->view : vars::DictView::Keys;
        // A list's iterator checks no size; a dict's or set's expects the
        // size the trace iterated (equal after the replay, else iteration_error).
        const int64_t expected = v->iterated->is(VTKind::List) ? -1 : int64_t(v->iterated_size);
        const bool of_a_set = !v->iterated->is(VTKind::List) && !v->iterated->is(VTKind::ConstDict);
        emit_const(make_builtin_closure("iter", [view, expected, of_a_set](CallContext&, const CallArgs& a) {
          auto it = make_ref<PositionedIterator>();
          it->of = a[0];
          it->view = view;
          it->pos = a[1].as_int();
          it->expected = expected;
          it->of_a_set = of_a_set;
          return Value::object(Kind::Iterator, it);
        }));
        reconstruct(v->iterated);
        emit_const(Value::integer(int64_t(vars::items_yielded(*v))));
        b.emit(Opcode::CALL, 2);
        keep_rebuilt(v);
        return;
      }
      if (!as_list)
        if (auto done = rebuilt.find(v.get()); done != rebuilt.end()) return b.emit(Opcode::LOAD_FAST, done->second);
      const std::vector<VT> rest = vars::remaining_items(*v);
      emit_build(Opcode::BUILD_LIST, rest.size(), [&](size_t i) { reconstruct(rest[i]); });
      if (as_list) return;
      b.emit(Opcode::GET_ITER);  // one object for every holder
      keep_rebuilt(v);
      return;
    }
    case VTKind::UserMethod:
      if (v->source) return emit_source(v->source);  // the caller's method object
      // A method the trace looked up (its function pinned by the lookup's
      // guards), bound again to the self this run has.
      if (!v->self || !v->value.is(Kind::Function))
        unsupported(BreakReason::resume_state, "a bound method held across the break");
      emit_const(runtime::method_type());
      emit_const(v->value);
      reconstruct(v->self);
      b.emit(Opcode::CALL, 2);
      return;
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
    case VTKind::SliceOf:
      for (const VT& part : v->items) reconstruct(part);
      b.emit(Opcode::BUILD_SLICE, 3);
      return;
    case VTKind::SymInt:
      // A size the code after the graph reads (a result, a store, a value
      // across a break) is computed there from the sizes of the inputs it
      // is made of, so it stays symbolic, as Dynamo returns SymInts. Only
      // a size whose tensor cannot be reloaded is its traced value, under
      // a guard.
      if (emit_sym(v->sym)) return;
      return emit_const(Value::integer(
          ctx.out.guards().shapes().specialize(v->sym, "a value the code after the graph reads")));
    case VTKind::Opaque:
      if (v->made) return rebuild_made(v);
      if ((v->value.is(Kind::Super) || v->host_super) && v->self && !v->source) {
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

void Residual::rebuild_made(const VT& v) {
  if (auto done = rebuilt.find(v.get()); done != rebuilt.end()) return b.emit(Opcode::LOAD_FAST, done->second);
  emit_const(v->made->new_fn);
  reconstruct(v->items[0]);
  b.emit(Opcode::CALL, 1);
  keep_rebuilt(v);  // before its contents: an item may be the object itself
  const int32_t self = rebuilt.at(v.get());
  auto fill = [&](const Value& how, const VT& contents) {
    for (size_t i = 0; i < contents->keys.size(); ++i) {
      emit_const(how);
      b.emit(Opcode::LOAD_FAST, self);
      emit_const(contents->keys[i]);
      reconstruct(contents->items[i]);
      b.emit(Opcode::CALL, 3);
      b.emit(Opcode::POP_TOP);
    }
  };
  if (vars::made_storage(*v)->is(VTKind::ConstDict)) fill(v->made->setitem, vars::made_storage(*v));
  fill(runtime::object_setattr(), vars::made_dict(*v));
}

void Residual::emit_cell(const VT& c) {
  if (c->source) {
    if (c->source->base) unsupported(BreakReason::resume_state, "another function's closure cell");
    b.emit(Opcode::LOAD_CLOSURE, int32_t(trace_cells) + c->source->local_index);
    return;
  }
  b.emit(Opcode::LOAD_CLOSURE, trace_cell_slot(c));
}

int32_t Residual::trace_cell_slot(const VT& c) {
  auto it = cell_slot.find(c.get());
  if (it != cell_slot.end()) return it->second;
  int32_t slot = int32_t(cell_slot.size());
  if (size_t(slot) >= trace_cells) unsupported(BreakReason::resume_state, "an uncounted closure cell");
  cell_slot.emplace(c.get(), slot);
  // Named as the program named it where that name is free here, so an
  // unbound read in the residual raises the VM's NameError words.
  const bool own = std::find(own_cells.begin(), own_cells.end(), c) != own_cells.end();  // (python_frames only)
  if ((!python_frames || own) && b.rename_cellvar(size_t(slot), c->module_path, python_frames))
    named_slots.insert(slot);
  if (c->items[0] && !own) {  // (an own cell is filled by fill_own_cells)
    reconstruct(c->items[0]);
    b.emit(Opcode::STORE_DEREF, slot);
  }
  return slot;
}

std::vector<std::pair<int32_t, int32_t>> Residual::park_own_cells(const std::set<const vars::VariableTracker*>* only) {
  std::vector<std::pair<int32_t, int32_t>> parked;
  for (const VT& c : own_cells) {
    if (only && !only->count(c.get())) continue;
    const int32_t slot = trace_cell_slot(c);
    if (!named_slots.count(slot))
      unsupported(BreakReason::resume_state, "cell '" + c->module_path + "' has no name of its own in the residual");
    if (!c->items[0]) continue;  // unbound: the fresh cell is empty too
    reconstruct(c->items[0]);
    const int32_t tmp = b.local("__own_cell" + std::to_string(parked.size()));
    b.emit(Opcode::STORE_FAST, tmp);
    parked.push_back({slot, tmp});
  }
  return parked;
}

void Residual::fill_own_cells(const std::vector<std::pair<int32_t, int32_t>>& parked) {
  for (const auto& [slot, tmp] : parked) {
    b.emit(Opcode::LOAD_FAST, tmp);
    b.emit(Opcode::STORE_DEREF, slot);
  }
}

void Residual::collect(const VT& v0, std::vector<Node*>& out, std::set<const vars::VariableTracker*>& seen) {
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

bool Residual::defer_container_iterator(const VT& v0, int32_t slot) {
  VT v = v0 && v0->is(VTKind::Lazy) ? v0->realized : v0;
  if (!v || !container_iterator(*v) || vars::iteration_error(*v)) return false;
  DeferredIterator d;
  d.slot = slot;
  d.view = v->iterated->is(VTKind::ConstDict) ? v->view : vars::DictView::Keys;
  reconstruct(v->iterated);
  d.container = b.local("__stack_container" + std::to_string(slot));
  b.emit(Opcode::STORE_FAST, d.container);
  emit_const(Value::integer(int64_t(vars::items_yielded(*v))));
  d.pos = b.local("__stack_pos" + std::to_string(slot));
  b.emit(Opcode::STORE_FAST, d.pos);
  deferred_iterators.push_back(d);
  return true;
}

void Residual::make_deferred_iterators() {
  static const Ref<StrObj> values = intern("values"), items = intern("items");
  for (const DeferredIterator& d : deferred_iterators) {
    b.emit(Opcode::LOAD_FAST, d.container);
    if (d.view != vars::DictView::Keys) {
      b.emit(Opcode::LOAD_METHOD, b.name(d.view == vars::DictView::Values ? values->s : items->s));
      b.emit(Opcode::CALL_METHOD, 0);
    }
    emit_step_over(b, d.pos);
    b.emit(Opcode::STORE_FAST, d.slot);
  }
  deferred_iterators.clear();
}

std::vector<int32_t> Residual::park_live_locals(const std::vector<VT>& live_locals) {
  std::vector<int32_t> temps;
  for (size_t i = 0; i < live_locals.size(); ++i) {
    reconstruct(live_locals[i]);
    temps.push_back(b.local("__live" + std::to_string(i)));
    b.emit(Opcode::STORE_FAST, temps.back());
  }
  return temps;
}

bool Residual::is_original_item(const VT& list, size_t i) {
  const VT& x = list->items[i];
  const output_graph::Source* s = x ? x->source.get() : nullptr;
  return s && s->kind == SourceKind::Item && s->base.get() == list->source.get() && s->key.is(Kind::Int) &&
         s->key.as_int() == int64_t(i);
}

void Residual::replay_side_effects() {
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
      emit_build(Opcode::BUILD_LIST, c->items.size() - w.keep, [&](size_t i) { reconstruct(c->items[w.keep + i]); });
    } else {  // dict: the new contents (reading the old), then clear, update
      emit_build(Opcode::BUILD_DICT, c->keys.size(), [&](size_t i) {
        emit_const(c->keys[i]);
        reconstruct(c->items[i]);
      });
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
    if (s.generic) {
      emit_const(runtime::object_setattr());
      b.emit(Opcode::LOAD_FAST, attr_parked[i].second);
      emit_const(runtime::intern_value(s.name));
      b.emit(Opcode::LOAD_FAST, attr_parked[i].first);
      b.emit(Opcode::CALL, 3);
      b.emit(Opcode::POP_TOP);
      continue;
    }
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
        t.value = *ctx.out.graph().attr_of(*v->node);
        return true;
      }
      t.kind = ResultTemplate::Kind::Output;
      t.index = size_t(r.output_index.at(v->node));
      return true;
    case VTKind::Constant:
      if (v->value.is(Kind::Set)) return false;  // a fresh set per call: the residual builds it
      if (v->fake_id_step >= 0) return false;    // the residual refuses it (reconstruct)
      if (ctx.python_frames && is_torch_spelling(v)) return false;  // the residual reads torch's object
      t.kind = ResultTemplate::Kind::Const;
      t.value = v->value;
      return true;
    case VTKind::Tuple:
    case VTKind::List:
      if (v->is(VTKind::List) && v->source) return false;  // the caller's own list: identity matters
      if (is_module_slice(v)) return false;                  // no tuple: a container CPython makes
      t.kind = v->is(VTKind::Tuple) ? ResultTemplate::Kind::Tuple : ResultTemplate::Kind::List;
      for (const VT& x : v->items) {
        t.items.emplace_back();
        if (!result_template(x, r, ctx, nparams, t.items.back())) return false;
      }
      return true;
    default: return false;
  }
}

}  // namespace kiln::interpreter

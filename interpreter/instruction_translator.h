// InstructionTranslator: symbolically executes one KBC frame over
// VariableTrackers. Python-level values fold to constants, tensor work
// becomes graph nodes, calls to KBC functions/methods/modules are inlined
// (a child translator over the same TraceContext). An instruction it
// cannot trace throws Unsupported; the root frame then restarts the trace
// and stops just before that instruction (see convert_frame.cpp).
#pragma once

#include <map>
#include <unordered_map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "interpreter/kiln_api.h"
#include "interpreter/stack_effects.h"
#include "output_graph/output_graph.h"
#include "output_graph/tracer_policy.h"
#include "runtime/value/code.h"
#include "variables/builder.h"
#include "variables/variable_tracker.h"

namespace kiln::interpreter {

using variables::VT;
using variables::VTKind;

// A Constant tracker with no Source, so no guard of its own: for a value
// the trace made (a folded result, a name, a count), or one read under a
// guard already taken (a specialized module's `training` under its version
// guard). A value read from the frame or a global needs its Source: it
// goes through the VariableBuilder.
inline VT const_vt(runtime::Value v) { return variables::make_constant(std::move(v)); }

enum class BreakReason : uint8_t {
#define KILN_BREAK(id, reason, hint) id,
#include "interpreter/graph_breaks.def"
#undef KILN_BREAK
};
const char* break_reason_id(BreakReason r);
std::string break_reason_text(BreakReason r, const std::string& detail);
const char* break_reason_hint(BreakReason r);

// Thrown by a handler: this instruction cannot be traced.
// The __exit__ a traced null-context `with` block calls (translator_constructs.cpp).
const runtime::Value& null_context_exit();

// A slice of a ModuleList / Sequential (InstructionTranslator::module_slice):
// a Tuple of its children's trackers that is not a tuple to Python.
bool is_module_slice(const VT& v);

struct Unsupported {
  BreakReason reason;
  std::string detail;
  // For a break inside an inlined callee: the innermost break, in words
  // ("branch on the value of a tensor in Gate.forward"), for errors that
  // cannot defer to the callee's own frame (fullgraph, symbolic_trace).
  std::string cause;
  // >= 0: the speculation restart stops before this step instead of the
  // breaking one (a break inside a traced null-context `with` block: the
  // block's BEFORE_WITH is where the VM takes over).
  int64_t restart_at = -1;
  // inlined_break: the innermost frame's reason (what `cause` says).
  std::optional<BreakReason> inner = std::nullopt;
  BreakReason innermost() const { return inner.value_or(reason); }
  // "file:line" of the innermost instruction that broke (set as it leaves
  // that frame's step): symbolic_trace's error names the user's line.
  std::string where = {};
  // attribute_error: Python's lookup found no such attribute (guarded as
  // absent), so getattr(obj, name, default) and hasattr answer without it.
  bool missing_attribute = false;
  // recursion: the code that recursed too deep. Its calls unwind with this
  // reason up to the frame that called it first, which breaks there.
  const void* recursive_code = nullptr;
};

[[noreturn]] inline void unsupported(BreakReason reason, std::string detail) {
  throw Unsupported{reason, std::move(detail), {}};
}

// One builtin call being traced (translator_builtins.cpp): the builtin,
// its realized arguments (positional, then keyword values) and keywords.
struct BuiltinCall {
  const runtime::Value& builtin;
  const runtime::BuiltinObj& b;
  std::vector<VT>& args;
  size_t nkw;
  const runtime::TupleObj* kwnames;
};

// State shared by the root translator and every inlined one.
// How many frames of one recursion (the same code on the same self) a
// trace holds at once, the traced frame's own included (translator_invoke.cpp).
// Small: each level is traced again for every entry of the root frame, and
// a recursion past it is left whole to the frame's runner.
inline constexpr size_t kMaxRecursiveInlines = 8;

struct TraceContext {
  explicit TraceContext(runtime::CallContext& vm) : vm(vm), builder(out) {}
  // First, so destroyed last: once everything below has let go of its
  // trackers, it frees the cycles among those left (variable_tracker.h).
  variables::TraceArena arena;
  runtime::CallContext& vm;  // for folding calls on real values
  output_graph::OutputGraph out;
  variables::VariableBuilder builder;
  variables::SideEffects side_effects;
  std::map<std::string, VT> globals;                         // loaded or stored during the trace
  // Globals read by inlined functions whose namespace is not the root's
  // (Python functions from another module), by (namespace, name).
  std::map<std::pair<const void*, std::string>, VT> foreign_globals;
  const runtime::GlobalsObj* root_globals = nullptr;  // the traced frame's namespace
  std::map<std::pair<const void*, std::string>, VT> attr_overlay;  // module attributes stored during the trace
  int64_t tensor_constants = 0;
  // The get_attr nodes of those constants, by node: their values are known
  // now (an index tensor's bounds are checked in the trace).
  std::unordered_map<const output_graph::Node*, runtime::Tensor> constant_tensors;
  // A tensor's sizes were read into Python values: dynamic dimensions
  // cannot stay dynamic (no symbolic sizes yet).
  bool shape_read = false;
  // The tracker of each real closure cell met (the root frame's, an inlined
  // function's): one per cell object, so a store through one name is read
  // through every other (a lambda made before a break reads the resumed
  // frame's nonlocal).
  std::unordered_map<const runtime::CellObj*, variables::VT> cell_trackers;
  // Options::python_frames: CPython runs what the trace leaves, on the
  // program's objects. A Python function's KBC form is only the tracer's
  // view of it, so what the view cannot know (the function object's own
  // attributes: __qualname__ set by functools.wraps, __wrapped__, __dict__)
  // is a break, read by CPython from the real function.
  bool python_frames = false;
  bool random_is_hosts = true;  // Options::random_is_hosts
  // Symbolic tracing: the leaf policy (null: every module is traced through).
  output_graph::Tracer* tracer = nullptr;
  // (code, self) of every frame being inlined: the recursion check is a
  // lookup, not a walk up the frames (a deep module chain inlines thousands).
  std::multiset<std::pair<const void*, const void*>> active_frames;
  // The deepest inlined frame of this trace (the root is 0): the frames
  // eager would have on its stack there, which the graph does not take
  // (CacheEntry::inline_depth).
  int max_inline_depth = 0;
  // symbolic_trace: "file:line" of the innermost instruction that raised a
  // kiln::Error (which propagates as it is, with no room for a location).
  std::string error_where;
  // Trackers of views (view ops, and contiguous/to, which may alias), by the
  // node owning the memory they alias: a write into that memory takes each
  // live one again from the new value, so none keeps denoting the old one
  // (translator_views.cpp: assign_tensor).
  std::unordered_map<const output_graph::Node*, std::vector<std::weak_ptr<variables::VariableTracker>>> views_of;
  // The tracker of each node views were taken of (one tracker per node a
  // tensor op made): what a write through a view updates besides the view.
  std::unordered_map<const output_graph::Node*, std::weak_ptr<variables::VariableTracker>> viewed_tracker;
  // The exception object a traced `raise` is raising, until a handler in
  // the trace takes it (translator_exceptions.cpp): the handler gets this
  // very tracker, so `except E as got: got is e` holds.
  VT raising;
  // Check each step's stack effect against runtime/value/opcodes.def
  // (interpreter/stack_effects.h), in every frame of this trace.
  bool check_stack_effects = stack_effects::enabled();
};

class InstructionTranslator {
 public:
  // `fn_vt` is the tracker the function was called through (for the
  // sources of its closure cells); null for the root frame.
  // `closure`: Cell trackers for the freevars of a function made during the
  // trace; otherwise the real closure's cells are read (and guarded).
  InstructionTranslator(TraceContext& ctx, runtime::Ref<runtime::FunctionObj> fn, std::vector<VT> locals,
                        const InstructionTranslator* parent, VT fn_vt = nullptr, std::vector<VT> closure = {});

  // Runs until RETURN_VALUE (then `result` is set) or until the step
  // `stop_at_step` (root frames: the break found by a previous attempt).
  void run(int64_t stop_at_step = -1);

  // The state at the stop (what compile_subgraph needs).
  const runtime::Code& code() const { return *code_; }
  const runtime::FunctionObj& function() const { return *fn_; }
  const runtime::Ref<runtime::FunctionObj>& function_ref() const { return fn_; }
  size_t pc() const { return pc_; }
  int64_t steps() const { return steps_; }
  bool returned() const { return returned_; }
  const VT& result() const { return result_; }
  const std::vector<VT>& stack() const { return stack_; }
  const std::vector<VT>& locals() const { return locals_; }
  const std::vector<VT>& cells() const { return cells_; }
  TraceContext& ctx() { return ctx_; }
  int depth() const { return depth_; }

 private:
  void step();
  std::string where(const runtime::Instr& ins) const;  // "file:line"
#define KILN_OPCODE(name, ...) void op_##name(const runtime::Instr& ins);
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE

  // stack helpers
  VT pop();
  void push(VT v) { stack_.push_back(std::move(v)); }
  std::vector<VT> pop_n(size_t n);

 public:
  // What the handlers call on trackers, by the file that defines it.

  // Every operand goes through here. A null tracker is LOAD_METHOD's NULL
  // marker; the verifier rejects code that hands it to another instruction
  // (issue 15), and this stays the translator's own guard: not traceable,
  // the VM runs it.
  // A dict view (a List over `iterated`) is read as its dict is now: views
  // are live in Python (d.keys() taken before d['z'] = 1 has 'z').
  // A SymInt (a size computed from symbols) reaches only the readers that
  // know it (realize_sym); every other reader gets its hint as a constant,
  // specialized under a guard `expr == hint` (symbolic_shapes.h), so no
  // code that predates symbolic sizes can take a hint for a number.
  VT realize(const VT& v) {
    VT r = realize_sym(v);
    if (r->is(VTKind::SymInt)) return specialize(r, "used as a Python number");
    if (r->is(VTKind::SliceOf)) return constant_slice(r);
    return r;
  }
  VT realize_sym(const VT& v) {
    if (!v) unsupported(BreakReason::untraced_object, "LOAD_METHOD's NULL used as a value");
    VT r = ctx_.builder.realize(v);
    if (r->is(VTKind::List) && r->iterated) r->items = variables::dict_view_items(*r->iterated, r->view);
    return r;
  }

  // Symbolic sizes (translator_symbolic.cpp).
  VT specialize(const VT& symint, const std::string& why);
  VT constant_slice(const VT& slice_of);  // its bounds specialized
  // x[key] where the key holds a slice with a symbolic bound: slice, select
  // and unsqueeze nodes taking the symbols; null for any other key.
  VT symbolic_tensor_index(VT x, const VT& key);
  VT size_of(const VT& tensor, size_t dim);  // a dim's size: a SymInt when symbolic
  // a OP b / a CMP b / OP a where an operand is a SymInt and the rest are
  // ints: a SymInt, or a constant bool under a guarded relation; null when
  // the operation has no symbolic form (the caller specializes).
  VT symbolic_binary(runtime::BinOp op, const VT& a, const VT& b);
  VT symbolic_compare(runtime::CmpOp op, const VT& a, const VT& b);
  VT symbolic_unary(runtime::UnOp op, const VT& a);
  // max(a, b, ...) / min(...) of ints, at least one a SymInt: a SymInt (null: not such a call).
  VT symbolic_min_max(bool is_max, const std::vector<VT>& args, const runtime::TupleObj* kwnames);

  // calls and attribute reads (translator_invoke.cpp)
  VT call_function(const VT& callee, std::vector<VT> args, const runtime::TupleObj* kwnames);
  VT inline_call(const runtime::Value& fn, std::vector<VT> args, const runtime::TupleObj* kwnames,
                 const VT& fn_vt = nullptr, std::vector<VT> closure = {});
  VT get_attr(const VT& obj, const std::string& name);
  VT fold_pure_foreign_call(const runtime::Value& fn, std::vector<VT>& args, const runtime::TupleObj* kwnames);
  VT call_weakref(const VT& callee, const std::vector<VT>& args, const runtime::TupleObj* kwnames);

  // builtins (translator_builtins.cpp)
  VT call_builtin(const runtime::Value& builtin, std::vector<VT> args, const runtime::TupleObj* kwnames);
  VT fold_builtin(BuiltinCall& call);
  // One handler per Trace row of runtime/semantics/builtins.def (null: fold instead).
#define KILN_DECLARE_Trace(name) VT trace_##name(BuiltinCall& call);
#define KILN_DECLARE_Fold(name)
#define KILN_DECLARE_Effect(name)
#define KILN_NATIVE(name, signature, type_of, how) KILN_DECLARE_##how(name)
#define KILN_OWN KILN_NATIVE
#define KILN_PYTHON(name, how)
#include "runtime/semantics/builtins.def"
#undef KILN_NATIVE
#undef KILN_OWN
#undef KILN_PYTHON
#undef KILN_DECLARE_Trace
#undef KILN_DECLARE_Fold
#undef KILN_DECLARE_Effect
  VT reads_tensor_value(BuiltinCall& call);
  // all() / any() (`stop_at`: the truth that ends the loop, False / True).
  VT short_circuit(BuiltinCall& call, bool stop_at);
  // iter() of each of [first, last), for a lazy iterator over them.
  std::vector<VT> iters_of(std::vector<VT>::const_iterator first, std::vector<VT>::const_iterator last);
  VT getattr_or_hasattr(BuiltinCall& call, bool has);
  runtime::Value type_sample(const VT& v);

  // iteration and truth (instruction_translator.cpp)
  // iter(v) as GET_ITER makes it (an iterator is itself).
  VT iter_of(const VT& v);
  // len(obj) through a Python class's own __len__ (null: it has none).
  VT python_len(const VT& obj);
  // iter(obj) through a Python class's own __iter__ (null: it has none).
  VT python_iterator(const VT& obj);
  // The next item of an Iterator tracker (a map()/filter() one calls its
  // function now); false when exhausted.
  bool next_item(const VT& iterator, VT& out);
  // The truth of a tracker known at trace time; a tensor's is data (a break).
  bool truth_of(const VT& v);

  // Methods of built-in types (translator_methods.cpp): answer or break.
  VT trace_method(BuiltinCall& call);
  VT trace_list_method(BuiltinCall& call, std::string_view method);
  VT trace_dict_method(BuiltinCall& call, std::string_view method);
  VT trace_set_method(BuiltinCall& call, std::string_view method);
  VT trace_tensor_method(BuiltinCall& call, std::string_view method);

  // operators, compares, items, unpacking, the constants they fold to and
  // the tensor ops they record (translator_operators.cpp)
  VT tensor_op(runtime::OpId op, const std::vector<VT>& args, const runtime::TupleObj* kwnames = nullptr);
  VT from_value(const runtime::Value& v);  // a folded Python result as a tracker
  VT get_item(const VT& obj, const VT& key);
  VT module_slice(const VT& container, const runtime::Value& key);
  VT environ_item(const VT& obj, const runtime::Value& key);  // os.environ[key]; null: not it
  // obj[key] = value on a tensor tracker: a functional `setitem` node, or a
  // break when the write could be observed elsewhere.
  void tensor_setitem_traced(const VT& obj, const VT& key, const VT& value);
  VT binary(runtime::BinOp op, const VT& a, const VT& b, bool inplace);
  // x op= y on a tensor (in place, as torch's), or a break.
  VT tensor_inplace(runtime::OpId op, const VT& x, const VT& y);
  VT compare(runtime::CmpOp op, const VT& a, const VT& b);
  std::vector<VT> unpack(const VT& seq);  // items of a list/tuple/iterator/tensor/constant sequence
  bool is_constant(const VT& v);          // a Python value known now (constants, containers of them)
  // Breaks (untraced_object) when storing `value` into `container` would
  // make a container that holds itself (l.append(l)): the trackers' walks
  // (constants, guards, residual code) assume a tree; the VM has the cycle.
  void refuse_cycle(const VT& container, const VT& value);
  runtime::Value constant_value(const VT& v);
  // A global of this frame's function, wrapped lazily once per trace.
  VT make_lazy_global(const std::string& name, const runtime::Value& v);
  // A dict key must hash before a dict tracker is searched for it: an
  // unhashable one (a list) raises TypeError in the VM, so it breaks the
  // graph here rather than answer "absent" (a fuzz finding, defect 28).
  void require_hashable(const runtime::Value& key, const char* where);

  // A composite op (ops.def's KILN_DECOMPOSE) traced as the parts its
  // decomposition emits; null when this call is the op itself
  // (translator_decompose.cpp).
  VT decomposed_op(runtime::OpId op, const std::vector<VT>& args, const runtime::TupleObj* kwnames);
  // translator_views.cpp: `r`, a view op's result over `input`, recorded;
  // x (a tensor this graph made, or a view of one) now holds `value`:
  // false, with the reason in view_refusal_, when that cannot be written
  // back soundly (nothing has changed then).
  void note_view(const VT& r, const VT& input);
  bool assign_tensor(const VT& x, const VT& value);

  // The tracker of the function being run (its source, when it has one).
  const VT& function_tracker() const { return fn_vt_; }

  // nn.Module attributes, calls and methods: interpreter/nn_module.h.

  // classes (translator_classes.cpp)
  // super, delattr, and setattr through a property; null: not handled here.
  VT trace_class_builtin(const runtime::Value& builtin, std::vector<VT>& args, const runtime::TupleObj* kwnames);
  VT super_of(std::vector<VT> args);
  VT super_getattr(const VT& sup, const std::string& name);
  VT class_getattr(const VT& cls, const std::string& name);
  // A class attribute read through `instance` (null: through the class),
  // bound as runtime/semantics/descriptors.h says; a property's getter is inlined.
  VT bind_class_attr_traced(const runtime::Value& attr, const VT& instance, runtime::ClassObj* cls,
                            const std::string& name);

  // plain Python objects (translator_user_defined.cpp)
  // obj.name for a Python object with a source, as type(obj).__getattribute__
  // reads it (its own inlined, or Python's generic lookup, then __getattr__);
  // null: kiln cannot tell without running user code.
  VT user_object_getattr(const VT& obj, const std::string& name);
  // object.__getattribute__(obj, name); or_missing: null on a miss (guarded
  // absent) instead of the AttributeError.
  VT generic_getattr(const VT& obj, const std::string& name, bool or_missing);
  // obj.name = value as type(obj).__setattr__ makes it (its own inlined, or
  // Python's generic store, recorded and replayed after the graph); false:
  // not a Python object kiln traces stores into.
  bool user_object_setattr(const VT& obj, const std::string& name, const VT& value);
  // object.__setattr__(obj, name, value); `generic`: replayed as that call.
  void generic_setattr(const VT& obj, const std::string& name, const VT& value, bool generic);
  // type(obj).name(obj, *args) for a Python object whose class defines
  // that special method as a Python function, inlined (guarded by the
  // class lookup); null otherwise.
  VT call_special_method(const VT& obj, const std::string& name, std::vector<VT> args);
  // A call of a Python bound method the trace holds at a source (a resume
  // function's argument, a method stored on an object): its __func__
  // inlined on its __self__, both read through the method object and
  // guarded there; null when it is no such method.
  VT call_python_method(const VT& callee, std::vector<VT>& args, const runtime::TupleObj* kwnames);
  // dict.get / __getitem__ / __contains__ on a Python dict subclass (what
  // super().get(key) calls): its own storage read at a literal key under
  // guards; null when kiln cannot read it so.
  VT user_dict_method(BuiltinCall& call, std::string_view method);
  // object.__getattribute__(obj, name) on an object made in this trace.
  VT made_getattr(const VT& obj, const std::string& name, bool or_missing);
  // cls(*args) made in the trace, its __init__ inlined; null: not a class
  // kiln makes so (translator_user_defined.cpp).
  VT construct_object(const VT& cls, std::vector<VT>& args, const runtime::TupleObj* kwnames);
  VT new_made_object(const VT& cls);
  void made_delattr(const VT& obj, const std::string& name);
  void store_attr(const VT& obj, const std::string& name, const VT& value);
  runtime::Value classinfo_value(const VT& t);
  VT call_host_new(const VT& callee, std::vector<VT>& args, const runtime::TupleObj* kwnames);
  VT reduce_ex(std::vector<VT>& args, const runtime::TupleObj* kwnames);
  VT copyreg_newobj_call(std::vector<VT>& args, const runtime::TupleObj* kwnames);
  // functools.partial(...)(*args) through its func; null: no such partial.
  VT call_partial(const VT& callee, std::vector<VT>& args, const runtime::TupleObj* kwnames);
  VT host_super_of(const VT& type, const VT& obj);
  VT host_super_getattr(const VT& sup, const std::string& name);
  runtime::ForeignAttr class_lookup(const VT& obj, const std::string& name, const runtime::Value& after,
                                    runtime::Value& out, VT* wrapped = nullptr);
  VT bind_found(runtime::ForeignAttr found, const runtime::Value& attr, const VT& wrapped, const VT& obj);
  // `method` (a bound method read off obj) with obj's own tracker as self.
  VT bound_to_tracker(VT method, const VT& obj);

  // Generators (translator_generators.cpp, Dynamo's LocalGeneratorObject
  // Variable): calling a `.generator` function makes an Iterator whose body
  // is a suspended translator, advanced one yield at a time by whoever
  // iterates it, so the body's effects interleave with its consumer's as
  // in CPython.
  VT make_generator(runtime::FunctionObj* fn, std::vector<VT> locals, const VT& fn_vt, std::vector<VT> closure,
                    const void* self_id);
  bool resume_generator(const VT& generator, VT& out);
  // This frame as a generator's body: runs to its next yield (true, the
  // item in `out`) or to its end (false); `by` is the frame advancing it.
  bool resume(const InstructionTranslator* by, VT& out);
  // The step the root frame is at: where a restart stops to keep a
  // generator out of the residual (a generator cannot be rebuilt).
  int64_t root_step() const;

  // Exceptions raised and caught inside inlined frames
  // (translator_exceptions.cpp): true when this frame's handler took `e`
  // (the trace goes on there); caught_further_out: an inlined caller's
  // handler will (the error passes up as it is).
  bool catch_in_trace(const kiln::Error& e);
  bool caught_further_out(const kiln::Error& e) const;
  // This frame or an inlined caller is in a protected range (root excluded).
  bool in_traced_try() const;
  [[noreturn]] void raise_traced(const VT& exc_vt, const runtime::Value& exc, const runtime::Value& cause,
                                 bool reraise);

 private:
  std::string view_refusal_;  // why the last assign_tensor refused
  TraceContext& ctx_;
  runtime::Ref<runtime::FunctionObj> fn_;
  const runtime::Code* code_;
  const InstructionTranslator* parent_;
  const void* self_id_ = nullptr;  // the module this frame runs a method of (recursion check)
  VT fn_vt_;
  int depth_;
  std::vector<VT> stack_;
  std::vector<VT> locals_;
  std::vector<VT> cells_;  // Cell trackers: cellvars, then freevars
  size_t pc_ = 0;
  bool jumped_ = false;
  int64_t steps_ = 0;
  // The steps of the BEFORE_WITHs of the null-context `with` blocks open
  // now (ForeignVTable::null_context), outermost first.
  std::vector<int64_t> null_withs_;
  // An op on a tensor that records gradients: a break unless the embedder's
  // autograd lowers it outside grad-mode blocks (translator_operators.cpp).
  void check_autograd(runtime::OpId op, const std::vector<output_graph::Arg>& pos,
                      const std::vector<std::pair<std::string, output_graph::Arg>>& kw);
 public:
  // Runs `raise_break` (which throws Unsupported); inside a null-context
  // `with` block of this root frame, the break moves to the block's
  // BEFORE_WITH (the VM then runs the block with the real __enter__ and
  // __exit__).
  template <class F>
  [[noreturn]] void restart_before_null_with(F&& raise_break) {
    try {
      raise_break();
    } catch (Unsupported& u) {
      if (!null_withs_.empty() && !parent_ && u.restart_at < 0) {
        u.restart_at = null_withs_.front();
        u.detail += " (inside a `with` block kiln traces as a null context: the block runs on the VM)";
      }
      throw;
    }
    throw_error(ErrorKind::RuntimeError, "restart_before_null_with: no break was raised");
  }
  // Called by the tracer when a null-context block's __exit__ runs.
  void close_null_with() {
    if (!null_withs_.empty()) null_withs_.pop_back();
  }

 private:
  bool returned_ = false;
  VT result_;
  VT yielded_;  // a generator's body: what its last YIELD_VALUE handed out
  // The exception this inlined frame's handler is handling (PUSH_EXC_INFO
  // to POP_EXCEPT); null: none of this frame's.
  VT handled_;
};

}  // namespace kiln::interpreter

// VariableTrackers: what the translator's stack and locals hold while it
// symbolically executes KBC. Each is a small struct with a kind tag and a
// factory; `source` says where the value came from (null: made during the
// trace), which is what guards check and residual code reloads.
//
// Identity matters: a list bound to two locals is one ListVariable, so a
// mutation through one is seen through the other, as in Python.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "output_graph/graph.h"
#include "output_graph/source.h"
#include "runtime/value/value.h"

namespace kiln::output_graph {
class OutputGraph;
}

namespace kiln::variables {

using output_graph::Node;
using output_graph::SourceRef;
using output_graph::TensorMeta;
using runtime::Value;

#define KILN_VT_KINDS(X)                                                                 \
  X(Constant)      /* None, bool, int, float, str, range, slice: folded at trace time */ \
  X(Tensor)        /* a graph node                                                   */ \
  X(SymInt)        /* an int computed from symbolic sizes: `sym`, `value` its hint   */ \
  X(SliceOf)       /* a slice with a symbolic bound: items = start, stop, step       */ \
  X(List)          /* a list of trackers (mutable)                                   */ \
  X(Tuple)         /* a tuple of trackers                                            */ \
  X(ConstDict)     /* a dict with constant keys                                      */ \
  X(UserFunction)  /* a KBC function, inlined when called                            */ \
  X(UserMethod)    /* a KBC function bound to a tracker (self)                       */ \
  X(Builtin)       /* a builtin: a registry op or a Python builtin                   */ \
  X(NNModule)      /* a module: attribute reads go straight to its dicts             */ \
  X(UnspecializedNNModule) /* a module traced as a plain object (see below)          */ \
  X(Iterator)      /* iteration over known items, unrolled                           */ \
  X(GetAttr)       /* self.<attr>, not resolvable at trace time: read when it runs   */ \
  X(Cell)          /* a closure cell; its content is items[0] (empty: unbound)       */ \
  X(NestedFunction) /* a function made by MAKE_FUNCTION during the trace             */ \
  X(Opaque)        /* any other value, passed through untouched (classes, foreign)   */ \
  X(Lazy)          /* an input not yet looked at: realized (and guarded) on first use*/

enum class VTKind : uint8_t {
#define KILN_VT_ENUM(k) k,
  KILN_VT_KINDS(KILN_VT_ENUM)
#undef KILN_VT_ENUM
};
const char* vt_kind_name(VTKind k);

struct VariableTracker;
using VT = std::shared_ptr<VariableTracker>;

// An instance of a Python class made in this trace (Dynamo's
// UserDefinedObjectVariable under AttributeMutationNew): an Opaque tracker
// whose `value` is an empty instance of the class (ForeignVTable::
// new_instance), which class lookups read through and guard at `pin`; the
// program never sees it. What the object holds lives in trackers, `items`:
// [0] the class, [1] its instance __dict__ (a ConstDict: what
// `obj.__dict__` reads, in store order), [2] its dict storage (a ConstDict)
// for a dict subclass, else None. The residual makes the object once, when
// it is first needed, as new_fn(cls), then fills the storage through
// `setitem` and the __dict__ through object.__setattr__, in their orders.
struct MadeHere {
  SourceRef pin;  // the empty instance, as a Const source
  Value new_fn;
  Value setitem;  // Null: no dict storage
};

// What an Iterator tracker yields: its items, or, lazily as Python's
// zip/enumerate/map/filter objects do, what it makes from the iterators in
// `items` (each advanced only when the loop gets there, so a loop body that
// changes a list being zipped is seen, as in Python).
enum class LazyIteration : uint8_t {
  None,       // the items themselves
  Map,        // self(next of each of items)
  Filter,     // the next items[0] for which self(item) is true (self None: the item's own truth)
  Zip,        // (next of each of items): stops at the first exhausted
  ZipStrict,  // zip(..., strict=True): the same, and ValueError unless all are exhausted together
  Enumerate,  // (value, next of items[0]); value: the next count (an Int)
  Generator,  // what the generator's body yields, resumed one item at a time (`frame`)
};

// The body of a generator the trace made (an Iterator, LazyIteration::
// Generator): its translator, suspended after a YIELD_VALUE
// (interpreter/translator_generators.cpp). Opaque here: trackers do not
// know translators.
struct SuspendedFrame {
  virtual ~SuspendedFrame() = default;
};

// Which of a dict's views a List tracker stands for, or an Iterator walks.
enum class DictView : uint8_t { Keys, Values, Items };

struct VariableTracker {
  VTKind kind;
  SourceRef source;

  // Constant / Opaque / UserFunction / Builtin / NNModule / Lazy: the value
  Value value;
  // Tensor
  Node* node = nullptr;
  // SymInt: what it stands for, in the symbols of the trace's ShapeEnv
  // (output_graph/symbolic_shapes.h); `value` is its hint. Only code that
  // knows SymInts sees one: InstructionTranslator::realize hands every
  // other reader the hint, specialized under a guard.
  output_graph::SymExpr sym;
  // List / Tuple / Iterator: items; ConstDict: values (keys in `keys`)
  std::vector<VT> items;
  std::vector<Value> keys;
  size_t pos = 0;     // Iterator: next item
  LazyIteration iteration = LazyIteration::None;  // Iterator: what it yields (self: the function)
  bool mutated = false;  // List / ConstDict with a source: changed during the trace
  // Iterator made by iter() of a list, dict or set tracker: that container
  // and its size then (a List standing for a dict view: its dict). A list is read live (Python's list iterator sees
  // appends and removals), so is a set (iterates_set); a dict or set whose size changed raises, as
  // Python's iterators do (iteration_error).
  VT iterated;
  size_t iterated_size = 0;
  DictView view = DictView::Keys;  // iterated a dict: which of its views (keys also for the dict itself)
  // UserMethod: the bound self. Constant: the tensor it was read off
  // (`t.dtype`, `t.device`; its name in module_path), so code CPython runs
  // rebuilds it as that attribute of the real tensor (torch's dtype object,
  // not kiln's name for it).
  VT self;
  // NNModule: the qualified path from the traced root is `path_parent`'s
  // path + "." + `module_path` (a link, not a string: building every path
  // of a deep chain would be quadratic; module_qualname builds one on
  // demand). A root has no parent and its own name (maybe ""), in
  // module_path. GetAttr: the attribute name. Cell: the variable's name
  // where the trace made it (the residual names its cell alike, so an
  // unbound read there raises the VM's words).
  std::string module_path;
  VT path_parent;
  // The same path as an OutputGraph link (module_path_link), made once per
  // tracker and graph: what a parameter's get_attr path hangs from. (The
  // graph pointer only tells whose link it is; the link keeps its own
  // storage alive.)
  mutable output_graph::PathRef path_link;
  mutable const void* path_link_graph = nullptr;
  // Lazy: the realized tracker once looked at. UnspecializedNNModule: its
  // specialized twin (an NNModule under a version guard), once a read
  // needed the whole structure.
  VT realized;
  // Opaque: super(items[0], self) over a Python class, made in the trace
  // (interpreter/translator_user_defined.cpp); `value` is Python's own.
  bool host_super = false;
  // Opaque: an instance of a Python class made in this trace (MadeHere).
  std::shared_ptr<const MadeHere> made;
  // Iterator (LazyIteration::Generator): the generator's suspended body.
  std::shared_ptr<SuspendedFrame> frame;
  // Constant: an id() the trace made up for an object that has no Python
  // counterpart yet (one it made; interpreter/translator_builtins.cpp
  // trace_id), made at this step of the root frame; -1 for any other
  // value. It means something only inside the trace: code that would hand
  // it to the program (residual.cpp) restarts the trace before that step.
  int64_t fake_id_step = -1;

  bool is(VTKind k) const { return kind == k; }
  // NNModule or UnspecializedNNModule: a module, whichever way it is traced.
  bool is_module() const { return kind == VTKind::NNModule || kind == VTKind::UnspecializedNNModule; }
  const TensorMeta& meta() const { return *node->meta; }
  std::string str() const;  // for messages: "TensorVariable(f32[2, 3])", "ConstantVariable(3)"
};

// Breaks the reference cycles one trace's trackers can form: a closure
// whose cell holds the closure, a list appended to itself. shared_ptr never
// frees a cycle, and one that holds a Value (a function's Code) keeps that
// object alive for good (a fuzz finding, tests/fuzz/README.md defect 27).
// While a TraceArena lives, every tracker made on its thread registers with
// it; when it ends the trace is over (nothing reads its trackers again), so
// it clears the links of those still alive, which frees the cycles. Arenas
// nest (a trace that calls code that compiles another function).
class TraceArena {
 public:
  TraceArena();
  ~TraceArena();
  TraceArena(const TraceArena&) = delete;
  TraceArena& operator=(const TraceArena&) = delete;
  void add(const VT& v) { made_.push_back(v); }
  static TraceArena* current();

 private:
  std::vector<std::weak_ptr<VariableTracker>> made_;
  TraceArena* outer_;
};

VT make_constant(Value v, SourceRef source = nullptr);
// An int standing for `e` (hint: its value for the traced example); a
// constant when `e` has no symbols.
VT make_symint(output_graph::SymExpr e, int64_t hint);
// slice(start, stop, step) where a bound is a SymInt (x[:, :T]).
VT make_slice_of(VT start, VT stop, VT step);
// The size of a list, dict or set tracker (SIZE_MAX for anything else).
size_t container_size(const VariableTracker& c);
// Python's RuntimeError message for the next step of an Iterator whose
// dict or set changed size since iter(), or nullptr.
const char* iteration_error(const VariableTracker& it);
// The items of dict tracker `d`'s view, as they are now.
std::vector<VT> dict_view_items(const VariableTracker& d, DictView view);
VT dict_view_item(const VariableTracker& d, DictView view, size_t i);
// What an Iterator has left to yield (a list's current tail, read live).
std::vector<VT> remaining_items(const VariableTracker& it);
// An Iterator over a set tracker: read live, as Python's set iterator
// (`pos` is the next table entry; the tracker's value is the set as it is
// now, with the VM's table: runtime/value/value.h SetObj).
bool iterates_set(const VariableTracker& it);
// How many items an Iterator has yielded (`pos`, except for a set, whose
// `pos` is a table slot).
size_t items_yielded(const VariableTracker& it);
VT make_tensor(Node* node, SourceRef source = nullptr);  // wrap_fx_proxy's core
VT make_list(std::vector<VT> items, SourceRef source = nullptr);
VT make_tuple(std::vector<VT> items, SourceRef source = nullptr);
VT make_const_dict(std::vector<Value> keys, std::vector<VT> values, SourceRef source = nullptr);
VT make_user_function(Value fn, SourceRef source = nullptr);
VT make_user_method(Value fn, VT self);
VT make_builtin(Value builtin, SourceRef source = nullptr);
VT make_nn_module(Value module, std::string path, SourceRef source);
// UnspecializedNNModuleVariable: a module whose structure is not guarded
// by its version, because specializing on it is unsafe or unstable (a
// Sequential with hooks: see traced_unspecialized in builder.h). Guarded
// by identity when wrapped; each read then guards what it read: an
// instance attribute is wrapped at its own source, a call guards the hooks
// and the children it ran. A read that depends on the whole structure (a
// class attribute, len, iteration, parameters()) specializes it then.
// Same fields as NNModule (value, source, path links).
VT make_unspecialized_nn_module(Value module, std::string path, SourceRef source);
VT make_iterator(std::vector<VT> items);
VT make_lazy_iterator(std::vector<VT> items, VT fn, LazyIteration how);
inline LazyIteration lazy_iteration(const VariableTracker& it) { return it.iteration; }
VT make_opaque(Value v, SourceRef source);
// An instance of class `cls` made in this trace over `empty`, an empty
// instance of it (MadeHere); no attributes, no storage items yet.
VT make_made_object(Value empty, VT cls, std::shared_ptr<const MadeHere> made);
// The instance __dict__ / dict storage (None for a plain class) trackers
// of a made object.
inline const VT& made_dict(const VariableTracker& v) { return v.items[1]; }
inline const VT& made_storage(const VariableTracker& v) { return v.items[2]; }

// keys[key] = value over a dict's parallel keys and values, as a dict
// stores: in place where an equal key is, else appended.
void dict_set(std::vector<Value>& keys, std::vector<VT>& values, const Value& key, VT value);
VT make_getattr(VT object, std::string name);
VT make_cell(VT content, SourceRef source = nullptr, std::string name = {});
// value: the Code; items: the closure's Cell trackers; self: the defaults (a Tuple tracker or null)
VT make_nested_function(Value code, std::vector<VT> cells, VT defaults);
VT make_lazy(Value v, SourceRef source);

// A Python value that can be a KBC constant (None, bool, int, float, str and
// tuples of those): what residual code can LOAD_CONST.
bool is_literal(const Value& v);

// The qualified path of a module tracker ("layers.3.fc"; "" for the root).
std::string module_qualname(const VariableTracker& module);
// module's qualified path as a link of out's (O(1) once its parent's is
// made; each is made once per tracker and graph).
output_graph::PathRef module_path_link(output_graph::OutputGraph& out, const VariableTracker& module);
// A submodule reached as parent.name.
VT make_child_module(Value module, const VT& parent, std::string name, SourceRef source);

}  // namespace kiln::variables

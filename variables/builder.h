// VariableBuilder: wraps a real value entering the trace (an argument, a
// global, a module attribute) in a tracker with its source, and records the
// guards under which the trace stays valid for that value. Inputs start as
// Lazy trackers and are realized on first use, so values a function never
// looks at cost no guard.
//
// SideEffects: mutations of pre-existing objects seen during the trace
// (attribute stores, global stores, list contents), replayed by the
// residual code after the graph runs. It lives here rather than in
// output_graph/ because its entries hold trackers, which output_graph/ may
// not know (DESIGN.md's one-way rule).
#pragma once

#include <map>
#include <unordered_map>
#include <string>
#include <vector>

#include "output_graph/output_graph.h"
#include "runtime/nn/module.h"
#include "variables/variable_tracker.h"

namespace kiln::variables {

struct SideEffects {
  struct AttrStore {
    VT object;  // has a source
    std::string name;
    VT value;
    // Replayed as object.__setattr__(object, name, value): a store a
    // Python class's own __setattr__ made through super() (a STORE_ATTR
    // would run that __setattr__ again).
    bool generic = false;
  };
  struct GlobalStore {
    std::string name;
    VT value;
  };
  struct CellStore {  // the root frame's own closure cell `index`
    VT cell;
    size_t index;
  };
  std::vector<AttrStore> attr_stores;
  std::vector<GlobalStore> global_stores;
  std::vector<CellStore> cell_stores;
  std::vector<VT> mutated;  // Lists / ConstDicts with a source whose contents changed
  // Every container mutation the trace made, sourced or not: a generator
  // expression's body is inlined eagerly only when it made none but its
  // own list's appends (InstructionTranslator::inline_call).
  size_t container_writes = 0;

  bool empty() const {
    return attr_stores.empty() && global_stores.empty() && cell_stores.empty() && mutated.empty();
  }
  // Every effect so far: stores and container writes.
  size_t effect_count() const {
    return attr_stores.size() + global_stores.size() + cell_stores.size() + container_writes;
  }
  void mark_mutated(const VT& container);
};

// Whether a module is traced as an UnspecializedNNModuleVariable: a
// Sequential running the built-in forward with forward (pre-)hooks. Its
// hooks are user code run around the unrolled children, and a hook that
// records something on its module (a call count, the last output) changes
// the module's version on every call, so a version-guarded entry would
// never be hit again. Unspecialized, the entry guards only what the trace
// read: the hooks, the children and the attributes it looked at.
bool traced_unspecialized(const runtime::ModuleObj* m);

class VariableBuilder {
 public:
  explicit VariableBuilder(output_graph::OutputGraph& out) : out_(out) {}

  // Wraps `v` from `source` now, installing its guards.
  VT wrap(const Value& v, const SourceRef& source);
  // A Lazy tracker realized (memoized); other trackers unchanged.
  VT realize(const VT& vt);
  // A global name read as a builtin: the entry holds while `source` stays
  // undefined (a global of that name stored later shadows the builtin).
  void absent_guard(const SourceRef& source) { add_guard(source, output_graph::GuardKind::Absent, Value()); }
  // Something is at `source` (`sample`'s kind of thing), whatever it is:
  // `key in d` answered True without reading d[key] into the trace.
  void present_guard(const SourceRef& source, const Value& sample) {
    add_guard(source, output_graph::GuardKind::TypeMatch, sample);
  }
  // The very object `v` is at `source`: id() of it was read into the trace.
  void identity_guard(const SourceRef& source, const Value& v) { add_guard(source, output_graph::GuardKind::IdMatch, v); }

  // Which tensor dimensions enter the trace dynamic: every one, those the
  // cache marked for a source path (a size change forced a recompile), and
  // those marked with mark_dynamic on the tensor itself.
  bool all_dynamic = false;
  bool never_dynamic = false;
  std::map<std::string, std::vector<bool>> dynamic_dims;

 private:
  VT wrap_sequence(const Value& v, const std::vector<Value>& items, runtime::Kind kind, const SourceRef& source);
  VT wrap_dict(const Value& v, const std::vector<std::pair<Value, Value>>& entries, const SourceRef& source);
  VT wrap_set(const Value& snapshot, const SourceRef& source);  // snapshot: a native copy of the caller's set
  // The embedder's tensor that requires grad (ForeignVTable::grad_tensor)
  // under grad mode, as a placeholder that records gradients; else null.
  VT wrap_grad_tensor(const Value& v, const SourceRef& source);
  // One tracker per mutable container object however many sources reach
  // it (two arguments that are one list, an attribute read twice), each
  // source guarded by its alias class (GuardKind::Aliasing).
  VT remember_container(const Value& v, VT vt, const SourceRef& source);
  void aliasing_guard(const SourceRef& source, int64_t alias_class);
  // expected: IdMatch/ConstantMatch's value, TypeMatch's sample; length:
  // Length's length, Aliasing's class.
  void add_guard(const SourceRef& source, output_graph::GuardKind kind, Value expected, int64_t length = 0);
  struct Container {
    VT vt;
    int64_t alias_class;
  };
  std::unordered_map<const void*, Container> containers_;

  output_graph::OutputGraph& out_;
};

}  // namespace kiln::variables

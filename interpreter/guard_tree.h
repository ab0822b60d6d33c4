// The guard checker of one cache entry, compiled from a GuardSet: every
// distinct source gets one accessor, resolved once per check, parents
// before children; each accessor's guards run right after it resolves.
// Module-version guards (and the hook and children guards of unspecialized
// modules, which only a version change can break) are skipped in bulk when
// no module anywhere has changed since the entry was made (one comparison
// with the global epoch).
#pragma once

#include <string>
#include <vector>

#include "output_graph/guards.h"
#include "runtime/value/code.h"

namespace kiln::interpreter {

class GuardTree {
 public:
  explicit GuardTree(const output_graph::GuardSet& guards);

  struct Failure {
    const output_graph::Guard* guard = nullptr;
    const runtime::Value* value = nullptr;  // what the guard saw (valid until the frame's arguments go)
  };
  // `locals`: the frame's bound parameters. On failure, `why` (if given)
  // gets the failing guard's description and `failure` the guard itself.
  bool check(const runtime::Value* locals, const runtime::FunctionObj& fn, std::string* why = nullptr,
             Failure* failure = nullptr);
  size_t size() const { return nguards_; }
  // The tensors the guards reach (the plain parameters, and those below
  // them: a KV cache's) whose sizes differ from the traced ones at the
  // same dtype and rank: what automatic dynamic marks, all at once (q, k
  // and v of a new length fail one guard, but all three changed). Each
  // with the value it saw, valid until the next check.
  std::vector<Failure> size_changes(const runtime::Value* locals, const runtime::FunctionObj& fn);

 private:
  struct Accessor {
    output_graph::SourceRef source;
    int parent = -1;  // index of the base's accessor
    std::vector<output_graph::Guard> guards;
    // While no module changed (the version epoch): this accessor and every
    // one below it hold without being read (see implied_by_module below).
    bool implied_when_unchanged = false;
  };
  // TensorMatch guards on parameters, checked first as plain field
  // comparisons (the common case: every tensor argument of the frame).
  // A dynamic dim (bit d of `dynamic`) takes any size; then the strides
  // keep their layout class (contiguous, or exactly the traced ones).
  struct ParamTensorCheck {
    size_t local;
    runtime::DType dtype;
    runtime::Shape sizes, strides;
    const output_graph::Guard* guard;
    uint64_t dynamic = 0;
    bool contiguous = false;
  };
  std::vector<ParamTensorCheck> param_tensors_;
  std::vector<output_graph::Guard> kept_guards_;  // for messages; reserved before use
  std::vector<Accessor> accessors_;
  // Resolved values, as pointers into the frame's locals, dicts and lists:
  // no reference counting on the hot path. Valid only during check().
  std::vector<const runtime::Value*> resolved_;
  std::vector<runtime::Value> computed_;  // values with no home to point at (items of a caller's Python list)
  struct AliasSeen {
    int64_t alias_class;
    const void* identity;
    const output_graph::Guard* guard;
  };
  std::vector<AliasSeen> aliases_;  // during check(): the Aliasing guards' objects
  // Symbolic sizes: symbol i is dim symbol_dims_[i] of the tensor its
  // accessor symbol_accessors_[i] resolves to (or, >= 0 in symbol_locals_,
  // the parameter at that local); the relations the trace relied on are
  // checked on those values after every accessor held.
  std::vector<int> symbol_accessors_;
  std::vector<int> symbol_locals_;
  std::vector<int> symbol_dims_;
  std::vector<output_graph::ShapeGuard> shape_guards_;
  std::vector<int64_t> symbol_values_;  // reused by check()
  void mark_implied_subtrees();
  size_t nguards_ = 0;
  int grad_mode_ = -1;  // GuardSet::grad_mode(): -1 any, else the grad mode the entry needs
  uint64_t epoch_ = 0;  // module_version_epoch() when every version guard last held
};

}  // namespace kiln::interpreter

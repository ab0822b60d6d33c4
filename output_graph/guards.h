// Guards: the conditions under which a compiled entry is valid, each on a
// Source. OutputGraph collects them while tracing; interpreter/guard_tree
// compiles a set into the checker that runs before every cached call.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "output_graph/graph.h"
#include "output_graph/source.h"
#include "output_graph/symbolic_shapes.h"

namespace kiln::output_graph {

#define KILN_GUARD_KINDS(X)                                                    \
  X(TypeMatch)      /* same value kind (and, for modules, the same class)  */  \
  X(IdMatch)        /* the very same object                                */  \
  X(ConstantMatch)  /* an equal Python value of the same kind              */  \
  X(TensorMatch)    /* dtype, rank, static sizes, strides (or contiguity)  */  \
  X(Length)         /* a list/tuple/dict of this length                    */  \
  X(ModuleVersion)  /* this module, structurally unchanged (its version)   */  \
  X(ModuleHooks)    /* this module's pre-hooks and hooks: the same functions, in order */ \
  X(ModuleChildren) /* the names in this module's _modules, in order       */  \
  X(DictKeys)       /* a dict with these keys (same kinds), in this order  */  \
  X(Aliasing)       /* mutable containers: the same object iff same class  */  \
  X(Absent)         /* no such name: a builtin read through the globals    */ \
  X(GradTensorMatch) /* a tensor of the embedder's that requires grad (ForeignVTable::grad_tensor): dtype, sizes, strides */

enum class GuardKind : uint8_t {
#define KILN_GUARD_ENUM(k) k,
  KILN_GUARD_KINDS(KILN_GUARD_ENUM)
#undef KILN_GUARD_ENUM
};
constexpr int kNumGuardKinds = 0
#define KILN_GUARD_COUNT(k) +1
    KILN_GUARD_KINDS(KILN_GUARD_COUNT)
#undef KILN_GUARD_COUNT
    ;
const char* guard_kind_name(GuardKind k);

struct Guard {
  SourceRef source;
  GuardKind kind;
  // IdMatch / ConstantMatch / TypeMatch (a sample value) / ModuleVersion (the
  // module) / ModuleHooks (a tuple: the pre-hook functions, the hook
  // functions) / ModuleChildren (a tuple of the interned child names)
  Value expected;
  TensorMeta tensor;     // TensorMatch; tensor.dynamic marks dims any size may take
  int64_t length = 0;    // Length; Aliasing: the source's alias class
  // Aliasing: every mutable container the trace wrapped (a list or dict
  // argument, global, attribute, item) gets one, numbered by object: two
  // sources with the same class were one object when traced and must be
  // one object now, two with different classes must be two objects (a
  // trace of f(a, b) with a is b appends through both names to one list).
  // Checked together after every accessor resolved.
  uint64_t version = 0;  // ModuleVersion
  std::string str() const;  // "TENSOR_MATCH L['x'] f32[2, 3] stride=[3, 1]"
};

// Guards on what only a structural change of a module (which takes a fresh
// version, runtime/semantics/class_model.h) can alter: all hold while no module changed.
inline bool is_module_structure_guard(GuardKind k) {
  return k == GuardKind::ModuleVersion || k == GuardKind::ModuleHooks || k == GuardKind::ModuleChildren;
}

// The guards of one trace, deduplicated by (source, kind).
class GuardSet {
 public:
  void add(Guard g);
  // The guard of `kind` on `source`, if one was added.
  Guard* find(const Source* source, GuardKind kind);
  // Symbolic tracing records no guards (nothing is cached on them).
  void disable() { enabled_ = false; }
  // The entry holds only while the embedder's grad mode is `on`
  // (runtime::grad_mode_enabled): its graph read a tensor that requires
  // grad, so it runs through autograd (on) or kiln's kernels (off).
  void require_grad_mode(bool on) {
    if (enabled_) grad_mode_ = on ? 1 : 0;
  }
  int grad_mode() const { return grad_mode_; }  // -1: any
  const std::vector<Guard>& guards() const { return guards_; }
  std::vector<std::string> strs() const;
  // Makes every tensor guard fully static again (a trace read a shape).
  void specialize_all();
  bool has_dynamic() const;
  size_t size() const { return guards_.size(); }

  // Symbolic sizes: symbol i of `shapes()` is dimension symbol_dims()[i]
  // of the tensor at symbol_sources()[i]. The relations the trace relied
  // on (shapes().guards()) hold for the entry, checked with the symbols'
  // values read from the arguments. (Symbolic tracing records none.)
  ShapeEnv& shapes() { return shapes_; }
  const ShapeEnv& shapes() const { return shapes_; }
  SymExpr add_symbol(const SourceRef& tensor, int dim, int64_t hint);
  const std::vector<SourceRef>& symbol_sources() const { return symbol_sources_; }
  const std::vector<int>& symbol_dims() const { return symbol_dims_; }

 private:
  std::vector<Guard> guards_;
  // (kind, source identity) -> position: add() is O(1) and never builds a path.
  std::unordered_map<const Source*, size_t> index_[kNumGuardKinds];
  bool enabled_ = true;
  int grad_mode_ = -1;
  ShapeEnv shapes_;
  std::vector<SourceRef> symbol_sources_;
  std::vector<int> symbol_dims_;
};

}  // namespace kiln::output_graph

// Sources: where a traced value came from, as a path from the frame's
// inputs (L['x'], G['w'], L['self'].fc.weight, L['xs'][0]). Guards check
// values at sources; residual code reloads values from them.
//
// Sources are plain data (they live here, below variables/, because the
// guard set of an OutputGraph refers to them); variables/ builds them.
// Shared and immutable; attribute paths are interned under their base, so
// a guard set deduplicates by identity and a guard check reads each source
// once however many guards it has.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "runtime/value/name_map.h"
#include "runtime/value/value.h"

namespace kiln::output_graph {

#define KILN_SOURCE_KINDS(X) \
  X(Local)   /* a frame argument or local, by name        */ \
  X(Global)  /* a name in the function's globals            */ \
  X(Attr)    /* base.name (module dicts, plain attributes)  */ \
  X(Item)    /* base[key] for a constant key                */ \
  X(Cell)    /* closure cell `local_index` of the function at base (null base: the frame's own function) */ \
  X(Const)   /* the object in `key` itself: a function the trace reached by a guarded path without a source of its own */ \
  X(GenericAttr) /* object.__getattribute__(base, name): Python's generic lookup, whatever base's type does instead */ \
  X(TypeAttr)    /* what the class lookup of `name` finds for base: along type(base).__mro__ after class `key` (Null: from type(base) itself), unbound */ \
  X(DictItem)    /* dict.__getitem__(base, key): base's own dict storage (a dict subclass), whatever base's type does instead */ \
  X(Environ)     /* the process environment's variable `name` (os.environ): its str, or absent */

enum class SourceKind : uint8_t {
#define KILN_SOURCE_ENUM(k) k,
  KILN_SOURCE_KINDS(KILN_SOURCE_ENUM)
#undef KILN_SOURCE_ENUM
};

struct Source;
using SourceRef = std::shared_ptr<const Source>;

struct Source {
  SourceKind kind;
  SourceRef base;       // null for Local / Global
  std::string name;     // Local / Global / Attr
  // Global / Attr: `name` interned, so a guard check looks the name up by
  // pointer instead of interning it again on every cached call.
  runtime::Ref<runtime::StrObj> interned;
  runtime::Value key;   // Item
  int local_index = -1; // Local: index in the frame's varnames; Cell: the cell
  // Global: the namespace it is read from when that is not the traced
  // frame's own (an inlined function from another Python module); null:
  // the frame's globals. Guards and residual code read it there.
  runtime::Ref<runtime::GlobalsObj> globals;
  int depth = 0;        // path length, so accessors can be ordered parents-first

  // L['x'], G['w'], L['self'].fc, L['xs'][0]: built on first use. A deep
  // module chain makes paths O(depth) long, so building every one eagerly
  // would make tracing quadratic (Dynamo's source-path problem).
  const std::string& str() const;

  // attr_source interns children: one Source object per path below a base,
  // so sources compare (and guards deduplicate) by identity.
  mutable std::unordered_map<std::string, std::weak_ptr<const Source>> attr_children;

 private:
  mutable std::string path_;
  mutable bool has_path_ = false;
};

SourceRef local_source(const std::string& name, int index);
SourceRef global_source(const std::string& name, runtime::Ref<runtime::GlobalsObj> globals = nullptr);
SourceRef attr_source(const SourceRef& base, const std::string& name);
SourceRef item_source(const SourceRef& base, const runtime::Value& key);
SourceRef cell_source(const SourceRef& function, int index);
// `object` itself, named `name` in paths (K['Block.forward']): what a
// function found on a class (a module's forward) is, so its closure cells
// have a source to be guarded at. The paths that reached it are guarded
// by their own guards (the module's, the class epoch).
SourceRef const_source(const runtime::Value& object, const std::string& name);
// os.environ[name] as the guards read it: the process environment's own
// variable (getenv), which os.environ's stores keep in step.
SourceRef environ_source(const std::string& name);
// A plain Python object's attribute as object.__getattribute__ reads it
// (inside a class's own __getattribute__, which the trace inlines), and the
// class attribute a lookup of `name` finds (the __getattribute__ or
// property the trace inlined, the function super() found): guards pin
// them (ForeignVTable::lookup_attr reads both).
SourceRef generic_attr_source(const SourceRef& base, const std::string& name);
SourceRef type_attr_source(const SourceRef& base, const std::string& name, const runtime::Value& after);
// What a dict subclass's own storage holds at a literal `key`
// (ForeignVTable::dict_storage_find): what `super().get(key)` read.
SourceRef dict_item_source(const SourceRef& base, const runtime::Value& key);

}  // namespace kiln::output_graph

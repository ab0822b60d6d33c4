// The builtins every KBC program sees as globals: Python's (len, range,
// print, isinstance, ...), every registry op (add, sum, zeros, ...), the
// dtype names, Parameter, and the module classes (Module, Linear, ...).
#pragma once

#include <cstddef>
#include <functional>

#include "runtime/value/name_map.h"

namespace kiln::runtime {

// One row of runtime/semantics/builtins.def, in order; BuiltinObj::row indexes it.
struct BuiltinRow {
  const char* name;
  BuiltinHow how;
  bool native;  // kiln implements it; otherwise Python's own (bound by the Python frontend)
  bool python;  // a name in Python's builtins (not one of kiln's own globals)
};
// BuiltinId::b_len, ...: the rows' names with a prefix (int, bool, float
// are C++ keywords).
enum class BuiltinId : int {
#define KILN_NATIVE(name, signature, type_of, how) b_##name,
#define KILN_OWN(name, signature, type_of, how) b_##name,
#define KILN_PYTHON(name, how) b_##name,
#include "runtime/semantics/builtins.def"
#undef KILN_NATIVE
#undef KILN_OWN
#undef KILN_PYTHON
  kCount
};
inline constexpr int kNumBuiltinRows = int(BuiltinId::kCount);
const BuiltinRow& builtin_row(BuiltinId id);
// The row named `name`, or null.
const BuiltinRow* find_builtin_row(std::string_view name);

// Built once; shared by every program (never mutated after creation). The
// KBC namespace: every registry op, the builtins.def natives, exception
// classes, dtypes and module classes. Its `sum` and `slice` dispatch: a
// tensor goes to the registry op of that name (BuiltinObj::kbc_dispatching).
const NameMap& builtins();
// A Python program's builtins namespace: the natives of the rows that are
// Python builtins, with Python's meaning (sum(t) adds t's rows; no registry
// ops), and the exception classes. Python's own rows are not in it: the
// Python frontend binds those to the real functions.
const NameMap& python_builtins();
// zip(..., strict=True) found its iterator `exhausted` exhausted first, of
// `count`: raises CPython's ValueError unless every other one is exhausted
// too. The ones before it gave an item this round (they are longer); the
// ones after are asked for one more, in order, by `advance(j)` (true: it
// had one). The VM's zip and the tracer's share it.
void zip_check_strict(size_t exhausted, size_t count, const std::function<bool(size_t)>& advance);
// Python's Ellipsis (`...`): a builtin constant, not callable.
const Value& ellipsis();
bool is_ellipsis(const Value& v);
// Whether `v` is the builtin `type` (a KBC function; Python's type across the seam).
bool is_type_builtin(const Value& v);
// Native methods of built-in types (list.append, dict.items, str.join,
// tensor.size, ...): a Builtin taking self as its first argument, or Null.
Value type_method(Kind k, const StrObj* name);
// Tensor methods an embedder adds (python/: torch's methods kiln spells
// otherwise or lacks, kiln/_torch_api.py). They take precedence over the
// registry op of the same name (a superset of its signature: torch's
// `x.to(device)` beside kiln's `x.to(dtype)`), for the VM and the tracer
// alike. Null when there is none.
Value host_tensor_method(const StrObj* name);
void register_tensor_method(const std::string& name, Value fn);
// A type's classmethod reached through the type (dict.fromkeys), bound to
// it as CPython's are; Null when `name` is none of k's classmethods.
Value type_classmethod(Kind k, const StrObj* name);

// What LOAD_ASSERTION_ERROR pushes: the builtin AssertionError, whatever a
// program's globals bind that name to.
Value assertion_error();

// IMPORT_NAME: __import__(name, None, None, fromlist, level), answered by
// the host language (python/: builtins.__import__). loaded_only (the
// tracer's): imports nothing, the module only if the host has it loaded
// already, else Null. Without a host (KBC programs): ModuleNotFoundError,
// or Null when loaded_only.
using ImportHook = Value (*)(const StrObj* name, const Value& fromlist, const Value& level, bool loaded_only);
void set_import_hook(ImportHook hook);
Value import_module(const StrObj* name, const Value& fromlist, const Value& level, bool loaded_only);

}  // namespace kiln::runtime

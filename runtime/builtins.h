// The builtins every KBC program sees as globals: Python's (len, range,
// print, isinstance, ...), every registry op (add, sum, zeros, ...), the
// dtype names, Parameter, and the module classes (Module, Linear, ...).
#pragma once

#include "runtime/name_map.h"

namespace kiln::runtime {

// Built once; shared by every program (never mutated after creation).
const NameMap& builtins();
// The Builtin value for a registry op (what `add` names in KBC).
Value op_builtin(int op_id);
// Native methods of built-in types (list.append, dict.items, str.join,
// tensor.size, ...): a Builtin taking self as its first argument, or Null.
Value type_method(Kind k, const StrObj* name);

// What LOAD_ASSERTION_ERROR pushes: the builtin AssertionError, whatever a
// program's globals bind that name to.
Value assertion_error();

}  // namespace kiln::runtime

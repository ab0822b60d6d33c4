// f(**m): merging a mapping into the keyword dict of a call (KBC's
// DICT_MERGE), with CPython's errors, which name the callee the way
// CPython's _PyObject_FunctionStr does ("mod.f()", "len()").
#pragma once

#include <string>

#include "runtime/value/value.h"

namespace kiln::runtime {

// "qualname()" of a function, prefixed by its module ("__main__.f()") when
// its globals name one other than builtins; "name()" of a builtin.
std::string function_str(CallContext& ctx, const Value& callee);

// dict.update(mapping) that refuses a key already in `dict`: TypeError
// "F() got multiple values for keyword argument 'k'", and for a value
// without keys(): "F() argument after ** must be a mapping, not T".
void dict_merge(CallContext& ctx, const Value& dict, const Value& mapping, const Value& callee);

}  // namespace kiln::runtime

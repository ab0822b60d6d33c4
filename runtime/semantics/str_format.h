// Python's two ways of formatting into a template string: str.format
// (the "{}" replacement-field syntax, Python/formatter_unicode.c and
// Objects/stringlib/unicode_format.h) and str % values (printf-style,
// Objects/unicodeobject.c PyUnicode_Format), with CPython 3.11's results
// and error messages. Each field's value is formatted by format.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/value/value.h"

namespace kiln::runtime {

// fmt.format(*args, **kwargs); `kwargs` a Dict (or None).
std::string str_format(CallContext& ctx, std::string_view fmt, const std::vector<Value>& args, const Value& kwargs);

// fmt % values: a tuple gives the arguments, a dict (any mapping) the
// %(name)s fields, anything else is the one argument.
std::string str_percent(std::string_view fmt, const Value& values);

}  // namespace kiln::runtime

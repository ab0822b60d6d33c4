// Python's format(value, spec) and ascii(): the format-spec mini-language
// ([[fill]align][sign][z][#][0][width][,|_][.precision][type]) for kiln's
// native values, with CPython 3.11's output and error messages
// (Python/formatter_unicode.c, Python/pystrtod.c). `n` formats as in the
// "C" locale (no grouping, '.' as the decimal point).
#pragma once

#include <string>
#include <string_view>

#include "runtime/value/value.h"

namespace kiln::runtime {

// format(value, spec): int (bool with a non-empty spec formats as an int),
// float, str; a 0-d tensor formats its item (as torch does); a Foreign
// object by its own __format__; anything else only with an empty spec
// (str()), else CPython's TypeError.
std::string format_value(const Value& value, std::string_view spec);

// ascii(value): repr() with every non-ASCII code point escaped (\xNN,
// \uNNNN, \UNNNNNNNN).
std::string ascii_repr(const Value& value);

// The f-string step (FORMAT_VALUE): conversion 0 none, 1 str (!s),
// 2 repr (!r), 3 ascii (!a), then format() with spec.
std::string format_field(const Value& value, int conversion, std::string_view spec);

// Code points in a UTF-8 string (what Python's len() and widths count).
size_t utf8_length(std::string_view s);
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(char32_t code_point);

}  // namespace kiln::runtime

// The lexical layer of the KBC text format (docs/kbc.md), shared by the
// assembler (parsing) and the disassembler (printing) so that the two agree
// on every spelling: identifiers, string escapes, float formatting and
// constant literals. Keeping both directions in one file is what makes the
// round trip exact: a literal is printed by format_constant and read back by
// parse_constant, and the pair is tested to be inverse.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "runtime/base/error.h"
#include "runtime/value/code.h"
#include "runtime/value/value.h"

namespace kiln::interpreter::kbc {

// [A-Za-z_][A-Za-z0-9_]*
bool is_identifier(std::string_view s);

// Byte offset of the first byte that is not part of a well-formed UTF-8
// sequence (overlong forms, surrogates and code points above U+10FFFF are
// ill-formed), or std::string_view::npos when `s` is valid.
size_t find_invalid_utf8(std::string_view s);

// The shortest spelling that reads back to the same double, as Python's
// repr writes it: 1.0, -0.0, 0.1, 100000.0, 1e+16, 5e-324, inf, -inf, nan,
// -nan.
std::string format_float(double d);

// A double-quoted literal. Printable ASCII and well-formed multi-byte UTF-8
// are written as they are; \\ \" \n \t \r have short escapes; every other
// byte is \xNN. (A stray byte >= 0x80 can only come from C++-built code:
// the assembler reads \xNN as the code point U+00NN.)
std::string quote_string(std::string_view s);

// How a Code constant is named in text (`@name`).
using CodeNamer = std::function<std::string(const runtime::Code&)>;

// The literal for a constant: None True False ints floats "strings"
// (tuples) and @code. Kinds that have no literal (tensors, lists, ... which
// only C++-built code can hold) print as <kind constant> and do not read
// back.
std::string format_constant(const runtime::Value& v, const CodeNamer& name_of_code);

// A key that identifies a constant for deduplication within one Code: two
// constants share a key exactly when they are the same literal (so 1, 1.0,
// True, 0.0 and -0.0 all stay distinct, while two NaNs merge). Code objects
// are keyed by identity; kinds without a literal get no key (empty string)
// and are never merged.
std::string constant_key(const runtime::Value& v);

// A cursor over one source line. Every parse error goes through fail(),
// which prefixes "FILE:LINE: " and throws a SyntaxError.
class LineCursor {
 public:
  LineCursor(std::string_view text, const std::string& file, int line)
      : s_(text), file_(file), line_(line) {}

  [[noreturn]] void fail(const std::string& what) const;

  void skip_space();
  // True when only whitespace and a comment (`#` or `;`) remain.
  bool at_end();
  // Skips whitespace, then consumes `c` if it is next.
  bool eat(char c);
  // Skips whitespace; the next char or '\0' at the end of the line.
  char peek();
  // Skips whitespace and reads an identifier; empty if there is none.
  std::string_view identifier();
  // Skips whitespace and reads an integer that fits int64 (a leading '-'
  // allowed); `what` names it in errors.
  int64_t integer(const char* what);
  // Skips whitespace and reads a run of non-space characters, stopping at a
  // comment; empty at the end of the line.
  std::string_view word();
  // The rest of the line before any comment, trimmed, inner whitespace runs
  // collapsed to one space (operator symbols like `is not`).
  std::string rest();
  // A short display of what comes next, for "got '...'" messages.
  std::string next_token_text();
  // Fails with "unexpected '...' after <context>" unless at_end().
  void expect_end(const std::string& context);

  int line() const { return line_; }
  const std::string& file() const { return file_; }
  size_t pos() const { return pos_; }

 private:
  friend class LiteralParser;
  std::string_view s_;
  size_t pos_ = 0;
  const std::string& file_;
  int line_;
};

// Resolves `@name` to a Code value; throws (through the cursor) when the
// reference is not allowed here.
using CodeResolver = std::function<runtime::Value(LineCursor&, std::string_view name)>;

// Parses one constant literal at the cursor. `resolve_code` may be empty,
// in which case `@name` is an error. Tuples nest at most kMaxTupleDepth deep
// (a bound so that hostile input cannot exhaust the C++ stack).
constexpr int kMaxTupleDepth = 64;
runtime::Value parse_constant(LineCursor& c, const CodeResolver& resolve_code);

// "what" with a long offending text shortened, for error messages.
std::string abbreviate(std::string_view text, size_t max = 40);

}  // namespace kiln::interpreter::kbc

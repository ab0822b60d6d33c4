// Exception objects and classes: what `ValueError("x")` makes, what a
// handler binds with `except ... as e`, and what RAISE / RERAISE throw.
//
// A built-in exception class is a Builtin (one per ErrorKind row, named
// like Python's class) whose call makes an exception object: a Foreign
// value over ExceptionData, one ForeignVTable per kind so type_name() is
// the class name. A Python exception crossing into kiln (python/) becomes
// such an object too, with `foreign` set to the Python object: matching,
// attribute reads and str() go to it, and it surfaces in Python as itself.
// A Python exception class (a user's `class E(ValueError)`) stays a plain
// Foreign value; the Foreign seam's raise_exception / exception_match
// hooks raise and match it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/value/value.h"

namespace kiln::runtime {

struct ExceptionData {
  ErrorKind kind = ErrorKind::Exception;  // the class (or a Python class's nearest built-in base)
  std::vector<Value> args;
  // str(e). For an error kiln raised from C++ (no args given) it is the
  // error's message, and args is (message,).
  std::string message;
  bool from_message = false;  // made from a C++ error: surfaces by its message
  Value cause = Value::none();  // `raise ... from cause` (None: no cause)
  std::vector<TracebackEntry> traceback;  // innermost first, as kiln::Error keeps it
  std::shared_ptr<void> origin;           // the Python exception (kiln::Error::origin)
  Value foreign = Value::null();          // that exception as a Foreign value, or Null
  std::vector<std::pair<std::string, Value>> attrs;  // e.x = ... (a Python exception has a __dict__)
};

// The built-in class of a kind (a Builtin), and the kind of such a class.
Value exception_class(ErrorKind k);
std::optional<ErrorKind> exception_class_kind(const Value& v);
// The exception object behind v, or null when v is none.
ExceptionData* exception_data(const Value& v);
inline bool is_exception(const Value& v) { return exception_data(v) != nullptr; }

Value make_exception(ErrorKind k, std::vector<Value> args);
// str(e) for a kind and its args (KeyError shows its key's repr).
std::string exception_message(ErrorKind k, const std::vector<Value>& args);

// KeyError(key) as CPython raises it for a missing key: args (key,), str
// the key's repr.
[[noreturn]] void throw_key_error(const Value& key);

// The exception a handler receives for `e`: e's own object when it has one
// (made, and kept in e.exception, when kiln raised it from C++), holding
// e's traceback so far.
Value caught_exception(Error& e);
// RAISE: raise `exc` (an exception object or class, or a foreign one);
// `cause` is Null without `from`. Anything else is CPython's TypeError.
[[noreturn]] void raise_exception(const Value& exc, const Value& cause);
// RERAISE: raise a caught exception again, its traceback unchanged.
[[noreturn]] void reraise_exception(const Value& exc);
// CHECK_EXC_MATCH: is `exc` an instance of `cls` (a class or a tuple of
// them)? TypeError when cls is no exception class, as in CPython.
bool exception_matches(const Value& exc, const Value& cls);
// isinstance(obj, cls) for an exception class cls (false for non-exceptions).
bool exception_isinstance(const Value& obj, const Value& cls);

}  // namespace kiln::runtime

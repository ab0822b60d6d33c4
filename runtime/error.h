// kiln::Error: the one exception type that crosses kiln's API. Every runtime
// failure (bad type, missing attribute, shape mismatch, bad bytecode) becomes
// one of these, carrying a Python-style kind and, once it has passed through
// the VM, a KBC traceback. Nothing else is allowed to escape to the user.
#pragma once

#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

// One row per kind: X(kind, the Python exception it surfaces as).
// The order is the order a Python exception is matched against when it
// crosses into kiln (python/src/convert.cpp): RecursionError before
// RuntimeError, its base class there.
#define KILN_ERROR_KINDS(X)                                                   \
  X(TypeError, TypeError)                                                     \
  X(ValueError, ValueError)                                                   \
  X(AttributeError, AttributeError)                                           \
  X(IndexError, IndexError)                                                   \
  X(KeyError, KeyError)                                                       \
  X(NameError, NameError)       /* unknown global, unbound local or free variable */ \
  X(ZeroDivisionError, ZeroDivisionError)                                     \
  X(OverflowError, OverflowError)                                             \
  X(RecursionError, RecursionError)                                           \
  X(AssertionError, AssertionError) /* a failed assert (LOAD_ASSERTION_ERROR) */ \
  X(RuntimeError, RuntimeError) /* shape errors, unsupported operations, raised by user code */ \
  X(SyntaxError, SyntaxError)   /* the KBC assembler */                       \
  X(VerifyError, ValueError)    /* the KBC verifier */

enum class ErrorKind {
#define KILN_ERROR_ENUM(kind, py) kind,
  KILN_ERROR_KINDS(KILN_ERROR_ENUM)
#undef KILN_ERROR_ENUM
};

const char* error_kind_name(ErrorKind k);

struct TracebackEntry {
  std::string function;
  std::string file;
  int line = 0;  // source line of the instruction that was executing
};

class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message);

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  // Innermost frame first.
  const std::vector<TracebackEntry>& traceback() const { return traceback_; }
  void add_frame(TracebackEntry e);

  // "Kind: message" (what()); full() adds the traceback, outermost first,
  // in the order Python prints it.
  const char* what() const noexcept override { return what_.c_str(); }
  std::string full() const;

  // What raised it, when that is not kiln (python/ attaches the original
  // Python exception, so it reaches the caller as itself, whatever its
  // type); carried unchanged through the frames it unwinds.
  std::shared_ptr<void> origin;

 private:
  ErrorKind kind_;
  std::string message_;
  std::string what_;
  std::vector<TracebackEntry> traceback_;
};

[[noreturn]] void throw_error(ErrorKind kind, std::string message);

}  // namespace kiln

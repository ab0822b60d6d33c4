// kiln::Error: the one exception type that crosses kiln's API. Every runtime
// failure (bad type, missing attribute, shape mismatch, bad bytecode) becomes
// one of these, carrying a Python-style kind and, once it has passed through
// the VM, a KBC traceback. Nothing else is allowed to escape to the user.
#pragma once

#include <stdexcept>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "runtime/base/object.h"

namespace kiln {

// One row per kind: X(kind, the Python exception it surfaces as, its base
// kind). The rows are Python's built-in exception hierarchy (every class a
// user can name), so `except ArithmeticError` catches a ZeroDivisionError
// (runtime/semantics/exceptions.h matches by walking the base column), plus
// VerifyError, kiln's own (the KBC verifier), which surfaces as ValueError.
// Invariant: a row's base is a row above it (static_assert in error.cpp),
// so the hierarchy is a tree rooted at BaseException.
#define KILN_ERROR_KINDS(X)                                                   \
  X(BaseException, BaseException, BaseException) /* the root: its own base */ \
  X(SystemExit, SystemExit, BaseException)                                    \
  X(KeyboardInterrupt, KeyboardInterrupt, BaseException)                      \
  X(GeneratorExit, GeneratorExit, BaseException)                              \
  X(Exception, Exception, BaseException)                                      \
  X(StopIteration, StopIteration, Exception)                                  \
  X(StopAsyncIteration, StopAsyncIteration, Exception)                        \
  X(ArithmeticError, ArithmeticError, Exception)                              \
  X(FloatingPointError, FloatingPointError, ArithmeticError)                  \
  X(OverflowError, OverflowError, ArithmeticError)                            \
  X(ZeroDivisionError, ZeroDivisionError, ArithmeticError)                    \
  X(AssertionError, AssertionError, Exception) /* a failed assert (LOAD_ASSERTION_ERROR) */ \
  X(AttributeError, AttributeError, Exception)                                \
  X(BufferError, BufferError, Exception)                                      \
  X(EOFError, EOFError, Exception)                                            \
  X(ImportError, ImportError, Exception)                                      \
  X(ModuleNotFoundError, ModuleNotFoundError, ImportError)                    \
  X(LookupError, LookupError, Exception)                                      \
  X(IndexError, IndexError, LookupError)                                      \
  X(KeyError, KeyError, LookupError)                                          \
  X(MemoryError, MemoryError, Exception)                                      \
  X(NameError, NameError, Exception) /* unknown global, unbound local or free variable */ \
  X(UnboundLocalError, UnboundLocalError, NameError)                          \
  X(OSError, OSError, Exception)                                              \
  X(BlockingIOError, BlockingIOError, OSError)                                \
  X(ChildProcessError, ChildProcessError, OSError)                            \
  X(ConnectionError, ConnectionError, OSError)                                \
  X(BrokenPipeError, BrokenPipeError, ConnectionError)                        \
  X(ConnectionAbortedError, ConnectionAbortedError, ConnectionError)          \
  X(ConnectionRefusedError, ConnectionRefusedError, ConnectionError)          \
  X(ConnectionResetError, ConnectionResetError, ConnectionError)              \
  X(FileExistsError, FileExistsError, OSError)                                \
  X(FileNotFoundError, FileNotFoundError, OSError)                            \
  X(InterruptedError, InterruptedError, OSError)                              \
  X(IsADirectoryError, IsADirectoryError, OSError)                            \
  X(NotADirectoryError, NotADirectoryError, OSError)                          \
  X(PermissionError, PermissionError, OSError)                                \
  X(ProcessLookupError, ProcessLookupError, OSError)                          \
  X(TimeoutError, TimeoutError, OSError)                                      \
  X(ReferenceError, ReferenceError, Exception)                                \
  X(RuntimeError, RuntimeError, Exception) /* shape errors, unsupported operations */ \
  X(NotImplementedError, NotImplementedError, RuntimeError)                   \
  X(RecursionError, RecursionError, RuntimeError)                             \
  X(SyntaxError, SyntaxError, Exception) /* the KBC assembler */              \
  X(IndentationError, IndentationError, SyntaxError)                          \
  X(TabError, TabError, IndentationError)                                     \
  X(SystemError, SystemError, Exception)                                      \
  X(TypeError, TypeError, Exception)                                          \
  X(ValueError, ValueError, Exception)                                        \
  X(UnicodeError, UnicodeError, ValueError)                                   \
  X(Warning, Warning, Exception)                                              \
  X(UserWarning, UserWarning, Warning)                                        \
  X(DeprecationWarning, DeprecationWarning, Warning)                          \
  X(PendingDeprecationWarning, PendingDeprecationWarning, Warning)            \
  X(SyntaxWarning, SyntaxWarning, Warning)                                    \
  X(RuntimeWarning, RuntimeWarning, Warning)                                  \
  X(FutureWarning, FutureWarning, Warning)                                    \
  X(ImportWarning, ImportWarning, Warning)                                    \
  X(UnicodeWarning, UnicodeWarning, Warning)                                  \
  X(BytesWarning, BytesWarning, Warning)                                      \
  X(ResourceWarning, ResourceWarning, Warning)                                \
  X(EncodingWarning, EncodingWarning, Warning)                                \
  X(VerifyError, ValueError, ValueError) /* the KBC verifier (kiln's own: no Python name) */

enum class ErrorKind {
#define KILN_ERROR_ENUM(kind, py, base) kind,
  KILN_ERROR_KINDS(KILN_ERROR_ENUM)
#undef KILN_ERROR_ENUM
};

const char* error_kind_name(ErrorKind k);
// The row's base kind (BaseException's is itself).
ErrorKind error_kind_base(ErrorKind k);
// k is `base` or derives from it.
bool error_kind_is(ErrorKind k, ErrorKind base);
// The kind named `name` (Python's class name; VerifyError is not one).
std::optional<ErrorKind> error_kind_from_name(std::string_view name);

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
  void set_traceback(std::vector<TracebackEntry> tb) { traceback_ = std::move(tb); }

  // "Kind: message" (what()); full() adds the traceback, outermost first,
  // in the order Python prints it.
  const char* what() const noexcept override { return what_.c_str(); }
  std::string full() const;

  // What raised it, when that is not kiln (python/ attaches the original
  // Python exception, so it reaches the caller as itself, whatever its
  // type); carried unchanged through the frames it unwinds.
  std::shared_ptr<void> origin;
  // The exception object (runtime/semantics/exceptions.h) this error was raised
  // from or has been caught as, when there is one: `raise e` and a
  // handler's `e` are this very object, so its identity, args and cause
  // survive a round trip through a handler. Null for errors kiln raised
  // from C++ (throw_error); a handler makes one on demand.
  runtime::Ref<runtime::Object> exception;
  // Set by RERAISE: this frame's traceback entry is already in traceback()
  // (CPython's RERAISE skips PyTraceBack_Here), so the frame unwinding it
  // must not add another. Cleared once that frame has let it through.
  bool reraised = false;
  // Set while leaving a frame that continues its caller's user frame (a
  // resume function, runtime/value/code.h): the caller, a residual, adds no entry.
  bool continued = false;

 private:
  ErrorKind kind_;
  std::string message_;
  std::string what_;
  std::vector<TracebackEntry> traceback_;
};

[[noreturn]] void throw_error(ErrorKind kind, std::string message);

}  // namespace kiln

#include "runtime/error.h"

namespace kiln {

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::TypeError: return "TypeError";
    case ErrorKind::ValueError: return "ValueError";
    case ErrorKind::AttributeError: return "AttributeError";
    case ErrorKind::IndexError: return "IndexError";
    case ErrorKind::KeyError: return "KeyError";
    case ErrorKind::NameError: return "NameError";
    case ErrorKind::ZeroDivisionError: return "ZeroDivisionError";
    case ErrorKind::OverflowError: return "OverflowError";
    case ErrorKind::RecursionError: return "RecursionError";
    case ErrorKind::RuntimeError: return "RuntimeError";
    case ErrorKind::SyntaxError: return "SyntaxError";
    case ErrorKind::VerifyError: return "VerifyError";
  }
  return "Error";
}

Error::Error(ErrorKind kind, std::string message)
    : kind_(kind), message_(std::move(message)) {
  what_ = std::string(error_kind_name(kind_)) + ": " + message_;
}

void Error::add_frame(TracebackEntry e) { traceback_.push_back(std::move(e)); }

std::string Error::full() const {
  std::string s;
  if (!traceback_.empty()) {
    s += "Traceback (most recent call last):\n";
    for (auto it = traceback_.rbegin(); it != traceback_.rend(); ++it)
      s += "  File \"" + it->file + "\", line " + std::to_string(it->line) + ", in " +
           it->function + "\n";
  }
  return s + what_;
}

void throw_error(ErrorKind kind, std::string message) { throw Error(kind, std::move(message)); }

}  // namespace kiln

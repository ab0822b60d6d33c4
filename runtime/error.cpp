#include "runtime/error.h"

namespace kiln {

const char* error_kind_name(ErrorKind k) {
  switch (k) {
#define KILN_ERROR_NAME(kind, py) \
  case ErrorKind::kind: return #kind;
    KILN_ERROR_KINDS(KILN_ERROR_NAME)
#undef KILN_ERROR_NAME
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

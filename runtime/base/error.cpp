#include "runtime/base/error.h"

#include <iterator>

namespace kiln {

const char* error_kind_name(ErrorKind k) {
  switch (k) {
#define KILN_ERROR_NAME(kind, py, base) \
  case ErrorKind::kind: return #kind;
    KILN_ERROR_KINDS(KILN_ERROR_NAME)
#undef KILN_ERROR_NAME
  }
  return "Error";
}

namespace {
constexpr ErrorKind kBase[] = {
#define KILN_ERROR_BASE(kind, py, base) ErrorKind::base,
    KILN_ERROR_KINDS(KILN_ERROR_BASE)
#undef KILN_ERROR_BASE
};
constexpr bool bases_precede() {
  for (size_t i = 0; i < std::size(kBase); ++i)
    if (size_t(kBase[i]) > i || (size_t(kBase[i]) == i && i != 0)) return false;
  return true;
}
static_assert(bases_precede(), "KILN_ERROR_KINDS: a row's base must be a row above it (BaseException first)");
}  // namespace

ErrorKind error_kind_base(ErrorKind k) { return kBase[size_t(k)]; }

bool error_kind_is(ErrorKind k, ErrorKind base) {
  for (;;) {
    if (k == base) return true;
    if (k == ErrorKind::BaseException) return false;
    k = kBase[size_t(k)];
  }
}

std::optional<ErrorKind> error_kind_from_name(std::string_view name) {
#define KILN_ERROR_FROM_NAME(kind, py, base) \
  if (ErrorKind::kind != ErrorKind::VerifyError && name == #kind) return ErrorKind::kind;
  KILN_ERROR_KINDS(KILN_ERROR_FROM_NAME)
#undef KILN_ERROR_FROM_NAME
  return std::nullopt;
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

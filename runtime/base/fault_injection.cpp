#include "runtime/base/fault_injection.h"

#include <cstdlib>
#include <mutex>

#include "runtime/base/error.h"

namespace kiln::runtime {

namespace {
std::mutex mu;
std::string& points() {
  static std::string* p = [] {
    const char* env = std::getenv("KILN_FAULT");
    return new std::string(env ? env : "");
  }();
  return *p;
}
}  // namespace

namespace detail {
bool any_fault_point = [] {
  const char* env = std::getenv("KILN_FAULT");
  return env && *env;
}();

void raise_fault(std::string_view point) {
  throw_error(ErrorKind::RuntimeError, "kiln: injected fault at " + std::string(point) + " (KILN_FAULT)");
}
}  // namespace detail

void set_fault_points(const std::string& p) {
  std::lock_guard<std::mutex> lock(mu);
  points() = p;
  detail::any_fault_point = !p.empty();
}

bool fault_enabled(std::string_view point) {
  std::lock_guard<std::mutex> lock(mu);
  const std::string& all = points();
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(',', start);
    if (end == std::string::npos) end = all.size();
    if (std::string_view(all).substr(start, end - start) == point) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace kiln::runtime

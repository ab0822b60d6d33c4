#include "collectives/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "runtime/base/error.h"

namespace kiln::collectives {

Config Config::from_env() {
  Config c;
  if (const char* env = std::getenv("KILN_COLLECTIVE_TIMEOUT_S"); env && *env) {
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(env, &end);
    if (errno != 0 || end == env || *end != '\0' || !std::isfinite(v) || v <= 0)
      throw_error(ErrorKind::ValueError, std::string("KILN_COLLECTIVE_TIMEOUT_S='") + env +
                                             "' is not a positive number of seconds");
    c.collective_timeout_s = v;
  }
  return c;
}

}  // namespace kiln::collectives

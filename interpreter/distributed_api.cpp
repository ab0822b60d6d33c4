// The multi-rank side of the C++ API: kiln::distributed::init() and the
// environment defaults of Options' collective settings.
#include <cstdlib>
#include <string>

#include "collectives/config.h"
#include "collectives/distributed.h"
#include "collectives/process_group.h"
#include "interpreter/kiln_api.h"
#include "runtime/base/error.h"

namespace kiln {

bool options_env::flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v || std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  throw_error(ErrorKind::ValueError, std::string(name) + "='" + v + "' should be 1 (on) or 0 (off)");
}

bool options_env::flag_or(const char* name, bool unset) {
  const char* v = std::getenv(name);
  if (!v || !*v) return unset;
  return flag(name);
}

double options_env::collective_timeout_s() { return collectives::Config::from_env().collective_timeout_s; }

std::shared_ptr<collectives::ProcessGroup> distributed::init() { return collectives::init(); }
int distributed::rank() { return collectives::init()->rank(); }
int distributed::world_size() { return collectives::init()->size(); }

}  // namespace kiln

// Settings of the collectives, read once from the environment and then held
// by each ProcessGroup (a group keeps the Config it was made with).
#pragma once

namespace kiln::collectives {

struct Config {
  // How long a collective waits for the slowest rank before every rank that
  // did arrive fails with CollectiveTimeout rather than hanging.
  double collective_timeout_s = 60.0;

  // The defaults, overridden by KILN_COLLECTIVE_TIMEOUT_S; a value that is not
  // a positive number is a ValueError, not silently the default.
  static Config from_env();
};

}  // namespace kiln::collectives

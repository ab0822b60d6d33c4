#include "collectives/errors.h"

namespace kiln::collectives {

CollectiveMismatch::CollectiveMismatch(std::string group, std::vector<int> ranks,
                                       const std::string& detail)
    : Error(ErrorKind::RuntimeError, "CollectiveMismatch in group '" + group + "': " + detail),
      group_(std::move(group)),
      ranks_(std::move(ranks)) {}

CollectiveTimeout::CollectiveTimeout(std::string group, std::vector<int> missing, double elapsed_s,
                                     const std::string& detail)
    : Error(ErrorKind::RuntimeError, "CollectiveTimeout in group '" + group + "': " + detail),
      group_(std::move(group)),
      missing_(std::move(missing)),
      elapsed_s_(elapsed_s) {}

}  // namespace kiln::collectives

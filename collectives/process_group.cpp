#include "collectives/process_group.h"

namespace kiln::collectives {

std::string ProcessGroup::describe_rank(int rank) const { return "rank " + std::to_string(rank); }

}  // namespace kiln::collectives

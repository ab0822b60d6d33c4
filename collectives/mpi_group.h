// The MPI-backed ProcessGroup. It reaches MPI only through the plugin's
// table (collectives/mpi_plugin.h): no file of libkiln includes <mpi.h>.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/mpi_plugin.h"
#include "collectives/process_group.h"

namespace kiln::collectives {

// A group over a private duplicate of MPI_COMM_WORLD (kiln's messages can
// never match the program's own). MPI must be initialised through `mpi`,
// which must outlive the group (a loaded plugin is never unloaded).
// Collective over the world.
std::shared_ptr<ProcessGroup> make_mpi_world_group(const KilnMpiPlugin& mpi, const Config& config);

// A group of `world_ranks` of `parent` (which must be an MPI group made by
// make_mpi_world_group), in the listed order. Collective over the listed
// ranks only (MPI_Comm_create_group).
std::shared_ptr<ProcessGroup> make_mpi_subgroup(ProcessGroup& parent,
                                                const std::vector<int>& world_ranks,
                                                std::string name);

}  // namespace kiln::collectives

// Starting the multi-rank mode: init() makes the world group. Under mpirun
// it loads kiln's MPI plugin (libkiln_mpi.so, collectives/mpi_plugin_loader.h)
// and initialises MPI through it (or adopts an MPI that the program or mpi4py
// already initialised); a missing plugin is an error there, never a quiet
// single rank. Otherwise it returns the single-rank group without loading
// the plugin, so programs that never use mpirun need no MPI installed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/config.h"
#include "collectives/process_group.h"

namespace kiln::collectives {

// Idempotent: later calls return the same world group (with `config`
// applied). Thread-safe.
std::shared_ptr<ProcessGroup> init(const Config& config = Config::from_env());

// The world group after init(), the single-rank group before it.
std::shared_ptr<ProcessGroup> default_group();

// A group of the listed world ranks, in that order (group rank i is
// world_ranks[i]). Collective over the listed ranks only: exactly they call
// it, each with the same list. A rank not in the list is a ValueError.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& world_ranks,
                                        std::string name = "");

// What MPI_Init_thread provided (MPI_THREAD_* value), or -1 when the world
// is single-rank and MPI is not in use.
int mpi_thread_level();
// True when kiln called MPI_Init_thread (and so finalizes MPI at exit);
// false when it adopted an MPI someone else initialised, or uses none.
bool kiln_initialised_mpi();
// True when an MPI launcher started this process (OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK in the environment).
bool launched_by_mpi();

}  // namespace kiln::collectives

// Finding and loading libkiln_mpi.so (collectives/mpi_plugin.h). Only
// init() loads it, and only under an MPI launcher: a single-rank process
// never opens it and so never needs MPI.
#pragma once

#include <string>
#include <string_view>

#include "collectives/mpi_plugin.h"

namespace kiln::collectives {

// Where the plugin is looked for: $KILN_MPI_PLUGIN when set and not empty
// (a file path; a bare name is searched on the library path, as dlopen
// does), else libkiln_mpi.so in the directory of the binary holding kiln's
// code: libkiln.so for an embedder, kiln._C for Python, the program itself
// when it links kiln statically (kiln's own tests).
std::string mpi_plugin_path();

// The plugin's table, loaded on the first call (thread-safe; a failed load
// is tried again by the next call; a loaded plugin is never unloaded, so
// MPI can be finalized at exit). A file that cannot be loaded, is not a kiln
// MPI plugin or is one of another ABI is a RuntimeError that starts with
// `why`, names the file and gives dlerror(); never a quiet fallback.
const KilnMpiPlugin& load_mpi_plugin(std::string_view why);

// MPI's words for an error code the plugin returned.
std::string mpi_error_string(const KilnMpiPlugin& mpi, int rc);
// A RuntimeError "collectives: <call> failed: <MPI's words>" unless rc is 0.
void check_mpi(const KilnMpiPlugin& mpi, int rc, std::string_view call);

}  // namespace kiln::collectives

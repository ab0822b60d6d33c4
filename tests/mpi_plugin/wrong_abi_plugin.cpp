// A kiln MPI plugin of an ABI no kiln has: the loader must refuse it by
// name (tests/mpi_plugin/test_plugin_refused.sh) rather than call into a table
// whose layout it does not know. It has no MPI and no function.
#include "collectives/mpi_plugin.h"

extern "C" const KilnMpiPlugin* kiln_mpi_plugin(void) {
  static const KilnMpiPlugin wrong = [] {
    KilnMpiPlugin p{};  // every function null: the loader must not get as far as calling one
    p.abi = KILN_MPI_PLUGIN_ABI + 1000;
    p.struct_size = sizeof(KilnMpiPlugin);
    return p;
  }();
  return &wrong;
}

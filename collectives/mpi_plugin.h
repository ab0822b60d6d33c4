// The MPI plugin's interface: the only way kiln reaches MPI. Every MPI call
// lives in libkiln_mpi.so (collectives/mpi_plugin/), which kiln dlopens only
// under an MPI launcher (collectives/mpi_plugin_loader.h), so libkiln and
// kiln._C never link libmpi and a single-rank program runs on a machine
// without MPI.
//
// The seam is a C table of functions, not C++ classes: the plugin then needs
// no kiln symbol (kiln._C hides its own, and Python loads it RTLD_LOCAL, so
// there are none a plugin could bind to), and no exception or C++ type
// crosses it. It is deliberately thin (one entry per MPI operation kiln
// uses): the deadline, poisoning and error wording stay in mpi_group.cpp,
// compiled once, so the plugin holds no judgement of its own.
//
// Trap: `abi` and `struct_size` must stay the first two members in every
// version, and KILN_MPI_PLUGIN_ABI must change whenever any member's layout
// or meaning does; the loader refuses a plugin of another ABI by name.
#pragma once

#include <stddef.h>
#include <stdint.h>

#define KILN_MPI_PLUGIN_ABI 1u
// The symbol the plugin exports: const KilnMpiPlugin* kiln_mpi_plugin(void).
#define KILN_MPI_PLUGIN_ENTRY "kiln_mpi_plugin"
// The plugin's file name, next to the binary that holds kiln's code.
#define KILN_MPI_PLUGIN_FILE "libkiln_mpi.so"

extern "C" {

// Opaque to kiln: a boxed MPI_Comm and MPI_Request (their types differ
// between MPI implementations: a pointer in OpenMPI, an int in MPICH).
typedef struct KilnMpiComm KilnMpiComm;
typedef struct KilnMpiRequest KilnMpiRequest;

// Every int function returns 0 (MPI_SUCCESS) or the MPI error code, which
// error_string() turns into MPI's own words. A function that makes several
// MPI calls sets *failed_call to the name of the one that failed.
struct KilnMpiPlugin {
  uint32_t abi;          // KILN_MPI_PLUGIN_ABI
  uint32_t struct_size;  // sizeof(KilnMpiPlugin) as the plugin was built

  void (*error_string)(int code, char* buf, size_t len);  // always NUL-terminates

  int (*initialized)(int* flag);
  int (*finalized)(int* flag);
  int (*query_thread)(int* level);
  // MPI_Init_thread asking for MPI_THREAD_MULTIPLE; *provided is what MPI gave.
  int (*init_thread)(int* provided);
  int (*finalize)(void);

  // A private duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN.
  int (*comm_dup_world)(KilnMpiComm** out, const char** failed_call);
  // The communicator of `parent_ranks` (ranks of `parent`, in that order)
  // through MPI_Comm_create_group; collective over those ranks only.
  int (*comm_create_group)(KilnMpiComm* parent, const int* parent_ranks, int n, int tag,
                           KilnMpiComm** out, const char** failed_call);
  int (*comm_rank)(KilnMpiComm* comm, int* rank);
  int (*comm_size)(KilnMpiComm* comm, int* size);
  // Frees the communicator and its box.
  int (*comm_free)(KilnMpiComm* comm);

  // MPI_Iallgather of `bytes` bytes per rank into recv (size * bytes).
  int (*iallgather)(const void* send, int bytes, void* recv, KilnMpiComm* comm,
                    KilnMpiRequest** out);
  // MPI_Iallgatherv of bytes. `counts` and `displs` (one per rank) and both
  // buffers must stay alive until the request completes.
  int (*iallgatherv)(const void* send, int bytes, void* recv, const int* counts,
                     const int* displs, KilnMpiComm* comm, KilnMpiRequest** out);
  // MPI_Test. A request is freed (request_free) only once *done was set;
  // one abandoned in flight is leaked, since MPI may still write to it.
  int (*test)(KilnMpiRequest* request, int* done);
  void (*request_free)(KilnMpiRequest* request);
};

typedef const KilnMpiPlugin* (*KilnMpiPluginEntry)(void);

}  // extern "C"

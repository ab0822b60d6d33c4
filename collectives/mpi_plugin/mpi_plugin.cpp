// libkiln_mpi.so: the one file of kiln that includes <mpi.h>. Each entry
// of the table is one MPI operation with its errors returned as codes
// (collectives/mpi_plugin.h); what to do about them is kiln's business,
// not the plugin's. Nothing here may throw: no exception crosses the seam.
#include "collectives/mpi_plugin.h"

#include <cstdio>
#include <cstring>
#include <new>

#include <mpi.h>

struct KilnMpiComm {
  MPI_Comm comm;
};
struct KilnMpiRequest {
  MPI_Request req;
};

namespace {

// MPI_SUCCESS is 0 in every MPI we know of; the table promises 0 regardless.
int code(int rc) { return rc == MPI_SUCCESS ? 0 : rc; }

void error_string(int rc, char* buf, size_t len) {
  if (len == 0) return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS || n <= 0)
    n = std::snprintf(text, sizeof text, "MPI error %d", rc);
  size_t k = static_cast<size_t>(n) < len - 1 ? static_cast<size_t>(n) : len - 1;
  std::memcpy(buf, text, k);
  buf[k] = '\0';
}

int initialized(int* flag) { return code(MPI_Initialized(flag)); }
int finalized(int* flag) { return code(MPI_Finalized(flag)); }
int query_thread(int* level) { return code(MPI_Query_thread(level)); }
int init_thread(int* provided) {
  return code(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, provided));
}
int finalize() { return code(MPI_Finalize()); }

// Boxes a new communicator with MPI_ERRORS_RETURN (failures come back as
// codes instead of MPI's default of aborting the job); frees it on failure.
int box(MPI_Comm comm, KilnMpiComm** out, const char** failed_call) {
  int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    *failed_call = "MPI_Comm_set_errhandler";
    MPI_Comm_free(&comm);
    return code(rc);
  }
  *out = new (std::nothrow) KilnMpiComm{comm};
  if (!*out) {
    *failed_call = "allocating the communicator";
    MPI_Comm_free(&comm);
    return MPI_ERR_NO_MEM;
  }
  return 0;
}

int comm_dup_world(KilnMpiComm** out, const char** failed_call) {
  MPI_Comm comm;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) {
    *failed_call = "MPI_Comm_dup(MPI_COMM_WORLD)";
    return code(rc);
  }
  return box(comm, out, failed_call);
}

int comm_create_group(KilnMpiComm* parent, const int* parent_ranks, int n, int tag,
                      KilnMpiComm** out, const char** failed_call) {
  MPI_Group pg, sg;
  int rc = MPI_Comm_group(parent->comm, &pg);
  if (rc != MPI_SUCCESS) {
    *failed_call = "MPI_Comm_group";
    return code(rc);
  }
  rc = MPI_Group_incl(pg, n, parent_ranks, &sg);
  if (rc != MPI_SUCCESS) {
    MPI_Group_free(&pg);
    *failed_call = "MPI_Group_incl";
    return code(rc);
  }
  MPI_Comm comm;
  rc = MPI_Comm_create_group(parent->comm, sg, tag, &comm);
  MPI_Group_free(&sg);
  MPI_Group_free(&pg);
  if (rc != MPI_SUCCESS) {
    *failed_call = "MPI_Comm_create_group";
    return code(rc);
  }
  return box(comm, out, failed_call);
}

int comm_rank(KilnMpiComm* c, int* rank) { return code(MPI_Comm_rank(c->comm, rank)); }
int comm_size(KilnMpiComm* c, int* size) { return code(MPI_Comm_size(c->comm, size)); }
int comm_free(KilnMpiComm* c) {
  int rc = MPI_Comm_free(&c->comm);
  delete c;
  return code(rc);
}

// Starts an operation into a new request box; the box is made first so a
// started operation always has somewhere to live.
template <class Start>
int start(KilnMpiRequest** out, Start&& s) {
  auto* r = new (std::nothrow) KilnMpiRequest{MPI_REQUEST_NULL};
  if (!r) return MPI_ERR_NO_MEM;
  int rc = s(&r->req);
  if (rc != MPI_SUCCESS) {
    delete r;
    return code(rc);
  }
  *out = r;
  return 0;
}

int iallgather(const void* send, int bytes, void* recv, KilnMpiComm* c, KilnMpiRequest** out) {
  return start(out, [&](MPI_Request* req) {
    return MPI_Iallgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, c->comm, req);
  });
}

int iallgatherv(const void* send, int bytes, void* recv, const int* counts, const int* displs,
                KilnMpiComm* c, KilnMpiRequest** out) {
  return start(out, [&](MPI_Request* req) {
    return MPI_Iallgatherv(send, bytes, MPI_BYTE, recv, counts, displs, MPI_BYTE, c->comm, req);
  });
}

int test(KilnMpiRequest* r, int* done) { return code(MPI_Test(&r->req, done, MPI_STATUS_IGNORE)); }
void request_free(KilnMpiRequest* r) { delete r; }

const KilnMpiPlugin kPlugin = {
    KILN_MPI_PLUGIN_ABI, sizeof(KilnMpiPlugin), error_string, initialized, finalized,
    query_thread, init_thread, finalize, comm_dup_world, comm_create_group, comm_rank,
    comm_size, comm_free, iallgather, iallgatherv, test, request_free,
};

}  // namespace

// The only exported symbol (the library is built with hidden visibility).
extern "C" __attribute__((visibility("default"))) const KilnMpiPlugin* kiln_mpi_plugin(void) {
  return &kPlugin;
}

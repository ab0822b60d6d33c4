#include "collectives/kernel_blob.h"

#include "runtime/base/error.h"

namespace kiln::collectives {

KernelBlob make_kernel_blob(const Hash128& graph_hash, uint32_t kernel_begin, uint32_t kernel_end,
                            std::span<const uint8_t> object) {
  KernelBlob b;
  b.graph_hash = graph_hash;
  b.kernel_begin = kernel_begin;
  b.kernel_end = kernel_end;
  b.object.assign(object.begin(), object.end());
  b.checksum = xxh3_128(object);
  return b;
}

void verify_kernel_blob(const KernelBlob& blob, const Hash128& expected_graph_hash) {
  std::string what = "kernel blob for kernels [" + std::to_string(blob.kernel_begin) + ", " +
                     std::to_string(blob.kernel_end) + ")";
  if (blob.graph_hash != expected_graph_hash)
    throw_error(ErrorKind::ValueError, "collectives: " + what + " was compiled for graph " +
                                           blob.graph_hash.hex() + ", but this rank expects graph " +
                                           expected_graph_hash.hex() + "; not linking it");
  if (blob.kernel_begin > blob.kernel_end)
    throw_error(ErrorKind::ValueError, "collectives: " + what + " has an empty-backwards range");
  Hash128 actual = xxh3_128(blob.object);
  if (actual != blob.checksum)
    throw_error(ErrorKind::ValueError, "collectives: " + what + " of graph " +
                                           blob.graph_hash.hex() + " is corrupt: its " +
                                           std::to_string(blob.object.size()) + " bytes hash to " +
                                           actual.hex() + ", the sender said " +
                                           blob.checksum.hex() + "; not linking it");
}

}  // namespace kiln::collectives

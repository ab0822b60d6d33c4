// Kernel object code from another rank is linked into this process, so it
// is accepted only when it is the code this rank expects: the graph it was
// compiled for and the bytes that were sent.
#pragma once

#include <span>

#include "collectives/messages.h"

namespace kiln::collectives {

// A blob with its checksum filled in.
KernelBlob make_kernel_blob(const Hash128& graph_hash, uint32_t kernel_begin, uint32_t kernel_end,
                            std::span<const uint8_t> object);

// ValueError unless the blob is for `expected_graph_hash`, its range is
// well-formed and its bytes hash to its checksum.
void verify_kernel_blob(const KernelBlob& blob, const Hash128& expected_graph_hash);

}  // namespace kiln::collectives

// Shared compile work (issue 7): the kernels of a graph are split across
// the ranks of the compile group, each rank compiles its share, and the
// object code is all-gathered, so every rank ends with every kernel.
//
// Per frame compile, on every rank of a DistributedState with
// share_compile set:
//   1. exactly one KernelPlan all-gather (header: frame id, compile number,
//      zero graph hash): the program this rank is about to compile (content
//      key, kernel count) and whether it already has the code. The backend
//      sends it through SharedCompile::agree; a compile whose backend never
//      asks (no graph, no kernels, the eager backend) sends "no program"
//      from finish_shared_compile(), so the ranks stay paired whatever each
//      traced. Only when every rank names the same program and some rank
//      lacks it do they go on to 2; otherwise each rank compiles alone.
//   2. one KernelBlob all-gather (header graph hash = the program key, so a
//      rank with another program is a CollectiveMismatch): every rank's
//      share. Each blob is verified (graph hash, checksum) before the
//      backend may link it; a bad one is a ValueError naming its rank.
#pragma once

#include "output_graph/backend.h"
#include "output_graph/compiler_collective.h"

namespace kiln::output_graph {

// The SharedCompile a backend sees for this compile (bound to `ds`, which
// must outlive it).
SharedCompile make_shared_compile(DistributedState& ds);

// After the compile: the KernelPlan exchange for a compile whose backend did
// not run one. No-op when sharing is off or the plan already ran.
void finish_shared_compile(DistributedState& ds);

// Test hook: KILN_TEST_CORRUPT_KERNEL_BLOB=<rank> makes that rank flip a
// byte of the object code it sends after its checksum was computed (what a
// corrupted transfer or a faulty sender looks like to the receivers).
inline constexpr const char* kCorruptKernelBlobEnv = "KILN_TEST_CORRUPT_KERNEL_BLOB";

}  // namespace kiln::output_graph

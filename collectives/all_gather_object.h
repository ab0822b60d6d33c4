// all_gather_object: every rank's object, in rank order. Each message
// carries `header` (what the rank believes it is doing); ranks that disagree
// all raise CollectiveMismatch, and a rank that never arrives makes the
// others raise CollectiveTimeout after the group's collective_timeout_s.
#pragma once

#include <optional>
#include <vector>

#include "collectives/messages.h"
#include "collectives/process_group.h"

namespace kiln::collectives {

// T is CompilerLocalState, GuardOutcome, KernelPlan or KernelBlob. On a single-rank
// group this is a copy: no encoding, no MPI. `timeout_s` overrides the
// group's collective_timeout_s for this call (a caller's own setting, such
// as kiln::Options::collective_timeout_s, must not change a shared group).
template <class T>
void all_gather_object(std::vector<T>& out, const T& obj, ProcessGroup& group,
                       const CollectiveHeader& header,
                       std::optional<double> timeout_s = std::nullopt);

extern template void all_gather_object(std::vector<CompilerLocalState>&, const CompilerLocalState&,
                                       ProcessGroup&, const CollectiveHeader&,
                                       std::optional<double>);
extern template void all_gather_object(std::vector<GuardOutcome>&, const GuardOutcome&,
                                       ProcessGroup&, const CollectiveHeader&,
                                       std::optional<double>);
extern template void all_gather_object(std::vector<KernelBlob>&, const KernelBlob&, ProcessGroup&,
                                       const CollectiveHeader&, std::optional<double>);
extern template void all_gather_object(std::vector<KernelPlan>&, const KernelPlan&, ProcessGroup&,
                                       const CollectiveHeader&, std::optional<double>);

}  // namespace kiln::collectives

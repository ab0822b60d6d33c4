#include "collectives/all_gather_object.h"

#include <chrono>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "collectives/codec.h"
#include "collectives/errors.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"

namespace kiln::collectives {

namespace {

std::string describe(const CollectiveHeader& h) {
  return "frame '" + h.frame_id + "' #" + std::to_string(h.compile_seq);
}

// Compares every rank with rank 0. Every rank runs this on the same gathered
// messages, so every rank reaches the same verdict and the same words.
void check_agreement(const std::vector<Message>& msgs, const ProcessGroup& group) {
  const Message& m0 = msgs[0];
  std::vector<int> ranks;
  std::string detail;
  for (size_t r = 1; r < msgs.size(); ++r) {
    const Message& m = msgs[r];
    std::string who = group.describe_rank(static_cast<int>(r));
    std::string diff;
    if (m.kind != m0.kind) {
      diff = who + " is in all_gather_object(" + message_kind_name(m.kind) + ") for " +
             describe(m.header) + " but " + group.describe_rank(0) + " is in all_gather_object(" +
             message_kind_name(m0.kind) + ") for " + describe(m0.header);
    } else if (m.header.frame_id != m0.header.frame_id ||
               m.header.compile_seq != m0.header.compile_seq) {
      diff = who + " is compiling " + describe(m.header) + " but " + group.describe_rank(0) +
             " is compiling " + describe(m0.header);
    } else if (m.header.graph_hash != m0.header.graph_hash) {
      diff = who + " has graph " + m.header.graph_hash.hex() + " for " + describe(m.header) +
             " but " + group.describe_rank(0) + " has graph " + m0.header.graph_hash.hex();
    }
    if (diff.empty()) continue;
    ranks.push_back(static_cast<int>(r));
    detail += (detail.empty() ? "" : "; ") + diff;
  }
  if (!ranks.empty())
    throw CollectiveMismatch(group.name(), std::move(ranks),
                             detail + " (the ranks took different paths through the program)");
}

}  // namespace

template <class T>
void all_gather_object(std::vector<T>& out, const T& obj, ProcessGroup& group,
                       const CollectiveHeader& header, std::optional<double> timeout_s) {
  const auto start = Clock::now();
  auto* log = log::get("collectives");
  if (group.size() == 1) {
    out.assign(1, obj);
    if (log) log->debug("all_gather_object({}) {} in group '{}': single rank, no exchange",
                        message_kind_name(T::kind), describe(header), group.name());
    return;
  }
  std::string what = std::string("all_gather_object(") + message_kind_name(T::kind) + ") for " +
                     describe(header);
  std::vector<uint8_t> mine = encode(header, obj);
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeout_s.value_or(group.config().collective_timeout_s)));
  GatheredBytes all = group.all_gather_bytes(mine, what, deadline);

  std::vector<Message> msgs;
  msgs.reserve(static_cast<size_t>(all.size()));
  for (int r = 0; r < all.size(); ++r) {
    try {
      msgs.push_back(decode(all.of(r)));
    } catch (const Error& e) {
      throw_error(e.kind(), group.describe_rank(r) + " of group '" + group.name() +
                                "' sent an unreadable message in " + what + ": " + e.message());
    }
  }
  check_agreement(msgs, group);
  out.clear();
  out.reserve(msgs.size());
  for (Message& m : msgs) out.push_back(std::get<T>(std::move(m.body)));

  if (log) {
    double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    log->info("{} in group '{}' ({} ranks): sent {} B, received {} B, {:.1f} us", what,
              group.name(), group.size(), mine.size(), all.bytes.size(), us);
  }
}

template void all_gather_object(std::vector<CompilerLocalState>&, const CompilerLocalState&,
                                ProcessGroup&, const CollectiveHeader&, std::optional<double>);
template void all_gather_object(std::vector<GuardOutcome>&, const GuardOutcome&, ProcessGroup&,
                                const CollectiveHeader&, std::optional<double>);
template void all_gather_object(std::vector<KernelBlob>&, const KernelBlob&, ProcessGroup&,
                                const CollectiveHeader&, std::optional<double>);
template void all_gather_object(std::vector<KernelPlan>&, const KernelPlan&, ProcessGroup&,
                                const CollectiveHeader&, std::optional<double>);

}  // namespace kiln::collectives

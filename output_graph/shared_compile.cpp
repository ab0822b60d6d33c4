#include "output_graph/shared_compile.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

#include "collectives/all_gather_object.h"
#include "collectives/kernel_blob.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"

namespace kiln::output_graph {

namespace {

using collectives::Hash128;

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

collectives::CollectiveHeader plan_header(const DistributedState& ds) {
  return collectives::CollectiveHeader{ds.header.frame_id, ds.header.compile_seq, Hash128{}};
}

// Step 1 on this rank; `mine.kernels == 0`: no program. Returns the
// writer rank (see SharedCompile::agree) or -1.
int exchange_plan(DistributedState& ds, const collectives::KernelPlan& mine) {
  if (ds.kernel_plan_done) return -1;  // one plan per compile: a second program compiles alone
  ds.kernel_plan_done = true;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<collectives::KernelPlan> all;
  collectives::all_gather_object(all, mine, *ds.group, plan_header(ds), ds.timeout_s);
  ds.kernel_exchange_ms += ms_since(t0);
  bool same = true;
  int writer = -1;
  for (size_t r = 0; r < all.size(); ++r) {
    const auto& p = all[r];
    same = same && p.kernels > 0 && p.kernels == all[0].kernels && p.graph_hash == all[0].graph_hash;
    if (!p.have && writer < 0) writer = int(r);
  }
  if (!same && mine.kernels > 0)
    if (auto* log = kiln::log::get("collectives"))
      log->info("shared compile of frame '{}' #{}: the ranks' programs differ, each rank compiles its own",
                ds.header.frame_id, ds.header.compile_seq);
  ds.kernels_shared = same && writer >= 0;
  return ds.kernels_shared ? writer : -1;
}

}  // namespace

SharedCompile make_shared_compile(DistributedState& ds) {
  SharedCompile sc;
  sc.rank = ds.group->rank();
  sc.size = ds.group->size();
  auto key = std::make_shared<Hash128>();
  sc.agree = [&ds, key](uint64_t hi, uint64_t lo, uint32_t kernels, bool have) {
    *key = Hash128{lo, hi};
    return exchange_plan(ds, collectives::KernelPlan{*key, kernels, have});
  };
  sc.exchange = [&ds, key](const KernelPart& mine) {
    if (!ds.kernels_shared)
      throw_error(ErrorKind::RuntimeError, "shared compile: exchange() without an agreed plan (a kiln bug)");
    ds.kernels_shared = false;  // one exchange per plan
    auto t0 = std::chrono::steady_clock::now();
    collectives::ProcessGroup& group = *ds.group;
    collectives::KernelBlob blob = collectives::make_kernel_blob(
        *key, mine.begin, mine.end,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mine.object.data()), mine.object.size()));
    if (const char* bad = std::getenv(kCorruptKernelBlobEnv);
        bad && *bad && std::atoi(bad) == group.rank() && !blob.object.empty())
      blob.object[blob.object.size() / 2] ^= 0x5a;
    std::vector<collectives::KernelBlob> all;
    collectives::all_gather_object(all, blob, group,
                                   collectives::CollectiveHeader{ds.header.frame_id, ds.header.compile_seq, *key},
                                   ds.timeout_s);
    ds.kernel_bytes_sent += mine.object.size();
    std::vector<KernelPart> parts;
    parts.reserve(all.size());
    // Every blob is checked before any is handed back: the backend links
    // none of them unless all are what this rank expects.
    for (size_t r = 0; r < all.size(); ++r) {
      try {
        collectives::verify_kernel_blob(all[r], *key);
      } catch (const Error& e) {
        throw_error(e.kind(), "shared compile of frame '" + ds.header.frame_id + "' #" +
                                  std::to_string(ds.header.compile_seq) + ": the kernels " +
                                  group.describe_rank(int(r)) + " sent were rejected and not linked: " +
                                  e.message());
      }
      ds.kernel_bytes_received += all[r].object.size();
      parts.push_back(KernelPart{all[r].kernel_begin, all[r].kernel_end,
                                 std::string(all[r].object.begin(), all[r].object.end())});
    }
    ds.kernel_exchange_ms += ms_since(t0);
    return parts;
  };
  return sc;
}

void finish_shared_compile(DistributedState& ds) {
  if (!ds.share_compile || ds.kernel_plan_done) return;
  exchange_plan(ds, collectives::KernelPlan{});
}

}  // namespace kiln::output_graph

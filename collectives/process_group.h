// ProcessGroup: the ranks that take part in a collective. Everything above
// collectives/ talks to this interface only; the single-rank group is the
// default, so no caller branches on "distributed or not".
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/config.h"

namespace kiln::collectives {

using Clock = std::chrono::steady_clock;

// Every rank's bytes, back to back in rank order.
struct GatheredBytes {
  std::vector<uint8_t> bytes;
  std::vector<size_t> offsets;  // size() + 1 entries; rank r is [offsets[r], offsets[r+1])

  int size() const { return offsets.empty() ? 0 : static_cast<int>(offsets.size()) - 1; }
  std::span<const uint8_t> of(int rank) const {
    return {bytes.data() + offsets[rank], offsets[rank + 1] - offsets[rank]};
  }
};

class ProcessGroup {
 public:
  explicit ProcessGroup(Config config) : config_(config) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;
  // "rank 1", or "rank 1 (world rank 3)" in a sub-group: errors name ranks
  // the way the user launched them.
  virtual std::string describe_rank(int rank) const;

  // Every rank's `mine`, in rank order. `what` names the operation in
  // errors. Past `deadline` the ranks that arrived raise CollectiveTimeout
  // and the group is poisoned: the abandoned operation leaves MPI in an
  // undefined state, so every later collective on it raises at once.
  virtual GatheredBytes all_gather_bytes(std::span<const uint8_t> mine, std::string_view what,
                                         Clock::time_point deadline) = 0;

  const Config& config() const { return config_; }
  void set_config(const Config& c) { config_ = c; }

 private:
  Config config_;
};

// The group of one: gathering is a copy, and it never touches MPI.
std::shared_ptr<ProcessGroup> make_single_rank_group(const Config& config = Config{});

}  // namespace kiln::collectives

// The default group. Kept free of MPI so a program that never runs under
// mpirun pays nothing for the collectives.
#include "collectives/process_group.h"

namespace kiln::collectives {

namespace {
class SingleRankGroup final : public ProcessGroup {
 public:
  using ProcessGroup::ProcessGroup;
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  GatheredBytes all_gather_bytes(std::span<const uint8_t> mine, std::string_view,
                                 Clock::time_point) override {
    return GatheredBytes{{mine.begin(), mine.end()}, {0, mine.size()}};
  }

 private:
  std::string name_ = "single";
};
}  // namespace

std::shared_ptr<ProcessGroup> make_single_rank_group(const Config& config) {
  return std::make_shared<SingleRankGroup>(config);
}

}  // namespace kiln::collectives

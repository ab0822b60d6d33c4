// ProcessGroup over an MPI communicator. Collectives are nonblocking MPI
// polled against a deadline, because a blocking MPI_Allgather waits forever
// for a rank that crashed, stalled or took another branch.
#include "collectives/mpi_group.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <cstring>
#include <mutex>
#include <thread>

#include "collectives/errors.h"
#include "collectives/mpi_plugin_loader.h"
#include "runtime/base/error.h"

namespace kiln::collectives {

namespace {

// A size no rank can send: marks a rank whose slot had not reached us.
constexpr uint64_t kNotArrived = ~uint64_t{0};

// Phase 1 exchanges one fixed-size slot per rank: the byte count, and the
// bytes themselves when they fit. 256 B costs the same latency as 8 B and
// holds a typical compiler-state or guard message.
constexpr size_t kInline = 248;
struct Slot {
  uint64_t size;
  uint8_t data[kInline];
};
static_assert(sizeof(Slot) == 256);

// Buffers and requests of one all-gather. When the deadline passes, MPI
// still owns them: a late rank may arrive and MPI write into them the next
// time this process enters MPI (even inside MPI_Finalize). So an abandoned
// operation is leaked, never freed.
struct Pending {
  Slot mine;
  std::vector<Slot> slots;
  std::vector<uint8_t> send;
  std::vector<uint8_t> recv;
  std::vector<int> counts, displs;
  // Set only while an operation is in flight; wait() frees it once done.
  // An operation still in flight is abandoned (with its request), so a
  // Pending is never destroyed with one.
  KilnMpiRequest* req = nullptr;
  ~Pending() { assert(req == nullptr && "a Pending in flight must be abandoned, not freed"); }
};

void abandon(std::unique_ptr<Pending> op) {
  static auto* graveyard = new std::vector<std::unique_ptr<Pending>>();
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  graveyard->push_back(std::move(op));
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class MpiGroup final : public ProcessGroup {
 public:
  // Takes ownership of `comm`.
  MpiGroup(const KilnMpiPlugin& mpi, KilnMpiComm* comm, std::string name,
           std::vector<int> world_ranks, const Config& config)
      : ProcessGroup(config), mpi_(mpi), comm_(comm), name_(std::move(name)),
        world_ranks_(std::move(world_ranks)) {
    mpi_.comm_rank(comm_, &rank_);
    mpi_.comm_size(comm_, &size_);
  }

  ~MpiGroup() override {
    int finalized = 0;
    mpi_.finalized(&finalized);
    // A poisoned communicator still has an operation in flight; freeing it
    // would wait on that operation.
    if (!finalized && poisoned_.empty()) mpi_.comm_free(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::string describe_rank(int rank) const override {
    std::string s = "rank " + std::to_string(rank);
    if (is_subgroup_ && rank >= 0 && rank < size_)
      s += " (world rank " + std::to_string(world_ranks_[rank]) + ")";
    return s;
  }

  const KilnMpiPlugin& mpi() const { return mpi_; }
  KilnMpiComm* comm() const { return comm_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  void mark_subgroup() { is_subgroup_ = true; }

  GatheredBytes all_gather_bytes(std::span<const uint8_t> mine, std::string_view what,
                                 Clock::time_point deadline) override {
    // Collectives on one communicator must be issued in one order by every
    // rank; two threads racing here would break that, so serialise them.
    std::lock_guard<std::mutex> lock(mu_);
    if (!poisoned_.empty())
      throw_error(ErrorKind::RuntimeError, "collectives: group '" + name_ +
                                               "' cannot be used any more: " + poisoned_);
    const Clock::time_point start = Clock::now();
    auto op = std::make_unique<Pending>();

    // Phase 1: every rank's byte count, and its bytes too when they fit the
    // inline slot: a compiler-state or guard message is one collective.
    op->mine.size = mine.size();
    if (!mine.empty()) std::memcpy(op->mine.data, mine.data(), std::min(mine.size(), kInline));
    op->slots.resize(static_cast<size_t>(size_));
    for (Slot& s : op->slots) s.size = kNotArrived;
    check(mpi_.iallgather(&op->mine, sizeof(Slot), op->slots.data(), comm_, &op->req),
          "MPI_Iallgather", what, op);
    if (!wait(op, deadline, what)) {
      // Reading the receive buffer of an unfinished operation tells which
      // slots had reached this rank: with OpenMPI's linear nonblocking
      // allgather a missing one is a rank that has not called the collective.
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r)
        if (r != rank_ && op->slots[static_cast<size_t>(r)].size == kNotArrived) missing.push_back(r);
      std::string who;
      if (missing.empty()) {
        who = "every rank's size had arrived, yet the exchange did not finish";
      } else {
        who = "nothing had arrived from ";
        for (size_t i = 0; i < missing.size(); ++i)
          who += (i ? ", " : "") + describe_rank(missing[i]);
        who += " (not arrived at this collective, or stalled)";
      }
      time_out(std::move(op), what, start, deadline, std::move(missing), who);
    }

    // Every rank sees the same sizes, so every rank takes the same branches.
    GatheredBytes out;
    out.offsets.resize(static_cast<size_t>(size_) + 1, 0);
    uint64_t total = 0, large = 0;
    for (int r = 0; r < size_; ++r) {
      uint64_t n = op->slots[static_cast<size_t>(r)].size;
      if (n > static_cast<uint64_t>(INT_MAX) || large + n > static_cast<uint64_t>(INT_MAX))
        throw_error(ErrorKind::ValueError,
                    "collectives: " + std::string(what) + " in group '" + name_ +
                        "': the messages add up to more than 2 GiB (" + describe_rank(r) +
                        " sent " + std::to_string(n) + " bytes); MPI counts are int");
      if (n > kInline) large += n;
      total += n;
      out.offsets[static_cast<size_t>(r) + 1] = total;
    }
    out.bytes.resize(total);
    for (int r = 0; r < size_; ++r) {
      const Slot& s = op->slots[static_cast<size_t>(r)];
      if (s.size <= kInline && s.size > 0)
        std::memcpy(out.bytes.data() + out.offsets[static_cast<size_t>(r)], s.data, s.size);
    }
    if (large == 0) return out;

    // Phase 2: the messages too big for their slot. The send buffer is
    // copied because the caller's may be gone by the time a late rank makes
    // MPI read it.
    if (mine.size() > kInline) op->send.assign(mine.begin(), mine.end());
    op->recv.resize(large);
    op->counts.resize(static_cast<size_t>(size_));
    op->displs.resize(static_cast<size_t>(size_));
    uint64_t at = 0;
    for (int r = 0; r < size_; ++r) {
      uint64_t n = op->slots[static_cast<size_t>(r)].size;
      op->counts[static_cast<size_t>(r)] = n > kInline ? static_cast<int>(n) : 0;
      op->displs[static_cast<size_t>(r)] = static_cast<int>(at);
      if (n > kInline) at += n;
    }
    check(mpi_.iallgatherv(op->send.data(), static_cast<int>(op->send.size()), op->recv.data(),
                           op->counts.data(), op->displs.data(), comm_, &op->req),
          "MPI_Iallgatherv", what, op);
    if (!wait(op, deadline, what))
      time_out(std::move(op), what, start, deadline, {},
               "every rank had sent its size, but the payload exchange did not finish");
    for (int r = 0; r < size_; ++r) {
      size_t i = static_cast<size_t>(r);
      if (op->counts[i] > 0)
        std::memcpy(out.bytes.data() + out.offsets[i], op->recv.data() + op->displs[i],
                    static_cast<size_t>(op->counts[i]));
    }
    return out;
  }

 private:
  // Polls with MPI_Test: spins briefly (a collective between ranks that are
  // all present takes microseconds), then yields, then sleeps, so a rank
  // waiting on a slow peer does not take the CPU it needs.
  bool wait(std::unique_ptr<Pending>& op, Clock::time_point deadline, std::string_view what) {
    const Clock::time_point start = Clock::now();
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(mpi_.test(op->req, &done), "MPI_Test", what, op);
      if (done) {
        mpi_.request_free(op->req);
        op->req = nullptr;
        return true;
      }
      Clock::time_point now = Clock::now();
      if (now >= deadline) return false;
      if (polls < 64) continue;
      if (now - start < std::chrono::milliseconds(2)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  void check(int rc, const char* call, std::string_view what, std::unique_ptr<Pending>& op) {
    if (rc == 0) return;
    std::string msg = std::string(call) + " failed during " + std::string(what) + ": " +
                      mpi_error_string(mpi_, rc);
    poisoned_ = msg;
    abandon(std::move(op));
    throw_error(ErrorKind::RuntimeError, "collectives: group '" + name_ + "': " + msg);
  }

  // The limit printed is this call's (deadline - start): a caller may pass
  // its own timeout instead of the group's collective_timeout_s.
  [[noreturn]] void time_out(std::unique_ptr<Pending> op, std::string_view what,
                             Clock::time_point start, Clock::time_point deadline,
                             std::vector<int> missing, const std::string& who) {
    double elapsed = seconds_since(start);
    double limit = std::chrono::duration<double>(deadline - start).count();
    char secs[64];
    std::snprintf(secs, sizeof secs, "%.2f s (collective_timeout_s = %.3g)", elapsed, limit);
    std::string detail = std::string(what) + " on " + describe_rank(rank_) + " of " +
                         std::to_string(size_) + " gave up after " + secs + ": " + who +
                         "; the group cannot be used any more";
    poisoned_ = "an earlier " + std::string(what) + " timed out after " + secs +
                " and MPI's state is undefined after an abandoned collective";
    if (!missing.empty())
      poisoned_ += std::string(missing.size() == 1 ? " (rank " : " (ranks ") + rank_list(missing) +
                   " had not arrived)";
    abandon(std::move(op));
    throw CollectiveTimeout(name_, std::move(missing), elapsed, detail);
  }

  const KilnMpiPlugin& mpi_;
  KilnMpiComm* comm_;
  std::string name_;
  std::vector<int> world_ranks_;
  int rank_ = 0, size_ = 1;
  bool is_subgroup_ = false;
  std::mutex mu_;
  std::string poisoned_;  // why the group is unusable; empty while it is fine
};

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_world_group(const KilnMpiPlugin& mpi, const Config& config) {
  KilnMpiComm* comm = nullptr;
  const char* failed = "MPI_Comm_dup(MPI_COMM_WORLD)";
  // The plugin sets MPI_ERRORS_RETURN on it: failures come back as codes we
  // turn into kiln errors, instead of MPI's default of aborting the job.
  check_mpi(mpi, mpi.comm_dup_world(&comm, &failed), failed);
  int n = 0;
  mpi.comm_size(comm, &n);
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ranks[static_cast<size_t>(i)] = i;
  return std::make_shared<MpiGroup>(mpi, comm, "world", std::move(ranks), config);
}

std::shared_ptr<ProcessGroup> make_mpi_subgroup(ProcessGroup& parent,
                                                const std::vector<int>& world_ranks,
                                                std::string name) {
  auto* mp = dynamic_cast<MpiGroup*>(&parent);
  if (!mp) throw_error(ErrorKind::ValueError, "collectives: new_group needs an MPI world group");
  const std::vector<int>& pw = mp->world_ranks();
  if (world_ranks.empty())
    throw_error(ErrorKind::ValueError, "collectives: new_group needs at least one rank");
  std::vector<int> parent_ranks;
  for (int w : world_ranks) {
    auto it = std::find(pw.begin(), pw.end(), w);
    if (it == pw.end())
      throw_error(ErrorKind::ValueError, "collectives: new_group: world rank " + std::to_string(w) +
                                             " is not in group '" + parent.name() + "'");
    int pr = static_cast<int>(it - pw.begin());
    if (std::find(parent_ranks.begin(), parent_ranks.end(), pr) != parent_ranks.end())
      throw_error(ErrorKind::ValueError,
                  "collectives: new_group: world rank " + std::to_string(w) + " is listed twice");
    parent_ranks.push_back(pr);
  }
  if (std::find(parent_ranks.begin(), parent_ranks.end(), parent.rank()) == parent_ranks.end())
    throw_error(ErrorKind::ValueError,
                "collectives: new_group: world rank " + std::to_string(pw[static_cast<size_t>(parent.rank())]) +
                    " called new_group([" + rank_list(world_ranks) +
                    "]) but is not in it (only the listed ranks call it)");
  if (name.empty()) name = parent.name() + "[" + rank_list(world_ranks) + "]";

  const KilnMpiPlugin& mpi = mp->mpi();
  KilnMpiComm* comm = nullptr;
  const char* failed = "MPI_Comm_create_group";
  // The tag keeps concurrent creations of different groups apart.
  check_mpi(mpi, mpi.comm_create_group(mp->comm(), parent_ranks.data(), static_cast<int>(parent_ranks.size()),
                                       /*tag=*/0x6b6c, &comm, &failed),
            failed);
  std::vector<int> ranks;
  for (int pr : parent_ranks) ranks.push_back(pw[static_cast<size_t>(pr)]);
  auto g = std::make_shared<MpiGroup>(mpi, comm, std::move(name), std::move(ranks), parent.config());
  g->mark_subgroup();
  return g;
}

}  // namespace kiln::collectives

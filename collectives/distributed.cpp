#include "collectives/distributed.h"

#include <cstdlib>
#include <mutex>

#include <spdlog/spdlog.h>

#include "collectives/mpi_group.h"
#include "collectives/mpi_plugin_loader.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"

namespace kiln::collectives {

namespace {

struct State {
  std::mutex mu;
  std::shared_ptr<ProcessGroup> world;  // set by init()
  std::shared_ptr<ProcessGroup> single = make_single_rank_group();
  const KilnMpiPlugin* mpi = nullptr;  // set by init() under a launcher: then the world is MPI's
  bool we_initialised = false;
  int thread_level = -1;
};

// Never destroyed: groups must outlive every static that might still run a
// collective at exit, and finalize_at_exit decides when MPI goes.
State& state() {
  static State* s = new State();
  return *s;
}

void finalize_at_exit() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.world.reset();  // frees the world communicator while MPI is still up
  int finalized = 0;
  s.mpi->finalized(&finalized);
  if (!finalized) s.mpi->finalize();
}

// The variable that shows an MPI launcher started this process, or null.
const char* launcher_variable() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return v;
  return nullptr;
}

}  // namespace

bool launched_by_mpi() { return launcher_variable() != nullptr; }

std::shared_ptr<ProcessGroup> init(const Config& config) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.world) {
    s.world->set_config(config);
    return s.world;
  }
  const char* launcher = launcher_variable();
  if (!launcher) {
    s.world = make_single_rank_group(config);
    return s.world;
  }
  // Under a launcher the plugin is a must: a rank that quietly ran alone
  // would make its compile decisions alone, and the ranks would diverge.
  const KilnMpiPlugin& mpi = load_mpi_plugin(
      "init(): " + std::string(launcher) +
      " is set, so an MPI launcher started this process and kiln needs its MPI plugin");
  int initialized = 0;
  check_mpi(mpi, mpi.initialized(&initialized), "MPI_Initialized");
  if (initialized) {
    int finalized = 0;
    check_mpi(mpi, mpi.finalized(&finalized), "MPI_Finalized");
    if (finalized)
      throw_error(ErrorKind::RuntimeError,
                  "collectives: init(): MPI was already finalized, it cannot be used again");
    check_mpi(mpi, mpi.query_thread(&s.thread_level), "MPI_Query_thread");
  } else {
    int provided = 0;
    // MULTIPLE lets compile threads and the program's own MPI calls coexist;
    // a lower level is accepted and recorded, groups serialise their own calls.
    check_mpi(mpi, mpi.init_thread(&provided), "init(): MPI_Init_thread");
    s.thread_level = provided;
    s.we_initialised = true;
    s.mpi = &mpi;  // finalize_at_exit's
    std::atexit(finalize_at_exit);
  }
  s.world = make_mpi_world_group(mpi, config);
  s.mpi = &mpi;
  if (auto* log = log::get("collectives"))
    log->info("init: rank {} of {}, MPI thread level {}{}", s.world->rank(), s.world->size(),
              s.thread_level, s.we_initialised ? ", initialised by kiln" : ", adopted");
  return s.world;
}

std::shared_ptr<ProcessGroup> default_group() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.world ? s.world : s.single;
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& world_ranks, std::string name) {
  State& s = state();
  std::shared_ptr<ProcessGroup> world;
  bool is_mpi;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    world = s.world ? s.world : s.single;
    is_mpi = s.mpi != nullptr && s.world;
  }
  if (is_mpi) return make_mpi_subgroup(*world, world_ranks, std::move(name));
  if (world_ranks.size() == 1 && world_ranks[0] == 0) return make_single_rank_group(world->config());
  throw_error(ErrorKind::ValueError,
              "collectives: new_group: this process is a single-rank world (not launched by "
              "mpirun, or init() not called), so the only possible group is [0]");
}

int mpi_thread_level() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.thread_level;
}

bool kiln_initialised_mpi() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.we_initialised;
}

}  // namespace kiln::collectives

// The MPI plugin seen from one process without mpirun (collectives/
// mpi_plugin_loader.h): where it is looked for, how a bad one is refused,
// that the built one loads, and that a single-rank init() never loads it.
// Under mpirun the plugin is exercised by every multi-rank test, and
// refused plugins by tests/mpi_plugin/test_plugin_refused.sh.
//
// Trap: a loaded plugin stays loaded for the life of the process, so the
// cases that need it unloaded check for that first (ctest runs each case in
// its own process; a plain `kiln_tests` run goes in file order).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "collectives/distributed.h"
#include "collectives/mpi_plugin_loader.h"

using namespace kiln::collectives;

namespace {

struct EnvVar {
  std::string name;
  std::string old;
  bool had;
  EnvVar(const char* n, const char* v) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    ::setenv(n, v, 1);
  }
  ~EnvVar() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

// The files this process has mapped (/proc/self/maps), one path per line.
std::string mapped_files() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream ss;
  ss << maps.rdbuf();
  return ss.str();
}
bool mapped(const std::string& name) { return mapped_files().find(name) != std::string::npos; }

}  // namespace

TEST_CASE("the MPI plugin is looked for beside kiln's binary, or at KILN_MPI_PLUGIN", "[collectives][mpi_plugin]") {
  {
    EnvVar unset("KILN_MPI_PLUGIN", "");  // empty counts as unset
    // kiln_tests links kiln statically: kiln's binary is the program itself.
    auto exe = std::filesystem::read_symlink("/proc/self/exe");
    CHECK(mpi_plugin_path() == (exe.parent_path() / "libkiln_mpi.so").string());
  }
  EnvVar set("KILN_MPI_PLUGIN", "/opt/elsewhere/my_plugin.so");
  CHECK(mpi_plugin_path() == "/opt/elsewhere/my_plugin.so");
}

TEST_CASE("a plugin that cannot be loaded is an error naming the file and dlerror", "[collectives][mpi_plugin]") {
  if (mapped("libkiln_mpi")) {
    WARN("the plugin is already loaded in this process: run this case alone (ctest does)");
    return;
  }
  EnvVar set("KILN_MPI_PLUGIN", "/nonexistent/dir/libkiln_mpi.so");
  CHECK_THROWS_WITH(load_mpi_plugin("because this test asks"),
                    Catch::StartsWith("RuntimeError: collectives: because this test asks; loading the MPI plugin "
                                      "'/nonexistent/dir/libkiln_mpi.so' failed: /nonexistent/dir/libkiln_mpi.so: "
                                      "cannot open shared object file") &&
                        Catch::Contains("KILN_MPI_PLUGIN=/path/to/libkiln_mpi.so names another") &&
                        Catch::Contains("does not fall back to a single rank"));
  CHECK_FALSE(mapped("libmpi"));
}

TEST_CASE("outside mpirun init() loads neither the plugin nor MPI", "[collectives][mpi_plugin]") {
  if (launched_by_mpi()) {
    WARN("running under an MPI launcher: the single-rank world is not testable here");
    return;
  }
  if (mapped("libkiln_mpi")) {
    WARN("the plugin is already loaded in this process: run this case alone (ctest does)");
    return;
  }
  // A plugin path that would fail loudly if init() tried it.
  EnvVar set("KILN_MPI_PLUGIN", "/nonexistent/dir/libkiln_mpi.so");
  CHECK(init()->size() == 1);
  CHECK_FALSE(mapped("libkiln_mpi"));
  CHECK_FALSE(mapped("libmpi"));
  CHECK_FALSE(mapped("libopen-pal"));
}

TEST_CASE("the built plugin loads, brings MPI with it, and answers without MPI_Init", "[collectives][mpi_plugin]") {
  CHECK_FALSE(mapped("libmpi.so"));  // kiln_tests itself does not link MPI
  EnvVar set("KILN_MPI_PLUGIN", KILN_TEST_MPI_PLUGIN);
  const KilnMpiPlugin& mpi = load_mpi_plugin("test");
  CHECK(mpi.abi == KILN_MPI_PLUGIN_ABI);
  CHECK(&load_mpi_plugin("again") == &mpi);  // loaded once
  CHECK(mapped("libmpi.so"));
  int flag = -1;
  CHECK(mpi.initialized(&flag) == 0);
  CHECK(flag == 0);
  CHECK(mpi.finalized(&flag) == 0);
  CHECK(flag == 0);
  CHECK_NOTHROW(check_mpi(mpi, 0, "nothing"));
}

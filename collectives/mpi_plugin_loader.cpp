#include "collectives/mpi_plugin_loader.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include <spdlog/spdlog.h>

#include "runtime/base/error.h"
#include "runtime/base/log.h"

namespace kiln::collectives {

namespace {

// The file of the binary this function's code was loaded from.
std::string kiln_binary() {
  Dl_info info;
  link_map* map = nullptr;
  if (dladdr1(reinterpret_cast<void*>(&kiln_binary), &info, reinterpret_cast<void**>(&map),
              RTLD_DL_LINKMAP) &&
      map && map->l_name && map->l_name[0])
    return map->l_name;  // as the loader found it; not resolved, so a symlinked libkiln.so counts where it is
  // The main program has no name in its link map: kiln is linked into it.
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    throw_error(ErrorKind::RuntimeError,
                "collectives: cannot tell which file holds kiln's code (dladdr and /proc/self/exe "
                "both failed), so the MPI plugin cannot be found next to it; set KILN_MPI_PLUGIN "
                "to the path of " KILN_MPI_PLUGIN_FILE);
  return std::string(exe, static_cast<size_t>(n));
}

}  // namespace

std::string mpi_plugin_path() {
  if (const char* p = std::getenv("KILN_MPI_PLUGIN"); p && *p) return p;
  std::string bin = kiln_binary();
  size_t slash = bin.rfind('/');
  std::string dir = slash == std::string::npos ? "." : bin.substr(0, slash);
  return dir + "/" KILN_MPI_PLUGIN_FILE;
}

const KilnMpiPlugin& load_mpi_plugin(std::string_view why) {
  static std::mutex mu;
  static const KilnMpiPlugin* loaded = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded) return *loaded;

  const std::string path = mpi_plugin_path();
  auto fail = [&](const std::string& what) {
    throw_error(ErrorKind::RuntimeError,
                "collectives: " + std::string(why) + "; " + what +
                    ". The plugin is installed next to libkiln.so (or kiln's Python module "
                    "kiln._C); KILN_MPI_PLUGIN=/path/to/" KILN_MPI_PLUGIN_FILE
                    " names another. kiln does not fall back to a single rank under an MPI "
                    "launcher: each rank would then compile on its own and their graphs could "
                    "differ");
  };
  // RTLD_GLOBAL: libmpi and the libraries it brings join the global scope,
  // as when a program links MPI itself; OpenMPI's own dlopened components
  // expect that (mpi4py loads libmpi the same way).
  // Never unloaded, not even a file refused below: what it loaded (MPI's
  // libraries) may not survive an unload.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* e = dlerror();
    fail("loading the MPI plugin '" + path + "' failed: " + (e ? e : "unknown dlopen error"));
  }
  dlerror();
  auto entry = reinterpret_cast<KilnMpiPluginEntry>(dlsym(handle, KILN_MPI_PLUGIN_ENTRY));
  if (!entry) {
    const char* e = dlerror();
    fail("'" + path + "' is not a kiln MPI plugin (dlsym " KILN_MPI_PLUGIN_ENTRY ": " +
         (e ? e : "null") + ")");
  }
  const KilnMpiPlugin* p = entry();
  if (!p || p->abi != KILN_MPI_PLUGIN_ABI || p->struct_size != sizeof(KilnMpiPlugin)) {
    std::string got = p ? "ABI " + std::to_string(p->abi) + " (" + std::to_string(p->struct_size) + " bytes)"
                        : "no table";
    fail("the MPI plugin '" + path + "' is of " + got + ", this kiln needs ABI " +
         std::to_string(KILN_MPI_PLUGIN_ABI) + " (" + std::to_string(sizeof(KilnMpiPlugin)) +
         " bytes): it comes from another kiln build");
  }
  if (auto* log = log::get("collectives")) log->info("MPI plugin: {}", path);
  loaded = p;
  return *loaded;
}

std::string mpi_error_string(const KilnMpiPlugin& mpi, int rc) {
  char buf[512];
  mpi.error_string(rc, buf, sizeof buf);
  return buf;
}

void check_mpi(const KilnMpiPlugin& mpi, int rc, std::string_view call) {
  if (rc != 0)
    throw_error(ErrorKind::RuntimeError,
                "collectives: " + std::string(call) + " failed: " + mpi_error_string(mpi, rc));
}

}  // namespace kiln::collectives

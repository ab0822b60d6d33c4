// The compile cache (see compile_cache.h).
//
// On-disk entry, all integers little endian, a fixed 56-byte header:
//
//   offset  size  field
//        0     8  magic "KILNKOBJ"
//        8     4  format version (CompileCache::kFormatVersion)
//       12     4  environment length E
//       16    16  the CacheKey: hi, lo
//       32     8  payload length P
//       40    16  XXH3-128 (hi, lo) of bytes [0, 40) ++ environment ++ payload
//       56     E  environment (kiln version, LLVM version, CPU)
//     56+E     P  payload (the object file)
//
// The file size must be exactly 56 + E + P. Every field is compared with
// what the reader expects and the checksum covers everything but itself, so
// a bit flip anywhere is caught. Layout: <dir>/<2 hex>/<32 hex>.kobj, the
// name being XXH3-128 of (key, environment): 256 shard directories keep each
// directory small (as git and ccache do), and mixing the environment into
// the name lets two kiln or LLVM versions (or CPUs, on a shared home) use
// one directory side by side instead of evicting each other's entries.
#include "codegen/compile_cache.h"

#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "runtime/base/log.h"

namespace kiln::codegen {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'K', 'O', 'B', 'J'};
constexpr size_t kHeaderSize = 56;
constexpr size_t kChecksumOffset = 40;
constexpr uint64_t kMaxEntryBytes = uint64_t(1) << 32;  // larger is not an object file of ours

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

// XXH3-128 of header[0, 40) ++ environment ++ payload.
XXH128_hash_t entry_checksum(std::string_view prefix, std::string_view environment, std::string_view payload) {
  XXH3_state_t* st = XXH3_createState();
  if (!st) throw std::bad_alloc();
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, prefix.data(), prefix.size());
  XXH3_128bits_update(st, environment.data(), environment.size());
  XXH3_128bits_update(st, payload.data(), payload.size());
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return h;
}

std::string errno_str(int err) { return std::strerror(err); }

// One line on stderr the first time the disk fails in this process (a full
// disk or an unusable directory should not go unnoticed, nor spam); every
// failure goes to the `cache` log component.
void disk_problem(const std::string& what) {
  if (auto* log = kiln::log::get("cache")) log->warn("{}", what);
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    std::fprintf(stderr, "kiln: warning: compile cache: %s (continuing; further problems: KILN_LOGS=cache)\n",
                 what.c_str());
}

// mkdir with mode 0700; an existing directory must be ours and is narrowed
// to 0700. Returns "" on success, else why not.
std::string ensure_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return "cannot create " + path + ": " + errno_str(errno);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "cannot stat " + path + ": " + errno_str(errno);
  if (!S_ISDIR(st.st_mode)) return path + " is not a directory";
  if (st.st_uid != ::geteuid()) return path + " is owned by another user";
  if ((st.st_mode & 07777) != 0700 && ::chmod(path.c_str(), 0700) != 0)
    return "cannot chmod 0700 " + path + ": " + errno_str(errno);
  return "";
}

// mkdir -p: missing parents are created 0700 too (the XDG base directory
// spec asks that of ~/.cache); existing parents are left as they are.
std::string ensure_private_dir_tree(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    std::string parent = path.substr(0, slash);
    if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST)
      return "cannot create " + parent + ": " + errno_str(errno);
  }
  return ensure_private_dir(path);
}

bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = ENOSPC;
      return false;
    }
    p += r;
    n -= size_t(r);
  }
  return true;
}

// Why `file` is not a valid entry for (key, environment), or "" if it is.
std::string verify_entry(std::string_view file, const CacheKey& key, std::string_view environment) {
  if (file.size() < kHeaderSize) return "truncated header";
  const char* h = file.data();
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) return "bad magic";
  uint32_t version = get_u32(h + 8);
  if (version != CompileCache::kFormatVersion)
    return "format version " + std::to_string(version) + ", expected " + std::to_string(CompileCache::kFormatVersion);
  uint64_t env_len = get_u32(h + 12);
  if (get_u64(h + 16) != key.hi || get_u64(h + 24) != key.lo) return "entry of another key";
  if (env_len != environment.size()) return "another environment";
  uint64_t payload_len = get_u64(h + 32);
  if (payload_len > kMaxEntryBytes || kHeaderSize + env_len + payload_len != file.size())
    return "size " + std::to_string(file.size()) + " does not match the header (truncated?)";
  if (file.compare(kHeaderSize, env_len, environment) != 0) return "another environment";
  XXH128_hash_t sum = entry_checksum(file.substr(0, kChecksumOffset), environment,
                                     file.substr(kHeaderSize + env_len));
  if (get_u64(h + kChecksumOffset) != sum.high64 || get_u64(h + kChecksumOffset + 8) != sum.low64)
    return "checksum mismatch";
  return "";
}

}  // namespace

std::string CacheKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)hi, (unsigned long long)lo);
  return std::string(buf, 32);
}

CacheKey cache_key(std::initializer_list<std::string_view> parts) {
  XXH3_state_t* st = XXH3_createState();
  if (!st) throw std::bad_alloc();
  XXH3_128bits_reset(st);
  for (std::string_view part : parts) {
    std::string len;
    put_u64(len, part.size());
    XXH3_128bits_update(st, len.data(), len.size());
    XXH3_128bits_update(st, part.data(), part.size());
  }
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return CacheKey{h.high64, h.low64};
}

namespace detail {
std::string encode_entry(const CacheKey& key, std::string_view environment, std::string_view payload,
                         uint32_t format_version) {
  std::string out;
  out.reserve(kHeaderSize + environment.size() + payload.size());
  out.append(kMagic, sizeof kMagic);
  put_u32(out, format_version);
  put_u32(out, uint32_t(environment.size()));
  put_u64(out, key.hi);
  put_u64(out, key.lo);
  put_u64(out, payload.size());
  XXH128_hash_t sum = entry_checksum(out, environment, payload);
  put_u64(out, sum.high64);
  put_u64(out, sum.low64);
  assert(out.size() == kHeaderSize);
  out.append(environment);
  out.append(payload);
  return out;
}
}  // namespace detail

CompileCache::CompileCache(std::string dir, std::string environment)
    : dir_(std::move(dir)), environment_(std::move(environment)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (dir_.empty()) return;
  if (environment_.size() > UINT32_MAX) return;  // cannot be stored: memory only
  std::string why = ensure_private_dir_tree(dir_);
  if (!why.empty()) {
    disk_problem("disk cache disabled: " + why);
    return;
  }
  disk_enabled_ = true;
  if (auto* log = kiln::log::get("cache")) log->info("compile cache at {}", dir_);
}

std::string CompileCache::default_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  std::string dir = env("KILN_CACHE_DIR");
  if (dir == "off" || dir == "0") return "";
  if (!dir.empty()) return dir;
  std::string xdg = env("XDG_CACHE_HOME");
  if (!xdg.empty() && xdg[0] == '/') return xdg + "/kiln";  // the XDG spec: relative paths are invalid
  std::string home = env("HOME");
  if (!home.empty()) return home + "/.cache/kiln";
  return "";
}

namespace {
std::atomic<bool> global_cache_made{false};
}

bool CompileCache::global_made() { return global_cache_made.load(); }

CompileCache& CompileCache::global(const std::string& environment) {
  // Never destroyed: kernels may be looked up from other static destructors.
  static CompileCache* cache = [&] {
    auto* c = new CompileCache(default_dir(), environment);
    global_cache_made = true;
    return c;
  }();
  assert(cache->environment() == environment && "CompileCache::global: one environment per process");
  return *cache;
}

std::string CompileCache::entry_path(const CacheKey& key) const {
  if (dir_.empty()) return "";
  std::string name = cache_key({"kiln.compile_cache", key.hex(), environment_}).hex();
  return dir_ + "/" + name.substr(0, 2) + "/" + name + ".kobj";
}

std::optional<std::string> CompileCache::get(const CacheKey& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memory_.find(key);
    if (it != memory_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  std::optional<std::string> bytes;
  if (disk_enabled_) bytes = read_disk(key, entry_path(key));
  std::lock_guard<std::mutex> lock(mu_);
  if (!bytes) {
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.disk_hits;
  memory_.try_emplace(key, *bytes);
  return bytes;
}

void CompileCache::put(const CacheKey& key, std::string_view bytes, bool to_disk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    memory_.insert_or_assign(key, std::string(bytes));
  }
  if (disk_enabled_ && to_disk) write_disk(key, entry_path(key), bytes);
}

std::optional<std::string> CompileCache::read_disk(const CacheKey& key, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno != ENOENT) disk_problem("cannot open " + path + ": " + errno_str(errno));
    return std::nullopt;
  }
  struct stat st = {};
  std::string file;
  std::string why;
  if (::fstat(fd, &st) != 0) why = "cannot stat: " + errno_str(errno);
  else if (!S_ISREG(st.st_mode)) why = "not a regular file";
  else if (uint64_t(st.st_size) > kMaxEntryBytes) why = "too large";
  else {
    file.resize(size_t(st.st_size));
    if (!read_all(fd, file.data(), file.size())) why = "short read (truncated?)";
    else why = verify_entry(file, key, environment_);
  }
  ::close(fd);
  if (why.empty()) {
    if (auto* log = kiln::log::get("cache")) log->debug("disk hit {} ({} bytes)", path, file.size());
    return file.substr(kHeaderSize + environment_.size());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.rejected;
  }
  if (auto* log = kiln::log::get("cache")) log->info("rejected {}: {}; recompiling", path, why);
  // Best effort, and only the file we read: a writer may have renamed a good
  // entry over it since.
  struct stat now;
  if (S_ISREG(st.st_mode) && ::lstat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
    ::unlink(path.c_str());
  return std::nullopt;
}

void CompileCache::write_disk(const CacheKey& key, const std::string& path, std::string_view bytes) {
  size_t slash = path.rfind('/');
  std::string shard = path.substr(0, slash);
  std::string why = ensure_private_dir(shard);
  if (!why.empty()) {
    disk_problem("not writing " + path + ": " + why);
    return;
  }
  static std::atomic<uint64_t> counter{0};
  std::string tmp = shard + "/." + path.substr(slash + 1) + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) + "." +
                    std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    disk_problem("cannot create " + tmp + ": " + errno_str(errno));
    return;
  }
  // No fsync: after a crash the rename may land before the data, which the
  // checksum catches (the entry is rejected and recompiled).
  std::string entry = detail::encode_entry(key, environment_, bytes);
  bool ok = write_all(fd, entry.data(), entry.size());
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    disk_problem("cannot write " + path + ": " + errno_str(err));
    return;
  }
  if (auto* log = kiln::log::get("cache")) log->debug("wrote {} ({} bytes)", path, entry.size());
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.writes;
}

CacheStats CompileCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CompileCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mu_);
  memory_.clear();
}

}  // namespace kiln::codegen

// The compile cache: memory and disk hits, keys, rejection of bad entries
// (truncated, bit flips, other environment / format version / key), the
// directory's permissions, disk failures, and concurrent writers (threads and
// processes) racing readers.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>

#include "codegen/compile_cache.h"

namespace fs = std::filesystem;
using kiln::codegen::cache_key;
using kiln::codegen::CacheKey;
using kiln::codegen::CompileCache;

namespace {

const std::string kEnv = "kiln 0.1.0|LLVM 19.1.7|x86_64-pc-linux-gnu|skylake|+avx,+avx2,+fma";
const std::string kOtherEnv = "kiln 0.2.0|LLVM 19.1.7|x86_64-pc-linux-gnu|skylake|+avx,+avx2,+fma";

struct TempDir {
  std::string path;
  TempDir() {
    char buf[] = "/tmp/kiln_compile_cache_XXXXXX";
    REQUIRE(::mkdtemp(buf) != nullptr);
    path = buf;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string sub(const std::string& name) const { return path + "/" + name; }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}
unsigned mode_of(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}
// Regular files under `dir`, recursively (entries and any temp files).
std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path().string());
  return out;
}

// A deterministic payload per (writer, key) of a length no other writer uses,
// so a truncated or interleaved entry can never equal a valid one.
std::string payload(int writer, int key, size_t base = 4096) {
  std::string s(base + 997 * size_t(writer) + 131 * size_t(key), '\0');
  uint64_t x = uint64_t(writer) * 1000003u + uint64_t(key) * 7919u + 1;
  for (char& c : s) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = char(x >> 56);
  }
  return s;
}
std::string binary_payload() {
  std::string s;
  for (int i = 0; i < 3; ++i)
    for (int b = 0; b < 256; ++b) s.push_back(char(b));  // NULs and every byte value
  return s;
}

CacheKey key_of(int i) { return cache_key({"graph", std::to_string(i)}); }

// Sets or unsets environment variables for a scope, restoring them after.
struct EnvGuard {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& name, const char* value) {
    const char* old = std::getenv(name.c_str());
    saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) ::setenv(name.c_str(), value, 1);
    else ::unsetenv(name.c_str());
  }
  ~EnvGuard() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }
};

// Puts `bytes` under `key` with a fresh cache, damages the file with `damage`,
// and checks that a fresh reader rejects it, removes it, and that a re-put
// then works.
template <class Damage>
void expect_rejected_after(const TempDir& tmp, const CacheKey& key, const std::string& bytes, Damage damage) {
  CompileCache writer(tmp.path, kEnv);
  writer.put(key, bytes);
  std::string path = writer.entry_path(key);
  REQUIRE(fs::exists(path));
  std::string file = read_file(path);
  damage(file);
  write_file(path, file);

  CompileCache reader(tmp.path, kEnv);
  CHECK_FALSE(reader.get(key).has_value());
  CHECK(reader.stats().rejected == 1);
  CHECK(reader.stats().misses == 1);
  CHECK(reader.stats().disk_hits == 0);
  CHECK_FALSE(fs::exists(path));  // the bad entry is removed

  reader.put(key, bytes);
  CompileCache again(tmp.path, kEnv);
  auto got = again.get(key);
  REQUIRE(got.has_value());
  CHECK(*got == bytes);
  CHECK(again.stats().disk_hits == 1);
}

}  // namespace

TEST_CASE("compile cache: hit after put, in memory", "[compile_cache]") {
  CompileCache cache("", kEnv);
  CHECK(cache.dir().empty());
  CHECK_FALSE(cache.disk_enabled());
  CHECK(cache.entry_path(key_of(1)).empty());
  CHECK_FALSE(cache.get(key_of(1)).has_value());
  cache.put(key_of(1), "object bytes");
  auto got = cache.get(key_of(1));
  REQUIRE(got.has_value());
  CHECK(*got == "object bytes");
  auto s = cache.stats();
  CHECK(s.memory_hits == 1);
  CHECK(s.misses == 1);
  CHECK(s.disk_hits == 0);
  CHECK(s.writes == 0);
  // A later put replaces the bytes; clear_memory forgets them.
  cache.put(key_of(1), "newer");
  CHECK(cache.get(key_of(1)) == std::optional<std::string>("newer"));
  cache.clear_memory();
  CHECK_FALSE(cache.get(key_of(1)).has_value());
}

TEST_CASE("compile cache: disk hit from a fresh instance", "[compile_cache]") {
  TempDir tmp;
  const std::string bytes = binary_payload();
  {
    CompileCache writer(tmp.path, kEnv);
    REQUIRE(writer.disk_enabled());
    CHECK(writer.dir() == tmp.path);
    writer.put(key_of(1), bytes);
    writer.put(key_of(2), "");  // an empty payload is a valid entry
    CHECK(writer.stats().writes == 2);
    CHECK(writer.get(key_of(1)) == std::optional<std::string>(bytes));
    CHECK(writer.stats().memory_hits == 1);
    // <dir>/<2 hex>/<32 hex>.kobj
    fs::path p = writer.entry_path(key_of(1));
    CHECK(p.parent_path().parent_path() == fs::path(tmp.path));
    CHECK(p.extension() == ".kobj");
    CHECK(p.stem().string().size() == 32);
    CHECK(p.parent_path().filename().string() == p.stem().string().substr(0, 2));
    CHECK(mode_of(p.string()) == 0600);
  }
  CompileCache reader(tmp.path, kEnv);
  auto got = reader.get(key_of(1));
  REQUIRE(got.has_value());
  CHECK(*got == bytes);
  CHECK(reader.get(key_of(2)) == std::optional<std::string>(""));
  CHECK(reader.stats().disk_hits == 2);
  CHECK(reader.stats().memory_hits == 0);
  // The disk hit is kept in memory.
  CHECK(reader.get(key_of(1)) == std::optional<std::string>(bytes));
  CHECK(reader.stats().disk_hits == 2);
  CHECK(reader.stats().memory_hits == 1);
  CHECK(reader.stats().rejected == 0);
  CHECK(files_under(tmp.path).size() == 2);  // no temp files left behind
}

TEST_CASE("compile cache: a different key misses", "[compile_cache]") {
  TempDir tmp;
  CompileCache writer(tmp.path, kEnv);
  writer.put(cache_key({"graph: add(x, y)"}), "add kernel");
  CompileCache reader(tmp.path, kEnv);
  CHECK_FALSE(reader.get(cache_key({"graph: mul(x, y)"})).has_value());
  CHECK(reader.stats().misses == 1);
  CHECK(reader.stats().rejected == 0);
  CHECK(reader.get(cache_key({"graph: add(x, y)"})) == std::optional<std::string>("add kernel"));
  CHECK(writer.get(cache_key({"graph: mul(x, y)"})) == std::nullopt);
}

TEST_CASE("compile cache: cache_key is sensitive to every part and length-prefixed", "[compile_cache]") {
  CacheKey base = cache_key({"graph", "kiln 0.1.0", "LLVM 19", "skylake"});
  CHECK(base == cache_key({"graph", "kiln 0.1.0", "LLVM 19", "skylake"}));
  CHECK_FALSE(base == cache_key({"graph2", "kiln 0.1.0", "LLVM 19", "skylake"}));
  CHECK_FALSE(base == cache_key({"graph", "kiln 0.1.1", "LLVM 19", "skylake"}));
  CHECK_FALSE(base == cache_key({"graph", "kiln 0.1.0", "LLVM 18", "skylake"}));
  CHECK_FALSE(base == cache_key({"graph", "kiln 0.1.0", "LLVM 19", "znver4"}));
  CHECK_FALSE(base == cache_key({"kiln 0.1.0", "graph", "LLVM 19", "skylake"}));
  // Boundaries matter: the parts are length-prefixed.
  CHECK_FALSE(cache_key({"ab", "c"}) == cache_key({"a", "bc"}));
  CHECK_FALSE(cache_key({"abc"}) == cache_key({"ab", "c"}));
  CHECK_FALSE(cache_key({"a"}) == cache_key({"a", ""}));
  CHECK_FALSE(cache_key({}) == cache_key({""}));
  // Both halves carry entropy.
  CHECK(base.hi != 0);
  CHECK(base.lo != 0);
  CHECK_FALSE(cache_key({"x"}).hi == cache_key({"y"}).hi);
  CHECK_FALSE(cache_key({"x"}).lo == cache_key({"y"}).lo);
  // Exactly XXH3-128 over (u64 little-endian length ++ bytes) per part.
  std::string framed = std::string("\x03\0\0\0\0\0\0\0", 8) + "abc" + std::string("\x01\0\0\0\0\0\0\0", 8) + "d";
  XXH128_hash_t h = XXH3_128bits(framed.data(), framed.size());
  CacheKey k = cache_key({"abc", "d"});
  CHECK(k.hi == h.high64);
  CHECK(k.lo == h.low64);
  // hex(): 32 lowercase digits, hi then lo.
  CacheKey fixed{0x0123456789abcdefull, 0xfedcba9876543210ull};
  CHECK(fixed.hex() == "0123456789abcdeffedcba9876543210");
  CHECK(CacheKey{}.hex() == std::string(32, '0'));
}

TEST_CASE("compile cache: a truncated entry is rejected, then re-put works", "[compile_cache]") {
  const CacheKey key = key_of(7);
  const std::string bytes = payload(0, 7);
  const size_t header = 56 + kEnv.size();
  for (size_t keep : {size_t(0), size_t(1), size_t(20), size_t(55), size_t(56), header - 1, header, header + 1,
                      header + bytes.size() / 2, header + bytes.size() - 1}) {
    DYNAMIC_SECTION("truncated to " << keep << " bytes") {
      TempDir tmp;
      expect_rejected_after(tmp, key, bytes, [&](std::string& f) {
        REQUIRE(keep < f.size());
        f.resize(keep);
      });
    }
  }
  SECTION("a byte appended") {
    TempDir tmp;
    expect_rejected_after(tmp, key, bytes, [](std::string& f) { f.push_back('\0'); });
  }
}

TEST_CASE("compile cache: a bit flip in the payload is rejected", "[compile_cache]") {
  const CacheKey key = key_of(3);
  const std::string bytes = payload(1, 3);
  const size_t header = 56 + kEnv.size();
  for (size_t at : {size_t(0), bytes.size() / 3, bytes.size() - 1}) {
    for (int bit : {0, 7}) {
      DYNAMIC_SECTION("payload byte " << at << " bit " << bit) {
        TempDir tmp;
        expect_rejected_after(tmp, key, bytes, [&](std::string& f) { f[header + at] ^= char(1 << bit); });
      }
    }
  }
}

TEST_CASE("compile cache: a bit flip anywhere in the header is rejected", "[compile_cache]") {
  const CacheKey key = key_of(4);
  const std::string bytes = payload(2, 4, 512);
  const size_t header = 56 + kEnv.size();  // fixed fields and the environment
  TempDir tmp;
  CompileCache writer(tmp.path, kEnv);
  writer.put(key, bytes);
  const std::string path = writer.entry_path(key);
  const std::string good = read_file(path);
  REQUIRE(good.size() == header + bytes.size());
  for (size_t at = 0; at < header; ++at) {
    for (int bit : {0, 5}) {
      std::string bad = good;
      bad[at] ^= char(1 << bit);
      write_file(path, bad);
      CompileCache reader(tmp.path, kEnv);
      INFO("header byte " << at << " bit " << bit);
      CHECK_FALSE(reader.get(key).has_value());
      CHECK(reader.stats().rejected == 1);
      CHECK_FALSE(fs::exists(path));
    }
  }
  // The undamaged bytes are accepted (the loop above rejected flips, not everything).
  write_file(path, good);
  CompileCache reader(tmp.path, kEnv);
  CHECK(reader.get(key) == std::optional<std::string>(bytes));
}

TEST_CASE("compile cache: an entry of another environment is never returned", "[compile_cache]") {
  TempDir tmp;
  const CacheKey key = key_of(5);
  CompileCache old_kiln(tmp.path, kOtherEnv);
  old_kiln.put(key, "kernel for kiln 0.2.0");

  SECTION("the same key under another environment misses; both versions coexist") {
    CompileCache cache(tmp.path, kEnv);
    CHECK_FALSE(cache.get(key).has_value());
    CHECK(cache.stats().misses == 1);
    CHECK(cache.entry_path(key) != old_kiln.entry_path(key));
    cache.put(key, "kernel for kiln 0.1.0");
    CompileCache fresh_old(tmp.path, kOtherEnv), fresh_new(tmp.path, kEnv);
    CHECK(fresh_old.get(key) == std::optional<std::string>("kernel for kiln 0.2.0"));
    CHECK(fresh_new.get(key) == std::optional<std::string>("kernel for kiln 0.1.0"));
  }
  SECTION("a well-formed entry of another environment at our path is rejected and removed") {
    CompileCache cache(tmp.path, kEnv);
    const std::string path = cache.entry_path(key);
    fs::create_directories(fs::path(path).parent_path());
    fs::copy_file(old_kiln.entry_path(key), path);
    CHECK_FALSE(cache.get(key).has_value());
    CHECK(cache.stats().rejected == 1);
    CHECK_FALSE(fs::exists(path));
    CHECK(fs::exists(old_kiln.entry_path(key)));  // the other version's own entry is untouched
  }
  SECTION("an environment that differs only in length is rejected") {
    CompileCache cache(tmp.path, kEnv);
    const std::string path = cache.entry_path(key);
    write_file(path, kiln::codegen::detail::encode_entry(key, kEnv + " ", "x"));
    CHECK_FALSE(cache.get(key).has_value());
    CHECK(cache.stats().rejected == 1);
  }
}

TEST_CASE("compile cache: an entry of another format version is rejected", "[compile_cache]") {
  TempDir tmp;
  const CacheKey key = key_of(6);
  CompileCache cache(tmp.path, kEnv);
  const std::string path = cache.entry_path(key);
  using kiln::codegen::detail::encode_entry;
  // The harness is sound: the current version, written by hand, is accepted.
  write_file(path, encode_entry(key, kEnv, "current"));
  CHECK(cache.get(key) == std::optional<std::string>("current"));
  CHECK(cache.stats().disk_hits == 1);
  cache.clear_memory();
  for (uint32_t v : {CompileCache::kFormatVersion + 1, CompileCache::kFormatVersion - 1, 0xffffffffu}) {
    write_file(path, encode_entry(key, kEnv, "future", v));
    CompileCache reader(tmp.path, kEnv);
    INFO("format version " << v);
    CHECK_FALSE(reader.get(key).has_value());
    CHECK(reader.stats().rejected == 1);
    CHECK_FALSE(fs::exists(path));
  }
}

TEST_CASE("compile cache: an entry of another key at our path is rejected", "[compile_cache]") {
  TempDir tmp;
  CompileCache cache(tmp.path, kEnv);
  const std::string path = cache.entry_path(key_of(1));
  write_file(path, kiln::codegen::detail::encode_entry(key_of(2), kEnv, "kernel of key 2"));
  CHECK_FALSE(cache.get(key_of(1)).has_value());
  CHECK(cache.stats().rejected == 1);
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("compile cache: directories are created owner-only", "[compile_cache]") {
  TempDir tmp;
  mode_t old_umask = ::umask(0);  // the modes must come from the code, not the umask
  SECTION("missing directories are created 0700") {
    const std::string dir = tmp.sub("a/b/kiln");
    CompileCache cache(dir, kEnv);
    REQUIRE(cache.disk_enabled());
    CHECK(mode_of(tmp.sub("a")) == 0700);
    CHECK(mode_of(tmp.sub("a/b")) == 0700);
    CHECK(mode_of(dir) == 0700);
    cache.put(key_of(1), "bytes");
    const std::string path = cache.entry_path(key_of(1));
    CHECK(mode_of(fs::path(path).parent_path().string()) == 0700);
    CHECK(mode_of(path) == 0600);
  }
  SECTION("an existing directory of ours is narrowed to 0700") {
    const std::string dir = tmp.sub("wide");
    REQUIRE(::mkdir(dir.c_str(), 0777) == 0);
    REQUIRE(mode_of(dir) == 0777);
    CompileCache cache(dir, kEnv);
    CHECK(cache.disk_enabled());
    CHECK(mode_of(dir) == 0700);
    // and so is an existing shard directory
    const std::string shard = fs::path(cache.entry_path(key_of(1))).parent_path().string();
    REQUIRE(::mkdir(shard.c_str(), 0755) == 0);
    cache.put(key_of(1), "bytes");
    CHECK(mode_of(shard) == 0700);
  }
  ::umask(old_umask);
}

TEST_CASE("compile cache: disk failures are ignored, never thrown", "[compile_cache]") {
  TempDir tmp;
  SECTION("the directory is a file: memory only") {
    write_file(tmp.sub("file"), "not a directory");
    CompileCache cache(tmp.sub("file"), kEnv);
    CHECK_FALSE(cache.disk_enabled());
    CHECK_NOTHROW(cache.put(key_of(1), "bytes"));
    CHECK(cache.get(key_of(1)) == std::optional<std::string>("bytes"));
    CHECK(cache.stats().writes == 0);
  }
  SECTION("the shard directory cannot be created") {
    CompileCache cache(tmp.path, kEnv);
    const std::string shard = fs::path(cache.entry_path(key_of(1))).parent_path().string();
    write_file(shard, "in the way");
    CHECK_NOTHROW(cache.put(key_of(1), "bytes"));
    CHECK(cache.stats().writes == 0);
    CHECK(cache.get(key_of(1)) == std::optional<std::string>("bytes"));  // memory still works
    CompileCache other(tmp.path, kEnv);
    CHECK_NOTHROW(other.get(key_of(1)));
    CHECK(other.stats().disk_hits == 0);
  }
}

TEST_CASE("compile cache: concurrent writer threads and readers", "[compile_cache]") {
  TempDir tmp;
  constexpr int kWriters = 6, kSharedKeys = 3, kRounds = 15;
  // Key i < kSharedKeys: every writer writes it; key kSharedKeys + w: writer w only.
  auto valid = [&](int key, const std::string& bytes) {
    if (key >= kSharedKeys) return bytes == payload(key - kSharedKeys, key);
    for (int w = 0; w < kWriters; ++w)
      if (bytes == payload(w, key)) return true;
    return false;
  };
  CompileCache shared(tmp.path, kEnv);
  std::atomic<bool> writing{true};
  std::atomic<int> bad{0}, reads{0};
  std::atomic<uint64_t> rejected{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w)
    threads.emplace_back([&, w] {
      CompileCache own(tmp.path, kEnv);
      CompileCache& cache = (w % 2) ? shared : own;  // one instance shared across threads, and one per thread
      for (int r = 0; r < kRounds; ++r) {
        for (int k = 0; k < kSharedKeys; ++k) cache.put(key_of(k), payload(w, k));
        cache.put(key_of(kSharedKeys + w), payload(w, kSharedKeys + w));
      }
      rejected += own.stats().rejected;
    });
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      CompileCache reader(tmp.path, kEnv);
      while (writing.load()) {
        for (int k = 0; k < kSharedKeys + kWriters; ++k) {
          reader.clear_memory();  // read the disk every time
          if (auto got = reader.get(key_of(k))) {
            ++reads;
            if (!valid(k, *got)) ++bad;
          }
        }
      }
      rejected += reader.stats().rejected;
    });
  for (int w = 0; w < kWriters; ++w) threads[size_t(w)].join();
  writing = false;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();

  CHECK(bad == 0);
  CHECK(rejected + shared.stats().rejected == 0);  // no reader ever saw a partial entry
  CompileCache fresh(tmp.path, kEnv);
  for (int k = 0; k < kSharedKeys + kWriters; ++k) {
    auto got = fresh.get(key_of(k));
    REQUIRE(got.has_value());
    CHECK(valid(k, *got));
  }
  CHECK(files_under(tmp.path).size() == size_t(kSharedKeys + kWriters));  // no temp files left
  INFO("reads during writing: " << reads.load());
}

TEST_CASE("compile cache: concurrent writer and reader processes", "[compile_cache]") {
  TempDir tmp;
  constexpr int kWriters = 4, kReaders = 2, kSharedKeys = 3, kRounds = 20;
  constexpr size_t kBase = 64 * 1024;  // large enough that a write takes several syscalls
  auto valid = [&](int key, const std::string& bytes) {
    if (key >= kSharedKeys) return bytes == payload(key - kSharedKeys, key, kBase);
    for (int w = 0; w < kWriters; ++w)
      if (bytes == payload(w, key, kBase)) return true;
    return false;
  };
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> writers, readers;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      CompileCache cache(tmp.path, kEnv);
      for (int r = 0; r < kRounds; ++r) {
        for (int k = 0; k < kSharedKeys; ++k) cache.put(key_of(k), payload(w, k, kBase));
        cache.put(key_of(kSharedKeys + w), payload(w, kSharedKeys + w, kBase));
      }
      ::_exit(cache.stats().writes == uint64_t(kRounds * (kSharedKeys + 1)) ? 0 : 10);
    }
    writers.push_back(pid);
  }
  const std::string stop_file = tmp.sub("stop");  // outside the cache's shards; readers poll it
  for (int t = 0; t < kReaders; ++t) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      CompileCache reader(tmp.path, kEnv);
      int status = 0;
      for (;;) {
        bool last = ::access(stop_file.c_str(), F_OK) == 0;  // one more full pass after the writers finish
        for (int k = 0; k < kSharedKeys + kWriters; ++k) {
          reader.clear_memory();
          auto got = reader.get(key_of(k));
          if (got && !valid(k, *got)) status = 20;
          if (last && !got) status = 21;  // every key is written by then
        }
        if (last) break;
      }
      if (reader.stats().rejected != 0) status = 22;
      ::_exit(status);
    }
    readers.push_back(pid);
  }
  auto exit_code = [](pid_t pid) {
    int st = 0;
    if (::waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  };
  for (pid_t pid : writers) CHECK(exit_code(pid) == 0);
  write_file(stop_file, "");
  for (pid_t pid : readers) CHECK(exit_code(pid) == 0);  // 20: torn read, 21: missing, 22: rejected

  // This process loads every entry the children wrote.
  CompileCache fresh(tmp.path, kEnv);
  for (int k = 0; k < kSharedKeys + kWriters; ++k) {
    auto got = fresh.get(key_of(k));
    REQUIRE(got.has_value());
    CHECK(valid(k, *got));
  }
  CHECK(fresh.stats().disk_hits == uint64_t(kSharedKeys + kWriters));
  CHECK(files_under(tmp.path).size() == size_t(kSharedKeys + kWriters + 1));  // + the stop file; no temp files
}

TEST_CASE("compile cache: directory from the environment; KILN_CACHE_DIR=off is memory only", "[compile_cache]") {
  EnvGuard env;
  env.set("HOME", "/home/someone");
  env.set("XDG_CACHE_HOME", nullptr);
  env.set("KILN_CACHE_DIR", nullptr);
  CHECK(CompileCache::default_dir() == "/home/someone/.cache/kiln");
  ::setenv("XDG_CACHE_HOME", "/xdg/cache", 1);
  CHECK(CompileCache::default_dir() == "/xdg/cache/kiln");
  ::setenv("XDG_CACHE_HOME", "relative/cache", 1);  // invalid per the XDG spec: ignored
  CHECK(CompileCache::default_dir() == "/home/someone/.cache/kiln");
  ::setenv("KILN_CACHE_DIR", "/var/tmp/kiln-cache", 1);
  CHECK(CompileCache::default_dir() == "/var/tmp/kiln-cache");
  ::setenv("KILN_CACHE_DIR", "off", 1);
  CHECK(CompileCache::default_dir().empty());
  ::setenv("KILN_CACHE_DIR", "0", 1);
  CHECK(CompileCache::default_dir().empty());

  // global() in a child process (it is created once per process): off means
  // memory only and nothing on disk; a directory means entries there.
  if (CompileCache::global_made()) {
    // A forked child would inherit this process's cache: only a process
    // that has compiled nothing can run this part (ctest runs each case
    // in its own process, so CI always does).
    WARN("skipped: this process already made the global compile cache; run the case on its own");
    return;
  }
  TempDir tmp;
  auto run_child = [&](const char* kiln_cache_dir, bool expect_disk) {
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // In the temporary directory, so a relative "off" directory (were "off"
      // ignored) lands there and not in the caller's working directory.
      if (::chdir(tmp.path.c_str()) != 0) ::_exit(5);
      ::setenv("KILN_CACHE_DIR", kiln_cache_dir, 1);
      CompileCache& g = CompileCache::global(kEnv);
      int status = 0;
      if (&g != &CompileCache::global(kEnv)) status = 1;
      if (g.disk_enabled() != expect_disk || g.dir().empty() == expect_disk) status = 2;
      g.put(key_of(1), "global bytes");
      if (g.get(key_of(1)) != std::optional<std::string>("global bytes")) status = 3;
      if (g.stats().writes != (expect_disk ? 1u : 0u)) status = 4;
      ::_exit(status);
    }
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
  };
  ::setenv("HOME", tmp.path.c_str(), 1);  // were "off" ignored, the entry would land under here
  ::unsetenv("XDG_CACHE_HOME");
  run_child("off", false);
  CHECK(fs::is_empty(tmp.path));
  run_child(tmp.sub("cache").c_str(), true);
  CHECK(files_under(tmp.sub("cache")).size() == 1);
}

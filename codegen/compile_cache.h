// The compile cache: compiled kernels (object-file bytes) by content hash.
//
// Two levels. In memory: a map from CacheKey to bytes, per process. On disk:
// one file per entry under a directory that only its owner may read or write
// (a planted object file would be code execution), so a warm process loads
// kernels without running LLVM's optimizer or code generator.
//
// An entry on disk is trusted only after every header field and the XXH3-128
// checksum have been verified; a truncated, corrupted, foreign-version or
// foreign-CPU entry is rejected (counted, removed) and the caller recompiles.
// Writes are write-to-temp-then-rename(), so concurrent writers (threads or
// processes) and readers never observe a partial entry. The disk is an
// optimisation: any disk failure is logged and ignored, never thrown.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kiln::codegen {

struct CacheKey {
  uint64_t hi = 0, lo = 0;
  std::string hex() const;  // 32 lowercase hex digits, hi then lo
  bool operator==(const CacheKey&) const = default;
};

// XXH3-128 over the parts, each prefixed by its length (8 bytes, little
// endian), so ("ab", "c") and ("a", "bc") differ.
CacheKey cache_key(std::initializer_list<std::string_view> parts);

struct CacheStats {
  uint64_t memory_hits = 0;  // get() answered from memory
  uint64_t disk_hits = 0;    // get() answered from a verified file
  uint64_t misses = 0;       // get() found nothing usable (rejected entries included)
  uint64_t rejected = 0;     // files that failed verification (and were removed)
  uint64_t writes = 0;       // entries renamed into place on disk
};

class CompileCache {
 public:
  // On-disk format version; bump when the layout of an entry changes.
  static constexpr uint32_t kFormatVersion = 1;

  // dir empty: memory only. `environment` names kiln's version, LLVM's
  // version and the CPU (the caller builds it). It is stored in every entry's
  // header and mixed into the entry's file name; an entry whose environment
  // differs is rejected, never returned.
  CompileCache(std::string dir, std::string environment);
  CompileCache(const CompileCache&) = delete;
  CompileCache& operator=(const CompileCache&) = delete;

  // The process-wide cache, created on first use with `environment` (later
  // calls must pass the same one). Directory: default_dir().
  static CompileCache& global(const std::string& environment);
  // Whether global() has made it in this process (a forked child inherits it).
  static bool global_made();
  // $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln;
  // "" (memory only) when KILN_CACHE_DIR is "off" or "0", or nothing is set.
  static std::string default_dir();

  // Memory, then disk (a disk hit is kept in memory).
  std::optional<std::string> get(const CacheKey& key);
  // Memory and (unless to_disk is false) disk.
  void put(const CacheKey& key, std::string_view bytes, bool to_disk = true);

  CacheStats stats() const;
  void clear_memory();

  // The configured directory ("" when memory only).
  const std::string& dir() const { return dir_; }
  const std::string& environment() const { return environment_; }
  // False when memory only, or when the directory could not be created or
  // is not safely ours (owned by another user): then nothing touches disk.
  bool disk_enabled() const { return disk_enabled_; }
  // Where `key`'s entry lives: <dir>/<2 hex>/<32 hex>.kobj, the name being
  // XXH3-128 of (key, environment). "" when memory only.
  std::string entry_path(const CacheKey& key) const;

 private:
  struct KeyHash {
    size_t operator()(const CacheKey& k) const { return size_t(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull)); }
  };
  std::optional<std::string> read_disk(const CacheKey& key, const std::string& path);
  void write_disk(const CacheKey& key, const std::string& path, std::string_view bytes);

  std::string dir_;
  std::string environment_;
  bool disk_enabled_ = false;
  mutable std::mutex mu_;  // guards memory_ and stats_
  std::unordered_map<CacheKey, std::string, KeyHash> memory_;
  CacheStats stats_;
};

namespace detail {
// The bytes of an on-disk entry (see compile_cache.cpp for the layout).
// Exposed so tests can build well-formed entries of another format version,
// environment or key.
std::string encode_entry(const CacheKey& key, std::string_view environment, std::string_view payload,
                         uint32_t format_version = CompileCache::kFormatVersion);
}  // namespace detail

}  // namespace kiln::codegen

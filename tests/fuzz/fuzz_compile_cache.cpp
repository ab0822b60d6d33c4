// The compile cache's reader (codegen/compile_cache.h) on arbitrary files.
//
// The first byte picks what the rest is:
//   0: the entry file itself, written where the cache looks for one key;
//   1: a payload, sealed as a valid entry for that key (detail::encode_entry),
//      then one byte of it changed (position and value from the input's
//      last bytes) unless the change is empty;
// Invariant: get() never crashes and returns only what a valid entry holds:
// a file it accepts is exactly encode_entry(key, environment, bytes) of the
// bytes it returns; a sealed entry is returned unchanged, and an entry with
// any one byte changed is refused (the header checks or the checksum).
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "codegen/compile_cache.h"
#include "fuzz_common.h"

namespace {

std::string g_dir;

void write_file(const std::string& path, std::string_view bytes) {
  ::mkdir(path.substr(0, path.rfind('/')).c_str(), 0700);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

// KILN_FUZZ_WRITE_SEEDS=DIR: write seeds of both forms there and exit (how
// tests/fuzz/seeds/fuzz_compile_cache was made).
static void write_seeds(const std::string& dir) {
  using namespace kiln::codegen;
  const CacheKey key = cache_key({"fuzz", "entry"});
  const std::string object = std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(57, '\0');
  auto put = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  };
  put("entry_file", std::string(1, '\0') + detail::encode_entry(key, "kiln-fuzz environment", object));
  put("entry_file_other_env", std::string(1, '\0') + detail::encode_entry(key, "another environment", object));
  put("sealed_payload", std::string(1, '\1') + object);
  put("sealed_payload_flipped", std::string(1, '\1') + object + std::string("\x40\x00\x05", 3));
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("KILN_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  char tmpl[] = "/tmp/kiln-fuzz-cache-XXXXXX";
  if (!::mkdtemp(tmpl)) kiln_fuzz::fail("mkdtemp failed");
  g_dir = tmpl;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace kiln::codegen;
  static CompileCache cache(g_dir, "kiln-fuzz environment");
  if (!cache.disk_enabled()) kiln_fuzz::fail("the cache directory is not usable: " + g_dir);
  const CacheKey key = cache_key({"fuzz", "entry"});
  const std::string path = cache.entry_path(key);
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  cache.clear_memory();
  if (data[0] % 2 == 0) {
    write_file(path, rest);
    std::optional<std::string> got = cache.get(key);
    if (got && detail::encode_entry(key, cache.environment(), *got) != rest)
      kiln_fuzz::fail("the cache accepted a file that is not the entry of what it returned");
  } else {
    std::string entry = detail::encode_entry(key, cache.environment(), rest);
    size_t at = 0;
    uint8_t flip = 0;
    if (rest.size() >= 3) {
      at = (uint8_t(rest[rest.size() - 1]) | (uint8_t(rest[rest.size() - 2]) << 8)) % entry.size();
      flip = uint8_t(rest[rest.size() - 3]);
    }
    entry[at] = char(uint8_t(entry[at]) ^ flip);
    write_file(path, entry);
    std::optional<std::string> got = cache.get(key);
    if (flip == 0 && got != std::optional<std::string>(std::string(rest)))
      kiln_fuzz::fail("a well-formed entry was not returned unchanged");
    if (flip != 0 && got) kiln_fuzz::fail("an entry with byte " + std::to_string(at) + " changed was accepted");
  }
  ::unlink(path.c_str());
  return 0;
}

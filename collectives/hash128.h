// A 128-bit hash as plain data: graph hashes and kernel checksums travel
// between ranks in this form (XXH3-128, the hash codegen's cache uses).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kiln::collectives {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const Hash128&) const = default;
  std::string hex() const;  // 32 hex digits, high half first, as XXH3 prints it
};

Hash128 xxh3_128(std::span<const uint8_t> bytes);

}  // namespace kiln::collectives

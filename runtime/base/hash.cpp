#include "runtime/base/hash.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace kiln::runtime {

namespace {

constexpr int kHashBits = 61;
constexpr uint64_t kModulus = (uint64_t(1) << kHashBits) - 1;
constexpr int64_t kHashInf = 314159;

HashHooks& hooks() {
  static HashHooks h;
  return h;
}
// Whether a str or None has been hashed under the current hooks: a later
// change would leave containers built before with other hashes.
bool& embedder_hashes_used() {
  static bool used = false;
  return used;
}

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

}  // namespace

void set_hash_hooks(const HashHooks& h) {
  if (embedder_hashes_used())
    throw std::logic_error("kiln: set_hash_hooks after a str or None was hashed (containers keep the old hashes)");
  hooks() = h;
}

const HashHooks& hash_hooks() { return hooks(); }

int64_t hash_int(int64_t v) {
  const uint64_t magnitude = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  int64_t x = int64_t(magnitude % kModulus);
  if (v < 0) x = -x;
  return x == -1 ? -2 : x;
}

int64_t hash_double(double v) {
  if (!std::isfinite(v)) {
    if (std::isinf(v)) return v > 0 ? kHashInf : -kHashInf;
    return 0;  // NaN: see hash.h
  }
  int e;
  double m = std::frexp(v, &e);
  int sign = 1;
  if (m < 0) {
    sign = -1;
    m = -m;
  }
  // 28 bits at a time, as CPython does
  uint64_t x = 0;
  while (m) {
    x = ((x << 28) & kModulus) | x >> (kHashBits - 28);
    m *= 268435456.0;  // 2**28
    e -= 28;
    const uint64_t y = uint64_t(m);
    m -= double(y);
    x += y;
    if (x >= kModulus) x -= kModulus;
  }
  e = e >= 0 ? e % kHashBits : kHashBits - 1 - ((-1 - e) % kHashBits);
  x = ((x << e) & kModulus) | x >> (kHashBits - e);
  x = x * uint64_t(int64_t(sign));
  return int64_t(x) == -1 ? -2 : int64_t(x);
}

int64_t hash_pointer(const void* p) {
  const uint64_t y = uint64_t(reinterpret_cast<uintptr_t>(p));
  const int64_t x = int64_t((y >> 4) | (y << 60));
  return x == -1 ? -2 : x;
}

int64_t hash_none() {
  embedder_hashes_used() = true;
  return hooks().none_hash;
}

uint64_t siphash13(uint64_t k0, uint64_t k1, const void* src, size_t n) {
  uint64_t b = uint64_t(n) << 56;
  const auto* in = static_cast<const uint8_t*>(src);
  uint64_t v0 = k0 ^ 0x736f6d6570736575ULL;
  uint64_t v1 = k1 ^ 0x646f72616e646f6dULL;
  uint64_t v2 = k0 ^ 0x6c7967656e657261ULL;
  uint64_t v3 = k1 ^ 0x7465646279746573ULL;
  auto round = [&] {
    v0 += v1;
    v2 += v3;
    v1 = rotl(v1, 13) ^ v0;
    v3 = rotl(v3, 16) ^ v2;
    v0 = rotl(v0, 32);
    v2 += v1;
    v0 += v3;
    v1 = rotl(v1, 17) ^ v2;
    v3 = rotl(v3, 21) ^ v0;
    v2 = rotl(v2, 32);
  };
  // Little-endian words, as CPython reads them (_le64toh) on any host.
  auto load = [](const uint8_t* p, size_t len) {
    uint64_t w = 0;
    for (size_t i = 0; i < len; ++i) w |= uint64_t(p[i]) << (8 * i);
    return w;
  };
  while (n >= 8) {
    const uint64_t mi = load(in, 8);
    in += 8;
    n -= 8;
    v3 ^= mi;
    round();
    v0 ^= mi;
  }
  b |= load(in, n);
  v3 ^= b;
  round();
  v0 ^= b;
  v2 ^= 0xff;
  round();
  round();
  round();
  return (v0 ^ v1) ^ (v2 ^ v3);
}

int64_t hash_str(std::string_view s) {
  embedder_hashes_used() = true;
  // CPython's representation: ASCII and Latin-1 one byte per code point,
  // then UCS-2, then UCS-4 (native byte order, little-endian here).
  bool ascii = true;
  for (unsigned char c : s)
    if (c >= 0x80) {
      ascii = false;
      break;
    }
  const void* data = s.data();
  int64_t nbytes = int64_t(s.size());
  std::vector<uint8_t> ucs1;
  std::vector<uint16_t> ucs2;
  std::vector<uint32_t> ucs4;
  if (!ascii) {
    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    uint32_t max_cp = 0;
    for (size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
      for (int k = 1; k < len && i + size_t(k) < s.size(); ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + size_t(k)]) & 0x3F);
      i += size_t(len);
      cps.push_back(cp);
      if (cp > max_cp) max_cp = cp;
    }
    if (max_cp < 0x100) {
      ucs1.assign(cps.begin(), cps.end());
      data = ucs1.data();
      nbytes = int64_t(ucs1.size());
    } else if (max_cp < 0x10000) {
      ucs2.assign(cps.begin(), cps.end());
      data = ucs2.data();
      nbytes = int64_t(ucs2.size() * 2);
    } else {
      ucs4 = std::move(cps);
      data = ucs4.data();
      nbytes = int64_t(ucs4.size() * 4);
    }
  }
  if (auto* f = hooks().hash_bytes) return f(data, nbytes);
  if (nbytes == 0) return 0;
  const int64_t x = int64_t(siphash13(0, 0, data, size_t(nbytes)));
  return x == -1 ? -2 : x;
}

void TupleHash::add(int64_t item_hash) {
  acc_ += uint64_t(item_hash) * 14029467366897019727ULL;  // _PyHASH_XXPRIME_2
  acc_ = rotl(acc_, 31);
  acc_ *= 11400714785074694791ULL;  // _PyHASH_XXPRIME_1
  ++len_;
}

int64_t TupleHash::finish() const {
  // The length, mangled to keep the historical hash(()).
  const uint64_t acc = acc_ + (len_ ^ (2870177450012600261ULL ^ 3527539UL));
  return acc == uint64_t(-1) ? 1546275796 : int64_t(acc);
}

namespace {
inline uint64_t shuffle_bits(uint64_t h) { return ((h ^ 89869747UL) ^ (h << 16)) * 3644798167UL; }
}  // namespace

void FrozenSetHash::add(int64_t item_hash) { acc_ ^= shuffle_bits(uint64_t(item_hash)); }

int64_t FrozenSetHash::finish(int64_t size) const {
  uint64_t hash = acc_;
  hash ^= (uint64_t(size) + 1) * 1927868237UL;
  hash ^= (hash >> 11) ^ (hash >> 25);
  hash = hash * 69069U + 907133923UL;
  return hash == uint64_t(-1) ? 590923713 : int64_t(hash);
}

}  // namespace kiln::runtime

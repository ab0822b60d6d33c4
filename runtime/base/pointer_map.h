// PointerMap: a map from object addresses to small values, stored in one
// flat array (open addressing, linear probing). It exists for the tracer's
// per-trace tables keyed by module or object identity: std::unordered_map
// allocates a node per entry, and a trace of a 2,000-module model makes
// thousands of such entries — at a few hundred nanoseconds per malloc in a
// fragmented heap, that was a measurable share of the trace.
//
// Invariants: null is the empty-slot marker (never a key); the table is at
// most half full, so a probe always ends at an empty slot; entries are never
// erased (the tables live for one trace).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kiln::runtime {

template <class K, class V>
class PointerMap {
 public:
  size_t size() const { return size_; }

  V* find(const K* key) {
    if (slots_.empty()) return nullptr;
    for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (!slots_[i].key) return nullptr;
    }
  }
  const V* find(const K* key) const { return const_cast<PointerMap*>(this)->find(key); }

  // Inserts (key, value) unless key is present; returns the stored value and
  // whether it was inserted (std::unordered_map::emplace's contract).
  std::pair<V*, bool> emplace(const K* key, V value) {
    if (2 * (size_ + 1) > slots_.size()) rehash(capacity_for(size_ + 1));
    for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
      Slot& s = slots_[i];
      if (s.key == key) return {&s.value, false};
      if (!s.key) {
        s.key = key;
        s.value = std::move(value);
        ++size_;
        return {&s.value, true};
      }
    }
  }

 private:
  struct Slot {
    const K* key = nullptr;
    V value{};
  };
  std::vector<Slot> slots_;  // size is 0 or a power of two
  size_t size_ = 0;

  static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
  }
  size_t slot_of(const K* key) const {
    // Fibonacci hashing of the address: its low bits are alignment zeros.
    const uint64_t h = uint64_t(reinterpret_cast<uintptr_t>(key)) * 0x9E3779B97F4A7C15ull;
    return size_t(h >> 32) & (slots_.size() - 1);
  }
  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    size_ = 0;
    for (Slot& s : old)
      if (s.key) emplace(s.key, std::move(s.value));
  }
};

}  // namespace kiln::runtime

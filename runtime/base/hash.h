// CPython 3.11's hash functions, bit for bit (Python/pyhash.c,
// Objects/longobject.c, floatobject.c, tupleobject.c, rangeobject.c). A set
// iterates in the order of its hash table (runtime/semantics/set_ops.h), so kiln's
// sets follow CPython's order only when every element hashes exactly as
// CPython hashes it; value_hash (semantics/value_ops.h) is built from these.
//
// Two hashes only the embedding interpreter knows:
// - str: siphash13 over CPython's internal representation of the string,
//   keyed by the interpreter's per-process secret (PYTHONHASHSEED). Under
//   Python, python/ installs the interpreter's own _Py_HashBytes; without
//   an embedder (the C++ API, the `kiln` CLI) the key is zero, which is
//   what CPython uses with PYTHONHASHSEED=0.
// - None: CPython 3.11 hashes it by its address (_Py_HashPointer(Py_None)),
//   constant within a process. python/ installs hash(None); without an
//   embedder it is 0xFCA86420 (CPython 3.12's constant hash of None).
// Identity hashes of kiln's own objects (functions, tensors, modules, ...)
// are _Py_HashPointer of the kiln object: CPython hashes its objects by
// address too, so no program can rely on their order.
// NaN: CPython 3.11 hashes each NaN object by its address; a kiln float has
// no identity, so every NaN hashes 0 (CPython 3.9's rule).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln::runtime {

// The embedder's hashes (see above). Install before any str or None is
// hashed: a dict or set built before would keep the old hashes.
struct HashHooks {
  // CPython's _Py_HashBytes: the hash of `n` bytes of a str's internal
  // representation (0 for n == 0, never -1). Null: siphash13, zero key.
  int64_t (*hash_bytes)(const void* data, int64_t n) = nullptr;
  int64_t none_hash = 0xFCA86420;
};
// Throws std::logic_error when a str or None was hashed already.
void set_hash_hooks(const HashHooks& hooks);
const HashHooks& hash_hooks();

int64_t hash_int(int64_t v);     // reduction modulo 2**61 - 1, sign kept, -1 -> -2
int64_t hash_double(double v);   // _Py_HashDouble; inf -> +-314159, NaN -> 0
int64_t hash_pointer(const void* p);  // _Py_HashPointer: the address rotated right by 4
int64_t hash_none();
// str's hash: the UTF-8 text converted to CPython's representation (1, 2
// or 4 bytes per code point, by the largest one), hashed as above.
int64_t hash_str(std::string_view utf8);
// SipHash-1-3 as CPython's pyhash.c computes it (the raw function: no
// special case for empty input, -1 not remapped).
uint64_t siphash13(uint64_t k0, uint64_t k1, const void* src, size_t n);

// tuplehash: xxHash's mixing over the items' hashes, in order.
class TupleHash {
 public:
  void add(int64_t item_hash);
  int64_t finish() const;

 private:
  uint64_t acc_ = 2870177450012600261ULL;  // _PyHASH_XXPRIME_5
  uint64_t len_ = 0;
};

// frozenset_hash: order-independent over the elements' hashes (an xor of
// shuffled bits), then the element count mixed in.
class FrozenSetHash {
 public:
  void add(int64_t item_hash);
  int64_t finish(int64_t size) const;

 private:
  uint64_t acc_ = 0;
};

}  // namespace kiln::runtime

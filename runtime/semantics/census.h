// The object census: an exact leak check for kiln's reference counting,
// compiled in only where asked (-DKILN_OBJECT_CENSUS: the fuzz tree,
// cmake/fuzz.cmake). docs/architecture.md, "Leak checking", says why.
//
// kiln has no cycle collector, so a program's own cycle (`l.append(l)`, a
// function and its globals, `self.me = self`) is never freed, and
// LeakSanitizer cannot tell it from a reference kiln forgot to drop. The
// census can: every Object links itself into one list with a serial
// number, and Object::traverse reports each reference an object owns.
// check() is CPython's cycle detection run as a test: for every live
// object, gc_refs = refcount - references from other live objects. An
// object with gc_refs > 0 is held from outside the object graph (a C++
// owner: a stack, a cache, or nothing at all -- a leak). Objects reachable
// only from each other are garbage cycles: the program's own, not kiln's.
//
// The check is exact when
// - every reference an object owns is reported by its traverse, once per
//   count it holds (a missing one makes its target look held from outside:
//   a false leak, never a hidden one; one reported but not owned drives
//   gc_refs below 0, which check() reports as `overcounted`);
// - the caller has dropped every reference it holds (its Values, the VM,
//   compiled functions) and called kiln::reset() (the compile caches);
// - the process-lifetime caches are known: interned strings (each held
//   once by the intern table) are the only ones check() exempts. Caches
//   built lazily (method tables, builtins) are made old by a warm-up run
//   before the mark: check() judges only objects made after it.
#pragma once

#include "runtime/base/object.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace kiln::runtime::census {

#ifdef KILN_OBJECT_CENSUS
inline constexpr bool kCompiledIn = true;
#else
inline constexpr bool kCompiledIn = false;
#endif

// Marks `o` as held once by a process-lifetime cache (a lazily built method
// table's entry, a static Value): that one reference is not a leak, one
// more is (as for interned strings). Every such cache says so where it
// fills itself: kept explicit, so the list stays short. Returns `o`.
#ifdef KILN_OBJECT_CENSUS
const Object* permanent(const Object* o);
#else
inline const Object* permanent(const Object* o) { return o; }
#endif
template <class V>
const V& permanent_value(const V& v) {  // a Value (any heap kind) or a Ref
  if constexpr (requires { v.is_heap(); }) {
    if (v.is_heap()) permanent(v.obj());
  } else {
    if (v) permanent(v.get());
  }
  return v;
}

#ifdef KILN_OBJECT_CENSUS
// Objects made from now on have a serial >= mark().
uint64_t mark();
// Objects alive now.
size_t live();

struct Report {
  size_t checked = 0;         // objects made since the mark and still alive
  size_t leaked = 0;          // of them, held from outside the object graph: leaks
  size_t held_by_leaks = 0;   // of them, alive only through a leaked object
  size_t held_by_old = 0;     // of them, reachable from an object older than the mark (not judged)
  size_t in_cycles = 0;       // of them, garbage: the program's own cycles
  size_t overcounted = 0;     // of them, objects with more references reported than they count
  std::map<std::string, size_t> leaked_types;       // leaked roots by type
  std::map<std::string, size_t> overcounted_types;  // overcounted objects by type
  std::string samples;  // a few leaked objects described (type, counts, name or text)
  bool ok() const { return leaked == 0 && overcounted == 0; }
  std::string text() const;
};
// Judges every object made since `since` (a mark()). Changes nothing.
Report check(uint64_t since);
// Frees every garbage cycle (any age): holds each member, calls its
// Object::clear, then lets go. Returns how many objects died.
size_t collect();
#endif

}  // namespace kiln::runtime::census

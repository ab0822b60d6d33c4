// Whether this thread's C++ stack is nearly used up. Deep recursion in KBC
// (the VM) or in inlining (the translator) is refused by this check rather
// than by a fixed depth: frame sizes differ by build (sanitizers), and a
// thread's stack may be small or, for a deep model, made large on purpose.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <cstdint>

namespace kiln::interpreter {

inline bool stack_nearly_exhausted() {
  thread_local const uintptr_t floor = [] {
    pthread_attr_t attr;
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return uintptr_t(0);
    pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
    size_t reserve = std::max<size_t>(size / 8, 256 * 1024);  // room for builtins, errors, unwinding
    return reinterpret_cast<uintptr_t>(addr) + reserve;
  }();
  // The frame address, not a local's: under AddressSanitizer's
  // use-after-return detection (on by default with clang) locals live on a
  // "fake stack" in the heap, whose addresses say nothing about this
  // thread's stack (found by tests/fuzz: a three-line program "exhausted"
  // the stack at random).
  return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) < floor;
}

}  // namespace kiln::interpreter

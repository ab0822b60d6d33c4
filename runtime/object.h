// Intrusive reference counting shared by every heap value (strings, lists,
// tensors, modules, ...).
//
// Invariant: a Value graph is used by one thread at a time (the caller's
// thread, or whoever holds the GIL on the Python side). Counts are therefore
// plain integers: an atomic increment would cost every LOAD_FAST in the VM.
// Codegen's worker threads only ever see raw tensor buffers, never Objects.
#pragma once

#include <cstdint>
#include <utility>

namespace kiln::runtime {

class Object {
 public:
  Object() = default;
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  virtual ~Object() = default;

  void incref() const noexcept { ++refcount_; }
  void decref() const noexcept {
    if (__builtin_expect(--refcount_ == 0, 0)) delete this;
  }
  uint32_t refcount() const noexcept { return refcount_; }

 private:
  mutable uint32_t refcount_ = 0;
};

// Owning pointer to an Object subclass.
template <class T>
class Ref {
 public:
  Ref() noexcept = default;
  Ref(std::nullptr_t) noexcept {}
  explicit Ref(T* p) noexcept : p_(p) {
    if (p_) p_->incref();
  }
  Ref(const Ref& o) noexcept : p_(o.p_) {
    if (p_) p_->incref();
  }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  template <class U>
  Ref(const Ref<U>& o) noexcept : p_(o.get()) {
    if (p_) p_->incref();
  }
  ~Ref() {
    if (p_) p_->decref();
  }
  Ref& operator=(Ref o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }

  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  bool operator==(const Ref& o) const noexcept { return p_ == o.p_; }

 private:
  T* p_ = nullptr;
};

template <class T, class... Args>
Ref<T> make_ref(Args&&... args) {
  return Ref<T>(new T(std::forward<Args>(args)...));
}

}  // namespace kiln::runtime

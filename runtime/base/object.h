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

class Object;

// What Object::traverse reports each reference to (CPython's visitproc).
class Visitor {
 public:
  virtual void operator()(const Object* o) = 0;

 protected:
  ~Visitor() = default;
};

class Object {
 public:
#ifdef KILN_OBJECT_CENSUS
  // The census (runtime/semantics/census.h) links every live object, so a leak check
  // can walk them; compiled in only where asked (the fuzz tree), never in a
  // normal build: there Object stays a vtable pointer and a count.
  Object() noexcept;
  virtual ~Object();
#else
  Object() = default;
  virtual ~Object() = default;
#endif
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

  void incref() const noexcept { ++refcount_; }
  void decref() const noexcept {
    if (__builtin_expect(--refcount_ == 0, 0)) delete this;
  }
  uint32_t refcount() const noexcept { return refcount_; }

  // Every reference this object owns (each Value / Ref member, container
  // item, captured value), once per reference it counts: CPython's
  // tp_traverse. Pure, so a new Object type cannot compile without saying
  // what it holds. Exactness is what the census relies on: a reference not
  // reported makes its target look held from outside (a leak report); one
  // reported but not owned could hide a real leak.
  virtual void traverse(Visitor& visit) const = 0;
  // Drops the references through which a cycle can close (CPython's
  // tp_clear); the census calls it on garbage cycles only. Types that hold
  // nothing, or only immutable references made before them, keep the
  // default: every cycle passes through a type that clears.
  virtual void clear() {}

 private:
  mutable uint32_t refcount_ = 0;
#ifdef KILN_OBJECT_CENSUS
  friend struct Census;
  Object* census_prev_;
  Object* census_next_;
  uint64_t census_serial_;
  bool census_permanent_ = false;  // census::permanent
#endif
};
#ifndef KILN_OBJECT_CENSUS
static_assert(sizeof(void*) != 8 || sizeof(Object) == 16, "a normal build's Object is a vtable pointer and a count");
#endif

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

// A Ref's target, for Object::traverse.
template <class T>
void visit(Visitor& v, const Ref<T>& r) {
  if (r) v(r.get());
}

template <class T, class... Args>
Ref<T> make_ref(Args&&... args) {
  return Ref<T>(new T(std::forward<Args>(args)...));
}

}  // namespace kiln::runtime

// Tensors keep their Python identity through a call into kiln code.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "python/src/container_mirror.h"
#include "runtime/value/tensor.h"

namespace kiln::python {

// Python tensor objects keep their identity through kiln code. While a
// scope is active (a compiled call, a module call from Python), each
// kiln.Tensor object converted to a Value is remembered, and a Value
// holding that same tensor converts back to that very object: `return x`
// gives the caller's x, `acc.append(x)` appends the caller's x. Scopes
// nest (a Python callback calling compiled code); the innermost is used.
class TensorIdentityScope {
 public:
  TensorIdentityScope();
  ~TensorIdentityScope();
  TensorIdentityScope(const TensorIdentityScope&) = delete;
  TensorIdentityScope& operator=(const TensorIdentityScope&) = delete;

  static TensorIdentityScope* active();
  void remember(const void* impl, PyObject* obj);
  PyObject* find(const void* impl) const;  // borrowed, or nullptr
  // A torch tensor's kiln tensor exists only while kiln code holds it, so
  // the scope keeps it (an impl freed and reused at the same address would
  // otherwise take the torch object's identity). The same torch object
  // converted twice in a scope is the same kiln tensor (f(x, x)).
  void remember_torch(runtime::TensorImpl* impl, PyObject* obj);
  runtime::TensorImpl* find_torch(PyObject* obj) const;  // borrowed, or nullptr
  // The scope this one is nested in (a compiled frame called from the
  // residual of another: the resume function of a break), or nullptr.
  TensorIdentityScope* outer() const { return outer_; }
  // Set once a torch tensor entered: kiln tensors then leave as torch
  // tensors (a call that got torch tensors returns torch tensors).
  bool torch_out = false;

 private:
  TensorIdentityScope* outer_;
  // Strong references: a replayed mutation may drop the caller's last
  // reference to an object before the result is converted. The first few
  // live inline: a compiled call's tensors must cost no allocation.
  struct Seen {
    const void* impl;
    PyObject* obj;  // a strong reference
    bool torch;     // impl is a strong reference too (remember_torch)
  };
  // Kiln containers reaching Python keep their identity for the scope's
  // duration (container_mirror.h).
  MirrorScope mirrors_;
  static constexpr size_t kInline = 8;
  Seen inline_[kInline];
  size_t n_ = 0;
  std::vector<Seen> more_;
};

}  // namespace kiln::python

// Tensor: a dense, strided CPU array. A Tensor is a cheap handle (one
// reference-counted pointer) to a TensorImpl, which holds sizes, strides, an
// element offset and a reference to shared Storage. Views (transpose,
// permute, slice, expand, reshape of contiguous data) make a new TensorImpl
// over the same Storage; nothing is copied.
//
// A *meta* tensor has sizes/strides/dtype but no storage. Shape rules run on
// meta tensors, which is how the tracer gets output metadata for a graph node
// without touching data.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/base/object.h"
#include "runtime/value/dtype.h"

namespace kiln::runtime {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& sizes);

struct Storage final : Object {
  void* data = nullptr;
  size_t nbytes = 0;
  std::function<void(void*)> deleter;  // how to free `data` (owned or borrowed)
  ~Storage() override;
  // 64-byte aligned; zero-filled unless `zero` is false (for a buffer a
  // kernel overwrites whole: filling it first would cost a pass over memory).
  static Ref<Storage> allocate(size_t nbytes, bool zero = true);
  // The deleter of borrowed memory may keep its owner alive, but no kiln
  // object: it is the foreign side's (NumPy, DLPack, a Python buffer).
  void traverse(Visitor&) const override {}
};

struct TensorImpl final : Object {
  Ref<Storage> storage;  // null for meta tensors
  Shape sizes;
  Shape strides;        // in elements; 0 for broadcast (expanded) dims
  int64_t offset = 0;   // in elements, from storage->data
  DType dtype = DType::Float32;
  bool is_parameter = false;  // created by Parameter(); Module setattr routes it
  uint64_t marked_dynamic = 0;  // bit d: mark_dynamic(t, d) asked for dim d to be traced dynamic
  void traverse(Visitor& v) const override { visit(v, storage); }
};

class Tensor {
 public:
  Tensor() = default;  // null handle; defined() is false
  explicit Tensor(Ref<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Constructors
  static Tensor empty(const Shape& sizes, DType dtype);  // zero-filled
  static Tensor uninitialized(const Shape& sizes, DType dtype);  // contents unspecified: write every element
  static Tensor meta(const Shape& sizes, DType dtype, Shape strides = {});
  // Wraps memory owned elsewhere (NumPy, DLPack); `deleter` runs when the
  // last view dies.
  static Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, DType dtype,
                          std::function<void(void*)> deleter);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& sizes);
  static Tensor scalar(double v, DType dtype);  // 0-d

  bool defined() const { return bool(impl_); }
  bool is_meta() const { return !impl_->storage; }
  TensorImpl* impl() const { return impl_.get(); }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  DType dtype() const { return impl_->dtype; }
  const Shape& sizes() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  int64_t offset() const { return impl_->offset; }
  int64_t dim() const { return int64_t(impl_->sizes.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl_->sizes); }
  bool is_contiguous() const;
  bool is_parameter() const { return impl_->is_parameter; }

  // Pointer to element [0, ..., 0] (storage + offset). Throws on meta tensors.
  void* raw_data() const;
  template <class T>
  T* data() const { return static_cast<T*>(raw_data()); }

  // A view over the same storage.
  Tensor as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const;
  // Same storage, new impl with is_parameter set (what Parameter(t) makes).
  Tensor as_parameter() const;
  Tensor contiguous() const;  // self if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor to(DType dtype) const;  // copy with conversion (self if same dtype)

  // Element access for tests and printing; index is a full multi-index.
  double item_as_double(const Shape& index = {}) const;
  double item() const;  // numel must be 1

  std::string repr() const;  // torch style: tensor([[1., 2.]], dtype=float64)

 private:
  Ref<TensorImpl> impl_;
};

// NumPy broadcasting; errors name `op` and both shapes.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// Normalises a possibly negative dim for a tensor of rank `ndim`; errors name op.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);
[[noreturn]] void throw_from_vector_mismatch(size_t n, const Shape& sizes);

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& sizes) {
  Tensor t = empty(sizes, dtype_of<T>::value);
  if (int64_t(values.size()) != t.numel()) throw_from_vector_mismatch(values.size(), sizes);
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

}  // namespace kiln::runtime

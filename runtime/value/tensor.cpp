#include "runtime/value/tensor.h"

#include "runtime/base/budget.h"

#include <sys/mman.h>

#include <map>
#include <mutex>

#include <cstdlib>
#include <cstring>

#include "runtime/base/error.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {

// ----- shapes ------------------------------------------------------------------

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = stride;
    stride *= sizes[i] > 1 ? sizes[i] : 1;  // a size-0 dim must not zero the outer strides
  }
  return st;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw_error(ErrorKind::RuntimeError, std::string(op) + ": shapes " + shape_str(a) + " and " +
                                               shape_str(b) + " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  if (dim < -ndim || dim >= ndim)
    throw_error(ErrorKind::IndexError, std::string(op) + ": dim " + std::to_string(dim) +
                                           " is out of range for a tensor of rank " + std::to_string(ndim));
  return dim < 0 ? dim + ndim : dim;
}

void throw_from_vector_mismatch(size_t n, const Shape& sizes) {
  throw_error(ErrorKind::RuntimeError, "from_vector: " + std::to_string(n) + " values do not fill shape " +
                                           shape_str(sizes) + " (" + std::to_string(shape_numel(sizes)) +
                                           " elements)");
}

// ----- storage -----------------------------------------------------------------

Storage::~Storage() {
  if (deleter && data) deleter(data);
}

namespace {

// Large blocks (>= 1 MiB): 2 MiB-aligned, advised as transparent huge
// pages, and kept in a small cache when freed. A compiled call that returns
// a fresh 40 MB tensor each time would otherwise spend more on page faults
// (10,000 per call with 4 KiB pages, each a kernel entry plus zeroing) than
// on its kernel: glibc returns such blocks to the OS at once.
constexpr size_t kLargeBlock = size_t(1) << 20;
constexpr size_t kHugePage = size_t(2) << 20;

class LargeBlockCache {
 public:
  void* take(size_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = free_.find(bytes);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    cached_ -= bytes;
    return p;
  }
  void give(void* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (cached_ + bytes <= limit_) {
        free_.emplace(bytes, p);
        cached_ += bytes;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
  // KILN_ALLOC_CACHE_MB bounds what freed blocks may hold (default 512).
  const size_t limit_ = [] {
    const char* e = std::getenv("KILN_ALLOC_CACHE_MB");
    return (e ? size_t(std::max(0L, std::atol(e))) : size_t(512)) << 20;
  }();
};

LargeBlockCache& large_blocks() {
  static auto* c = new LargeBlockCache;  // never destroyed: storages may die during exit
  return *c;
}

}  // namespace

Ref<Storage> Storage::allocate(size_t nbytes, bool zero) {
  check_allocation(nbytes, "a tensor's storage");
  // Round up so aligned_alloc's size requirement holds; never 0 so that an
  // empty tensor still has a valid data pointer.
  size_t bytes = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
  const bool large = bytes >= kLargeBlock;
  void* p = nullptr;
  if (large) {
    bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    p = large_blocks().take(bytes);
    if (!p) {
      p = std::aligned_alloc(kHugePage, bytes);
      if (p) madvise(p, bytes, MADV_HUGEPAGE);  // best effort: THP may be off
    }
  } else {
    p = std::aligned_alloc(64, bytes);
  }
  if (!p)
    throw_error(ErrorKind::RuntimeError, "out of memory: cannot allocate " + std::to_string(nbytes) + " bytes");
  if (zero) std::memset(p, 0, bytes);
  auto s = make_ref<Storage>();
  s->data = p;
  s->nbytes = nbytes;
  if (large) s->deleter = [bytes](void* q) { large_blocks().give(q, bytes); };
  else s->deleter = [](void* q) { std::free(q); };
  return s;
}

namespace {

// numel of a user-given shape, rejecting negative sizes and sizes whose byte
// count does not fit (which would otherwise wrap and under-allocate).
int64_t checked_numel(const Shape& sizes, DType dtype) {
  int64_t n = 1;
  for (int64_t d : sizes)
    if (d < 0)
      throw_error(ErrorKind::RuntimeError,
                  "negative dimension " + std::to_string(d) + " in shape " + shape_str(sizes));
  for (int64_t d : sizes)
    if (__builtin_mul_overflow(n, d, &n))
      throw_error(ErrorKind::RuntimeError, "shape " + shape_str(sizes) + " is too large");
  int64_t bytes;
  if (__builtin_mul_overflow(n, int64_t(itemsize(dtype)), &bytes) || bytes > (int64_t(1) << 48))
    throw_error(ErrorKind::RuntimeError, "shape " + shape_str(sizes) + " is too large");
  return n;
}

Ref<TensorImpl> new_impl(const Shape& sizes, const Shape& strides, DType dtype) {
  auto impl = make_ref<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = dtype;
  return impl;
}

// Element range [lo, hi] a view touches, relative to storage start; only
// meaningful when the view has elements.
void view_extent(const Shape& sizes, const Shape& strides, int64_t offset, int64_t& lo, int64_t& hi) {
  lo = hi = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t span = (sizes[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
}

}  // namespace

// ----- construction ------------------------------------------------------------

Tensor Tensor::empty(const Shape& sizes, DType dtype) {
  const int64_t n = checked_numel(sizes, dtype);
  auto impl = new_impl(sizes, contiguous_strides(sizes), dtype);
  impl->storage = Storage::allocate(size_t(n) * itemsize(dtype));
  return Tensor(std::move(impl));
}

Tensor Tensor::uninitialized(const Shape& sizes, DType dtype) {
  const int64_t n = checked_numel(sizes, dtype);
  auto impl = new_impl(sizes, contiguous_strides(sizes), dtype);
  impl->storage = Storage::allocate(size_t(n) * itemsize(dtype), /*zero=*/false);
  return Tensor(std::move(impl));
}

Tensor Tensor::meta(const Shape& sizes, DType dtype, Shape strides) {
  checked_numel(sizes, dtype);
  if (strides.empty() && !sizes.empty()) strides = contiguous_strides(sizes);
  if (strides.size() != sizes.size())
    throw_error(ErrorKind::RuntimeError, "meta: strides " + shape_str(strides) + " do not match sizes " +
                                             shape_str(sizes));
  return Tensor(new_impl(sizes, strides, dtype));
}

Tensor Tensor::from_blob(void* data, const Shape& sizes, const Shape& strides, DType dtype,
                         std::function<void(void*)> deleter) {
  const int64_t n = checked_numel(sizes, dtype);
  Shape st = strides.empty() ? contiguous_strides(sizes) : strides;
  if (st.size() != sizes.size())
    throw_error(ErrorKind::RuntimeError, "from_blob: strides " + shape_str(st) + " do not match sizes " +
                                             shape_str(sizes));
  int64_t lo = 0, hi = -1;
  if (n > 0) view_extent(sizes, st, 0, lo, hi);
  if (lo < 0) throw_error(ErrorKind::RuntimeError, "from_blob: negative strides are not supported");
  auto storage = make_ref<Storage>();
  storage->data = data;
  storage->nbytes = size_t(hi + 1) * itemsize(dtype);
  storage->deleter = std::move(deleter);
  auto impl = new_impl(sizes, st, dtype);
  impl->storage = std::move(storage);
  return Tensor(std::move(impl));
}

Tensor Tensor::scalar(double v, DType dtype) {
  Tensor t = empty({}, dtype);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    *t.data<T>() = convert<T>(v);
  });
  return t;
}

// ----- queries -----------------------------------------------------------------

int64_t Tensor::size(int64_t d) const { return impl_->sizes[size_t(wrap_dim("size", d, dim()))]; }

bool Tensor::is_contiguous() const {
  const Shape& sz = impl_->sizes;
  const Shape& st = impl_->strides;
  for (int64_t d : sz)
    if (d == 0) return true;  // no element is ever addressed
  int64_t expected = 1;
  for (size_t i = sz.size(); i-- > 0;) {
    if (sz[i] == 1) continue;  // the stride of a size-1 dim is never used
    if (st[i] != expected) return false;
    expected *= sz[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (!impl_->storage)
    throw_error(ErrorKind::RuntimeError, "cannot access the data of a meta tensor (shape " +
                                             shape_str(impl_->sizes) + ")");
  return static_cast<char*>(impl_->storage->data) + impl_->offset * int64_t(itemsize(impl_->dtype));
}

// ----- views and copies --------------------------------------------------------

Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const {
  if (sizes.size() != strides.size())
    throw_error(ErrorKind::RuntimeError,
                "as_strided: sizes " + shape_str(sizes) + " and strides " + shape_str(strides) + " differ in rank");
  if (impl_->storage && shape_numel(sizes) > 0) {
    int64_t lo, hi;
    view_extent(sizes, strides, offset, lo, hi);
    const int64_t capacity = int64_t(impl_->storage->nbytes / itemsize(impl_->dtype));
    if (lo < 0 || hi >= capacity)
      throw_error(ErrorKind::RuntimeError, "as_strided: a view of shape " + shape_str(sizes) + ", strides " +
                                               shape_str(strides) + " and offset " + std::to_string(offset) +
                                               " is out of bounds for a storage of " + std::to_string(capacity) +
                                               " elements");
  }
  auto impl = new_impl(sizes, strides, impl_->dtype);
  impl->storage = impl_->storage;
  impl->offset = offset;
  return Tensor(std::move(impl));
}

Tensor Tensor::as_parameter() const {
  Tensor t = as_strided(sizes(), strides(), offset());
  t.impl_->is_parameter = true;
  return t;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  if (is_meta()) return meta(sizes(), dtype());
  Tensor out = empty(sizes(), dtype());
  copy_into(out, *this);
  return out;
}

Tensor Tensor::to(DType d) const {
  if (d == dtype()) return *this;
  if (is_meta()) return meta(sizes(), d);
  Tensor out = empty(sizes(), d);
  copy_into(out, *this);
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  const Shape sst = broadcast_strides(src, dst.sizes());
  dispatch_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_dtype(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* d = dst.data<D>();
      const S* s = src.data<S>();
      for_each_strided<2>(dst.sizes(), {&dst.strides(), &sst},
                          [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                            D* pd = d + off[0];
                            const S* ps = s + off[1];
                            if (st[0] == 1 && st[1] == 1) {
                              for (int64_t i = 0; i < n; ++i) pd[i] = convert<D>(ps[i]);
                            } else {
                              for (int64_t i = 0; i < n; ++i) pd[i * st[0]] = convert<D>(ps[i * st[1]]);
                            }
                          });
    });
  });
}

// ----- element access ----------------------------------------------------------

namespace {

double read_as_double(const Tensor& t, int64_t element_offset) {
  return dispatch_dtype(t.dtype(), [&](auto tag) -> double {
    using T = decltype(tag);
    return double(t.data<T>()[element_offset]);
  });
}

}  // namespace

double Tensor::item_as_double(const Shape& index) const {
  if (int64_t(index.size()) != dim())
    throw_error(ErrorKind::IndexError, "item: expected " + std::to_string(dim()) + " indices for a tensor of shape " +
                                           shape_str(sizes()) + ", got " + std::to_string(index.size()));
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    if (index[i] < 0 || index[i] >= sizes()[i])
      throw_error(ErrorKind::IndexError, "item: index " + std::to_string(index[i]) + " is out of range for dimension " +
                                             std::to_string(i) + " of size " + std::to_string(sizes()[i]));
    off += index[i] * strides()[i];
  }
  return read_as_double(*this, off);
}

double Tensor::item() const {
  if (numel() != 1)
    throw_error(ErrorKind::RuntimeError,
                "a Tensor with " + std::to_string(numel()) + " elements cannot be converted to Scalar");
  return read_as_double(*this, 0);  // the single element sits at the view's offset
}

}  // namespace kiln::runtime

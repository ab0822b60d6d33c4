// Tensor subscripting with torch's semantics: x[i], x[a:b:s], x[None],
// x[...], x[mask], x[idx_tensor], x[[0, 2]], tuples mixing all of those, and
// assignment through such an index (x[0] = 1.0, x[:, 1:] = y, x[m] = v).
//
// Basic indices (ints, slices, None, ...) give views; advanced indices (bool
// masks, int64 tensors, lists) give copies, placed by torch's rule: after
// the basic part has been applied as views, the advanced dims replace the
// indexed ones in place when they are adjacent, else they go first.
#pragma once

#include <vector>

#include "runtime/value/value.h"

namespace kiln::runtime {

// The marker for Python's `...` in an index key (one shared object: keys
// compare it by identity). KBC has no literal for it; python/ maps
// Py_Ellipsis here when it converts a subscript key.
Value tensor_getitem(const Tensor& t, const Value& key);
// In place, as torch: a basic index writes through the view (broadcast,
// cast to t's dtype); an advanced one is index_put (the value's dtype must
// match t's, as torch requires; numbers are converted).
void tensor_setitem(const Tensor& t, const Value& key, const Value& value);

// aten.index: indices[d] indexes dim d of t (an undefined Tensor: the
// whole dim); int64 or bool tensors. Shape-only when t is a meta tensor (a
// bool index there has a data-dependent size and raises).
Tensor index_tensor(const Tensor& t, const std::vector<Tensor>& indices);

// The key with Ellipsis expanded, bool scalars and lists turned into index
// tensors, 0-d int tensors into ints: what the tracer lowers to view ops and
// one `index` op. Shapes only (never reads data except of lists).
struct IndexPart {
  enum class K : uint8_t { Int, Slice, None, Tensor } k;
  Value v;  // Int: the int; Slice: the slice; Tensor: the index tensor (int64 or bool)
  // Tensor from a Python bool (x[True]): indexes the size-1 dim the None
  // part just before it inserted, not a dim of its own.
  bool on_new_axis = false;
};
std::vector<IndexPart> normalize_index(int64_t ndim, const Value& key);

// A bool mask's true positions as one int64 index tensor per mask dim
// (nonzero, transposed): what a mask means as advanced indices.
std::vector<Tensor> mask_indices(const Tensor& mask);

}  // namespace kiln::runtime

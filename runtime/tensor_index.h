// Tensor subscripting (x[i], x[a:b], x[:, 0], x[None], tuples of those),
// built from the select / slice / unsqueeze view ops, and assignment through
// such an index (x[0] = 1.0, x[:, 1:] = y, with broadcasting).
#pragma once

#include "runtime/value.h"

namespace kiln::runtime {

Value tensor_getitem(const Tensor& t, const Value& key);
void tensor_setitem(const Tensor& t, const Value& key, const Value& value);

}  // namespace kiln::runtime

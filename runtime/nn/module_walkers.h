// torch's module-tree walkers (parameters, named_parameters, buffers, ...,
// named_modules): their signatures, one table in module_classes.cpp for the
// VM's methods and the translator that answers them at trace time.
#pragma once

#include <string_view>

#include "runtime/semantics/signature.h"

namespace kiln::runtime {

// The walker's signature, `self` first; null for any other method.
const Signature* module_walker_signature(std::string_view method);

}  // namespace kiln::runtime

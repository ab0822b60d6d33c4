// The public C++ header of kiln: everything an embedding program needs
// (docs/cpp_api.md). It needs only the C++20 standard library: no LLVM, MPI,
// Python or spdlog header, so `-I <prefix>/include` is the whole include path
// of an installed kiln (tests/install checks it).
#pragma once

#include <kiln/version.h>  // KILN_VERSION_MAJOR/MINOR/PATCH, generated from the project version

#include "interpreter/kiln_api.h"

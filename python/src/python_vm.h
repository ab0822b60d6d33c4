// The VM that runs kiln code for Python callers on this thread, and where
// its print() writes.
#pragma once

#include <string_view>

#include "runtime/value/value.h"

namespace kiln::python {

// print() in kiln code run from Python writes where Python's print would:
// sys.stdout as it is at the time (a redirect, pytest's capture).
void write_python_stdout(std::string_view text);

// The VM that runs kiln code called from Python on this thread (module
// calls, KBC functions, attribute reads that may run user code).
runtime::CallContext& python_vm();

}  // namespace kiln::python

// Ints beyond int64 are Python's own (runtime::BigIntHooks): an int
// operation that overflows int64 is done by Python, exactly, and gives a
// Python int (a Foreign value, every later operation on it Python's too),
// back to a kiln Int whenever a result fits again (to_value).
#pragma once

namespace kiln::python {

// Installs the hooks; when the module loads.
void install_python_ints();

}  // namespace kiln::python

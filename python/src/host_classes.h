// The kiln class of a Python class (a torch.nn.Module or kiln.nn.Module
// subclass), as the tracer reads it: never a copy of the class. An
// attribute is read from the Python class the first time a lookup asks for
// it (runtime::ClassObj::reads_host; a method stays the Python function
// until then, "pending", and is translated to KBC on that first lookup),
// and every lookup first compares the class's CPython type version, the
// guard CPython itself keeps on a class's MRO dicts: when the class or any
// base changed, what was read is read again, and if anything reads
// differently the reads are forgotten and the class's reads_version moves,
// which makes stale exactly the compiled entries whose trace read this class
// (runtime::class_reads_hold, checked before an entry's guards).
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/value/value.h"

namespace kiln::runtime {
struct ClassObj;
}

namespace kiln::python {

namespace py = pybind11;

// A class body's function as a method: its KBC form, or a native that calls
// the Python function when kiln cannot translate it.
runtime::Value method_of(py::handle fn);

void bind_host_classes(py::module_& m);

}  // namespace kiln::python

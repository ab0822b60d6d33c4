// The kiln class of a Python class (a torch.nn.Module or kiln.nn.Module
// subclass), as the tracer reads it: never a copy of the class. An
// attribute is read from the Python class the first time a lookup asks for
// it (runtime::ClassObj::reads_host; a method stays the Python function
// until then, "pending", and is translated to KBC on that first lookup),
// and every class read is watched by its CPython type version, the guard
// CPython itself keeps on a class's MRO dicts: when the class or any base
// changes, what the tracer read is read again before the next compiled
// call, and a difference makes the compiled entries that may have folded it
// stale (runtime::class_epoch).
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/value.h"

namespace kiln::runtime {
struct ClassObj;
}

namespace kiln::python {

namespace py = pybind11;

// A class body's function as a method: its KBC form, or a native that calls
// the Python function when kiln cannot translate it.
runtime::Value method_of(py::handle fn);

// Every watched class whose type version moved is read again (the start of
// each compiled call: sync_python_state).
void refresh_changed_classes();
// The same for `cls` and its kiln bases alone, now (a Python __getattr__
// falling back on the C++ lookup must not answer from a stale read).
void refresh_class_chain(runtime::ClassObj* cls);

void bind_host_classes(py::module_& m);

}  // namespace kiln::python

// Python modules (kiln, math, a user's helpers module) as namespaces the
// tracer reads: a Foreign value whose vtable finds an attribute
// (ForeignVTable::namespace_find), so kiln.softmax becomes the registry op
// and a helper function its KBC form, each guarded at its source like a
// module dict entry.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// The Foreign value of a Python module (PyModule_Check), its namespace
// registered on first sight.
runtime::Value module_namespace(py::handle module);

// Re-reads the attributes kiln has read of every Python module whose dict
// changed since (one comparison per module otherwise). Before each
// compiled call, so guards see current values.
void sync_namespaces();

// IMPORT_NAME's host (runtime::set_import_hook): CPython's import.
void install_import_hook();

// CPython 3.11's dict version tag (PEP 509): changes on every mutation, so
// an unchanged tag means nothing to re-read.
uint64_t dict_version(PyObject* dict);

}  // namespace kiln::python

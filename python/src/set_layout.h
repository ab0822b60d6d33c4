// A set crossing the seam keeps its table. kiln's SetObj is CPython 3.11's
// set table (runtime/value/value.h), and a set's order is where its elements sit
// in that table, which depends on the set's whole history: rebuilding a set
// by adding its elements one by one may give another order (colliding
// elements swap places, dummies and the table size are lost). So a Python
// set becomes a kiln set by copying its table (PySetObject: slots, dummies,
// fill, finger) and a kiln set becomes a Python set by writing its table
// into a new PySetObject, slot for slot.
//
// This is exact when each element hashes the same on both sides, which
// holds for everything kiln hashes as CPython does (runtime/base/hash.h, with
// the interpreter's str hash and hash(None) installed here). When an
// element's hashes differ (a NaN, a kiln object hashed by its address), the
// set is rebuilt element by element in the source's order instead: the
// same elements, an order CPython itself would not reproduce either. (A
// Python set is then not copied at all: it stays Python's object, which the
// VM iterates in its own order; ForeignVTable::set_snapshot gives Null.)
//
// Also here: the embedder's hashes and its CPython's version and str.isprintable
// (install_python_hashes, runtime/base/host_python.h).
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <vector>

#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// runtime::set_hash_hooks with this interpreter's _Py_HashBytes and
// hash(None). When the module loads, before anything is hashed.
void install_python_hashes();

// The table of the exact set or frozenset `o`, its elements converted by
// `convert`; `exact` false when some element's kiln hash differs from the
// hash CPython stored (the caller then adds the elements in order).
struct PySetTable {
  std::vector<runtime::SetObj::Entry> entries;
  int64_t finger = 0;
  bool exact = true;
};
PySetTable read_py_set(PyObject* o, const std::function<runtime::Value(py::handle)>& convert);
// Makes `into` hold the table read (or the elements in table order).
void assign_py_set(runtime::SetObj& into, PySetTable table);

// Writes kiln set `s` into `o`, an empty exact set or frozenset, with
// keys[i] the Python object for s's slot i (ignored where the slot holds
// no element): the same table when every key's Python hash is kiln's,
// else the keys added in s's order.
void write_py_set(PyObject* o, const runtime::SetObj& s, const std::vector<py::object>& keys);

// (N, [(i, element), ...], [j, ...]): the table of Python set or frozenset
// `s`, N entries, elements and dummies by entry (kiln._C._set_slots: the
// frontend spells a frozenset constant with its table when adding its
// elements in order would not rebuild it).
py::tuple py_set_slots(py::handle s);

}  // namespace kiln::python

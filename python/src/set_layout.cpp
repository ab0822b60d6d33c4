#include "python/src/set_layout.h"

#if PY_VERSION_HEX >= 0x030D0000
// 3.13 moved the dummy key and the bytes hash to internal headers (still
// exported; the headers declare them without extern "C").
#define Py_BUILD_CORE 1
extern "C" {
#include <internal/pycore_pyhash.h>
#include <internal/pycore_setobject.h>
}
#undef Py_BUILD_CORE
#endif

#include <cstring>
#include <new>
#include <stdexcept>

#include "runtime/base/hash.h"
#include "runtime/base/host_python.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::python {

using runtime::SetObj;
using runtime::Value;

// PySetObject (fill, used, mask, table, hash, finger, smalltable) and the
// set's probing are the same in CPython 3.10 to 3.13 (checked against each
// version's cpython/setobject.h and Objects/setobject.c when it was added
// here); a new version is checked again before it is let in.
static_assert(PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030E0000,
              "set_layout.cpp reads and writes the PySetObject of CPython 3.10 to 3.13");
static_assert(PySet_MINSIZE == 8, "kiln's SetObj starts at CPython's 8 slots");

namespace {

int64_t hash_bytes(const void* data, int64_t n) { return int64_t(_Py_HashBytes(data, Py_ssize_t(n))); }

PySetObject* as_set(PyObject* o) { return reinterpret_cast<PySetObject*>(o); }

// str.isprintable() of this interpreter's Unicode version (repr escapes by it).
bool python_isprintable(uint32_t cp) { return Py_UNICODE_ISPRINTABLE(Py_UCS4(cp)); }

}  // namespace

void install_python_hashes() {
  runtime::set_host_python({PY_MINOR_VERSION, python_isprintable});
  runtime::HashHooks h;
  h.hash_bytes = hash_bytes;
  h.none_hash = int64_t(PyObject_Hash(Py_None));
  runtime::set_hash_hooks(h);
}

PySetTable read_py_set(PyObject* o, const std::function<Value(py::handle)>& convert) {
  // The slots first (new references), then the conversions: converting may
  // run Python code, which must not find us holding borrowed pointers.
  PySetObject* so = as_set(o);
  const Py_ssize_t n = so->mask + 1;
  std::vector<py::object> keys(static_cast<size_t>(n));
  PySetTable out;
  out.entries.resize(size_t(n));
  out.finger = int64_t(so->finger);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const setentry& e = so->table[i];
    if (!e.key) continue;
    out.entries[size_t(i)].hash = int64_t(e.hash);
    if (e.hash != -1) keys[size_t(i)] = py::reinterpret_borrow<py::object>(e.key);  // -1: a dummy
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i]) continue;
    SetObj::Entry& e = out.entries[i];
    e.key = convert(keys[i]);
    if (!out.exact) continue;
    try {
      out.exact = int64_t(runtime::value_hash(e.key)) == e.hash;
    } catch (const Error&) {
      out.exact = false;
    }
  }
  return out;
}

void assign_py_set(SetObj& into, PySetTable table) {
  if (table.exact) {
    into.assign_table(std::move(table.entries), table.finger);
    return;
  }
  into.clear();
  for (const SetObj::Entry& e : table.entries)
    if (e.active()) into.add(e.key);
}

void write_py_set(PyObject* o, const SetObj& s, const std::vector<py::object>& keys) {
  PySetObject* so = as_set(o);
  if (so->used != 0 || so->fill != 0 || so->table != so->smalltable)
    throw std::logic_error("write_py_set: the Python set is not empty");
  const SetObj::Entry* t = s.table();
  const int64_t n = s.capacity();
  if (keys.size() != size_t(n)) throw std::logic_error("write_py_set: one key slot per table entry expected");
  bool exact = true;
  for (int64_t i = 0; i < n && exact; ++i) {
    if (!t[i].active()) continue;
    const Py_hash_t h = PyObject_Hash(keys[size_t(i)].ptr());
    if (h == -1) throw py::error_already_set();
    exact = int64_t(h) == t[i].hash;
  }
  if (!exact) {
    PyErr_Clear();
    for (int64_t i = 0; i < n; ++i)
      if (t[i].active() && PySet_Add(o, keys[size_t(i)].ptr()) < 0) throw py::error_already_set();
    return;
  }
  setentry* table = so->smalltable;
  if (n > PySet_MINSIZE) {
    table = PyMem_New(setentry, size_t(n));
    if (!table) throw std::bad_alloc();
  }
  std::memset(static_cast<void*>(table), 0, sizeof(setentry) * size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t[i].active()) {
      table[i].key = keys[size_t(i)].inc_ref().ptr();
      table[i].hash = Py_hash_t(t[i].hash);
    } else if (t[i].dummy()) {
      table[i].key = _PySet_Dummy;  // not counted: CPython does not count its dummies either
      table[i].hash = -1;
    }
  }
  so->table = table;
  so->mask = Py_ssize_t(n - 1);
  so->fill = Py_ssize_t(s.fill());
  so->used = Py_ssize_t(s.size());
  so->finger = Py_ssize_t(s.finger());
  so->hash = -1;
}

py::tuple py_set_slots(py::handle s) {
  if (!PyAnySet_CheckExact(s.ptr())) throw py::type_error("_set_slots expects a set or a frozenset");
  PySetObject* so = as_set(s.ptr());
  py::list active, dummies;
  for (Py_ssize_t i = 0; i <= so->mask; ++i) {
    const setentry& e = so->table[i];
    if (!e.key) continue;
    if (e.hash == -1)
      dummies.append(i);
    else
      active.append(py::make_tuple(i, py::reinterpret_borrow<py::object>(e.key)));
  }
  return py::make_tuple(so->mask + 1, active, dummies);
}

}  // namespace kiln::python

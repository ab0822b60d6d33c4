// CPython C-API calls whose spelling moved between the versions kiln
// builds for (3.10 to 3.13): each version's own public API where it has
// one, the older private name where it does not. Frame layouts are in
// frame_access.h.
#pragma once

#include <Python.h>

namespace kiln::python {

// The object a weak reference points at, as a new reference (null when it
// is gone; never sets an error for that).
inline PyObject* weakref_target(PyObject* ref) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* o = nullptr;
  if (PyWeakref_GetRef(ref, &o) < 0) PyErr_Clear();
  return o;
#else
  PyObject* o = PyWeakref_GetObject(ref);  // borrowed; Py_None once gone
  if (o == Py_None) return nullptr;
  Py_INCREF(o);
  return o;
#endif
}

// A weak reference still pointing at `o` (identity only: no reference is
// kept).
inline bool weakref_is(PyObject* ref, PyObject* o) {
  PyObject* target = weakref_target(ref);
  Py_XDECREF(target);
  return target == o;
}

// PEP 523's per-code extra slots (PyUnstable_* from 3.12).
inline Py_ssize_t code_extra_index(freefunc free) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Eval_RequestCodeExtraIndex(free);
#else
  return _PyEval_RequestCodeExtraIndex(free);
#endif
}

inline int code_get_extra(PyObject* code, Py_ssize_t index, void** extra) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Code_GetExtra(code, index, extra);
#else
  return _PyCode_GetExtra(code, index, extra);
#endif
}

inline int code_set_extra(PyObject* code, Py_ssize_t index, void* extra) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Code_SetExtra(code, index, extra);
#else
  return _PyCode_SetExtra(code, index, extra);
#endif
}

// A type's own dict (borrowed: the type keeps it). 3.12 no longer fills
// tp_dict of the static builtin types (object, dict, type ...): their dict
// lives in the interpreter, reached through PyType_GetDict.
inline PyObject* type_dict(PyTypeObject* t) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* d = PyType_GetDict(t);  // a new reference
  Py_XDECREF(d);
  return d;
#else
  return t->tp_dict;
#endif
}

}  // namespace kiln::python

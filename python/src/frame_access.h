// The frame the PEP 523 hook is handed, read the same way on every CPython
// kiln supports. Everything eval_frame_hook.cpp reads off a frame goes
// through here, so a version's layout is in one place:
//
//   3.10  a PyFrameObject. No function on it: frame_function() makes one of
//         the frame's code, globals and closure (the free cells CPython
//         copied in). Cells are made before the eval function runs, and an
//         argument that is also a cell has been moved into its cell (its
//         own slot is NULL): FrameParams reads it back out.
//   3.11  an _PyInterpreterFrame with f_func; cells are made by the code's
//         first instructions (MAKE_CELL), so the argument slots are as bound.
//   3.12  the same, the function as f_funcobj.
//   3.13  the same, the code as f_executable.
//
// Up to 3.11 the caller of the eval function made the frame and unmakes it
// after, whatever the eval function did with it. From 3.12 the eval
// function ends the frame itself (CPython's evaluator clears and pops it on
// its way out), so a frame kiln does not run must be ended here: frame_done.
// With an eval function set, CPython does not inline Python-to-Python
// calls, so every frame reaches the hook.
#pragma once

#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#else
#include <frameobject.h>
#endif

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <vector>

static_assert(PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030E0000,
              "frame_access.h knows the frames of CPython 3.10 to 3.13; add this version's");

namespace kiln::python {

#if PY_VERSION_HEX >= 0x030B0000
using EvalFrame = _PyInterpreterFrame;
#else
using EvalFrame = PyFrameObject;
#endif

inline PyCodeObject* frame_code(EvalFrame* f) {
#if PY_VERSION_HEX >= 0x030D0000
  return reinterpret_cast<PyCodeObject*>(f->f_executable);
#else
  return f->f_code;
#endif
}

inline PyObject* frame_globals(EvalFrame* f) { return f->f_globals; }

// What a log line names a code by: its qualified name (3.10's code has
// only the plain name).
inline PyObject* code_qualname(PyCodeObject* co) {
#if PY_VERSION_HEX >= 0x030B0000
  return co->co_qualname;
#else
  return co->co_name;
#endif
}

// The function the frame runs (a new reference), or null when the frame
// has none (3.11+: a frame of no function; never set as an error).
inline pybind11::object frame_function(EvalFrame* f) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* fn = f->f_funcobj;
  if (!fn || !PyFunction_Check(fn)) return {};
  return pybind11::reinterpret_borrow<pybind11::object>(fn);
#elif PY_VERSION_HEX >= 0x030B0000
  return pybind11::reinterpret_borrow<pybind11::object>(reinterpret_cast<PyObject*>(f->f_func));
#else
  PyCodeObject* co = f->f_code;
  PyObject* fn = PyFunction_New(reinterpret_cast<PyObject*>(co), f->f_globals);
  if (!fn) throw pybind11::error_already_set();
  const Py_ssize_t nfree = PyTuple_GET_SIZE(co->co_freevars);
  if (nfree) {
    // f_localsplus: locals, then cells, then the free variables' cells.
    PyObject** frees = f->f_localsplus + co->co_nlocals + PyTuple_GET_SIZE(co->co_cellvars);
    PyObject* closure = PyTuple_New(nfree);
    if (!closure) throw pybind11::error_already_set();
    for (Py_ssize_t i = 0; i < nfree; ++i) {
      Py_INCREF(frees[i]);
      PyTuple_SET_ITEM(closure, i, frees[i]);
    }
    const int rc = PyFunction_SetClosure(fn, closure);
    Py_DECREF(closure);
    if (rc < 0) throw pybind11::error_already_set();
  }
  return pybind11::reinterpret_steal<pybind11::object>(fn);
#endif
}

// `result` of a frame kiln ran in its own way (null: the error pending),
// with the frame ended. 3.12+: an unstarted frame that CPython's evaluator
// is told to throw into has no handler before its first instruction, so the
// evaluator clears and pops it and returns, running none of it (and, the
// frame being incomplete, adds no traceback entry); the pending error, if
// any, is set again after.
inline PyObject* frame_done(PyThreadState* ts, EvalFrame* f, PyObject* result) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* pending = PyErr_GetRaisedException();  // first: the marker's making must not see it
  static PyObject* const marker = PyObject_CallNoArgs(PyExc_SystemError);  // raised only into f
  PyErr_SetRaisedException(Py_NewRef(marker));
#if PY_VERSION_HEX >= 0x030D0000
  // 3.13 starts a frame at its first instruction, which the evaluator
  // counts as complete when the code has no prefix (MAKE_CELL,
  // COPY_FREE_VARS): the throw would then make a frame object and add a
  // traceback entry to the static marker, which would keep the frame's
  // function and arguments alive. One unit before the code is where 3.12
  // starts a frame (prev_instr): incomplete, no entry, and no handler
  // covers it.
  f->instr_ptr = _PyCode_CODE(frame_code(f)) - 1;
#endif
  PyObject* none = _PyEval_EvalFrameDefault(ts, f, 1);
  Py_XDECREF(none);  // (null: nothing ran)
  PyErr_Clear();
  if (pending) PyErr_SetRaisedException(pending);
#else
  (void)ts;
  (void)f;
#endif
  return result;
}

// How many more frames this thread may start before CPython raises
// RecursionError. 3.12+ also count C-level recursion (a call through
// tp_call, as of a torch module) against a limit of their own: the smaller.
inline int64_t recursion_headroom(PyThreadState* ts) {
#if PY_VERSION_HEX >= 0x030C0000
  return std::min(ts->py_recursion_remaining, ts->c_recursion_remaining);
#elif PY_VERSION_HEX >= 0x030B0000
  return ts->recursion_remaining;
#else
  return int64_t(Py_GetRecursionLimit()) - ts->recursion_depth;
#endif
}

// The frame's bound parameters (borrowed, in order; a null slot: unbound),
// as a vectorcall argument array.
class FrameParams {
 public:
  FrameParams(EvalFrame* f, Py_ssize_t nparams) {
#if PY_VERSION_HEX >= 0x030B0000
    data_ = f->localsplus;
#else
    PyCodeObject* co = f->f_code;
    data_ = f->f_localsplus;
    if (!co->co_cell2arg) return;
    copy_.assign(f->f_localsplus, f->f_localsplus + nparams);
    const Py_ssize_t ncells = PyTuple_GET_SIZE(co->co_cellvars);
    for (Py_ssize_t i = 0; i < ncells; ++i) {
      const Py_ssize_t arg = co->co_cell2arg[i];
      if (arg != CO_CELL_NOT_AN_ARG && arg < nparams)
        copy_[size_t(arg)] = PyCell_GET(f->f_localsplus[co->co_nlocals + i]);
    }
    data_ = copy_.data();
#endif
    (void)nparams;
  }
  PyObject* const* data() const { return data_; }
  PyObject* operator[](Py_ssize_t i) const { return data_[i]; }

 private:
  PyObject* const* data_ = nullptr;
  std::vector<PyObject*> copy_;  // 3.10, when an argument lives in a cell
};

}  // namespace kiln::python

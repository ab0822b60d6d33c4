// Python objects as kiln Foreign values: the vtable through which the core
// reads, calls and operates on them (DESIGN.md's seam: the core never
// includes Python), and the one way kiln calls into Python.
#pragma once

#include <pybind11/pybind11.h>

#include "python/src/container_mirror.h"
#include "python/src/errors.h"
#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// The Foreign value wrapping obj (a new reference held by the value).
runtime::Value foreign(py::handle obj);
// obj when v is a Foreign made by this module, else nullptr.
PyObject* foreign_object(const runtime::Value& v);
// str(cls) of a class whose metaclass keeps type's own __repr__ and
// __str__ (so it runs no program code): true and the text; false for
// anything else (ForeignVTable::class_repr, runtime::host_class_repr).
bool default_class_repr(PyObject* cls, std::string& out);

// The vtable of a plain Python object. The other vtables of Python objects
// (a module's namespace: namespaces.h; torch's objects: torch_values.h)
// start from its functions and keep its `destroy`, which releases the
// handle, a PyObject: that is how foreign_object knows every one of them.
extern const runtime::ForeignVTable kPyObjectVTable;
// `fn` reached by compiled code is called at trace time on what the trace
// pins (a function, a bound method, known values) and its answer kept as
// a constant: an immutable result (kiln/_frames.py: inspect.signature).
void fold_at_trace_time(py::handle fn);
// `environ` is os.environ: traced reads of it become guarded constants.
void environ_mapping(py::handle environ);

// The Python object behind a Foreign handle of those vtables.
inline PyObject* handle_of(void* h) { return static_cast<PyObject*>(h); }

// Python's cycle collector and kiln values: the Python objects a kiln value
// holds, for tp_traverse of the Python object that owns the value. Only
// kiln objects owned by this path alone (reference count 1) are entered:
// what something else in kiln also holds is reachable from there, so it is
// not reported (a cycle through it is kept, never collected half-alive).
// A module whose attribute holds a Python list that holds the module's
// wrapper (`m.me = [m]`) is then garbage Python can see.
int visit_python_refs(const runtime::Value& v, visitproc visit, void* arg);

// After a Python exception in a call from kiln: kiln's containers read back
// from Python all the same (an error while doing so gives way to the one
// being raised).
void pull_after_error();

// Every call into Python: kiln containers Python holds are brought up to
// date first, and kiln's read back after (container_mirror.h); a Python
// exception comes out as its kiln Error (rethrow_as_kiln).
template <class F>
auto calling_python(F&& f) -> decltype(f()) {
  try {
    mirrors_push();
    auto r = f();
    mirrors_pull();
    return r;
  } catch (py::error_already_set& e) {
    pull_after_error();
    rethrow_as_kiln(e);
  } catch (...) {
    pull_after_error();
    throw;
  }
}

}  // namespace kiln::python

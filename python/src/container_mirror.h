// A list, dict or set made by kiln code keeps its identity when it reaches
// Python (an argument of a Python function, an attribute of a Python
// object, the result of a compiled call).
//
// The kiln object (ListObj, DictObj, SetObj) and the Python object made for
// it the first time it crosses are one object in two homes: a "mirror"
// pairs them for as long as the outermost compiled call from Python runs.
// Only one side runs at a time (kiln code, or Python code it called), so
// keeping them equal at every crossing is enough:
//
//   kiln -> Python (each Foreign call, and a compiled call returning):
//       push: the Python object is rewritten from the kiln one
//   Python -> kiln (each return from a Foreign call, a compiled call
//   entered from Python code): pull: the kiln object from the Python one
//
// Each side is compared slot by slot with what the last sync left (an
// unchanged side costs one pass and no conversion), and an item that stayed
// keeps its counterpart: a dict inside a mirrored list is not copied again.
// Converting the Python object back (to_value) gives the kiln object, so
// `a is b` holds across the seam, and passing one kiln list twice gives one
// Python list.
//
// Limits: outside a compiled call from Python (no scope) a kiln container
// is copied as before; when the outermost call returns, the mirrors are
// dropped after a last push, so a kiln container that outlives the call in
// kiln state (a kiln.nn module attribute) and in Python is two objects
// from then on (module attributes take the Python object instead:
// nn.cpp). Frozensets are immutable and are copied.
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// The Python object for a kiln List/Dict/Set while a scope is active
// (synced now), or a null handle when no scope is active (the caller
// copies).
py::object mirror_to_py(const runtime::Value& v);
// The kiln object a Python list/dict/set stands for (synced now), or Null.
runtime::Value mirror_from_py(PyObject* o);

// The crossings (cheap when nothing is mirrored).
void mirrors_push();
void mirrors_pull();

// Entered where Python calls compiled kiln code (TensorIdentityScope):
// pulls on entry (Python ran since), pushes on exit; the outermost scope
// drops every mirror on exit.
class MirrorScope {
 public:
  MirrorScope();
  ~MirrorScope();
  MirrorScope(const MirrorScope&) = delete;
  MirrorScope& operator=(const MirrorScope&) = delete;
};

}  // namespace kiln::python

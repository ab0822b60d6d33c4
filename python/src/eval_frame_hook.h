// The frame-evaluation hook (PEP 523) through which kiln compiles a Python
// program's frames: CPython runs every instruction that is not in a graph,
// on the program's own objects (eval_frame_hook.cpp says how).
#pragma once

#include <pybind11/pybind11.h>

namespace kiln::python {

namespace py = pybind11;

// kiln._C.FrameCompiled, frames_set_callbacks, frames_explain, ...
void bind_eval_frame_hook(py::module_& m);

}  // namespace kiln::python

// torch.nn.Module instances as kiln modules (issue 13, step 3).
//
// A torch module reaching kiln becomes a *mirror*: a runtime ModuleObj
// (runtime/semantics/class_model.h) whose `_parameters`, `_modules`, `_buffers`,
// attributes, training flag and forward hooks are read from the torch
// object's own dicts (torch's `__dict__`, `_parameters`, `_modules`,
// `_buffers`, `_forward_pre_hooks`, `_forward_hooks`, and the global hook
// dicts of torch.nn.modules.module), its tensors kiln tensors over the
// torch tensors' memory, its class a kiln class for the torch class
// (kiln/_torch_api.py: torch's built-in modules are kiln's own classes,
// any other class reads its Python attributes when first looked up,
// methods translated then (host_classes.h), torch.nn.Module's own
// methods answered by kiln's Module model). From there the tracer treats it
// as any kiln module: attribute lookup in torch's order
// (nn_module::var_getattr), __call__ with hooks (nn_module::call_function), containers
// unrolled, parameters() answered at trace time, get_attr nodes once per
// tensor identity, ModuleVersion guards.
//
// The torch object stays the truth. Before each compiled call
// (sync_python_state) every mirror compares the version tags (PEP 509,
// CPython 3.11's ma_version_tag) of the dicts it was read from and the
// metadata of the tensors it holds; anything that changed is read again
// and the mirror takes a new module version, so the guards recompile.
// Stores by kiln code go to the torch object (runtime's host store hook).
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/value/tensor.h"
#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// The mirror of a torch.nn.Module instance (made or refreshed now), or
// Null when obj is none (or torch is not loaded). A module kiln cannot
// mirror (hooks taking kwargs, always-called hooks) is Null too: it stays
// torch's (a Foreign object; calling it breaks the graph).
runtime::Value torch_module_value(py::handle obj);

// A torch.nn.Module subclass as kiln code sees it: the kiln class made for
// it (kiln/_torch_api.py: class_value), or Null (torch.nn.Module and the
// classes kiln spells with its own stay Python's).
runtime::Value torch_class_value(py::handle cls);

// Brings every mirror up to date with its torch module: O(1) when nothing
// changed since the last walk (kiln/_torch_watch.py signals every change),
// else one version-tag comparison per dict and a metadata check per tensor.
void sync_torch_modules();
// The next sync walks every mirror (kiln.reset: let go of what only kiln holds).
void torch_modules_walk_next();

// The torch tensor a mirror's kiln tensor stands for (a parameter, a
// buffer), borrowed, or nullptr.
PyObject* torch_held_object(const runtime::TensorImpl* impl);

// The kiln view of a torch tensor a mirror holds that requires grad (null
// when it holds no such tensor): one per torch object.
runtime::Tensor torch_held_grad_view(PyObject* obj);
// What a mirror holds for a torch tensor (a parameter, a buffer: the kiln
// tensor, or the torch object with its view), or Null when none holds it.
runtime::Value torch_held_value(PyObject* obj);

// The torch module a mirror stands for (borrowed), or nullptr.
PyObject* torch_module_object(const runtime::ModuleObj* m);

void bind_torch_modules(py::module_& m);

}  // namespace kiln::python

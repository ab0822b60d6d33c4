// torch's objects as kiln values, without importing torch: a torch tensor
// kiln takes is a kiln tensor over its memory (torch_interop.h), one it
// does not take, a torch function without a kiln lowering, a torch module
// torch must run and torch's grad-mode managers are Foreign values whose
// operations are torch's own and whose use in a trace names why it breaks.
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

// A plain torch tensor or Parameter (is_torch_tensor) as a Value: a kiln
// tensor over its memory, remembered for its identity
// (TensorIdentityScope), or the torch object itself when kiln cannot take it.
runtime::Value torch_tensor_value(py::handle obj);

// A torch tensor as a Value outside any identity scope (a mirrored
// module's parameter: not an argument of the call in progress).
runtime::Value torch_tensor_unscoped(py::handle obj);

// A torch tensor as torch's object (Foreign): its operations are torch's,
// a trace reads it only if it requires grad (ForeignVTable::grad_tensor).
runtime::Value torch_tensor_foreign(py::handle obj);

// A torch function kiln has no lowering for, called as torch's own with
// kiln tensors passed as torch tensors.
runtime::Value torch_function_foreign(py::handle obj);

// A torch module torch must run (torch_modules.h): Foreign, called as
// torch's, a traced call a break naming why.
runtime::Value torch_refused_module(py::handle obj);

// The rest of torch once torch is seen (to_value's slow path): a mapped
// torch object's kiln value, a torch tensor or tensor subclass, a grad-mode
// manager, a module-level torch function. Null: not torch's.
runtime::Value torch_object_value(py::handle obj);

// Registry ops reached with torch tensors kiln does not take run as
// torch's functions of the same name (runtime::set_foreign_op_hook).
void install_torch_op_hook();

// kiln._C's torch-table bindings (_map_torch, _register_tensor_method,
// _raw_torch: kiln/_torch_api.py).
void bind_torch(py::module_& m);

}  // namespace kiln::python

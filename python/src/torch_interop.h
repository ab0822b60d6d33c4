// torch.Tensor <-> kiln Tensor, zero-copy, without linking or importing torch.
//
// kiln never imports torch: it notices torch once the program has imported
// it (a torch object reaching to_value while "torch" is in sys.modules) and
// then caches torch's tensor types, so recognising a torch tensor on the
// cached-call path is two pointer comparisons.
//
// In: a torch tensor's metadata and data pointer are read through torch's
// stable C shim (the aoti_torch_* functions libtorch_cpu.so exports for
// AOTInductor; an AtenTensorHandle is an `at::Tensor*`, which a Python
// tensor object holds right after its PyObject header: THPVariable in
// torch/csrc/autograd/python_variable.h). That layout is checked once against
// torch's own Python answers when torch is first seen; a torch whose layout
// differs is refused with an error naming it, never misread. The kiln
// tensor's Storage holds a reference to the torch tensor object, so its
// memory lives as long as any kiln view of it.
//
// Out: a kiln tensor becomes a torch tensor over the same memory through a
// DLPack capsule built here (its deleter drops kiln's Storage reference), so
// kiln's results need no copy either. A kiln tensor that is the caller's
// torch tensor goes back as that very object (TensorIdentityScope).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

#include "runtime/value/tensor.h"
#include "runtime/value/value.h"

namespace kiln::python {

namespace py = pybind11;

namespace torch_types {
// torch.Tensor and torch.nn.Parameter once torch has been seen, else null.
inline PyTypeObject* tensor = nullptr;
inline PyTypeObject* parameter = nullptr;
// torch.no_grad, torch.enable_grad, torch.inference_mode: context managers
// whose with-blocks kiln traces as doing nothing (kiln computes no
// gradients), the VM running their real __enter__/__exit__.
inline PyTypeObject* grad_modes[3] = {nullptr, nullptr, nullptr};
// torch.autocast: a with-block over one made with enabled=False changes
// nothing kiln computes (timm's efficientvit turns autocast off around its
// attention); an enabled one changes dtypes kiln does not model, and breaks.
inline PyTypeObject* autocast = nullptr;
// torch._C._is_any_autocast_enabled (null before torch is seen, or in a
// torch without it).
inline PyObject* any_autocast_enabled = nullptr;
}  // namespace torch_types

namespace autocast_probe {
// torch keeps autocast's state in c10's thread-local dispatch-key sets:
// at::autocast::is_autocast_enabled(d) is "d's Autocast key is not
// excluded". The raw word stores the excluded set XOR its default, which
// holds every Autocast key, so a set Autocast bit there is a device with
// autocast on (and a new thread's zeroed word is all off, as in torch).
// One load where torch's _is_any_autocast_enabled costs ~180 ns through
// Python and eight calls into libc10, on the cached call of every compiled
// frame (twice on a frame that breaks once). `mask` (the Autocast keys'
// bits) is set only after reading the word agreed with torch's own answer
// with autocast off and on (torch_interop.cpp, when torch is first seen);
// while it is 0 the Python call answers.
inline uint64_t mask = 0;
// The word's address on the calling thread (dlsym of a thread-local
// symbol answers for the calling thread), or null.
const uint64_t* excluded_word_of_this_thread();
}  // namespace autocast_probe

// Whether torch.autocast is on for any device now: the program's matmuls
// and convolutions then run in another dtype, which kiln's graphs do not
// model, so CPython runs compiled frames while it is (eval_frame_hook.cpp).
inline bool torch_autocast_on() {
  if (autocast_probe::mask) {
    thread_local const uint64_t* word = nullptr;
    if (!word) word = autocast_probe::excluded_word_of_this_thread();
    if (word) return (*word & autocast_probe::mask) != 0;
  }
  PyObject* f = torch_types::any_autocast_enabled;
  if (!f) return false;
  // Its C function directly when it takes no arguments (METH_NOARGS),
  // without the call protocol's dispatch.
  PyObject* r = PyCFunction_Check(f) && (PyCFunction_GET_FLAGS(f) & METH_NOARGS)
                    ? PyCFunction_GET_FUNCTION(f)(PyCFunction_GET_SELF(f), nullptr)
                    : PyObject_CallNoArgs(f);
  if (!r) {
    PyErr_Clear();
    return false;
  }
  const bool on = r == Py_True;
  Py_DECREF(r);
  return on;
}

// A plain torch tensor or Parameter (not another subclass): the cheap test
// of the cached-call path.
inline bool is_torch_tensor(PyObject* o) {
  PyTypeObject* t = Py_TYPE(o);
  return t == torch_types::tensor || t == torch_types::parameter;
}

// Looks for torch in sys.modules (never imports it) and resolves its types
// and shim functions; true once torch is usable. Cheap after the first
// success; a failure is retried at the next call (torch may be half-imported).
bool torch_seen();

// Why kiln cannot take this torch tensor as a kiln tensor ("" when it can):
// another dtype, device or layout, a tensor that requires grad while grad
// mode is on, a subclass other than Parameter.
std::string torch_tensor_refusal(PyObject* o);
// The same without the grad rule: "" when kiln could take the tensor were
// it not for its requires_grad.
std::string torch_tensor_refusal_except_grad(PyObject* o);
// o.requires_grad (o a plain torch tensor or Parameter).
bool torch_requires_grad(PyObject* o);

// The kiln tensor over a torch tensor's memory (torch_tensor_refusal must be
// empty). The Storage keeps the torch object alive.
runtime::Tensor tensor_from_torch(PyObject* o);

// Whether torch tensor `o` still has the memory, sizes, strides and dtype
// kiln tensor `t` was made with (a mirror's parameter after m.double(),
// p.data = ..., resize_ does not).
bool torch_tensor_matches(PyObject* o, const runtime::Tensor& t);

// A torch tensor over a kiln tensor's memory (DLPack; no copy).
py::object tensor_to_torch(const runtime::Tensor& t);

// torch's grad mode (torch.is_grad_enabled()); false without torch.
bool torch_grad_enabled();

// Which of torch's answers kiln reads from torch's C++ directly (each
// checked against torch's Python answer when torch was first seen; one
// that failed its check is asked through Python instead): "autocast",
// "is_neg", "requires_grad" mapped to whether it is direct.
std::vector<std::pair<std::string, bool>> torch_direct_reads();

}  // namespace kiln::python

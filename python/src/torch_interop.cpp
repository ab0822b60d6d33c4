#include "python/src/torch_interop.h"

#include <dlfcn.h>

#include <cstring>
#include <optional>

#include "python/src/errors.h"
#include "python/src/torch_autograd.h"
#include "python/src/torch_values.h"
#include "runtime/base/error.h"

namespace kiln::python {

using runtime::DType;
using runtime::Tensor;
using runtime::Value;

namespace {

// torch's C shim (torch/csrc/inductor/aoti_torch/c/shim.h): plain C
// functions returning 0 on success. AtenTensorHandle is an at::Tensor*.
using Handle = void*;
struct Shim {
  int32_t (*get_data_ptr)(Handle, void**) = nullptr;
  int32_t (*get_dim)(Handle, int64_t*) = nullptr;
  int32_t (*get_sizes)(Handle, int64_t**) = nullptr;
  int32_t (*get_strides)(Handle, int64_t**) = nullptr;
  int32_t (*get_storage_offset)(Handle, int64_t*) = nullptr;
  int32_t (*get_dtype)(Handle, int32_t*) = nullptr;
  int32_t (*get_device_type)(Handle, int32_t*) = nullptr;
  int32_t (*get_layout)(Handle, int32_t*) = nullptr;
  bool (*grad_mode_is_enabled)() = nullptr;
  int32_t (*reinterpret)(Handle, int64_t, const int64_t*, const int64_t*, int64_t, Handle*) = nullptr;
  int32_t (*delete_tensor)(Handle) = nullptr;
  int32_t f32 = -1, f64 = -1, i32 = -1, i64 = -1, b8 = -1, cpu = -1, strided = -1;
};
Shim shim;
bool resolved = false;
PyObject* from_dlpack = nullptr;       // torch._C._from_dlpack
PyObject* requires_grad_name = nullptr;  // "requires_grad", interned
PyObject* is_neg = nullptr;              // torch.Tensor.is_neg (the shim has no accessor)
// at::_ops::is_neg::call(const at::Tensor&), exported by libtorch_cpu: the
// same answer without a Python call (~150 ns on every torch tensor a
// compiled frame takes in). Null unless it agreed with torch.Tensor.is_neg
// on a test tensor of each kind.
bool (*is_neg_call)(Handle) = nullptr;
// c10::TensorImpl::requires_grad() const, exported by libc10 (the at::Tensor
// a handle points at holds its TensorImpl* as its one member): what
// torch.Tensor.requires_grad's getter answers, without the getter's
// __torch_function__ check and bool object. Null unless it agreed with
// Python on a test tensor of each kind.
bool (*impl_requires_grad)(const void*) = nullptr;
void* c10_lib = nullptr;  // libc10.so: its thread-local dispatch-key sets (autocast_probe)
PyGetSetDef* requires_grad_getter = nullptr;  // torch.Tensor.requires_grad's C getter, when it is one

// The at::Tensor inside a torch tensor object: THPVariable's `cdata`,
// right after the object header (checked against torch in resolve()).
Handle handle_of(PyObject* o) { return reinterpret_cast<char*>(o) + sizeof(PyObject); }

template <class F>
bool sym(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

// autocast_probe's mask, kept only when reading c10's word agrees with
// torch's _is_any_autocast_enabled with autocast off and with it on (for
// the CPU, switched on and back here: no program code runs in between).
// torch first seen with autocast already on leaves the mask 0: the Python
// call answers.
void probe_autocast(const py::module_& t) {
  if (!c10_lib || !torch_types::any_autocast_enabled) return;
  const uint64_t* word = autocast_probe::excluded_word_of_this_thread();
  py::object C = t.attr("_C");
  if (!word || !py::hasattr(C, "DispatchKey") || !py::hasattr(C, "DispatchKeySet") ||
      !py::hasattr(t, "set_autocast_enabled"))
    return;
  try {
    uint64_t mask = 0;
    py::dict keys = C.attr("DispatchKey").attr("__members__");
    for (auto [name, key] : keys)
      if (std::string(py::str(name)).rfind("Autocast", 0) == 0)
        mask |= C.attr("DispatchKeySet")(key).attr("raw_repr")().cast<uint64_t>();
    py::handle any_on(torch_types::any_autocast_enabled);
    if (!mask || any_on().cast<bool>() || (*word & mask) != 0) return;
    py::object set = t.attr("set_autocast_enabled");
    set("cpu", true);
    bool seen_on = false;
    try {
      seen_on = any_on().cast<bool>() && (*word & mask) != 0;
    } catch (py::error_already_set&) {
      set("cpu", false);  // never left on for the program
      throw;
    }
    set("cpu", false);
    if (seen_on && !any_on().cast<bool>() && (*word & mask) == 0) autocast_probe::mask = mask;
  } catch (py::error_already_set&) {
    // A torch without these (or one that refuses the CPU): the Python call answers.
  }
}

// is_neg_call, kept only when it answers as torch.Tensor.is_neg does on a
// plain tensor and on a negative-bit view.
void probe_is_neg(const py::module_& t, void* lib) {
  bool (*call)(Handle) = nullptr;
  if (!sym(lib, "_ZN2at4_ops6is_neg4callERKNS_6TensorE", call) || !py::hasattr(t, "_neg_view")) return;
  try {
    py::object x = t.attr("ones")(3);
    py::object v = t.attr("_neg_view")(x);
    if (!call(handle_of(x.ptr())) && call(handle_of(v.ptr())) && v.attr("is_neg")().cast<bool>()) is_neg_call = call;
  } catch (py::error_already_set&) {
  }
}

const void* impl_of(Handle h) { return *reinterpret_cast<void* const*>(h); }

void probe_requires_grad(const py::module_& t) {
  bool (*call)(const void*) = nullptr;
  if (!c10_lib || !sym(c10_lib, "_ZNK3c1010TensorImpl13requires_gradEv", call)) return;
  try {
    py::object x = t.attr("ones")(3), w = t.attr("ones")(3, py::arg("requires_grad") = true);
    if (!call(impl_of(handle_of(x.ptr()))) && call(impl_of(handle_of(w.ptr()))) &&
        w.attr("requires_grad").cast<bool>())
      impl_requires_grad = call;
  } catch (py::error_already_set&) {
  }
}

// Why torch cannot be used ("" when it can).
std::string resolve(PyObject* torch) {
  py::module_ t = py::reinterpret_borrow<py::module_>(torch);
  const std::string dir = py::str(py::module_::import("os.path").attr("dirname")(t.attr("__file__")));
  const std::string path = dir + "/lib/libtorch_cpu.so";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return "torch's " + path + " is not loaded (" + std::string(dlerror() ? dlerror() : "?") + ")";
  int32_t (*c_f32)() = nullptr, (*c_f64)() = nullptr, (*c_i32)() = nullptr, (*c_i64)() = nullptr,
          (*c_b8)() = nullptr, (*c_cpu)() = nullptr, (*c_strided)() = nullptr;
  const bool ok = sym(lib, "aoti_torch_get_data_ptr", shim.get_data_ptr) && sym(lib, "aoti_torch_get_dim", shim.get_dim) &&
                  sym(lib, "aoti_torch_get_sizes", shim.get_sizes) && sym(lib, "aoti_torch_get_strides", shim.get_strides) &&
                  sym(lib, "aoti_torch_get_storage_offset", shim.get_storage_offset) &&
                  sym(lib, "aoti_torch_get_dtype", shim.get_dtype) &&
                  sym(lib, "aoti_torch_get_device_type", shim.get_device_type) &&
                  sym(lib, "aoti_torch_get_layout", shim.get_layout) &&
                  sym(lib, "aoti_torch_grad_mode_is_enabled", shim.grad_mode_is_enabled) &&
                  sym(lib, "aoti_torch__reinterpret_tensor", shim.reinterpret) &&
                  sym(lib, "aoti_torch_delete_tensor_object", shim.delete_tensor) &&
                  sym(lib, "aoti_torch_dtype_float32", c_f32) && sym(lib, "aoti_torch_dtype_float64", c_f64) &&
                  sym(lib, "aoti_torch_dtype_int32", c_i32) && sym(lib, "aoti_torch_dtype_int64", c_i64) &&
                  sym(lib, "aoti_torch_dtype_bool", c_b8) &&
                  sym(lib, "aoti_torch_device_type_cpu", c_cpu) && sym(lib, "aoti_torch_layout_strided", c_strided);
  if (!ok) return "torch's C shim (aoti_torch_*) is missing from " + path;
  shim.f32 = c_f32(), shim.f64 = c_f64(), shim.i32 = c_i32(), shim.i64 = c_i64(), shim.b8 = c_b8(), shim.cpu = c_cpu(),
  shim.strided = c_strided();

  // The layout check: a transposed, offset view read through the shim must
  // give what torch's Python API says.
  py::object x = t.attr("arange")(24, py::arg("dtype") = t.attr("float64")).attr("reshape")(2, 3, 4);
  py::object v = x.attr("transpose")(0, 2)[py::make_tuple(py::slice(1, 3, 1))];
  Handle h = handle_of(v.ptr());
  void* data = nullptr;
  int64_t dim = -1, offset = -1, *sizes = nullptr, *strides = nullptr;
  int32_t dtype = -1;
  if (shim.get_data_ptr(h, &data) || shim.get_dim(h, &dim) || shim.get_sizes(h, &sizes) ||
      shim.get_strides(h, &strides) || shim.get_storage_offset(h, &offset) || shim.get_dtype(h, &dtype))
    return "torch's C shim failed on a test tensor";
  const bool same = dim == 3 && sizes[0] == 2 && sizes[1] == 3 && sizes[2] == 2 && strides[0] == 1 &&
                    strides[1] == 4 && strides[2] == 12 && offset == 1 && dtype == shim.f64 &&
                    reinterpret_cast<uintptr_t>(data) == v.attr("data_ptr")().cast<uintptr_t>();
  if (!same) return "this torch's tensor objects are not laid out as torch 2.x's THPVariable";
  from_dlpack = py::object(t.attr("_C").attr("_from_dlpack")).release().ptr();
  const char* modes[] = {"no_grad", "enable_grad", "inference_mode"};
  for (int i = 0; i < 3; ++i)
    torch_types::grad_modes[i] = reinterpret_cast<PyTypeObject*>(py::object(t.attr(modes[i])).release().ptr());
  torch_types::autocast = reinterpret_cast<PyTypeObject*>(py::object(t.attr("autocast")).release().ptr());
  if (py::hasattr(t.attr("_C"), "_is_any_autocast_enabled"))
    torch_types::any_autocast_enabled = py::object(t.attr("_C").attr("_is_any_autocast_enabled")).release().ptr();
  c10_lib = dlopen((dir + "/lib/libc10.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  probe_autocast(t);
  probe_is_neg(t, lib);
  probe_requires_grad(t);
  requires_grad_name = PyUnicode_InternFromString("requires_grad");
  is_neg = py::object(t.attr("Tensor").attr("is_neg")).release().ptr();
  {
    PyObject* d = PyObject_GetAttrString(t.attr("Tensor").ptr(), "requires_grad");
    if (d && Py_TYPE(d) == &PyGetSetDescr_Type) requires_grad_getter = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset;
    if (!d) PyErr_Clear();
    // d stays referenced: the getter lives as long as torch's class.
  }
  torch_types::parameter = reinterpret_cast<PyTypeObject*>(py::object(t.attr("nn").attr("Parameter")).release().ptr());
  torch_types::tensor = reinterpret_cast<PyTypeObject*>(py::object(t.attr("Tensor")).release().ptr());  // last: the fast test
  return "";
}

std::string& refusal_of_torch() {
  static std::string s;
  return s;
}

// torch's dtype code as kiln's dtype, or nullopt for one kiln lacks.
std::optional<DType> dtype_of_code(int32_t code) {
  if (code == shim.f32) return DType::Float32;
  if (code == shim.f64) return DType::Float64;
  if (code == shim.i32) return DType::Int32;
  if (code == shim.i64) return DType::Int64;
  if (code == shim.b8) return DType::Bool;
  return std::nullopt;
}

const char* torch_dtype_name(int32_t code) {
  const std::optional<DType> d = dtype_of_code(code);
  return d ? runtime::dtype_name(*d) : nullptr;
}

}  // namespace

bool torch_seen() {
  if (resolved) return true;
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed; never imports
  if (!torch || torch == Py_None) return false;
  // torch half-imported (kiln used from inside torch's own import): wait.
  PyObject* tensor = PyObject_GetAttrString(torch, "Tensor");
  PyObject* nn = tensor ? PyObject_GetAttrString(torch, "nn") : nullptr;
  Py_XDECREF(tensor);
  Py_XDECREF(nn);
  if (!tensor || !nn) {
    PyErr_Clear();
    return false;
  }
  if (!refusal_of_torch().empty()) return false;
  try {
    refusal_of_torch() = resolve(torch);
  } catch (py::error_already_set& e) {
    refusal_of_torch() = std::string("torch could not be inspected: ") + e.what();
  }
  if (!refusal_of_torch().empty()) {
    // Said once: every torch tensor then stays torch's (Foreign) and runs there.
    PyErr_WarnEx(PyExc_RuntimeWarning, ("kiln cannot share torch tensors: " + refusal_of_torch()).c_str(), 1);
    return false;
  }
  resolved = true;
  install_torch_op_hook();
  try {
    install_torch_autograd(py::handle(torch));
  } catch (py::error_already_set& e) {
    rethrow_as_kiln(e);
  }
  // kiln/_torch_api.py's table: torch's functions, dtypes and tensor
  // methods as kiln's (torch_values.cpp maps them from now on).
  try {
    py::module_::import("kiln._torch_api").attr("install")(py::handle(torch));
  } catch (py::error_already_set& e) {
    rethrow_as_kiln(e);
  }
  return true;
}

const uint64_t* autocast_probe::excluded_word_of_this_thread() {
  // c10::impl::raw_local_dispatch_key_set: {uint64_t included_, excluded_}
  // (c10/core/impl/LocalDispatchKeySet.h, a POD the header static_asserts).
  void* set = c10_lib ? dlsym(c10_lib, "_ZN3c104impl26raw_local_dispatch_key_setE") : nullptr;
  return set ? reinterpret_cast<const uint64_t*>(set) + 1 : nullptr;
}

std::vector<std::pair<std::string, bool>> torch_direct_reads() {
  return {{"autocast", autocast_probe::mask != 0}, {"is_neg", is_neg_call != nullptr},
          {"requires_grad", impl_requires_grad != nullptr}};
}

bool torch_grad_enabled() { return resolved && shim.grad_mode_is_enabled(); }

std::string torch_tensor_refusal_except_grad(PyObject* o) {
  if (!is_torch_tensor(o)) return std::string("a subclass of torch.Tensor (") + Py_TYPE(o)->tp_name + ")";
  Handle h = handle_of(o);
  int32_t device = -1, layout = -1, dtype = -1;
  if (shim.get_device_type(h, &device) || shim.get_layout(h, &layout) || shim.get_dtype(h, &dtype))
    return "torch's C shim could not read it";
  if (device != shim.cpu) return "a tensor on device " + std::string(py::str(py::handle(o).attr("device")));
  if (layout != shim.strided) return "a " + std::string(py::str(py::handle(o).attr("layout"))) + " tensor";
  if (!torch_dtype_name(dtype))
    return "dtype " + std::string(py::str(py::handle(o).attr("dtype"))) +
           " (kiln takes float32, float64, int32, int64 and bool)";
  // A lazily negated view (x.conj().imag of a complex tensor,
  // torch._neg_view): its memory holds the values with the other sign.
  bool negated = false;
  if (is_neg_call) {
    negated = is_neg_call(h);
  } else {
    PyObject* neg = PyObject_CallOneArg(is_neg, o);
    if (!neg) throw py::error_already_set();
    negated = neg == Py_True;
    Py_DECREF(neg);
  }
  if (negated) return "a negative-bit view (torch negates its memory lazily; .resolve_neg() makes a plain tensor)";
  return "";
}

std::string torch_tensor_refusal(PyObject* o) {
  std::string why = torch_tensor_refusal_except_grad(o);
  if (!why.empty()) return why;
  if (shim.grad_mode_is_enabled() && torch_requires_grad(o))
    return "a tensor that requires grad while grad mode is on (torch's autograd runs it)";
  return "";
}

bool torch_requires_grad(PyObject* o) {
  if (impl_requires_grad) return impl_requires_grad(impl_of(handle_of(o)));
  // torch.Tensor.requires_grad is a C getter (a getset descriptor): called
  // directly it costs no attribute lookup, which matters on the per-call
  // sync of every mirrored tensor.
  if (requires_grad_getter) {
    PyObject* rg = requires_grad_getter->get(o, requires_grad_getter->closure);
    if (!rg) throw py::error_already_set();
    const bool r = rg == Py_True;
    Py_DECREF(rg);
    return r;
  }
  PyObject* rg = PyObject_GetAttr(o, requires_grad_name);
  if (!rg) throw py::error_already_set();
  const bool r = rg == Py_True;
  Py_DECREF(rg);
  return r;
}

Tensor tensor_from_torch(PyObject* o) {
  Handle h = handle_of(o);
  void* data = nullptr;
  int64_t dim = 0, offset = 0, *sizes = nullptr, *strides = nullptr;
  int32_t dtype = -1;
  if (shim.get_data_ptr(h, &data) || shim.get_dim(h, &dim) || shim.get_sizes(h, &sizes) ||
      shim.get_strides(h, &strides) || shim.get_storage_offset(h, &offset) || shim.get_dtype(h, &dtype))
    throw_error(ErrorKind::RuntimeError, "torch's C shim could not read a torch tensor");
  const DType dt = dtype_of_code(dtype).value_or(DType::Bool);
  runtime::Shape sz(sizes, sizes + dim), st(strides, strides + dim);
  // The Storage holds torch's storage, not the tensor object: a view made
  // here (a TensorImpl of its own over the same storage), so `x.data = y`,
  // x.set_() or resize_() on the caller's tensor cannot free memory a kiln
  // tensor still reads, as they cannot under a torch view.
  Handle alias = nullptr;
  if (shim.reinterpret(h, dim, sizes, strides, offset, &alias) || !alias)
    throw_error(ErrorKind::RuntimeError, "torch's C shim could not make a view of a torch tensor");
  Tensor t = Tensor::from_blob(data, sz, st, dt, [alias](void*) {
    // Freeing a storage may run Python (a storage over a NumPy array).
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    shim.delete_tensor(alias);
  });
  if (Py_TYPE(o) == torch_types::parameter) t.impl()->is_parameter = true;
  return t;
}

bool torch_tensor_matches(PyObject* o, const Tensor& t) {
  Handle h = handle_of(o);
  void* data = nullptr;
  int64_t dim = 0, *sizes = nullptr, *strides = nullptr;
  int32_t dtype = -1;
  if (shim.get_data_ptr(h, &data) || shim.get_dim(h, &dim) || shim.get_sizes(h, &sizes) ||
      shim.get_strides(h, &strides) || shim.get_dtype(h, &dtype))
    return false;
  const DType dt = dtype_of_code(dtype).value_or(DType::Bool);
  if (!torch_dtype_name(dtype) || dt != t.dtype() || dim != t.dim()) return false;
  if (t.numel() > 0 && data != t.raw_data()) return false;
  for (int64_t d = 0; d < dim; ++d)
    if (sizes[d] != t.sizes()[size_t(d)] || strides[d] != t.strides()[size_t(d)]) return false;
  return true;
}

// ----------------------------------------------------------- DLPack out --
namespace {
// DLPack's ABI (dlpack.h, v0.x: what torch._C._from_dlpack takes as a
// "dltensor" capsule).
struct DLDevice {
  int32_t device_type;  // kDLCPU = 1
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt 0, kDLFloat 2, kDLBool 6
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
// What the capsule owns: kiln's tensor (so its Storage) and the arrays.
struct Managed {
  DLManagedTensor m;
  Tensor t;
  runtime::Shape sizes, strides;
};
void managed_deleter(DLManagedTensor* m) { delete static_cast<Managed*>(m->manager_ctx); }
void capsule_destructor(PyObject* cap) {
  // Still named "dltensor": torch never took it (an error on the way).
  if (!PyCapsule_IsValid(cap, "dltensor")) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  if (m && m->deleter) m->deleter(m);
}
}  // namespace

py::object tensor_to_torch(const Tensor& t) {
  auto* owner = new Managed();
  owner->t = t;
  owner->sizes = t.sizes();
  owner->strides = t.strides();
  DLTensor& d = owner->m.dl_tensor;
  // The element pointer itself (byte_offset 0): a meta-free kiln tensor
  // always has storage here.
  d.data = t.numel() == 0 ? t.impl()->storage->data : t.raw_data();
  d.device = {1, 0};
  d.ndim = int32_t(t.dim());
  switch (t.dtype()) {
    case DType::Float32: d.dtype = {2, 32, 1}; break;
    case DType::Float64: d.dtype = {2, 64, 1}; break;
    case DType::Int32: d.dtype = {0, 32, 1}; break;
    case DType::Int64: d.dtype = {0, 64, 1}; break;
    case DType::Bool: d.dtype = {6, 8, 1}; break;
  }
  d.shape = owner->sizes.data();
  d.strides = owner->strides.data();
  d.byte_offset = 0;
  owner->m.manager_ctx = owner;
  owner->m.deleter = managed_deleter;
  PyObject* cap = PyCapsule_New(&owner->m, "dltensor", capsule_destructor);
  if (!cap) {
    delete owner;
    throw py::error_already_set();
  }
  py::object capsule = py::reinterpret_steal<py::object>(cap);
  PyObject* r = PyObject_CallOneArg(from_dlpack, cap);
  if (!r) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

}  // namespace kiln::python

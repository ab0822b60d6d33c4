#include "python/src/torch_values.h"

#include <cstring>
#include <string>

#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/foreign.h"
#include "python/src/tensor_identity.h"
#include "python/src/torch_autograd.h"
#include "python/src/torch_interop.h"
#include "python/src/torch_modules.h"
#include "runtime/semantics/builtins.h"
#include "runtime/tensor/host_tensors.h"
#include "runtime/tensor/ops.h"

namespace kiln::python {

using runtime::Kind;
using runtime::Tensor;
using runtime::Value;

namespace {

// A torch tensor kiln does not take, and a torch function kiln has no
// lowering for: Python objects like any other (their operations are
// torch's), whose use in a trace names why it breaks.
std::string torch_tensor_reason(void* h) {
  return "a torch tensor kiln does not take: " + torch_tensor_refusal(handle_of(h));
}
std::string torch_function_reason(void* h) {
  PyObject* o = handle_of(h);
  std::string name = "torch function";
  PyObject* mod = PyObject_GetAttrString(o, "__module__");
  // A builtin's __qualname__ is its C class's (_VariableFunctionsClass.erf):
  // its __name__ is what the program wrote.
  PyObject* qual = PyObject_GetAttrString(o, PyCFunction_Check(o) ? "__name__" : "__qualname__");
  PyErr_Clear();
  if (mod && qual && PyUnicode_Check(mod) && PyUnicode_Check(qual)) {
    std::string m = PyUnicode_AsUTF8(mod);
    // torch's builtins report their C home (torch._C._nn): name them as
    // the program reaches them.
    if (m == "torch._C._nn" || m == "torch._C._VariableFunctions" || m == "torch._C") m = "torch";
    name = m + "." + PyUnicode_AsUTF8(qual);
  }
  Py_XDECREF(mod);
  Py_XDECREF(qual);
  return name + " has no kiln lowering";
}
// Calling torch: kiln tensors go as torch tensors over their memory, so a
// torch function gets what it takes whatever the caller passed.
Value torch_call(void* h, const runtime::CallArgs& args) {
  return calling_python([&] {
    const size_t nkw = args.nkw(), npos = args.npos();
    auto arg = [](const Value& v) {
      if (v.is(Kind::Tensor)) {
        if (TensorIdentityScope* scope = TensorIdentityScope::active())
          if (PyObject* o = scope->find(v.as_tensor().impl()); o && is_torch_tensor(o))
            return py::reinterpret_borrow<py::object>(o);
        return tensor_to_torch(v.as_tensor());
      }
      return to_py(v);
    };
    py::tuple pos(npos);
    for (size_t i = 0; i < npos; ++i) pos[i] = arg(args[i]);
    py::dict kw;
    for (size_t i = 0; i < nkw; ++i) kw[py::str(args.kwnames->items[i].as_str())] = arg(args[npos + i]);
    return to_value_shared(py::handle(handle_of(h))(*pos, **kw));
  });
}

// A torch module holding a tensor kiln does not take: torch runs it.
std::string torch_module_reason(void* h) {
  std::string who = Py_TYPE(handle_of(h))->tp_name, why = "it holds a torch tensor kiln does not take";
  try {
    for (py::handle item : py::handle(handle_of(h)).attr("named_parameters")()) {
      py::tuple kv = py::reinterpret_borrow<py::tuple>(item);
      std::string r = torch_tensor_refusal(kv[1].ptr());
      if (!r.empty()) {
        why = "its parameter " + py::cast<std::string>(kv[0]) + " is " + r;
        break;
      }
    }
  } catch (py::error_already_set&) {
    PyErr_Clear();
  }
  return "torch runs the " + who + " module: " + why;
}

// A registry op reached with a torch tensor kiln does not take (a float16
// tensor, one that requires grad under grad mode): torch's function of the
// op's name runs it, as the program would have run it without kiln.
bool torch_op_hook(runtime::OpId id, const runtime::CallArgs& args, Value& out) {
  auto torch_object = [](const Value& v) {
    PyObject* o = foreign_object(v);
    return o && torch_types::tensor && PyObject_TypeCheck(o, torch_types::tensor);
  };
  bool any = false;
  for (size_t i = 0; i < args.nargs && !any; ++i) {
    const Value& v = args[i];
    any = torch_object(v);
    if (v.is(Kind::List) || v.is(Kind::Tuple))
      for (const Value& x : v.is(Kind::List) ? v.as<runtime::ListObj>()->items : v.as<runtime::TupleObj>()->items)
        any = any || torch_object(x);
  }
  if (!any) return false;
  // torch's form of the op, read off kiln/_torch_api.py's table
  // (torch_autograd.h): the same one graphs that record gradients run.
  PyObject* fn = torch_lowering(id);
  if (!fn) return false;
  out = calling_python([&] {
    const size_t nkw = args.nkw(), npos = args.npos();
    py::tuple pos(npos);
    for (size_t i = 0; i < npos; ++i) pos[i] = torch_argument(args[i]);
    py::dict kw;
    for (size_t i = 0; i < nkw; ++i) kw[py::str(args.kwnames->items[i].as_str())] = torch_argument(args[npos + i]);
    return to_value_shared(py::handle(fn)(*pos, **kw));
  });
  return true;
}

runtime::ForeignVTable with_reason(runtime::ForeignVTable vt, std::string (*why)(void*)) {
  vt.untraced_reason = why;
  return vt;
}
// A torch tensor that requires grad (and that kiln would otherwise take):
// its kiln view for the tracer (a mirrored parameter's one view, else one
// made now), whatever the grad mode; null for any other refused tensor.
runtime::Tensor torch_grad_tensor(void* h) {
  PyObject* o = handle_of(h);
  if (runtime::Tensor view = torch_held_grad_view(o); view.defined()) return view;
  if (!is_torch_tensor(o) || !torch_tensor_refusal_except_grad(o).empty() || !torch_requires_grad(o))
    return runtime::Tensor();
  return tensor_from_torch(o);
}
const runtime::ForeignVTable kTorchTensorVTable = [] {
  runtime::ForeignVTable vt = with_reason(kPyObjectVTable, torch_tensor_reason);
  vt.grad_tensor = torch_grad_tensor;
  return vt;
}();
const runtime::ForeignVTable kTorchFunctionVTable = [] {
  runtime::ForeignVTable vt = with_reason(kPyObjectVTable, torch_function_reason);
  vt.call = torch_call;
  vt.pure = nullptr;
  return vt;
}();
// kiln/_torch_api.py's TRACE_TIME rows (torch.jit.is_scripting, ...): the
// tracer calls torch's own function on known arguments and folds its answer,
// the one eager gets at that moment.
bool torch_trace_time_pure(void*) { return true; }
const runtime::ForeignVTable kTorchTraceTimeVTable = [] {
  runtime::ForeignVTable vt = kTorchFunctionVTable;
  vt.pure = torch_trace_time_pure;
  return vt;
}();
// torch.no_grad() & co.: the tracer traces their with-blocks as doing
// nothing; the classes (and a decorator's `clone`) are pure: calling them
// only makes such an object.
bool grad_mode_null_context(void*) { return true; }
bool grad_mode_pure(void*) { return true; }
const runtime::ForeignVTable kTorchGradModeVTable = [] {
  runtime::ForeignVTable vt = kPyObjectVTable;
  vt.null_context = grad_mode_null_context;
  return vt;
}();
const runtime::ForeignVTable kTorchGradModeFactoryVTable = [] {
  runtime::ForeignVTable vt = kPyObjectVTable;
  vt.pure = grad_mode_pure;
  return vt;
}();
// torch.autocast(..., enabled=False): a null context (its _enabled is an
// instance attribute its __init__ set: reading it runs no user code).
bool autocast_null_context(void* h) {
  return calling_python([&] {
    PyObject* enabled = PyObject_GetAttrString(handle_of(h), "_enabled");
    if (!enabled) {
      PyErr_Clear();
      return false;
    }
    const bool off = enabled == Py_False;
    Py_DECREF(enabled);
    return off;
  });
}
const runtime::ForeignVTable kTorchAutocastVTable = [] {
  runtime::ForeignVTable vt = kPyObjectVTable;
  vt.null_context = autocast_null_context;
  return vt;
}();
const runtime::ForeignVTable kTorchModuleVTable = [] {
  runtime::ForeignVTable vt = with_reason(kPyObjectVTable, torch_module_reason);
  vt.call = torch_call;
  return vt;
}();

}  // namespace

// A torch tensor kiln does not take: Foreign, its operations torch's own
// (the program still runs, on torch), its use in a trace a break naming why.
Value torch_tensor_foreign(py::handle obj) {
  Py_INCREF(obj.ptr());
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kTorchTensorVTable, obj.ptr()));
}

Value torch_refused_module(py::handle obj) {
  Py_INCREF(obj.ptr());
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kTorchModuleVTable, obj.ptr()));
}

Value torch_function_foreign(py::handle obj) {
  Py_INCREF(obj.ptr());
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kTorchFunctionVTable, obj.ptr()));
}

// A torch tensor as a Value: a kiln tensor over its memory, remembered for
// its identity, or the torch object itself (Foreign) when kiln cannot take
// it (torch_interop.h says why).
Value torch_tensor_value(py::handle obj) {
  PyObject* o = obj.ptr();
  TensorIdentityScope* scope = TensorIdentityScope::active();
  if (scope) {
    scope->torch_out = true;
    if (runtime::TensorImpl* impl = scope->find_torch(o)) return Value::tensor(Tensor(runtime::Ref<runtime::TensorImpl>(impl)));
    // A torch tensor an enclosing scope already had as a kiln tensor (the
    // graph output a residual passes to its resume function): that kiln
    // tensor again, if CPython's code in between left the torch object as
    // it was (no t_(), set_(), .data =, requires_grad_(), __class__ =).
    for (TensorIdentityScope* s = scope->outer(); s; s = s->outer()) {
      runtime::TensorImpl* impl = s->find_torch(o);
      if (!impl) continue;
      Tensor t{runtime::Ref<runtime::TensorImpl>(impl)};
      if (Py_TYPE(o) != torch_types::tensor || impl->is_parameter || !torch_tensor_matches(o, t) ||
          (torch_grad_enabled() && torch_requires_grad(o)))
        break;
      scope->remember_torch(impl, o);
      return Value::tensor(t);
    }
  }
  if (!torch_tensor_refusal(o).empty()) return torch_tensor_foreign(obj);
  Tensor t = tensor_from_torch(o);
  if (scope) scope->remember_torch(t.impl(), o);
  return Value::tensor(t);
}

Value torch_tensor_unscoped(py::handle obj) {
  if (!torch_tensor_refusal(obj.ptr()).empty()) return torch_tensor_foreign(obj);
  return Value::tensor(tensor_from_torch(obj.ptr()));
}

// The rest of torch once torch is seen (to_value's slow path): a torch
// tensor subclass stays torch's; a torch function kiln has no lowering for
// stays torch's too, and says so when traced. Null: not torch's.
Value torch_object_value(py::handle obj) {
  PyObject* o = obj.ptr();
  if (!torch_seen()) return Value::null();
  // Seeing torch just now installed kiln/_torch_api.py's table.
  if (const Value* op = op_function(o)) return *op;
  if (is_torch_tensor(o)) return torch_tensor_value(obj);
  if (PyObject_TypeCheck(o, torch_types::tensor)) return torch_tensor_foreign(obj);
  auto with_vt = [&](const runtime::ForeignVTable* vt) {
    Py_INCREF(o);
    return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(vt, o));
  };
  // Making an autocast object reads torch's settings and changes none (its
  // __enter__ does): the tracer calls the class on known arguments.
  if (Py_TYPE(o) == torch_types::autocast) return with_vt(&kTorchAutocastVTable);
  if (o == reinterpret_cast<PyObject*>(torch_types::autocast)) return with_vt(&kTorchGradModeFactoryVTable);
  for (PyTypeObject* mode : torch_types::grad_modes) {
    if (Py_TYPE(o) == mode) return with_vt(&kTorchGradModeVTable);
    if (o == reinterpret_cast<PyObject*>(mode)) return with_vt(&kTorchGradModeFactoryVTable);
    // @torch.no_grad() on a function: torch's wrapper calls self.clone()
    // for a fresh manager each call.
    if (PyMethod_Check(o) && Py_TYPE(PyMethod_GET_SELF(o)) == mode) {
      PyObject* fn = PyMethod_GET_FUNCTION(o);
      if (PyFunction_Check(fn) &&
          PyUnicode_CompareWithASCIIString(reinterpret_cast<PyFunctionObject*>(fn)->func_name, "clone") == 0)
        return with_vt(&kTorchGradModeFactoryVTable);
    }
  }
  // A module-level function or builtin of torch (torch.*, torch.nn.functional.*,
  // torch._C._nn.*): never translated (torch's Python internals are not the
  // program), called as torch's own. Methods (a torch module's forward) are
  // the program's and are translated as any Python function.
  if (PyFunction_Check(o) || PyCFunction_Check(o)) {
    PyObject* mod = PyFunction_Check(o) ? reinterpret_cast<PyFunctionObject*>(o)->func_module
                                        : reinterpret_cast<PyCFunctionObject*>(o)->m_module;
    PyObject* qual = PyFunction_Check(o) ? reinterpret_cast<PyFunctionObject*>(o)->func_qualname : nullptr;
    const bool method = qual && PyUnicode_Check(qual) && PyUnicode_FindChar(qual, '.', 0, PyUnicode_GET_LENGTH(qual), 1) >= 0;
    if (PyCFunction_Check(o) && !(mod && PyUnicode_Check(mod))) {
      // torch's builtins carry no module name: their self is torch's module object.
      PyObject* self = reinterpret_cast<PyCFunctionObject*>(o)->m_self;
      mod = self && PyModule_Check(self) ? PyModule_GetNameObject(self) : nullptr;
      if (mod) Py_DECREF(mod);  // a module's name lives as long as the module
      else PyErr_Clear();
    }
    if (!method && mod && PyUnicode_Check(mod)) {
      const char* m = PyUnicode_AsUTF8(mod);
      if (m && (std::strncmp(m, "torch.", 6) == 0 || std::strcmp(m, "torch") == 0)) return torch_function_foreign(obj);
    }
  }
  return Value::null();
}

// runtime::set_host_tensor_sample: a torch tensor of the traced tensor's
// shape and dtype on torch's meta device (no memory), a Parameter for a
// parameter; as torch's own object (Foreign), so isinstance and type see
// torch's classes. Null before torch is seen.
Value torch_tensor_sample(const Tensor& meta) {
  if (!torch_seen()) return Value::null();
  // A frame of a torch program: torch's code, or a torch tensor entered
  // this call (an argument, or an object's attribute the trace read). A
  // frame over kiln's tensors alone asks about kiln's.
  if (const TensorIdentityScope* scope = TensorIdentityScope::active(); scope && !scope->torch_out)
    return Value::null();
  return calling_python([&] {
    py::module_ torch = py::module_::import("torch");
    py::list sizes;
    for (int64_t d : meta.sizes()) sizes.append(d);
    const char* dtype = runtime::dtype_name(meta.dtype());  // kiln's names are torch's
    py::object t = torch.attr("empty")(sizes, py::arg("dtype") = torch.attr(dtype), py::arg("device") = "meta");
    if (meta.is_parameter()) t = torch.attr("nn").attr("Parameter")(t, py::arg("requires_grad") = false);
    return torch_tensor_foreign(t);
  });
}

// runtime::set_host_tensors_in_place: a call a torch tensor entered (an
// argument, an attribute read), or a frame of torch's code, is a torch
// program, whose `x op= y` is torch's in-place operator.
bool torch_tensors_in_place() {
  const TensorIdentityScope* scope = TensorIdentityScope::active();
  return scope && scope->torch_out;
}

void install_torch_op_hook() {
  runtime::set_foreign_op_hook(torch_op_hook);
  runtime::set_host_tensor_sample(torch_tensor_sample);
  runtime::set_host_tensors_in_place(torch_tensors_in_place);
}

void bind_torch(py::module_& m) {
  m.def("_map_torch", [](py::handle torch_obj, py::handle target) {
    guarded([&] { register_op_function(torch_obj, to_value(target)); });
    torch_obj.inc_ref();  // the table's key: torch's objects live for the process anyway
  }, "kiln/_torch_api.py's rows: compiled code reaching torch_obj gets target's kiln value.");
  m.def("_fold_torch", [](py::handle torch_obj) {
    guarded([&] {
      torch_obj.inc_ref();  // the Foreign value's reference
      register_op_function(torch_obj, Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(
                                                                       &kTorchTraceTimeVTable, torch_obj.ptr())));
    });
    torch_obj.inc_ref();  // the table's key, as for _map_torch
  }, "kiln/_torch_api.py's TRACE_TIME rows: compiled code calls torch_obj at trace time and folds the answer.");
  m.def("_register_tensor_method", [](const std::string& name, py::handle fn) {
    guarded([&] { runtime::register_tensor_method(name, to_value(fn)); });
  }, "A tensor method kiln code finds before the registry op of that name (kiln/_torch_api.py).");
  m.def("_raw_torch", [](py::handle fn) { return torch_function_foreign(fn); },
        "torch's own function as a kiln value (called as torch's, never mapped by the table).");
}

}  // namespace kiln::python

// kiln._C: the tensor type, every registry op (as kiln.<op> and as a tensor
// method), NumPy and buffer-protocol interop, and KBC programs (assemble,
// run on the VM). The Python package `kiln` builds its API on these.
#include <cstring>
#include <dlfcn.h>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "interpreter/assembler.h"
#include "interpreter/vm.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/eval_frame_hook.h"
#include "python/src/foreign.h"
#include "python/src/function_origins.h"
#include "python/src/functions.h"
#include "python/src/fx.h"
#include "python/src/host_classes.h"
#include "python/src/namespaces.h"
#include "python/src/nn.h"
#include "python/src/python_ints.h"
#include "python/src/python_vm.h"
#include "python/src/set_layout.h"
#include "python/src/torch_modules.h"
#include "python/src/torch_values.h"
#include "runtime/base/thread_pool.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/format.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_index.h"

namespace kiln::python {
namespace {

using runtime::CallArgs;
using runtime::DType;
using runtime::Kind;
using runtime::OpId;
using runtime::Tensor;
using runtime::Value;

const char* format_of(DType d) {
  switch (d) {
    case DType::Bool: return "?";
    case DType::Int32: return "i";
    case DType::Int64: return "q";
    case DType::Float32: return "f";
    case DType::Float64: return "d";
  }
  return "f";
}

py::object binary(runtime::BinOp op, py::handle a, py::handle b) {
  return guarded([&] { return to_py(runtime::binary_op(op, to_value(a), to_value(b))); });
}
py::object compare(runtime::CmpOp op, py::handle a, py::handle b) {
  return guarded([&] { return to_py(runtime::compare_op(op, to_value(a), to_value(b))); });
}

// A Python subscript key as the runtime reads it: slices with their bounds
// through __index__, Ellipsis as runtime::ellipsis(), lists kept as lists
// (an index array, or torch's sequence-as-tuple), ndarrays and anything
// else through to_value (a float there is the runtime's IndexError).
Value index_key(py::handle k) {
  PyObject* o = k.ptr();
  if (o == Py_Ellipsis) return runtime::ellipsis();
  if (PySlice_Check(o)) {
    auto* s = reinterpret_cast<PySliceObject*>(o);
    auto bound = [](PyObject* b) -> Value {
      if (b == Py_None) return Value::none();
      if (PyLong_Check(b) || (PyIndex_Check(b) && !PyFloat_Check(b))) {
        const Py_ssize_t v = PyNumber_AsSsize_t(b, PyExc_IndexError);
        if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
        return Value::integer(int64_t(v));
      }
      return to_value(py::handle(b));
    };
    return runtime::make_slice(bound(s->start), bound(s->stop), bound(s->step));
  }
  if (PyTuple_Check(o) || PyList_Check(o)) {
    std::vector<Value> items;
    for (py::handle i : py::reinterpret_borrow<py::sequence>(k)) items.push_back(index_key(i));
    return PyTuple_Check(o) ? runtime::make_tuple(std::move(items)) : runtime::make_list(std::move(items));
  }
  if (o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o)) return to_value(k);
  if (py::isinstance<Tensor>(k)) return to_value(k);
  if (py::isinstance<py::array>(k)) {
    py::array a = py::reinterpret_borrow<py::array>(k);
    const char kind = a.dtype().kind();
    if (kind == 'i' || kind == 'u') a = py::array(a.attr("astype")("int64"));
    return to_value(a);
  }
  if (PyIndex_Check(o) && !PyFloat_Check(o)) {  // numpy integers, user __index__
    const Py_ssize_t v = PyNumber_AsSsize_t(o, PyExc_IndexError);
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    return Value::integer(int64_t(v));
  }
  return to_value(k);
}

void bind_tensor(py::module_& m) {
  py::class_<Tensor> t(m, "Tensor", py::buffer_protocol(), R"(A dense, strided CPU tensor (float32, float64, int64, bool).

np.asarray(t) and t.numpy() share its memory; kiln.from_numpy(a) shares the array's.)");
  // kiln.Tensor is a type, not a constructor (kiln.tensor(data) makes one),
  // with the same TypeError as KBC's `Tensor(...)` (builtins.cpp).
  t.def(py::init([](const py::args&, const py::kwargs&) -> Tensor {
    throw py::type_error("cannot create 'Tensor' instances");
  }));
  t.def_buffer([](Tensor& self) -> py::buffer_info {
    const auto isz = py::ssize_t(runtime::itemsize(self.dtype()));
    std::vector<py::ssize_t> shape(self.sizes().begin(), self.sizes().end()), strides;
    for (int64_t s : self.strides()) strides.push_back(py::ssize_t(s) * isz);
    void* data = self.numel() ? self.raw_data() : nullptr;
    return py::buffer_info(data, isz, format_of(self.dtype()), self.dim(), shape, strides, /*readonly=*/false);
  });
  t.def_property_readonly("shape", [](const Tensor& self) { return py::tuple(py::cast(self.sizes())); });
  t.def_property_readonly("dtype", [](const Tensor& self) { return std::string(runtime::dtype_name(self.dtype())); });
  t.def_property_readonly("ndim", &Tensor::dim);
  t.def_property_readonly("T", [](const Tensor& self) {
    return guarded([&] { return to_py(runtime::get_attr(python_vm(), Value::tensor(self), runtime::intern("T").get())); });
  });
  t.def("numel", &Tensor::numel);
  t.def("dim", &Tensor::dim);
  t.def("size", [](const Tensor& self, py::object d) -> py::object {
    if (d.is_none()) return py::tuple(py::cast(self.sizes()));
    return guarded([&] { return py::int_(self.size(py::cast<int64_t>(d))); });
  }, py::arg("dim") = py::none());
  t.def("stride", [](const Tensor& self) { return py::tuple(py::cast(self.strides())); });
  t.def("is_contiguous", &Tensor::is_contiguous);
  t.def("item", [](const Tensor& self) {
    return guarded([&] {
      const double v = self.item();
      if (self.dtype() == DType::Bool) return py::object(py::bool_(v != 0));
      if (self.dtype() == DType::Int64) return py::object(py::int_(int64_t(v)));
      return py::object(py::float_(v));
    });
  });
  t.def("numpy", [](py::object self) { return py::array(py::buffer(self)); });
  t.def("tolist", [](py::object self) { return py::array(py::buffer(self)).attr("tolist")(); });
  t.def("data_ptr", [](const Tensor& self) { return reinterpret_cast<uintptr_t>(self.numel() ? self.raw_data() : nullptr); });
  // The one method reached without the program asking (pytest and
  // debuggers repr arguments): an instance whose __init__ never ran says
  // so instead of reading storage that holds no Tensor.
  t.def("__repr__", [](py::handle self) {
    const Tensor* t = constructed_instance<const Tensor>(self.ptr(), type_info_of<Tensor>());
    return t ? t->repr() : std::string("<kiln.Tensor whose __init__ has not run>");
  });
  t.def("__len__", [](const Tensor& self) {
    if (self.dim() == 0) throw py::type_error("len() of a 0-d tensor");
    return self.sizes()[0];
  });
  // Iteration yields t[0], t[1], ... (views), as torch's does.
  t.def("__iter__", [](const Tensor& self) {
    if (self.dim() == 0) throw py::type_error("iteration over a 0-d tensor");
    py::list rows;
    for (int64_t i = 0; i < self.sizes()[0]; ++i)
      rows.append(guarded([&] { return to_py(runtime::tensor_getitem(self, Value::integer(i))); }));
    return py::iter(rows);
  });
  t.def("__index__", [](const Tensor& self) {
    if (self.numel() != 1 || self.dtype() != DType::Int64)
      throw py::type_error("only integer tensors of a single element can be converted to an index");
    return guarded([&] { return int64_t(self.item()); });
  });
  t.def("__int__", [](const Tensor& self) { return guarded([&] { return int64_t(self.item()); }); });
  t.def("__setitem__", [](const Tensor& self, py::handle key, py::handle value) {
    guarded([&] {
      Value v = to_value(value);
      if (v.is(Kind::List) || v.is(Kind::Tuple)) {  // x[0] = [1, 2]: torch makes a tensor of the data
        py::object arr = py::module_::import("numpy").attr("asarray")(value);
        v = Value::tensor(tensor_from_numpy(arr).to(self.dtype()));
      }
      runtime::tensor_setitem(self, index_key(key), v);
      return 0;
    });
  });
  t.def_property_readonly("device", [](const Tensor&) { return py::module_::import("kiln").attr("device")("cpu"); });
  t.def_property_readonly("requires_grad", [](const Tensor&) { return false; });
  t.def_property_readonly("is_cuda", [](const Tensor&) { return false; });
  t.def("element_size", [](const Tensor& self) { return runtime::itemsize(self.dtype()); });
  t.def("__copy__", [](const Tensor& self) { return self; });
  // deepcopy: a new storage holding this view's elements, same sizes,
  // strides and offset are not kept (torch keeps them for whole-storage
  // views; a contiguous copy is what torch gives for views). memo maps ids.
  // Keyed by the TensorImpl too: two Python wrappers of one tensor (each
  // conversion makes a wrapper) stay one tensor in the copy.
  t.def("__deepcopy__", [](py::object self, py::dict memo) {
    const Tensor& t = py::cast<const Tensor&>(self);
    py::object key = py::make_tuple("kiln.Tensor", reinterpret_cast<uintptr_t>(t.impl()));
    if (memo.contains(key)) return py::object(memo[key]);
    py::object copy = guarded([&] {
      Tensor c = t.clone();
      return to_py(Value::tensor(t.is_parameter() ? c.as_parameter() : c));
    });
    memo[key] = copy;
    return copy;
  });
  // pickle: (kiln._tensor_from_bytes, (bytes, dtype, shape)) of a
  // contiguous copy; any protocol >= 2.
  t.def("__reduce__", [](const Tensor& self) {
    Tensor c = self.contiguous();
    py::bytes data(c.numel() ? static_cast<const char*>(c.raw_data()) : "",
                   size_t(c.numel()) * runtime::itemsize(c.dtype()));
    return py::make_tuple(py::module_::import("kiln._C").attr("_tensor_from_bytes"),
                          py::make_tuple(data, std::string(runtime::dtype_name(c.dtype())), py::tuple(py::cast(c.sizes()))));
  });
  m.def("_tensor_from_bytes", [](py::bytes data, const std::string& dtype, std::vector<int64_t> sizes) {
    return guarded([&] {
      const auto dt = runtime::dtype_from_name(dtype);
      if (!dt) throw_error(ErrorKind::ValueError, "unknown dtype '" + dtype + "'");
      Tensor t = Tensor::empty(sizes, *dt);
      const std::string_view b = data;
      if (b.size() != size_t(t.numel()) * runtime::itemsize(*dt))
        throw_error(ErrorKind::ValueError, "tensor data of " + std::to_string(b.size()) + " bytes does not fit " + dtype +
                                               runtime::shape_str(sizes));
      if (!b.empty()) std::memcpy(t.raw_data(), b.data(), b.size());
      return t;
    });
  });
  t.def("__bool__", [](const Tensor& self) { return guarded([&] { return runtime::truth(Value::tensor(self)); }); });
  t.def("__float__", [](const Tensor& self) { return guarded([&] { return self.item(); }); });
  // format(t, ".2f") as kiln code formats it (a one-element tensor as its
  // number, as torch does): the same text whether CPython or the VM runs it.
  t.def("__format__", [](const Tensor& self, const std::string& spec) {
    return guarded([&] { return runtime::format_value(Value::tensor(self), spec); });
  });
  t.def("__getitem__", [](const Tensor& self, py::handle key) {
    return guarded([&] { return to_py(runtime::tensor_getitem(self, index_key(key))); });
  });
  t.def("__array__", [](py::object self, py::args, py::kwargs) { return py::array(py::buffer(self)); });
  t.def("__dlpack_device__", [](const Tensor&) { return py::make_tuple(1, 0); });  // kDLCPU, device 0

  // Python's operator protocol names for the operators tensors support.
  static const std::pair<runtime::BinOp, const char*> kBinary[] = {
      {runtime::BinOp::ADD, "add"},     {runtime::BinOp::SUB, "sub"},           {runtime::BinOp::MUL, "mul"},
      {runtime::BinOp::TRUEDIV, "truediv"}, {runtime::BinOp::FLOORDIV, "floordiv"}, {runtime::BinOp::MOD, "mod"},
      {runtime::BinOp::POW, "pow"},     {runtime::BinOp::MATMUL, "matmul"},     {runtime::BinOp::AND, "and"},
      {runtime::BinOp::OR, "or"},       {runtime::BinOp::XOR, "xor"}};
  for (const auto& [op, name] : kBinary) {
    const runtime::BinOp o = op;
    t.def(("__" + std::string(name) + "__").c_str(), [o](py::handle a, py::handle b) { return binary(o, a, b); });
    t.def(("__r" + std::string(name) + "__").c_str(), [o](py::handle a, py::handle b) { return binary(o, b, a); });
  }
  static const std::pair<runtime::CmpOp, const char*> kCompare[] = {
      {runtime::CmpOp::LT, "lt"}, {runtime::CmpOp::LE, "le"}, {runtime::CmpOp::EQ, "eq"},
      {runtime::CmpOp::NE, "ne"}, {runtime::CmpOp::GT, "gt"}, {runtime::CmpOp::GE, "ge"}};
  for (const auto& [op, name] : kCompare) {
    const runtime::CmpOp o = op;
    t.def(("__" + std::string(name) + "__").c_str(), [o](py::handle a, py::handle b) { return compare(o, a, b); });
  }
  t.def("__neg__", [](py::handle a) { return guarded([&] { return to_py(runtime::unary_op(runtime::UnOp::NEG, to_value(a))); }); });
  t.def("__invert__", [](py::handle a) { return guarded([&] { return to_py(runtime::unary_op(runtime::UnOp::INVERT, to_value(a))); }); });
  t.def("__pos__", [](py::handle a) { return a; });
  // == is elementwise, so hashing is by identity (as torch does).
  t.def("__hash__", [](py::handle a) { return py::hash(py::int_(reinterpret_cast<uintptr_t>(a.ptr()))); });
}

// ops.def's TORCH column as ops.def spells it.
const char* torch_function_name(runtime::TorchFunction f) {
  switch (f) {
    case runtime::TorchFunction::Same: return "Same";
    case runtime::TorchFunction::Adapted: return "Adapted";
    case runtime::TorchFunction::Unmapped: return "Unmapped";
    case runtime::TorchFunction::NoTorch: return "NoTorch";
  }
  return "?";
}

// kiln.<op>(...) and Tensor.<op>(...) for every registry op: the same
// binding the VM uses (signature, defaults, keyword errors), so model code
// ports from torch by changing the import. op_torch_functions: ops.def's
// TORCH column by op name, for kiln/_torch_api.py's table.
void bind_ops(py::module_& m) {
  py::object tensor_cls = m.attr("Tensor");
  py::list names;
  py::dict torch_functions;
  for (int i = 0; i < runtime::kNumOps; ++i) {
    const runtime::OpDef& def = runtime::op_def(OpId(i));
    const OpId id = def.id;
    names.append(def.name);
    torch_functions[def.name] = torch_function_name(def.torch);
    m.def(def.name, [id](py::args args, py::kwargs kwargs) {
      return guarded([&] {
        PyArgs a(args, kwargs, py::handle(), ArgConversion::Copied);
        return to_py(runtime::call_op(id, a.call_args()));
      });
    }, def.signature);
    register_op_function(m.attr(def.name), runtime::op_builtin(i));
    if (def.arity != 0 && def.arity != -1) {
      tensor_cls.attr(def.name) = py::cpp_function(
          [id](py::handle self, py::args args, py::kwargs kwargs) {
            return guarded([&] {
              PyArgs a(args, kwargs, self, ArgConversion::Copied);
              return to_py(runtime::call_op(id, a.call_args()));
            });
          },
          py::name(def.name), py::is_method(tensor_cls), py::sibling(py::getattr(tensor_cls, def.name, py::none())));
    }
  }
  m.attr("op_names") = names;
  m.attr("op_torch_functions") = torch_functions;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "kiln's C++ core: tensors, ops, KBC, the tracer and its backends";
  install_python_hashes();  // first: nothing may be hashed before (runtime/base/hash.h)
  install_python_ints();
  install_function_origin_attrs();
  // GC support: a module's Python wrapper holds its kiln value here, and the
  // value may hold Python objects that hold the wrapper (visit_python_refs).
  auto gc_setup = py::custom_type_setup([](PyHeapTypeObject* heap_type) {
    PyTypeObject* type = &heap_type->ht_type;
    type->tp_flags |= Py_TPFLAGS_HAVE_GC;
    type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) {
      Py_VISIT(Py_TYPE(self));
      if (!py::detail::is_holder_constructed(self)) return 0;
      return visit_python_refs(py::cast<Value&>(py::handle(self)), visit, arg);
    };
    type->tp_clear = [](PyObject* self) {
      if (py::detail::is_holder_constructed(self)) py::cast<Value&>(py::handle(self)) = Value::none();
      return 0;
    };
  });
  py::class_<Value>(m, "Object", "A kiln value Python has no type for (a KBC function, a hook handle, ...)", gc_setup)
      .def("__repr__", [](const Value& v) { return runtime::repr(v); })
      .def("__getattr__", [](const Value& v, const std::string& name) {
        return guarded([&] { return to_py(runtime::get_attr(python_vm(), v, runtime::intern(name).get())); });
      })
      .def("__call__", [](const Value& v, py::args args, py::kwargs kwargs) {
        return guarded([&] {
          PyArgs a(args, kwargs);
          return to_py(python_vm().call(v, a.call_args()));
        });
      });
  m.def("_set_slots", &py_set_slots, "(N, [(i, element)], [dummy i]): a set's table (kiln._frontend)");
  m.def("builtin", [](const std::string& name) {
    return guarded([&] {
      const Value* b = runtime::builtins().find(name);
      if (!b) throw_error(ErrorKind::NameError, "kiln has no builtin '" + name + "'");
      return *b;
    });
  }, "A KBC builtin by name (Parameter, len, ...), as a kiln value.");
  m.def("builtin_table", [] {
    py::list rows;
    static const char* const how_names[] = {"fold", "trace", "effect"};
    static_assert(int(runtime::BuiltinHow::Effect) == 2, "one name per BuiltinHow");
    for (int i = 0; i < runtime::kNumBuiltinRows; ++i) {
      const runtime::BuiltinRow& r = runtime::builtin_row(runtime::BuiltinId(i));
      rows.append(py::make_tuple(r.name, how_names[int(r.how)], r.native));
    }
    return rows;
  }, "runtime/semantics/builtins.def: (name, how the tracer treats a call, whether kiln implements it) per row.");
  m.def("repr", [](py::handle v) { return guarded([&] { return runtime::repr(to_value(v)); }); });
  bind_tensor(m);
  bind_ops(m);
  bind_functions(m);
  bind_eval_frame_hook(m);
  bind_host_classes(m);
  install_import_hook();
  bind_nn(m);
  bind_fx(m);
  bind_torch(m);
  bind_torch_modules(m);

  m.def("from_numpy", [](py::handle a) { return guarded([&] { return tensor_from_numpy(a); }); },
        "A tensor sharing the array's memory (float32, float64, int64, bool).");
  m.def("tensor", [](py::handle data, py::object dtype) {
    return guarded([&] {
      py::module_ np = py::module_::import("numpy");
      py::object arr = np.attr("asarray")(data);
      std::string dt = dtype.is_none() ? "" : py::str(dtype).cast<std::string>();
      if (dt.empty()) {
        // torch's defaults: Python floats -> float32, ints -> int64.
        const std::string kind = py::str(arr.attr("dtype").attr("kind"));
        dt = kind == "f" ? "float32" : kind == "b" ? "bool" : kind == "i" || kind == "u" ? "int64" : "";
        if (dt.empty()) throw_error(ErrorKind::TypeError, "kiln.tensor: cannot make a tensor from " + std::string(py::repr(data)));
      }
      // A copy: kiln.tensor owns its data, like torch.tensor.
      arr = np.attr("array")(arr, py::arg("dtype") = dt, py::arg("copy") = true);
      Tensor shared = tensor_from_numpy(arr);
      return shared.clone();
    });
  }, py::arg("data"), py::arg("dtype") = py::none());
  // In traced code it is the builtin (runtime/semantics/builtins.def): Python data
  // known at trace time folds to a constant tensor.
  register_op_function(m.attr("tensor"), *runtime::builtins().find("tensor"));

  py::class_<interpreter::Program>(m, "Program", "An assembled KBC program")
      .def("global_", [](const interpreter::Program& p, const std::string& name) { return to_py(p.global(name)); })
      .def_readonly("filename", &interpreter::Program::filename);
  m.def("assemble", [](const std::string& text, const std::string& filename) {
    return guarded([&] { return interpreter::assemble(text, filename); });
  }, py::arg("text"), py::arg("filename") = "<kbc>");
  m.def("run", [](const interpreter::Program& p, const std::string& entry, py::args args) {
    return guarded([&] {
      std::vector<Value> values;
      for (py::handle a : args) values.push_back(to_value(a));
      interpreter::VM vm;
      return to_py(vm.run(p, entry, values));
    });
  }, py::arg("program"), py::arg("entry"));
  m.def("call", [](py::handle fn, py::args args, py::kwargs kwargs) {
    return guarded([&] {
      PyArgs a(args, kwargs);
      return to_py(python_vm().call(to_value(fn), a.call_args()));
    });
  }, "Calls a kiln callable (a KBC function, a module) with Python arguments.");
  m.def("manual_seed", [](uint64_t seed) { runtime::manual_seed(seed); });
  m.def("num_threads", [] { return runtime::num_threads(); },
        "Threads kiln's next kernel runs on (KILN_NUM_THREADS, else torch's, else every core).");
  // kiln._threads.follow_torch: torch's thread count as the pool's source.
  // at::get_num_threads is resolved in the already loaded torch library (the
  // handle of torch._C, whose dependencies dlsym searches too), not linked:
  // the core never depends on torch. It is per thread and costs nanoseconds
  // (a thread_local check and omp_get_max_threads), so the pool asks it on
  // every parallel_for and follows a later torch.set_num_threads at once.
  m.def("_follow_torch_threads", [](const std::string& torch_c_path) {
    void* lib = dlopen(torch_c_path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) return false;
    void* fn = dlsym(lib, "_ZN2at15get_num_threadsEv");  // int at::get_num_threads()
    if (!fn) return false;
    runtime::set_thread_count_source(reinterpret_cast<runtime::ThreadCountSource>(fn));
    return true;
  }, py::arg("torch_c_path"));
  m.def("_set_fixed_threads", [](int n) {
    // The fallback when torch's function cannot be found: a value read once.
    static int fixed = 0;
    fixed = n;
    runtime::set_thread_count_source(n > 0 ? +[] { return fixed; } : nullptr);
  }, py::arg("n"));
}

}  // namespace kiln::python

// kiln.nn's C++ side: Python Module subclasses backed by the runtime's
// Module object model (runtime/semantics/class_model.h), so the tracer reads _parameters,
// _modules and _buffers directly, exactly as for KBC modules.
//
// Each Python subclass gets a runtime class whose methods are the
// translated KBC forms of its functions (or Foreign callables when a method
// cannot be translated). A Python instance owns one ModuleObj; the ModuleObj
// knows its Python wrapper through a registry (a borrowed pointer, cleared
// when the wrapper dies), so a submodule read back from C++ comes out as the
// same Python object.
#include <pybind11/stl.h>

#include <unordered_map>

#include "python/src/nn.h"

#include "interpreter/vm.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/foreign.h"
#include "python/src/function_origins.h"
#include "python/src/functions.h"
#include "python/src/python_compat.h"
#include "python/src/python_vm.h"
#include "python/src/tensor_identity.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/descriptors.h"
#include "runtime/semantics/super.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::python {

using runtime::Kind;
using runtime::ModuleObj;
using runtime::Ref;
using runtime::Value;

namespace {

std::unordered_map<const ModuleObj*, PyObject*>& wrappers() {
  static auto* m = new std::unordered_map<const ModuleObj*, PyObject*>();
  return *m;
}

py::object& wrapper_factory() {
  static auto* f = new py::object();
  return *f;
}

// kiln class -> a weak reference to its Python class (kiln.nn.Module and its
// subclasses, the built-in wrappers). Weak: the Python class holds its kiln
// class (`_kiln_class`), not the other way round, so a local class defined
// in a test is collected with its kiln class. A dead entry reads as absent;
// a new class at a reused address overwrites its entry when registered.
std::unordered_map<const runtime::ClassObj*, py::object>& python_classes() {
  static auto* m = new std::unordered_map<const runtime::ClassObj*, py::object>();
  return *m;
}

runtime::Ref<runtime::ClassObj> class_of(const Value& v) {
  if (!v.is(Kind::Class)) throw_error(ErrorKind::TypeError, "expected a kiln class, got " + runtime::type_name(v));
  return Ref<runtime::ClassObj>(v.as<runtime::ClassObj>());
}

ModuleObj* module_of(const Value& v) {
  if (!v.is(Kind::Module)) throw_error(ErrorKind::TypeError, "expected a kiln module, got " + runtime::type_name(v));
  return v.as<ModuleObj>();
}

// A tensor's deep copy, once per TensorImpl in one deepcopy (shared
// parameters stay shared in the copy); parameters stay parameters.
Value copy_tensor(const runtime::Tensor& t, py::dict& memo) {
  py::object key = py::make_tuple("kiln.Tensor", reinterpret_cast<uintptr_t>(t.impl()));
  if (memo.contains(key)) return to_value(memo[key]);
  runtime::Tensor c = t.clone();
  if (t.is_parameter()) c = c.as_parameter();
  memo[key] = to_py(Value::tensor(c));
  return Value::tensor(c);
}

Value deepcopy_value(const Value& v, py::dict& memo);

// The module's plain attributes in its Python object's __dict__ too, as
// torch keeps them: Python's own lookup then finds an instance attribute
// before a class attribute of the same name (CPython runs everything
// outside graphs), while the tracer reads the C++ module. Done wherever
// attributes arrive other than through Module.__setattr__ (which keeps the
// two in step itself): a built-in's native __init__, a copy, an unpickle.
void fill_instance_dict(ModuleObj* m) {
  auto it = wrappers().find(m);
  if (it == wrappers().end()) return;
  py::dict d = py::reinterpret_borrow<py::dict>(PyObject_GenericGetDict(it->second, nullptr));
  Py_DECREF(d.ptr());  // (GenericGetDict gave a new reference; the object keeps its dict)
  for (const auto& [name, x] : m->attrs) d[py::str(name->s)] = to_py(x);
}

// A built-in class's native forward (null: none, or one written in Python).
const Value* native_forward(const Value& cls) {
  static const Ref<runtime::StrObj> forward_name = runtime::intern("forward");
  const Value* forward = class_of(cls)->lookup(forward_name.get());
  return forward && forward->is(Kind::Builtin) ? forward : nullptr;
}

// A module's deep copy: a new ModuleObj of the same class with every dict
// copied (tensors cloned, submodules copied, plain attributes through
// Python's copy.deepcopy; functions and classes shared, as Python shares
// them), hooks and flags kept, and a wrapper of the same Python class.
py::object deepcopy_module(const Value& v, py::dict& memo) {
  ModuleObj* src = module_of(v);
  py::object key = py::make_tuple("kiln.Module", reinterpret_cast<uintptr_t>(src));
  if (memo.contains(key)) return memo[key];
  py::object src_wrapper = module_to_py(v);
  Ref<ModuleObj> dst = runtime::new_module(src->cls);
  Value dv = Value::object(Kind::Module, dst);
  py::object w = py::module_::import("builtins").attr("object").attr("__new__")(py::type::of(src_wrapper));
  py::module_::import("builtins").attr("object").attr("__setattr__")(w, "_kiln_value", py::cast(dv));
  wrappers()[dst.get()] = w.ptr();
  memo[key] = w;
  memo[py::int_(reinterpret_cast<uintptr_t>(src_wrapper.ptr()))] = w;
  for (const auto& [name, x] : src->params) dst->params.set(name, deepcopy_value(x, memo));
  for (const auto& [name, x] : src->buffers) dst->buffers.set(name, deepcopy_value(x, memo));
  for (const auto& [name, x] : src->modules) dst->modules.set(name, deepcopy_value(x, memo));
  for (const auto& [name, x] : src->attrs) dst->attrs.set(name, deepcopy_value(x, memo));
  dst->forward_pre_hooks = src->forward_pre_hooks;
  dst->forward_hooks = src->forward_hooks;
  dst->training = src->training;
  dst->lazy = src->lazy;
  dst->bump_version();
  fill_instance_dict(dst.get());
  return w;
}

Value deepcopy_value(const Value& v, py::dict& memo) {
  switch (v.kind()) {
    case Kind::Tensor: return copy_tensor(v.as_tensor(), memo);
    case Kind::Module: return module_from_py(deepcopy_module(v, memo));
    case Kind::Function:
    case Kind::BoundMethod:
    case Kind::Builtin:
    case Kind::Class:
    case Kind::Code:
    case Kind::Property:
    case Kind::StaticMethod:
    case Kind::ClassMethod: return v;  // shared, as copy.deepcopy shares functions and classes
    default: {
      py::object obj = to_py(v);
      py::object copy = py::module_::import("copy").attr("deepcopy")(obj, memo);
      return to_value(copy);
    }
  }
}

}  // namespace

py::object module_to_py(const Value& v) {
  const ModuleObj* m = v.as<ModuleObj>();
  if (m->host) return py::reinterpret_borrow<py::object>(static_cast<PyObject*>(m->host));  // a torch module's mirror
  if (auto it = wrappers().find(m); it != wrappers().end()) return py::reinterpret_borrow<py::object>(it->second);
  // Made on the C++ side (a built-in module's own children, a module built by
  // KBC): kiln.nn wraps it in the Python class that matches its class.
  if (!wrapper_factory()) return py::cast(v);
  return wrapper_factory()(py::cast(v));
}

py::object& module_base() {  // kiln.nn.Module, once kiln.nn is imported
  static auto* b = new py::object();
  return *b;
}

// Subclass tests by the type's MRO (PyType_IsSubtype), not isinstance():
// kiln.nn.Module has a metaclass, and isinstance() would look up and call
// its __instancecheck__ on every conversion.
static bool derives_from_module(PyTypeObject* t) {
  return module_base() && PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(module_base().ptr()));
}

Value class_from_py(py::handle cls) {
  if (!PyType_Check(cls.ptr()) || !derives_from_module(reinterpret_cast<PyTypeObject*>(cls.ptr())))
    return Value::null();
  // The class's own `_kiln_class` (not an inherited one: a subclass in the
  // middle of its __init_subclass__ has none yet, and is no kiln class yet).
  PyObject* dict = type_dict(reinterpret_cast<PyTypeObject*>(cls.ptr()));
  PyObject* kc = dict ? PyDict_GetItemString(dict, "_kiln_class") : nullptr;  // borrowed
  if (!kc || !py::isinstance<Value>(kc)) return Value::null();
  Value v = py::cast<Value>(kc);
  return v.is(Kind::Class) ? v : Value::null();
}

py::object class_to_py(const Value& cls) {
  auto it = python_classes().find(cls.as<runtime::ClassObj>());
  if (it == python_classes().end()) return py::object();
  py::object c = it->second();  // the weak reference, called
  return c.is_none() ? py::object() : c;
}

Value module_from_py(py::handle obj) {
  if (!derives_from_module(Py_TYPE(obj.ptr()))) return Value::null();
  // Set by Module.__new__ through object.__setattr__: a plain slot read.
  py::object v = py::reinterpret_steal<py::object>(PyObject_GenericGetAttr(obj.ptr(), py::str("_kiln_value").ptr()));
  if (!v) {
    PyErr_Clear();
    return Value::null();
  }
  return py::isinstance<Value>(v) ? py::cast<Value>(v) : Value::null();
}

namespace {
// C.name = v / del C.name from kiln code on a class that is a Python class:
// done on the Python class (its metaclass reports it back, _ModuleType).
bool python_class_attr(runtime::ClassObj* cls, const runtime::StrObj* name, const Value& value) {
  py::object c = class_to_py(Value::object(Kind::Class, cls));
  if (!c) return false;
  try {
    if (value.is_null()) {
      if (PyObject_DelAttr(c.ptr(), py::str(name->s).ptr()) != 0) throw py::error_already_set();
    } else {
      py::setattr(c, py::str(name->s), to_py(value));
    }
  } catch (py::error_already_set& e) {
    rethrow_as_kiln(e);  // Python's own error (a read-only attribute, a missing one)
  }
  return true;
}

}  // namespace

void bind_nn(py::module_& m) {
  runtime::set_host_class_attr_hook(python_class_attr);
  // super() over a Python class that is no kiln class (a plain helper
  // class's method translated to KBC) is Python's own business.
  runtime::set_host_super(foreign(py::module_::import("builtins").attr("super")));
  m.def("_set_module_wrapper_factory", [](py::object f) { wrapper_factory() = std::move(f); });
  m.def("_set_module_base", [](py::object base) { module_base() = std::move(base); });
  m.def("module_class", [](const std::string& name) {
    return guarded([&] {
      const Value* c = runtime::builtins().find(name);
      if (!c || !c->is(Kind::Class)) throw_error(ErrorKind::NameError, "kiln has no module class '" + name + "'");
      return *c;
    });
  }, "The runtime class of a built-in module (Module, Linear, Sequential, ...).");
  m.def("make_class", [](const std::string& name, const std::string& qualname, const Value& base) {
    return guarded([&] {
      Ref<runtime::ClassObj> cls = runtime::make_class(name, class_of(base));
      if (qualname != name) cls->qualname = qualname;
      return Value::object(Kind::Class, cls);
    });
  }, "A runtime class for a Python Module subclass (its attributes are read with read_class_attrs_from).");
  m.def("register_class", [](const Value& kc, py::handle pycls, bool construct) {
    guarded([&] {
      Ref<runtime::ClassObj> cls = class_of(kc);
      py::object ref = py::weakref(pycls);
      python_classes()[cls.get()] = ref;
      if (construct) {
        // Calling the class from KBC constructs it in Python: its own
        // __new__ and __init__ run, as `Child()` in Python would.
        cls->constructor = runtime::make_builtin_closure(
            cls->name, [ref](runtime::CallContext& ctx, const runtime::CallArgs& args) {
              py::object c = ref();
              if (c.is_none()) throw_error(ErrorKind::TypeError, "the Python class of this kiln class is gone");
              return ctx.call(foreign(c), args);
            });
      }
      return 0;
    });
  }, "kc and pycls are one class (class_to_py / class_from_py); construct: calling kc calls pycls.");
  m.def("python_class", [](const Value& kc) -> py::object {
    py::object c = class_to_py(kc);
    return c ? c : py::none();
  }, "The Python class of a kiln class, or None.");
  m.def("make_property", [](py::handle fget, py::handle fset, py::handle fdel) {
    auto fn = [](py::handle f) { return f.is_none() ? Value::null() : py::cast<Value>(f); };
    return runtime::make_property(fn(fget), fn(fset), fn(fdel));
  }, py::arg("fget"), py::arg("fset") = py::none(), py::arg("fdel") = py::none(),
     "property(fget, fset, fdel) of KBC functions or Python callables; None: absent.");
  m.def("make_staticmethod", [](const Value& f) { return runtime::make_staticmethod(f); });
  m.def("make_classmethod", [](const Value& f) { return runtime::make_classmethod(f); });
  m.def("as_value_shared", [](py::handle obj) { return guarded([&] { return to_value_shared(obj); }); },
        "A Python object as kiln sees an argument: a list, dict or set stays the caller's own object.");
  m.def("module_delattr", [](const Value& v, const std::string& name) {
    guarded([&] {
      runtime::module_delattr(v, runtime::intern(name).get(), &python_vm());
      return 0;
    });
  }, "torch's __delattr__: the entry leaves _parameters, _modules, _buffers or the attributes.");
  m.def("as_value", [](py::handle obj) { return guarded([&] { return to_value(obj); }); },
        "A Python object as the kiln value kiln would see (KBC function, Foreign, ...).");
  m.def("module_new", [](const Value& cls, py::handle wrapper) {
    return guarded([&] {
      Value v = Value::object(Kind::Module, runtime::new_module(class_of(cls)));
      wrappers()[v.as<ModuleObj>()] = wrapper.ptr();
      return v;
    });
  }, "A fresh module of a Python subclass's class, owned by `wrapper` (its __init__ runs in Python).");
  m.def("module_init_builtin", [](const Value& v, py::args args, py::kwargs kwargs) {
    guarded([&] {
      // The nearest built-in class's native __init__ (a subclass's own
      // __init__, in its method table, is what called this).
      const runtime::ClassObj* cls = runtime::builtin_module_class(module_of(v)->cls->builtin_kind()).get();
      const Value* init = cls ? cls->methods.find("__init__") : nullptr;
      if (!init) return 0;
      PyArgs a(args, kwargs);
      std::vector<Value> full{v};
      full.insert(full.end(), a.call_args().args, a.call_args().args + a.call_args().nargs);
      python_vm().call(*init, runtime::CallArgs{full.data(), full.size(), a.call_args().kwnames});
      fill_instance_dict(module_of(v));
      return 0;
    });
  }, "A built-in module's native __init__ on an existing module (nn.Linear.__init__).");
  m.def("module_release", [](const Value& v, py::handle wrapper) {
    auto it = wrappers().find(module_of(v));
    if (it != wrappers().end() && it->second == wrapper.ptr()) wrappers().erase(it);
  }, "`wrapper` is going: the module surfaces in Python again through a new wrapper.");
  m.def("module_adopt", [](const Value& v, py::handle wrapper) {
        wrappers()[module_of(v)] = wrapper.ptr();
        fill_instance_dict(module_of(v));
      },
        "`wrapper` is the module's Python object while it lives.");
  m.def("module_setattr", [](const Value& v, const std::string& name, py::handle value) {
    return guarded([&] {
      const auto key = runtime::intern(name);
      runtime::module_setattr(v, key, to_value_shared(value));
      return module_of(v)->attrs.contains(key.get());
    });
  }, "torch's __setattr__ on the C++ module; whether the value is a plain attribute (not a parameter, "
     "buffer or submodule), which Python's __dict__ then holds too.");
  m.def("module_getattr", [](const Value& v, const std::string& name) {
    return guarded([&] {
      const auto key = runtime::intern(name);
      Value r = runtime::module_getattr(python_vm(), v, key.get());
      const bool container = r.is(Kind::List) || r.is(Kind::Dict) || r.is(Kind::Set);
      const Value* slot = container ? runtime::module_instance_slot(module_of(v), key.get()) : nullptr;
      if (!slot || !slot->is_same(r)) return to_py(r);
      // A list/dict/set kiln code stored on the module: from now on the
      // module holds the Python object Python sees, so `m.items.append(1)`
      // in Python changes what kiln code reads next (one object, not a
      // fresh copy per read).
      py::object shared = to_py(r);
      runtime::module_setattr(v, key, foreign(shared));
      return shared;
    });
  });
  // Module.__call__ (kiln/nn/__init__.py) is CPython's: it asks for the
  // hooks and the built-in forward here and runs the program's own
  // callables itself, so an eager call of a kiln.nn module never runs the
  // program on the KBC VM.
  m.def("module_hooks", [](const Value& v) {
    const ModuleObj* mod = module_of(v);
    auto list = [](const std::vector<runtime::Hook>& hooks) {
      py::list out;  // a copy: a hook may remove itself while they run
      for (const runtime::Hook& h : hooks) out.append(py::make_tuple(h.id, to_py(h.fn)));
      return out;
    };
    return py::make_tuple(list(mod->forward_pre_hooks), list(mod->forward_hooks));
  }, "(pre-hooks, hooks) of a module, each a list of (id, callable) in call order.");
  m.def("module_materialize", [](const Value& v, py::args args, py::kwargs kwargs) {
    guarded([&] {
      ModuleObj* mod = module_of(v);
      if (mod->lazy) {
        PyArgs a(args, kwargs);
        runtime::materialize_lazy(mod, a.call_args());
      }
      return 0;
    });
  }, "A lazy module's parameters, shaped by its first call's arguments (no-op once made).");
  m.def("module_forward", [](const Value& cls, const Value& v, py::args args, py::kwargs kwargs) {
    TensorIdentityScope identity;
    return guarded([&] {
      ModuleObj* mod = module_of(v);
      // cls's, not the instance's class's: a subclass's super().forward(x).
      // Only a native one: a forward written in Python is CPython's to run.
      const Value* forward = native_forward(cls);
      if (!forward)
        throw_error(ErrorKind::NotImplementedError,
                    "Module [" + mod->class_name() + "] is missing the required \"forward\" function");
      PyArgs a(args, kwargs);
      std::vector<Value> full{v};
      const runtime::CallArgs ca = a.call_args();
      full.insert(full.end(), ca.args, ca.args + ca.nargs);
      return to_py(python_vm().call(*forward, runtime::CallArgs{full.data(), full.size(), ca.kwnames}));
    });
  }, "Built-in class cls's native forward on module v (no hooks: Module.__call__ runs them).");
  m.def("class_has_native_forward", [](const Value& cls) { return native_forward(cls) != nullptr; });
  m.def("module_class_of", [](const Value& v) { return Value::object(Kind::Class, module_of(v)->cls); });
  m.def("class_name", [](const Value& cls) { return class_of(cls)->name; });
  m.def("class_id", [](const Value& cls) { return reinterpret_cast<uintptr_t>(class_of(cls).get()); },
        "The runtime class's identity (names repeat: two local classes called Block).");
  m.def("module_getitem", [](const Value& v, py::handle key) {
    return guarded([&] { return to_py(runtime::module_getitem(v, to_value(key))); });
  });
  m.def("module_deepcopy", [](const Value& v, py::dict memo) { return guarded([&] { return deepcopy_module(v, memo); }); },
        "copy.deepcopy of a module (Module.__deepcopy__).");
  // pickle: the module's state as plain Python data; the class is pickled
  // by reference (Python's rule: it must be importable).
  m.def("module_state", [](const Value& v) {
    return guarded([&] {
      ModuleObj* src = module_of(v);
      if (!src->forward_pre_hooks.empty() || !src->forward_hooks.empty())
        throw_error(ErrorKind::TypeError, "cannot pickle a " + src->class_name() + " module with hooks (hook functions "
                                          "are kiln code); remove them or use copy.deepcopy");
      auto items = [](const runtime::NameMap& m) {
        py::list out;
        for (const auto& [name, x] : m) out.append(py::make_tuple(name->s, to_py(x)));
        return out;
      };
      return py::make_tuple(items(src->params), items(src->buffers), items(src->modules), items(src->attrs),
                            src->training, src->lazy);
    });
  });
  m.def("module_set_state", [](const Value& v, py::tuple state) {
    guarded([&] {
      ModuleObj* dst = module_of(v);
      auto fill = [](runtime::NameMap& m, py::handle items, bool param) {
        for (py::handle it : items) {
          py::tuple kv = py::reinterpret_borrow<py::tuple>(it);
          Value x = to_value(kv[1]);
          if (param && x.is(Kind::Tensor)) x = Value::tensor(x.as_tensor().as_parameter());
          m.set(py::cast<std::string>(kv[0]), x);
        }
      };
      fill(dst->params, state[0], true);
      fill(dst->buffers, state[1], false);
      fill(dst->modules, state[2], false);
      fill(dst->attrs, state[3], false);
      dst->training = py::cast<bool>(state[4]);
      dst->lazy = py::cast<bool>(state[5]);
      dst->bump_version();
      fill_instance_dict(dst);
      return 0;
    });
  });
  m.def("module_len", [](const Value& v) { return guarded([&] { return runtime::module_len(v); }); });
  m.def("module_items", [](const Value& v) {
    return guarded([&] {
      py::list out;
      for (const Value& x : runtime::module_iter_items(v)) out.append(to_py(x));
      return out;
    });
  }, "What iterating a container module yields (children; a ModuleDict's keys).");
}

}  // namespace kiln::python

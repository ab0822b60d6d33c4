#include "python/src/foreign.h"
#include "python/src/python_compat.h"

#include "python/src/convert.h"
#include "python/src/set_layout.h"
#include "python/src/torch_modules.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/super.h"
#include "runtime/semantics/value_ops.h"
#include "variables/variable_tracker.h"

namespace kiln::python {

using runtime::Kind;
using runtime::Value;

void pull_after_error() {
  try {
    mirrors_pull();
  } catch (...) {
    PyErr_Clear();  // the error being raised wins
  }
}

namespace {

Value foreign_getattr(void* h, std::string_view name) {
  return calling_python([&] { return to_value_shared(py::handle(handle_of(h)).attr(py::str(std::string(name)))); });
}
void foreign_setattr(void* h, std::string_view name, const Value& v) {
  calling_python([&] {
    if (v.is_null()) {  // the seam's convention for `del obj.name`
      if (PyObject_DelAttr(handle_of(h), py::str(std::string(name)).ptr()) != 0) throw py::error_already_set();
      return 0;
    }
    py::handle(handle_of(h)).attr(py::str(std::string(name))) = to_py(v);
    return 0;
  });
}
Value foreign_call(void* h, const runtime::CallArgs& args) {
  return calling_python([&] {
    const size_t nkw = args.nkw(), npos = args.npos();
    py::tuple pos(npos);
    for (size_t i = 0; i < npos; ++i) pos[i] = to_py(args[i]);
    py::dict kw;
    for (size_t i = 0; i < nkw; ++i)
      kw[py::str(args.kwnames->items[i].as_str())] = to_py(args[npos + i]);
    return to_value_shared(py::handle(handle_of(h))(*pos, **kw));
  });
}
Value foreign_binary(void* h, int op, const Value& other, bool reflected, bool inplace) {
  static const char* names[] = {
#define KILN_BINOP(E, SYM, T) #E,
#include "runtime/value/operators.def"
#undef KILN_BINOP
  };
  static const std::pair<const char*, const char*> py_ops[] = {
      {"ADD", "add"},   {"SUB", "sub"},          {"MUL", "mul"}, {"TRUEDIV", "truediv"}, {"FLOORDIV", "floordiv"},
      {"MOD", "mod"},   {"POW", "pow"},          {"MATMUL", "matmul"}, {"AND", "and_"},  {"OR", "or_"},
      {"XOR", "xor"},   {"LSHIFT", "lshift"},    {"RSHIFT", "rshift"}};
  return calling_python([&] {
    const char* fn = nullptr;
    for (const auto& [k, v] : py_ops)
      if (std::string_view(k) == names[op]) fn = v;
    py::object opmod = py::module_::import("operator");
    py::object self = py::reinterpret_borrow<py::object>(handle_of(h));
    py::object o = to_py(other);
    if (inplace && !reflected) {
      // operator.isub & co.: the object's own __isub__ (a caller's set or
      // dict is mutated, and the result is that very object)
      std::string name(fn);
      if (name.back() == '_') name.pop_back();
      return to_value_shared(opmod.attr(("i" + name).c_str())(self, o));
    }
    return to_value(reflected ? opmod.attr(fn)(o, self) : opmod.attr(fn)(self, o));
  });
}
// Python's names of the comparisons < <= == != > >=, by CmpOp id (the
// operator module's functions; "__lt__" & co. are the special methods).
constexpr const char* kPyCompareOps[] = {"lt", "le", "eq", "ne", "gt", "ge"};
static_assert(int(runtime::CmpOp::LT) == 0 && int(runtime::CmpOp::GE) == 5, "kPyCompareOps follows operators.def");
// compare_op answers is / is not / in / not in itself (identity, and the
// container protocol's `contains`): only < <= == != > >= come here.
Value foreign_compare(void* h, int op, const Value& other) {
  if (op < 0 || op >= int(std::size(kPyCompareOps))) throw_error(ErrorKind::TypeError, "unsupported comparison");
  return calling_python([&] {
    py::object opmod = py::module_::import("operator");
    py::object self = py::reinterpret_borrow<py::object>(handle_of(h));
    return to_value(opmod.attr(kPyCompareOps[op])(self, to_py(other)));
  });
}
// Whether `obj op other` runs no user code: neither operand's type
// defines the operator (or its reflection) in Python, so CPython's compare
// is C slots alone (str's for a str Enum, object's identity for a plain
// Enum). `other` is a kiln value or another Python object.
bool foreign_pure_compare(void* h, int op, const Value& other) {
  if (op < 0 || op >= int(std::size(kPyCompareOps))) return false;
  auto c_only = [](PyTypeObject* t, runtime::CmpOp cmp) {
    py::str name("__" + std::string(kPyCompareOps[int(cmp)]) + "__");
    PyObject* attr = _PyType_Lookup(t, name.ptr());  // borrowed; no user code
    return !attr || Py_TYPE(attr) == &PyWrapperDescr_Type;
  };
  return calling_python([&] {
    PyObject* o = handle_of(h);
    py::object rhs = to_py(other);
    const auto cmp = runtime::CmpOp(op);
    return c_only(Py_TYPE(o), cmp) && c_only(Py_TYPE(rhs.ptr()), runtime::reflected_cmpop(cmp));
  });
}
bool foreign_truth(void* h) {
  return calling_python([&] { return PyObject_IsTrue(handle_of(h)) == 1 ? true : (PyErr_Occurred() ? throw py::error_already_set() : false); });
}
std::string foreign_repr(void* h) {
  return calling_python([&] { return std::string(py::repr(py::handle(handle_of(h)))); });
}
size_t foreign_hash(void* h) {
  return calling_python([&] { return size_t(py::hash(py::handle(handle_of(h)))); });
}
std::string foreign_format(void* h, std::string_view spec) {
  return calling_python([&] {
    py::str text = py::reinterpret_steal<py::str>(
        PyObject_Format(handle_of(h), py::str(spec.data(), spec.size()).ptr()));
    if (!text) throw py::error_already_set();
    return std::string(text);
  });
}
// The container protocol: the caller's own list, dict or set, worked on in
// place (ForeignVTable in runtime/value/value.h). Items read out stay shared.
runtime::Kind foreign_container(void* h) {
  PyObject* o = handle_of(h);
  if (PyList_CheckExact(o)) return Kind::List;
  if (PyDict_CheckExact(o)) return Kind::Dict;
  if (PySet_CheckExact(o)) return Kind::Set;
  return Kind::Null;
}
int64_t foreign_length(void* h) {
  return calling_python([&] {
    const Py_ssize_t n = PyObject_Size(handle_of(h));
    if (n < 0) throw py::error_already_set();
    return int64_t(n);
  });
}
Value foreign_getitem(void* h, const Value& key) {
  return calling_python([&] {
    PyObject* item = PyObject_GetItem(handle_of(h), to_py(key).ptr());
    if (!item) throw py::error_already_set();
    return to_value_shared(py::reinterpret_steal<py::object>(item));
  });
}
void foreign_setitem(void* h, const Value& key, const Value& value) {
  calling_python([&] {
    const int rc = value.is_null() ? PyObject_DelItem(handle_of(h), to_py(key).ptr())
                                   : PyObject_SetItem(handle_of(h), to_py(key).ptr(), to_py(value).ptr());
    if (rc < 0) throw py::error_already_set();
    return 0;
  });
}
// A Python iterator driven from kiln (for loops, unpacking, list(), ...).
struct PyIterator final : runtime::IteratorObj {
  py::object it;
  ~PyIterator() override {
    if (!Py_IsInitialized()) {
      it.release();  // the interpreter is gone: nothing to release
      return;
    }
    py::gil_scoped_acquire gil;
    it = py::object();
  }
  bool next(Value& out) override {
    return calling_python([&] {
      PyObject* item = PyIter_Next(it.ptr());
      if (!item) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return false;
      }
      out = to_value_shared(py::reinterpret_steal<py::object>(item));
      return true;
    });
  }
  void traverse(runtime::Visitor&) const override {}  // a Python object: Python's to track
};
Value foreign_iter(void* h) {
  return calling_python([&] {
    PyObject* it = PyObject_GetIter(handle_of(h));
    if (!it) throw py::error_already_set();
    auto obj = runtime::make_ref<PyIterator>();
    obj->it = py::reinterpret_steal<py::object>(it);
    return Value::object(Kind::Iterator, static_cast<runtime::Object*>(obj.get()));
  });
}
bool foreign_contains(void* h, const Value& item) {
  return calling_python([&] {
    const int rc = PySequence_Contains(handle_of(h), to_py(item).ptr());
    if (rc < 0) throw py::error_already_set();
    return rc == 1;
  });
}
std::string foreign_type_name(void* h) { return Py_TYPE(handle_of(h))->tp_name; }
// The caller's set read with its table (set_layout.h), or Null when that
// table is not kiln's: what it holds stays shared.
Value foreign_set_snapshot(void* h) {
  return calling_python([&] {
    PySetTable table = read_py_set(handle_of(h), [](py::handle i) { return to_value_shared(i); });
    if (!table.exact) return Value::null();
    Value s = runtime::make_set(false);
    assign_py_set(*s.as<runtime::SetObj>(), std::move(table));
    return s;
  });
}
// Pure functions the tracer may call on known values: Python's math
// module, and Python's own builtins whose row in runtime/semantics/builtins.def says
// Fold (hash, bytes, complex, ...).
bool foreign_pure(void* h) {
  PyObject* o = handle_of(h);
  const char* builtin_name = nullptr;
  if (PyCFunction_Check(o)) {
    auto* f = reinterpret_cast<PyCFunctionObject*>(o);
    PyObject* module = f->m_module;  // the module's name (a str) for a module function
    if (module && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "math") == 0) return true;
    if (module && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "builtins") == 0)
      builtin_name = f->m_ml->ml_name;
  } else if (PyType_Check(o)) {
    builtin_name = reinterpret_cast<PyTypeObject*>(o)->tp_name;  // a builtin type's tp_name is its bare name
  }
  if (!builtin_name) return false;
  const runtime::BuiltinRow* row = runtime::find_builtin_row(builtin_name);
  // (dict's row says Trace, for its handler over trackers; on known values
  // it is as pure as a Fold row)
  const bool pure_row = row && (row->how == runtime::BuiltinHow::Fold || std::string_view(builtin_name) == "dict");
  if (!pure_row) return false;
  // The real builtin of that name, not a look-alike: a C extension's type
  // may have a bare tp_name too.
  return PyDict_GetItemString(PyEval_GetBuiltins(), builtin_name) == o;
}
bool foreign_subclass_of(void* h, const Value& info) {
  return calling_python([&] {
    const int rc = PyObject_IsSubclass(handle_of(h), to_py(info).ptr());
    if (rc < 0) throw py::error_already_set();
    return rc == 1;
  });
}
bool foreign_instance_check(void* h, const Value& obj, bool subclass) {
  return calling_python([&] {
    const int rc = subclass ? PyObject_IsSubclass(to_py(obj).ptr(), handle_of(h))
                            : PyObject_IsInstance(to_py(obj).ptr(), handle_of(h));
    if (rc < 0) throw py::error_already_set();
    return rc == 1;
  });
}
// Whether `descr` is enum.Enum's own `value` or `name` descriptor (never a
// subclass's override): it only reads the member's _value_ / _name_.
bool enum_stock_property(PyObject* descr, std::string_view name) {
  if (name != "value" && name != "name") return false;
  PyObject* enum_module = PyDict_GetItemString(PyImport_GetModuleDict(), "enum");  // borrowed; never imports
  if (!enum_module) return false;
  PyObject* enum_cls = PyObject_GetAttrString(enum_module, "Enum");
  if (!enum_cls) {
    PyErr_Clear();
    return false;
  }
  const bool stock = PyType_Check(enum_cls) &&
                     PyDict_GetItemString(type_dict(reinterpret_cast<PyTypeObject*>(enum_cls)), std::string(name).c_str()) == descr;
  Py_DECREF(enum_cls);
  return stock;
}

// Whether metaclass `meta` keeps type.__getattribute__ (no user code
// decides what a class's attribute read finds).
bool keeps_type_getattribute(PyTypeObject* meta) {
  static PyObject* type_getattribute = PyDict_GetItemString(type_dict(&PyType_Type), "__getattribute__");
  static PyObject* getattribute_name = PyUnicode_InternFromString("__getattribute__");
  return _PyType_Lookup(meta, getattribute_name) == type_getattribute;
}

// Whether metaclass `meta` reads a class's `name` (__name__, ...) with
// type's own getset: it keeps type.__getattribute__ and overrides neither.
bool type_own_name(PyTypeObject* meta, std::string_view name) {
  py::str key(name.data(), name.size());
  return keeps_type_getattribute(meta) && _PyType_Lookup(meta, key.ptr()) == PyDict_GetItem(type_dict(&PyType_Type), key.ptr());
}

// A class attribute that type's own lookup finds without running code (an
// Enum's member, a constant, a function): the metaclass keeps
// type.__getattribute__ (a __getattr__ of its, EnumType's, runs only on a
// miss, and a miss answers false here), no data descriptor of the
// metaclass has the name, and what the class's MRO holds is no
// descriptor, a plain function (which a class reads as itself), a
// staticmethod over a Python function (that function), or a classmethod
// over one (that function bound to the class: torch.autograd.Function's
// apply and forward).
bool plain_class_attr(PyTypeObject* cls, std::string_view name, Value& out) {
  return calling_python([&] {
    PyTypeObject* meta = Py_TYPE(cls);
    if (!keeps_type_getattribute(meta)) return false;
    py::str key(name.data(), name.size());
    PyObject* meta_attr = _PyType_Lookup(meta, key.ptr());  // borrowed; no user code
    if (meta_attr && Py_TYPE(meta_attr)->tp_descr_set) return false;
    PyObject* attr = _PyType_Lookup(cls, key.ptr());
    if (attr && Py_IS_TYPE(attr, &PyClassMethod_Type)) {
      py::object fn = py::reinterpret_steal<py::object>(PyObject_GetAttrString(attr, "__func__"));  // a member
      if (!fn) throw py::error_already_set();
      if (!PyFunction_Check(fn.ptr())) return false;
      auto bm = runtime::make_ref<runtime::BoundMethodObj>();
      bm->func = to_value_shared(fn);
      bm->self = to_value_shared(py::handle(reinterpret_cast<PyObject*>(cls)));
      bm->classmethod = true;
      out = Value::object(Kind::BoundMethod, bm);
      return true;
    }
    if (attr && Py_IS_TYPE(attr, &PyStaticMethod_Type)) {  // its function, as the class reads it
      py::object fn = py::reinterpret_steal<py::object>(PyObject_GetAttrString(attr, "__func__"));
      if (!fn) throw py::error_already_set();
      if (!PyFunction_Check(fn.ptr())) return false;
      out = to_value_shared(fn);
      return true;
    }
    if (!attr || (Py_TYPE(attr)->tp_descr_get && !PyFunction_Check(attr))) return false;
    out = to_value_shared(py::handle(attr));
    return true;
  });
}

// object.__getattribute__ / __setattr__ themselves, the slot wrappers in
// object's __dict__: what a class that keeps Python's generic lookup or
// store finds under those names.
PyObject* object_slot(const char* name) { return PyDict_GetItemString(type_dict(&PyBaseObject_Type), name); }  // borrowed, immortal

// The attribute `key` along tp.__mro__, after class `after` (null: from
// tp itself), read from each class's own __dict__ as CPython's lookup does
// (str keys: no user code). Borrowed; null when no class has it. *in_mro:
// false when `after` is not in the MRO (super() would raise).
PyObject* mro_lookup(PyTypeObject* tp, PyObject* after, PyObject* key, bool& in_mro) {
  PyObject* mro = tp->tp_mro;
  in_mro = mro != nullptr;
  if (!mro) return nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(mro);
  Py_ssize_t i = 0;
  if (after) {
    while (i < n && PyTuple_GET_ITEM(mro, i) != after) ++i;
    if (i == n) {
      in_mro = false;
      return nullptr;
    }
    ++i;
  }
  for (; i < n; ++i) {
    PyObject* dict = type_dict(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i)));
    if (PyObject* v = PyDict_GetItemWithError(dict, key)) return v;
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  return nullptr;
}

// OrderedDict, from the C module the collections package imports it from.
PyTypeObject* ordered_dict_type() {
  static PyTypeObject* const od = [] {
    py::object t = py::module_::import("collections").attr("OrderedDict");
    return reinterpret_cast<PyTypeObject*>(t.release().ptr());  // kept for good
  }();
  return od;
}

// The name of `attr` when it is one of dict's or OrderedDict's own methods
// on the storage that kiln's dict methods model; null otherwise. dict's
// never call a subclass's overrides. Of OrderedDict's only those that keep
// to the storage in insertion order, as a dict's: its update and
// setdefault call the subclass's __setitem__ (MutableMapping's), its copy
// makes an instance of the subclass, and move_to_end / popitem(last=)
// have no dict form.
const char* dict_storage_method(PyObject* attr) {
  static const std::vector<std::pair<PyObject*, const char*>> methods = [] {
    std::vector<std::pair<PyObject*, const char*>> found;
    for (const char* name : {"get", "__getitem__", "__contains__", "__setitem__", "__delitem__", "keys", "values",
                             "items", "update", "setdefault", "pop", "clear", "copy"})
      if (PyObject* m = PyDict_GetItemString(type_dict(&PyDict_Type), name)) found.emplace_back(m, name);  // borrowed, kept by the type
    for (const char* name : {"__setitem__", "__delitem__", "keys", "values", "items"})
      if (PyObject* m = PyDict_GetItemString(type_dict(ordered_dict_type()), name)) found.emplace_back(m, name);
    return found;
  }();
  for (const auto& [m, name] : methods)
    if (m == attr) return name;
  return nullptr;
}

// What reading a class attribute through an object gives when the class
// lookup found `attr` (super's binding, a special method's): a Python
// function binds to the object, a property runs its getter, a plain value
// is itself; any other descriptor runs code kiln does not see.
runtime::ForeignAttr class_attr_meaning(PyObject* attr, Value& out) {
  using runtime::ForeignAttr;
  static PyObject* const getattribute = object_slot("__getattribute__");
  static PyObject* const setattr = object_slot("__setattr__");
  if (attr == getattribute) return ForeignAttr::GenericGetattribute;
  if (attr == setattr) return ForeignAttr::GenericSetattr;
  // A built-in type's own slot wrapper over the generic lookup (dict's
  // __getattribute__ is PyObject_GenericGetAttr too): the same lookup.
  if (Py_IS_TYPE(attr, &PyWrapperDescr_Type)) {
    const void* wrapped = reinterpret_cast<PyWrapperDescrObject*>(attr)->d_wrapped;
    const char* name = reinterpret_cast<PyWrapperDescrObject*>(attr)->d_base->name;
    if (wrapped == reinterpret_cast<void*>(PyObject_GenericGetAttr) && std::string_view(name) == "__getattribute__")
      return ForeignAttr::GenericGetattribute;
    if (wrapped == reinterpret_cast<void*>(PyObject_GenericSetAttr) && std::string_view(name) == "__setattr__")
      return ForeignAttr::GenericSetattr;
  }
  if (PyFunction_Check(attr)) {
    out = to_value_shared(py::handle(attr));
    return out.is(Kind::Function) ? ForeignAttr::Method : ForeignAttr::Undecided;  // kiln cannot translate it
  }
  if (Py_IS_TYPE(attr, &PyProperty_Type)) {  // exactly property: its __get__ is fget(obj)
    py::object fget = py::reinterpret_steal<py::object>(PyObject_GetAttrString(attr, "fget"));  // a member: no user code
    if (!fget) throw py::error_already_set();
    if (!PyFunction_Check(fget.ptr())) return ForeignAttr::Undecided;
    out = to_value_shared(fget);
    return out.is(Kind::Function) ? ForeignAttr::Property : ForeignAttr::Undecided;
  }
  // object's, dict's and OrderedDict's own __init__: kiln's stand-in
  // (runtime/semantics/super.h host_init), a no-op without arguments.
  static PyObject* const inits[] = {PyDict_GetItemString(type_dict(&PyBaseObject_Type), "__init__"),
                                    PyDict_GetItemString(type_dict(&PyDict_Type), "__init__"),
                                    PyDict_GetItemString(type_dict(ordered_dict_type()), "__init__")};
  for (int i = 0; i < 3; ++i)
    if (attr == inits[i]) {
      out = runtime::host_init(i);
      return ForeignAttr::Method;
    }
  // object's own __reduce_ex__, __reduce__, __getstate__, __delattr__:
  // kiln's stand-ins, which the tracer answers or tells apart.
  static const std::vector<PyObject*> object_methods = [] {
    std::vector<PyObject*> found;
    for (const char* name : runtime::kObjectMethods) found.push_back(object_slot(name));
    return found;
  }();
  for (int i = 0; i < runtime::kNumObjectMethods; ++i)
    if (attr == object_methods[size_t(i)]) {
      out = runtime::object_method(i);
      return ForeignAttr::Method;
    }
  // dict's and OrderedDict's own methods on their storage, found on a
  // subclass: kiln's dict method of that name. On an object the program
  // passed in it reads the storage under guards (dict_storage_find: get,
  // __getitem__, __contains__; the others break); on one made in the trace
  // it works on the object's storage tracker (user_dict_method).
  if (const char* name = dict_storage_method(attr)) {
    out = runtime::type_method(Kind::Dict, runtime::intern(name).get());
    return out.is_null() ? ForeignAttr::Undecided : ForeignAttr::Method;
  }
  if (Py_TYPE(attr)->tp_descr_get) return ForeignAttr::Undecided;  // classmethod, a C method, ...
  out = to_value_shared(py::handle(attr));
  return ForeignAttr::Found;
}

// object.__getattribute__(o, name) (PyObject_GenericGetAttr's order), as
// far as it runs no user code: a data descriptor of the type (a __slots__
// member, the instance __dict__ itself, a code object's fields, a
// property's getter to trace, an Enum member's stock value/name), then the
// instance __dict__, then the type's function or plain value.
runtime::ForeignAttr generic_lookup(PyObject* o, PyObject* key, std::string_view name, Value& out, Value* raw) {
  using runtime::ForeignAttr;
  PyTypeObject* tp = Py_TYPE(o);
  PyObject* descr = _PyType_Lookup(tp, key);  // borrowed; no user code
  if (raw && descr) *raw = to_value_shared(py::handle(descr));
  auto read_generic = [&]() {
    PyObject* v = PyObject_GenericGetAttr(o, key);
    if (!v) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw py::error_already_set();
      PyErr_Clear();  // an unset __slots__ member
      return ForeignAttr::Absent;
    }
    out = to_value_shared(py::reinterpret_steal<py::object>(v));
    return ForeignAttr::Found;
  };
  if (descr && Py_TYPE(descr)->tp_descr_set) {  // a data descriptor wins over the instance __dict__
    if (Py_TYPE(descr) == &PyMemberDescr_Type) return read_generic();  // a __slots__ field
    // The instance __dict__ (the type's own getset for it), a code object's
    // fields (C getters of an immutable object).
    if (Py_TYPE(descr) == &PyGetSetDescr_Type && (name == "__dict__" || PyCode_Check(o))) return read_generic();
    // object's own __class__ (not a class's property of that name): type(o).
    static PyObject* const object_class = _PyType_Lookup(&PyBaseObject_Type, py::str("__class__").ptr());
    if (descr == object_class) return read_generic();
    if (Py_IS_TYPE(descr, &PyProperty_Type)) return class_attr_meaning(descr, out);
    if (!enum_stock_property(descr, name)) return ForeignAttr::Undecided;
    // enum.property's stock value/name read the member's _value_ / _name_.
    py::str field(name == "value" ? "_value_" : "_name_");
    if (PyObject** dict = _PyObject_GetDictPtr(o); dict && *dict)
      if (PyObject* v = PyDict_GetItemWithError(*dict, field.ptr())) {
        out = to_value_shared(py::handle(v));
        return ForeignAttr::Found;
      }
    if (PyErr_Occurred()) throw py::error_already_set();
    return ForeignAttr::Undecided;
  }
  if (PyObject** dict = _PyObject_GetDictPtr(o); dict && *dict) {
    if (PyObject* v = PyDict_GetItemWithError(*dict, key)) {  // borrowed; str keys run no user code
      out = to_value_shared(py::handle(v));
      return ForeignAttr::Found;
    }
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  if (!descr) return ForeignAttr::Absent;
  const ForeignAttr found = class_attr_meaning(descr, out);
  return found == ForeignAttr::Property ? ForeignAttr::Undecided : found;  // (a property is a data descriptor: above)
}

runtime::ForeignAttr foreign_lookup_attr(void* h, std::string_view name, const Value* after, Value& out, Value* raw) {
  using runtime::ForeignAttr;
  PyObject* o = handle_of(h);
  if (PyType_Check(o) || PyModule_Check(o)) return ForeignAttr::Undecided;  // type's and module's own lookups
  return calling_python([&] {
    py::str key(name.data(), name.size());
    if (!after) return generic_lookup(o, key.ptr(), name, out, raw);
    PyObject* start = nullptr;
    if (!after->is_null()) {
      py::object cls = to_py(*after);
      if (!PyType_Check(cls.ptr())) return ForeignAttr::Undecided;
      start = cls.ptr();  // kept alive by the object's MRO, which holds it
    }
    bool in_mro = false;
    PyObject* attr = mro_lookup(Py_TYPE(o), start, key.ptr(), in_mro);
    if (!in_mro) return ForeignAttr::Undecided;  // super(C, o) over an o that is no C: CPython raises
    if (!attr) return ForeignAttr::Absent;
    if (raw) *raw = to_value_shared(py::handle(attr));
    return class_attr_meaning(attr, out);
  });
}

// A dict subclass's own storage at `key` (ForeignVTable::dict_storage_find).
// Only literal keys (str, int, float, bool, None, tuples of them): their
// hash and == are the built-in types' own, so the read runs no user code
// (a stored key of a user type compared on a hash collision aside).
// A class is a key too when its metaclass keeps type's own hash and ==
// (by identity): copy's dispatch tables are keyed by types.
runtime::ForeignAttr foreign_dict_storage_find(void* h, const Value& key, Value& out) {
  using runtime::ForeignAttr;
  PyObject* o = handle_of(h);
  const bool literal = variables::is_literal(key);
  if (!PyDict_Check(o) || (!literal && !key.is(Kind::Foreign) && !key.is(Kind::Builtin))) return ForeignAttr::Undecided;
  return calling_python([&] {
    py::object k = to_py(key);
    if (!literal && (!PyType_Check(k.ptr()) || Py_TYPE(k.ptr())->tp_hash != PyType_Type.tp_hash ||
                     Py_TYPE(k.ptr())->tp_richcompare != PyType_Type.tp_richcompare))
      return ForeignAttr::Undecided;
    if (PyObject* v = PyDict_GetItemWithError(o, k.ptr())) {  // borrowed
      out = to_value_shared(py::handle(v));
      return ForeignAttr::Found;
    }
    if (PyErr_Occurred()) throw py::error_already_set();
    return ForeignAttr::Absent;
  });
}

// ForeignVTable::new_instance: type.__call__(cls) runs cls.__new__(cls)
// and then __init__; with the metaclass's __call__ type's own and a
// __new__ of object, dict or OrderedDict, nothing of the program's runs
// before __init__, so the tracer can make the object itself and inline
// __init__ on it. OrderedDict's __new__ is dict's, so the storage's
// __setitem__ is taken from the MRO's first of OrderedDict and dict.
bool foreign_new_instance(void* h, runtime::NewInstance& out) {
  PyObject* o = handle_of(h);
  if (!PyType_Check(o)) return false;
  auto* cls = reinterpret_cast<PyTypeObject*>(o);
  if (cls->tp_flags & Py_TPFLAGS_IS_ABSTRACT) return false;  // CPython raises TypeError
  return calling_python([&] {
    // torch's own classes (torch.autocast, a module made in a forward):
    // their __init__ is torch's internals, which CPython runs.
    PyObject* module = PyDict_GetItemString(type_dict(cls), "__module__");  // borrowed
    if (module && PyUnicode_Check(module)) {
      const char* m = PyUnicode_AsUTF8(module);
      if (m && (std::string_view(m) == "torch" || std::string_view(m).substr(0, 6) == "torch.")) return false;
    }
    static PyObject* const type_call = PyDict_GetItemString(type_dict(&PyType_Type), "__call__");
    static PyObject* const call_key = PyUnicode_InternFromString("__call__");
    static PyObject* const new_key = PyUnicode_InternFromString("__new__");
    if (_PyType_Lookup(Py_TYPE(o), call_key) != type_call) return false;
    PyObject* found_new = _PyType_Lookup(cls, new_key);  // borrowed
    PyTypeObject* storage = nullptr;
    if (found_new == PyDict_GetItemString(type_dict(&PyDict_Type), "__new__"))
      storage = PyType_IsSubtype(cls, ordered_dict_type()) ? ordered_dict_type() : &PyDict_Type;
    else if (found_new != PyDict_GetItemString(type_dict(&PyBaseObject_Type), "__new__"))
      return false;  // a Python __new__, or another built-in base's
    py::object made = py::reinterpret_steal<py::object>(PyObject_CallOneArg(found_new, o));
    if (!made) throw py::error_already_set();
    out.instance = to_value_shared(made);
    out.new_fn = to_value_shared(py::handle(found_new));
    out.setitem = storage ? to_value_shared(py::handle(PyDict_GetItemString(type_dict(storage), "__setitem__")))
                          : Value::null();
    return out.instance.is(Kind::Foreign);
  });
}

// An attribute read that runs no user code: the object's type keeps
// Python's default lookup, and the name is an instance __dict__ entry, a
// __slots__ member, a class attribute that is no descriptor, or a Python
// function of the class, bound as CPython binds it (the trace inlines the
// call with the object as self; builder.cpp guards the bound method by its
// function and its object, as Dynamo inlines a user-defined object's
// methods). Properties, __getattr__/__getattribute__ overrides and other
// descriptors answer false: the tracer decides those
// (translator_user_defined.cpp) or leaves them to Python.
bool foreign_plain_attr(void* h, std::string_view name, Value& out) {
  PyObject* o = handle_of(h);
  PyTypeObject* tp = Py_TYPE(o);
  // `int | None` and `list[int]` (typing's get_args in a dataclass
  // validator): immutable, and their own getattro reads __args__ /
  // __origin__ / __parameters__ generically (members of the object).
  if ((tp == &Py_GenericAliasType || std::string_view(tp->tp_name) == "types.UnionType") &&
      (name == "__args__" || name == "__origin__" || name == "__parameters__"))
    return calling_python([&] {
      py::object v = py::reinterpret_steal<py::object>(PyObject_GenericGetAttr(o, py::str(name.data(), name.size()).ptr()));
      if (!v) {
        PyErr_Clear();
        return false;
      }
      out = to_value_shared(v);
      return true;
    });
  // A class's names (_log_api_usage_once reads obj.__class__.__name__):
  // type's own getsets, when its metaclass (type, torch's _TensorMeta)
  // finds them there, which runs no user code; a heap class's may be
  // reassigned, and the guard re-reads them.
  if (PyType_Check(o) && (name == "__name__" || name == "__qualname__" || name == "__module__") &&
      (tp == &PyType_Type || type_own_name(tp, name))) {
    return calling_python([&] {
      PyObject* v = PyObject_GetAttrString(o, std::string(name).c_str());
      if (!v) {
        PyErr_Clear();
        return false;
      }
      out = to_value_shared(py::reinterpret_steal<py::object>(v));
      return true;
    });
  }
  if (PyType_Check(o)) return plain_class_attr(reinterpret_cast<PyTypeObject*>(o), name, out);
  if (tp->tp_getattro != PyObject_GenericGetAttr || PyModule_Check(o)) return false;
  switch (foreign_lookup_attr(h, name, nullptr, out, nullptr)) {
    case runtime::ForeignAttr::Found: return true;
    case runtime::ForeignAttr::Method: {
      auto bm = runtime::make_ref<runtime::BoundMethodObj>();
      bm->func = std::move(out);
      bm->self = calling_python([&] { return to_value_shared(py::handle(o)); });
      out = Value::object(Kind::BoundMethod, bm);
      return true;
    }
    default: return false;
  }
}

// `raise obj` for a Python object: a class is instantiated, an instance
// raised as itself; anything else is CPython's TypeError.
void foreign_raise(void* h) {
  py::object inst = calling_python([&] {
    py::handle o(handle_of(h));
    if (PyExceptionClass_Check(o.ptr())) return o();
    return py::reinterpret_borrow<py::object>(o);
  });
  if (!PyExceptionInstance_Check(inst.ptr()))
    throw_error(ErrorKind::TypeError, "exceptions must derive from BaseException");
  throw_py_exception(inst);
}
bool foreign_weakref_target(void* h, Value& out) {
  PyObject* o = handle_of(h);
  if (!PyWeakref_CheckRefExact(o)) return false;
  return calling_python([&] {
    py::object target = py::reinterpret_steal<py::object>(weakref_target(o));
    // A module's tensor as its mirror holds it (the value the trace read
    // from the module), anything else converted.
    Value held = target ? torch_held_value(target.ptr()) : Value::null();
    out = !target ? Value::none() : !held.is_null() ? held : to_value_shared(target);
    return true;
  });
}
bool foreign_exception_match(void*, const Value& exc, const Value& cls) {
  return calling_python([&] {
    py::object e = to_py(exc), c = to_py(cls);
    auto ok = [](PyObject* k) { return PyExceptionClass_Check(k); };
    bool valid = ok(c.ptr());
    if (PyTuple_Check(c.ptr())) {
      valid = true;
      for (py::handle k : c) valid = valid && ok(k.ptr());
    }
    if (!valid)
      throw_error(ErrorKind::TypeError, "catching classes that do not inherit from BaseException is not allowed");
    return PyErr_GivenExceptionMatches(e.ptr(), c.ptr()) != 0;
  });
}

void foreign_destroy(void* h) {
  if (!Py_IsInitialized()) return;  // interpreter gone: nothing to release
  py::gil_scoped_acquire gil;
  Py_DECREF(handle_of(h));
}

Value foreign_unary(void* h, int op) {
  return calling_python([&] {
    PyObject* o = handle_of(h);
    PyObject* r = op == int(runtime::UnOp::NEG)   ? PyNumber_Negative(o)
                  : op == int(runtime::UnOp::POS) ? PyNumber_Positive(o)
                                                  : PyNumber_Invert(o);
    if (!r) throw py::error_already_set();
    return to_value(py::reinterpret_steal<py::object>(r));
  });
}

bool foreign_class_repr(void* h, std::string& out) { return default_class_repr(handle_of(h), out); }

}  // namespace

bool default_class_repr(PyObject* o, std::string& out) {
  if (!o || !PyType_Check(o)) return false;
  PyTypeObject* meta = Py_TYPE(o);
  // The slots CPython calls for str() and repr() of the class: type's own
  // unless the metaclass (or a class between it and type) overrides them.
  if (meta->tp_repr != PyType_Type.tp_repr || meta->tp_str != PyType_Type.tp_str) return false;
  return calling_python([&] {
    out = std::string(py::repr(py::handle(o)));
    return true;
  });
}

constinit const runtime::ForeignVTable kPyObjectVTable = {
    "PyObject",        foreign_destroy, foreign_getattr, foreign_setattr, foreign_call,   foreign_binary,
    foreign_compare,   foreign_truth,   foreign_repr,    foreign_hash,    nullptr,        foreign_format,
    foreign_container, foreign_length,  foreign_getitem, foreign_setitem, foreign_iter,   foreign_contains,
    foreign_type_name,
    foreign_raise,     foreign_exception_match, foreign_pure,   foreign_instance_check, foreign_plain_attr, foreign_unary,
    foreign_set_snapshot,
    // (traverse, clear, untraced_reason, null_context, grad_tensor: none)
    nullptr, nullptr, nullptr, nullptr, nullptr,
    foreign_pure_compare, foreign_lookup_attr, foreign_class_repr, foreign_dict_storage_find, foreign_new_instance,
    // (frozen_result, environ: none)
    nullptr, nullptr, foreign_weakref_target, foreign_subclass_of,
};

// Functions the tracer calls at trace time on the objects the trace pins
// (a function, a bound method) and keeps the answer of as a constant, as
// Dynamo folds inspect.signature: what they return is immutable.
namespace {
bool always(void*) { return true; }
const runtime::ForeignVTable kFrozenFunctionVTable = [] {
  runtime::ForeignVTable vt = kPyObjectVTable;
  vt.pure = always;
  vt.frozen_result = always;
  return vt;
}();
}  // namespace

// os.environ (runtime::ForeignVTable::environ): the tracer reads its
// variables itself, under a guard on each one read.
namespace {
const runtime::ForeignVTable kEnvironVTable = [] {
  runtime::ForeignVTable vt = kPyObjectVTable;
  vt.environ = always;
  return vt;
}();
}  // namespace

void environ_mapping(py::handle environ) {
  environ.inc_ref();  // the Foreign value's reference
  register_op_function(environ, Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kEnvironVTable,
                                                                                                     environ.ptr())));
  environ.inc_ref();  // the table's key, kept for the process
}

void fold_at_trace_time(py::handle fn) {
  fn.inc_ref();  // the Foreign value's reference
  register_op_function(fn, Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kFrozenFunctionVTable,
                                                                                                fn.ptr())));
  fn.inc_ref();  // the table's key, kept for the process
}

Value foreign(py::handle obj) {
  Py_INCREF(obj.ptr());
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kPyObjectVTable, obj.ptr()));
}

PyObject* foreign_object(const Value& v) {
  if (!v.is(Kind::Foreign)) return nullptr;
  auto* f = v.as<runtime::ForeignObj>();
  // Every vtable of a Python object keeps kPyObjectVTable's destroy (see
  // foreign.h): the one test covers the module and torch vtables too.
  return f->vt->destroy == foreign_destroy ? handle_of(f->handle) : nullptr;
}

int visit_python_refs(const Value& v, visitproc visit, void* arg) {
  if (PyObject* o = foreign_object(v)) return visit(o, arg);
  if (!v.is_heap() || v.obj()->refcount() != 1) return 0;
  auto each = [&](const std::vector<Value>& items) {
    for (const Value& x : items)
      if (int rc = visit_python_refs(x, visit, arg)) return rc;
    return 0;
  };
  switch (v.kind()) {
    case Kind::List: return each(v.as<runtime::ListObj>()->items);
    case Kind::Tuple: return each(v.as<runtime::TupleObj>()->items);
    case Kind::Dict:
      for (const auto& [k, x] : v.as<runtime::DictObj>()->entries) {
        if (int rc = visit_python_refs(k, visit, arg)) return rc;
        if (int rc = visit_python_refs(x, visit, arg)) return rc;
      }
      return 0;
    case Kind::Module: {
      auto* m = v.as<runtime::ModuleObj>();
      for (const runtime::NameMap* map : {&m->attrs, &m->modules})
        for (const auto& [name, x] : map->entries())
          if (int rc = visit_python_refs(x, visit, arg)) return rc;
      for (const auto* hooks : {&m->forward_pre_hooks, &m->forward_hooks})
        for (const runtime::Hook& h : *hooks)
          if (int rc = visit_python_refs(h.fn, visit, arg)) return rc;
      return 0;
    }
    default: return 0;
  }
}

}  // namespace kiln::python

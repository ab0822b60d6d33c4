#include "python/src/namespaces.h"

#include <memory>
#include <string>
#include <unordered_map>

#include "python/src/convert.h"
#include "python/src/foreign.h"
#include "runtime/semantics/builtins.h"

namespace kiln::python {

using runtime::Kind;
using runtime::Value;

namespace {

// A Python module (kiln, math, a user's helpers module) is a namespace the
// tracer reads attributes of: kiln.softmax becomes the registry op, a
// helper function its KBC form, each guarded at its source. Values are
// converted on first read and kept at stable addresses; before each
// compiled call, sync_namespaces() re-reads the names of every module
// whose dict changed (CPython 3.11's dict version tag).

struct Namespace {
  py::object dict;  // the module's __dict__ (py::object: a default py::dict would be a new empty dict)
  uint64_t version = 0;
  struct Slot {
    py::object key;   // the name as a Python str, made once (see Mirror::Name in functions.cpp)
    py::object seen;  // the object the value was converted from
    std::unique_ptr<Value> value;  // stable address handed to the tracer and the guards
  };
  std::unordered_map<std::string, Slot> slots;
};

std::unordered_map<PyObject*, Namespace>& namespaces() {
  static auto* m = new std::unordered_map<PyObject*, Namespace>();  // modules live for the process
  return *m;
}

}  // namespace

uint64_t dict_version(PyObject* d) {
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wdeprecated-declarations\"")
  return reinterpret_cast<PyDictObject*>(d)->ma_version_tag;
  _Pragma("GCC diagnostic pop")
}

namespace {

const Value* namespace_find(void* h, const runtime::StrObj* name) {
  auto it = namespaces().find(handle_of(h));
  if (it == namespaces().end()) return nullptr;
  Namespace& ns = it->second;
  auto slot = ns.slots.find(name->s);
  if (slot != ns.slots.end()) return slot->second.seen ? slot->second.value.get() : nullptr;
  Namespace::Slot s;
  s.key = py::str(name->s);
  PyObject* obj = PyDict_GetItemWithError(ns.dict.ptr(), s.key.ptr());  // borrowed
  if (!obj) return nullptr;
  s.seen = py::reinterpret_borrow<py::object>(obj);
  s.value = std::make_unique<Value>(calling_python([&] { return to_value_shared(s.seen); }));
  return ns.slots.emplace(name->s, std::move(s)).first->second.value.get();
}

// A module is a plain Python object to everything but attribute reads: no
// container protocol, no exception, set or purity hooks.
const runtime::ForeignVTable kPyModuleVTable = [] {
  const runtime::ForeignVTable& o = kPyObjectVTable;
  return runtime::ForeignVTable{"module",  o.destroy, o.getattr, o.setattr, o.call,         o.binary_op,
                                o.compare, o.truth,   o.repr,    o.hash,    namespace_find, o.format};
}();

}  // namespace

Value module_namespace(py::handle module) {
  PyObject* o = module.ptr();
  Namespace& ns = namespaces()[o];
  if (!ns.dict) {
    ns.dict = py::reinterpret_borrow<py::object>(PyModule_GetDict(o));
    ns.version = dict_version(ns.dict.ptr());
  }
  Py_INCREF(o);
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kPyModuleVTable, o));
}

namespace {

// Whether every name of `fromlist` is there without importing: in the
// module's dict, or a submodule already loaded (importlib's
// _handle_fromlist would import the others).
bool fromlist_loaded(PyObject* module, const std::string& name, PyObject* fromlist) {
  py::object items = py::reinterpret_borrow<py::object>(fromlist);
  for (py::handle item : items) {
    if (!PyUnicode_Check(item.ptr())) return false;
    const std::string sub = py::cast<std::string>(item);
    if (sub == "*") return false;
    // The module's own dict, not getattr: a lazy module's __getattr__
    // (PEP 562, transformers' _LazyModule) would import.
    if (PyModule_Check(module) && PyDict_GetItem(PyModule_GetDict(module), item.ptr())) continue;
    if (!PyDict_GetItemString(PyImport_GetModuleDict(), (name + "." + sub).c_str())) return false;
  }
  return true;
}

// runtime::set_import_hook: builtins.__import__, as CPython's IMPORT_NAME
// calls it (a program that replaced __import__ gets its own). loaded_only:
// only a module already in sys.modules, whose import runs no code (its
// top package for `import a.b`; its fromlist's submodules loaded too).
Value import_python_module(const runtime::StrObj* name, const Value& fromlist, const Value& level, bool loaded_only) {
  return calling_python([&]() -> Value {
    py::object fl = to_py(fromlist), lv = to_py(level);
    if (loaded_only) {
      PyObject* modules = PyImport_GetModuleDict();
      PyObject* m = PyDict_GetItemString(modules, name->s.c_str());  // borrowed
      if (!m || !PyLong_Check(lv.ptr()) || PyLong_AsLong(lv.ptr()) != 0) return Value::null();
      const std::string top = name->s.substr(0, name->s.find('.'));
      if (!PyDict_GetItemString(modules, top.c_str())) return Value::null();
      if (!fl.is_none() && !fromlist_loaded(m, name->s, fl.ptr())) return Value::null();
    }
    py::object builtins = py::reinterpret_borrow<py::object>(PyEval_GetBuiltins());
    py::object imp = builtins["__import__"];
    return to_value(imp(py::str(name->s), py::none(), py::none(), fl, lv));
  });
}

}  // namespace

void install_import_hook() { runtime::set_import_hook(import_python_module); }

void sync_namespaces() {
  for (auto& [mod, ns] : namespaces()) {
    const uint64_t v = dict_version(ns.dict.ptr());
    if (v == ns.version) continue;
    ns.version = v;
    for (auto& [name, slot] : ns.slots) {
      PyObject* now = PyDict_GetItemWithError(ns.dict.ptr(), slot.key.ptr());
      if (now == slot.seen.ptr()) continue;
      slot.seen = now ? py::reinterpret_borrow<py::object>(now) : py::object();
      *slot.value = now ? to_value_shared(py::handle(now)) : Value::null();
    }
  }
}

}  // namespace kiln::python

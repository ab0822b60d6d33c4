#include "python/src/function_origins.h"

#include <algorithm>
#include <unordered_map>

#include "python/src/convert.h"
#include "python/src/foreign.h"
#include "python/src/python_compat.h"
#include "runtime/value/code.h"

namespace kiln::python {

using runtime::Kind;
using runtime::Value;

namespace {

// KBC function -> a weak reference to the Python function it was made from.
// The entry holds the KBC function (its address is never reused while the
// entry stands) and goes when the Python function does.
struct Origin {
  runtime::Ref<runtime::FunctionObj> kbc;
  py::object weak;
};
std::unordered_map<const runtime::FunctionObj*, Origin>& origins() {
  static auto* m = new std::unordered_map<const runtime::FunctionObj*, Origin>();  // never destroyed: outlives Python
  return *m;
}

// KBC code -> (CPython code, globals). The entry keeps the KBC code alive
// (its address is never reused while the entry stands); translations are
// cached for the process's life anyway.
struct CodeOrigin {
  runtime::Ref<runtime::Code> kbc;
  py::object code, globals;
};
std::unordered_map<const runtime::Code*, CodeOrigin>& code_origins() {
  static auto* m = new std::unordered_map<const runtime::Code*, CodeOrigin>();  // never destroyed: outlives Python
  return *m;
}

}  // namespace

void remember_code_origin(const runtime::Ref<runtime::Code>& kbc, const py::object& pycode, const py::object& globals) {
  code_origins()[kbc.get()] = CodeOrigin{kbc, pycode, globals};
}

std::pair<py::object, py::object> python_code_of(const runtime::Code* kbc) {
  auto it = code_origins().find(kbc);
  if (it == code_origins().end()) return {};
  return {it->second.code, it->second.globals};
}

void remember_origin(const Value& fn, const py::object& origin) {
  if (origin.is_none()) return;
  auto* f = fn.as<runtime::FunctionObj>();
  py::cpp_function forget([f](py::handle) { origins().erase(f); });
  origins()[f] = Origin{runtime::Ref<runtime::FunctionObj>(f), py::reinterpret_steal<py::object>(
                                                                   PyWeakref_NewRef(origin.ptr(), forget.ptr()))};
}

py::object python_function_of(const Value& fn) {
  if (!fn.is(Kind::Function)) return py::object();
  auto it = origins().find(fn.as<runtime::FunctionObj>());
  if (it == origins().end()) return py::object();
  return py::reinterpret_steal<py::object>(weakref_target(it->second.weak.ptr()));
}

namespace {

// A Python function's attribute as the program reads it, without running
// its code: the function type cannot be subclassed and keeps Python's
// default lookup, so its data (name, module, docstring, defaults, code) and its
// __dict__ entries are plain reads. Its globals, closure and
// builtins stay CPython's: a trace that reads those breaks.
bool origin_attr(const runtime::FunctionObj& fn, std::string_view name, Value& out) {
  // __code__ too: transformers' capture_outputs reads
  // func.__code__.co_varnames; the guard re-reads it at its source, and a
  // code object's fields are constants (foreign_plain_attr reads them).
  static constexpr std::string_view kData[] = {"__name__",     "__qualname__",   "__module__", "__doc__",
                                               "__defaults__", "__kwdefaults__", "__wrapped__", "__class__",
                                               "__code__"};
  auto it = origins().find(&fn);
  if (it == origins().end()) return false;
  const py::object held = py::reinterpret_steal<py::object>(weakref_target(it->second.weak.ptr()));
  PyObject* o = held.ptr();
  if (!o || !PyFunction_Check(o)) return false;
  // Not foreign_plain_attr: a function's __globals__, __closure__ and
  // __builtins__ are member descriptors, which that read answers; here
  // they stay CPython's (a break), so only the __dict__ and kData are read.
  return calling_python([&] {
    py::str key(name.data(), name.size());
    PyObject** dict_ptr = _PyObject_GetDictPtr(o);
    if (PyObject* dict = dict_ptr ? *dict_ptr : nullptr) {
      if (PyObject* v = PyDict_GetItemWithError(dict, key.ptr())) {  // borrowed; str keys run no user code
        out = to_value_shared(py::handle(v));
        return true;
      }
      if (PyErr_Occurred()) throw py::error_already_set();
    }
    if (std::find(std::begin(kData), std::end(kData), name) == std::end(kData)) return false;
    PyObject* v = PyObject_GetAttr(o, key.ptr());
    if (!v) {  // __wrapped__ of an unwrapped function: AttributeError, left to CPython
      PyErr_Clear();
      return false;
    }
    out = to_value_shared(py::reinterpret_steal<py::object>(v));
    return true;
  });
}

}  // namespace

void install_function_origin_attrs() { runtime::set_host_function_attr(origin_attr); }

}  // namespace kiln::python

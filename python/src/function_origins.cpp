#include "python/src/function_origins.h"

#include <unordered_map>

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

}  // namespace

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
  PyObject* o = PyWeakref_GetObject(it->second.weak.ptr());
  return o == Py_None ? py::object() : py::reinterpret_borrow<py::object>(o);
}

}  // namespace kiln::python

// The kiln class of a Python class, read on demand and watched (host_classes.h).
#include "python/src/host_classes.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/foreign.h"
#include "python/src/function_origins.h"
#include "python/src/nn.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::python {

using runtime::ClassObj;
using runtime::Kind;
using runtime::Ref;
using runtime::Value;

Value method_of(py::handle fn) {
  Value v = to_value(fn);
  if (!v.is(Kind::Foreign)) return v;  // its KBC translation
  // As a class attribute it must still bind to the instance as a method does.
  std::string name = py::cast<std::string>(fn.attr("__qualname__"));
  runtime::Object* callee = v.obj();  // held by the builtin (make_builtin_closure's rule)
  return runtime::make_builtin_closure(
      name,
      [callee](runtime::CallContext& ctx, const runtime::CallArgs& args) {
        return ctx.call(Value::object(Kind::Foreign, callee), args);
      },
      {runtime::Ref<runtime::Object>(callee)});
}

namespace {

// A method not made yet (runtime::set_pending_method_resolver): the Python
// function itself, translated the first time a lookup reaches it. A torch
// class's body has dozens of methods the tracer never calls (transformers'
// PreTrainedModel: generate, save_pretrained, ...); translating them all
// when the class is first read cost most of a first call.
const runtime::ForeignVTable kPendingMethodVTable = kPyObjectVTable;
bool resolve_pending_method(const Value& attr, Value& method) {
  if (attr.as<runtime::ForeignObj>()->vt != &kPendingMethodVTable) return false;
  method = calling_python([&] { return method_of(py::handle(handle_of(attr.as<runtime::ForeignObj>()->handle))); });
  return true;
}
Value pending_method(py::handle fn) {
  fn.inc_ref();
  return Value::object(Kind::Foreign, runtime::make_ref<runtime::ForeignObj>(&kPendingMethodVTable, fn.ptr()));
}
// The Python function a class attribute is or stands for (pending, or
// translated from it); null for anything else.
PyObject* python_function_behind(const Value& v) {
  if (v.is(Kind::Foreign) && v.as<runtime::ForeignObj>()->vt == &kPendingMethodVTable)
    return handle_of(v.as<runtime::ForeignObj>()->handle);
  py::object f = python_function_of(v);
  return f ? f.ptr() : nullptr;  // borrowed: the origin lives while the class holds its translation
}

// A class kiln reads from its Python class: how to read one attribute (a
// module-level function reader(cls, name) of kiln.nn or kiln._torch_api,
// never a closure over the class, which python_classes() holds weakly), and
// the class's type version when last checked.
struct ReadClass {
  Ref<ClassObj> kc;
  py::object reader;
  // The Python class, borrowed: its weak reference's callback (`weak`)
  // clears it before the class is freed, so the check on every lookup
  // (check_host_class) reads the type's version without a weak-reference
  // lookup.
  PyTypeObject* type = nullptr;
  py::object weak;
  unsigned version = 0;
};
// Node-based: a ReadClass's address is stable while others are added.
std::unordered_map<const ClassObj*, ReadClass>& read_classes() {
  static auto* m = new std::unordered_map<const ClassObj*, ReadClass>();
  return *m;
}
// The Python class, borrowed; null when it is gone.
PyTypeObject* python_class(const ReadClass& e) { return e.type; }

// The type's version, assigned now if a change dropped it (0: none could be
// assigned, so every check reads the class again). PyType_Modified drops it
// whenever the type or a base changes (Net.K = 5, Mixin.helper = h).
unsigned type_version(PyTypeObject* t) {
  if (!(t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
    static PyObject* probe = PyUnicode_InternFromString("__kiln_version_probe__");
    _PyType_Lookup(t, probe);  // assigns a version as a side effect (method cache)
  }
  return (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? t->tp_version_tag : 0;
}

// runtime::set_host_class_reader: one attribute of a kiln class's Python
// class, as the class's reader converts it (None: not the class's own).
bool read_python_class_attr(const ClassObj* cls, const runtime::StrObj* name, Value& out) {
  auto it = read_classes().find(cls);
  if (it == read_classes().end()) return false;
  ReadClass& e = it->second;
  PyTypeObject* t = python_class(e);
  if (!t) return false;  // the Python class is gone: nothing to read
  py::object reader = e.reader;
  py::object pycls = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(t));
  return calling_python([&] {
    py::object v = reader(pycls, py::str(name->s));
    if (v.is_none()) return false;
    out = py::cast<Value>(v);
    return true;
  });
}

// Whether two reads of one class attribute mean the same: the same object,
// a method pending or made from the same Python function, an equal plain
// constant (a constant read anew is no change).
bool same_class_attr(const Value& a, const Value& b) {
  if (a.is_same(b)) return true;
  if (a.is_null() || b.is_null()) return false;
  if (PyObject* f = python_function_behind(a)) return f == python_function_behind(b);
  if (a.kind() != b.kind()) return false;
  const bool plain = a.is(Kind::Int) || a.is(Kind::Float) || a.is(Kind::Bool) || a.is(Kind::Str);
  return plain && runtime::values_equal(a, b);
}

// Every attribute the tracer read from cls read again; if any differs, the
// reads are forgotten (and entries recompile).
void refresh_reads(ClassObj* cls) {
  std::vector<std::pair<Ref<runtime::StrObj>, Value>> read;
  for (const auto& [key, entry] : cls->host_reads) read.push_back(entry);
  for (const auto& [name, before] : read) {
    Value now = Value::null();
    if (!read_python_class_attr(cls, name.get(), now)) now = Value::null();
    if (!same_class_attr(before, now)) {
      runtime::forget_host_reads(cls);
      return;
    }
  }
}

// runtime::set_host_class_check: cls's reads re-read if its type version
// moved since the last check (CPython's guard on the MRO dicts), forgotten
// if any reads differently.
void check_host_class(ClassObj* cls) {
  auto it = read_classes().find(cls);
  if (it == read_classes().end()) return;
  ReadClass& e = it->second;
  PyTypeObject* t = python_class(e);
  if (!t) return;
  const unsigned now = type_version(t);
  if (now != 0 && now == e.version) return;
  e.version = now;  // first: re-reading looks the class up again
  refresh_reads(cls);
  e.version = type_version(t);
}

// Classes whose Python class is gone (a class defined in a function) go,
// with what was read from them.
void drop_dead_classes() {
  for (auto it = read_classes().begin(); it != read_classes().end();) {
    if (python_class(it->second)) {
      ++it;
      continue;
    }
    Ref<ClassObj> kc = it->second.kc;
    kc->reads_host = false;
    runtime::forget_host_reads(kc.get());
    it = read_classes().erase(it);
  }
}

}  // namespace

void bind_host_classes(py::module_& m) {
  runtime::set_host_class_reader(read_python_class_attr);
  runtime::set_host_class_repr([](const ClassObj* cls, std::string& out) {
    auto it = read_classes().find(cls);
    return it != read_classes().end() &&
           default_class_repr(reinterpret_cast<PyObject*>(python_class(it->second)), out);
  });
  runtime::set_host_class_check(check_host_class);
  runtime::set_pending_method_resolver(resolve_pending_method);
  m.def("read_class_attrs_from", [](const Value& kc, py::handle pycls, py::object reader) {
    guarded([&] {
      if (!kc.is(Kind::Class) || !PyType_Check(pycls.ptr()))
        throw_error(ErrorKind::TypeError, "read_class_attrs_from: expected a kiln class and a Python class");
      auto* cls = kc.as<ClassObj>();
      static size_t swept_at = 64;
      if (read_classes().size() >= 2 * swept_at) {  // amortized: test suites define thousands of classes
        drop_dead_classes();
        swept_at = std::max<size_t>(64, read_classes().size());
      }
      if (read_classes().count(cls)) throw_error(ErrorKind::TypeError, "read_class_attrs_from: already reading");
      ReadClass& e = read_classes()[cls];
      e.kc = Ref<ClassObj>(cls);
      e.reader = std::move(reader);
      e.type = reinterpret_cast<PyTypeObject*>(pycls.ptr());
      e.weak = py::weakref(pycls, py::cpp_function([cls](py::handle) {
        auto it = read_classes().find(cls);
        if (it != read_classes().end()) it->second.type = nullptr;  // dropped at the next sweep
      }));
      cls->reads_host = true;
      return 0;
    });
  }, "kc's attributes are read from pycls on demand, reader(pycls, name) giving one as kiln holds it (or None), "
     "and read again whenever pycls or a base changes (its type version moves).");
  m.def("pending_method", [](py::handle fn) { return pending_method(fn); },
        "A class body's function as a method, made (its KBC form, or a native calling it) when first looked up.");
}

}  // namespace kiln::python

// The kiln class of a Python class, read on demand and watched (host_classes.h).
#include "python/src/host_classes.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/foreign.h"
#include "python/src/function_origins.h"
#include "python/src/nn.h"
#include "runtime/builtins.h"
#include "runtime/module.h"
#include "runtime/value_ops.h"

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
  py::object reader;
  py::object cls;  // weak reference
  unsigned version = 0;
};
std::unordered_map<const ClassObj*, ReadClass>& read_classes() {
  static auto* m = new std::unordered_map<const ClassObj*, ReadClass>();
  return *m;
}
// Insertion order, for refresh_changed_classes (a refresh may read, and
// register, more classes).
std::vector<Ref<ClassObj>>& watch_order() {
  static auto* v = new std::vector<Ref<ClassObj>>();
  return *v;
}

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
  py::object pycls = it->second.cls();
  if (pycls.is_none()) return false;  // the Python class is gone: nothing to read
  py::object reader = it->second.reader;  // `it` may not survive the call
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

// cls re-read if its type version moved since the last check.
void refresh_if_changed(ClassObj* cls) {
  auto it = read_classes().find(cls);
  if (it == read_classes().end()) return;
  py::object pycls = it->second.cls();
  if (pycls.is_none()) return;
  auto* t = reinterpret_cast<PyTypeObject*>(pycls.ptr());
  const unsigned now = type_version(t);
  if (now != 0 && now == it->second.version) return;
  refresh_reads(cls);
  read_classes()[cls].version = type_version(t);  // re-found: the refresh may have added classes
}

}  // namespace

void refresh_changed_classes() {
  auto& order = watch_order();
  bool dead = false;
  for (size_t i = 0; i < order.size(); ++i) {  // by index: a refresh may register more
    auto it = read_classes().find(order[i].get());
    if (it->second.cls().is_none()) dead = true;
    else refresh_if_changed(order[i].get());
  }
  if (!dead) return;
  // A Python class gone (a class defined in a function): its reads go with it.
  std::vector<Ref<ClassObj>> kept;
  for (Ref<ClassObj>& c : order) {
    auto it = read_classes().find(c.get());
    if (!it->second.cls().is_none()) {
      kept.push_back(std::move(c));
      continue;
    }
    read_classes().erase(it);
    c->reads_host = false;
    runtime::forget_host_reads(c.get());
  }
  order.swap(kept);
}

void refresh_class_chain(ClassObj* cls) {
  for (ClassObj* c = cls; c; c = c->base.get())
    if (c->reads_host) refresh_if_changed(c);
}

void bind_host_classes(py::module_& m) {
  runtime::set_host_class_reader(read_python_class_attr);
  runtime::set_pending_method_resolver(resolve_pending_method);
  m.def("read_class_attrs_from", [](const Value& kc, py::handle pycls, py::object reader) {
    guarded([&] {
      if (!kc.is(Kind::Class) || !PyType_Check(pycls.ptr()))
        throw_error(ErrorKind::TypeError, "read_class_attrs_from: expected a kiln class and a Python class");
      auto* cls = kc.as<ClassObj>();
      const bool known = read_classes().count(cls) != 0;
      read_classes()[cls] = {std::move(reader), py::weakref(pycls),
                             type_version(reinterpret_cast<PyTypeObject*>(pycls.ptr()))};
      if (!known) watch_order().push_back(Ref<ClassObj>(cls));
      cls->reads_host = true;
      return 0;
    });
  }, "kc's attributes are read from pycls on demand, reader(pycls, name) giving one as kiln holds it (or None), "
     "and read again whenever pycls or a base changes (its type version moves).");
  m.def("forget_class_reads", [](const Value& kc, const std::string& name) {
    guarded([&] {
      if (!kc.is(Kind::Class)) throw_error(ErrorKind::TypeError, "forget_class_reads: expected a kiln class");
      // A name no lookup read through this class cannot be in a compiled
      // entry (a subclass's lookup that reaches this class records its read
      // here, a miss included): changing it recompiles nothing.
      auto* cls = kc.as<ClassObj>();
      if (cls->host_reads.count(runtime::intern(name).get())) runtime::forget_host_reads(cls);
      return 0;
    });
  }, "kc's Python class changed `name` (Child.K = 5): if the tracer read it, it is read again and entries recompile.");
  m.def("pending_method", [](py::handle fn) { return pending_method(fn); },
        "A class body's function as a method, made (its KBC form, or a native calling it) when first looked up.");
}

}  // namespace kiln::python

#include "python/src/container_mirror.h"

#include <memory>
#include <unordered_map>
#include <vector>

#include "python/src/convert.h"

namespace kiln::python {

using runtime::Kind;
using runtime::Value;

namespace {

// One kiln container and its Python object, with the state both had at
// the last sync, slot by slot (a dict's slots are key, value, key, ...).
struct Mirror {
  Value native;
  py::object obj;
  std::vector<Value> kiln_items;
  std::vector<py::object> py_items;
  bool busy = false;  // being synced: a container holding itself converts to itself
};
struct Busy {
  explicit Busy(Mirror& m) : m(m) { m.busy = true; }
  ~Busy() { m.busy = false; }
  Mirror& m;
};

struct Registry {
  int depth = 0;
  std::vector<std::unique_ptr<Mirror>> all;
  std::unordered_map<const runtime::Object*, Mirror*> by_native;
  std::unordered_map<PyObject*, Mirror*> by_py;
};
// Used with the GIL held only (every compiled call from Python holds it).
Registry& registry() {
  static auto* r = new Registry();  // never destroyed: Python may be gone at exit
  return *r;
}

std::vector<Value> kiln_slots(const Value& v) {
  switch (v.kind()) {
    case Kind::List: return v.as<runtime::ListObj>()->items;
    case Kind::Set: return v.as<runtime::SetObj>()->items;
    case Kind::Dict: {
      std::vector<Value> out;
      for (const auto& [k, x] : v.as<runtime::DictObj>()->entries) {
        out.push_back(k);
        out.push_back(x);
      }
      return out;
    }
    default: return {};
  }
}

std::vector<PyObject*> py_slots(PyObject* o) {  // borrowed
  std::vector<PyObject*> out;
  if (PyList_CheckExact(o)) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(o); ++i) out.push_back(PyList_GET_ITEM(o, i));
  } else if (PyDict_CheckExact(o)) {
    Py_ssize_t pos = 0;
    PyObject *k, *x;
    while (PyDict_Next(o, &pos, &k, &x)) {
      out.push_back(k);
      out.push_back(x);
    }
  } else {
    Py_ssize_t pos = 0;
    PyObject* k;
    Py_hash_t h;
    while (_PySet_NextEntry(o, &pos, &k, &h)) out.push_back(k);
  }
  return out;
}

bool same_kiln(const std::vector<Value>& a, const std::vector<Value>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].is_same(b[i])) return false;
  return true;
}

bool same_py(const std::vector<PyObject*>& a, const std::vector<py::object>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i].ptr()) return false;
  return true;
}

// kiln -> Python: the Python object rewritten when the kiln one changed.
void push(Mirror& m) {
  std::vector<Value> now = kiln_slots(m.native);
  if (m.busy || same_kiln(now, m.kiln_items)) return;
  Busy busy(m);
  // What stayed keeps its Python counterpart (no new copy of a nested
  // container, no new wrapper of a kiln function).
  std::unordered_map<const runtime::Object*, PyObject*> kept;
  for (size_t i = 0; i < m.kiln_items.size(); ++i)
    if (m.kiln_items[i].is_heap()) kept.emplace(m.kiln_items[i].obj(), m.py_items[i].ptr());
  std::vector<py::object> items;
  items.reserve(now.size());
  for (const Value& x : now) {
    auto it = x.is_heap() ? kept.find(x.obj()) : kept.end();
    items.push_back(it != kept.end() ? py::reinterpret_borrow<py::object>(it->second) : to_py(x));
  }
  PyObject* o = m.obj.ptr();
  if (PyList_CheckExact(o)) {
    py::list fresh(items.size());
    for (size_t i = 0; i < items.size(); ++i) fresh[i] = items[i];
    if (PyList_SetSlice(o, 0, PyList_GET_SIZE(o), fresh.ptr()) < 0) throw py::error_already_set();
  } else if (PyDict_CheckExact(o)) {
    PyDict_Clear(o);
    for (size_t i = 0; i + 1 < items.size(); i += 2)
      if (PyDict_SetItem(o, items[i].ptr(), items[i + 1].ptr()) < 0) throw py::error_already_set();
  } else {
    if (PySet_Clear(o) < 0) throw py::error_already_set();
    for (const py::object& x : items)
      if (PySet_Add(o, x.ptr()) < 0) throw py::error_already_set();
  }
  m.kiln_items = std::move(now);
  m.py_items = std::move(items);
}

// Python -> kiln: the kiln object rewritten when the Python one changed.
void pull(Mirror& m) {
  std::vector<PyObject*> now = py_slots(m.obj.ptr());
  if (m.busy || same_py(now, m.py_items)) return;
  Busy busy(m);
  std::unordered_map<PyObject*, const Value*> kept;
  for (size_t i = 0; i < m.py_items.size(); ++i) kept.emplace(m.py_items[i].ptr(), &m.kiln_items[i]);
  std::vector<Value> items;
  std::vector<py::object> py_items;
  items.reserve(now.size());
  py_items.reserve(now.size());
  for (PyObject* p : now) {
    auto it = kept.find(p);
    items.push_back(it != kept.end() ? *it->second : to_value_shared(p));
    py_items.push_back(py::reinterpret_borrow<py::object>(p));
  }
  switch (m.native.kind()) {
    case Kind::List: m.native.as<runtime::ListObj>()->items = items; break;
    case Kind::Set: {
      auto* s = m.native.as<runtime::SetObj>();
      s->clear();
      for (const Value& x : items) s->add(x);
      break;
    }
    default: {
      auto* d = m.native.as<runtime::DictObj>();
      d->entries.clear();
      d->index.clear();
      for (size_t i = 0; i + 1 < items.size(); i += 2) d->set(items[i], items[i + 1]);
      break;
    }
  }
  m.kiln_items = std::move(items);
  m.py_items = std::move(py_items);
}

// A mirror only one side still holds needs no syncing: Python cannot see
// an object only the registry holds, kiln cannot see a native only the
// registry holds (snapshots of other mirrors count as holders: an item of
// a mirrored container is reachable through it).
void prune() {
  Registry& r = registry();
  size_t keep = 0;
  for (size_t i = 0; i < r.all.size(); ++i) {
    Mirror& m = *r.all[i];
    if (m.native.obj()->refcount() <= 1 || Py_REFCNT(m.obj.ptr()) <= 1) {
      r.by_native.erase(m.native.obj());
      r.by_py.erase(m.obj.ptr());
      continue;
    }
    r.all[keep++] = std::move(r.all[i]);
  }
  r.all.resize(keep);
}

}  // namespace

py::object mirror_to_py(const Value& v) {
  Registry& r = registry();
  if (r.depth == 0) return py::object();
  if (auto it = r.by_native.find(v.obj()); it != r.by_native.end()) {
    push(*it->second);
    return it->second->obj;
  }
  auto m = std::make_unique<Mirror>();
  m->native = v;
  m->obj = v.is(Kind::List)   ? py::object(py::list())
           : v.is(Kind::Dict) ? py::object(py::dict())
                              : py::reinterpret_steal<py::object>(PySet_New(nullptr));
  Mirror& ref = *m;
  // Registered before its items convert: a container holding itself.
  r.by_native.emplace(v.obj(), &ref);
  r.by_py.emplace(ref.obj.ptr(), &ref);
  r.all.push_back(std::move(m));
  push(ref);
  return ref.obj;
}

Value mirror_from_py(PyObject* o) {
  Registry& r = registry();
  if (r.by_py.empty()) return Value::null();
  auto it = r.by_py.find(o);
  if (it == r.by_py.end()) return Value::null();
  pull(*it->second);
  return it->second->native;
}

void mirrors_push() {
  Registry& r = registry();
  if (r.all.empty()) return;
  prune();
  // By index: a push may convert a new kiln container (a new mirror).
  for (size_t i = 0; i < r.all.size(); ++i) push(*r.all[i]);
}

void mirrors_pull() {
  Registry& r = registry();
  if (r.all.empty()) return;
  for (size_t i = 0; i < r.all.size(); ++i) pull(*r.all[i]);
  prune();
}

MirrorScope::MirrorScope() {
  Registry& r = registry();
  if (r.depth++ > 0) mirrors_pull();  // a compiled call from Python code kiln called
}

MirrorScope::~MirrorScope() {
  Registry& r = registry();
  try {
    mirrors_push();
  } catch (...) {
    // A conversion failing here has no caller to report to; the Python
    // side keeps what the last sync gave it.
    PyErr_Clear();
  }
  if (--r.depth == 0) {
    r.by_native.clear();
    r.by_py.clear();
    r.all.clear();
  }
}

}  // namespace kiln::python

#include "python/src/container_mirror.h"

#include <memory>
#include <unordered_map>
#include <vector>

#include "python/src/convert.h"
#include "python/src/set_layout.h"

namespace kiln::python {

using runtime::Kind;
using runtime::Value;

namespace {

// One kiln container and its Python object, with the state both had at
// the last sync, slot by slot (a dict's slots are key, value, key, ...; a
// set's are its table's, empty and dummy entries included: the table is
// what is synced, set_layout.h).
struct Mirror {
  Value native;
  py::object obj;
  std::vector<Value> kiln_items;
  std::vector<py::object> py_items;
  // Sets: the kiln table's hashes (a dummy and an unused entry both hold
  // Null), and each element with its Python object at the last sync.
  std::vector<int64_t> kiln_hashes;
  std::vector<std::pair<Value, py::object>> set_pairs;
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
    case Kind::Set: {
      const auto* s = v.as<runtime::SetObj>();
      std::vector<Value> out;
      for (int64_t i = 0; i < s->capacity(); ++i) out.push_back(s->table()[i].key);
      return out;
    }
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
  } else {  // the table: nullptr for an unused entry, CPython's dummy for a deleted one
    auto* so = reinterpret_cast<PySetObject*>(o);
    for (Py_ssize_t i = 0; i <= so->mask; ++i) out.push_back(so->table[i].key);
  }
  return out;
}

std::vector<int64_t> kiln_hashes(const Value& v) {
  std::vector<int64_t> out;
  if (!v.is(Kind::Set)) return out;
  const auto* s = v.as<runtime::SetObj>();
  for (int64_t i = 0; i < s->capacity(); ++i) out.push_back(s->table()[i].hash);
  return out;
}

// A set's push: its table written into the Python set; each element keeps
// the Python object it had at the last sync.
void push_set(Mirror& m, std::vector<Value> now) {
  std::unordered_map<const runtime::Object*, PyObject*> kept;
  for (const auto& [k, p] : m.set_pairs)
    if (k.is_heap()) kept.emplace(k.obj(), p.ptr());
  const auto* s = m.native.as<runtime::SetObj>();
  std::vector<py::object> keys(now.size());
  std::vector<std::pair<Value, py::object>> pairs;
  for (size_t i = 0; i < now.size() && int64_t(i) < s->capacity(); ++i) {
    if (!s->table()[i].active()) continue;
    auto it = now[i].is_heap() ? kept.find(now[i].obj()) : kept.end();
    keys[i] = it != kept.end() ? py::reinterpret_borrow<py::object>(it->second) : to_py(now[i]);
    pairs.emplace_back(now[i], keys[i]);
  }
  PyObject* o = m.obj.ptr();
  if (PySet_Clear(o) < 0) throw py::error_already_set();
  write_py_set(o, *s, keys);
  m.kiln_items = std::move(now);
  m.kiln_hashes = kiln_hashes(m.native);
  m.py_items.clear();
  for (PyObject* p : py_slots(o)) m.py_items.push_back(py::reinterpret_borrow<py::object>(p));
  m.set_pairs = std::move(pairs);
}

// A set's pull: the Python set's table read into the kiln set.
void pull_set(Mirror& m, const std::vector<PyObject*>& now) {
  std::unordered_map<PyObject*, Value> kept;
  for (const auto& [k, p] : m.set_pairs) kept.emplace(p.ptr(), k);
  PySetTable table = read_py_set(m.obj.ptr(), [&](py::handle p) {
    auto it = kept.find(p.ptr());
    return it != kept.end() ? it->second : to_value_shared(p);
  });
  std::vector<std::pair<Value, py::object>> pairs;
  for (size_t i = 0; i < now.size() && i < table.entries.size(); ++i)
    if (table.entries[i].active()) pairs.emplace_back(table.entries[i].key, py::reinterpret_borrow<py::object>(now[i]));
  assign_py_set(*m.native.as<runtime::SetObj>(), std::move(table));
  m.kiln_items = kiln_slots(m.native);
  m.kiln_hashes = kiln_hashes(m.native);
  m.py_items.clear();
  for (PyObject* p : now) m.py_items.push_back(py::reinterpret_borrow<py::object>(p));
  m.set_pairs = std::move(pairs);
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
  if (m.busy || (same_kiln(now, m.kiln_items) && kiln_hashes(m.native) == m.kiln_hashes)) return;
  Busy busy(m);
  if (m.native.is(Kind::Set)) return push_set(m, std::move(now));
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
  }
  m.kiln_items = std::move(now);
  m.py_items = std::move(items);
}

// Python -> kiln: the kiln object rewritten when the Python one changed.
void pull(Mirror& m) {
  std::vector<PyObject*> now = py_slots(m.obj.ptr());
  if (m.busy || same_py(now, m.py_items)) return;
  Busy busy(m);
  if (m.native.is(Kind::Set)) return pull_set(m, now);
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
// a mirrored container is reachable through it). A mirror being synced is
// kept whatever its counts: converting its items may run a nested compiled
// call, whose scope prunes while the outer sync still writes into it.
void prune() {
  Registry& r = registry();
  size_t keep = 0;
  for (size_t i = 0; i < r.all.size(); ++i) {
    Mirror& m = *r.all[i];
    if (!m.busy && (m.native.obj()->refcount() <= 1 || Py_REFCNT(m.obj.ptr()) <= 1)) {
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

#include "python/src/torch_modules.h"

#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/namespaces.h"
#include "python/src/torch_interop.h"
#include "python/src/torch_values.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::python {

using runtime::Kind;
using runtime::ModuleObj;
using runtime::NameMap;
using runtime::Ref;
using runtime::Tensor;
using runtime::Value;

namespace {

// A torch tensor held by a mirror (a parameter, a buffer, a tensor
// attribute): one kiln tensor per torch tensor object, shared by every
// mirror holding it (weight tying: one get_attr per tensor identity), read
// again when its metadata or data pointer changed (m.double(), p.data = ...,
// resize_: torch swaps storage under the same object).
struct HeldTensor {
  py::object obj;  // strong: the key's address cannot be reused
  Value value;     // the kiln tensor, or the refused torch tensor (Foreign)
  // A tensor that requires grad (and is otherwise one kiln takes): `value`
  // is the torch object itself whatever the grad mode, so every use outside
  // a graph is torch's and records gradients, and the mirror need not be
  // read again when the grad mode changes; this is its kiln view, which the
  // tracer reads (ForeignVTable::grad_tensor) and kiln's kernels use under
  // no_grad. One per torch object, so a tied weight stays one get_attr.
  Tensor view;
};
std::unordered_map<PyObject*, HeldTensor>& held_tensors() {
  static auto* m = new std::unordered_map<PyObject*, HeldTensor>();
  return *m;
}
// kiln tensor -> its torch tensor, so a parameter kiln code returns is the
// Parameter object itself.
std::unordered_map<const runtime::TensorImpl*, PyObject*>& held_by_impl() {
  static auto* m = new std::unordered_map<const runtime::TensorImpl*, PyObject*>();
  return *m;
}

// The version tags of the dicts a mirror was read from. The dicts are held
// strongly: a dict freed and another allocated at its address could show an
// old tag by chance.
struct SeenDict {
  py::object dict;
  uint64_t version;
};

struct Mirror {
  py::object obj;  // the torch module (strong; dropped when kiln holds the last reference)
  Ref<ModuleObj> m;
  std::vector<SeenDict> dicts;
  std::vector<PyObject*> tensors;  // keys of held_tensors() this mirror reads
  bool own_refused = false;        // it holds a torch tensor kiln does not take
  uint64_t tree_gen = 0;           // fill_generation when tree_refused was worked out
  bool tree_refused = false;       // it or a module below holds one
};
// Bumped by every fill: a mirror's tree_refused is recomputed after any.
uint64_t fill_generation = 1;
// Fills in progress. Converting what a module holds may run Python that
// syncs again (translating a hook function syncs the globals): a sync
// then must not refill a mirror half-read.
int filling = 0;
std::unordered_map<PyObject*, std::unique_ptr<Mirror>>& mirrors() {
  static auto* m = new std::unordered_map<PyObject*, std::unique_ptr<Mirror>>();
  return *m;
}

// What the last sync saw of torch's global state: the global hook dicts'
// tags. (Not the grad mode: a mirror reads the same either way, and the
// entries that depend on it guard it.)
struct GlobalState {
  std::vector<SeenDict> dicts;
  bool read = false;
};
GlobalState& global_state() {
  static auto* g = new GlobalState();
  return *g;
}

PyTypeObject* torch_module_type() {
  static PyTypeObject* t = nullptr;
  if (!t && torch_seen()) {
    PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");
    py::object cls = py::reinterpret_borrow<py::object>(torch).attr("nn").attr("Module");
    t = reinterpret_cast<PyTypeObject*>(cls.release().ptr());
  }
  return t;
}

py::object torch_module_module() {  // torch.nn.modules.module (the global hook dicts)
  static PyObject* mod = nullptr;
  if (!mod) mod = py::module_::import("torch.nn.modules.module").release().ptr();
  return py::reinterpret_borrow<py::object>(mod);
}

PyObject* dict_item(PyObject* d, const char* name) {  // borrowed or nullptr
  PyObject* v = d && PyDict_Check(d) ? PyDict_GetItemString(d, name) : nullptr;
  return v;
}

// The change signal (kiln/_torch_watch.py): every way Python code changes
// what a mirror reads advances the epoch. A sync that finds it where the
// last full walk left it (and torch's global hook dicts unchanged) has
// nothing to read again: O(1) however large the trees.
uint64_t torch_epoch = 1;
uint64_t synced_epoch = 0;  // the epoch the last full walk started at
bool watching = false;      // install() ran
uint64_t walks = 0;         // full walks so far (tests: an unchanged tree walks none)

// A mirrored module's _parameters / _buffers / _modules as a dict that
// signals its writes (kiln._torch_watch.WatchedDict), in place in the
// module's __dict__; returns the dict to read (borrowed).
PyObject* watched_dict(PyObject* module_dict, const char* name) {
  PyObject* v = dict_item(module_dict, name);
  if (!watching || !v || !PyDict_CheckExact(v)) return v;
  static PyObject* cls = py::object(py::module_::import("kiln._torch_watch").attr("WatchedDict")).release().ptr();
  PyObject* w = PyObject_CallOneArg(cls, v);
  if (!w) throw py::error_already_set();
  const int rc = PyDict_SetItemString(module_dict, name, w);
  Py_DECREF(w);  // the module's __dict__ holds it
  if (rc != 0) throw py::error_already_set();
  return dict_item(module_dict, name);
}

// Reads the torch tensor into h (value, and view for one that requires grad).
void read_held(HeldTensor& h) {
  PyObject* o = h.obj.ptr();
  h.view = Tensor();
  if (is_torch_tensor(o) && torch_tensor_refusal_except_grad(o).empty() && torch_requires_grad(o)) {
    h.value = torch_tensor_foreign(h.obj);
    h.view = tensor_from_torch(o);
    held_by_impl()[h.view.impl()] = o;
    return;
  }
  h.value = torch_tensor_unscoped(h.obj);
  if (h.value.is(Kind::Tensor)) held_by_impl()[h.value.as_tensor().impl()] = o;
}

void forget_held(const HeldTensor& h) {
  if (h.value.is(Kind::Tensor)) held_by_impl().erase(h.value.as_tensor().impl());
  if (h.view.defined()) held_by_impl().erase(h.view.impl());
}

Value held_tensor(py::handle t) {
  auto& held = held_tensors();
  auto it = held.find(t.ptr());
  if (it != held.end()) return it->second.value;
  HeldTensor h{py::reinterpret_borrow<py::object>(t), Value(), Tensor()};
  read_held(h);
  return held.emplace(t.ptr(), std::move(h)).first->second.value;
}

// A held tensor read again (its torch tensor changed): the new kiln tensor.
void reread_held(HeldTensor& h) {
  forget_held(h);
  read_held(h);
}

bool held_current(const HeldTensor& h);

// The held tensor of t, read again if it changed.
Value current_held(py::handle t) {
  auto it = held_tensors().find(t.ptr());
  if (it == held_tensors().end()) return held_tensor(t);
  if (!held_current(it->second)) reread_held(it->second);
  return it->second.value;
}

// Whether a held torch tensor is still what its kiln tensor (or view) says.
// The grad mode does not matter: a tensor that requires grad is held as
// torch's object with a view either way.
bool held_current(const HeldTensor& h) {
  PyObject* o = h.obj.ptr();
  // Still the same memory, sizes, strides and a kiln dtype (a tensor moved
  // to another device or layout has no such data pointer), and still
  // requiring grad or not. The cheap order: this runs per tensor on every call.
  if (h.view.defined()) return torch_tensor_matches(o, h.view) && torch_requires_grad(o);
  if (h.value.is(Kind::Foreign)) return !torch_tensor_refusal_except_grad(o).empty();  // still refused
  return torch_tensor_matches(o, h.value.as_tensor()) && !torch_requires_grad(o);
}

// A tensor kiln does not take at all (one that requires grad is taken,
// through its view).
bool refused(PyObject* obj, const Value& v) {
  if (!v.is(Kind::Foreign)) return false;
  auto it = held_tensors().find(obj);
  return it == held_tensors().end() || !it->second.view.defined();
}

const char* const kTorchInternals[] = {
    "_parameters", "_buffers", "_modules", "training", "_forward_pre_hooks", "_forward_hooks",
    "_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
    "_backward_hooks", "_backward_pre_hooks", "_is_full_backward_hook", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
    "_non_persistent_buffers_set"};

bool torch_internal(const char* name) {
  for (const char* n : kTorchInternals)
    if (std::strcmp(n, name) == 0) return true;
  return false;
}

// The kiln class of a torch class (kiln/_torch_api.py: kiln_class_for).
Value kiln_class_for(PyTypeObject* cls) {
  static auto* cache = new std::unordered_map<PyTypeObject*, Value>();
  auto it = cache->find(cls);
  if (it != cache->end()) return it->second;
  py::object kc = py::module_::import("kiln._torch_api").attr("kiln_class_for")(py::handle(reinterpret_cast<PyObject*>(cls)));
  Value v = py::cast<Value>(kc);
  Py_INCREF(cls);  // the cache's key stays a live class
  return cache->emplace(cls, v).first->second;
}

void read_hooks(std::vector<runtime::Hook>& out, PyObject* dict) {
  if (!dict || !PyDict_Check(dict)) return;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &k, &v)) out.push_back({PyLong_AsLongLong(k), to_value(v)});
}

void record(Mirror& mr, PyObject* dict) {
  if (dict && PyDict_Check(dict)) mr.dicts.push_back({py::reinterpret_borrow<py::object>(dict), dict_version(dict)});
}

bool nonempty(PyObject* d) { return d && PyDict_Check(d) && PyDict_GET_SIZE(d) > 0; }

Mirror* mirror_of(py::handle obj);
void host_store(ModuleObj* m, const runtime::StrObj* name, const Value* value);
void refresh_global_state();

// Reads the torch module into its mirror: every dict afresh, a new version.
void fill(Mirror& mr) {
  PyObject* obj = mr.obj.ptr();
  ModuleObj* m = mr.m.get();
  struct Depth {
    Depth() { ++filling; }
    ~Depth() { --filling; }
  } depth;
  mr.dicts.clear();
  mr.tensors.clear();
  mr.own_refused = false;
  ++fill_generation;
  PyObject** dp = _PyObject_GetDictPtr(obj);
  PyObject* d = dp ? *dp : nullptr;
  for (const char* name : {"_parameters", "_buffers", "_modules"}) watched_dict(d, name);
  record(mr, d);
  const std::string cls = Py_TYPE(obj)->tp_name;
  for (const char* name : {"_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs"})
    if (nonempty(dict_item(d, name)))
      throw_error(ErrorKind::NotImplementedError, "kiln cannot mirror the " + cls + " module: it has forward hooks "
                                                  "registered with with_kwargs=True");
  NameMap params, buffers, modules, attrs;
  auto tensors_of = [&](const char* key, NameMap& into) {
    PyObject* dict = watched_dict(d, key);
    record(mr, dict);
    if (!dict || !PyDict_Check(dict)) return;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &k, &v)) {
      if (v == Py_None) {
        into.set(PyUnicode_AsUTF8(k), Value::none());
        continue;
      }
      Value t = current_held(v);
      mr.own_refused |= refused(v, t);
      into.set(PyUnicode_AsUTF8(k), t);
      mr.tensors.push_back(v);
    }
  };
  tensors_of("_parameters", params);
  tensors_of("_buffers", buffers);
  if (PyObject* dict = watched_dict(d, "_modules"); dict && PyDict_Check(dict)) {
    record(mr, dict);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &k, &v)) {
      // The child's mirror itself (never torch's object, even when torch
      // must run the child: tree_refused then reaches the root).
      Mirror* cm = v == Py_None ? nullptr : mirror_of(v);
      Value child = cm ? Value::object(Kind::Module, cm->m) : v == Py_None ? Value::none() : to_value_shared(v);
      modules.set(PyUnicode_AsUTF8(k), child);
    }
  }
  if (d) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) continue;
      const char* name = PyUnicode_AsUTF8(k);
      if (torch_internal(name)) continue;
      if (is_torch_tensor(v)) {
        Value t = current_held(v);
        mr.own_refused |= refused(v, t);
        attrs.set(name, t);
        mr.tensors.push_back(v);
      } else {
        attrs.set(name, to_value_shared(v));
      }
    }
  }
  PyObject* training = dict_item(d, "training");
  m->training = training ? PyObject_IsTrue(training) == 1 : true;
  // torch's __call__ order: the global pre-hooks, then the module's own;
  // the global forward hooks, then the module's own.
  py::object mm = torch_module_module();
  std::vector<runtime::Hook> pre_hooks, hooks;
  read_hooks(pre_hooks, py::getattr(mm, "_global_forward_pre_hooks").ptr());
  PyObject* own_pre = dict_item(d, "_forward_pre_hooks");
  record(mr, own_pre);
  read_hooks(pre_hooks, own_pre);
  read_hooks(hooks, py::getattr(mm, "_global_forward_hooks").ptr());
  PyObject* own = dict_item(d, "_forward_hooks");
  record(mr, own);
  read_hooks(hooks, own);
  for (const char* name : {"_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs"})
    record(mr, dict_item(d, name));
  m->forward_pre_hooks = std::move(pre_hooks);
  m->forward_hooks = std::move(hooks);
  m->params = std::move(params);
  m->buffers = std::move(buffers);
  m->modules = std::move(modules);
  m->attrs = std::move(attrs);
  m->bump_version();
}

bool changed(const Mirror& mr) {
  for (const SeenDict& s : mr.dicts)
    if (dict_version(s.dict.ptr()) != s.version) return true;
  for (PyObject* t : mr.tensors) {
    auto it = held_tensors().find(t);
    if (it == held_tensors().end() || !held_current(it->second)) return true;
  }
  return false;
}

void refresh_global_state() {
  GlobalState& g = global_state();
  g.dicts.clear();
  py::object mm = torch_module_module();
  for (const char* name : {"_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_with_kwargs"}) {
    py::object d = py::getattr(mm, name);
    g.dicts.push_back({d, dict_version(d.ptr())});
  }
  g.read = true;
}

bool global_changed() {
  const GlobalState& g = global_state();
  if (!g.read) return true;
  for (const SeenDict& s : g.dicts)
    if (dict_version(s.dict.ptr()) != s.version) return true;
  return false;
}

// A store by kiln code to a mirrored module: torch's own __setattr__ /
// __delattr__ on the torch object, then the mirror read again.
void host_store(ModuleObj* m, const runtime::StrObj* name, const Value* value) {
  auto it = mirrors().find(static_cast<PyObject*>(m->host));
  if (it == mirrors().end()) throw_error(ErrorKind::RuntimeError, "a mirrored torch module that kiln no longer tracks");
  try {
    py::str key(name->s);
    if (value) {
      if (PyObject_SetAttr(it->second->obj.ptr(), key.ptr(), to_py(*value).ptr()) != 0) throw py::error_already_set();
    } else if (PyObject_DelAttr(it->second->obj.ptr(), key.ptr()) != 0) {
      throw py::error_already_set();
    }
    fill(*it->second);
  } catch (py::error_already_set& e) {
    rethrow_as_kiln(e);
  }
}

// Whether torch must run this module: a tensor in it or below is one kiln
// does not take (another dtype, device or layout; a parameter that requires
// grad is taken, its graphs run through torch's autograd).
bool tree_refused(Mirror& mr) {
  if (mr.tree_gen == fill_generation) return mr.tree_refused;
  mr.tree_gen = fill_generation;
  mr.tree_refused = mr.own_refused;  // also what a module holding itself sees meanwhile
  for (const auto& [name, child] : mr.m->modules) {
    if (mr.tree_refused) break;
    if (!child.is(Kind::Module) || !child.as<ModuleObj>()->host) continue;
    auto it = mirrors().find(static_cast<PyObject*>(child.as<ModuleObj>()->host));
    if (it != mirrors().end() && tree_refused(*it->second)) mr.tree_refused = true;
  }
  return mr.tree_refused;
}

Mirror* mirror_of(py::handle obj) {
  PyTypeObject* base = torch_module_type();
  if (!base || !PyObject_TypeCheck(obj.ptr(), base)) return nullptr;
  auto& all = mirrors();
  if (auto it = all.find(obj.ptr()); it != all.end()) return it->second.get();
  if (all.empty()) runtime::set_host_module_store_hook(host_store);
  if (!watching) {
    py::module_::import("kiln._torch_watch").attr("install")(py::cpp_function([] { ++torch_epoch; }));
    watching = true;
  }
  if (!global_state().read) refresh_global_state();
  auto mr = std::make_unique<Mirror>();
  mr->obj = py::reinterpret_borrow<py::object>(obj);
  Value cls = kiln_class_for(Py_TYPE(obj.ptr()));
  mr->m = runtime::new_module(Ref<runtime::ClassObj>(cls.as<runtime::ClassObj>()));
  mr->m->host = obj.ptr();
  Mirror& ref = *mr;
  all.emplace(obj.ptr(), std::move(mr));  // before filling: a module holding itself finds its mirror
  try {
    fill(ref);
  } catch (...) {
    ref.m->host = nullptr;
    all.erase(obj.ptr());
    throw;
  }
  return &ref;
}

}  // namespace

Value torch_class_value(py::handle cls) {
  PyTypeObject* base = torch_module_type();
  PyObject* o = cls.ptr();
  if (!base || !PyType_Check(o) || o == reinterpret_cast<PyObject*>(base) ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(o), base))
    return Value::null();
  static auto* cache = new std::unordered_map<PyObject*, Value>();
  if (auto it = cache->find(o); it != cache->end()) return it->second;
  py::object kc = py::module_::import("kiln._torch_api").attr("class_value")(cls);
  Value v = kc.is_none() ? Value::null() : py::cast<Value>(kc);
  Py_INCREF(o);
  return cache->emplace(o, v).first->second;
}

Value torch_module_value(py::handle obj) {
  Mirror* mr = mirror_of(obj);
  if (!mr) return Value::null();
  if (tree_refused(*mr)) return torch_refused_module(obj);
  return Value::object(Kind::Module, mr->m);
}

void sync_torch_modules() {
  auto& all = mirrors();
  if (all.empty() || filling) return;
  const bool global = global_changed();
  // Nothing signalled: nothing to read again. (A torch module only kiln
  // still holds is let go by the next walk; the compile caches' guards
  // hold its mirror until kiln.reset() anyway, which walks.)
  if (watching && !global && torch_epoch == synced_epoch) return;
  const uint64_t epoch = torch_epoch;  // a bump during the walk walks again next time
  ++walks;
  if (global) refresh_global_state();
  // Decided first, refilled after: a refill may mirror new submodules,
  // which adds to the map being walked.
  std::vector<PyObject*> gone;
  std::vector<Mirror*> stale;
  for (auto& [key, mr] : all) {
    // Only kiln holds the module now: nothing can call it again through
    // Python. The ModuleObj may live on in a cache entry, host-less.
    if (Py_REFCNT(mr->obj.ptr()) == 1 && mr->m->refcount() == 1) gone.push_back(key);
    else if (global || changed(*mr)) stale.push_back(mr.get());
  }
  for (PyObject* key : gone) {
    auto it = all.find(key);
    it->second->m->host = nullptr;
    all.erase(it);  // may free the torch module, and with it others' last references: the next sync drops those
  }
  for (Mirror* mr : stale) fill(*mr);
  synced_epoch = epoch;
  // Held tensors no mirror reads any more (a replaced parameter): let go,
  // so a training loop that reassigns parameters does not keep them all.
  if (!gone.empty() || !stale.empty()) {
    std::unordered_map<PyObject*, bool> read;
    for (auto& [key, mr] : all)
      for (PyObject* t : mr->tensors) read[t] = true;
    auto& held = held_tensors();
    for (auto it = held.begin(); it != held.end();) {
      if (read.count(it->first)) {
        ++it;
        continue;
      }
      forget_held(it->second);
      it = held.erase(it);
    }
  }
}

void torch_modules_walk_next() { ++torch_epoch; }

PyObject* torch_held_object(const runtime::TensorImpl* impl) {
  auto& m = held_by_impl();
  if (m.empty()) return nullptr;
  auto it = m.find(impl);
  return it == m.end() ? nullptr : it->second;
}

Tensor torch_held_grad_view(PyObject* obj) {
  auto& held = held_tensors();
  if (held.empty()) return Tensor();
  auto it = held.find(obj);
  return it == held.end() ? Tensor() : it->second.view;
}

Value torch_held_value(PyObject* obj) {
  auto& held = held_tensors();
  auto it = held.find(obj);
  return it == held.end() ? Value::null() : it->second.value;
}

PyObject* torch_module_object(const ModuleObj* m) { return static_cast<PyObject*>(m->host); }

void bind_torch_modules(py::module_& m) {
  m.def("_torch_mirror_count", [] { return mirrors().size(); }, "How many torch modules kiln mirrors now.");
  m.def("_torch_walks", [] { return walks; }, "How many times a sync walked every mirror (a change was signalled).");
  m.def("_torch_mirror_version", [](py::handle obj) -> py::object {
    auto it = mirrors().find(obj.ptr());
    if (it == mirrors().end()) return py::none();
    return py::int_(it->second->m->version);
  }, "The module version of a torch module's mirror (None: not mirrored).");
  m.def("_torch_mirror_hooks", [](py::handle obj) -> py::object {
    auto it = mirrors().find(obj.ptr());
    if (it == mirrors().end()) return py::none();
    return py::make_tuple(it->second->m->forward_pre_hooks.size(), it->second->m->forward_hooks.size());
  }, "How many forward pre-hooks and hooks a torch module's mirror runs (None: not mirrored).");
}

}  // namespace kiln::python

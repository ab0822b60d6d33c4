#include "python/src/tensor_identity.h"

namespace kiln::python {

namespace {
// Not thread_local: every scope is made and used with the GIL held, which
// serializes them; a thread_local in a shared library costs a
// __tls_get_addr call per access, on the path of every compiled call.
TensorIdentityScope* active_identity_scope = nullptr;
}

TensorIdentityScope::TensorIdentityScope() : outer_(active_identity_scope) { active_identity_scope = this; }
TensorIdentityScope::~TensorIdentityScope() {
  active_identity_scope = outer_;
  auto release = [](const Seen& s) {
    if (s.torch) static_cast<runtime::Object*>(const_cast<runtime::TensorImpl*>(static_cast<const runtime::TensorImpl*>(s.impl)))->decref();
    Py_DECREF(s.obj);
  };
  for (size_t i = 0; i < n_ && i < kInline; ++i) release(inline_[i]);
  for (const Seen& s : more_) release(s);
}
TensorIdentityScope* TensorIdentityScope::active() { return active_identity_scope; }

void TensorIdentityScope::remember(const void* impl, PyObject* obj) {
  // No search for an earlier entry: a repeat is harmless (find() takes the
  // first), and a call's arguments are remembered without a quadratic scan.
  Py_INCREF(obj);
  if (n_ < kInline) inline_[n_] = {impl, obj, false};
  else more_.push_back({impl, obj, false});
  ++n_;
}

PyObject* TensorIdentityScope::find(const void* impl) const {
  for (size_t i = 0; i < n_ && i < kInline; ++i)
    if (inline_[i].impl == impl) return inline_[i].obj;
  for (const Seen& s : more_)
    if (s.impl == impl) return s.obj;
  return nullptr;
}

void TensorIdentityScope::remember_torch(runtime::TensorImpl* impl, PyObject* obj) {
  Py_INCREF(obj);
  impl->incref();
  if (n_ < kInline) inline_[n_] = {impl, obj, true};
  else more_.push_back({impl, obj, true});
  ++n_;
}

runtime::TensorImpl* TensorIdentityScope::find_torch(PyObject* obj) const {
  for (size_t i = 0; i < n_ && i < kInline; ++i)
    if (inline_[i].obj == obj && inline_[i].torch) return const_cast<runtime::TensorImpl*>(static_cast<const runtime::TensorImpl*>(inline_[i].impl));
  for (const Seen& s : more_)
    if (s.obj == obj && s.torch) return const_cast<runtime::TensorImpl*>(static_cast<const runtime::TensorImpl*>(s.impl));
  return nullptr;
}

}  // namespace kiln::python

#include "output_graph/source.h"

#include "runtime/semantics/value_ops.h"

namespace kiln::output_graph {

namespace {
SourceRef make(SourceKind k, SourceRef base, std::string name, runtime::Value key, int index) {
  auto s = std::make_shared<Source>();
  s->kind = k;
  s->depth = base ? base->depth + 1 : 0;
  s->base = std::move(base);
  s->name = std::move(name);
  if (k == SourceKind::Global || k == SourceKind::Attr || k == SourceKind::GenericAttr) s->interned = runtime::intern(s->name);
  s->key = std::move(key);
  s->local_index = index;
  return s;
}
}  // namespace

const std::string& Source::str() const {
  if (!has_path_) {
    switch (kind) {
      case SourceKind::Local: path_ = "L['" + name + "']"; break;
      // Another namespace's global prints as G['name'] too (a module-level
      // name); the guard reads it in that namespace.
      case SourceKind::Global: path_ = (globals ? "G*['" : "G['") + name + "']"; break;
      case SourceKind::Attr: path_ = base->str() + "." + name; break;
      case SourceKind::Item: path_ = base->str() + "[" + runtime::repr(key) + "]"; break;
      case SourceKind::Cell:
        path_ = (base ? base->str() : std::string("F")) + ".__closure__[" + std::to_string(local_index) + "]";
        break;
      case SourceKind::Const: path_ = "K['" + name + "']"; break;
      case SourceKind::Environ: path_ = "os.environ['" + name + "']"; break;
      case SourceKind::GenericAttr: path_ = "object.__getattribute__(" + base->str() + ", '" + name + "')"; break;
      case SourceKind::TypeAttr:
        path_ = (key.is_null() ? "type(" + base->str() + ")" : "super(" + runtime::repr(key) + ", " + base->str() + ")") +
                ".__dict__['" + name + "']";
        break;
      case SourceKind::DictItem: path_ = "dict.__getitem__(" + base->str() + ", " + runtime::repr(key) + ")"; break;
    }
    has_path_ = true;
  }
  return path_;
}

SourceRef local_source(const std::string& name, int index) { return make(SourceKind::Local, nullptr, name, {}, index); }
SourceRef global_source(const std::string& name, runtime::Ref<runtime::GlobalsObj> globals) {
  SourceRef s = make(SourceKind::Global, nullptr, name, {}, -1);
  const_cast<Source&>(*s).globals = std::move(globals);  // set before anyone else sees it
  return s;
}
SourceRef attr_source(const SourceRef& base, const std::string& name) {
  auto& slot = base->attr_children[name];
  if (SourceRef existing = slot.lock()) return existing;
  SourceRef s = make(SourceKind::Attr, base, name, {}, -1);
  slot = s;
  return s;
}
SourceRef item_source(const SourceRef& base, const runtime::Value& key) {
  return make(SourceKind::Item, base, "", key, -1);
}

SourceRef dict_item_source(const SourceRef& base, const runtime::Value& key) {
  return make(SourceKind::DictItem, base, "", key, -1);
}

SourceRef cell_source(const SourceRef& function, int index) {
  return make(SourceKind::Cell, function, "", {}, index);
}
SourceRef const_source(const runtime::Value& object, const std::string& name) {
  return make(SourceKind::Const, nullptr, name, object, -1);
}

SourceRef environ_source(const std::string& name) {
  return make(SourceKind::Environ, nullptr, name, runtime::Value::null(), -1);
}

// Interned under the base like attr_source's children, keyed apart from
// plain attribute names (no identifier holds a NUL).
SourceRef generic_attr_source(const SourceRef& base, const std::string& name) {
  auto& slot = base->attr_children[std::string("\0g", 2) + name];
  if (SourceRef existing = slot.lock()) return existing;
  SourceRef s = make(SourceKind::GenericAttr, base, name, {}, -1);
  slot = s;
  return s;
}
SourceRef type_attr_source(const SourceRef& base, const std::string& name, const runtime::Value& after) {
  const std::string key = std::string("\0t", 2) + std::to_string(reinterpret_cast<uintptr_t>(after.is_null() ? nullptr : runtime::object_identity(after))) + ":" + name;
  auto& slot = base->attr_children[key];
  if (SourceRef existing = slot.lock(); existing && existing->key.is_same(after)) return existing;
  SourceRef s = make(SourceKind::TypeAttr, base, name, after, -1);
  slot = s;
  return s;
}

}  // namespace kiln::output_graph

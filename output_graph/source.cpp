#include "output_graph/source.h"

#include "runtime/value_ops.h"

namespace kiln::output_graph {

namespace {
SourceRef make(SourceKind k, SourceRef base, std::string name, runtime::Value key, int index) {
  auto s = std::make_shared<Source>();
  s->kind = k;
  s->depth = base ? base->depth + 1 : 0;
  s->base = std::move(base);
  s->name = std::move(name);
  s->key = std::move(key);
  s->local_index = index;
  switch (k) {
    case SourceKind::Local: s->path = "L['" + s->name + "']"; break;
    case SourceKind::Global: s->path = "G['" + s->name + "']"; break;
    case SourceKind::Attr: s->path = s->base->path + "." + s->name; break;
    case SourceKind::Item: s->path = s->base->path + "[" + runtime::repr(s->key) + "]"; break;
    case SourceKind::Cell:
      s->path = (s->base ? s->base->path : std::string("F")) + ".__closure__[" + std::to_string(index) + "]";
      break;
  }
  return s;
}
}  // namespace

SourceRef local_source(const std::string& name, int index) { return make(SourceKind::Local, nullptr, name, {}, index); }
SourceRef global_source(const std::string& name) { return make(SourceKind::Global, nullptr, name, {}, -1); }
SourceRef attr_source(const SourceRef& base, const std::string& name) {
  return make(SourceKind::Attr, base, name, {}, -1);
}
SourceRef item_source(const SourceRef& base, const runtime::Value& key) {
  return make(SourceKind::Item, base, "", key, -1);
}

SourceRef cell_source(const SourceRef& function, int index) {
  return make(SourceKind::Cell, function, "", {}, index);
}

}  // namespace kiln::output_graph

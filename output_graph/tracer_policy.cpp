#include "output_graph/tracer_policy.h"

#include <vector>

namespace kiln::output_graph {

using namespace kiln::runtime;

Tracer::Tracer(Value root) : root_(std::move(root)) {
  if (!root_.is(Kind::Module)) throw_error(ErrorKind::TypeError, "Tracer: the root must be a Module");
}

bool Tracer::is_leaf_module(const ModuleObj* m, const std::string&) {
  switch (m->cls->builtin_kind()) {
    case BuiltinModule::None:
    case BuiltinModule::Sequential:
    case BuiltinModule::ModuleList:
    case BuiltinModule::ModuleDict: return false;
    default: return true;
  }
}

void Tracer::walk() {
  if (links_) return;
  links_ = std::make_shared<std::deque<PathLink>>();
  // A preorder walk that names a module shared by two parents after the
  // first path to reach it, as named_modules does. Iterative: deep chains
  // must not recurse.
  struct Visit {
    const ModuleObj* module;
    const PathLink* parent;
    const std::string* name;
  };
  static const std::string kRootName;
  std::vector<Visit> stack{{root_.as<ModuleObj>(), nullptr, &kRootName}};
  while (!stack.empty()) {
    const Visit v = stack.back();
    stack.pop_back();
    auto [slot, fresh] = link_of_.emplace(v.module, nullptr);
    if (!fresh) continue;
    const PathLink* link = *slot = &links_->emplace_back(PathLink{v.parent, *v.name});
    const auto& kids = v.module->modules.entries();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)  // reversed: popped in order
      if (!it->second.is_none()) stack.push_back({it->second.as<ModuleObj>(), link, &it->first->s});
  }
}

PathRef Tracer::path_link_of_module(const ModuleObj* m) {
  walk();
  const PathLink* const* link = link_of_.find(m);
  if (!link)
    throw_error(ErrorKind::ValueError, "path_of_module: a " + m->class_name() + " that is not a submodule of the root " +
                                           root_.as<ModuleObj>()->class_name() +
                                           " (register it as an attribute of a module in the tree)");
  return PathRef(links_, *link);
}

std::string Tracer::path_of_module(const ModuleObj* m) { return path_link_of_module(m)->str(); }

}  // namespace kiln::output_graph

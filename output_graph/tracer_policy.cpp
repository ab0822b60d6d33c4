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
  if (!walked_) {
    const ModuleObj* root = root_.as<ModuleObj>();
    links_.emplace(root, Link{nullptr, ""});
    std::vector<const ModuleObj*> stack{root};  // iterative: deep chains must not recurse
    while (!stack.empty()) {
      const ModuleObj* cur = stack.back();
      stack.pop_back();
      const auto& kids = cur->modules.entries();
      for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
        if (it->second.is_none()) continue;
        const ModuleObj* child = it->second.as<ModuleObj>();
        if (links_.emplace(child, Link{cur, it->first->s}).second) stack.push_back(child);
      }
    }
    walked_ = true;
  }
}

PathRef Tracer::path_link_of_module(const ModuleObj* m) {
  walk();
  if (!links_.count(m))
    throw_error(ErrorKind::ValueError, "path_of_module: a " + m->class_name() + " that is not a submodule of the root " +
                                           root_.as<ModuleObj>()->class_name() +
                                           " (register it as an attribute of a module in the tree)");
  std::vector<const ModuleObj*> todo;
  for (const ModuleObj* cur = m; cur && !link_of_.count(cur); cur = links_.at(cur).parent) todo.push_back(cur);
  for (auto t = todo.rbegin(); t != todo.rend(); ++t) {
    const Link& l = links_.at(*t);
    auto link = std::make_shared<PathLink>();
    link->parent = l.parent ? link_of_.at(l.parent) : nullptr;
    link->name = l.name;
    link_of_.emplace(*t, std::move(link));
  }
  return link_of_.at(m);
}

std::string Tracer::path_of_module(const ModuleObj* m) { return path_link_of_module(m)->str(); }

}  // namespace kiln::output_graph

#include "output_graph/tracer_policy.h"

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

std::string Tracer::path_of_module(const ModuleObj* m) {
  if (!walked_) {
    // One walk; named_modules lists each module once, under its first path.
    for (const auto& [path, mod] : named_modules(root_.as<ModuleObj>())) paths_.emplace(mod.as<ModuleObj>(), path);
    walked_ = true;
  }
  auto it = paths_.find(m);
  if (it == paths_.end())
    throw_error(ErrorKind::ValueError, "path_of_module: a " + m->class_name() + " that is not a submodule of the root " +
                                           root_.as<ModuleObj>()->class_name() +
                                           " (register it as an attribute of a module in the tree)");
  return it->second;
}

}  // namespace kiln::output_graph

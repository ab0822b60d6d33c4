// The FX Tracer policy: which modules stay leaves (one call_module node
// each) and what a module's qualified path is. Symbolic tracing is the
// ordinary translator run under this policy (interpreter/symbolic_trace).
// Subclass and override either method to change the graph.
#pragma once

#include <string>
#include <unordered_map>

#include "runtime/module.h"

namespace kiln::output_graph {

class Tracer {
 public:
  explicit Tracer(runtime::Value root);
  virtual ~Tracer() = default;

  // Default: the built-in modules (Linear, ReLU, ...) are leaves, except
  // the containers (Sequential, ModuleList, ModuleDict), which are traced
  // through, as torch.fx does.
  virtual bool is_leaf_module(const runtime::ModuleObj* m, const std::string& qualified_name);
  // The qualified name from the root ("layers.3.fc"; "" for the root).
  // The first call walks the tree once; every later call is a lookup. A
  // module that is not a descendant of the root is a kiln::Error.
  virtual std::string path_of_module(const runtime::ModuleObj* m);

  const runtime::Value& root() const { return root_; }

 private:
  runtime::Value root_;
  std::unordered_map<const runtime::ModuleObj*, std::string> paths_;
  bool walked_ = false;
};

}  // namespace kiln::output_graph

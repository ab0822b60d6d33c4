// The FX Tracer policy: which modules stay leaves (one call_module node
// each) and what a module's qualified path is. Symbolic tracing is the
// ordinary translator run under this policy (interpreter/symbolic_trace).
// Subclass and override either method to change the graph.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <typeinfo>

#include "output_graph/graph.h"
#include "runtime/base/pointer_map.h"
#include "runtime/nn/module.h"

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
  // path_of_module as a link (graph.h's PathLink), O(1) per module after
  // the walk. Used for call_module targets when the policy keeps the
  // default path_of_module (a subclass's string paths are used as given).
  PathRef path_link_of_module(const runtime::ModuleObj* m);
  // Whether is_leaf_module reads its qualified_name. The default policy
  // does not, so the translator skips building names (O(depth) each) for it;
  // a subclass is assumed to read it.
  bool uses_names() const { return typeid(*this) != typeid(Tracer); }

 private:
  runtime::Value root_;
  // One walk gives every module its path link (first path wins, as in
  // named_modules). The links live in one block shared by every PathRef
  // handed out (aliasing shared_ptrs): no allocation per module, and a
  // graph node's link keeps its ancestors alive with it.
  std::shared_ptr<std::deque<PathLink>> links_;  // a deque: elements never move
  runtime::PointerMap<runtime::ModuleObj, const PathLink*> link_of_;
  void walk();
};

}  // namespace kiln::output_graph

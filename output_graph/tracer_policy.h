// The FX Tracer policy: which modules stay leaves (one call_module node
// each) and what a module's qualified path is. Symbolic tracing is the
// ordinary translator run under this policy (interpreter/symbolic_trace).
// Subclass and override either method to change the graph.
#pragma once

#include <string>
#include <typeinfo>
#include <unordered_map>

#include "output_graph/graph.h"
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
  // One walk records each module's parent and name (first path wins, as in
  // named_modules); a path string is built only for a module asked about.
  struct Link {
    const runtime::ModuleObj* parent;
    std::string name;
  };
  std::unordered_map<const runtime::ModuleObj*, Link> links_;
  // Path links made so far: a module's link points at its parent's, so
  // asking for many modules of one chain walks the chain once.
  std::unordered_map<const runtime::ModuleObj*, PathRef> link_of_;
  void walk();
  bool walked_ = false;
};

}  // namespace kiln::output_graph

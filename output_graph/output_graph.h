// OutputGraph: the graph under construction during one trace, at the node
// level — inputs by source, parameters/buffers registered once by identity,
// call nodes typed by the ops' shape rules on meta tensors, the guard set —
// and compile_and_call_fx_graph, which hands the finished graph to a
// backend. It never sees a VariableTracker (DESIGN.md's one-way rule):
// variables/ wraps nodes in trackers (wrap_fx_proxy).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "output_graph/backend.h"
#include "output_graph/graph.h"
#include "output_graph/guards.h"
#include "output_graph/source.h"
#include "output_graph/symbolic_meta.h"

namespace kiln::output_graph {

struct DistributedState;

struct GraphInput {
  SourceRef source;
  Value example;  // the value seen while tracing
  Node* node;
};

// What a trace on guessed sizes (ShapeEnv::learner) is told when an op's
// concrete shape rule refuses the arguments it was given: it may find
// sizes (or input dtypes) that the rule accepts and restart the trace by
// throwing; when it returns, the rule's error stands.
class HintLearner {
 public:
  virtual ~HintLearner() = default;
  virtual void refused(runtime::OpId op, const std::vector<Arg>& args,
                       const std::vector<std::pair<std::string, Arg>>& kwargs, const ShapeEnv& env) = 0;
};

class OutputGraph {
 public:
  OutputGraph();

  Graph& graph() { return *graph_; }
  std::shared_ptr<Graph> graph_ptr() { return graph_; }

  // A placeholder for the tensor at `source`; one per source path.
  // `dynamic[d]`: dim d may take any size (the placeholder's meta says so,
  // and a backend must not specialise on it).
  Node* add_input(const SourceRef& source, const runtime::Tensor& example, const std::vector<bool>& dynamic = {});
  // A placeholder typed by `meta` as it is: its sizes may be expressions
  // of symbols this graph's ShapeEnv already holds (a leaf module's scratch
  // trace over its caller's symbolic tensors). Makes no symbol.
  Node* add_input_like(const SourceRef& source, const TensorMeta& meta);
  const std::vector<GraphInput>& inputs() const { return inputs_; }

  // A get_attr node for a parameter/buffer/constant tensor, registered once
  // per tensor identity: a second path to the same tensor returns the first
  // node (its target is the first qualified name seen, made unique).
  // Its path is owner.name (owner null: a top-level name), kept as a link:
  // a parameter deep in a module chain costs O(1), not O(depth).
  Node* register_attr(const Value& tensor, const PathRef& owner, const std::string& name);
  // The get_attr node register_attr made for this tensor object, or null.
  Node* registered_attr(const Value& tensor) const {
    auto it = attr_by_identity_.find(tensor.obj());
    return it == attr_by_identity_.end() ? nullptr : it->second;
  }

  // The path parent.name as a link, the same link for the same path
  // (hash-consed on (parent, name)), so paths compare by pointer. Links live
  // as long as any PathRef to one of this graph's links.
  PathRef path_link(const PathRef& parent, const std::string& name);

  // A call_function node; its TensorMeta comes from the op's shape rule run
  // on meta tensors built from the argument nodes' metadata.
  // It requires grad when an argument node does (Node::requires_grad).
  Node* create_call(runtime::OpId op, std::vector<Arg> args, std::vector<std::pair<std::string, Arg>> kwargs = {});

  // Marks an input or get_attr node as a tensor that requires grad while
  // grad mode is on; the first such mark is the graph's autograd reason.
  void mark_requires_grad(Node* n, const std::string& why);

  GuardSet& guards() { return guards_; }
  const GuardSet& guards() const { return guards_; }

  // Ends the graph with `outputs` and compiles it with `backend` (with
  // kAutogradBackend when Graph::autograd says so). Errors (unknown
  // backend) are kiln::Error naming the backend.
  CompiledGraph compile_and_call_fx_graph(const std::string& backend, const std::vector<Node*>& outputs);

  // The multi-rank compile this graph belongs to (null: none). When it
  // shares compile work, compile_and_call_fx_graph offers the backend a
  // SharedCompile (current_shared_compile()) for the duration of the call.
  void set_distributed(DistributedState* ds) { distributed_ = ds; }

 private:
  // The sizes of a call's result as expressions of the symbols its
  // arguments read (empty: numbers), by the op's symbolic rule; an op
  // without one specializes those symbols (output_graph/symbolic_meta.h).
  std::vector<SymExpr> symbolic_sizes(runtime::OpId op, const std::vector<Arg>& args,
                                      const std::vector<std::pair<std::string, Arg>>& kwargs, const TensorMeta& meta);

  std::shared_ptr<Graph> graph_;
  std::vector<GraphInput> inputs_;
  std::unordered_map<std::string, Node*> input_by_source_;
  std::unordered_map<const runtime::Object*, Node*> attr_by_identity_;
  struct LinkKeyHash {
    size_t operator()(const std::pair<const PathLink*, std::string>& k) const {
      return std::hash<const void*>()(k.first) * 31 + std::hash<std::string>()(k.second);
    }
  };
  using LinkKey = std::pair<const PathLink*, std::string>;
  std::shared_ptr<std::deque<PathLink>> links_ = std::make_shared<std::deque<PathLink>>();
  std::unordered_map<LinkKey, PathRef, LinkKeyHash> link_of_;
  std::unordered_map<LinkKey, int, LinkKeyHash> attr_names_;  // (owner path, name) -> tensors that claimed it
  // create_call's shape rules, memoized by (op, argument metas, constants):
  // a model repeats the same op on the same shapes (every block of a deep
  // model), and one rule run builds meta tensors and argument tuples — a
  // dozen allocations. The key is built in a reused buffer.
  std::unordered_map<std::string, TensorMeta> meta_memo_;
  std::string memo_key_;
  GuardSet guards_;
  DistributedState* distributed_ = nullptr;
};

// Meta (data-free) tensor for a node's result, for shape rules.
runtime::Tensor meta_tensor(const TensorMeta& m);
TensorMeta meta_of(const runtime::Tensor& t);

}  // namespace kiln::output_graph

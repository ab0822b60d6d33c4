// The Graph IR: what the tracer captures and a backend compiles. Nodes are
// FX's: placeholder, get_attr, call_function, call_module, call_method,
// output. Each has a unique readable name, a target, args, kwargs and the
// tensor metadata of its result (computed by the op's shape rule on meta
// tensors, never from data).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "output_graph/symbolic_shapes.h"
#include "runtime/tensor/ops.h"
#include "runtime/value/tensor.h"
#include "runtime/value/value.h"

namespace kiln::output_graph {

using runtime::DType;
using runtime::Shape;
using runtime::Value;

#define KILN_NODE_OPS(X) \
  X(Placeholder, "placeholder") \
  X(GetAttr, "get_attr")       \
  X(CallFunction, "call_function") \
  X(CallModule, "call_module") \
  X(CallMethod, "call_method") \
  X(Output, "output")

enum class NodeOp : uint8_t {
#define KILN_NODEOP_ENUM(e, s) e,
  KILN_NODE_OPS(KILN_NODEOP_ENUM)
#undef KILN_NODEOP_ENUM
};
const char* node_op_name(NodeOp op);

// Result metadata of a tensor-valued node. `dynamic[d]` marks a dimension
// whose size is not fixed by the graph (automatic dynamic shapes).
struct TensorMeta {
  Shape sizes;
  Shape strides;
  DType dtype = DType::Float32;
  std::vector<bool> dynamic;  // empty: all static
  // The sizes as expressions of the graph's symbols (Graph::symbols), one
  // per dim; empty when every size is the number in `sizes`. `sizes` keeps
  // the hints: the sizes of the traced example.
  std::vector<SymExpr> sym;
  std::string str() const;    // "f32[2, 3]" (dynamic dims print as s0, s1, ...)
};

struct Node;

// A node argument: a reference to an earlier node, a constant Value (int,
// float, bool, None, str, tuple of those), a list of arguments (cat's
// tensor list, a shape given as a mix of constants and sizes), or a
// symbolic int (a size computed from the graph's symbols at run time;
// `value` holds its hint).
struct Arg {
  enum class Kind : uint8_t { Node, Const, List, Sym } kind = Kind::Const;
  Node* node = nullptr;
  Value value;
  std::vector<Arg> items;
  SymExpr sym;

  static Arg of(Node* n) { Arg a; a.kind = Kind::Node; a.node = n; return a; }
  static Arg constant(Value v) { Arg a; a.kind = Kind::Const; a.value = std::move(v); return a; }
  static Arg list(std::vector<Arg> items) { Arg a; a.kind = Kind::List; a.items = std::move(items); return a; }
  static Arg symbolic(SymExpr e, int64_t hint) {
    Arg a;
    a.kind = Kind::Sym;
    a.sym = std::move(e);
    a.value = Value::integer(hint);
    return a;
  }
};

// Whether a node takes a size computed from symbols (an Arg::Sym, at any depth).
bool takes_symbolic_sizes(const Node& n);

// A qualified module path as a link to its parent's: the modules of one
// tree share prefixes, so making the path of a module at depth D is O(1),
// not O(D) characters (a deep chain would otherwise cost O(D^2) to trace).
// Links are made by the Tracer in one block; a PathRef shares ownership of
// the whole block, so `parent` (a plain pointer) lives as long as any
// PathRef to a descendant.
struct PathLink {
  const PathLink* parent;  // null for the root (whose path is "")
  std::string name;
  std::string str() const;  // "layers.3.fc": built on each call, O(depth)
};
using PathRef = std::shared_ptr<const PathLink>;

struct Node {
  int index = 0;          // position in Graph::nodes() (topological order)
  NodeOp op;
  std::string name;       // unique in the graph: "x", "add", "add_1", "layers_0_weight"
  // placeholder: input name; get_attr/call_module: qualified path;
  // call_function: the op's name; call_method: the method name. Read it with
  // target_str(): a call_module made from a path link fills it on demand.
  mutable std::string target;
  // call_module from symbolic tracing, get_attr from the translator: the
  // path as a link, and the module it calls / the tensor it reads (no attrs
  // lookup needed). In a deep module chain every parameter's qualified path
  // is O(depth) characters: as links, a trace stays linear in depth.
  PathRef target_path;
  Value module;
  const std::string& target_str() const {
    if (target.empty() && target_path) target = target_path->str();
    return target;
  }
  int op_id = -1;         // call_function: the runtime::OpId
  std::vector<Arg> args;
  std::vector<std::pair<std::string, Arg>> kwargs;
  std::optional<TensorMeta> meta;  // absent for output
  std::vector<Node*> users;        // nodes that take this one as an argument
  // Its value records gradients: a tensor that requires grad while grad
  // mode is on (an input, a parameter), or computed from one. Such a node
  // runs through the embedder's autograd (Graph::autograd).
  bool requires_grad = false;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Placeholders come first, in creation order; each builder appends a node
  // and registers it as a user of its argument nodes.
  Node* placeholder(const std::string& name, TensorMeta meta);
  Node* get_attr(const std::string& target, TensorMeta meta);
  // A get_attr that carries the tensor it reads and its path as a link
  // (not in attrs(); attr_of finds it). Named after the path's last four
  // parts at most, so the name costs O(1) however deep the module.
  Node* get_attr(PathRef path, Value tensor, TensorMeta meta);
  Node* call_function(runtime::OpId op, std::vector<Arg> args, std::vector<std::pair<std::string, Arg>> kwargs,
                      TensorMeta meta);
  Node* call_module(const std::string& target, std::vector<Arg> args, TensorMeta meta);
  // A call_module that carries its module and its path as a link (symbolic
  // tracing): the target string is built only when read.
  Node* call_module(PathRef path, Value module, std::vector<Arg> args, TensorMeta meta);
  Node* call_method(const std::string& method, std::vector<Arg> args, TensorMeta meta);
  Node* output(std::vector<Arg> results);  // at most once, last
  // Removes placeholders nobody uses (inputs that were only guarded);
  // returns how many went.
  size_t erase_unused_placeholders();

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Node*> placeholders() const;
  const Node* output_node() const;
  // Number of call_* nodes: the ops the graph computes.
  size_t op_count() const;

  // Symbol i of the ShapeEnv the graph was traced under is the size of
  // dimension `dim` of the input `placeholder`: a backend reads the
  // symbols' values there on every call (Arg::Kind::Sym, TensorMeta::sym).
  // Such a placeholder stays an input even if nothing else reads it.
  struct Symbol {
    const Node* placeholder;
    int dim;
  };
  std::vector<Symbol> symbols;
  // Unbinds each symbol no node computes with (in a size, an Arg::Sym)
  // from its placeholder (placeholder = null, value 0 in symbol_values):
  // an input kept only for such a symbol can then go. Ids do not change.
  void drop_unread_symbols();
  // Why the graph runs through the embedder's own ops so its autograd
  // records them ("parameter fc.weight requires grad"): empty when the
  // graph runs on kiln's kernels. OutputGraph picks the backend by it.
  std::string autograd;
  // What the trace assumed of the symbols (a relation a branch took, a size
  // an op required): the graph computes what its root does only where every
  // one holds. Symbolic tracing keeps them with the graph (a GraphModule
  // checks its inputs against them); compiled frames guard them instead.
  std::vector<ShapeGuard> shape_guards;
  // The symbols' values for `inputs` (one per placeholder, in order).
  std::vector<int64_t> symbol_values(const std::vector<Value>& inputs) const;
  bool is_symbol_source(const Node* placeholder) const;

  // get_attr / call_module targets resolve here (the tensors and modules a
  // graph reads, by qualified path), like a GraphModule's attributes.
  void set_attr(const std::string& target, Value v) { attrs_[target] = std::move(v); }
  // By target: attrs(), then the values get_attr / call_module nodes carry
  // (a scan: for tools, not per node). Backends read attr_of(node).
  const Value* attr(const std::string& target) const;
  const Value* attr_of(const Node& n) const;
  const std::unordered_map<std::string, Value>& attrs() const { return attrs_; }

  // FX's print_tabular: opcode | name | target | args | kwargs (| meta).
  std::string print_tabular() const;
  // A Python-like view:  def forward(self, x):\n    add = kiln.add(x, 1) ...
  std::string code() const;

 private:
  std::string unique_name(const std::string& base);
  Node* append(std::unique_ptr<Node> n);

  std::vector<std::unique_ptr<Node>> nodes_;
  // Erased placeholders stay allocated: trackers may still point at them.
  std::vector<std::unique_ptr<Node>> erased_;
  std::unordered_map<std::string, int> name_counts_;
  std::unordered_map<std::string, Value> attrs_;
};

}  // namespace kiln::output_graph

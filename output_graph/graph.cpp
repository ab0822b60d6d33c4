// The Graph IR builders and printers.
//
// Invariants every builder keeps (backends and the printers rely on them):
//  - nodes() is a topological order: a node's argument nodes come before it;
//  - placeholders form a prefix of nodes(), in creation order;
//  - the output node, if any, is the last node, and there is at most one;
//  - Node::index is the node's position in nodes();
//  - every node reachable from a node's args/kwargs (including inside List
//    args) lists that node once in its `users`;
//  - node names are unique Python identifiers, never a keyword and never
//    `self` or `kiln` (which code() uses), so code() is valid Python.
#include "output_graph/graph.h"

#include <functional>

#include <algorithm>
#include <array>
#include <string_view>
#include <unordered_set>

#include "runtime/base/error.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::output_graph {

const char* node_op_name(NodeOp op) {
  switch (op) {
#define KILN_NODEOP_NAME(e, s) \
  case NodeOp::e: return s;
    KILN_NODE_OPS(KILN_NODEOP_NAME)
#undef KILN_NODEOP_NAME
  }
  return "?";
}

// ------------------------------------------------------------- TensorMeta --

static const char* dtype_short(DType d) {
  switch (d) {
    case DType::Bool: return "b8";
    case DType::Int32: return "i32";
    case DType::Int64: return "i64";
    case DType::Float32: return "f32";
    case DType::Float64: return "f64";
  }
  return "?";
}

std::string TensorMeta::str() const {
  std::string s = dtype_short(dtype);
  s += '[';
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (d) s += ", ";
    // A dynamic dimension is named after its position: the graph promises
    // nothing about its size, so printing the example size would mislead.
    if (d < sym.size())
      s += sym[d].str();
    else if (d < dynamic.size() && dynamic[d])
      s += "s" + std::to_string(d);
    else
      s += std::to_string(sizes[d]);
  }
  s += ']';
  return s;
}

// ------------------------------------------------------------------ naming --

namespace {

bool is_reserved(const std::string& s) {
  // Python keywords, plus the two names code() itself uses.
  static const std::unordered_set<std::string> reserved = {
      "False", "None",   "True",    "and",      "as",     "assert", "async", "await",
      "break", "class",  "continue", "def",     "del",    "elif",   "else",  "except",
      "finally", "for",  "from",    "global",   "if",     "import", "in",    "is",
      "lambda", "nonlocal", "not",  "or",       "pass",   "raise",  "return", "try",
      "while", "with",   "yield",   "self",     "kiln"};
  return reserved.count(s) != 0;
}

// Any string -> a Python identifier: other characters become '_', a
// leading digit gets a '_' in front.
std::string sanitize(std::string_view raw) {
  std::string s;
  s.reserve(raw.size() + 1);
  for (char c : raw) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    s += ok ? c : '_';
  }
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) s.insert(s.begin(), '_');
  return s;
}

void check_op_id(runtime::OpId op) {
  if (int(op) >= runtime::kNumOps)
    throw_error(ErrorKind::RuntimeError, "call_function: no op with id " + std::to_string(int(op)));
}

}  // namespace

// name_counts_ holds every name in use, mapped to the last suffix tried
// with it as a base, so a run of clashes (add, add_1, add_2, ...) costs one
// probe each instead of a rescan from _1. A generated "add_1" is itself a
// used name: a later placeholder called "add_1" becomes "add_1_1".
std::string Graph::unique_name(const std::string& raw) {
  std::string base = sanitize(raw);
  // try_emplace: emplace would allocate a node even when the name is taken.
  if (!is_reserved(base) && name_counts_.try_emplace(base, 0).second) return base;
  int next = name_counts_.count(base) ? name_counts_[base] : 0;
  std::string candidate;
  do {
    candidate = base + "_" + std::to_string(++next);
  } while (is_reserved(candidate) || name_counts_.count(candidate));
  if (!is_reserved(base)) name_counts_[base] = next;
  name_counts_.emplace(candidate, 0);
  return candidate;
}

// ---------------------------------------------------------------- builders --

namespace {

// Calls f(node) for every node argument, descending into lists.
template <class F>
void for_each_node_arg(const Arg& a, F&& f) {
  switch (a.kind) {
    case Arg::Kind::Node: f(a.node); break;
    case Arg::Kind::Const:
    case Arg::Kind::Sym: break;
    case Arg::Kind::List:
      for (const Arg& item : a.items) for_each_node_arg(item, f);
      break;
  }
}

template <class F>
void for_each_node_arg(const Node& n, F&& f) {
  for (const Arg& a : n.args) for_each_node_arg(a, f);
  for (const auto& kv : n.kwargs) for_each_node_arg(kv.second, f);
}

}  // namespace

Node* Graph::append(std::unique_ptr<Node> n) {
  if (output_node())
    throw_error(ErrorKind::RuntimeError, "graph already has an output node; cannot add " +
                                             std::string(node_op_name(n->op)) + " '" + n->target_str() +
                                             "' after it");
  // Arguments must be earlier nodes of this graph: anything else would break
  // the topological order backends execute in (or dangle).
  for_each_node_arg(*n, [&](const Node* a) {
    if (!a || size_t(a->index) >= nodes_.size() || nodes_[size_t(a->index)].get() != a)
      throw_error(ErrorKind::RuntimeError, std::string(node_op_name(n->op)) + " '" + n->target_str() +
                                               "': an argument is not a node of this graph");
    // Computed from a tensor that records gradients: records them too.
    if (a->requires_grad && n->op != NodeOp::Output) n->requires_grad = true;
  });
  // ... when it is a floating tensor: an integer or bool result (argmax, a
  // comparison) never requires grad, as in torch.
  if (n->requires_grad && n->meta && !runtime::is_floating(n->meta->dtype)) n->requires_grad = false;
  // Named only once accepted, so a refused node does not use up a name.
  // Every kind is named after its target: the op, the method, the dotted
  // path (sanitized to layers_0_weight), or "output" -- except call_module,
  // named after the path's tail up to its last non-numeric part (a.b.fc ->
  // fc, layers.0 -> layers_0): in a deep chain the full path is O(depth)
  // long, and naming every leaf by it made tracing quadratic. The target
  // keeps the full path.
  if (n->op == NodeOp::CallModule && n->target_path) {
    // The tail of the link chain, up to its last non-numeric part.
    std::string tail;
    for (const PathLink* l = n->target_path.get(); l && !l->name.empty(); l = l->parent) {
      tail = tail.empty() ? l->name : l->name + "." + tail;
      if (l->name.find_first_not_of("0123456789") != std::string::npos) break;
    }
    n->name = unique_name(tail.empty() ? "module" : tail);
  } else if (n->op == NodeOp::GetAttr && n->target_path) {
    // The last four parts at most (m.layers.0.weight -> m_layers_0_weight;
    // a.b.c.d.fc.weight -> c_d_fc_weight): O(1) however deep the path.
    std::string tail;
    int parts = 0;
    for (const PathLink* l = n->target_path.get(); l && parts < 4; l = l->parent) {
      if (l->name.empty()) continue;
      tail = tail.empty() ? l->name : l->name + "." + tail;
      ++parts;
    }
    n->name = unique_name(tail.empty() ? "attr" : tail);
  } else if (n->op == NodeOp::CallModule) {
    size_t start = n->target.size();
    while (start > 0) {
      size_t dot = n->target.rfind('.', start - 1);
      size_t from = dot == std::string::npos ? 0 : dot + 1;
      std::string part = n->target.substr(from, start - from);
      start = dot == std::string::npos ? 0 : dot;
      if (!part.empty() && part.find_first_not_of("0123456789") != std::string::npos) {
        start = from;
        break;
      }
      if (dot == std::string::npos) break;
    }
    n->name = unique_name(n->target.substr(start));
  } else {
    n->name = unique_name(n->target);
  }
  Node* node = n.get();
  node->index = int(nodes_.size());
  // A node that takes x twice (add(x, x)) is one user of x. The new node is
  // the newest, so an earlier registration from it is always users.back().
  for_each_node_arg(*node, [&](Node* a) {
    if (a->users.empty() || a->users.back() != node) a->users.push_back(node);
  });
  nodes_.push_back(std::move(n));
  return node;
}

// The tracer discovers inputs lazily (a global or closure tensor read in
// the middle of a function), so a placeholder may be created after call
// nodes; it is inserted after the existing placeholders to keep them a
// prefix, in creation order. Placeholders take no arguments, so moving the
// later nodes down keeps the order topological.
Node* Graph::placeholder(const std::string& name, TensorMeta meta) {
  if (output_node())
    throw_error(ErrorKind::RuntimeError,
                "graph already has an output node; cannot add placeholder '" + name + "' after it");
  auto n = std::make_unique<Node>();
  n->op = NodeOp::Placeholder;
  n->target = name;
  n->name = unique_name(name);
  n->meta = std::move(meta);
  size_t pos = 0;
  while (pos < nodes_.size() && nodes_[pos]->op == NodeOp::Placeholder) ++pos;
  Node* node = n.get();
  nodes_.insert(nodes_.begin() + ptrdiff_t(pos), std::move(n));
  for (size_t i = pos; i < nodes_.size(); ++i) nodes_[i]->index = int(i);
  return node;
}

Node* Graph::get_attr(const std::string& target, TensorMeta meta) {
  auto n = std::make_unique<Node>();
  n->op = NodeOp::GetAttr;
  n->target = target;
  n->meta = std::move(meta);
  return append(std::move(n));
}

Node* Graph::get_attr(PathRef path, Value tensor, TensorMeta meta) {
  auto n = std::make_unique<Node>();
  n->op = NodeOp::GetAttr;
  n->target_path = std::move(path);
  n->module = std::move(tensor);
  n->meta = std::move(meta);
  return append(std::move(n));
}

Node* Graph::call_function(runtime::OpId op, std::vector<Arg> args,
                           std::vector<std::pair<std::string, Arg>> kwargs, TensorMeta meta) {
  check_op_id(op);
  auto n = std::make_unique<Node>();
  n->op = NodeOp::CallFunction;
  n->target = runtime::op_def(op).name;
  n->op_id = int(op);
  n->args = std::move(args);
  n->kwargs = std::move(kwargs);
  n->meta = std::move(meta);
  return append(std::move(n));
}

Node* Graph::call_module(const std::string& target, std::vector<Arg> args, TensorMeta meta) {
  auto n = std::make_unique<Node>();
  n->op = NodeOp::CallModule;
  n->target = target;
  n->args = std::move(args);
  n->meta = std::move(meta);
  return append(std::move(n));
}

Node* Graph::call_module(PathRef path, Value module, std::vector<Arg> args, TensorMeta meta) {
  if (!path) throw_error(ErrorKind::RuntimeError, "call_module: a null path");
  auto n = std::make_unique<Node>();
  n->op = NodeOp::CallModule;
  n->target_path = std::move(path);
  n->module = std::move(module);
  n->args = std::move(args);
  n->meta = std::move(meta);
  return append(std::move(n));
}

std::string PathLink::str() const {
  std::vector<const std::string*> parts;
  for (const PathLink* l = this; l; l = l->parent)
    if (!l->name.empty()) parts.push_back(&l->name);
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += (out.empty() ? "" : ".") + **it;
  return out;
}

Node* Graph::call_method(const std::string& method, std::vector<Arg> args, TensorMeta meta) {
  if (args.empty())
    throw_error(ErrorKind::RuntimeError,
                "call_method '" + method + "' needs the object it is called on as its first argument");
  auto n = std::make_unique<Node>();
  n->op = NodeOp::CallMethod;
  n->target = method;
  n->args = std::move(args);
  n->meta = std::move(meta);
  return append(std::move(n));
}

Node* Graph::output(std::vector<Arg> results) {
  auto n = std::make_unique<Node>();
  n->op = NodeOp::Output;
  n->target = "output";
  n->args = std::move(results);
  return append(std::move(n));  // refuses a second output
}

// ---------------------------------------------------------------- queries --

std::vector<Node*> Graph::placeholders() const {
  std::vector<Node*> out;
  for (const auto& n : nodes_) {
    if (n->op != NodeOp::Placeholder) break;  // they are a prefix
    out.push_back(n.get());
  }
  return out;
}

const Node* Graph::output_node() const {
  if (!nodes_.empty() && nodes_.back()->op == NodeOp::Output) return nodes_.back().get();
  return nullptr;
}

size_t Graph::op_count() const {
  size_t count = 0;
  for (const auto& n : nodes_)
    if (n->op == NodeOp::CallFunction || n->op == NodeOp::CallModule || n->op == NodeOp::CallMethod) ++count;
  return count;
}

const Value* Graph::attr(const std::string& target) const {
  auto it = attrs_.find(target);
  if (it != attrs_.end()) return &it->second;
  for (const auto& n : nodes_)
    if (n->target_path && (n->op == NodeOp::GetAttr || n->op == NodeOp::CallModule) && n->target_str() == target)
      return &n->module;
  return nullptr;
}

const Value* Graph::attr_of(const Node& n) const {
  if (n.target_path) return &n.module;
  return attr(n.target_str());
}

// ---------------------------------------------------------------- printers --

namespace {

void append_arg(std::string& out, const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Node: out += a.node ? a.node->name : "<null>"; break;
    case Arg::Kind::Const: out += runtime::repr(a.value); break;
    case Arg::Kind::Sym: out += a.sym.str(); break;
    case Arg::Kind::List:
      out += '[';
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (i) out += ", ";
        append_arg(out, a.items[i]);
      }
      out += ']';
      break;
  }
}

// "a, b, k=v" (code view) — the positional args then the keywords.
std::string call_args(const std::vector<Arg>& args, size_t first,
                      const std::vector<std::pair<std::string, Arg>>& kwargs) {
  std::string out;
  bool sep = false;
  for (size_t i = first; i < args.size(); ++i) {
    if (sep) out += ", ";
    append_arg(out, args[i]);
    sep = true;
  }
  for (const auto& [k, v] : kwargs) {
    if (sep) out += ", ";
    out += k;
    out += '=';
    append_arg(out, v);
    sep = true;
  }
  return out;
}

// Python's tuple repr: (), (a,), (a, b).
std::string tuple_str(const std::vector<Arg>& args) {
  std::string out = "(";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) out += ", ";
    append_arg(out, args[i]);
  }
  if (args.size() == 1) out += ',';
  out += ')';
  return out;
}

// Python's dict repr with string keys: {}, {'dim': 1}.
std::string kwargs_str(const std::vector<std::pair<std::string, Arg>>& kwargs) {
  std::string out = "{";
  for (size_t i = 0; i < kwargs.size(); ++i) {
    if (i) out += ", ";
    out += runtime::repr(Value::str(kwargs[i].first));
    out += ": ";
    append_arg(out, kwargs[i].second);
  }
  out += '}';
  return out;
}

}  // namespace

std::string Graph::print_tabular() const {
  constexpr size_t kCols = 6;
  using Row = std::array<std::string, kCols>;
  std::vector<Row> rows;
  rows.reserve(nodes_.size() + 1);
  rows.push_back({"opcode", "name", "target", "args", "kwargs", "meta"});
  for (const auto& n : nodes_) {
    std::string target = n->op == NodeOp::CallFunction ? "kiln." + n->target : n->target_str();
    rows.push_back({node_op_name(n->op), n->name, std::move(target), tuple_str(n->args), kwargs_str(n->kwargs),
                    n->meta ? n->meta->str() : std::string()});
  }
  std::array<size_t, kCols> width{};
  for (const Row& r : rows)
    for (size_t c = 0; c < kCols; ++c) width[c] = std::max(width[c], r[c].size());

  std::string out;
  auto emit = [&](const Row& r) {
    // Trailing empty cells (the output node has no meta) are left out, so
    // no line ends in a dangling separator or spaces.
    size_t ncols = kCols;
    while (ncols > 1 && r[ncols - 1].empty()) --ncols;
    std::string line;
    for (size_t c = 0; c < ncols; ++c) {
      if (c) line += " | ";
      line += r[c];
      if (c + 1 < ncols) line.append(width[c] - r[c].size(), ' ');
    }
    out += line;
    out += '\n';
  };
  emit(rows[0]);
  for (size_t c = 0; c < kCols; ++c) {
    if (c) out += "-+-";
    out.append(width[c], '-');
  }
  out += '\n';
  for (size_t i = 1; i < rows.size(); ++i) emit(rows[i]);
  return out;
}

std::string Graph::code() const {
  std::string out = "def forward(self";
  for (const Node* p : placeholders()) {
    out += ", ";
    out += p->name;
  }
  out += "):\n";
  size_t body = 0;
  for (const auto& up : nodes_) {
    const Node& n = *up;
    std::string line;
    switch (n.op) {
      case NodeOp::Placeholder: continue;
      case NodeOp::GetAttr: line = n.name + " = self." + n.target_str(); break;
      case NodeOp::CallFunction:
        line = n.name + " = kiln." + n.target + "(" + call_args(n.args, 0, n.kwargs) + ")";
        break;
      case NodeOp::CallModule:
        line = n.name + " = self." + n.target_str() + "(" + call_args(n.args, 0, n.kwargs) + ")";
        break;
      case NodeOp::CallMethod: {
        std::string self;
        if (!n.args.empty()) append_arg(self, n.args[0]);
        line = n.name + " = " + self + "." + n.target + "(" + call_args(n.args, 1, n.kwargs) + ")";
        break;
      }
      case NodeOp::Output: line = "return " + tuple_str(n.args); break;
    }
    out += "    ";
    out += line;
    out += '\n';
    ++body;
  }
  if (body == 0) out += "    pass\n";
  return out;
}

bool takes_symbolic_sizes(const Node& n) {
  auto symbolic = [](auto& self, const Arg& a) -> bool {
    if (a.kind == Arg::Kind::Sym) return true;
    for (const Arg& x : a.items)
      if (self(self, x)) return true;
    return false;
  };
  for (const Arg& a : n.args)
    if (symbolic(symbolic, a)) return true;
  for (const auto& kv : n.kwargs)
    if (symbolic(symbolic, kv.second)) return true;
  return false;
}

void Graph::drop_unread_symbols() {
  if (symbols.empty()) return;
  std::vector<bool> read(symbols.size(), false);
  auto mark = [&](const SymExpr& e) {
    for (int id : e.symbols())
      if (size_t(id) < read.size()) read[size_t(id)] = true;
  };
  std::function<void(const Arg&)> mark_arg = [&](const Arg& a) {
    if (a.kind == Arg::Kind::Sym) mark(a.sym);
    for (const Arg& x : a.items) mark_arg(x);
  };
  for (const auto& n : nodes_) {
    // A placeholder's own sizes are where the symbols come from, not a use.
    if (n->op != NodeOp::Placeholder && n->meta)
      for (const SymExpr& e : n->meta->sym) mark(e);
    for (const Arg& a : n->args) mark_arg(a);
    for (const auto& kv : n->kwargs) mark_arg(kv.second);
  }
  for (size_t i = 0; i < symbols.size(); ++i)
    if (!read[i]) symbols[i].placeholder = nullptr;
}

std::vector<int64_t> Graph::symbol_values(const std::vector<Value>& inputs) const {
  std::vector<int64_t> values;
  values.reserve(symbols.size());
  for (const Symbol& s : symbols) {
    if (!s.placeholder) {
      values.push_back(0);  // read by nothing (drop_unread_symbols)
      continue;
    }
    // Placeholders come first, in order: a placeholder's index is its input's.
    const Value& in = inputs.at(size_t(s.placeholder->index));
    values.push_back(in.as_tensor().sizes().at(size_t(s.dim)));
  }
  return values;
}

bool Graph::is_symbol_source(const Node* n) const {
  for (const Symbol& s : symbols)
    if (s.placeholder && s.placeholder == n) return true;
  return false;
}

size_t Graph::erase_unused_placeholders() {
  std::vector<std::unique_ptr<Node>> kept;
  for (auto& n : nodes_) {
    if (n->op == NodeOp::Placeholder && n->users.empty() && !is_symbol_source(n.get())) erased_.push_back(std::move(n));
    else kept.push_back(std::move(n));
  }
  size_t erased = nodes_.size() - kept.size();
  nodes_ = std::move(kept);
  for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i]->index = int(i);
  return erased;
}

}  // namespace kiln::output_graph

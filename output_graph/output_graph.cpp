#include "output_graph/output_graph.h"
#include "runtime/base/fault_injection.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "output_graph/compiler_collective.h"
#include "output_graph/shared_compile.h"
#include "runtime/base/log.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::output_graph {

using runtime::Kind;
using runtime::Tensor;

runtime::Tensor meta_tensor(const TensorMeta& m) { return Tensor::meta(m.sizes, m.dtype, m.strides); }

TensorMeta meta_of(const runtime::Tensor& t) {
  TensorMeta m;
  m.sizes = t.sizes();
  m.strides = t.strides();
  m.dtype = t.dtype();
  return m;
}

OutputGraph::OutputGraph() : graph_(std::make_shared<Graph>()) {}

Node* OutputGraph::add_input(const SourceRef& source, const Tensor& example, const std::vector<bool>& dynamic) {
  auto it = input_by_source_.find(source->str());
  if (it != input_by_source_.end()) return it->second;
  // Placeholder names come from the source: L['x'] -> x, L['self'].w -> self_w.
  std::string name;
  for (char c : source->str()) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') name += c;
    else if (!name.empty() && name.back() != '_') name += '_';
  }
  if (name.rfind("L_", 0) == 0) name = name.substr(2);
  while (!name.empty() && name.back() == '_') name.pop_back();
  if (name.empty()) name = "input";
  TensorMeta meta = meta_of(example);
  meta.dynamic = dynamic;
  // Each dynamic dim is a symbol (its size is at least 2: the builder
  // keeps 0 and 1 static), read from this input on every call.
  std::vector<int> symbol_dims;
  for (size_t d = 0; d < dynamic.size() && d < meta.sizes.size(); ++d)
    if (dynamic[d] && meta.sizes[d] >= 2) symbol_dims.push_back(int(d));
  if (!symbol_dims.empty()) {
    for (int64_t s : meta.sizes) meta.sym.push_back(SymExpr::constant(s));
    for (int d : symbol_dims) meta.sym[size_t(d)] = guards_.add_symbol(source, d, meta.sizes[size_t(d)]);
    // The input's guard prints its dims by symbol too ("f32[s1, 3]").
    if (Guard* g = guards_.find(source.get(), GuardKind::TensorMatch)) g->tensor.sym = meta.sym;
  }
  Node* n = graph_->placeholder(name, std::move(meta));
  for (int d : symbol_dims) graph_->symbols.push_back({n, d});
  inputs_.push_back({source, Value::tensor(example), n});
  input_by_source_.emplace(source->str(), n);
  return n;
}

Node* OutputGraph::add_input_like(const SourceRef& source, const TensorMeta& meta) {
  Node* n = graph_->placeholder("input", meta);
  inputs_.push_back({source, Value::tensor(meta_tensor(meta)), n});
  input_by_source_.emplace(source->str(), n);
  return n;
}

PathRef OutputGraph::path_link(const PathRef& parent, const std::string& name) {
  LinkKey key{parent.get(), name};
  auto it = link_of_.find(key);
  if (it != link_of_.end()) return it->second;
  links_->push_back(PathLink{parent.get(), name});  // a deque: earlier links never move
  PathRef ref(links_, &links_->back());           // shares ownership of the whole block
  link_of_.emplace(std::move(key), ref);
  return ref;
}

Node* OutputGraph::register_attr(const Value& tensor, const PathRef& owner, const std::string& name) {
  auto it = attr_by_identity_.find(tensor.obj());
  if (it != attr_by_identity_.end()) return it->second;
  // Two different tensors may claim the same path over a trace (a module
  // attribute reassigned between reads): keep targets unique. Links are
  // hash-consed, so the same path is the same owner pointer.
  int& count = attr_names_[LinkKey{owner.get(), name}];
  PathRef path = path_link(owner, count++ > 0 ? name + "_" + std::to_string(count - 1) : name);
  Node* n = graph_->get_attr(std::move(path), tensor, meta_of(tensor.as_tensor()));
  attr_by_identity_.emplace(tensor.obj(), n);
  return n;
}

static Value meta_value(const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Node: return Value::tensor(meta_tensor(*a.node->meta));
    case Arg::Kind::Const:
    case Arg::Kind::Sym: return a.value;  // the hint
    case Arg::Kind::List: {
      std::vector<Value> items;
      for (const Arg& x : a.items) items.push_back(meta_value(x));
      return runtime::make_tuple(std::move(items));
    }
  }
  return Value::none();
}

namespace {

template <class T>
void put(std::string& key, const T& x) {
  key.append(reinterpret_cast<const char*>(&x), sizeof x);
}

// Appends what a shape rule can read of `a`: a node's sizes, strides and
// dtype (not its `dynamic` flags: meta tensors do not carry them), a
// constant's kind and exact payload (1, 1.0 and True differ: dtype
// promotion tells them apart). False for a constant whose content the key
// cannot spell (a tensor, a slice, ...): that call is not memoized.
bool put_arg(std::string& key, const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Node: {
      const TensorMeta& m = *a.node->meta;
      if (!m.sym.empty()) return false;
      put(key, char('n'));
      put(key, m.dtype);
      put(key, m.sizes.size());
      for (int64_t s : m.sizes) put(key, s);
      for (int64_t s : m.strides) put(key, s);
      return true;
    }
    case Arg::Kind::List:
      put(key, char('l'));
      put(key, a.items.size());
      for (const Arg& x : a.items)
        if (!put_arg(key, x)) return false;
      return true;
    case Arg::Kind::Const: break;
    case Arg::Kind::Sym: return false;  // symbolic calls are typed afresh (their sizes are expressions)
  }
  const Value& v = a.value;
  put(key, v.kind());
  switch (v.kind()) {
    case Kind::None: return true;
    case Kind::Bool:
    case Kind::Int: put(key, v.as_int()); return true;
    case Kind::Float: put(key, v.as_float()); return true;  // bit pattern: -0.0 and nan kept apart
    case Kind::Str: {
      const std::string& str = v.as_str();
      put(key, str.size());
      key += str;
      return true;
    }
    case Kind::Tuple: {
      const auto& items = v.as<runtime::TupleObj>()->items;
      put(key, items.size());
      for (const Value& item : items)
        if (!put_arg(key, Arg::constant(item))) return false;
      return true;
    }
    default: return false;
  }
}

bool reads_symbols(const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Node: return !a.node->meta->sym.empty();
    case Arg::Kind::Sym: return true;
    case Arg::Kind::Const: return false;
    case Arg::Kind::List:
      for (const Arg& x : a.items)
        if (reads_symbols(x)) return true;
      return false;
  }
  return false;
}

SymArg sym_arg(const Arg& a, std::vector<int>& symbols) {
  switch (a.kind) {
    case Arg::Kind::Node: {
      const TensorMeta& m = *a.node->meta;
      SymShape shape;
      if (m.sym.empty())
        for (int64_t s : m.sizes) shape.push_back(SymExpr::constant(s));
      else
        shape = m.sym;
      for (const SymExpr& e : shape)
        for (int id : e.symbols()) symbols.push_back(id);
      return SymArg::tensor(meta_tensor(m), std::move(shape));
    }
    case Arg::Kind::Sym:
      for (int id : a.sym.symbols()) symbols.push_back(id);
      return SymArg::integer(a.sym, a.value.as_int());
    case Arg::Kind::Const: return SymArg::constant(a.value);
    case Arg::Kind::List: {
      SymArg list;
      std::vector<Value> hints;
      for (const Arg& x : a.items) {
        list.items.push_back(sym_arg(x, symbols));
        hints.push_back(list.items.back().hint);
      }
      list.hint = runtime::make_tuple(std::move(hints));
      return list;
    }
  }
  return SymArg::constant(Value::none());
}

}  // namespace

std::vector<SymExpr> OutputGraph::symbolic_sizes(runtime::OpId op, const std::vector<Arg>& args,
                                                 const std::vector<std::pair<std::string, Arg>>& kwargs,
                                                 const TensorMeta& meta) {
  std::vector<int> symbols;
  std::vector<SymArg> sargs;
  std::vector<std::pair<std::string, SymArg>> skw;
  for (const Arg& a : args) sargs.push_back(sym_arg(a, symbols));
  for (const auto& [k, a] : kwargs) skw.emplace_back(k, sym_arg(a, symbols));
  ShapeEnv& env = guards_.shapes();
  if (auto sizes = symbolic_shape(op, sargs, skw, meta.sizes, env)) {
    for (const SymExpr& e : *sizes)
      if (e.has_symbols()) return *sizes;
    return {};
  }
  // The op's rule cannot say (a size that depends on data, a composite):
  // the symbols it reads take their traced values, under guards, and the
  // result's sizes are numbers.
  std::sort(symbols.begin(), symbols.end());
  symbols.erase(std::unique(symbols.begin(), symbols.end()), symbols.end());
  const std::string why = std::string(runtime::op_def(op).name) + "() has no symbolic shape rule";
  auto* lg = kiln::log::get("recompiles");
  for (int id : symbols) {
    const int64_t v = env.specialize(SymExpr::symbol(id), why);
    if (lg) lg->info("size s{} ({}) specialized to {}: {}", id, env.origin(id), v, why);
  }
  return {};
}

Node* OutputGraph::create_call(runtime::OpId op, std::vector<Arg> args,
                               std::vector<std::pair<std::string, Arg>> kwargs) {
  memo_key_.clear();
  put(memo_key_, op);
  bool memo = true;
  for (const Arg& a : args) memo = memo && put_arg(memo_key_, a);
  for (const auto& [k, a] : kwargs) {
    if (!memo) break;
    put(memo_key_, k.size());
    memo_key_ += k;
    memo = put_arg(memo_key_, a);
  }
  if (memo)
    if (auto hit = meta_memo_.find(memo_key_); hit != meta_memo_.end())
      return graph_->call_function(op, std::move(args), std::move(kwargs), hit->second);

  std::vector<Value> values;
  std::vector<Value> names;
  for (const Arg& a : args) values.push_back(meta_value(a));
  for (const auto& [k, a] : kwargs) {
    values.push_back(meta_value(a));
    names.push_back(runtime::intern_value(k));
  }
  Value kwnames = names.empty() ? Value::none() : runtime::make_tuple(std::move(names));
  runtime::CallArgs call{values.data(), values.size(),
                         kwnames.is(Kind::Tuple) ? kwnames.as<runtime::TupleObj>() : nullptr};
  TensorMeta meta;
  try {
    meta = meta_of(runtime::infer_meta(op, call));  // shape errors surface here, at trace time
  } catch (const Error&) {
    // On guessed sizes the learner may find ones the rule accepts (it
    // restarts the trace by throwing); otherwise the error stands.
    if (HintLearner* l = guards_.shapes().learner) l->refused(op, args, kwargs, guards_.shapes());
    throw;
  }
  if (memo) meta_memo_.emplace(memo_key_, meta);
  bool symbolic = false;
  for (const Arg& a : args) symbolic = symbolic || reads_symbols(a);
  for (const auto& kv : kwargs) symbolic = symbolic || reads_symbols(kv.second);
  if (symbolic) meta.sym = symbolic_sizes(op, args, kwargs, meta);
  return graph_->call_function(op, std::move(args), std::move(kwargs), std::move(meta));
}

void OutputGraph::mark_requires_grad(Node* n, const std::string& why) {
  n->requires_grad = true;
  if (graph_->autograd.empty()) graph_->autograd = why;
}

CompiledGraph OutputGraph::compile_and_call_fx_graph(const std::string& backend0, const std::vector<Node*>& outputs) {
  runtime::fault_point("backend");
  std::vector<Arg> results;
  for (Node* n : outputs) results.push_back(Arg::of(n));
  graph_->output(std::move(results));
  // A symbol nothing in the graph computes with (its input's sizes were
  // only guarded) is no reason to pass that input: a guard checks it.
  graph_->drop_unread_symbols();
  // Inputs that were only looked at (guarded) are not passed to the graph.
  // The nodes stay owned until the graph is done with: erase only after
  // dropping them from inputs_.
  std::vector<GraphInput> used;
  for (GraphInput& in : inputs_)
    if (!in.node->users.empty() || graph_->is_symbol_source(in.node)) used.push_back(std::move(in));
    else input_by_source_.erase(in.source->str());
  inputs_ = std::move(used);
  graph_->erase_unused_placeholders();
  if (!graph_->autograd.empty()) {
    // Only when something computed (or returned) records gradients: a
    // parameter read and never used leaves the graph to kiln's kernels.
    bool records = false;
    for (const auto& n : graph_->nodes())
      if (n->requires_grad && (!n->users.empty() || n->op != NodeOp::GetAttr)) records = true;
    if (!records) graph_->autograd.clear();
  }
  const std::string& backend = graph_->autograd.empty() ? backend0 : std::string(kAutogradBackend);
  const Backend* b = find_backend(backend);
  if (!b) {
    std::string known;
    for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
    throw_error(ErrorKind::ValueError, "unknown backend '" + backend + "' (registered: " + known + ")");
  }
  std::vector<Value> examples;
  for (const GraphInput& in : inputs_) examples.push_back(in.example);
  if (distributed_ && distributed_->share_compile && !distributed_->kernel_plan_done) {
    SharedCompile sc = make_shared_compile(*distributed_);
    SharedCompileScope scope(&sc);
    return (*b)(graph_, examples);
  }
  SharedCompileScope none(nullptr);
  return (*b)(graph_, examples);
}

}  // namespace kiln::output_graph

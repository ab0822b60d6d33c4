// The backend registry and the eager (reference) backend.
#include "output_graph/backend.h"

#include <map>
#include <mutex>

#include "runtime/base/error.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::output_graph {

using runtime::CallArgs;
using runtime::Kind;
using runtime::Ref;
using runtime::StrObj;
using runtime::TupleObj;

// ---------------------------------------------------------------- registry --

namespace {

struct Registry {
  std::mutex mu;
  // std::map: backend_names() comes out sorted, and a pointer handed out by
  // find_backend stays valid while other names are registered.
  std::map<std::string, Backend> backends;
};

// Built on first use, with `eager` already in it, so a backend registered
// from another translation unit's static initialiser (codegen's `llvm`)
// never runs before the registry exists, whatever the link order.
Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: backends may be looked up during static destruction
    reg->backends.emplace("eager", Backend(eager_backend));
    return reg;
  }();
  return *r;
}

}  // namespace

// Registering a name again replaces its backend (a pointer from
// find_backend then sees the new one).
void register_backend(const std::string& name, Backend backend) {
  if (name.empty()) throw_error(ErrorKind::ValueError, "register_backend: the backend name is empty");
  if (!backend) throw_error(ErrorKind::ValueError, "register_backend: backend '" + name + "' is an empty callable");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.backends[name] = std::move(backend);
}

const Backend* find_backend(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backends.find(name);
  return it == r.backends.end() ? nullptr : &it->second;
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  out.reserve(r.backends.size());
  for (const auto& kv : r.backends) out.push_back(kv.first);
  return out;
}

// ---------------------------------------------------------- shared compile --

namespace {
thread_local SharedCompile* current_shared = nullptr;
}

SharedCompile* current_shared_compile() { return current_shared; }
SharedCompileScope::SharedCompileScope(SharedCompile* sc) : prev_(current_shared) { current_shared = sc; }
SharedCompileScope::~SharedCompileScope() { current_shared = prev_; }

namespace {
std::vector<bool>& autograd_ops() {
  static auto* v = new std::vector<bool>();
  return *v;
}
}  // namespace
void set_autograd_lowerings(std::vector<bool> lowered) { autograd_ops() = std::move(lowered); }
bool autograd_lowers(runtime::OpId op) {
  const auto& v = autograd_ops();
  return size_t(op) < v.size() && v[size_t(op)];
}

// ------------------------------------------------------------------- eager --
//
// Compiling resolves everything that does not depend on the inputs once:
// attributes, method names, keyword-name tuples, and for each node the
// values whose last use it is. A call then walks the steps with one Value
// slot per node; a slot is cleared right after its last user ran, so a
// long chain of ops holds only the live intermediates, not all of them.

namespace {

struct Step {
  const Node* node = nullptr;
  Value callee;               // get_attr: the attribute; call_module: the module
  Ref<StrObj> method;         // call_method: interned method name
  Value kwnames;              // Tuple of interned keyword names, or None when there are none
  int input = -1;             // placeholder: index into the inputs
  std::vector<uint32_t> free_after;  // slots whose last use is this step
};

struct Plan {
  std::shared_ptr<const Graph> graph;  // the steps point into its nodes
  std::vector<Step> steps;
  size_t num_inputs = 0;
};

std::string node_desc(const Node& n) { return std::string(node_op_name(n.op)) + " node '" + n.name + "'"; }

template <class F>
void for_each_node_arg(const Arg& a, F&& f) {
  if (a.kind == Arg::Kind::Node) f(a.node);
  else if (a.kind == Arg::Kind::List)
    for (const Arg& item : a.items) for_each_node_arg(item, f);
}

}  // namespace

Value eval_arg(const Arg& a, const std::vector<Value>& env, const std::vector<int64_t>& syms) {
  switch (a.kind) {
    case Arg::Kind::Node: return env[size_t(a.node->index)];
    case Arg::Kind::Const: return a.value;
    case Arg::Kind::Sym: return Value::integer(a.sym.evaluate(syms));
    case Arg::Kind::List: {
      std::vector<Value> items;
      items.reserve(a.items.size());
      for (const Arg& item : a.items) items.push_back(eval_arg(item, env, syms));
      return runtime::make_tuple(std::move(items));
    }
  }
  return Value();
}

namespace {

std::shared_ptr<const Plan> make_plan(std::shared_ptr<const Graph> graph) {
  if (!graph) throw_error(ErrorKind::ValueError, "eager backend: no graph given");
  auto plan = std::make_shared<Plan>();
  const auto& nodes = graph->nodes();
  if (!graph->output_node()) throw_error(ErrorKind::RuntimeError, "eager backend: the graph has no output node");

  // last_use[i]: the index of the last step that reads node i (its own
  // index when nothing reads it, so an unused result is dropped at once).
  std::vector<size_t> last_use(nodes.size());
  plan->steps.resize(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    Step& s = plan->steps[i];
    s.node = &n;
    last_use[i] = i;
    // Nodes are mutable through Graph::nodes(); check what the builders
    // guarantee rather than trusting it, so a bad graph is an error here
    // and never an out-of-range read at call time.
    auto check = [&](const Node* a) {
      if (!a || a->index < 0 || size_t(a->index) >= i || nodes[size_t(a->index)].get() != a)
        throw_error(ErrorKind::RuntimeError,
                    "eager backend: " + node_desc(n) + " takes an argument that is not an earlier node of the graph");
      last_use[size_t(a->index)] = i;
    };
    for (const Arg& a : n.args) for_each_node_arg(a, check);
    for (const auto& kv : n.kwargs) for_each_node_arg(kv.second, check);
    if (!n.kwargs.empty()) {
      std::vector<Value> names;
      names.reserve(n.kwargs.size());
      for (const auto& kv : n.kwargs) names.push_back(runtime::intern_value(kv.first));
      s.kwnames = runtime::make_tuple(std::move(names));
    }
    switch (n.op) {
      case NodeOp::Placeholder: s.input = int(plan->num_inputs++); break;
      case NodeOp::GetAttr:
      case NodeOp::CallModule: {
        if (n.op == NodeOp::CallModule && n.target_path) {  // carries its module
          s.callee = n.module;
          break;
        }
        const Value* v = graph->attr_of(n);
        if (!v)
          throw_error(ErrorKind::RuntimeError, "eager backend: " + node_desc(n) + " reads '" + n.target_str() +
                                                   "', which is not an attribute of the graph");
        s.callee = *v;
        break;
      }
      case NodeOp::CallFunction:
        if (n.op_id < 0 || n.op_id >= runtime::kNumOps)
          throw_error(ErrorKind::RuntimeError, "eager backend: " + node_desc(n) + " has no valid op id");
        break;
      case NodeOp::CallMethod:
        if (n.args.empty())
          throw_error(ErrorKind::RuntimeError, "eager backend: " + node_desc(n) + " has no object to call it on");
        s.method = runtime::intern(n.target);
        break;
      case NodeOp::Output:
        if (i + 1 != nodes.size())
          throw_error(ErrorKind::RuntimeError, "eager backend: the output node is not the last node");
        break;
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) plan->steps[last_use[i]].free_after.push_back(uint32_t(i));
  plan->graph = std::move(graph);
  return plan;
}

std::vector<Value> run_plan(const Plan& plan, runtime::CallContext& ctx, const std::vector<Value>& inputs) {
  if (inputs.size() != plan.num_inputs)
    throw_error(ErrorKind::RuntimeError, "eager backend: the graph takes " + std::to_string(plan.num_inputs) +
                                             " input" + (plan.num_inputs == 1 ? "" : "s") + ", got " +
                                             std::to_string(inputs.size()));
  std::vector<Value> env(plan.steps.size());
  const std::vector<int64_t> syms = plan.graph->symbols.empty() ? std::vector<int64_t>() : plan.graph->symbol_values(inputs);
  std::vector<Value> argv;  // reused by every step: positional, then keyword values
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& s = plan.steps[i];
    const Node& n = *s.node;
    for (const Arg& a : n.args) argv.push_back(eval_arg(a, env, syms));
    for (const auto& kv : n.kwargs) argv.push_back(eval_arg(kv.second, env, syms));
    const TupleObj* kwnames = s.kwnames.is_none() ? nullptr : s.kwnames.as<TupleObj>();
    switch (n.op) {
      case NodeOp::Placeholder: env[i] = inputs[size_t(s.input)]; break;
      case NodeOp::GetAttr: env[i] = s.callee; break;
      case NodeOp::CallFunction:
        env[i] = runtime::call_op(runtime::OpId(n.op_id), CallArgs{argv.data(), argv.size(), kwnames});
        break;
      case NodeOp::CallModule: env[i] = ctx.call(s.callee, CallArgs{argv.data(), argv.size(), kwnames}); break;
      case NodeOp::CallMethod: {
        Value method = runtime::get_attr(ctx, argv[0], s.method.get());
        env[i] = ctx.call(method, CallArgs{argv.data() + 1, argv.size() - 1, kwnames});
        break;
      }
      case NodeOp::Output: {
        // The results are the positional args; kwargs of an output mean nothing.
        argv.resize(n.args.size());
        return std::vector<Value>(std::make_move_iterator(argv.begin()), std::make_move_iterator(argv.end()));
      }
    }
    // Drop the step's own references too, so a value is gone as soon as its
    // last user has run, not one step later.
    argv.clear();
    for (uint32_t slot : s.free_after) env[slot] = Value();
  }
  // make_plan checked that the last node is the output.
  throw_error(ErrorKind::RuntimeError, "eager backend: the graph ended without an output");
}

}  // namespace

CompiledGraph eager_backend(std::shared_ptr<const Graph> graph, const std::vector<Value>& example_inputs) {
  // The example inputs do not change what eager runs: each call does the
  // graph's ops on the values it is given.
  std::shared_ptr<const Plan> plan = make_plan(std::move(graph));
  return [plan](runtime::CallContext& ctx, const std::vector<Value>& inputs) {
    return run_plan(*plan, ctx, inputs);
  };
}

}  // namespace kiln::output_graph

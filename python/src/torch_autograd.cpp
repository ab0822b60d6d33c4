#include "python/src/torch_autograd.h"

#include <string>
#include <vector>

#include "output_graph/backend.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/foreign.h"
#include "python/src/tensor_identity.h"
#include "python/src/torch_interop.h"
#include "python/src/torch_modules.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::python {

using output_graph::Arg;
using output_graph::Graph;
using output_graph::Node;
using output_graph::NodeOp;
using output_graph::eval_arg;
using runtime::Kind;
using runtime::OpId;
using runtime::Value;

namespace {

// Strong references for the process: torch outlives every graph.
std::vector<PyObject*>& lowerings() {
  static auto* v = new std::vector<PyObject*>(size_t(runtime::kNumOps), nullptr);
  return *v;
}
// kiln's dtype names -> torch's dtypes ("float32" -> torch.float32).
PyObject* torch_dtypes[4] = {nullptr, nullptr, nullptr, nullptr};
const char* const kDtypeNames[4] = {"float32", "float64", "int64", "bool"};

bool grad_mode_hook() { return torch_grad_enabled(); }


std::string node_desc(const Node& n) { return std::string(node_op_name(n.op)) + " node '" + n.name + "'"; }

// The node's op on torch, on the torch objects its arguments stand for.
Value call_torch(PyObject* fn, const Node& n, const std::vector<Value>& argv) {
  try {
    const size_t npos = n.args.size();
    py::tuple pos(npos);
    for (size_t i = 0; i < npos; ++i) pos[i] = torch_argument(argv[i]);
    py::dict kw;
    for (size_t i = 0; i < n.kwargs.size(); ++i) kw[py::str(n.kwargs[i].first)] = torch_argument(argv[npos + i]);
    py::object r = py::handle(fn)(*pos, **kw);
    // A result that requires grad stays torch's (Foreign); any other is a
    // kiln tensor over its memory.
    return to_value_shared(r);
  } catch (py::error_already_set& e) {
    rethrow_as_kiln(e);
  }
}

struct Plan {
  std::shared_ptr<const Graph> graph;
  std::vector<const Node*> nodes;
  std::vector<Value> attrs;        // get_attr: the tensor it reads
  std::vector<Value> kwnames;      // call_function: a tuple of interned names, or None
  std::vector<int> input;          // placeholder: its input's index
};

output_graph::CompiledGraph autograd_backend(std::shared_ptr<const Graph> graph, const std::vector<Value>&) {
  auto plan = std::make_shared<Plan>();
  const auto& nodes = graph->nodes();
  plan->attrs.resize(nodes.size());
  plan->kwnames.resize(nodes.size());
  plan->input.assign(nodes.size(), -1);
  int inputs = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    plan->nodes.push_back(&n);
    switch (n.op) {
      case NodeOp::Placeholder: plan->input[i] = inputs++; break;
      case NodeOp::GetAttr: {
        const Value* v = graph->attr_of(n);
        if (!v)
          throw_error(ErrorKind::RuntimeError, "autograd backend: " + node_desc(n) + " reads '" + n.target_str() +
                                                   "', which is not an attribute of the graph");
        plan->attrs[i] = *v;
        break;
      }
      case NodeOp::CallFunction:
        if (n.op_id < 0 || n.op_id >= runtime::kNumOps)
          throw_error(ErrorKind::RuntimeError, "autograd backend: " + node_desc(n) + " has no valid op id");
        // The tracer breaks before such a node (InstructionTranslator::check_autograd).
        if (n.requires_grad && !lowerings()[size_t(n.op_id)])
          throw_error(ErrorKind::RuntimeError, "autograd backend: kiln's " + n.target + "() has no torch lowering");
        if (!n.kwargs.empty()) {
          std::vector<Value> names;
          for (const auto& kv : n.kwargs) names.push_back(runtime::intern_value(kv.first));
          plan->kwnames[i] = runtime::make_tuple(std::move(names));
        }
        break;
      case NodeOp::CallModule:
      case NodeOp::CallMethod:
        throw_error(ErrorKind::RuntimeError, "autograd backend: " + node_desc(n) +
                                                 " (a leaf module or method call) cannot run through torch's autograd");
      case NodeOp::Output: break;
    }
  }
  plan->graph = std::move(graph);
  return [plan](runtime::CallContext&, const std::vector<Value>& inputs) -> std::vector<Value> {
    const Graph& g = *plan->graph;
    std::vector<Value> env(plan->nodes.size());
    const std::vector<int64_t> syms = g.symbols.empty() ? std::vector<int64_t>() : g.symbol_values(inputs);
    std::vector<Value> argv;
    for (size_t i = 0; i < plan->nodes.size(); ++i) {
      const Node& n = *plan->nodes[i];
      argv.clear();
      for (const Arg& a : n.args) argv.push_back(eval_arg(a, env, syms));
      for (const auto& kv : n.kwargs) argv.push_back(eval_arg(kv.second, env, syms));
      switch (n.op) {
        case NodeOp::Placeholder: env[i] = inputs.at(size_t(plan->input[i])); break;
        case NodeOp::GetAttr: env[i] = plan->attrs[i]; break;
        case NodeOp::CallFunction:
          if (n.requires_grad) {
            env[i] = call_torch(lowerings()[size_t(n.op_id)], n, argv);
          } else {
            // Nothing here records gradients: kiln's kernel (a registry op
            // meeting a torch object goes to torch by the same table).
            const auto* kw = plan->kwnames[i].is_null() ? nullptr : plan->kwnames[i].as<runtime::TupleObj>();
            env[i] = runtime::call_op(OpId(n.op_id), runtime::CallArgs{argv.data(), argv.size(), kw});
          }
          break;
        case NodeOp::Output: argv.resize(n.args.size()); return argv;
        default: break;
      }
    }
    throw_error(ErrorKind::RuntimeError, "autograd backend: the graph ended without an output");
  };
}

}  // namespace

PyObject* torch_lowering(OpId op) {
  const auto& v = lowerings();
  return size_t(op) < v.size() ? v[size_t(op)] : nullptr;
}

py::object torch_argument(const Value& v) {
  if (PyObject* o = foreign_object(v)) return py::reinterpret_borrow<py::object>(o);
  if (v.is(Kind::Tensor)) {
    const runtime::Tensor t = v.as_tensor();
    // A mirrored parameter or buffer: the torch object itself, so gradients
    // reach its .grad and in-place statistics its memory.
    if (PyObject* o = torch_held_object(t.impl())) return py::reinterpret_borrow<py::object>(o);
    if (TensorIdentityScope* scope = TensorIdentityScope::active())
      if (PyObject* o = scope->find(t.impl()); o && is_torch_tensor(o)) return py::reinterpret_borrow<py::object>(o);
    return tensor_to_torch(t);
  }
  if (v.is(Kind::Str))
    for (int i = 0; i < 4; ++i)
      if (torch_dtypes[i] && v.as_str() == kDtypeNames[i]) return py::reinterpret_borrow<py::object>(torch_dtypes[i]);
  if (v.is(Kind::Tuple) || v.is(Kind::List)) {
    const auto& items = v.is(Kind::Tuple) ? v.as<runtime::TupleObj>()->items : v.as<runtime::ListObj>()->items;
    py::list out(items.size());
    for (size_t i = 0; i < items.size(); ++i) out[i] = torch_argument(items[i]);
    if (v.is(Kind::List)) return out;
    return py::tuple(out);
  }
  return to_py(v);
}

void install_torch_autograd(py::handle torch) {
  for (int i = 0; i < 4; ++i) torch_dtypes[i] = py::object(torch.attr(kDtypeNames[i])).release().ptr();
  py::list names, varargs;
  for (int i = 0; i < runtime::kNumOps; ++i) {
    const runtime::OpDef& d = runtime::op_def(OpId(i));
    names.append(py::str(d.name));
    // "*size" collects positionals ("*, stable" only starts keywords).
    const std::string sig = d.signature;
    for (size_t at = sig.find('*'); at != std::string::npos; at = sig.find('*', at + 1))
      if (at + 1 < sig.size() && sig[at + 1] != ',') varargs.append(py::str(d.name));
  }
  py::dict found = py::module_::import("kiln._torch_api").attr("autograd_lowerings")(torch, py::set(names), varargs);
  std::vector<bool> lowered(size_t(runtime::kNumOps), false);
  for (int i = 0; i < runtime::kNumOps; ++i) {
    py::str name(runtime::op_def(OpId(i)).name);
    if (!found.contains(name)) continue;
    lowerings()[size_t(i)] = py::object(found[name]).release().ptr();
    lowered[size_t(i)] = true;
  }
  output_graph::set_autograd_lowerings(std::move(lowered));
  output_graph::register_backend(output_graph::kAutogradBackend, autograd_backend);
  runtime::set_grad_mode_hook(grad_mode_hook);
}

}  // namespace kiln::python

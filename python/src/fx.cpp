// kiln.fx's C++ side: output_graph::Graph and its Nodes bound for Python,
// symbolic_trace (interpreter/symbolic_trace.h) run under a Tracer policy
// that may call back into a Python kiln.fx.Tracer subclass, and the eager
// backend's runner for a GraphModule.
//
// The Python wrappers of nodes keep their graph alive (reference_internal);
// a node argument that is another node comes back as that node's wrapper
// (pybind11 returns the live wrapper of the same pointer, so identity holds
// while kiln.fx.Graph keeps its node list).
#include "python/src/fx.h"

#include <pybind11/stl.h>

#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "interpreter/symbolic_trace.h"
#include "interpreter/vm.h"
#include "output_graph/backend.h"
#include "output_graph/graph.h"
#include "output_graph/tracer_policy.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/functions.h"
#include "python/src/nn.h"
#include "python/src/python_vm.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::python {

using output_graph::Arg;
using output_graph::Graph;
using output_graph::Node;
using output_graph::NodeOp;
using output_graph::TensorMeta;
using runtime::Kind;
using runtime::ModuleObj;
using runtime::Value;

namespace {

Value module_value(const ModuleObj* m) { return Value::object(Kind::Module, const_cast<ModuleObj*>(m)); }

const ModuleObj* module_arg(py::handle obj, const char* what) {
  Value v = module_from_py(obj);
  if (v.is_null() && py::isinstance<Value>(obj)) v = py::cast<Value>(obj);
  if (v.is_null() || !v.is(Kind::Module))
    throw py::type_error(std::string(what) + ": expected a kiln.nn.Module, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  return v.as<ModuleObj>();
}

// The FX Tracer policy seen by the translator. A method the Python class
// does not override is the C++ default, with no Python call; the root is
// never a leaf and never asked about (as in torch.fx, its forward is what is
// traced, a built-in root's too).
class PyTracer final : public output_graph::Tracer {
 public:
  PyTracer(Value root, py::object py, bool leaf_overridden, bool path_overridden)
      : Tracer(std::move(root)), py_(std::move(py)), leaf_(leaf_overridden), path_(path_overridden) {}

  bool is_leaf_module(const ModuleObj* m, const std::string& name) override {
    if (m == root().as<ModuleObj>()) return false;
    if (!leaf_ || !py_) return Tracer::is_leaf_module(m, name);
    py::object r = py_.attr("is_leaf_module")(module_to_py(module_value(m)), name);
    const int truth = PyObject_IsTrue(r.ptr());
    if (truth < 0) throw py::error_already_set();
    return truth != 0;
  }

  std::string path_of_module(const ModuleObj* m) override {
    if (!path_ || !py_) return Tracer::path_of_module(m);
    py::object r = py_.attr("path_of_module")(module_to_py(module_value(m)));
    if (!py::isinstance<py::str>(r))
      throw py::type_error(std::string(py::str(py::type::of(py_).attr("__name__"))) +
                           ".path_of_module must return a str, got " +
                           std::string(py::str(py::type::of(r).attr("__name__"))));
    return r.cast<std::string>();
  }

  bool default_is_leaf_module(const ModuleObj* m, const std::string& name) { return Tracer::is_leaf_module(m, name); }
  std::string default_path_of_module(const ModuleObj* m) { return Tracer::path_of_module(m); }
  // The Python tracer is held only while tracing (the Python side clears it),
  // so a kiln.fx.Tracer and its state never form a cycle the GC cannot see.
  void release() { py_ = py::object(); }

 private:
  py::object py_;
  bool leaf_, path_;
};

// ------------------------------------------------------------------- nodes --

py::object arg_to_py(const Arg& a, py::handle owner) {
  switch (a.kind) {
    case Arg::Kind::Node: return py::cast(a.node, py::return_value_policy::reference_internal, owner);
    case Arg::Kind::Const: return to_py(a.value);
    case Arg::Kind::Sym: return py::str(a.sym.str());  // a size computed from the graph's symbols: "s0*s1"
    case Arg::Kind::List: {
      py::list out;
      for (const Arg& x : a.items) out.append(arg_to_py(x, owner));
      return out;
    }
  }
  return py::none();
}

py::object meta_to_py(const Node& n) {
  py::dict d;
  if (!n.meta) return d;
  d["shape"] = py::tuple(py::cast(n.meta->sizes));
  d["dtype"] = std::string(runtime::dtype_name(n.meta->dtype));
  py::list dyn;
  for (size_t i = 0; i < n.meta->dynamic.size(); ++i)
    if (n.meta->dynamic[i]) dyn.append(i);
  d["dynamic_dims"] = dyn;
  d["str"] = n.meta->str();
  return d;
}

// ------------------------------------------------------- graph over a root --

// A copy of g whose get_attr / call_module targets read `attrs` (target ->
// the tensor or module of another root): GraphModule(root, graph) for a
// root other than the one traced. Names stay the same.
std::shared_ptr<Graph> rebind(const Graph& g, const py::dict& attrs) {
  auto out = std::make_shared<Graph>();
  std::unordered_map<const Node*, Node*> map;
  std::function<Arg(const Arg&)> conv = [&](const Arg& a) -> Arg {
    switch (a.kind) {
      case Arg::Kind::Node: return Arg::of(map.at(a.node));
      case Arg::Kind::Const:
      case Arg::Kind::Sym: return a;
      case Arg::Kind::List: {
        std::vector<Arg> items;
        for (const Arg& x : a.items) items.push_back(conv(x));
        return Arg::list(std::move(items));
      }
    }
    return a;
  };
  auto args_of = [&](const Node& n) {
    std::vector<Arg> args;
    for (const Arg& a : n.args) args.push_back(conv(a));
    return args;
  };
  auto attr_of = [&](const std::string& target) {
    py::str key(target);
    if (!attrs.contains(key)) throw py::attribute_error("GraphModule: the root has no attribute '" + target + "'");
    return to_value(attrs[key]);
  };
  for (const auto& up : g.nodes()) {
    const Node& n = *up;
    const TensorMeta meta = n.meta.value_or(TensorMeta{});
    Node* c = nullptr;
    switch (n.op) {
      case NodeOp::Placeholder: c = out->placeholder(n.name, meta); c->target = n.target; break;
      case NodeOp::GetAttr:
        out->set_attr(n.target_str(), attr_of(n.target_str()));
        c = out->get_attr(n.target_str(), meta);
        break;
      case NodeOp::CallFunction: {
        std::vector<std::pair<std::string, Arg>> kwargs;
        for (const auto& kv : n.kwargs) kwargs.emplace_back(kv.first, conv(kv.second));
        c = out->call_function(runtime::OpId(n.op_id), args_of(n), std::move(kwargs), meta);
        break;
      }
      case NodeOp::CallModule:
        out->set_attr(n.target_str(), attr_of(n.target_str()));
        c = out->call_module(n.target_str(), args_of(n), meta);
        break;
      case NodeOp::CallMethod: c = out->call_method(n.target, args_of(n), meta); break;
      case NodeOp::Output: c = out->output(args_of(n)); break;
    }
    c->name = n.name;
    map.emplace(&n, c);
  }
  for (const Graph::Symbol& s : g.symbols)
    out->symbols.push_back({s.placeholder ? map.at(s.placeholder) : nullptr, s.dim});
  return out;
}

// Placeholders of symbolic_trace are x0, x1, ... (the synthetic frame's
// arguments): name them after forward's parameters where that is free.
void name_placeholders(Graph& g, const std::vector<std::string>& names) {
  std::unordered_set<std::string> used;
  for (const auto& n : g.nodes()) used.insert(n->name);
  for (Node* p : g.placeholders()) {
    if (p->target.size() < 2 || p->target[0] != 'x') continue;
    size_t i = 0;
    try {
      i = std::stoul(p->target.substr(1));
    } catch (...) {
      continue;
    }
    if (i >= names.size() || names[i].empty() || used.count(names[i])) continue;
    used.erase(p->name);
    p->name = p->target = names[i];
    used.insert(p->name);
  }
}

// What the eager backend runs for a GraphModule.
struct FxRunner {
  output_graph::CompiledGraph run;
  size_t num_inputs = 0;
};

}  // namespace

void bind_fx(py::module_& m) {
  py::class_<Node>(m, "FxNode", "A node of a kiln graph (kiln.fx.Node)")
      .def_property_readonly("op", [](const Node& n) { return std::string(output_graph::node_op_name(n.op)); })
      .def_property_readonly("name", [](const Node& n) { return n.name; })
      .def_property_readonly("target_str", [](const Node& n) { return n.target_str(); },
                             "The target as text: the qualified path (get_attr, call_module), the op's name "
                             "(call_function), the method's (call_method), the input's (placeholder).")
      .def_property_readonly("args", [](py::object self) {
        const Node& n = self.cast<const Node&>();
        py::tuple out(n.args.size());
        for (size_t i = 0; i < n.args.size(); ++i) out[i] = arg_to_py(n.args[i], self);
        return out;
      })
      .def_property_readonly("kwargs", [](py::object self) {
        const Node& n = self.cast<const Node&>();
        py::dict out;
        for (const auto& kv : n.kwargs) out[py::str(kv.first)] = arg_to_py(kv.second, self);
        return out;
      })
      .def_property_readonly("users", [](py::object self) {
        const Node& n = self.cast<const Node&>();
        py::dict out;  // torch.fx's users: a dict used as an ordered set
        for (const Node* u : n.users) out[py::cast(u, py::return_value_policy::reference_internal, self)] = py::none();
        return out;
      })
      .def_property_readonly("meta", [](const Node& n) { return meta_to_py(n); },
                             "The result's metadata: shape, dtype, dynamic_dims, str ({} for output).")
      .def_property_readonly("index", [](const Node& n) { return n.index; })
      .def("__repr__", [](const Node& n) { return n.name; });

  py::class_<Graph, std::shared_ptr<Graph>>(m, "FxGraph", "A kiln graph (kiln.fx.Graph wraps it)")
      .def_property_readonly("nodes", [](py::object self) {
        const Graph& g = self.cast<const Graph&>();
        py::list out;
        for (const auto& n : g.nodes()) out.append(py::cast(n.get(), py::return_value_policy::reference_internal, self));
        return out;
      })
      .def("print_tabular", &Graph::print_tabular, "FX's table: opcode | name | target | args | kwargs | meta.")
      .def("code", &Graph::code, "The Python-like view: def forward(self, ...): ...")
      .def("op_count", &Graph::op_count)
      .def("num_placeholders", [](const Graph& g) { return g.placeholders().size(); })
      .def_property_readonly("shape_guards", [](const Graph& g) {
        std::vector<std::string> out;
        for (const auto& sg : g.shape_guards) out.push_back(sg.str());
        return out;
      }, "What the trace assumed of its symbolic sizes (\"s0 <= 128\"): the graph holds where they do.")
      .def("attr", [](const Graph& g, const std::string& target) -> py::object {
        const Value* v = g.attr(target);
        return v ? to_py(*v) : py::none();
      }, "The tensor or module a get_attr / call_module target reads (None when the node carries it).");

  py::class_<PyTracer>(m, "FxTracer", "The C++ Tracer policy behind one kiln.fx.Tracer.trace")
      .def(py::init([](py::handle root, py::object py, bool leaf, bool path) {
             return guarded([&] { return new PyTracer(module_value(module_arg(root, "Tracer")), std::move(py), leaf, path); });
           }),
           py::arg("root"), py::arg("tracer"), py::arg("leaf_overridden"), py::arg("path_overridden"))
      .def("default_is_leaf_module", [](PyTracer& t, py::handle m, const std::string& name) {
        const ModuleObj* mod = module_arg(m, "is_leaf_module");
        return guarded([&] { return t.default_is_leaf_module(mod, name); });
      })
      .def("default_path_of_module", [](PyTracer& t, py::handle m) {
        const ModuleObj* mod = module_arg(m, "path_of_module");
        return guarded([&] { return t.default_path_of_module(mod); });
      })
      .def("release", &PyTracer::release);

  m.def("fx_trace", [](py::handle root, const py::tuple& example_inputs, PyTracer* tracer,
                       const std::vector<std::string>& input_names, bool dynamic) {
    const ModuleObj* r = module_arg(root, "symbolic_trace");
    return guarded([&] {
      sync_python_state();
      std::vector<Value> examples;
      for (py::handle x : example_inputs) examples.push_back(to_value(x));
      interpreter::GraphModule gm =
          interpreter::symbolic_trace(module_value(r), examples, tracer, /*make_runner=*/false, dynamic);
      name_placeholders(*gm.graph, input_names);
      return gm.graph;
    });
  }, py::arg("root"), py::arg("example_inputs"), py::arg("tracer") = nullptr,
     py::arg("input_names") = std::vector<std::string>{}, py::arg("dynamic") = false,
     "symbolic_trace(root, example_inputs) under the tracer's policy (None: the default); returns the graph. "
     "dynamic: every size >= 2 is a symbol.");

  m.def("fx_trace_without_examples", [](py::handle root, size_t num_inputs, PyTracer* tracer,
                                        const std::vector<std::string>& input_names) {
    const ModuleObj* r = module_arg(root, "symbolic_trace");
    return guarded([&] {
      sync_python_state();
      interpreter::GraphModule gm =
          interpreter::symbolic_trace_without_examples(module_value(r), num_inputs, tracer, /*make_runner=*/false);
      name_placeholders(*gm.graph, input_names);
      return gm.graph;
    });
  }, py::arg("root"), py::arg("num_inputs"), py::arg("tracer") = nullptr,
     py::arg("input_names") = std::vector<std::string>{},
     "symbolic_trace(root) without example inputs: num_inputs tensors of symbolic size; returns the graph.");

  m.def("fx_input_mismatch", [](const Graph& g, const py::tuple& inputs) {
    return guarded([&] {
      std::vector<Value> values;
      for (py::handle x : inputs) values.push_back(to_value(x));
      return interpreter::input_mismatch(g, values);
    });
  }, "Why these inputs are not what the graph was traced for ('' when they are).");

  m.def("fx_rebind", [](const Graph& g, const py::dict& attrs) {
    return guarded([&] { return rebind(g, attrs); });
  }, "A copy of the graph whose get_attr / call_module targets read attrs (target -> value).");

  py::class_<FxRunner>(m, "FxRunner", "A graph run by the eager backend")
      .def("__call__", [](const FxRunner& r, py::args args) {
        return guarded([&] {
          if (args.size() != r.num_inputs)
            throw_error(ErrorKind::TypeError, "GraphModule takes " + std::to_string(r.num_inputs) + " tensor input" +
                                                  (r.num_inputs == 1 ? "" : "s") + ", got " +
                                                  std::to_string(args.size()));
          std::vector<Value> inputs;
          for (py::handle a : args) inputs.push_back(to_value(a));
          sync_python_state();
          std::vector<Value> outs = r.run(python_vm(), inputs);
          py::list out;
          for (const Value& v : outs) out.append(to_py(v));
          return out;
        });
      });
  m.def("fx_runner", [](std::shared_ptr<Graph> g) {
    return guarded([&] {
      FxRunner r;
      r.num_inputs = g->placeholders().size();
      r.run = output_graph::eager_backend(std::move(g), {});
      return r;
    });
  });
  m.def("fx_default_is_leaf_module", [](py::handle mod, const std::string& name) {
    const ModuleObj* m = module_arg(mod, "is_leaf_module");
    return guarded([&] {
      output_graph::Tracer t(module_value(m));  // the default reads only the module's class
      return t.is_leaf_module(m, name);
    });
  });
}

}  // namespace kiln::python

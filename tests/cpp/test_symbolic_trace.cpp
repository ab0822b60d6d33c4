// symbolic_trace: the translator under a leaf policy.
#include <catch2/catch.hpp>

#include "interpreter/kiln_api.h"
#include "interpreter/symbolic_trace.h"
#include "interpreter/vm.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::runtime;
using interpreter::symbolic_trace;

namespace {
const char* kModel = R"(
.class Block
.func __init__(self)
    LOAD_GLOBAL Linear
    LOAD_CONST 4
    LOAD_CONST 4
    CALL 2
    LOAD_FAST self
    STORE_ATTR fc
    LOAD_GLOBAL ReLU
    CALL 0
    LOAD_FAST self
    STORE_ATTR act
    LOAD_CONST None
    RETURN_VALUE
.end
.func forward(self, x)
    LOAD_FAST self
    LOAD_ATTR act
    LOAD_FAST self
    LOAD_ATTR fc
    LOAD_FAST x
    CALL 1
    CALL 1
    LOAD_FAST x
    BINARY_OP +
    RETURN_VALUE
.end
.endclass
.class Net
.func __init__(self)
    LOAD_GLOBAL Sequential
    LOAD_GLOBAL Block
    CALL 0
    LOAD_GLOBAL Block
    CALL 0
    CALL 2
    LOAD_FAST self
    STORE_ATTR layers
    LOAD_GLOBAL Linear
    LOAD_CONST 4
    LOAD_CONST 2
    CALL 2
    LOAD_FAST self
    STORE_ATTR head
    LOAD_CONST None
    RETURN_VALUE
.end
.func forward(self, x)
    LOAD_FAST self
    LOAD_ATTR head
    LOAD_FAST self
    LOAD_ATTR layers
    LOAD_FAST x
    CALL 1
    CALL 1
    RETURN_VALUE
.end
.endclass
)";

struct Fixture {
  Program p = assemble(kModel, "model.kbc");
  interpreter::VM vm;
  Value net, x;
  Fixture() {
    manual_seed(5);
    net = vm.call(p.global("Net"), {});
    x = call_op(OpId::randn, {Value::integer(3), Value::integer(4)});
  }
};

std::vector<std::string> targets(const output_graph::Graph& g, output_graph::NodeOp op) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes())
    if (n->op == op) out.push_back(n->target_str());
  return out;
}
}  // namespace

TEST_CASE("symbolic_trace: built-in modules are call_module leaves at their paths", "[symbolic]") {
  Fixture f;
  auto gm = symbolic_trace(f.net, {f.x});
  CHECK(targets(*gm.graph, output_graph::NodeOp::CallModule) ==
        std::vector<std::string>{"layers.0.fc", "layers.0.act", "layers.1.fc", "layers.1.act", "head"});
  CHECK(targets(*gm.graph, output_graph::NodeOp::CallFunction) == std::vector<std::string>{"add", "add"});
  CHECK(gm.code().find("self.layers.0.fc(x0)") != std::string::npos);
  auto out = gm.run(f.vm, {f.x});
  CHECK(repr(out.at(0)) == repr(f.vm.call(f.net, {f.x})));
}

TEST_CASE("symbolic_trace: a policy that makes Linear a non-leaf traces it into its ops", "[symbolic]") {
  struct NoLinearLeaves : output_graph::Tracer {
    using Tracer::Tracer;
    bool is_leaf_module(const ModuleObj* m, const std::string& name) override {
      return m->cls->builtin_kind() != BuiltinModule::Linear && Tracer::is_leaf_module(m, name);
    }
  };
  Fixture f;
  NoLinearLeaves policy(f.net);
  auto gm = symbolic_trace(f.net, {f.x}, &policy);
  CHECK(targets(*gm.graph, output_graph::NodeOp::CallModule) ==
        std::vector<std::string>{"layers.0.act", "layers.1.act"});
  CHECK(targets(*gm.graph, output_graph::NodeOp::GetAttr) ==
        std::vector<std::string>{"layers.0.fc.weight", "layers.0.fc.bias", "layers.1.fc.weight",
                                 "layers.1.fc.bias", "head.weight", "head.bias"});
  CHECK(repr(gm.run(f.vm, {f.x}).at(0)) == repr(f.vm.call(f.net, {f.x})));
}

TEST_CASE("symbolic_trace: path_of_module decides call_module targets; outsiders are an error", "[symbolic]") {
  struct Prefixed : output_graph::Tracer {
    using Tracer::Tracer;
    std::string path_of_module(const ModuleObj* m) override { return "model." + Tracer::path_of_module(m); }
  };
  Fixture f;
  Prefixed policy(f.net);
  auto gm = symbolic_trace(f.net, {f.x}, &policy);
  CHECK(targets(*gm.graph, output_graph::NodeOp::CallModule).back() == "model.head");
  CHECK(repr(gm.run(f.vm, {f.x}).at(0)) == repr(f.vm.call(f.net, {f.x})));

  output_graph::Tracer plain(f.net);
  Value stranger = f.vm.call(*builtins().find("ReLU"), {});
  CHECK_THROWS_WITH(plain.path_of_module(stranger.as<ModuleObj>()), Catch::Contains("not a submodule of the root Net"));
  auto* layers = f.net.as<ModuleObj>()->modules.find("layers")->as<ModuleObj>();
  auto* second_fc = layers->modules.find("1")->as<ModuleObj>()->modules.find("fc")->as<ModuleObj>();
  CHECK(plain.path_of_module(second_fc) == "layers.1.fc");
}

TEST_CASE("symbolic_trace: a module registered twice has named_modules' first path", "[symbolic]") {
  Fixture f;
  auto* net = f.net.as<ModuleObj>();
  auto* layers = net->modules.find("layers")->as<ModuleObj>();
  Value second_fc = *layers->modules.find("1")->as<ModuleObj>()->modules.find("fc");
  // Registered after `layers` on the root: preorder reaches it first as
  // layers.1.fc; `head` and its alias `head2` are siblings: head first.
  module_setattr(f.net, intern("alias"), second_fc);
  module_setattr(f.net, intern("head2"), *net->modules.find("head"));
  output_graph::Tracer plain(f.net);
  size_t checked = 0;
  for (const auto& [name, m] : named_modules(net)) {
    CHECK(plain.path_of_module(m.as<ModuleObj>()) == name);
    ++checked;
  }
  CHECK(checked == 9);  // root, layers, 2 blocks x (block, fc, act), head
  CHECK(plain.path_of_module(second_fc.as<ModuleObj>()) == "layers.1.fc");
  CHECK(plain.path_of_module(net->modules.find("head2")->as<ModuleObj>()) == "head");
}

TEST_CASE("symbolic_trace: data-dependent control flow is an error naming it", "[symbolic]") {
  Program p = assemble(R"(
.class Gate
.func forward(self, x)
    LOAD_FAST x
    LOAD_METHOD sum
    CALL_METHOD 0
    POP_JUMP_IF_FALSE neg
    LOAD_FAST x
    RETURN_VALUE
neg:
    LOAD_FAST x
    UNARY_OP -
    RETURN_VALUE
.end
.endclass
)", "gate.kbc");
  interpreter::VM vm;
  Value gate = vm.call(p.global("Gate"), {});
  CHECK_THROWS_WITH(symbolic_trace(gate, {call_op(OpId::ones, {Value::integer(2)})}),
                    Catch::Contains("branch on the value of a tensor"));
}

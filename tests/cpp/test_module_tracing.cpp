// Tracing modules (issue 4): parameters() and friends answered at trace
// time, lazy modules initialised by their first compiled call, shared
// parameters, hooks under compilation. Results always equal the VM's.
#include <catch2/catch.hpp>

#include "interpreter/kiln_api.h"
#include "interpreter/vm.h"
#include "output_graph/backend.h"
#include "output_graph/graph.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {
Program program(const char* text) { return assemble(text, "modules.kbc"); }
Value randn(int64_t a, int64_t b) { return call_op(OpId::randn, {Value::integer(a), Value::integer(b)}); }
Options quiet() {
  Options o;
  o.stdout_sink = [](std::string_view) {};
  return o;
}

const char* kNet = R"(
.class Net
.func __init__(self)
    LOAD_GLOBAL Linear
    LOAD_CONST 4
    LOAD_CONST 4
    CALL 2
    LOAD_FAST self
    STORE_ATTR a
    LOAD_FAST self
    LOAD_ATTR a
    LOAD_FAST self
    STORE_ATTR b
    LOAD_GLOBAL Sequential
    LOAD_GLOBAL Linear
    LOAD_CONST 4
    LOAD_CONST 2
    CALL 2
    CALL 1
    LOAD_FAST self
    STORE_ATTR seq
    LOAD_CONST None
    RETURN_VALUE
.end
.func forward(self, x)
    LOAD_FAST self
    LOAD_ATTR seq
    LOAD_FAST self
    LOAD_ATTR b
    LOAD_FAST self
    LOAD_ATTR a
    LOAD_FAST x
    CALL 1
    CALL 1
    CALL 1
    RETURN_VALUE
.end
.endclass
.func names(m)
  .locals out p
    BUILD_LIST 0
    STORE_FAST out
    LOAD_FAST m
    LOAD_METHOD named_parameters
    CALL_METHOD 0
    GET_ITER
loop:
    FOR_ITER done
    UNPACK_SEQUENCE 2
    STORE_FAST p
    POP_TOP
    LOAD_FAST out
    LOAD_METHOD append
    LOAD_FAST p
    CALL_METHOD 1
    POP_TOP
    JUMP loop
done:
    LOAD_FAST out
    LOAD_GLOBAL len
    LOAD_FAST m
    LOAD_METHOD modules
    CALL_METHOD 0
    CALL 1
    BUILD_TUPLE 2
    RETURN_VALUE
.end
.func total(m)
  .locals s p
    LOAD_CONST 0.0
    STORE_FAST s
    LOAD_FAST m
    LOAD_METHOD parameters
    CALL_METHOD 0
    GET_ITER
loop:
    FOR_ITER done
    STORE_FAST p
    LOAD_FAST s
    LOAD_FAST p
    LOAD_METHOD sum
    CALL_METHOD 0
    BINARY_OP +
    STORE_FAST s
    JUMP loop
done:
    LOAD_FAST s
    RETURN_VALUE
.end
.func run(m, x)
    LOAD_FAST m
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
)";
}  // namespace

TEST_CASE("parameters() and named_* inside traced code walk the dicts: no break, eager's answer", "[modules]") {
  reset();
  Program p = program(kNet);
  interpreter::VM vm;
  manual_seed(3);
  Value net = vm.call(p.global("Net"), {});
  // a and b are the same Linear: its parameters are listed once.
  CHECK(repr(compile(p.global("names"))({net})) == repr(vm.call(p.global("names"), {net})));
  CHECK(repr(vm.call(p.global("names"), {net})) == "(['a.weight', 'a.bias', 'seq.0.weight', 'seq.0.bias'], 4)");
  ExplainReport r = explain(p.global("total"), {net}, quiet());
  CHECK(r.graph_break_count == 0);
  CHECK(r.graph_count == 1);
  CHECK(repr(r.result) == repr(vm.call(p.global("total"), {net})));
}

TEST_CASE("a shared module's parameters reach the graph once", "[modules]") {
  reset();
  Program p = program(kNet);
  interpreter::VM vm;
  Value net = vm.call(p.global("Net"), {});
  Value x = randn(3, 4);
  ExplainReport r = explain(p.global("run"), {net, x}, quiet());
  REQUIRE(r.graphs.size() == 1);
  // a.weight is read twice (self.a and self.b): one get_attr
  const std::string& g = r.graphs[0];
  size_t first = g.find("m_a_weight = "), second = g.find("m_a_weight = ", first + 1);
  CHECK(first != std::string::npos);
  CHECK(second == std::string::npos);
  CHECK(g.find("m_b_weight") == std::string::npos);
  CHECK(repr(r.result) == repr(vm.call(p.global("run"), {net, x})));
}

TEST_CASE("a lazy module is initialised by its first compiled call, then guarded", "[modules]") {
  reset();
  Program p = program(kNet);
  interpreter::VM vm;
  manual_seed(7);
  Value lazy = vm.call(*builtins().find("LazyLinear"), {Value::integer(3)});
  manual_seed(7);
  Value twin = vm.call(*builtins().find("LazyLinear"), {Value::integer(3)});
  Value x = randn(2, 5);
  CompiledFunction run = compile(p.global("run"));
  manual_seed(11);  // both initialisations draw from the same generator state
  Value compiled = run({lazy, x});
  manual_seed(11);
  Value eager = vm.call(p.global("run"), {twin, x});
  CHECK(repr(compiled) == repr(eager));
  CHECK(lazy.as<ModuleObj>()->cls->builtin == BuiltinModule::Linear);
  CHECK(repr(run({lazy, x})) == repr(eager));  // the cached entry, no second initialisation
  CHECK(cache_entries(p.global("run")) == 1);
}

TEST_CASE("hooks fire in order under compilation; removing one recompiles", "[modules]") {
  reset();
  Program p = program(R"(
.func double_input(m, args)
    LOAD_FAST args
    LOAD_CONST 0
    BINARY_SUBSCR
    LOAD_CONST 2.0
    BINARY_OP *
    BUILD_TUPLE 1
    RETURN_VALUE
.end
.func plus_one(m, args, out)
    LOAD_FAST out
    LOAD_CONST 1.0
    BINARY_OP +
    RETURN_VALUE
.end
.func run(m, x)
    LOAD_FAST m
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
)");
  interpreter::VM vm;
  Value relu = vm.call(*builtins().find("ReLU"), {});
  Value seq = vm.call(*builtins().find("Sequential"), {relu});
  add_forward_pre_hook(seq.as<ModuleObj>(), p.global("double_input"));
  int64_t h = add_forward_hook(seq.as<ModuleObj>(), p.global("plus_one"));
  Value x = call_op(OpId::arange, {Value::integer(-2), Value::integer(3)});
  Value xf = call_op(OpId::to, {x, intern_value("float32")});
  CompiledFunction run = compile(p.global("run"));
  CHECK(repr(run({seq, xf})) == "tensor([1., 1., 1., 3., 5.])");
  CHECK(repr(run({seq, xf})) == repr(vm.call(p.global("run"), {seq, xf})));
  remove_hook(seq.as<ModuleObj>(), h);
  CHECK(repr(run({seq, xf})) == "tensor([0., 0., 0., 2., 4.])");
  CHECK(cache_entries(p.global("run")) == 2);
}

TEST_CASE("train()/eval() are guarded: Dropout follows the mode after compilation", "[modules]") {
  reset();
  Program p = program(kNet);
  interpreter::VM vm;
  Value drop = vm.call(*builtins().find("Dropout"), {Value::floating(0.5)});
  Value x = call_op(OpId::ones, {Value::integer(64)});
  CompiledFunction run = compile(p.global("run"));
  set_training(drop.as<ModuleObj>(), false);
  CHECK(repr(run({drop, x})) == repr(x));  // eval: identity
  set_training(drop.as<ModuleObj>(), true);
  manual_seed(3);
  Value compiled = run({drop, x});
  manual_seed(3);
  Value eager = vm.call(p.global("run"), {drop, x});
  CHECK(repr(compiled) == repr(eager));  // training: the same random mask as eager
  CHECK(repr(compiled) != repr(x));
  CHECK(cache_entries(p.global("run")) == 2);
}

// A chain D blocks deep: Block(depth) holds a Linear `fc` and, above the
// leaf, a child Block; forward = relu(fc(child(x))). Every parameter's
// qualified path is O(D) characters long (child.child. ... .fc.weight).
const char* kChain = R"(
.class Block
.func __init__(self, depth)
    LOAD_GLOBAL Linear
    LOAD_CONST 3
    LOAD_CONST 3
    CALL 2
    LOAD_FAST self
    STORE_ATTR fc
    LOAD_FAST depth
    LOAD_FAST self
    STORE_ATTR depth
    LOAD_FAST depth
    LOAD_CONST 1
    COMPARE_OP >
    POP_JUMP_IF_FALSE leaf
    LOAD_GLOBAL Block
    LOAD_FAST depth
    LOAD_CONST 1
    BINARY_OP -
    CALL 1
    LOAD_FAST self
    STORE_ATTR child
leaf:
    LOAD_CONST None
    RETURN_VALUE
.end
.func forward(self, x)
    LOAD_FAST self
    LOAD_ATTR depth
    LOAD_CONST 1
    COMPARE_OP >
    POP_JUMP_IF_FALSE top
    LOAD_FAST self
    LOAD_ATTR child
    LOAD_FAST x
    CALL 1
    STORE_FAST x
top:
    LOAD_GLOBAL relu
    LOAD_FAST self
    LOAD_ATTR fc
    LOAD_FAST x
    CALL 1
    CALL 1
    RETURN_VALUE
.end
.endclass
.func run(m, x)
    LOAD_FAST m
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
)";

TEST_CASE("a deep module chain's parameter paths are links, not strings (issue 17)", "[modules]") {
  // Counted, not timed: building every parameter's qualified path made a
  // trace O(D^2) in characters. The get_attr nodes carry the path as a link
  // and the tensor itself; names are at most four parts; the full path is
  // spelled only when asked for (a code view, explain), never by tracing,
  // guards or a backend.
  reset();
  Program p = program(kChain);
  interpreter::VM vm;
  const int64_t depth = 400;
  Value net = vm.call(p.global("Block"), {Value::integer(depth)});
  Value x = randn(2, 3);
  std::shared_ptr<const output_graph::Graph> seen;
  output_graph::register_backend("test_capture_graph", [&](std::shared_ptr<const output_graph::Graph> graph,
                                                           const std::vector<Value>& examples) {
    seen = graph;
    return output_graph::eager_backend(graph, examples);
  });
  Options o = quiet();
  o.backend = "test_capture_graph";
  CompiledFunction f = compile(p.global("run"), o);
  Value got = f({net, x});
  CHECK(repr(got) == repr(vm.call(p.global("run"), {net, x})));
  REQUIRE(seen != nullptr);
  const output_graph::Graph& g = *seen;
  size_t attrs = 0, name_chars = 0, spelled = 0;
  const output_graph::Node* deepest = nullptr;
  for (const auto& n : g.nodes()) {
    if (n->op != output_graph::NodeOp::GetAttr) continue;
    ++attrs;
    name_chars += n->name.size();
    CHECK(n->target_path != nullptr);
    spelled += !n->target.empty();
    if (!deepest) deepest = n.get();
  }
  CHECK(attrs == size_t(2 * depth));
  CHECK(spelled == 0);
  CHECK(name_chars <= attrs * 40);
  // The first parameter read is the leaf's: the root is the argument m,
  // then child x (depth-1), then fc.weight.
  REQUIRE(deepest != nullptr);
  std::string want = "m.";
  for (int64_t i = 0; i + 1 < depth; ++i) want += "child.";
  want += "fc.weight";
  CHECK(deepest->target_str() == want);
  CHECK(deepest->name == "child_child_fc_weight");
  REQUIRE(g.attr(want) != nullptr);
  CHECK(g.attr(want)->is(Kind::Tensor));
  CHECK(g.attr_of(*deepest) == g.attr(want));
  // explain's code view spells the paths out, as before.
  ExplainReport r = explain(p.global("run"), {net, x}, quiet());
  REQUIRE(r.graphs.size() == 1);
  CHECK(r.graphs[0].find("child_child_fc_weight = self." + want + "\n") != std::string::npos);
}

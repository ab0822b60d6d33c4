// Tracing modules (issue 4, continued): a Sequential with hooks traced as
// an UnspecializedNNModuleVariable, properties on KBC classes inlined, a
// missing module attribute as a traced AttributeError, and a module
// structure changed inside the trace. Results always equal the VM's.
#include <catch2/catch.hpp>

#include "interpreter/disassembler.h"
#include "interpreter/kiln_api.h"
#include "interpreter/symbolic_trace.h"
#include "interpreter/vm.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {
Program program(const char* text) { return assemble(text, "modules_extra.kbc"); }
Value randn(int64_t a, int64_t b) { return call_op(OpId::randn, {Value::integer(a), Value::integer(b)}); }
Options quiet() {
  Options o;
  o.stdout_sink = [](std::string_view) {};
  return o;
}
Value make(interpreter::VM& vm, const char* builtin, std::vector<Value> args = {}) {
  return vm.call(*builtins().find(builtin), CallArgs{args.data(), args.size(), nullptr});
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Hooks whose order shows in the result: (relu(linear(2x)) + 1) * 3, and a
// hook that records the output on the module it runs on.
const char* kHooks = R"(
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
.func times_three(m, args, out)
    LOAD_FAST out
    LOAD_CONST 3.0
    BINARY_OP *
    RETURN_VALUE
.end
.func remember(m, args, out)
    LOAD_FAST out
    LOAD_FAST m
    STORE_ATTR last
    LOAD_CONST None
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

TEST_CASE("a Sequential with hooks is traced unspecialized: hooks in order, guards on what was read", "[modules]") {
  reset();
  Program p = program(kHooks);
  interpreter::VM vm;
  manual_seed(5);
  Value seq = make(vm, "Sequential", {make(vm, "Linear", {Value::integer(2), Value::integer(3)}), make(vm, "ReLU")});
  auto* m = seq.as<ModuleObj>();
  add_forward_pre_hook(m, p.global("double_input"));
  add_forward_hook(m, p.global("plus_one"));
  int64_t third = add_forward_hook(m, p.global("times_three"));
  Value x = randn(4, 2);

  ExplainReport r = explain(p.global("run"), {seq, x}, quiet());
  CHECK(r.graph_count == 1);
  CHECK(r.graph_break_count == 0);
  CHECK(repr(r.result) == repr(vm.call(p.global("run"), {seq, x})));
  // The graph: the pre-hook, the unrolled children (their parameters are
  // get_attr nodes named by path), then the hooks in registration order.
  REQUIRE(r.graphs.size() == 1);
  const std::string& g = r.graphs[0];
  size_t pre = g.find("mul"), lin = g.find("linear"), relu = g.find("relu"), plus = g.find("add"),
         times = g.find("mul", relu);
  CHECK(pre < lin);
  CHECK(lin < relu);
  CHECK(relu < plus);
  CHECK(plus < times);
  CHECK(times != std::string::npos);
  CHECK(contains(g, "m_0_weight"));
  // Guarded by identity, hooks and children, not by the Sequential's version
  // (its children keep theirs).
  REQUIRE(r.guards.size() == 1);
  const std::string& guards = r.guards[0];
  CHECK(contains(guards, "IdMatch L['m']"));
  CHECK(contains(guards, "ModuleHooks L['m'] pre_hooks == [double_input] hooks == [plus_one, times_three]"));
  CHECK(contains(guards, "ModuleChildren L['m'] children == ('0', '1')"));
  CHECK(!contains(guards, "ModuleVersion L['m'] "));
  CHECK(contains(guards, "ModuleVersion L['m'].0 "));

  // Removing a hook, or adding a child, recompiles; each run equals the VM.
  CompiledFunction run = compile(p.global("run"));
  CHECK(repr(run({seq, x})) == repr(vm.call(p.global("run"), {seq, x})));
  CHECK(cache_entries(p.global("run")) == 1);
  remove_hook(m, third);
  CHECK(repr(run({seq, x})) == repr(vm.call(p.global("run"), {seq, x})));
  CHECK(cache_entries(p.global("run")) == 2);
  add_module(m, "2", make(vm, "GELU"));
  CHECK(repr(run({seq, x})) == repr(vm.call(p.global("run"), {seq, x})));
  CHECK(cache_entries(p.global("run")) == 3);
}

TEST_CASE("an unspecialized Sequential guards a None child slot", "[modules]") {
  reset();
  Program p = program(kHooks);
  interpreter::VM vm;
  Value seq = make(vm, "Sequential", {make(vm, "ReLU")});
  add_module(seq.as<ModuleObj>(), "1", Value::none());
  add_forward_hook(seq.as<ModuleObj>(), p.global("plus_one"));
  Value x = randn(3, 2);
  CompiledFunction run = compile(p.global("run"));
  CHECK(repr(run({seq, x})) == repr(vm.call(p.global("run"), {seq, x})));
  // Same names in the same order, but slot 1 now holds a module.
  module_setattr(seq, intern("1"), make(vm, "GELU"));
  CHECK(repr(run({seq, x})) == repr(vm.call(p.global("run"), {seq, x})));
  CHECK(cache_entries(p.global("run")) == 2);
}

TEST_CASE("a hook that stores on its Sequential does not make every call recompile", "[modules]") {
  reset();
  Program p = program(kHooks);
  interpreter::VM vm;
  manual_seed(6);
  Value seq = make(vm, "Sequential", {make(vm, "Linear", {Value::integer(2), Value::integer(2)})});
  add_forward_hook(seq.as<ModuleObj>(), p.global("remember"));
  add_forward_hook(seq.as<ModuleObj>(), p.global("plus_one"));
  CompiledFunction run = compile(p.global("run"));
  for (int i = 0; i < 3; ++i) {
    Value x = randn(3, 2);
    Value compiled = run({seq, x});
    Value last = *seq.as<ModuleObj>()->attrs.find("last");  // the replayed store
    CHECK(repr(compiled) == repr(vm.call(p.global("run"), {seq, x})));
    CHECK(repr(last) == repr(*seq.as<ModuleObj>()->attrs.find("last")));
  }
  // The store changes the Sequential's version every call; a version guard
  // would have missed every time. Only the first call traced.
  CHECK(cache_entries(p.global("run")) == 1);
}

TEST_CASE("reading a whole unspecialized module's structure specializes it", "[modules]") {
  reset();
  Program p = program(R"(
.func count(m, x)
    LOAD_GLOBAL len
    LOAD_FAST m
    CALL 1
    LOAD_FAST m
    LOAD_FAST x
    CALL 1
    BINARY_OP *
    RETURN_VALUE
.end
.func plus_one(m, args, out)
    LOAD_FAST out
    LOAD_CONST 1.0
    BINARY_OP +
    RETURN_VALUE
.end
)");
  interpreter::VM vm;
  Value seq = make(vm, "Sequential", {make(vm, "ReLU")});
  add_forward_hook(seq.as<ModuleObj>(), p.global("plus_one"));
  Value x = randn(2, 2);
  ExplainReport r = explain(p.global("count"), {seq, x}, quiet());
  CHECK(r.graph_break_count == 0);
  CHECK(repr(r.result) == repr(vm.call(p.global("count"), {seq, x})));
  REQUIRE(r.guards.size() == 1);
  CHECK(contains(r.guards[0], "ModuleVersion L['m'] "));  // len() read the structure
  CompiledFunction run = compile(p.global("count"));
  CHECK(repr(run({seq, x})) == repr(vm.call(p.global("count"), {seq, x})));
  add_module(seq.as<ModuleObj>(), "1", make(vm, "ReLU"));
  CHECK(repr(run({seq, x})) == repr(vm.call(p.global("count"), {seq, x})));
}

// ------------------------------------------------------------ properties --

namespace {
const char* kProperty = R"(
.class Scaled
.func __init__(self)
    LOAD_GLOBAL Linear
    LOAD_CONST 3
    LOAD_CONST 3
    CALL 2
    LOAD_FAST self
    STORE_ATTR fc
    LOAD_CONST 0.5
    LOAD_FAST self
    STORE_ATTR base
    LOAD_CONST None
    RETURN_VALUE
.end
.property
.func scale(self)
    LOAD_FAST self
    LOAD_ATTR base
    LOAD_CONST 4
    BINARY_OP *
    RETURN_VALUE
.end
.property
.func proj(self)
    LOAD_FAST self
    LOAD_ATTR fc
    RETURN_VALUE
.end
.func forward(self, x)
    LOAD_FAST self
    LOAD_METHOD proj
    LOAD_FAST x
    CALL_METHOD 1
    LOAD_FAST self
    LOAD_ATTR scale
    BINARY_OP *
    RETURN_VALUE
.end
.endclass
.func run(m, x)
    LOAD_FAST m
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
.func set_scale(m)
    LOAD_CONST 1.0
    LOAD_FAST m
    STORE_ATTR scale
    LOAD_CONST None
    RETURN_VALUE
.end
)";
}  // namespace

TEST_CASE("a property on a KBC class: the VM calls its getter, it cannot be set or shadowed", "[modules][property]") {
  reset();
  Program p = program(kProperty);
  const Value* scale = p.global("Scaled").as<ClassObj>()->methods.find("scale");
  REQUIRE(scale);
  CHECK(scale->is(Kind::Property));
  CHECK(repr(*scale) == "<property object>");
  interpreter::VM vm;
  Value m = vm.call(p.global("Scaled"), {});
  CHECK(repr(get_attr(vm, m, intern("scale").get())) == "2.0");
  module_setattr(m, intern("base"), Value::floating(0.25));
  CHECK(repr(get_attr(vm, m, intern("scale").get())) == "1.0");  // computed on every read
  CHECK_THROWS_WITH(vm.call(p.global("set_scale"), {m}),
                    Catch::Contains("AttributeError: property 'scale' of 'Scaled' object has no setter"));
  CHECK_THROWS_WITH(register_buffer(m.as<ModuleObj>(), "scale", call_op(OpId::ones, {Value::integer(1)})),
                    Catch::Contains("attribute 'scale' already exists"));
  // The text round trip keeps the property.
  std::string text = interpreter::disassemble(p);
  CHECK(contains(text, ".property\n.func scale(self)"));
  CHECK(interpreter::disassemble(assemble(text, "again.kbc")) == text);
}

TEST_CASE("a property read on a module is inlined: no break, guarded through the getter's reads", "[modules][property]") {
  reset();
  Program p = program(kProperty);
  interpreter::VM vm;
  manual_seed(9);
  Value m = vm.call(p.global("Scaled"), {});
  Value x = randn(2, 3);
  ExplainReport r = explain(p.global("run"), {m, x}, quiet());
  CHECK(r.graph_count == 1);
  CHECK(r.graph_break_count == 0);
  CHECK(repr(r.result) == repr(vm.call(p.global("run"), {m, x})));
  REQUIRE(r.graphs.size() == 1);
  CHECK(contains(r.graphs[0], "linear"));  // proj: the submodule the getter returned
  CHECK(contains(r.graphs[0], "2.0"));     // scale: folded from base * 4
  CompiledFunction run = compile(p.global("run"));
  CHECK(repr(run({m, x})) == repr(vm.call(p.global("run"), {m, x})));
  module_setattr(m, intern("base"), Value::floating(-1.0));  // the getter's input changes
  CHECK(repr(run({m, x})) == repr(vm.call(p.global("run"), {m, x})));
  // Storing to a property breaks where the VM raises, with the same error.
  ExplainReport s = explain(p.global("set_scale"), {m}, quiet());
  REQUIRE(s.breaks.size() == 1);
  CHECK(s.breaks[0].id == "attribute_error");
  CHECK(contains(s.error, "AttributeError: property 'scale' of 'Scaled' object has no setter"));
}

// ------------------------------------------------------ missing attribute --

namespace {
const char* kMissing = R"(
.class Block
.func __init__(self)
    LOAD_GLOBAL Linear
    LOAD_CONST 2
    LOAD_CONST 2
    CALL 2
    LOAD_FAST self
    STORE_ATTR fc
    LOAD_CONST None
    RETURN_VALUE
.end
.func forward(self, x)
    LOAD_FAST self
    LOAD_ATTR fc
    LOAD_FAST x
    CALL 1
    LOAD_FAST self
    LOAD_ATTR gain
    BINARY_OP *
    RETURN_VALUE
.end
.endclass
.class Net
.func __init__(self)
    LOAD_GLOBAL ModuleList
    LOAD_GLOBAL Block
    CALL 0
    LOAD_GLOBAL Block
    CALL 0
    BUILD_LIST 2
    CALL 1
    LOAD_FAST self
    STORE_ATTR layers
    LOAD_CONST 2.0
    LOAD_FAST self
    LOAD_ATTR layers
    LOAD_CONST 0
    BINARY_SUBSCR
    STORE_ATTR gain
    LOAD_CONST None
    RETURN_VALUE
.end
.func forward(self, x)
  .locals layer
    LOAD_FAST self
    LOAD_ATTR layers
    GET_ITER
loop:
    FOR_ITER done
    STORE_FAST layer
    LOAD_FAST layer
    LOAD_FAST x
    CALL 1
    STORE_FAST x
    JUMP loop
done:
    LOAD_FAST x
    RETURN_VALUE
.end
.endclass
.func direct(m, x)
    LOAD_FAST m
    LOAD_ATTR layers
    LOAD_CONST 1
    BINARY_SUBSCR
    LOAD_ATTR fc
    LOAD_FAST x
    CALL 1
    LOAD_FAST m
    LOAD_ATTR layers
    LOAD_CONST 1
    BINARY_SUBSCR
    LOAD_ATTR gain
    BINARY_OP *
    RETURN_VALUE
.end
.func method(m)
    LOAD_FAST m
    LOAD_METHOD nope
    CALL_METHOD 0
    RETURN_VALUE
.end
)";
}  // namespace

TEST_CASE("a missing module attribute is a traced AttributeError naming the path and class", "[modules]") {
  reset();
  Program p = program(kMissing);
  interpreter::VM vm;
  Value net = vm.call(p.global("Net"), {});
  Value x = randn(3, 2);
  const std::string vm_error = "AttributeError: 'Block' object has no attribute 'gain'";
  CHECK_THROWS_WITH(vm.call(p.global("direct"), {net, x}), Catch::Contains(vm_error));

  // The trace breaks at the read, with the module's path and class; the
  // graph before it runs; the program sees the VM's own AttributeError.
  ExplainReport r = explain(p.global("direct"), {net, x}, quiet());
  CHECK(r.graph_count == 1);
  REQUIRE(r.breaks.size() == 1);
  CHECK(r.breaks[0].id == "attribute_error");
  CHECK(r.breaks[0].reason == "AttributeError: 'Block' object (at m.layers.1) has no attribute 'gain'");
  CHECK(contains(r.error, vm_error));
  CHECK_THROWS_WITH(compile(p.global("direct"))({net, x}), Catch::Contains(vm_error));

  // A missing method breaks with the same reason (not at the call as an
  // unsupported one), and the VM raises.
  ExplainReport mr = explain(p.global("method"), {net}, quiet());
  REQUIRE(mr.breaks.size() == 1);
  CHECK(mr.breaks[0].id == "attribute_error");
  CHECK(mr.breaks[0].reason == "AttributeError: 'Net' object (at m) has no attribute 'nope'");
  CHECK(contains(mr.error, "AttributeError: 'Net' object has no attribute 'nope'"));

  // Deep inside the tree (and from the root `self` of symbolic tracing) the
  // path is the one from the root.
  CHECK_THROWS_WITH(interpreter::symbolic_trace(net, {x}),
                    Catch::Contains("'Block' object (at layers.1) has no attribute 'gain'"));
}

// ------------------------------------- structure changed inside the trace --

TEST_CASE("a child stored on a Sequential in the trace is not unrolled away", "[modules]") {
  reset();
  Program p = program(R"(
.func f(seq, r, x)
    LOAD_FAST r
    LOAD_FAST seq
    STORE_ATTR extra
    LOAD_FAST seq
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
.func params(seq, r)
  .locals n
    LOAD_FAST r
    LOAD_FAST seq
    STORE_ATTR extra
    LOAD_GLOBAL len
    LOAD_GLOBAL list
    LOAD_FAST seq
    LOAD_METHOD parameters
    CALL_METHOD 0
    CALL 1
    CALL 1
    RETURN_VALUE
.end
)");
  auto fresh = [&](interpreter::VM& vm) {
    manual_seed(4);
    return std::vector<Value>{make(vm, "Sequential", {make(vm, "Linear", {Value::integer(2), Value::integer(2)})}),
                              make(vm, "Linear", {Value::integer(2), Value::integer(2)}), randn(3, 2)};
  };
  interpreter::VM vm;
  std::vector<Value> a = fresh(vm), b = fresh(vm);
  Value eager = vm.call(p.global("f"), CallArgs{a.data(), a.size(), nullptr});
  CHECK(repr(compile(p.global("f"))(b)) == repr(eager));  // three children ran, not two
  std::vector<Value> c = fresh(vm), d = fresh(vm);
  Value n = vm.call(p.global("params"), {c[0], c[1]});
  CHECK(repr(n) == "4");
  CHECK(repr(compile(p.global("params"))({d[0], d[1]})) == "4");
}

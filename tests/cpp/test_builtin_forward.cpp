// Built-in module forwards are written once (runtime/nn/builtin_forward.h):
// for every row of kBuiltinForwards that has a forward, the compiled call
// (one graph, no break, the row's op in it) returns what the eager call
// returns, in eval and in training mode.
#include <catch2/catch.hpp>

#include <functional>

#include "interpreter/kiln_api.h"
#include "interpreter/vm.h"
#include "runtime/nn/builtin_forward.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {

const char* kRun = R"(
.func run(m, x)
    LOAD_FAST m
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end
)";

Value I(int64_t v) { return Value::integer(v); }

struct Case {
  std::function<Value(interpreter::VM&)> make;  // a fresh module
  Value input;
  std::string op_in_graph;  // a node the traced forward must emit
};

// One case per built-in kind with a forward; a kind missing here fails the
// test below (a new row needs a case).
bool case_for(BuiltinModule kind, Case& c) {
  auto make = [](const char* cls, std::vector<Value> args) -> std::function<Value(interpreter::VM&)> {
    return [cls, args](interpreter::VM& vm) {
      return vm.call(*builtins().find(cls), CallArgs{args.data(), args.size(), nullptr});
    };
  };
  const Value x = call_op(OpId::randn, {I(3), I(4)});
  switch (kind) {
    case BuiltinModule::None:
    case BuiltinModule::ModuleList:
    case BuiltinModule::ModuleDict: return false;  // no forward
    case BuiltinModule::Linear: c = {make("Linear", {I(4), I(5)}), x, "linear"}; return true;
    case BuiltinModule::ReLU: c = {make("ReLU", {}), x, "relu"}; return true;
    case BuiltinModule::GELU: c = {make("GELU", {Value::str("tanh")}), x, "gelu"}; return true;
    case BuiltinModule::LayerNorm: c = {make("LayerNorm", {I(4)}), x, "layer_norm"}; return true;
    case BuiltinModule::Embedding:
      c = {make("Embedding", {I(10), I(4)}), call_op(OpId::arange, {I(1), I(8), I(3)}), "embedding"};
      return true;
    case BuiltinModule::Dropout: c = {make("Dropout", {Value::floating(0.25)}), x, "rand"}; return true;
    case BuiltinModule::Sequential:
      c = {std::function<Value(interpreter::VM&)>([](interpreter::VM& vm) {
             Value lin = vm.call(*builtins().find("Linear"), {I(4), I(2)});
             Value act = vm.call(*builtins().find("ReLU"), {});
             return vm.call(*builtins().find("Sequential"), {lin, act});
           }),
           x, "relu"};
      return true;
    case BuiltinModule::LazyLinear: c = {make("LazyLinear", {I(2)}), x, "linear"}; return true;
  }
  return false;
}

}  // namespace

TEST_CASE("every built-in module's compiled call equals its eager call: one graph, no break", "[modules]") {
  Program p = assemble(kRun, "builtin_forward.kbc");
  interpreter::VM vm;
  for (const ForwardRow& row : kBuiltinForwards) {
    Case c;
    const bool has_case = case_for(row.kind, c);
    CHECK(has_case == (row.how != ForwardHow::None));
    if (!has_case) continue;
    for (bool training : {false, true}) {
      INFO("kind " << int(row.kind) << (training ? " (training)" : " (eval)"));
      reset();
      // Two equal modules (a lazy one is changed by its first call), the
      // same random draws for both calls.
      manual_seed(5);
      Value eager_module = c.make(vm);
      manual_seed(5);
      Value traced_module = c.make(vm);
      set_training(eager_module.as<ModuleObj>(), training);
      set_training(traced_module.as<ModuleObj>(), training);
      manual_seed(9);
      Value eager = vm.call(p.global("run"), {eager_module, c.input});
      manual_seed(9);
      ExplainReport r = explain(p.global("run"), {traced_module, c.input});
      REQUIRE(r.error.empty());
      INFO(r.str());
      CHECK(repr(r.result) == repr(eager));
      CHECK(r.graph_break_count == 0);
      // Dropout in eval is the identity: no op, so no graph at all.
      const bool identity = row.how == ForwardHow::Dropout && !training;
      CHECK(r.graph_count == (identity ? 0 : 1));
      if (!identity) {
        REQUIRE(r.graphs.size() == 1);
        CHECK(r.graphs[0].find(c.op_in_graph) != std::string::npos);
      }
    }
  }
}

TEST_CASE("an Embedding's padding_idx reaches the op in both calls", "[modules]") {
  // A program may set padding_idx (torch's Embedding has it): the row passes
  // it when set; the forward's value does not change (it is about gradients).
  Program p = assemble(kRun, "builtin_forward.kbc");
  interpreter::VM vm;
  reset();
  Value emb = vm.call(*builtins().find("Embedding"), {I(6), I(3)});
  Value idx = call_op(OpId::arange, {I(0), I(6), I(2)});
  Value plain = vm.call(p.global("run"), {emb, idx});
  module_setattr(emb, intern("padding_idx"), I(0));
  Value eager = vm.call(p.global("run"), {emb, idx});
  CHECK(repr(eager) == repr(plain));
  ExplainReport r = explain(p.global("run"), {emb, idx});
  REQUIRE(r.error.empty());
  CHECK(repr(r.result) == repr(eager));
  REQUIRE(r.graphs.size() == 1);
  INFO(r.graphs[0]);
  CHECK(r.graphs[0].find("kiln.embedding(x, m_weight, 0)") != std::string::npos);
}

TEST_CASE("a Dropout whose p is not a number fails clearly, eager and traced", "[modules]") {
  Program p = assemble(kRun, "builtin_forward.kbc");
  interpreter::VM vm;
  reset();
  Value drop = vm.call(*builtins().find("Dropout"), {Value::floating(0.5)});
  drop.as<ModuleObj>()->attrs.set("p", Value::str("half"));
  Value x = call_op(OpId::ones, {I(4)});
  CHECK_THROWS_WITH(vm.call(p.global("run"), {drop, x}), Catch::Contains("Dropout: its attribute 'p' is not a number"));
  ExplainReport r = explain(p.global("run"), {drop, x});
  CHECK(r.error.find("Dropout: its attribute 'p' is not a number") != std::string::npos);
  CHECK(r.graph_break_count >= 1);
}

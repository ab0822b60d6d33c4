// The Module object model from C++: lookup order, setattr routing, version
// counters, traversal, state_dict. (Calling modules from KBC — hooks, lazy
// init, Sequential — is in the VM corpus.)
#include <catch2/catch.hpp>

#include "interpreter/vm.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {

Value tensor_of(std::vector<float> v) {
  return Value::tensor(Tensor::from_vector<float>(v, {int64_t(v.size())}));
}
Value param_of(std::vector<float> v) { return Value::tensor(tensor_of(std::move(v)).as_tensor().as_parameter()); }
Value new_mod(const char* cls = "Net") { return Value::object(Kind::Module, new_module(make_class(cls))); }
ModuleObj* M(const Value& v) { return v.as<ModuleObj>(); }
Value make(BuiltinModule kind, std::vector<Value> args) {
  interpreter::VM vm;
  return instantiate(vm, builtin_module_class(kind), CallArgs{args.data(), args.size(), nullptr});
}
std::vector<std::string> names(const std::vector<std::pair<std::string, Value>>& items) {
  std::vector<std::string> out;
  for (const auto& [n, v] : items) out.push_back(n);
  return out;
}

}  // namespace

TEST_CASE("module lookup order: attrs, class, _parameters, _buffers, _modules, __getattr__", "[module]") {
  // Python's order over torch's Module: the instance __dict__, the class,
  // then Module.__getattr__'s _parameters, _buffers, _modules.
  interpreter::VM vm;
  Value m = new_mod();
  auto key = intern("x");
  // setattr keeps a name in one dict; write the dicts directly to see the order.
  M(m)->modules.set(key, new_mod("Child"));
  CHECK(type_name(module_getattr(vm, m, key.get())) == "Child");
  M(m)->buffers.set(key, tensor_of({3}));
  CHECK(module_getattr(vm, m, key.get()).as_tensor().item() == 3);
  M(m)->params.set(key, param_of({1}));
  CHECK(module_getattr(vm, m, key.get()).as_tensor().item() == 1);
  M(m)->attrs.set(key, Value::integer(4));
  CHECK(repr(module_getattr(vm, m, key.get())) == "4");

  // A class entry comes after the instance __dict__ but before the dicts
  // Module.__getattr__ reads: a method named like a submodule wins.
  M(m)->cls->methods.set("y", Value::integer(9));
  CHECK(repr(module_getattr(vm, m, intern("y").get())) == "9");
  M(m)->modules.set(intern("y"), new_mod("Child"));
  CHECK(repr(module_getattr(vm, m, intern("y").get())) == "9");
  M(m)->attrs.set(intern("y"), Value::integer(10));
  CHECK(repr(module_getattr(vm, m, intern("y").get())) == "10");
  CHECK(module_getattr(vm, m, intern("parameters").get()).is(Kind::BoundMethod));

  try {
    module_getattr(vm, m, intern("nope").get());
    FAIL("expected AttributeError");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::AttributeError);
    CHECK(std::string(e.what()) == "AttributeError: 'Net' object has no attribute 'nope'");
  }
}

TEST_CASE("module setattr routes by value and keeps one home per name", "[module]") {
  Value m = new_mod();
  module_setattr(m, intern("w"), param_of({1, 2}));
  CHECK(M(m)->params.contains(intern("w").get()));
  module_setattr(m, intern("child"), new_mod("Child"));
  CHECK(M(m)->modules.contains(intern("child").get()));
  register_buffer(M(m), "buf", tensor_of({0}));
  module_setattr(m, intern("buf"), tensor_of({5}));  // a tensor to a buffer name stays a buffer
  CHECK(M(m)->buffers.find("buf")->as_tensor().item() == 5);
  module_setattr(m, intern("plain"), tensor_of({1}));  // a non-Parameter tensor is a plain attribute
  CHECK(M(m)->attrs.contains(intern("plain").get()));
  CHECK_THROWS_WITH(module_setattr(m, intern("w"), tensor_of({1})), Catch::Contains("Parameter or None expected"));
  CHECK_THROWS_WITH(module_setattr(m, intern("child"), Value::integer(1)), Catch::Contains("Module or None expected"));
  CHECK_THROWS_WITH(module_setattr(m, intern("buf"), Value::integer(1)), Catch::Contains("Tensor or None expected"));
  // Moving a name to another kind removes it from the old dict.
  module_setattr(m, intern("plain"), new_mod("Child"));
  CHECK_FALSE(M(m)->attrs.contains(intern("plain").get()));
  CHECK(M(m)->modules.contains(intern("plain").get()));
}

TEST_CASE("every structural change takes a fresh, never-repeated version", "[module]") {
  Value m = new_mod();
  std::vector<uint64_t> seen{M(m)->version};
  auto changed = [&] {
    uint64_t v = M(m)->version;
    for (uint64_t old : seen) CHECK(v != old);
    seen.push_back(v);
  };
  module_setattr(m, intern("a"), Value::integer(1));
  changed();
  module_setattr(m, intern("a"), Value::integer(2));
  changed();
  register_parameter(M(m), "p", param_of({1}));
  changed();
  register_buffer(M(m), "b", tensor_of({1}));
  changed();
  add_module(M(m), "c", new_mod("Child"));
  changed();
  module_delattr(m, intern("a").get());
  changed();
  int64_t id = add_forward_hook(M(m), Value::none());
  changed();
  CHECK(remove_hook(M(m), id));
  changed();
  CHECK_FALSE(remove_hook(M(m), id));
  CHECK(M(m)->version == seen.back());  // a no-op is not a change
  set_training(M(m), false);
  changed();
  // Another module never reuses a version either.
  Value other = new_mod();
  for (uint64_t old : seen) CHECK(M(other)->version != old);
}

TEST_CASE("parameters walk in registration order, deduplicated, skipping None", "[module]") {
  Value root = new_mod("Root");
  Value shared = make(BuiltinModule::Linear, {Value::integer(2), Value::integer(3)});
  add_module(M(root), "a", shared);
  add_module(M(root), "b", shared);  // the same module twice
  add_module(M(root), "none", Value::none());
  Value c = new_mod("C");
  register_parameter(M(c), "w", param_of({1}));
  register_parameter(M(c), "missing", Value::none());
  register_parameter(M(c), "alias", *M(c)->params.find("w"));  // the same tensor under two names
  add_module(M(root), "c", c);
  CHECK(names(named_parameters(M(root))) == std::vector<std::string>{"a.weight", "a.bias", "c.w"});
  CHECK(names(named_parameters(M(root), false)).empty());
  CHECK(names(named_modules(M(root))) == std::vector<std::string>{"", "a", "c"});
  CHECK(names(named_children(M(root))) == std::vector<std::string>{"a", "c"});
  // state_dict lists shared tensors under every name, as torch does.
  std::vector<std::string> keys;
  Value sd = state_dict(M(root));
  for (const auto& [k, v] : sd.as<DictObj>()->entries) keys.push_back(k.as_str());
  CHECK(keys == std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias", "c.w", "c.alias"});
}

TEST_CASE("load_state_dict copies values and reports every problem before touching anything", "[module]") {
  manual_seed(1);
  Value a = make(BuiltinModule::Linear, {Value::integer(2), Value::integer(2)});
  manual_seed(2);
  Value b = make(BuiltinModule::Linear, {Value::integer(2), Value::integer(2)});
  Tensor wa = M(a)->params.find("weight")->as_tensor(), wb = M(b)->params.find("weight")->as_tensor();
  CHECK(wa.item_as_double({0, 0}) != wb.item_as_double({0, 0}));
  load_state_dict(M(b), state_dict(M(a)));
  CHECK(wa.item_as_double({0, 0}) == wb.item_as_double({0, 0}));
  CHECK(M(b)->params.find("weight")->as_tensor().same(wb));  // copied into, not replaced

  Value sd = state_dict(M(a));
  sd.as<DictObj>()->erase(Value::str("bias"));
  sd.as<DictObj>()->set(Value::str("extra"), tensor_of({1}));
  try {
    load_state_dict(M(b), sd);
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("Missing key(s) in state_dict: 'bias'") != std::string::npos);
    CHECK(msg.find("Unexpected key(s) in state_dict: 'extra'") != std::string::npos);
  }
}

TEST_CASE("train/eval reach every submodule; Dropout is the identity in eval", "[module]") {
  Value drop = make(BuiltinModule::Dropout, {Value::floating(0.5)});
  Value seq = make(BuiltinModule::Sequential, {drop});
  interpreter::VM vm;
  Value x = call_op(OpId::ones, {Value::integer(64)});
  Value y = vm.call(seq, {x});
  CHECK(call_op(OpId::sum, {call_op(OpId::eq, {y, Value::floating(0.0)})}).as_tensor().item() > 0);
  set_training(M(seq), false);
  CHECK_FALSE(M(drop)->training);
  Value z = vm.call(seq, {x});
  CHECK(call_op(OpId::sum, {z}).as_tensor().item() == 64);
}

TEST_CASE("module repr is torch's nested form", "[module]") {
  Value seq = make(BuiltinModule::Sequential, {make(BuiltinModule::Linear, {Value::integer(4), Value::integer(8)}),
                                               make(BuiltinModule::GELU, {})});
  CHECK(repr(seq) ==
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=8, bias=True)\n"
        "  (1): GELU(approximate='none')\n"
        ")");
}

// The Graph IR built by hand: naming, users, printers, builder errors; the
// eager backend against direct op calls (bit for bit), its errors and its
// memory behaviour; the backend registry.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>

#include "interpreter/vm.h"
#include "ops_test_util.h"
#include "output_graph/backend.h"
#include "output_graph/graph.h"
#include "output_graph/output_graph.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::output_graph;
using kiln::test::check_error;
using runtime::BuiltinModule;
using runtime::CallArgs;
using runtime::DType;
using runtime::Kind;
using runtime::OpId;
using runtime::Shape;
using runtime::Tensor;

namespace {

TensorMeta meta(Shape sizes, DType dtype = DType::Float32) {
  TensorMeta m;
  m.strides = runtime::contiguous_strides(sizes);
  m.sizes = std::move(sizes);
  m.dtype = dtype;
  return m;
}

Arg N(Node* n) { return Arg::of(n); }
Arg C(Value v) { return Arg::constant(std::move(v)); }
Value I(int64_t i) { return Value::integer(i); }

std::vector<std::string> names_of(const std::vector<Node*>& nodes) {
  std::vector<std::string> out;
  for (const Node* n : nodes) out.push_back(n->name);
  return out;
}

Tensor ft(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector<float>(v, s); }

// Same dtype, same sizes, same bytes in row-major order.
void check_bitwise_equal(const Value& got, const Value& want) {
  REQUIRE(got.is(Kind::Tensor));
  REQUIRE(want.is(Kind::Tensor));
  const Tensor a = got.as_tensor().contiguous(), b = want.as_tensor().contiguous();
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.sizes() == b.sizes());
  const size_t nbytes = size_t(a.numel()) * runtime::itemsize(a.dtype());
  CHECK(std::memcmp(a.raw_data(), b.raw_data(), nbytes) == 0);
}


Value make_module(runtime::CallContext& ctx, BuiltinModule kind, std::vector<Value> args) {
  return runtime::instantiate(ctx, runtime::builtin_module_class(kind), CallArgs{args.data(), args.size(), nullptr});
}

// The graph of the printer tests: every node kind, a kwarg, a List arg.
struct SampleGraph {
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  Node *x, *y, *w, *linear, *add, *act, *size, *cat, *out;
  SampleGraph() {
    x = g->placeholder("x", meta({2, 3}));
    y = g->placeholder("y", meta({2, 4}));
    w = g->get_attr("fc.weight", meta({4, 3}));
    linear = g->call_function(OpId::linear, {N(x), N(w), C(Value::none())}, {}, meta({2, 4}));
    add = g->call_function(OpId::add, {N(linear), N(y)}, {}, meta({2, 4}));
    act = g->call_module("act", {N(add)}, meta({2, 4}));
    size = g->call_method("size", {N(add), C(I(1))}, meta({}, DType::Int64));
    cat = g->call_function(OpId::cat, {Arg::list({N(x), N(x)})}, {{"dim", C(I(0))}}, meta({4, 3}));
    out = g->output({N(act), N(add), N(size), N(cat)});
  }
};

}  // namespace

TEST_CASE("TensorMeta::str prints dtype and sizes, dynamic dims as s<dim>", "[graph]") {
  CHECK(meta({2, 3}).str() == "f32[2, 3]");
  CHECK(meta({}, DType::Int64).str() == "i64[]");
  CHECK(meta({5}, DType::Float64).str() == "f64[5]");
  CHECK(meta({1, 1}, DType::Bool).str() == "b8[1, 1]");
  TensorMeta d = meta({8, 3, 4});
  d.dynamic = {true, false, true};
  CHECK(d.str() == "f32[s0, 3, s2]");
}

TEST_CASE("graph builders keep order, users and op_count", "[graph]") {
  SampleGraph s;
  const Graph& g = *s.g;
  REQUIRE(g.nodes().size() == 9);
  for (size_t i = 0; i < g.nodes().size(); ++i) CHECK(g.nodes()[i]->index == int(i));
  CHECK(names_of(g.placeholders()) == std::vector<std::string>{"x", "y"});
  CHECK(g.output_node() == s.out);
  CHECK(g.op_count() == 5);
  CHECK(s.w->target == "fc.weight");
  CHECK(s.linear->target == "linear");
  CHECK(s.linear->op_id == int(OpId::linear));
  CHECK(s.size->target == "size");

  // x is read by linear and (twice, inside a list) by cat: two users.
  CHECK(s.x->users == std::vector<Node*>{s.linear, s.cat});
  CHECK(s.y->users == std::vector<Node*>{s.add});
  CHECK(s.w->users == std::vector<Node*>{s.linear});
  CHECK(s.add->users == std::vector<Node*>{s.act, s.size, s.out});
  CHECK(s.cat->users == std::vector<Node*>{s.out});
  CHECK(s.out->users.empty());
  CHECK(!s.out->meta.has_value());

  // A node reached only through a keyword argument is a user too.
  Graph k;
  Node* a = k.placeholder("a", meta({3}));
  Node* b = k.placeholder("b", meta({3}));
  Node* c = k.call_function(OpId::add, {N(a)}, {{"other", N(b)}}, meta({3}));
  CHECK(b->users == std::vector<Node*>{c});
  CHECK(k.op_count() == 1);
  CHECK(k.output_node() == nullptr);
}

TEST_CASE("print_tabular: FX layout, one aligned row per node", "[graph]") {
  SampleGraph s;
  CHECK(s.g->print_tabular() ==
        "opcode        | name      | target      | args                  | kwargs     | meta\n"
        "--------------+-----------+-------------+-----------------------+------------+----------\n"
        "placeholder   | x         | x           | ()                    | {}         | f32[2, 3]\n"
        "placeholder   | y         | y           | ()                    | {}         | f32[2, 4]\n"
        "get_attr      | fc_weight | fc.weight   | ()                    | {}         | f32[4, 3]\n"
        "call_function | linear    | kiln.linear | (x, fc_weight, None)  | {}         | f32[2, 4]\n"
        "call_function | add       | kiln.add    | (linear, y)           | {}         | f32[2, 4]\n"
        "call_module   | act       | act         | (add,)                | {}         | f32[2, 4]\n"
        "call_method   | size      | size        | (add, 1)              | {}         | i64[]\n"
        "call_function | cat       | kiln.cat    | ([x, x],)             | {'dim': 0} | f32[4, 3]\n"
        "output        | output    | output      | (act, add, size, cat) | {}\n");
}

TEST_CASE("code(): a Python-like forward", "[graph]") {
  SampleGraph s;
  CHECK(s.g->code() ==
        "def forward(self, x, y):\n"
        "    fc_weight = self.fc.weight\n"
        "    linear = kiln.linear(x, fc_weight, None)\n"
        "    add = kiln.add(linear, y)\n"
        "    act = self.act(add)\n"
        "    size = add.size(1)\n"
        "    cat = kiln.cat([x, x], dim=0)\n"
        "    return (act, add, size, cat)\n");

  // Constants print by repr; a single result is a one-element tuple; a
  // method may take keywords.
  Graph g;
  Node* x = g.placeholder("x", meta({2, 3}));
  Node* m = g.call_method("sum", {N(x)}, meta({3}));
  m->kwargs.push_back({"dim", C(I(0))});  // call_method has no kwargs builder; the printer still shows them
  Node* p = g.call_function(OpId::pow, {N(m), C(Value::floating(2.0))}, {}, meta({3}));
  g.output({N(p)});
  CHECK(g.code() ==
        "def forward(self, x):\n"
        "    sum = x.sum(dim=0)\n"
        "    pow = kiln.pow(sum, 2.0)\n"
        "    return (pow,)\n");

  Graph empty;
  CHECK(empty.code() == "def forward(self):\n    pass\n");
}

TEST_CASE("node names are unique identifiers", "[graph]") {
  Graph g;
  Node* p = g.placeholder("add", meta({2}));
  Node* a1 = g.call_function(OpId::add, {N(p), C(I(1))}, {}, meta({2}));
  Node* a2 = g.call_function(OpId::add, {N(a1), C(I(1))}, {}, meta({2}));
  CHECK(p->name == "add");
  CHECK(a1->name == "add_1");
  CHECK(a2->name == "add_2");
  // A generated name is taken: a later input of that name gets its own suffix.
  CHECK(g.placeholder("add_1", meta({2}))->name == "add_1_1");
  // Sanitized to identifiers; never a keyword or a name code() uses.
  CHECK(g.placeholder("L['x'].w", meta({2}))->name == "L__x___w");
  CHECK(g.placeholder("0in", meta({2}))->name == "_0in");
  CHECK(g.placeholder("", meta({2}))->name == "_");
  CHECK(g.placeholder("self", meta({2}))->name == "self_1");
  CHECK(g.placeholder("self", meta({2}))->name == "self_2");
  CHECK(g.placeholder("kiln", meta({2}))->name == "kiln_1");
  CHECK(g.placeholder("lambda", meta({2}))->name == "lambda_1");
  Node* w1 = g.get_attr("layers.0.weight", meta({2}));
  Node* w2 = g.get_attr("layers.0.weight", meta({2}));
  CHECK(w1->name == "layers_0_weight");
  CHECK(w2->name == "layers_0_weight_1");
  CHECK(g.call_module("layers.0", {N(w1)}, meta({2}))->name == "layers_0");
  Node* o = g.output({});
  CHECK(o->name == "output");

  std::vector<std::string> all;
  for (const auto& n : g.nodes()) all.push_back(n->name);
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
}

TEST_CASE("a late placeholder joins the placeholder prefix", "[graph]") {
  // The tracer discovers inputs (a global tensor) after it has emitted ops.
  Graph g;
  Node* x = g.placeholder("x", meta({2}));
  Node* a = g.call_function(OpId::add, {N(x), C(I(1))}, {}, meta({2}));
  Node* late = g.placeholder("glob", meta({2}));
  Node* b = g.call_function(OpId::mul, {N(a), N(late)}, {}, meta({2}));
  g.output({N(b)});
  CHECK(names_of(g.placeholders()) == std::vector<std::string>{"x", "glob"});
  for (size_t i = 0; i < g.nodes().size(); ++i) CHECK(g.nodes()[i]->index == int(i));
  CHECK(g.nodes()[1].get() == late);
  CHECK(g.code() ==
        "def forward(self, x, glob):\n"
        "    add = kiln.add(x, 1)\n"
        "    mul = kiln.mul(add, glob)\n"
        "    return (mul,)\n");
}

TEST_CASE("graph builder errors", "[graph]") {
  Graph g;
  Node* x = g.placeholder("x", meta({2}));
  check_error([&] { g.call_method("size", {}, meta({})); }, ErrorKind::RuntimeError,
              "call_method 'size' needs the object it is called on as its first argument");
  check_error([&] { g.call_function(OpId(runtime::kNumOps), {N(x)}, {}, meta({2})); }, ErrorKind::RuntimeError,
              "call_function: no op with id " + std::to_string(runtime::kNumOps));

  Graph other;
  Node* foreign = other.placeholder("z", meta({2}));
  check_error([&] { g.call_function(OpId::neg, {N(foreign)}, {}, meta({2})); }, ErrorKind::RuntimeError,
              "call_function 'neg': an argument is not a node of this graph");
  check_error([&] { g.call_function(OpId::cat, {Arg::list({N(x), N(nullptr)})}, {}, meta({4})); },
              ErrorKind::RuntimeError, "call_function 'cat': an argument is not a node of this graph");
  // A refused node takes no name and leaves no trace.
  CHECK(g.nodes().size() == 1);
  CHECK(x->users.empty());
  CHECK(g.call_function(OpId::neg, {N(x)}, {}, meta({2}))->name == "neg");

  g.output({N(x)});
  check_error([&] { g.output({N(x)}); }, ErrorKind::RuntimeError,
              "graph already has an output node; cannot add output 'output' after it");
  check_error([&] { g.call_function(OpId::neg, {N(x)}, {}, meta({2})); }, ErrorKind::RuntimeError,
              "graph already has an output node; cannot add call_function 'neg' after it");
  check_error([&] { g.placeholder("late", meta({2})); }, ErrorKind::RuntimeError,
              "graph already has an output node; cannot add placeholder 'late' after it");
  CHECK(g.nodes().size() == 3);
  CHECK(g.output_node() == g.nodes().back().get());
}

TEST_CASE("eager backend runs every node kind bit for bit like the ops", "[graph]") {
  interpreter::VM vm;
  runtime::manual_seed(7);
  Value fc = make_module(vm, BuiltinModule::Linear, {I(3), I(4)});
  Value relu = make_module(vm, BuiltinModule::ReLU, {});
  Value weight = runtime::get_attr(vm, fc, runtime::intern("weight").get());
  Value bias = runtime::get_attr(vm, fc, runtime::intern("bias").get());

  auto g = std::make_shared<Graph>();
  g->set_attr("fc", fc);
  g->set_attr("fc.weight", weight);
  g->set_attr("fc.bias", bias);
  g->set_attr("act", relu);
  Node* x = g->placeholder("x", meta({2, 3}));
  Node* y = g->placeholder("y", meta({2, 4}));
  Node* w = g->get_attr("fc.weight", meta({4, 3}));
  Node* b = g->get_attr("fc.bias", meta({4}));
  Node* lin = g->call_function(OpId::linear, {N(x), N(w)}, {{"bias", N(b)}}, meta({2, 4}));
  Node* add = g->call_function(OpId::add, {N(lin), N(y)}, {}, meta({2, 4}));
  Node* act = g->call_module("act", {N(add)}, meta({2, 4}));
  Node* mod = g->call_module("fc", {N(x)}, meta({2, 4}));
  Node* cat = g->call_function(OpId::cat, {Arg::list({N(act), N(mod), N(y)})}, {{"dim", C(I(1))}}, meta({2, 12}));
  Node* sum = g->call_function(OpId::sum, {N(cat)}, {{"dim", C(I(1))}, {"keepdim", C(Value::boolean(true))}},
                               meta({2, 1}));
  Node* msum = g->call_method("sum", {N(add), C(I(0))}, meta({4}));
  Node* size = g->call_method("size", {N(cat), C(I(1))}, meta({}, DType::Int64));
  g->output({N(act), N(mod), N(cat), N(sum), N(msum), N(size), C(I(5))});
  CHECK(g->op_count() == 8);

  const Value xv = Value::tensor(ft({0.5f, -1.25f, 2.0f, 3.5f, -0.75f, 1.0f}, {2, 3}));
  const Value yv = Value::tensor(ft({-2.0f, 0.25f, 1.5f, -0.5f, 0.125f, -3.0f, 2.5f, 0.75f}, {2, 4}));
  CompiledGraph run = eager_backend(g, {xv, yv});
  std::vector<Value> got = run(vm, {xv, yv});
  REQUIRE(got.size() == 7);

  // The same computation by direct op calls.
  const Value kw_bias = runtime::make_tuple({runtime::intern_value("bias")});
  std::vector<Value> la = {xv, weight, bias};
  const Value want_lin = runtime::call_op(OpId::linear, CallArgs{la.data(), 3, kw_bias.as<runtime::TupleObj>()});
  const Value want_add = runtime::call_op(OpId::add, {want_lin, yv});
  const Value want_act = runtime::call_op(OpId::relu, {want_add});
  const Value want_mod = runtime::call_op(OpId::linear, {xv, weight, bias});
  const Value want_cat = runtime::call_op(OpId::cat, {runtime::make_tuple({want_act, want_mod, yv}), I(1)});
  const Value want_sum = runtime::call_op(OpId::sum, {want_cat, I(1), Value::boolean(true)});
  const Value want_msum = runtime::call_op(OpId::sum, {want_add, I(0)});

  check_bitwise_equal(got[0], want_act);
  check_bitwise_equal(got[1], want_mod);
  check_bitwise_equal(got[2], want_cat);
  check_bitwise_equal(got[3], want_sum);
  check_bitwise_equal(got[4], want_msum);
  CHECK(runtime::repr(got[5]) == "12");
  CHECK(runtime::repr(got[6]) == "5");
  // The eager kernels are the reference: the numbers are meaningful, not
  // just self-consistent (relu clamps, cat lays the three blocks side by side).
  for (double v : {got[0].as_tensor().item_as_double({0, 0}), got[0].as_tensor().item_as_double({1, 3})})
    CHECK(v >= 0.0);
  CHECK(got[2].as_tensor().item_as_double({1, 11}) == 0.75);

  // Calling again gives the same answer: nothing of one call leaks into the next.
  std::vector<Value> again = run(vm, {xv, yv});
  for (size_t i = 0; i < 5; ++i) check_bitwise_equal(again[i], got[i]);

  // The compiled graph owns the graph: dropping every other reference is fine.
  std::weak_ptr<Graph> watch = g;
  g.reset();
  CHECK(!watch.expired());
  check_bitwise_equal(run(vm, {xv, yv})[2], want_cat);
}

TEST_CASE("eager backend: a late placeholder takes its input in placeholder order", "[graph]") {
  interpreter::VM vm;
  auto g = std::make_shared<Graph>();
  Node* x = g->placeholder("x", meta({2}));
  Node* a = g->call_function(OpId::sub, {N(x), C(I(1))}, {}, meta({2}));
  Node* late = g->placeholder("glob", meta({2}));
  g->output({N(g->call_function(OpId::div, {N(a), N(late)}, {}, meta({2})))});
  const Value xv = Value::tensor(ft({3, 5}, {2}));
  const Value gv = Value::tensor(ft({2, 8}, {2}));
  std::vector<Value> got = eager_backend(g, {})(vm, {xv, gv});
  REQUIRE(got.size() == 1);
  CHECK(got[0].as_tensor().item_as_double({0}) == 1.0);
  CHECK(got[0].as_tensor().item_as_double({1}) == 0.5);
}

TEST_CASE("eager backend errors", "[graph]") {
  interpreter::VM vm;
  auto g = std::make_shared<Graph>();
  Node* x = g->placeholder("x", meta({2}));
  Node* y = g->placeholder("y", meta({3}));
  g->output({N(g->call_function(OpId::add, {N(x), N(y)}, {}, meta({2})))});
  CompiledGraph run = eager_backend(g, {});
  const Value t2 = Value::tensor(ft({1, 2}, {2}));
  check_error([&] { run(vm, {t2}); }, ErrorKind::RuntimeError, "eager backend: the graph takes 2 inputs, got 1");
  check_error([&] { run(vm, {t2, t2, t2}); }, ErrorKind::RuntimeError,
              "eager backend: the graph takes 2 inputs, got 3");
  // An op's own error passes through unchanged.
  try {
    run(vm, {t2, Value::tensor(ft({1, 2, 3}, {3}))});
    FAIL("expected a shape error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::RuntimeError);
    CHECK(std::string(e.what()).find("add") != std::string::npos);
  }

  auto missing = std::make_shared<Graph>();
  Node* w = missing->get_attr("fc.weight", meta({2}));
  missing->output({N(w)});
  check_error([&] { eager_backend(missing, {}); }, ErrorKind::RuntimeError,
              "eager backend: get_attr node 'fc_weight' reads 'fc.weight', which is not an attribute of the graph");
  auto missing_mod = std::make_shared<Graph>();
  Node* in = missing_mod->placeholder("x", meta({2}));
  missing_mod->output({N(missing_mod->call_module("blocks.0", {N(in)}, meta({2})))});
  check_error([&] { eager_backend(missing_mod, {}); }, ErrorKind::RuntimeError,
              "eager backend: call_module node 'blocks_0' reads 'blocks.0', which is not an attribute of the graph");

  auto open = std::make_shared<Graph>();
  open->placeholder("x", meta({2}));
  check_error([&] { eager_backend(open, {}); }, ErrorKind::RuntimeError, "eager backend: the graph has no output node");
  check_error([&] { eager_backend(nullptr, {}); }, ErrorKind::ValueError, "eager backend: no graph given");

  // A method that does not exist is the runtime's AttributeError at call time.
  auto meth = std::make_shared<Graph>();
  Node* mx = meth->placeholder("x", meta({2}));
  meth->output({N(meth->call_method("frobnicate", {N(mx)}, meta({2})))});
  try {
    eager_backend(meth, {})(vm, {t2});
    FAIL("expected AttributeError");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::AttributeError);
  }
}

// ---- memory: an intermediate is released right after its last user --------

namespace {

bool g_storage_freed = false;
bool g_freed_at_check = false;

// Returns a tensor over memory whose deleter records that the last
// reference to it (any view) is gone.
Value probe_make(runtime::CallContext&, const runtime::BuiltinObj&, const CallArgs& args) {
  auto* data = new float[4]{1, 2, 3, 4};
  g_storage_freed = false;
  return Value::tensor(Tensor::from_blob(data, {4}, {1}, DType::Float32, [](void* p) {
    delete[] static_cast<float*>(p);
    g_storage_freed = true;
  }));
}
// Records whether that tensor was already freed when this node ran.
Value probe_check(runtime::CallContext&, const runtime::BuiltinObj&, const CallArgs& args) {
  g_freed_at_check = g_storage_freed;
  return args[0];
}

// x -> t = self.make(x) -> u = neg(t) -> v = self.check(u) -> w = neg(v)
std::shared_ptr<Graph> probe_graph(bool output_t_too) {
  auto g = std::make_shared<Graph>();
  g->set_attr("make", runtime::make_builtin("make", probe_make));
  g->set_attr("check", runtime::make_builtin("check", probe_check));
  Node* x = g->placeholder("x", meta({4}));
  Node* t = g->call_module("make", {N(x)}, meta({4}));
  Node* u = g->call_function(OpId::neg, {N(t)}, {}, meta({4}));
  Node* v = g->call_module("check", {N(u)}, meta({4}));
  Node* w = g->call_function(OpId::neg, {N(v)}, {}, meta({4}));
  if (output_t_too)
    g->output({N(w), N(t)});
  else
    g->output({N(w)});
  return g;
}

}  // namespace

TEST_CASE("eager backend frees an intermediate after its last user", "[graph]") {
  interpreter::VM vm;
  const Value x = Value::tensor(ft({0, 0, 0, 0}, {4}));

  // t's last user is neg: by the time `check` runs, t's memory is gone.
  g_freed_at_check = false;
  std::vector<Value> out = eager_backend(probe_graph(false), {})(vm, {x});
  CHECK(g_freed_at_check);
  REQUIRE(out.size() == 1);
  CHECK(out[0].as_tensor().item_as_double({3}) == 4.0);

  // Control: when the output also reads t, it must still be alive at
  // `check` (and after the call, held by the result).
  g_freed_at_check = true;
  out = eager_backend(probe_graph(true), {})(vm, {x});
  CHECK(!g_freed_at_check);
  CHECK(!g_storage_freed);
  REQUIRE(out.size() == 2);
  CHECK(out[1].as_tensor().item_as_double({2}) == 3.0);
  out.clear();
  CHECK(g_storage_freed);

  // The caller's inputs are untouched by the freeing.
  CHECK(x.as_tensor().item_as_double({0}) == 0.0);
}

TEST_CASE("eager backend on a long chain", "[graph]") {
  interpreter::VM vm;
  auto g = std::make_shared<Graph>();
  Node* cur = g->placeholder("x", meta({3}));
  for (int i = 0; i < 2000; ++i) cur = g->call_function(OpId::add, {N(cur), C(I(1))}, {}, meta({3}));
  g->output({N(cur)});
  CHECK(g->nodes().back()->args[0].node->name == "add_1999");
  std::vector<Value> out = eager_backend(g, {})(vm, {Value::tensor(ft({0, 1, 2}, {3}))});
  CHECK(out[0].as_tensor().item_as_double({2}) == 2002.0);
}

// ---- registry ---------------------------------------------------------------

TEST_CASE("backend registry: eager is built in, custom backends register", "[graph]") {
  const Backend* eager = find_backend("eager");
  REQUIRE(eager != nullptr);
  CHECK(find_backend("no_such_backend") == nullptr);

  static int compiled = 0;
  register_backend("test_counting", [](std::shared_ptr<const Graph> graph, const std::vector<Value>& examples) {
    ++compiled;
    return eager_backend(std::move(graph), examples);
  });
  const Backend* custom = find_backend("test_counting");
  REQUIRE(custom != nullptr);
  std::vector<std::string> names = backend_names();
  CHECK(std::find(names.begin(), names.end(), "eager") != names.end());
  CHECK(std::find(names.begin(), names.end(), "test_counting") != names.end());

  interpreter::VM vm;
  auto g = std::make_shared<Graph>();
  Node* x = g->placeholder("x", meta({2}));
  g->output({N(g->call_function(OpId::mul, {N(x), C(I(3))}, {}, meta({2})))});
  const Value xv = Value::tensor(ft({1, -2}, {2}));
  const int before = compiled;
  std::vector<Value> a = (*custom)(g, {xv})(vm, {xv});
  CHECK(compiled == before + 1);
  std::vector<Value> b = (*eager)(g, {xv})(vm, {xv});
  check_bitwise_equal(a[0], b[0]);
  check_bitwise_equal(a[0], runtime::call_op(OpId::mul, {xv, I(3)}));

  check_error([] { register_backend("", eager_backend); }, ErrorKind::ValueError,
              "register_backend: the backend name is empty");
  check_error([] { register_backend("nothing", Backend()); }, ErrorKind::ValueError,
              "register_backend: backend 'nothing' is an empty callable");
  CHECK(find_backend("nothing") == nullptr);
}

// create_call memoizes shape rules; a hit must give what the rule would.
// Keys must tell apart what the rules tell apart: 1 vs 1.0 vs True (dtype
// promotion), strides (a transposed input's result is contiguous anyway,
// but sizes follow the view), and keyword names.
TEST_CASE("create_call: memoized shape rules answer like the rule", "[graph]") {
  runtime::manual_seed(1);
  OutputGraph out;
  Tensor xi = Tensor::empty({2, 3}, DType::Int64);
  Node* x = out.add_input(local_source("x", 0), xi);
  Tensor ft = runtime::call_op(OpId::randn, {runtime::Value::integer(3), runtime::Value::integer(2)}).as_tensor();
  Tensor t = ft.as_strided({2, 3}, {1, 2}, 0);  // a transposed view
  Node* y = out.add_input(local_source("y", 1), t);
  auto call = [&](OpId op, std::vector<Arg> args, std::vector<std::pair<std::string, Arg>> kw = {}) {
    return *out.create_call(op, std::move(args), std::move(kw))->meta;
  };
  for (int round = 0; round < 2; ++round) {  // the second round hits the memo
    INFO("round " << round);
    CHECK(call(OpId::add, {N(x), Arg::constant(runtime::Value::integer(1))}).dtype == DType::Int64);
    CHECK(call(OpId::add, {N(x), Arg::constant(runtime::Value::floating(1.0))}).dtype == DType::Float32);
    CHECK(call(OpId::add, {N(x), Arg::constant(runtime::Value::boolean(true))}).dtype == DType::Int64);
    TensorMeta s = call(OpId::sum, {N(y)}, {{"dim", Arg::constant(runtime::Value::integer(0))}});
    CHECK(s.sizes == Shape{3});
    TensorMeta k = call(OpId::sum, {N(y)}, {{"dim", Arg::constant(runtime::Value::integer(1))}});
    CHECK(k.sizes == Shape{2});
    TensorMeta r = call(OpId::reshape, {N(x), Arg::constant(runtime::make_tuple({runtime::Value::integer(3),
                                                                                 runtime::Value::integer(2)}))});
    CHECK(r.sizes == Shape{3, 2});
    TensorMeta v = call(OpId::relu, {N(y)});
    CHECK(v.sizes == Shape{2, 3});
    runtime::Value ymeta = runtime::Value::tensor(meta_tensor(*y->meta));
    CHECK(v.strides == runtime::infer_meta(OpId::relu, CallArgs{&ymeta, 1, nullptr}).strides());
  }
  // A rule's error is raised every time, never memoized as a result.
  for (int round = 0; round < 2; ++round)
    CHECK_THROWS_AS(out.create_call(OpId::matmul, {N(x), N(x)}), Error);
}

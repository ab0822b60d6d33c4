// The symbolic shape rules (output_graph/symbolic_meta.h) against the
// concrete ones: for each call, the symbolic result evaluated at other sizes
// that satisfy the guards it recorded must be what the concrete rule gives
// at those sizes, and the concrete rule must accept them (a relation it
// relied on and the symbolic rule did not guard would make it raise).
#include <catch2/catch.hpp>

#include <functional>
#include <random>

#include "output_graph/symbolic_meta.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::runtime;
using output_graph::ShapeEnv;
using output_graph::SymArg;
using output_graph::SymExpr;
using output_graph::SymShape;

namespace {

struct Call {
  std::vector<SymArg> args;
  std::vector<std::pair<std::string, SymArg>> kwargs;
};
// Builds a call from the symbols and the values they take.
using Make = std::function<Call(const std::vector<SymExpr>& s, const std::vector<int64_t>& v)>;

SymArg T(const SymShape& shape, const std::vector<int64_t>& v, DType dtype = DType::Float32) {
  Shape sizes;
  for (const SymExpr& e : shape) sizes.push_back(e.evaluate(v));
  return SymArg::tensor(Tensor::meta(sizes, dtype), shape);
}
SymArg I(const SymExpr& e, const std::vector<int64_t>& v) { return SymArg::integer(e, e.evaluate(v)); }
SymArg K(Value v) { return SymArg::constant(v); }
SymArg tuple_of(std::vector<SymArg> items) {
  SymArg a;
  std::vector<Value> hints;
  for (const SymArg& x : items) hints.push_back(x.hint);
  a.hint = make_tuple(std::move(hints));
  a.items = std::move(items);
  return a;
}
SymExpr c(int64_t v) { return SymExpr::constant(v); }

Shape concrete(const std::string& op, const Call& call) {
  std::vector<Value> values;
  std::vector<Value> names;
  for (const SymArg& a : call.args) values.push_back(a.hint);
  for (const auto& [k, a] : call.kwargs) {
    values.push_back(a.hint);
    names.push_back(intern_value(k));
  }
  Value kw = names.empty() ? Value::none() : make_tuple(names);
  return infer_meta(find_op(op)->id, CallArgs{values.data(), values.size(),
                                               kw.is(Kind::Tuple) ? kw.as<TupleObj>() : nullptr})
      .sizes();
}

// Checks one call; returns how many other sizes were tried.
int check_call(const std::string& op, const std::vector<int64_t>& hints, const Make& make) {
  ShapeEnv env;
  std::vector<SymExpr> syms;
  for (int64_t h : hints) syms.push_back(env.create_symbol(h, "s"));
  const Call at_hints = make(syms, hints);
  const Shape out_hint = concrete(op, at_hints);
  auto sym = output_graph::symbolic_shape(find_op(op)->id, at_hints.args, at_hints.kwargs, out_hint, env);
  INFO(op);
  REQUIRE(sym.has_value());
  std::string printed;
  for (const SymExpr& e : *sym) printed += e.str() + "; ";
  INFO("symbolic: " << printed);
  std::string guards;
  for (const auto& g : env.guards()) guards += g.str() + "; ";
  INFO("guards: " << guards);
  std::mt19937_64 rng(hints.size() * 31 + op.size());
  int tried = 0;
  for (int attempt = 0; attempt < 400 && tried < 25; ++attempt) {
    std::vector<int64_t> v;
    for (size_t i = 0; i < hints.size(); ++i) v.push_back(int64_t(2 + rng() % 14));
    if (!env.check(v)) continue;
    ++tried;
    std::string vs;
    for (int64_t x : v) vs += std::to_string(x) + " ";
    INFO("sizes: " << vs);
    Shape want;
    REQUIRE_NOTHROW(want = concrete(op, make(syms, v)));  // a guard the rule missed makes this raise
    Shape got;
    for (const SymExpr& e : *sym) got.push_back(e.evaluate(v));
    REQUIRE(got == want);
  }
  return tried;
}

}  // namespace

TEST_CASE("symbolic shape rules agree with the concrete rules at every size their guards admit", "[symbolic_shapes]") {
  const Value F = Value::floating(2.0);
  struct Case {
    const char* op;
    std::vector<int64_t> hints;
    Make make;
    bool dynamic = true;  // whether other sizes must pass the guards (false: pinned)
  };
  std::vector<Case> cases = {
      {"add", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1]}, v), T({s[1]}, v)}}; }},
      {"add", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], c(1)}, v), T({c(1), s[1]}, v)}}; }},
      {"mul", {4}, [F](auto& s, auto& v) { return Call{{T({s[0], c(3)}, v), K(F)}}; }},
      {"add", {4, 4}, [](auto& s, auto& v) { return Call{{T({s[0]}, v), T({s[1]}, v)}}; }},  // s0 == s1 guarded
      {"where", {3, 4}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1]}, v, DType::Bool), T({s[0], s[1]}, v), T({s[1]}, v)}};
       }},
      {"sum", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1], c(4)}, v), K(Value::integer(1))}}; }},
      {"sum", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1], c(4)}, v)},
                     {{"dim", K(make_tuple({Value::integer(0), Value::integer(2)}))}, {"keepdim", K(Value::boolean(true))}}};
       }},
      {"mean", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1]}, v)}}; }},
      {"amax", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1]}, v), K(Value::integer(-1))}}; }},
      {"argmax", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1]}, v), K(Value::integer(1))}}; }},
      {"argmax", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1]}, v)}}; }},
      {"softmax", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1]}, v), K(Value::integer(-1))}}; }},
      {"layer_norm", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1], c(8)}, v), K(make_tuple({Value::integer(8)}))}};
       }},
      {"matmul", {3, 5, 6}, [](auto& s, auto& v) { return Call{{T({s[0], s[1], c(8)}, v), T({c(8), s[2]}, v)}}; }},
      {"matmul", {5, 6}, [](auto& s, auto& v) { return Call{{T({s[0]}, v), T({s[0], s[1]}, v)}}; }},
      {"matmul", {3, 5, 6}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(1), s[1], c(8)}, v), T({s[2], c(8), c(4)}, v)}};
       }},
      {"linear", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1], c(8)}, v), T({c(16), c(8)}, v)}}; }},
      {"view", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1], c(8)}, v), I(s[0] * s[1], v), K(Value::integer(8))}};
       }},
      {"view", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1], c(8)}, v), I(s[0], v), K(Value::integer(-1))}}; }},
      {"reshape", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1], c(8)}, v), K(make_tuple({Value::integer(-1), Value::integer(8)}))}};
       }},
      {"view", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1], c(8)}, v), I(s[0], v), I(s[1], v), K(Value::integer(2)), K(Value::integer(4))}};
       }},
      {"transpose", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1], c(8)}, v), K(Value::integer(1)), K(Value::integer(2))}};
       }},
      {"permute", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1], c(8)}, v), K(Value::integer(2)), K(Value::integer(0)), K(Value::integer(1))}};
       }},
      {"expand", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(1), c(8)}, v), I(s[0], v), I(s[1], v), K(Value::integer(8))}};
       }},
      {"expand", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(1), c(8)}, v), K(Value::integer(-1)), I(s[1], v), K(Value::integer(-1))}};
       }},
      {"select", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1]}, v), K(Value::integer(1)), K(Value::integer(-1))}};
       }},
      {"select", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1]}, v), K(Value::integer(0)), K(Value::integer(2))}}; }},
      {"slice", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1]}, v), K(Value::integer(1)), K(Value::integer(0)), I(s[1] - c(1), v)}};
       }},
      {"slice", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1]}, v), K(Value::integer(1)), K(Value::integer(2)), K(Value::none())}};
       }},
      {"slice", {7, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1]}, v), K(Value::integer(0)), K(Value::none()), K(Value::none()), K(Value::integer(2))}};
       }},
      {"slice", {3, 8}, [](auto& s, auto& v) {  // x[:, :T] with T from another tensor: min(T, n) guarded
         return Call{{T({s[0], c(16)}, v), K(Value::integer(1)), K(Value::integer(0)), I(s[1], v)}};
       }},
      {"slice", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1]}, v), K(Value::integer(1)), K(Value::integer(-3)), K(Value::none())}};
       }},
      {"unsqueeze", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1]}, v), K(Value::integer(1))}}; }},
      {"squeeze", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], c(1), s[1]}, v)}}; }},
      {"flatten", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1], c(4)}, v), K(Value::integer(1))}}; }},
      {"flatten", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1], c(4)}, v), K(Value::integer(0)), K(Value::integer(1))}};
       }},
      {"cat", {3, 5}, [](auto& s, auto& v) {
         return Call{{tuple_of({T({s[0], c(4)}, v), T({s[1], c(4)}, v)}), K(Value::integer(0))}};
       }},
      {"cat", {3, 5}, [](auto& s, auto& v) {
         return Call{{tuple_of({T({s[0], s[1]}, v), T({s[0], c(2)}, v)}), K(Value::integer(1))}};
       }},
      {"embedding", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1]}, v, DType::Int64), T({c(10), c(8)}, v)}};
       }},
      {"zeros", {3, 5}, [](auto& s, auto& v) { return Call{{I(s[0], v), I(s[1], v)}}; }},
      {"ones", {3, 5}, [](auto& s, auto& v) { return Call{{tuple_of({I(s[0], v), I(s[1] * c(2), v)})}}; }},
      {"full", {3}, [F](auto& s, auto& v) { return Call{{tuple_of({I(s[0], v), K(Value::integer(3))}), K(F)}}; }},
      {"arange", {5}, [](auto& s, auto& v) { return Call{{I(s[0], v)}}; }},
      {"arange", {5}, [](auto& s, auto& v) { return Call{{K(Value::integer(2)), I(s[0], v)}}; }},
      {"arange", {5}, [](auto& s, auto& v) { return Call{{K(Value::integer(0)), I(s[0], v), K(Value::integer(2))}}; }},
      {"tril", {3, 5}, [](auto& s, auto& v) { return Call{{T({s[0], s[1]}, v)}}; }},
      {"conv2d", {2, 9, 8}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(3), s[1], s[2]}, v), T({c(4), c(3), c(3), c(3)}, v)},
                     {{"stride", K(Value::integer(2))}, {"padding", K(Value::integer(1))}}};
       }},
      {"conv1d", {2, 9}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(3), s[1]}, v), T({c(4), c(3), c(3)}, v)}};
       }},
      {"max_pool2d", {2, 9, 8}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(3), s[1], s[2]}, v), K(Value::integer(2))}};
       }},
      {"avg_pool2d", {2, 9, 8}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(3), s[1], s[2]}, v), K(Value::integer(3))},
                     {{"stride", K(Value::integer(2))}, {"padding", K(Value::integer(1))}}};
       }},
      // ceil_mode: rounded up, less one where the last window would start in the padding
      {"max_pool2d", {2, 9, 8}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(3), s[1], s[2]}, v), K(Value::integer(3))},
                     {{"stride", K(Value::integer(2))}, {"padding", K(Value::integer(1))},
                      {"ceil_mode", K(Value::boolean(true))}}};
       }},
      {"avg_pool2d", {3, 7, 10}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(3), s[1], s[2]}, v), K(Value::integer(2))}, {{"ceil_mode", K(Value::boolean(true))}}};
       }},
      {"adaptive_avg_pool2d", {2, 9, 8}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(3), s[1], s[2]}, v), K(make_tuple({Value::integer(1), Value::integer(1)}))}};
       }},
      {"pad", {3, 5}, [](auto& s, auto& v) {
         return Call{{T({s[0], s[1]}, v), K(make_tuple({Value::integer(1), Value::integer(2)}))}};
       }},
      {"cross_entropy", {3}, [](auto& s, auto& v) {
         return Call{{T({s[0], c(5)}, v), T({s[0]}, v, DType::Int64)}, {{"reduction", K(Value::str("none"))}}};
       }},
      {"cross_entropy", {3}, [](auto& s, auto& v) { return Call{{T({s[0], c(5)}, v), T({s[0]}, v, DType::Int64)}}; }},
      {"index", {3, 5}, [](auto& s, auto& v) {  // x[:, [-1], :]
         return Call{{T({s[0], s[1], c(4)}, v), tuple_of({K(Value::none()), T({c(1)}, v, DType::Int64)})}};
       }},
      {"index", {3, 5}, [](auto& s, auto& v) {  // x[idx] with idx of shape (s1, 2)
         return Call{{T({s[0], c(4)}, v), tuple_of({T({s[1], c(2)}, v, DType::Int64)})}};
       }},
      {"index", {3, 5}, [](auto& s, auto& v) {  // x[i, :, j]: not adjacent, the index dims go first
         return Call{{T({c(4), s[0], c(6)}, v),
                      tuple_of({T({s[1]}, v, DType::Int64), K(Value::none()), T({s[1]}, v, DType::Int64)})}};
       }},
  };
  for (const Case& k : cases) {
    const int tried = check_call(k.op, k.hints, k.make);
    INFO(k.op);
    if (k.dynamic) CHECK(tried >= 3);  // the guards do not pin the sizes
  }
}

TEST_CASE("every op row has a symbolic rule, and the rules guard what they rely on", "[symbolic_shapes]") {
  // Broadcasting two symbols: guarded equal, so other unequal sizes fail the guard.
  ShapeEnv env;
  SymExpr a = env.create_symbol(4, "a"), b = env.create_symbol(4, "b");
  std::vector<int64_t> h{4, 4};
  auto sym = output_graph::symbolic_shape(OpId::add, {T({a}, h), T({b}, h)}, {}, Shape{4}, env);
  REQUIRE(sym);
  CHECK((*sym)[0] == a);
  REQUIRE(env.guards().size() == 1);
  CHECK(env.guards()[0].str() == "s0 == s1");
  // An op whose result size depends on data has no symbolic rule: a bool mask.
  ShapeEnv env2;
  SymExpr n = env2.create_symbol(5, "n");
  CHECK(!output_graph::symbolic_shape(OpId::index, {T({n}, {5}), tuple_of({T({n}, {5}, DType::Bool)})}, {}, Shape{3}, env2));
}

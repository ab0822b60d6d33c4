// Python semantics of Values (value_ops): printing, equality and hashing,
// truth, operators, containers, logging switch.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "runtime/base/log.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {
Value I(int64_t i) { return Value::integer(i); }
Value F(double d) { return Value::floating(d); }
Value S(const char* s) { return Value::str(s); }
}  // namespace

TEST_CASE("repr matches Python's", "[values]") {
  CHECK(repr(F(1.0)) == "1.0");
  CHECK(repr(F(0.1)) == "0.1");
  CHECK(repr(F(1e16)) == "1e+16");
  CHECK(repr(F(1e15)) == "1000000000000000.0");
  CHECK(repr(F(1.5e-5)) == "1.5e-05");
  CHECK(repr(F(0.0001)) == "0.0001");
  CHECK(repr(F(-0.0)) == "-0.0");
  CHECK(repr(F(INFINITY)) == "inf");
  CHECK(repr(F(NAN)) == "nan");
  CHECK(repr(F(123456.789)) == "123456.789");
  CHECK(repr(S("it's")) == "\"it's\"");
  CHECK(repr(S("a\nb")) == "'a\\nb'");
  CHECK(repr(make_tuple({I(1)})) == "(1,)");
  CHECK(repr(make_tuple({})) == "()");
  CHECK(repr(make_list({I(1), S("x"), Value::none(), Value::boolean(true)})) == "[1, 'x', None, True]");
  CHECK(repr(make_range(0, 5, 1)) == "range(0, 5)");
}

TEST_CASE("equal numbers are equal dict keys", "[values]") {
  Value d = make_dict();
  auto* dict = d.as<DictObj>();
  dict->set(I(1), S("int"));
  dict->set(F(1.0), S("float"));  // same key as 1
  dict->set(Value::boolean(true), S("bool"));
  CHECK(dict->entries.size() == 1);
  CHECK(repr(d) == "{1: 'bool'}");
  dict->set(make_tuple({I(1), S("a")}), I(2));
  CHECK(dict->find(make_tuple({F(1.0), S("a")}))->as_int() == 2);
  CHECK_THROWS_WITH(dict->set(make_list({}), I(0)), Catch::Contains("unhashable type: 'list'"));
  CHECK(dict->erase(I(1)));
  CHECK(repr(d) == "{(1, 'a'): 2}");  // order kept, index still right after erase
  CHECK(dict->find(make_tuple({I(1), S("a")})) != nullptr);
}

TEST_CASE("truth follows Python; a multi-element tensor is ambiguous", "[values]") {
  CHECK_FALSE(truth(Value::none()));
  CHECK_FALSE(truth(I(0)));
  CHECK(truth(F(0.5)));
  CHECK_FALSE(truth(S("")));
  CHECK_FALSE(truth(make_list({})));
  CHECK(truth(make_tuple({I(0)})));
  CHECK_FALSE(truth(make_range(3, 3, 1)));
  CHECK(truth(call_op(OpId::ones, {I(1)})));
  CHECK_THROWS_WITH(truth(call_op(OpId::ones, {I(3)})), Catch::Contains("ambiguous"));
}

TEST_CASE("operators: ints never wrap, floats follow Python, mixed types error clearly", "[values]") {
  CHECK(binary_op(BinOp::ADD, I(INT64_MAX - 1), I(1)).as_int() == INT64_MAX);
  CHECK_THROWS_AS(binary_op(BinOp::ADD, I(INT64_MAX), I(1)), Error);
  CHECK_THROWS_AS(binary_op(BinOp::POW, I(3), I(64)), Error);
  CHECK(binary_op(BinOp::POW, I(3), I(4)).as_int() == 81);
  CHECK_THROWS_AS(unary_op(UnOp::NEG, I(INT64_MIN)), Error);
  CHECK(binary_op(BinOp::MOD, F(-1.0), F(3.0)).as_float() == 2.0);
  CHECK(binary_op(BinOp::FLOORDIV, F(-7.5), I(2)).as_float() == -4.0);
  CHECK(binary_op(BinOp::MOD, I(7), I(-3)).as_int() == -2);
  CHECK(binary_op(BinOp::AND, Value::boolean(true), Value::boolean(false)).is(Kind::Bool));
  CHECK(repr(binary_op(BinOp::MUL, S("ab"), I(3))) == "'ababab'");
  CHECK(repr(binary_op(BinOp::ADD, make_tuple({I(1)}), make_tuple({I(2)}))) == "(1, 2)");
  try {
    binary_op(BinOp::SUB, S("a"), I(1));
    FAIL("expected TypeError");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "TypeError: unsupported operand type(s) for -: 'str' and 'int'");
  }
  CHECK_THROWS_WITH(compare_op(CmpOp::LT, S("a"), I(1)),
                    Catch::Contains("'<' not supported between instances of 'str' and 'int'"));
  CHECK(truth(compare_op(CmpOp::LT, make_tuple({I(1), I(2)}), make_tuple({I(1), I(3)}))));
  CHECK_FALSE(truth(compare_op(CmpOp::LT, F(NAN), F(1.0))));
  CHECK_FALSE(truth(compare_op(CmpOp::GE, F(NAN), F(1.0))));
}

TEST_CASE("list += extends in place, list + list makes a new list", "[values]") {
  Value a = make_list({I(1)});
  Value alias = a;
  Value r = binary_op(BinOp::ADD, a, make_list({I(2)}), /*inplace=*/true);
  CHECK(r.is_same(a));
  CHECK(repr(alias) == "[1, 2]");
  Value n = binary_op(BinOp::ADD, a, make_list({I(3)}));
  CHECK_FALSE(n.is_same(a));
  CHECK(repr(alias) == "[1, 2]");
}

TEST_CASE("tensor operators dispatch to the registry ops", "[values]") {
  Value t = call_op(OpId::arange, {I(4)});
  CHECK(repr(binary_op(BinOp::ADD, t, I(1))) == "tensor([1, 2, 3, 4])");
  CHECK(repr(binary_op(BinOp::SUB, I(10), t)) == "tensor([10,  9,  8,  7])");
  CHECK(repr(compare_op(CmpOp::GE, t, I(2))) == "tensor([False, False,  True,  True])");
  CHECK(repr(unary_op(UnOp::NEG, t)) == "tensor([ 0, -1, -2, -3])");
  CHECK_THROWS_WITH(binary_op(BinOp::LSHIFT, t, I(1)), Catch::Contains("unsupported operand type(s) for <<"));
  CHECK(truth(compare_op(CmpOp::IS, t, t)));
}

TEST_CASE("KILN_LOGS switches component loggers on", "[values]") {
  ::setenv("KILN_LOGS", "vm,guards", 1);
  kiln::log::reload();
  CHECK(kiln::log::get("vm") != nullptr);
  CHECK(kiln::log::get("guards") != nullptr);
  CHECK(kiln::log::get("graph_breaks") == nullptr);
  ::setenv("KILN_LOGS", "all", 1);
  kiln::log::reload();
  CHECK(kiln::log::get("graph_breaks") != nullptr);
  ::unsetenv("KILN_LOGS");
  kiln::log::reload();
  CHECK(kiln::log::get("vm") == nullptr);
}

TEST_CASE("self-referential and deeply nested values never crash", "[values]") {
  Value l = make_list({I(1)});
  l.as<ListObj>()->items.push_back(l);  // l.append(l)
  CHECK(repr(l) == "[1, [...]]");
  CHECK(values_equal(l, l));
  Value d = make_dict();
  d.as<DictObj>()->set(S("me"), d);
  CHECK(repr(d) == "{'me': {...}}");
  // Two distinct self-containing lists: Python raises RecursionError too.
  Value m = make_list({I(1)});
  m.as<ListObj>()->items.push_back(m);
  CHECK_THROWS_AS(values_equal(l, m), Error);
  l.as<ListObj>()->items.clear();  // break the cycles so the test does not leak
  m.as<ListObj>()->items.clear();
  d.as<DictObj>()->entries.clear();
  d.as<DictObj>()->index.clear();

  Value deep = make_list({});
  for (int i = 0; i < 100000; ++i) deep = make_list({deep});
  try {
    repr(deep);
    FAIL("expected RecursionError");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::RecursionError);
  }
  // Dropping it must not recurse 100k destructors deep either.
  deep = Value();
  Value deep_dict = make_dict();
  for (int i = 0; i < 100000; ++i) {
    Value outer = make_dict();
    outer.as<DictObj>()->set(I(i), deep_dict);
    deep_dict = outer;
  }
  deep_dict = Value();
}

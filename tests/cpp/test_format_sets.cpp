// format() / ascii(), sets and frozensets, positional-only natives: the
// runtime against outputs taken from CPython 3.11 (the Python tests compare
// thousands of generated specs with CPython itself).
#include <catch2/catch.hpp>

#include <cmath>

#include "interpreter/assembler.h"
#include "interpreter/vm.h"
#include "runtime/semantics/format.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/signature.h"
#include "runtime/semantics/value_ops.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {
Value I(int64_t i) { return Value::integer(i); }
Value B(bool b) { return Value::boolean(b); }
Value F(double d) { return Value::floating(d); }
Value S(const char* s) { return Value::str(s); }
Value N() { return Value::none(); }
Value set_of(std::initializer_list<Value> items, bool frozen = false) {
  Value s = make_set(frozen);
  for (const Value& v : items) s.as<SetObj>()->add(v);
  return s;
}
}  // namespace

TEST_CASE("format() gives CPython's strings", "[format]") {
  CHECK(format_value(I(1234567), ",") == "1,234,567");
  CHECK(format_value(I(1234567), "_") == "1_234_567");
  CHECK(format_value(I(1234567), "010,") == "01,234,567");
  CHECK(format_value(I(1234567), "+x") == "+12d687");
  CHECK(format_value(I(1234567), "#b") == "0b100101101011010000111");
  CHECK(format_value(I(1234567), "_x") == "12_d687");
  CHECK(format_value(I(1234567), "^12") == "  1234567   ");
  CHECK(format_value(I(1234567), "e") == "1.234567e+06");
  CHECK(format_value(I(1234567), "%") == "123456700.000000%");
  CHECK(format_value(I(65), "c") == "A");
  CHECK(format_value(I(65), "^5c") == "  A  ");
  CHECK(format_value(I(-42), "05d") == "-0042");
  CHECK(format_value(I(-42), "=+8") == "-     42");
  CHECK(format_value(I(-42), "x") == "-2a");
  CHECK(format_value(I(-42), "#o") == "-0o52");
  CHECK(format_value(I(-42), "n") == "-42");
  CHECK(format_value(I(-42), ">6") == "   -42");
  CHECK(format_value(B(true), "") == "True");
  CHECK(format_value(B(true), ">5") == "    1");
  CHECK(format_value(B(true), "d") == "1");
  CHECK(format_value(B(true), ".2f") == "1.00");
  CHECK(format_value(F(3.14159265358979), "") == "3.14159265358979");
  CHECK(format_value(F(3.14159265358979), ".3") == "3.14");
  CHECK(format_value(F(3.14159265358979), ".3f") == "3.142");
  CHECK(format_value(F(3.14159265358979), "e") == "3.141593e+00");
  CHECK(format_value(F(3.14159265358979), "10.2E") == "  3.14E+00");
  CHECK(format_value(F(3.14159265358979), "g") == "3.14159");
  CHECK(format_value(F(3.14159265358979), "%") == "314.159265%");
  CHECK(format_value(F(3.14159265358979), "+.1%") == "+314.2%");
  CHECK(format_value(F(3.14159265358979), "#.0f") == "3.");
  CHECK(format_value(F(3.14159265358979), "012,.4f") == "000,003.1416");
  CHECK(format_value(F(3.14159265358979), "^11.2f") == "   3.14    ");
  CHECK(format_value(F(1e16), "") == "1e+16");
  CHECK(format_value(F(1e16), ".3") == "1e+16");
  CHECK(format_value(F(1e16), "n") == "1e+16");
  CHECK(format_value(F(1e16), "f") == "10000000000000000.000000");
  CHECK(format_value(F(-0.0), "") == "-0.0");
  CHECK(format_value(F(-0.0), "z.1f") == "0.0");
  CHECK(format_value(F(-0.0), "+") == "-0.0");
  CHECK(format_value(F(-0.0), "f") == "-0.000000");
  CHECK(format_value(F(INFINITY), "") == "inf");
  CHECK(format_value(F(INFINITY), "06") == "000inf");
  CHECK(format_value(F(INFINITY), "F") == "INF");
  CHECK(format_value(F(INFINITY), "+e") == "+inf");
  CHECK(format_value(F(NAN), "") == "nan");
  CHECK(format_value(F(NAN), "G") == "NAN");
  CHECK(format_value(F(NAN), "+") == "+nan");
  CHECK(format_value(F(100.0), ".3") == "1e+02");
  CHECK(format_value(F(100.0), "#.3") == "1.00e+02");
  CHECK(format_value(F(100.0), "g") == "100");
  CHECK(format_value(F(100.0), "#g") == "100.000");
  CHECK(format_value(F(1.5), ".0") == "2e+00");
  CHECK(format_value(F(1.5), ".0f") == "2");
  CHECK(format_value(F(1.5), ".0e") == "2e+00");
  CHECK(format_value(S("héllo"), "") == "héllo");
  CHECK(format_value(S("héllo"), "^9") == "  héllo  ");
  CHECK(format_value(S("héllo"), "é>8.2") == "ééééééhé");
  CHECK(format_value(S("héllo"), "<3") == "héllo");
  CHECK(format_value(S("héllo"), ".1") == "h");
  CHECK(format_value(S("héllo"), "s") == "héllo");
}

TEST_CASE("format() raises CPython's errors", "[format]") {
  CHECK_THROWS_WITH(format_value(I(5), ".2"), "ValueError: Precision not allowed in integer format specifier");
  CHECK_THROWS_WITH(format_value(I(5), "z"), "ValueError: Negative zero coercion (z) not allowed in integer format specifier");
  CHECK_THROWS_WITH(format_value(S("a"), "+"), "ValueError: Sign not allowed in string format specifier");
  CHECK_THROWS_WITH(format_value(S("a"), "="), "ValueError: '=' alignment not allowed in string format specifier");
  CHECK_THROWS_WITH(format_value(I(5), ",_"), "ValueError: Cannot specify both ',' and '_'.");
  CHECK_THROWS_WITH(format_value(F(1.0), "d"), "ValueError: Unknown format code 'd' for object of type 'float'");
  CHECK_THROWS_WITH(format_value(I(5), "xx"), "ValueError: Invalid format specifier 'xx' for object of type 'int'");
  CHECK_THROWS_WITH(format_value(I(5), ",x"), "ValueError: Cannot specify ',' with 'x'.");
  CHECK_THROWS_WITH(format_value(I(5), "."), "ValueError: Format specifier missing precision");
  CHECK_THROWS_WITH(format_value(N(), ">3"), "TypeError: unsupported format string passed to NoneType.__format__");
  CHECK_THROWS_WITH(format_value(I(-1), "c"), "OverflowError: %c arg not in range(0x110000)");
}

TEST_CASE("ascii() escapes what repr() keeps", "[format]") {
  CHECK(ascii_repr(S("h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\n")) == "'h\\xe9\\u20ac\\U0001f600\\n'");
  CHECK(format_field(S("caf\xc3\xa9"), 3, "<12") == "'caf\\xe9'   ");
  CHECK(format_field(I(5), 2, ">3") == "  5");
}

TEST_CASE("sets: Python element semantics, order-free equality and hashing", "[sets]") {
  Value s = set_of({I(1), F(1.0), B(true), S("a")});
  REQUIRE(length(s) == 2);
  CHECK(repr(s.as<SetObj>()->items()[0]) == "1");  // the first of 1 == 1.0 == True is kept
  Value a = set_of({I(1), I(2), I(3)}, true), b = set_of({I(3), I(2), I(1)}, true);
  CHECK(values_equal(a, b));
  CHECK(value_hash(a) == value_hash(b));
  CHECK(values_equal(set_of({I(1)}), set_of({F(1.0)}, true)));  // set == frozenset
  CHECK_THROWS_WITH(value_hash(set_of({I(1)})), "TypeError: unhashable type: 'set'");
  CHECK_THROWS_WITH(contains(a, make_list({})), "TypeError: unhashable type: 'list'");
  CHECK(repr(binary_op(BinOp::SUB, a, set_of({I(2)}))) == "frozenset({1, 3})");
  CHECK(repr(binary_op(BinOp::OR, set_of({}), set_of({I(4)}, true))) == "{4}");
  CHECK(truth(compare_op(CmpOp::LT, set_of({I(2)}), a)));
  CHECK_FALSE(truth(compare_op(CmpOp::LT, a, b)));
  CHECK(repr(make_set(false)) == "set()");
  CHECK(repr(make_set(true)) == "frozenset()");
  // |= updates the set itself (aliases see it); on a frozenset it makes a new one.
  Value m = set_of({I(1)});
  Value r = binary_op(BinOp::OR, m, a, true);
  CHECK(r.is_same(m));
  CHECK(length(m) == 3);
}

TEST_CASE("a set changed while iterated raises, as in CPython", "[sets]") {
  Value s = set_of({I(1), I(2)});
  Value it = get_iter(s);
  Value x;
  REQUIRE(it.as<IteratorObj>()->next(x));
  s.as<SetObj>()->add(I(3));
  CHECK_THROWS_WITH(it.as<IteratorObj>()->next(x), "RuntimeError: Set changed size during iteration");
}

TEST_CASE("native signatures: '/' makes parameters positional-only", "[signature]") {
  Signature all("fmt", "value, spec='', /");
  Value kw = make_tuple({intern_value("value")});
  Value args[] = {I(1)};
  CHECK_THROWS_WITH(all.bind(CallArgs{args, 1, kw.as<TupleObj>()}), "TypeError: fmt() takes no keyword arguments");
  Signature some("g", "value, /, b=2");
  CHECK_THROWS_WITH(some.bind(CallArgs{args, 1, kw.as<TupleObj>()}),
                    "TypeError: g() got some positional-only arguments passed as keyword arguments: 'value'");
  Signature with_kw("h", "a, /, **kw");
  Value kw_a = make_tuple({intern_value("a")});
  Value two[] = {I(1), I(2)};
  auto bound = with_kw.bind(CallArgs{two, 2, kw_a.as<TupleObj>()});
  CHECK(repr(bound[1]) == "{'a': 2}");
}

TEST_CASE("KBC positional-only parameters bind as CPython's", "[vm][signature]") {
  auto prog = interpreter::assemble(R"(
.func f(a, b=2, /, c=3, **kw)
  LOAD_FAST a
  LOAD_FAST b
  LOAD_FAST c
  LOAD_FAST kw
  BUILD_TUPLE 4
  RETURN_VALUE
.end
)", "posonly.kbc");
  interpreter::VM vm;
  Value f = prog.global("f");
  Value kw = make_tuple({intern_value("b"), intern_value("c")});
  Value args[] = {I(1), I(5), I(6)};
  CHECK(repr(vm.call(f, CallArgs{args, 3, kw.as<TupleObj>()})) == "(1, 2, 6, {'b': 5})");
  auto strict = interpreter::assemble(".func g(a, /, b)\n  LOAD_FAST a\n  RETURN_VALUE\n.end\n", "g.kbc");
  Value kw2 = make_tuple({intern_value("a"), intern_value("b")});
  CHECK_THROWS_WITH(vm.call(strict.global("g"), CallArgs{args, 2, kw2.as<TupleObj>()}),
                    "TypeError: g() got some positional-only arguments passed as keyword arguments: 'a'");
  CHECK_THROWS_WITH(interpreter::assemble(".func h(/, a)\n  LOAD_FAST a\n  RETURN_VALUE\n.end\n", "h.kbc"),
                    Catch::Contains("at least one parameter must precede '/'"));
}

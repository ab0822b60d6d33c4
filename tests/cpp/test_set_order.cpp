// CPython 3.11's hashes and set order, without an embedder: every expected
// value below was printed by CPython 3.11 (strs and orders with
// PYTHONHASHSEED=0, which is the zero siphash key kiln uses on its own).
// tests/python/test_set_order.py compares against CPython itself.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "runtime/base/hash.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/value_ops.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {
Value I(int64_t i) { return Value::integer(i); }
Value F(double d) { return Value::floating(d); }
Value S(const char* s) { return Value::str(s); }
Value T(std::vector<Value> items) { return make_tuple(std::move(items)); }
Value set_of(std::initializer_list<Value> items, bool frozen = false) {
  Value s = make_set(frozen);
  for (const Value& v : items) s.as<SetObj>()->add(v);
  return s;
}
int64_t h(const Value& v) { return int64_t(value_hash(v)); }
std::string order(const Value& s) { return repr(make_list(s.as<SetObj>()->items())); }
}  // namespace

TEST_CASE("ints and bools hash as CPython's: modulo 2**61 - 1, -1 is -2", "[hash]") {
  CHECK(h(I(0)) == 0);
  CHECK(h(I(1)) == 1);
  CHECK(h(I(-1)) == -2);
  CHECK(h(I(-2)) == -2);
  CHECK(h(I((int64_t(1) << 61) - 1)) == 0);
  CHECK(h(I(int64_t(1) << 61)) == 1);
  CHECK(h(I(int64_t(1) << 62)) == 2);
  CHECK(h(I(std::numeric_limits<int64_t>::max())) == 3);
  CHECK(h(I(std::numeric_limits<int64_t>::min())) == -4);
  CHECK(h(I(12345678901234)) == 12345678901234);
  CHECK(h(I(-987654321987)) == -987654321987);
  CHECK(h(Value::boolean(true)) == 1);
  CHECK(h(Value::boolean(false)) == 0);
}

TEST_CASE("floats hash as CPython's _Py_HashDouble", "[hash]") {
  CHECK(h(F(1.5)) == 1152921504606846977);
  CHECK(h(F(-0.0)) == 0);
  CHECK(h(F(2.5e-300)) == 52920977297143526);
  CHECK(h(F(1e308)) == 156575653125701);
  CHECK(h(F(HUGE_VAL)) == 314159);
  CHECK(h(F(-HUGE_VAL)) == -314159);
  CHECK(h(F(0.1)) == 230584300921369408);
  CHECK(h(F(-3.75)) == -1729382256910270467);
  CHECK(h(F(1e20)) == 848750603811160107);
  CHECK(h(F(std::ldexp(1.0, 61))) == 1);  // equal numbers hash equal: 2.0**61 == 2**61
  CHECK(h(F(std::nan(""))) == 0);          // kiln's NaN rule (hash.h)
}

TEST_CASE("strs hash as CPython's siphash13 over its representation (zero key)", "[hash]") {
  CHECK(h(S("")) == 0);
  CHECK(h(S("a")) == 4644417185603328019);
  CHECK(h(S("ab")) == 6148830537548944441);
  CHECK(h(S("hello world!")) == 839851713330019024);
  CHECK(h(S("abcdefgh")) == 4574395652268504554);
  CHECK(h(S("abcdefghi")) == -532774252720507163);
  CHECK(h(S("\xc3\xa9")) == 6047309291227476195);              // Latin-1: one byte per code point
  CHECK(h(S("h\xc3\xa9llo")) == 6395329678795984700);
  CHECK(h(S("\xe2\x82\xac")) == -5529981157763016009);         // UCS-2
  CHECK(h(S("a\xe2\x82\xac" "b")) == -6176261434700135861);
  CHECK(h(S("\xf0\x9f\x98\x80")) == -3536540696076613844);     // UCS-4
  CHECK(h(S("x\xf0\x9f\x98\x80y")) == 4642876134759756482);
  Value s = S("cached");
  CHECK(h(s) == h(S("cached")));
}

TEST_CASE("tuples, frozensets, ranges and None hash as CPython's", "[hash]") {
  CHECK(h(T({})) == 5740354900026072187);
  CHECK(h(T({I(1), I(2)})) == -3550055125485641917);
  CHECK(h(T({I(1), T({I(2), I(3)})})) == 7267574591690527098);
  CHECK(h(T({I(-1)})) == 8078679518589016365);
  CHECK(h(T({S("a"), F(1.5)})) == -7544107753855020359);
  CHECK(h(make_set(true)) == 133146708735736);
  CHECK(h(set_of({I(1), I(2)}, true)) == -1826646154956904602);
  CHECK(h(set_of({set_of({I(1)}, true), set_of({I(2), I(3)}, true)}, true)) == -7613823993159379898);
  // Without an embedder None hashes 0xFCA86420 (CPython 3.12's constant);
  // these are CPython's hashes of the same tuples with such a None.
  CHECK(h(Value::none()) == 0xFCA86420);
  CHECK(h(T({Value::none(), I(1)})) == -439879632793865346);
  CHECK(h(make_range(0, 0, 1)) == 2676694398852732306);   // hash((0, None, None))
  CHECK(h(make_range(5, 6, 1)) == -7048428680432378585);  // hash((1, 5, None))
  CHECK(h(make_range(1, 10, 3)) == -9160968616009628824); // hash((3, 1, 3))
  CHECK_THROWS_WITH(value_hash(make_slice(I(1), I(2), Value::none())), "TypeError: unhashable type: 'slice'");
}

TEST_CASE("sets iterate in CPython's table order", "[sets]") {
  Value s = make_set();
  for (const char* w : {"apple", "banana", "cherry", "date", "egg", "fig", "grape", "kiwi"}) s.as<SetObj>()->add(S(w));
  CHECK(order(s) == "['banana', 'apple', 'cherry', 'fig', 'date', 'egg', 'grape', 'kiwi']");
  // A deletion leaves a dummy, which the next new element may take.
  s.as<SetObj>()->discard(S("cherry"));
  s.as<SetObj>()->discard(S("apple"));
  s.as<SetObj>()->add(S("lemon"));
  s.as<SetObj>()->add(S("apple"));
  CHECK(order(s) == "['banana', 'apple', 'fig', 'date', 'egg', 'grape', 'kiwi', 'lemon']");
  // pop() takes the first element from its finger on.
  std::string popped;
  for (int i = 0; i < 3; ++i) popped += repr(s.as<SetObj>()->pop()) + " ";
  CHECK(popped == "'banana' 'apple' 'fig' ");
  CHECK(order(s) == "['date', 'egg', 'grape', 'kiwi', 'lemon']");
  // Colliding ints: 35 lands on 3's entry first, 3 is sent to entry 0.
  CHECK(order(set_of({I(3), I(35), I(11), I(19), I(27)})) == "[35, 3, 11, 19, 27]");
  Value b = make_set();
  for (int i = 0; i < 40; ++i) b.as<SetObj>()->add(I(i));
  for (int i = 0; i < 40; i += 3) b.as<SetObj>()->discard(I(i));
  b.as<SetObj>()->add(I(100));
  CHECK(order(b) ==
        "[1, 2, 4, 5, 7, 8, 10, 11, 13, 14, 16, 17, 19, 20, 22, 23, 25, 26, 28, 29, 31, 32, 34, 35, 37, 38, 100]");
}

TEST_CASE("set operations take CPython's paths, so their results' order is CPython's", "[sets]") {
  CHECK(order(binary_op(BinOp::OR, set_of({S("x"), S("y"), S("z")}), set_of({S("w"), S("x")}))) ==
        "['y', 'x', 'z', 'w']");
  CHECK(order(binary_op(BinOp::AND, set_of({I(1), I(9), I(17), I(25)}), set_of({I(25), I(17), I(2)}))) ==
        "[25, 17]");
  Value r = make_set();
  for (int i = 0; i < 20; ++i) r.as<SetObj>()->add(I(i));
  CHECK(order(binary_op(BinOp::SUB, r, set_of({I(3), I(4)}))) ==
        "[0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]");
  CHECK(order(binary_op(BinOp::XOR, set_of({I(1), I(2), I(3)}), set_of({I(3), I(4), I(9)}))) == "[1, 2, 4, 9]");
  Value d = make_dict();
  for (const char* k : {"k1", "k2", "k3"}) d.as<DictObj>()->set(S(k), I(1));
  CHECK(order(set_from(d, false)) == "['k1', 'k3', 'k2']");
  CHECK(order(set_from(S("hello world"), false)) == "[' ', 'd', 'r', 'h', 'o', 'e', 'w', 'l']");
  CHECK(repr(set_of({set_of({I(1), I(2)}, true), set_of({I(3)}, true)}, true)) ==
        "frozenset({frozenset({3}), frozenset({1, 2})})");
}

TEST_CASE("an exact copy keeps the table; Python's copy may not", "[sets]") {
  // {0, 8} then 8 removed leaves a dummy; set(s) drops it, a clone keeps it.
  Value s = set_of({I(0), I(8), I(16)});
  s.as<SetObj>()->discard(I(8));
  Value clone = set_clone(s, false);
  CHECK(sets_same_layout(clone, s));
  CHECK(clone.as<SetObj>()->fill() == 3);
  Value copy = set_copy(s, false);
  CHECK(values_equal(copy, s));
  CHECK_FALSE(sets_same_layout(copy, s));
  CHECK(copy.as<SetObj>()->fill() == 2);
}

// The run budget (runtime/base/budget.h) the fuzz targets run programs under,
// and the sequence repetition that must not ask for more than it can hold.
#include <catch2/catch.hpp>

#include <chrono>

#include "interpreter/assembler.h"
#include "interpreter/vm.h"
#include "runtime/base/budget.h"
#include "runtime/semantics/value_ops.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {

// while True: try: raise ValueError except Exception: pass  -- a loop only
// a budget that no handler can catch ends.
const char* kCatchingLoop = R"(
.func main()
top:
    LOAD_GLOBAL ValueError
    RAISE 1
handler:
    POP_TOP
    JUMP top
.except top handler handler 0
.end
)";

// f(n) = f(n - 1) + f(n - 1): 2**40 calls, 40 deep, no backward jump.
const char* kRecursion = R"(
.func f(n)
    LOAD_FAST n
    LOAD_CONST 0
    COMPARE_OP ==
    POP_JUMP_IF_FALSE rec
    LOAD_CONST 1
    RETURN_VALUE
rec:
    LOAD_GLOBAL f
    LOAD_FAST n
    LOAD_CONST 1
    BINARY_OP -
    CALL 1
    LOAD_GLOBAL f
    LOAD_FAST n
    LOAD_CONST 1
    BINARY_OP -
    CALL 1
    BINARY_OP +
    RETURN_VALUE
.end

.func main()
    LOAD_GLOBAL f
    LOAD_CONST 40
    CALL 1
    RETURN_VALUE
.end
)";

// chain = (); s = ""; while True: s = s + 26 letters; chain = (chain, s):
// every version of s stays alive, so the run holds the sum of their sizes,
// quadratic in the steps (fuzz finding 33: 3 GB at the fuzz step budget).
const char* kGrowingStrChain = R"(
.func main()
  .locals chain s
    BUILD_TUPLE 0
    STORE_FAST chain
    LOAD_CONST ""
    STORE_FAST s
top:
    LOAD_FAST s
    LOAD_CONST "abcdefghijklmnopqrstuvwxyz"
    BINARY_OP +
    STORE_FAST s
    LOAD_FAST chain
    LOAD_FAST s
    BUILD_TUPLE 2
    STORE_FAST chain
    JUMP top
.end
)";

}  // namespace

TEST_CASE("a total byte budget stops a loop that keeps every version of a growing str", "[budget]") {
  auto p = interpreter::assemble(kGrowingStrChain, "chain.kbc");
  interpreter::VM vm;
  // Without the total the run goes to its 5,000 steps, holding 325 MB.
  ScopedBudget budget(5000, size_t(8) << 20, size_t(16) << 20);
  CHECK_THROWS_AS(vm.run(p, "main"), BudgetExceeded);
  CHECK(budget.steps_used() < 1200);  // 13 * n^2 bytes reach 16 MiB at n ~ 1,100
  CHECK(budget.steps_used() > 1000);
}

TEST_CASE("a step budget stops a loop that catches every error", "[budget]") {
  auto p = interpreter::assemble(kCatchingLoop, "loop.kbc");
  interpreter::VM vm;
  ScopedBudget budget(10000, 0);
  CHECK_THROWS_AS(vm.run(p, "main"), BudgetExceeded);
  CHECK(budget.steps_used() == 10001);
}

TEST_CASE("a step budget stops exponential recursion without loops", "[budget]") {
  auto p = interpreter::assemble(kRecursion, "rec.kbc");
  interpreter::VM vm;
  ScopedBudget budget(5000, 0);
  CHECK_THROWS_AS(vm.run(p, "main"), BudgetExceeded);
  CHECK(budget.steps_used() == 5001);
}

TEST_CASE("without a budget nothing is counted; after one, nothing is left over", "[budget]") {
  auto p = interpreter::assemble(R"(
.func main()
  .locals i
    LOAD_CONST 0
    STORE_FAST i
loop:
    LOAD_FAST i
    LOAD_CONST 100
    COMPARE_OP <
    POP_JUMP_IF_FALSE done
    LOAD_FAST i
    LOAD_CONST 1
    BINARY_OP +
    STORE_FAST i
    JUMP loop
done:
    LOAD_FAST i
    RETURN_VALUE
.end
)", "count.kbc");
  interpreter::VM vm;
  {
    ScopedBudget budget(1000, 0);
    CHECK(repr(vm.run(p, "main")) == "100");
    CHECK(budget.steps_used() == 102);  // the call, 100 backward jumps, and repr's one level
  }
  CHECK(repr(vm.run(p, "main")) == "100");  // the budget went with its scope
}

TEST_CASE("the memory budget makes a too-large allocation MemoryError", "[budget]") {
  ScopedBudget budget(0, 1 << 20);
  CHECK_THROWS_WITH(binary_op(BinOp::MUL, make_list({Value::integer(0)}), Value::integer(1 << 20)),
                    Catch::Contains("MemoryError: a list of 16777216 bytes is over this run's memory budget"));
  CHECK(repr(binary_op(BinOp::MUL, make_list({Value::integer(0)}), Value::integer(1000))).size() > 0);
}

TEST_CASE("repeating a sequence past what memory holds is MemoryError, an empty one is instant", "[budget]") {
  const Value huge = Value::integer(int64_t(1) << 62);
  for (const Value& seq : {make_list({Value::integer(0)}), make_tuple({Value::integer(1), Value::integer(2)}),
                           Value::str("ab")}) {
    INFO(repr(seq));
    try {
      binary_op(BinOp::MUL, seq, huge);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::MemoryError);
      CHECK(e.message().empty());  // CPython's MemoryError has no words either
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  CHECK(repr(binary_op(BinOp::MUL, make_list({}), huge)) == "[]");
  CHECK(repr(binary_op(BinOp::MUL, Value::str(""), huge)) == "''");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}

// Found by fuzz_vm (a timeout): a tuple holding one tuple twice, 64 deep, is
// 64 objects, but hashing or comparing it walks 2^64 nodes -- CPython too.
// Each level of a nested walk spends a step, so a budget ends it.
TEST_CASE("a step budget stops the walk over a tuple that shares its items", "[budget]") {
  auto dag = [] {
    Value t = Value::integer(1);
    for (int i = 0; i < 64; ++i) t = make_tuple({t, t});
    return t;
  };
  Value a = dag(), b = dag();  // equal, and no item of one is an item of the other
  ScopedBudget budget(100000, 0);
  CHECK_THROWS_AS(value_hash(a), BudgetExceeded);
  CHECK_THROWS_AS(values_equal(a, b), BudgetExceeded);
}

// Found by fuzz_compile_eager (OOM): formatting a tuple that holds one
// tuple twice doubles the string per level; a run's byte budget bounds
// strings as it bounds tensors and repeated sequences.
TEST_CASE("a str past the memory budget is MemoryError", "[budget]") {
  ScopedBudget budget(0, size_t(4) << 20);
  CHECK_NOTHROW(Value::str(std::string(size_t(3) << 20, 'x')));
  CHECK_THROWS_WITH(Value::str(std::string(size_t(5) << 20, 'x')),
                    Catch::Contains("a str of 5242880 bytes is over this run's memory budget"));
}

// Found by fuzz_vm (OOM): iterating a str made every character a str up
// front (100 bytes each for a 1-byte character); it is one at a time now,
// as in CPython, and len() counts without making any.
TEST_CASE("a str iterates its UTF-8 characters one at a time", "[budget]") {
  Value s = Value::str("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z");  // a é € 😀 z
  CHECK(length(s) == 5);
  Value it = get_iter(s);
  std::vector<std::string> got;
  Value c;
  while (it.as<IteratorObj>()->next(c)) got.push_back(c.as_str());
  CHECK(got == std::vector<std::string>{"a", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "z"});
  CHECK(!it.as<IteratorObj>()->next(c));  // exhausted stays exhausted
}

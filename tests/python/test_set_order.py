"""Sets iterate in CPython 3.11's order (issue 12).

kiln's SetObj is CPython's set table (runtime/value/value.h) and its hashes are
CPython's (runtime/base/hash.h), so a program sees its sets' elements in the
order CPython gives: list(s), str(s), s.pop(), a loop over s, the order of a
set operation's result. Each case runs on CPython (the oracle), on kiln's
VM (the translated KBC, uncompiled) and through kiln.compile with the eager
and llvm backends (the traced call and the cached call), and compares
results and the arguments' state *by order*: a set is compared as the list
of its elements as iterated, at any depth.

The generated test runs seeded random sequences of set operations and
compares the order after every step (KILN_SET_ORDER_PROGRAMS sets how many;
a few hundred by default).

PYTEST_DONT_REWRITE: the functions under test are translated as written."""
import os
import random
import sys

import pytest

import kiln
from kiln import _C
from kiln._compile import _as_kbc
from kiln._frontend import translate



# -- the harness -------------------------------------------------------------

def view(x):
    """x with every set replaced by the list of its elements in iteration
    order (and every float by its repr: -0.0 is not 0.0 here)."""
    if isinstance(x, (set, frozenset)):
        return (type(x).__name__, [view(i) for i in x])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [view(i) for i in x])
    if isinstance(x, dict):
        return ("dict", [(view(k), view(v)) for k, v in x.items()])
    if isinstance(x, float):
        return ("float", repr(x))
    return (type(x).__name__, repr(x))


def outcome(call, make_args):
    args = make_args()
    try:
        result = ("ok", view(call(*args)))
    except Exception as e:  # the program's own exception is part of its meaning
        result = ("raise", type(e).__name__, str(e))
    return result, view(list(args))


def run_vm(fn):
    kbc = _as_kbc(fn)
    assert kbc is not None, f"{fn.__name__} was not translated: {translate(fn)}"

    def call(*args):
        _C.sync_python_state()
        return _C.call(kbc, *args)
    return call


def check(fn, make_args=tuple, vm=True):
    """CPython's outcome; the VM's, eager's and llvm's (traced and cached)
    must equal it, sets compared by order. `make_args` builds fresh
    arguments for each run (the same way each time: a set's order depends on
    how it was built)."""
    expected = outcome(fn, make_args)
    runs = [("vm", run_vm(fn))] if vm else []
    for backend in ("eager", "llvm"):
        compiled = kiln.compile(fn, backend=backend)
        runs += [(backend, compiled), (backend + " (cached)", compiled)]
    for mode, call in runs:
        got = outcome(call, make_args)
        assert got == expected, f"{fn.__name__} on {mode}:\n  kiln:    {got!r}\n  CPython: {expected!r}"
    kiln.reset()
    return expected


# -- literals, displays, constructors ------------------------------------------

def literals():
    return ({3, 1, 2}, {3, 35, 4}, {35, 3}, {8, 16, 0, 24, 1}, {1, 9, 17, 25, 33, 41},
            {"apple", "banana", "cherry", "date", "egg"}, {-1, -2, 0, 1, 2},
            {(1, 2), (2, 1), None, 1.5, -0.0, float("inf"), -float("inf"), 2 ** 62, -(2 ** 63)})


def literal_built_at_run_time(a, b):
    return list({a, b, a + b, a * b, "x", None, (a,)}), list({b, a}), list({a, b, a})


def mixed_numbers():
    # 1, 1.0 and True are one element, the first added is kept; -1 and -2
    # hash alike (-2) and collide.
    one = 1
    s = {one, 1.0, True, 2, 2.0, -1, -2, 0, False, 0.0, -0.0}
    t = set()
    for x in (True, 1.0, 1, -2, -1, 0.0, False, 0, 1.5, -1.5):
        t.add(x)
    return s, t, [type(x).__name__ for x in t]


def comprehensions(n):
    return ({x * 7 % 13 for x in range(n)}, {str(x) for x in range(n)}, {(x, -x) for x in range(n) if x % 3},
            {w[::-1] for w in ["ab", "cd", "ef", "ba"]}, [x for x in {x * x for x in range(-n, n)}])


def constructors():
    d = {"k1": 1, "k2": 2, "k3": 3, "z": 0, 7: 7, (1, 2): 3}
    return (set(), frozenset(), set("hello world"), frozenset("mississippi"), set(d), set(d.keys()),
            set(d.values()), set(d.items()), set([5, 3, 5, 1, 3]), set((9, 8, 7)), set(range(-5, 40, 3)),
            set({4, 12, 20}), frozenset({4, 12, 20}), set(frozenset({"a", "b", "c"})))


def string_sets():
    words = ["", "a", "ab", "abc", "hello", "world", "caf\u00e9", "\u20ac", "x\U0001f600y", "A" * 30]
    s = set()
    for w in words:
        s.add(w)
    t = set(words[::-1])
    return s, t, str(s), sorted(s) == sorted(t)


def floats():
    s = {0.5, -0.5, 1.5, 2.5, 0.1, 1e300, -1e-300, 2.0 ** 61, 3.0}
    t = set()
    for x in (-0.0, 0.0, 1e16, 1e16 + 2, float("inf"), -float("inf"), 0.25, 100.0):
        t.add(x)
    u = set()
    for x in (1.5, 0.5, 3.0, 2.25, 7.0, -1.5, 0.1, 1e16):
        u.add(x)
    return list(s), list(t), list(u)


def tuples_and_frozensets():
    s = {(1,), (1, 2), (2, 1), ((1, 2), 3), ("a", 1.5), (None, None), ()}
    inner = {frozenset({1, 2}), frozenset({2, 1, 3}), frozenset(), frozenset({frozenset({1})})}
    outer = frozenset({frozenset(inner), frozenset({frozenset({"x"})})})
    return s, inner, outer, {frozenset({1, 2}), frozenset({3})}


def big_ints(two):
    # Past int64 ints are Python's own (kiln cannot spell them as constants).
    return list({two ** 64, two ** 64 + 1, -(two ** 70), two ** 61 - 1, two ** 61, 10 ** (15 * two), 3}), \
        [hash(x) for x in (two ** 64, two ** 61)]


def none_in_sets():
    s = {None, 1, 2, 3, "a"}
    t = set()
    for x in ("a", None, 7, (None,), (1, None)):
        t.add(x)
    return list(s), list(t), s, t


@pytest.mark.parametrize("fn, make_args", [
    (literals, tuple),
    (literal_built_at_run_time, lambda: (3, 35)),
    (mixed_numbers, tuple),
    (comprehensions, lambda: (20,)),
    (constructors, tuple),
    (string_sets, tuple),
    (floats, tuple),
    (tuples_and_frozensets, tuple),
    (big_ints, lambda: (2,)),
    (none_in_sets, tuple),
], ids=lambda x: getattr(x, "__name__", ""))
def test_displays_and_elements(fn, make_args):
    check(fn, make_args)


# -- element methods -----------------------------------------------------------

def add_discard_remove():
    s = {3, 35, 11, 19, 27}
    log = [list(s)]
    s.discard(35)
    log.append(list(s))
    s.add(43)  # takes the dummy 35 left
    log.append(list(s))
    s.remove(3)
    s.add(3)
    s.add(51)
    log.append(list(s))
    s.discard(99)
    log.append(str(s))
    return log


def remove_missing():
    s = {1, 2}
    s.remove(3)


def pops():
    s = set()
    for x in (8, 16, 0, 24, 1, 40, 5):
        s.add(x)
    out = [s.pop(), s.pop()]
    s.add(16)
    out.append(s.pop())
    while s:
        out.append(s.pop())
    s.add(1)
    s.add(9)
    out.append(s.pop())  # the finger survives emptying the set
    return out, s


def pop_empty():
    return set().pop()


def clear_and_reuse():
    s = set(range(100))
    s.pop()
    s.clear()  # back to the small table; the finger stays
    for x in (9, 1, 17, 3):
        s.add(x)
    return list(s), s.pop(), s


def dummies_reused():
    s = set()
    for i in range(6):
        s.add(i * 8)
    for i in range(0, 6, 2):
        s.discard(i * 8)
    log = [list(s)]
    for x in (64, 8 * 2, 3, 72):
        s.add(x)
        log.append(list(s))
    return log


def loop_changes_same_size():
    # The iterator reads the table live: a change that keeps the size is
    # seen (elements moved ahead are met again), as in CPython.
    s = {1, 2, 3}
    out = []
    for x in s:
        out.append(x)
        if len(out) > 20:
            break
        s.discard(x)
        s.add(x + 3)
    return out, list(s)


def loop_changes_size():
    s = {1, 2, 3}
    for x in s:
        s.add(x + 8)


def loop_with_graph_break():
    s = {3, 35, 11, 19, 27}
    out = []
    for x in s:
        print(end="")  # a graph break in the loop: the rest continues on the VM
        out.append(x)
    return out


@pytest.mark.parametrize("fn", [add_discard_remove, remove_missing, pops, pop_empty, clear_and_reuse, dummies_reused,
                                loop_changes_same_size, loop_changes_size, loop_with_graph_break],
                         ids=lambda f: f.__name__)
def test_element_methods(fn):
    check(fn)


# -- operators and methods -----------------------------------------------------

def operators():
    a = {1, 2, 3, 9, 17, 33, "x"}
    b = {3, 4, 17, 25, "y", "x"}
    fa = frozenset(a)
    return [a | b, b | a, a & b, b & a, a - b, b - a, a ^ b, b ^ a, fa | b, b | fa, fa & b, fa - b, fa ^ b,
            a | a, a & a, a - a, a ^ a, a | set(), set() | b, a < b, a <= a, b >= {3}, a > fa, a == fa]


def methods():
    a = {1, 2, 3, 9, 17, 33, "x"}
    b = [3, 4, 17, 25, "y", "x", 3]
    d = {17: 0, "x": 1, 40: 2}
    return [a.union(b, "ab", d), a.intersection(b), a.intersection(b, d), a.intersection(), a.difference(b),
            a.difference(d, "x"), a.difference(), a.symmetric_difference(b), a.symmetric_difference(d),
            a.copy(), frozenset(a).copy(), frozenset(a).union(b), frozenset(a).intersection(b),
            a.issubset(b), a.issuperset([1, 2]), a.isdisjoint(b), a.isdisjoint("zz"), a.union(a, a)]


def updates():
    s = {1, 2, 3, 9, 17, 33, "x"}
    log = []
    s.update([40, 48, "q"], {56, 1}, "ab", {"k": 1})
    log.append(list(s))
    s.intersection_update([1, 2, 40, 48, 56, "q", "a", "b", "k", 999], {1, 2, 40, 48, "q", "a", "k"})
    log.append(list(s))
    s.difference_update({2}, [48, "zz"])
    log.append(list(s))
    s.symmetric_difference_update([1, 5, 13, "a", "new"])
    log.append(list(s))
    s.symmetric_difference_update({"new": 0, 77: 1})
    log.append(list(s))
    s.intersection_update()
    log.append(list(s))
    return log


def inplace_operators():
    s = {1, 2, 3, 9, 17, 33}
    alias = s
    t = {3, 4, 17, 25, 41}
    s |= t
    log = [list(s)]
    s &= {1, 3, 4, 17, 25, 41, 57}
    log.append(list(s))
    s -= {3}
    log.append(list(s))
    s ^= {4, 5, 6, 13}
    log.append(list(s))
    s |= frozenset({100, 36})
    log.append(list(s))
    s ^= s
    log.append(list(s))
    s |= {8, 0}
    log.append(list(s))
    f = frozenset({1, 2})
    g = f
    f |= {3}
    return log, alias is s, s, f, g


def difference_strategies():
    # len(so) >> 2 > len(other): copy and remove, else iterate so; an other
    # 8 times larger is intersected first; a quarter dummies resize away.
    big = set(range(0, 200, 3))
    small = {3, 9, 600}
    huge = set(range(0, 2000))
    s = set(range(40))
    s -= set(range(0, 40, 2))
    t = set(range(64))
    t.difference_update(range(20))
    return big - small, small - big, big - huge, big.difference(small, {6}), s, list(t), t.pop()


@pytest.mark.parametrize("fn", [operators, methods, updates, inplace_operators, difference_strategies],
                         ids=lambda f: f.__name__)
def test_operations(fn):
    check(fn)


# -- resizes ---------------------------------------------------------------------

def grow(n, step):
    s = set()
    for i in range(0, n * step, step):
        s.add(i)
    return s


@pytest.mark.parametrize("n", [4, 5, 8, 18, 19, 32, 76, 77, 128, 300])
def test_resizes_through_adds(n):
    # Values past the table size wrap around: the order shows the size.
    check(lambda n: list(grow(n, 37)), lambda: (n,))


def test_resize_past_50000_elements():
    # set_add_entry grows a table 4x, and 2x once it holds more than 50000:
    # 80000 elements spread over 400000 values show which table they got.
    def big(n):
        s = set(range(0, 5 * n, 5))
        head = list(s)[:200]
        s.discard(5)
        s.add(7)
        return head, list(s)[-50:], len(s)
    check(big, lambda: (80000,))


def test_large_string_set():
    def strings(n):
        s = set(map(str, range(n)))
        for i in range(0, n, 7):
            s.discard(str(i))
        s.update(["new", "words", "here"])
        return list(s)
    check(strings, lambda: (700,))


# -- sets crossing the seam ---------------------------------------------------------

def iterate_callers_set(s):
    return list(s), [x for x in s], str(s), tuple(s), list(s | {100, 4}), list(s - {3}), list(set(s))


def mutate_callers_set(s):
    s.discard(35)
    s.add(43)
    s |= {1, 9}
    return s.pop()


def return_new_set(s):
    t = set(s)
    t.add("extra")
    return t, s | {100}, frozenset(s)


def make_callers_set():
    s = set()
    for x in (3, 35, 11, "a", "b", 19, 27, (1, 2)):
        s.add(x)
    s.discard(11)
    return (s,)


@pytest.mark.parametrize("fn", [iterate_callers_set, mutate_callers_set, return_new_set], ids=lambda f: f.__name__)
def test_callers_sets_keep_their_order(fn):
    check(fn, make_callers_set)


def test_callers_set_of_tensors_iterates_in_its_own_order():
    # Python hashes these by their objects' addresses, kiln by its own: the
    # set has no exact kiln table, so compiled code reads it through Python
    # (opaque to the tracer), in the set's own order.
    ts = [kiln.ones(1) * float(i) for i in range(12)]

    def f(s):
        return [t for t in s], [t + 0 for t in s]
    for s in (set(ts), frozenset(ts)):
        for backend in ("eager", "llvm"):
            compiled = kiln.compile(f, backend=backend)
            for _ in range(2):
                same, values = compiled(s)
                assert all(a is b for a, b in zip(same, list(s))) and len(same) == len(s)
                assert [v.numpy().tolist() for v in values] == [t.numpy().tolist() for t in s]


def same_elements_other_table(s):
    return list(s), list(s | {4})


def test_guards_see_a_sets_table():
    # {3, 35} and {35, 3} are equal and iterate differently: a trace made for
    # one must not run for the other (the guard compares tables).
    def two(first, second):
        s = set()
        s.add(first)
        s.add(second)
        return s
    compiled = kiln.compile(same_elements_other_table, backend="eager")
    for args in ((3, 35), (35, 3), (3, 35)):
        assert compiled(two(*args)) == same_elements_other_table(two(*args))
    assert compiled(two(3, 35)) != compiled(two(35, 3))


@kiln.disable
def python_adds(s):
    for x in ("p", "q", 67, 75):
        s.add(x)
    s.discard(3)


def hand_to_python():
    # A set made in compiled code, mutated by Python code: the Python set
    # and the kiln set are one object with one table (container_mirror).
    s = {3, 35, 11}
    s.add("z")
    python_adds(s)
    s.add(83)
    return list(s), s


def test_set_made_in_kiln_mutated_by_python():
    # Compiled calls only: _C.call (the VM run) keeps no mirrors, so Python
    # gets a copy there.
    check(hand_to_python, vm=False)


def test_frozenset_constant_keeps_its_table():
    # CPython's compiler made {3, 35, 4}'s constant with 35 on 3's entry;
    # adding 3, 35, 4 in order would put 3 there. The KBC literal says the
    # table (frozenset[8]({...})).
    def f():
        return list({3, 35, 4}), list({1, 33, 17, 9, 25}), "a" in {"a", "b", "c", "d"}
    assert "frozenset[8](" in translate(f).text
    check(f)


# -- generated programs -----------------------------------------------------------

POOL = [0, 1, 2, 3, 5, 8, 9, 16, 17, 24, 33, 35, 64, -1, -2, 1.5, -0.0, 2.0, True, None,
        "a", "b", "ab", "key", "zz", "\u20ac", (1, 2), (2, 1), (), frozenset({1}), "BIG"]


def gen_program(seed, steps=30):
    """The source of `def prog(log, two):` doing `steps` random set operations on
    three sets and logging the order of the changed set after each."""
    r = random.Random(seed)

    def elem():
        x = r.choice(POOL)
        return "big" if x == "BIG" else repr(x)  # big: 2 ** 64, a Python int

    def elems(k):
        return "[" + ", ".join(elem() for _ in range(k)) + "]"

    def other():
        k = r.randint(0, 6)
        return r.choice([f"set({elems(k)})", f"frozenset({elems(k)})", r.choice(["a", "b", "c"]),
                         "{" + ", ".join(elem() for _ in range(max(k, 1))) + "}"])

    def iterable():
        k = r.randint(0, 6)
        return r.choice([elems(k), other(), "{" + ", ".join(f"{elem()}: {i}" for i in range(k)) + "}",
                         repr("".join(r.choice("abcxyz") for _ in range(k)))])

    lines = ["def prog(log, two):", "    big = two ** 64", "    a = set()", "    b = {3, 35, 'a'}", "    c = set(range(0, 40, 8))"]
    for _ in range(steps):
        s = r.choice(["a", "b", "c"])
        k = r.randrange(22)
        if k < 5:
            for _ in range(r.randint(1, 4)):
                lines.append(f"    {s}.add({elem()})")
        elif k == 5:
            lines.append(f"    {s}.discard({elem()})")
        elif k == 6:
            x = elem()
            lines.append(f"    if {x} in {s}:\n        {s}.remove({x})")
        elif k == 7:
            lines.append(f"    if {s}:\n        log.append({s}.pop())")
        elif k == 8:
            lines.append(f"    {s}.update({iterable()}, {iterable()})")
        elif k == 9:
            lines.append(f"    {s} |= {other()}")
        elif k == 10:
            lines.append(f"    {s} &= {other()}")
        elif k == 11:
            lines.append(f"    {s} -= {other()}")
        elif k == 12:
            lines.append(f"    {s} ^= {other()}")
        elif k == 13:
            op = r.choice(["|", "&", "-", "^"])
            lines.append(f"    {s} = {r.choice(['a', 'b', 'c'])} {op} {other()}")
        elif k == 14:
            m = r.choice(["union", "intersection", "difference"])
            lines.append(f"    {s} = {s}.{m}({iterable()}, {iterable()})")
        elif k == 15:
            m = r.choice(["intersection_update", "difference_update"])
            lines.append(f"    {s}.{m}({iterable()})")
        elif k == 16:
            lines.append(f"    {s}.symmetric_difference_update({iterable()})")
        elif k == 17:
            lines.append(f"    {s} = {s}.symmetric_difference({iterable()})")
        elif k == 18:
            lines.append(f"    {s} = set({r.choice(['a', 'b', 'c'])}) if {r.random() < 0.5} else "
                         f"{r.choice(['a', 'b', 'c'])}.copy()")
        elif k == 19:
            lines.append(f"    {s} = {{x for x in {r.choice(['a', 'b', 'c'])} if x != {elem()}}}")
        elif k == 20:
            lines.append(f"    {s} = {{*{r.choice(['a', 'b', 'c'])}, *{iterable()}}}")
        else:
            lines.append(f"    if len({s}) > 6:\n        {s}.clear()")
        lines.append(f"    log.append(list({s}))")
    lines.append("    return a, b, c, str(a), frozenset(c)")
    return "\n".join(lines) + "\n"


N_PROGRAMS = int(os.environ.get("KILN_SET_ORDER_PROGRAMS", "200"))


@pytest.mark.parametrize("seed", range(N_PROGRAMS))
def test_generated_set_programs(seed):
    source = gen_program(seed)
    ns = {}
    exec(compile(source, f"<set program {seed}>", "exec"), ns)
    prog = ns["prog"]
    try:
        check(prog, lambda: ([], 2))
    except AssertionError as e:
        raise AssertionError(f"{e}\nprogram (seed {seed}):\n{source}") from None

"""Generators inside the trace (Dynamo's LocalGeneratorObjectVariable): a
call of a Python generator function in compiled code makes a generator
whose body kiln traces lazily, one item per step of whoever iterates it (a
for loop, list(), zip(), next(), a class's __iter__ such as
collections.abc.Sequence's). What the body reads is read when CPython
would read it, its effects land in CPython's order, and a generator never
reaches the code CPython runs after a break: the trace stops before the
step that made it, and CPython makes it.

CPython is the oracle (differential.check: results, exceptions, printed
output, the arguments' state); explain says what stayed in one graph.
"""
import sys
from collections.abc import Sequence

import numpy as np
import pytest

import kiln
from differential import check



def x0():
    return kiln.from_numpy(np.arange(4, dtype=np.float32))


def explained(fn, *args):
    return kiln.explain(kiln.compile(fn))(*args)


def one_graph(fn, *args):
    e = explained(fn, *args)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


def scaled(x, n):
    for i in range(n):
        yield x * i


def with_return(x):
    yield x
    yield x + 1
    return "done"


def reads_late(items):
    for v in items:
        yield v


def counting(log):
    log.append("start")
    for i in range(3):
        log.append(f"yield {i}")
        yield i
    log.append("end")


def raises_after(x, n):
    for i in range(n):
        yield x + i
    raise ValueError("ran out")


def stops_itself(x):
    yield x
    raise StopIteration  # PEP 479: a RuntimeError for the consumer


class Rows(Sequence):
    """A Sequence without __iter__: collections.abc's, a generator that
    stops on IndexError (transformers' per-layer config view)."""

    def __init__(self, base, n):
        self.base = base
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i < 0 or i >= self.n:
            raise IndexError("list index out of range")
        return self.base * (i + 1)


def loop_sum(x):
    total = x
    for y in scaled(x, 3):
        total = total + y
    return total


def into_list(x):
    return sum(list(scaled(x, 4)))


def zipped(x):
    names = ["a", "b"]
    return {k: v for k, v in zip(names, scaled(x, 5))}


def next_and_default(x):
    g = with_return(x)
    a = next(g)
    b = next(g)
    c = next(g, None)
    return a, b, c


def sees_appends_made_after_it(x):
    items = [x]
    g = reads_late(items)
    items.append(x * 2)
    return list(g)


def interleaved_effects(log):
    out = []
    for i in counting(log):
        log.append(f"got {i}")
        out.append(i)
    return out


def prints_in_order(x):
    def noisy(n):
        for i in range(n):
            print("make", i)
            yield x + i

    for y in noisy(2):
        print("use")
    return x


def sequence_iteration(x):
    rows = Rows(x, 3)
    out = [r for r in rows]
    pairs = list(zip(["p", "q"], rows))
    return out, pairs


def collect_until_error(x):
    out = []
    try:
        for v in raises_after(x, 2):
            out.append(v)
    except ValueError as e:
        out.append(str(e))
    return out


def consumer_catches(x):
    # (the handler is an inlined frame's: the compiled frame's own
    # handlers are entered only by CPython, after a break)
    return collect_until_error(x)


def escapes(x):
    return list(raises_after(x, 2))


def pep_479(x):
    return list(stops_itself(x))


def returned(x):
    return scaled(x, 3)


def held_across_a_break(x):
    g = scaled(x, 3)
    first = next(g)
    print("break here")  # print is a break: the generator is live across it
    return first, list(g)


def exhausted_twice(x):
    g = scaled(x, 2)
    return list(g), list(g)


@pytest.mark.parametrize("fn", [loop_sum, into_list, zipped, next_and_default, sees_appends_made_after_it,
                                sequence_iteration, consumer_catches])
def test_generators_agree_with_cpython_in_one_graph(fn):
    check(fn, x0())
    one_graph(fn, x0())


def test_the_body_runs_as_the_consumer_advances_it():
    check(interleaved_effects, [])
    check(prints_in_order, x0())


@pytest.mark.parametrize("fn", [escapes, pep_479, returned, held_across_a_break, exhausted_twice])
def test_what_kiln_cannot_keep_in_the_graph_agrees_with_cpython(fn):
    check(fn, x0())


def test_a_generator_returned_is_cpythons_own():
    out = kiln.compile(returned)(x0())
    assert type(out).__name__ == "generator"
    assert [float(t.numpy()[1]) for t in out] == [0.0, 1.0, 2.0]


def test_a_generator_held_across_a_break_is_made_by_cpython():
    # The trace stops before the call that made it: one graph before, and
    # the break names the generator.
    e = explained(held_across_a_break, x0())
    assert e.graph_break_count >= 1
    assert "generator" in str(e)


def test_a_generator_functions_own_frame_is_left_to_cpython():
    gen = kiln.compile(scaled)
    assert [float(t.numpy()[1]) for t in gen(x0(), 2)] == [0.0, 1.0]

"""Recursion in compiled frames (issue 27: transformers' configs walk their
nested dicts recursively inside T5's, BART's and Marian's forwards).

A bounded recursion is inlined into the graph (the same code on the same
self, up to interpreter::kMaxRecursiveInlines frames of it); a deeper one is
left to CPython at its outermost call. Inlined levels take no Python frame
when the graph runs, so a call too close to the recursion limit for the
frames the graph stands for runs the frame on CPython, which raises
RecursionError where eager raises it.
"""
import sys

import pytest

import kiln

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def fresh():
    kiln.reset()
    yield
    kiln.reset()


def count_leaves(d):
    n = 0
    for v in d.values():
        if isinstance(v, dict):
            n += count_leaves(v)
        else:
            n += 1
    return n


def scale_by_config(x, cfg):
    return x * count_leaves(cfg)


def power(t, k):
    if k == 0:
        return t * 1
    return power(t, k - 1) * t


def test_a_recursive_walk_over_a_nested_config_is_one_graph():
    cfg = {"a": 1, "b": {"c": 2, "d": {"e": 3, "f": {"g": 4}}}, "h": 5}
    x = torch.randn(4)
    compiled = kiln.compile(scale_by_config)
    assert torch.equal(compiled(x, cfg), scale_by_config(x, cfg))
    e = kiln.explain(kiln.compile(scale_by_config))(x, cfg)
    assert (e.graph_count, e.graph_break_count) == (1, 0), e.break_reasons


def test_a_recursion_on_tensors_within_the_bound_is_one_graph():
    def f(x):
        return power(x + 1, 5) - 1

    x = torch.randn(3)
    assert torch.allclose(kiln.compile(f)(x), f(x))
    e = kiln.explain(kiln.compile(f))(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), e.break_reasons


def test_a_recursion_past_the_bound_breaks_at_its_outermost_call_and_answers_as_eager():
    def f(x):
        return power(x + 1, 20) - 1

    x = torch.rand(3) + 0.5
    assert torch.allclose(kiln.compile(f)(x), f(x))
    e = kiln.explain(kiln.compile(f))(x)
    assert e.graph_break_count >= 1
    assert "recursive call of power" in e.break_reasons[0]["reason"], e.break_reasons


def deep_inline(x, n):
    # n + 1 frames of deep_inline on the stack in eager; the graph of a
    # call with n < the bound takes none of them
    if n == 0:
        return x + 1
    return deep_inline(x, n - 1) * 1


def entry(x):
    return deep_inline(x, 6)


def at_depth(k, fn, x):
    if k == 0:
        return fn(x)
    return at_depth(k - 1, fn, x)


def raises_at(fn, k, x):
    try:
        at_depth(k, fn, x)
        return False
    except RecursionError:
        return True


def first_depth_that_raises(fn, x, lo, hi):
    # raising is monotone in the depth: bisect for the first k that raises
    assert not raises_at(fn, lo, x) and raises_at(fn, hi, x)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if raises_at(fn, mid, x):
            hi = mid
        else:
            lo = mid
    return hi


def test_recursion_error_comes_where_eager_raises_it_not_later():
    x = torch.randn(2)
    compiled = kiln.compile(entry)
    assert torch.equal(compiled(x), entry(x))  # compiled at a shallow depth: one graph, 7 inlined frames
    e = kiln.explain(kiln.compile(entry))(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), e.break_reasons
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        eager = first_depth_that_raises(entry, x, 0, 400)
        kiln_k = first_depth_that_raises(compiled, x, 0, 400)
    finally:
        sys.setrecursionlimit(saved)
    # kiln.compile's wrapper takes a frame or two of its own, as any
    # decorator does; the graph's inlined frames must not let a call
    # through that eager could not make (before: 6 levels deeper)
    assert eager - 3 <= kiln_k <= eager, (eager, kiln_k)
    assert torch.equal(compiled(x), entry(x))  # and the entry is still used away from the limit

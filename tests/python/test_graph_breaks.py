"""Program state across graph breaks, checked against CPython: closure
cells, exceptions in nested try blocks, containers the caller owns. Each
case is the minimal form of a difference the random-program generator
(progen.py) found.

PYTEST_DONT_REWRITE: the functions under test are translated as written."""
import sys

import numpy as np
import pytest

import kiln
from differential import check



# -- closure cells cross a break as the very cells ----------------------------

def nonlocal_after_break(a):
    n = 16

    def g(p):
        nonlocal n
        n += p
    print(end="")  # the break: g is rebuilt over the residual's cell
    g(-4)
    return n


def test_nonlocal_write_after_a_break_is_seen():
    check(nonlocal_after_break, 1)


def closure_made_before_break(a):
    log = []
    n = 10

    def g(p):
        nonlocal n
        log.append(n)
        n += p
    print(end="")
    g(a)
    g(a)
    return log, n


def test_closure_made_before_a_break_shares_the_frames_cells():
    check(closure_made_before_break, 3)


def inlined_store_numbering(d):
    log = []
    n = 10

    def g(p):  # g's cells are (log, n): n is its cell 1, the frame's cell 2
        nonlocal n
        log.append(n)
        n += p
    r = len(d) in {18, g(3)}
    x = d | ({'a': 1} | d)  # breaks in the resumed frame, after g's store
    return log, n, r, x


def test_store_by_an_inlined_function_goes_to_the_frames_cell():
    check(inlined_store_numbering, {'zz': 5})


def cell_value_read_before_list_cleared(a):
    log = []
    a += ()  # a break: the rest runs in a resume function over the cells
    v, *rest = a
    a.clear()
    log.append(print(end=""))

    def g():
        return v
    return log, v, g()


def test_cell_value_is_read_before_the_list_it_came_from_is_cleared():
    check(cell_value_read_before_list_cleared, [8, 9])


def empty_cell_at_break(a):
    print(end="")
    n = a * 2  # bound after the break: the resume's cell starts empty

    def g():
        return n
    return g()


def test_cell_bound_after_the_break():
    check(empty_cell_at_break, 4)


def make_counter():
    n = 0

    def bump():
        nonlocal n
        print(end="")
        n += 1
        return n
    return bump


def test_two_closures_of_one_code_keep_their_own_cells():
    # Entries are cached per code object: the second closure hits the
    # first one's entry (same guards) and must still run over its own cell.
    first = kiln.compile(make_counter(), backend="eager")
    second = kiln.compile(make_counter(), backend="eager")
    assert [first(), second(), first(), second(), second()] == [1, 1, 2, 2, 3]


# -- a caller's set is one object through the trace ----------------------------

def set_alias_across_break(s):
    a = s
    s &= {1}  # breaks (a mutation of the caller's set): the rest is resumed
    print(end="")
    return a is s, s, a


def set_two_names(s, t):
    print(end="")
    return s is t, s == t


def test_set_alias_survives_a_break():
    check(set_alias_across_break, {1, 2})


def test_two_sets_and_one_set_passed_twice():
    one = {3}
    check(set_two_names, {3}, {3})
    check(set_two_names, one, one)


# -- effects before an error are kept ------------------------------------------

G_DICT = {"a": 1}


class Greeter:
    def hello(self, s):
        return s


def effects_then_attribute_error(obj):
    G_DICT["k"] = 4
    obj.hello("ab")  # a break (a Python method): the rest is resumed
    G_DICT.clear()
    return "x".nope()  # raises after the clear, which must have happened


def test_effects_before_an_attribute_error_are_replayed():
    check(effects_then_attribute_error, Greeter(), globals_={"G_DICT": {"a": 1}})


# -- CPython's names in messages -----------------------------------------------

def arity_messages(a):
    def g(x, y):
        return x + y

    out = []
    for call in (lambda: g(a), lambda: g(a, a, a), lambda: [q for q in (1,)][0](1)):
        try:
            call()
        except TypeError as e:
            out.append(str(e))
    return out


def test_nested_function_messages_use_the_qualname():
    check(arity_messages, 1)


def tensor_stored_in_a_cell_after_break(t, a):
    a[1:] = [0]  # a break: the rest runs in a resume function over the cells
    t2 = t * t   # a cell's new content is a graph output

    def g():
        return t2
    return g()


def test_a_cell_stored_after_a_break_holds_the_graphs_tensor():
    check(tensor_stored_in_a_cell_after_break, kiln.ones(3), [1, 2])


def lambda_reads_nonlocal_changed_after_break(a):
    h = lambda x: a * 3  # noqa: E731  (made before the break: its cell is the frame's)
    print(end="")
    a ^= a << 7  # stored through the resumed frame's name of the cell
    return h(0)


def test_a_cell_reached_through_two_functions_is_one_tracker():
    check(lambda_reads_nonlocal_changed_after_break, 3)


# -- a loop's iterator crosses a break as Python's live list iterator ---------

def appends_while_looping(a):
    out = []
    for v in a:
        print(end="")  # the break: the loop goes on over the same list
        out.append(v)
        if v < 3:
            a.append(v + 10)  # CPython's list iterator sees these
    return out


def removes_while_looping(a):
    out = []
    for v in a:
        print(end="")
        out.append(v)
        if len(a) > 2:
            a.pop()  # the loop ends early, as on CPython
    return out


def loop_over_a_list_made_here(a):
    items = [a, a + 1]
    out = []
    for v in items:
        print(end="")
        if v == a:
            items.append(v * 10)
        out.append(v)
    return out, items


def iterator_held_in_a_local(a):
    it = iter(a)
    out = []
    for v in it:  # the local and the loop share one iterator
        print(end="")
        out.append(v)
        if v == 1:
            out.append(next(it))
    return out


def iterator_exhausted_then_list_grows(a):
    it = iter(a)
    first = list(it)
    print(end="")
    a.append(99)
    return first, list(it)  # an exhausted list iterator stays exhausted


def tensor_loop_with_a_break(x, ws):
    for w in ws:
        x = x * w
        print(end="")
        x = x + 1
    return x


@pytest.mark.parametrize("fn", [appends_while_looping, removes_while_looping, iterator_held_in_a_local,
                                iterator_exhausted_then_list_grows])
def test_a_list_iterator_across_a_break_is_live(fn):
    check(fn, [0, 1, 2, 5, 7])


def test_a_list_made_in_the_trace_is_iterated_live_across_a_break():
    check(loop_over_a_list_made_here, 3)


def test_a_tensor_loop_across_breaks_matches_and_stays_within_the_cache():
    # The resumed loop is specialized on the iterator's position (a Python
    # int): one entry per position reached, within cache_size_limit here.
    check(tensor_loop_with_a_break, kiln.ones(3), [kiln.full((3,), 2.0), kiln.full((3,), 3.0)])


# -- a dict's or set's iterator crosses as the real one: it raises if the size
# changes after the break, and reads values as they are then ----------------

def dict_grows_after_break(d):
    out = []
    for k, v in d.items():
        print(end="")
        out.append((k, v))
        d["new" + k] = 1  # RuntimeError at the next step, as on CPython
    return out


def dict_value_changed_after_break(d):
    out = []
    for k, v in d.items():
        print(end="")
        out.append((k, v))
        d["b"] = 100  # the loop reads the new value when it gets there
    return out


def dict_value_changed_in_the_trace(d):
    out = []
    for k, v in d.items():  # no break: the traced loop reads values as they are
        d["c"] = 100
        out.append(v)
    return out


def dict_keys_loop_across_break(d):
    out = []
    for k in d:
        print(end="")
        out.append(k)
    return out


def view_made_before_the_dict_grows(d):
    v = d.items()
    d["z"] = 3  # a view is live: iterating it later sees "z", and no error
    return [kv for kv in v]


def set_grows_after_break(s):
    out = []
    for x in s:
        print(end="")
        out.append(x)
        s.add(x + 100)
    return out


@pytest.mark.parametrize("fn", [dict_grows_after_break, dict_value_changed_after_break, dict_value_changed_in_the_trace,
                                dict_keys_loop_across_break,
                                view_made_before_the_dict_grows])
def test_a_dict_iterator_across_a_break_is_the_real_one(fn):
    check(fn, {"a": 1, "b": 2, "c": 3})


def test_a_set_iterator_across_a_break_raises_when_the_set_grows():
    check(set_grows_after_break, {1})


def set_loop_across_breaks(s):
    out = []
    for x in s:  # the iterator's position is a table slot; it crosses as a count of items
        print(end="")
        out.append(x)
    return out


def set_loop_held_in_a_local_across_a_break(s):
    it = iter(s)
    first = next(it)
    print(end="")
    return first, list(it)


@pytest.mark.parametrize("s", [{5, 1, 33, 17, 2}, {-1, -2, 40, 8, 16, 24}, {"a", "bc", "d"}])
def test_a_set_loop_across_breaks_keeps_cpythons_order(s):
    check(set_loop_across_breaks, s)
    check(set_loop_held_in_a_local_across_a_break, s)


def set_same_size_change_after_break(s):
    out = []
    for x in s:
        print(end="")
        out.append(x)
        if x == 1:
            s.discard(9)  # same size: no error, and the loop sees 5 where CPython's table puts it
            s.add(5)
    return out


def test_a_set_loop_sees_a_same_size_change_after_a_break():
    check(set_same_size_change_after_break, {1, 9, 3})


# -- explain names what broke inside an inlined function ----------------------

class _Noisy(kiln.nn.Module):
    def forward(self, x):
        y = x * 2
        print("forward")
        return y + 1


def _calls_noisy(m, x):
    return m(x) - 1


def test_a_break_inside_an_inlined_function_names_its_cause(capsys):
    """The caller's break says what broke inside the callee (the callee may
    never be traced on its own, e.g. a torch module's forward handed to
    torch), beside the callee's own break when it is."""
    e = kiln.explain(_calls_noisy)(_Noisy(), kiln.ones(3))
    first = e.break_reasons[0]
    assert first["id"] == "inlined_break"
    assert "print()" in first["reason"] and "_Noisy.forward" in first["reason"], first
    assert e.break_reasons[1]["id"] == "side_effect_builtin"


# -- a class made inside a function: its method's closure is guarded ---------

def test_a_module_made_in_a_function_reads_its_closure_in_one_graph():
    """A module class defined inside a function whose forward reads the
    function's locals (an imported module, a scale): the forward was found
    on the class, without a source, and broke ("a closure reached without a
    source"). Its cells are now guarded through the function itself
    (K['...forward'].__closure__[i]), so it compiles in one graph."""
    def make():
        scale = 2.0
        np_like = kiln

        class Scaled(kiln.nn.Module):
            def forward(self, x):
                return np_like.relu(x) * scale

        return Scaled()

    m = make()
    x = kiln.randn(4)
    e = kiln.explain(m)(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
    assert "K['test_a_module_made_in_a_function_reads_its_closure_in_one_graph.<locals>.make.<locals>.Scaled.forward']" \
        ".__closure__" in str(e), str(e)
    f = kiln.compile(m)
    np.testing.assert_allclose(np.asarray(f(x)), np.maximum(np.asarray(x), 0) * 2.0)

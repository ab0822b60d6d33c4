"""A dict subclass read through dict's own methods (Dynamo's
UserDefinedDictVariable, for reads): `super().get(key)`,
`super().__getitem__(key)`, `super().__contains__(key)`, `dict.get(obj,
key)` and a subclass that keeps dict's `get`. transformers keeps its
`_CAN_RECORD_REGISTRY` in such a class and reads it in every model's
forward; before, each read was a break.

The read is of the object's own storage at a literal key, pinned by a
guard there (present, with what the value holds, or absent): CPython is
the oracle for every result, exception and printed line, the registry's
state after the call included, and a change to the registry between calls
is seen by the next call.
"""
import contextlib
import io
import sys

import numpy as np
import pytest

import kiln



class Registry(dict):
    """transformers' _CanRecordRegistry, plus the other two readers."""

    def __setitem__(self, key, value):
        super().__setitem__(str(key), value)

    def get(self, key):
        return super().get(str(key)) or {}

    def __getitem__(self, key):
        return super().__getitem__(str(key))

    def has(self, key):
        return super().__contains__(str(key))


class Plain(dict):
    """A subclass that keeps dict's own get."""


REG = Registry()
PLAIN = Plain()


def reset():
    REG.clear()
    dict.__setitem__(REG, "a", {"scale": 3})
    dict.__setitem__(REG, "1", {"scale": 2, "shift": 1})
    PLAIN.clear()
    PLAIN.update(w=4)


def x0():
    return kiln.from_numpy(np.arange(4, dtype=np.float32))


def run(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            r = ("ok", fn(*args))
        except Exception as e:  # the program's own exception is part of what it means
            r = ("raise", type(e), str(e))
    return r, out.getvalue()


def outcome(r):
    """A run's outcome with tensors as arrays, for ==."""
    (status, *rest), printed = r
    return status, [v.numpy().tolist() if isinstance(v, kiln.Tensor) else v for v in rest], printed


def check(fn, *args, calls=2):
    """fn compiled against fn on CPython, on a freshly reset registry each
    call; the registries' states after the call compared too."""
    reset()
    want = outcome(run(fn, *args))
    want_state = (dict(REG), dict(PLAIN))
    compiled = kiln.compile(fn)
    for _ in range(calls):
        reset()
        assert outcome(run(compiled, *args)) == want
        assert (dict(REG), dict(PLAIN)) == want_state
    return compiled


def lookup(x, key):
    found = REG.get(key)
    scale = found.get("scale", 0)
    return x * scale + (1 if REG.has(key) else -1)


def item(x, key):
    return x + REG[key]["scale"]


def through_dict_get(x, key):
    found = dict.get(REG, key, None)
    return x if found is None else x * found["scale"]


def kept_get(x):
    return x * PLAIN.get("w") + (PLAIN.get("missing") is None)


@pytest.mark.parametrize("fn, args", [
    (lookup, ("a",)), (lookup, (1,)), (lookup, ("zz",)),
    (item, ("a",)), (item, (1,)), (item, ("zz",)),  # the last: CPython's KeyError, from super().__getitem__
    (through_dict_get, ("a",)), (through_dict_get, ("1",)), (through_dict_get, ("b",)),
    (kept_get, ()),
], ids=lambda v: getattr(v, "__name__", repr(v)))
def test_reads_mean_what_cpython_says(fn, args):
    check(fn, x0(), *args)


@pytest.mark.parametrize("fn, args", [
    (lookup, ("a",)), (lookup, ("zz",)), (item, ("a",)), (through_dict_get, ("a",)), (kept_get, ()),
], ids=lambda v: getattr(v, "__name__", repr(v)))
def test_a_read_is_part_of_the_graph_not_a_break(fn, args):
    reset()
    e = kiln.explain(kiln.compile(fn))(x0(), *args)
    assert e.graph_count == 1 and e.graph_break_count == 0, str(e)
    assert "dict.__getitem__(" in str(e)  # the guard at the storage's key


def test_a_change_to_the_registry_after_compiling_is_seen():
    reset()
    compiled = kiln.compile(lookup)
    for key, change in [("a", None), ("a", {"scale": 5}), ("b", None), ("b", {"scale": 7}), ("b", {})]:
        if change is not None:
            REG[key] = change  # the subclass's own __setitem__
        want = lookup(x0(), key).numpy().tolist()
        assert compiled(x0(), key).numpy().tolist() == want, (key, change)


def test_an_entry_the_storage_has_but_the_subclass_would_not_find_is_read_from_the_storage():
    class Shadow(dict):
        def __getitem__(self, key):  # never called by super().get
            raise AssertionError("the subclass's own __getitem__")

        def get(self, key):
            return super().get(key)

    s = Shadow(k=2)

    def f(x):
        return x * s.get("k")

    assert kiln.compile(f)(x0()).numpy().tolist() == f(x0()).numpy().tolist()


def across_a_break(x, key):
    found = REG.get(key)
    found["before"] = 1  # traced: replayed on the registry's own inner dict, reloaded from the storage
    print("found", len(found))  # a break: CPython prints
    found["after"] = len(found)  # CPython's, on the same dict
    return x * found["scale"]


def test_a_value_read_from_the_storage_lives_across_a_break():
    compiled = check(across_a_break, x0(), "a")
    reset()
    e = kiln.explain(compiled)(x0(), "a")
    assert e.graph_break_count == 1 and "print" in e.break_reasons[0]["reason"], str(e)


def test_a_key_that_is_no_literal_leaves_the_read_to_cpython():
    class Key:
        def __hash__(self):
            return hash("a")

        def __eq__(self, other):
            return other == "a"

    def f(x, k):
        return x * (dict.get(REG, k) or {"scale": 0})["scale"]

    check(f, x0(), Key())

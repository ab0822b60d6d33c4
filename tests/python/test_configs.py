"""Config objects read in forward (dataclasses, SimpleNamespace, plain
objects) are constants under guards: their fields fold into the graph, a
changed field recompiles, and an attribute whose read would run user code
(a property, __getattr__) is left to Python. The reference is CPython
(differential.py) and explain()'s graph and break counts."""
import enum
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import kiln
import kiln.nn as nn
from differential import check


@dataclass
class Cfg:
    n_embd: int = 8
    n_head: int = 2
    bias: bool = True
    act: str = "gelu"
    dims: list = field(default_factory=lambda: [8, 8])


@dataclass(frozen=True)
class Frozen:
    scale: float = 0.5


@dataclass
class Slotted:
    __slots__ = ("k",)
    k: int


class WithClassAttr:
    eps = 1e-5

    def __init__(self):
        self.mult = 3


class WithProperty:
    calls = 0

    @property
    def scale(self):
        WithProperty.calls += 1
        return 2.0


class WithGetattr:
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return len(name)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.lin = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)

    def forward(self, x):
        hs = self.cfg.n_embd // self.cfg.n_head
        y = self.lin(x) * (1.0 / math.sqrt(hs))
        if self.cfg.act == "gelu":
            y = y * 2
        return y + len(self.cfg.dims)


def graphs_and_breaks(fn, *args):
    e = kiln.explain(fn)(*args)
    return e.graph_count, e.graph_break_count


def test_dataclass_config_in_forward_is_one_graph():
    m = Block(Cfg())
    x = kiln.randn(2, 8)
    assert graphs_and_breaks(m, x) == (1, 0)
    compiled = kiln.compile(m)
    assert abs(compiled(x).numpy() - m(x).numpy()).max() < 1e-5


def test_a_changed_field_recompiles():
    cfg = Cfg()
    m = Block(cfg)
    x = kiln.randn(2, 8)
    compiled = kiln.compile(m)
    before = compiled(x).numpy()
    cfg.act = "relu"  # the gelu branch no longer runs
    assert abs(compiled(x).numpy() - m(x).numpy()).max() < 1e-5
    assert abs(compiled(x).numpy() - before).max() > 1e-3
    cfg.dims.append(4)  # a list field: its length is guarded
    assert abs(compiled(x).numpy() - m(x).numpy()).max() < 1e-5


def scale_shift(x, ns):
    return x * ns.scale + ns.shift


def test_simple_namespace_argument():
    check(scale_shift, kiln.ones(3), SimpleNamespace(scale=2.0, shift=1))
    assert graphs_and_breaks(scale_shift, kiln.ones(3), SimpleNamespace(scale=2.0, shift=1)) == (1, 0)


G = Cfg(n_head=4)


def uses_global_config(x):
    return x * G.n_head + G.dims[0]


def test_global_config():
    check(uses_global_config, kiln.ones(2), globals_={"G": Cfg(n_head=4)})
    assert graphs_and_breaks(uses_global_config, kiln.ones(2)) == (1, 0)


def test_global_config_field_change_is_seen():
    f = kiln.compile(uses_global_config)
    x = kiln.ones(2)
    G.n_head = 4
    assert f(x).numpy().tolist() == [12.0, 12.0]
    G.n_head = 5
    assert f(x).numpy().tolist() == [13.0, 13.0]
    G.n_head = 4


def frozen_slotted_class_attr(x, fz, sl, ca):
    return x * fz.scale + sl.k + ca.eps * ca.mult


def test_frozen_slots_and_class_attributes():
    args = (kiln.ones(2), Frozen(), Slotted(3), WithClassAttr())
    check(frozen_slotted_class_attr, *args)
    assert graphs_and_breaks(frozen_slotted_class_attr, *args) == (1, 0)


def reads_property(x, p):
    return x * p.scale


def test_a_property_runs_as_python_every_call():
    p = WithProperty()
    WithProperty.calls = 0
    f = kiln.compile(reads_property)
    for _ in range(3):
        assert f(kiln.ones(2), p).numpy().tolist() == [2.0, 2.0]
    assert WithProperty.calls == 3  # never folded: the getter runs each call, as in CPython
    check(reads_property, kiln.ones(2), WithProperty())


def reads_dynamic_attr(x, g):
    return x * g.abc


def test_getattr_objects_are_left_to_python():
    check(reads_dynamic_attr, kiln.ones(2), WithGetattr())


def missing_field(x, cfg):
    return x * cfg.nope


def test_a_missing_field_raises_pythons_error():
    check(missing_field, kiln.ones(2), Cfg())


def nested(x, ns):
    return x * ns.inner.k + ns.inner.dims[1]


def test_nested_config():
    ns = SimpleNamespace(inner=SimpleNamespace(k=3, dims=(1, 2)))
    check(nested, kiln.ones(2), ns)
    assert graphs_and_breaks(nested, kiln.ones(2), ns) == (1, 0)


def mutates_config(x, ns):
    ns.calls = ns.calls + 1
    return x * ns.calls


def test_a_config_mutated_in_forward_is_mutated():
    check(mutates_config, kiln.ones(2), SimpleNamespace(calls=0))


class Mode(enum.Enum):
    FAST = "fast"
    EXACT = "exact"


class Fmt(str, enum.Enum):  # compares as a str (timm's Format)
    NCHW = "NCHW"
    NHWC = "NHWC"


class Consts:
    SCALE = 3.0

    def helper(v):  # read off the class: a plain function
        return v + 1


def uses_enums(x, mode=Mode.FAST, fmt="NCHW"):
    if mode is Mode.FAST and fmt == Fmt.NCHW and Fmt.NHWC != fmt:
        x = Consts.helper(x) * Consts.SCALE
    return x, Mode.EXACT.value


def test_enum_members_and_class_attributes_fold_under_guards():
    # Class attributes read without running code (an Enum's member, a
    # constant, a function), and comparisons that run no user code (a str
    # Enum against a str: str's own ==) fold; a changed class attribute
    # recompiles (the read is guarded).
    check(uses_enums, kiln.ones(2))
    check(uses_enums, kiln.ones(2), Mode.EXACT, "NHWC")
    assert graphs_and_breaks(uses_enums, kiln.ones(2)) == (1, 0)
    f = kiln.compile(uses_enums)
    assert f(kiln.ones(2))[0].numpy().tolist() == [6.0, 6.0]
    Consts.SCALE = 4.0
    try:
        assert f(kiln.ones(2))[0].numpy().tolist() == [8.0, 8.0]
    finally:
        Consts.SCALE = 3.0


class EqInPython(str):
    def __eq__(self, other):  # user code: never run at trace time
        EqInPython.calls += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__
    calls = 0


def compares_user_eq(x, tag):
    return x * 2 if tag == "a" else x


def test_a_comparison_that_runs_python_is_left_to_python():
    check(compares_user_eq, kiln.ones(2), EqInPython("a"))
    EqInPython.calls = 0
    f = kiln.compile(compares_user_eq)
    for _ in range(3):
        f(kiln.ones(2), EqInPython("a"))
    assert EqInPython.calls == 3  # CPython's own, one a call: none at trace time

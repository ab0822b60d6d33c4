"""What libraries do in their forwards that Dynamo traces and kiln did not:
`functools.partial` layers (transformers' ACT2FN["gelu_pytorch_tanh"] is
partial(gelu, approximate="tanh")), `inspect.signature` of the function
a layer is handed (transformers' apply_chunking_to_forward counts its
parameters in every BERT-style layer) and `os.environ` reads
(transformers' use_gqa_in_sdpa, in every LLaMA-style attention). Each was
a graph break per call.

CPython is the oracle (differential.check); explain says what stayed in
one graph.
"""
import functools
import inspect
import os
import sys

import numpy as np
import pytest

import kiln
from differential import check



def x0():
    return kiln.from_numpy(np.arange(4, dtype=np.float32))


def one_graph(fn, *args):
    e = kiln.explain(kiln.compile(fn))(*args)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


def scaled(x, shift=0.0, scale=1.0, *rest):
    return (x + shift) * scale + len(rest)


SHIFTED = functools.partial(scaled, shift=1.0)
SCALED_TWICE = functools.partial(functools.partial(scaled, scale=2.0), shift=-1.0)
POSITIONAL = functools.partial(scaled, 5.0)  # x bound positionally: the call's args follow it


def through_partials(x):
    return SHIFTED(x) + SHIFTED(x, scale=3.0) + SCALED_TWICE(x) + POSITIONAL(x)


def overriding_a_keyword(x):
    return SHIFTED(x, shift=10.0)  # the call's keyword wins, as Python's


class Tagged(functools.partial):
    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs) + 100


TAGGED = Tagged(scaled, shift=1.0)


def through_a_partial_subclass(x):
    return TAGGED(x)


@pytest.mark.parametrize("fn", [through_partials, overriding_a_keyword], ids=lambda f: f.__name__)
def test_a_partial_calls_its_function_in_the_graph(fn):
    check(fn, x0())
    one_graph(fn, x0())


def test_a_partial_subclass_keeps_its_own_call():
    check(through_a_partial_subclass, x0())


class Scaler:
    """A config-like class used through its class: a classmethod (bound to
    the class, or to a subclass that overrides its constant) and a
    staticmethod (torch.autograd.Function's apply and forward are these)."""
    scale = 3.0

    @classmethod
    def make(cls, x):
        return x * cls.scale + cls.shift(1.0)

    @staticmethod
    def shift(v):
        return v + 0.5


class BigScaler(Scaler):
    scale = 10.0


def through_class_methods(x):
    held = BigScaler.make  # LOAD_ATTR, then a call: the bound method as a value
    return Scaler.make(x) + held(x) + Scaler.shift(2.0)


def test_classmethods_and_staticmethods_read_off_a_class_are_inlined():
    check(through_class_methods, x0())
    one_graph(through_class_methods, x0())


def forward_chunk(hidden, mask):
    return hidden * mask


class Layer:
    def chunk(self, hidden):
        return hidden + 1


LAYER = Layer()


def counts_parameters(x):
    n_fn = len(inspect.signature(forward_chunk).parameters)
    n_method = len(inspect.signature(LAYER.chunk).parameters)  # bound: self is not counted
    names = list(inspect.signature(scaled).parameters)
    return x * n_fn + n_method, names, str(inspect.signature(forward_chunk))


def test_inspect_signature_of_a_function_and_a_bound_method_folds():
    check(counts_parameters, x0())
    one_graph(counts_parameters, x0())


def test_a_function_whose_code_changes_is_read_again():
    def g(a, b):
        return a

    def three(a, b, c):
        return a

    def f(x):
        return x * len(inspect.signature(g).parameters)

    compiled = kiln.compile(f)
    assert compiled(x0()).numpy().tolist() == [0, 2, 4, 6]
    g.__code__ = three.__code__
    assert compiled(x0()).numpy().tolist() == f(x0()).numpy().tolist() == [0, 3, 6, 9]


# -- os.environ ------------------------------------------------------------------

_FLAG = "KILN_TEST_IDIOMS_FLAG"


def _force_gqa():
    return os.environ.get(_FLAG, "0") == "1"


def reads_the_environment(x):
    scale = 2.0 if _force_gqa() else 3.0
    present = _FLAG in os.environ
    return x * scale + (10.0 if present else 0.0)


def reads_a_variable_by_subscript(x):
    return x + len(os.environ["HOME"])


def test_environment_reads_are_guarded_constants(monkeypatch):
    monkeypatch.delenv(_FLAG, raising=False)
    check(reads_the_environment, x0())
    one_graph(reads_the_environment, x0())
    check(reads_a_variable_by_subscript, x0())
    one_graph(reads_a_variable_by_subscript, x0())


def test_a_changed_variable_recompiles(monkeypatch):
    monkeypatch.delenv(_FLAG, raising=False)
    c = kiln.compile(reads_the_environment)
    for value in (None, "1", "0", None):
        if value is None:
            monkeypatch.delenv(_FLAG, raising=False)
        else:
            monkeypatch.setenv(_FLAG, value)
        want = reads_the_environment(x0()).numpy()
        assert np.array_equal(c(x0()).numpy(), want), value

"""What kiln.compile and kiln.explain accept: bound methods keep self, explain
works on what compile returns and on functions left to CPython, and
backend= takes a Python callable (gm, example_inputs) -> callable."""
import pytest

import kiln
from kiln_testing import close


class Scale(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = kiln.nn.Linear(4, 4)
        self.factor = 3.0

    def forward(self, x):
        return self.fc(x) * self.factor


@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_compile_bound_forward_keeps_self(backend):
    m = Scale()
    x = kiln.randn(2, 4)
    f = kiln.compile(m.forward, backend=backend)
    assert close(f(x), m(x))
    m.factor = 5.0  # an attribute change is seen (guarded), as in eager
    assert close(f(x), m(x))


def test_compile_bound_method_skips_hooks_like_torch():
    m = Scale()
    calls = []
    m.register_forward_hook(lambda mod, args, out: calls.append(1))
    x = kiln.randn(2, 4)
    kiln.compile(m.forward)(x)
    assert calls == []
    kiln.compile(m)(x)
    assert calls == [1]


def test_explain_of_a_compiled_module_reports_its_graph():
    m = Scale()
    e = kiln.explain(kiln.compile(m))(kiln.randn(2, 4))
    assert e.error is None or e.error == ""
    assert e.graph_count == 1 and e.graph_break_count == 0


def test_explain_of_a_bound_method_and_its_compiled_form():
    m = Scale()
    x = kiln.randn(2, 4)
    for target in (m.forward, kiln.compile(m.forward)):
        e = kiln.explain(target)(x)
        assert e.graph_count == 1, str(e)
        assert close(e.result, m(x))


def test_explain_shows_the_error_of_the_call():
    def bad(x):
        return x @ kiln.ones(7, 7)
    e = kiln.explain(bad)(kiln.ones(2, 3))
    assert e.error
    assert "raised" in str(e) or e.error in str(e)


def untranslatable(x):
    yield x  # a generator: CPython runs it


def test_explain_lists_a_function_left_to_cpython():
    e = kiln.explain(untranslatable)(kiln.ones(2))
    assert e.graph_count == 0
    (r,) = e.left_to_cpython_reasons
    assert r["function"] == "untranslatable"
    assert "test_compile_targets.py" in r["where"]
    assert r["reason"]
    assert "runs on CPython" in str(e)


def test_python_callable_backend_gets_the_graph_and_runs_it():
    seen = []

    def my_backend(gm, example_inputs):
        seen.append((gm, len(example_inputs)))
        assert "relu" in gm.code

        def run(*args):
            seen.append("ran")
            return gm(*args)
        return run

    def f(x, y):
        return kiln.relu(x) + y
    c = kiln.compile(f, backend=my_backend)
    x, y = kiln.randn(3, 3), kiln.randn(3, 3)
    assert close(c(x, y), f(x, y))
    assert close(c(x, y), f(x, y))
    assert len([s for s in seen if s != "ran"]) == 1  # compiled once
    assert seen.count("ran") == 2
    assert seen[0][1] == 2


def test_python_backend_errors_surface_as_themselves():
    class Boom(Exception):
        pass

    def failing_backend(gm, example_inputs):
        raise Boom("no thanks")

    c = kiln.compile(lambda x: x * 2, backend=failing_backend)
    with pytest.raises(Boom, match="no thanks"):
        c(kiln.ones(2))


def test_backend_must_be_a_name_or_callable():
    with pytest.raises(TypeError, match="backend must be"):
        kiln.compile(lambda x: x, backend=3)


class Noisy(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = kiln.nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        print("inside Noisy")
        return kiln.relu(y) * 2


class Outer(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Noisy()
        self.b = kiln.nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x + 1)
        return self.b(h) - 1


class OuterNested(Outer):
    def forward(self, x):
        return self.b(self.a(x + 1)) - 1


def assert_noisy_print_is_listed(e):
    line = Noisy.forward.__code__.co_firstlineno + 2
    assert any("print" in b["reason"] and b["where"].endswith(f"test_compile_targets.py:{line}")
               for b in e.break_reasons), str(e)


@pytest.mark.parametrize("model", [Outer, OuterNested])
@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_a_break_deep_in_a_model_keeps_the_graphs_around_it(backend, model, capsys):
    m = model()
    x = kiln.randn(2, 4)
    want = m(x)
    e = kiln.explain(kiln.compile(m), backend=backend)(x)
    assert close(e.result, want)
    # Outer's forward before and after the call, Noisy's before and after
    # the print: the break costs the graphs at its own line, not the model.
    assert e.graph_count >= 4, str(e)
    assert_noisy_print_is_listed(e)
    c = kiln.compile(m, backend=backend)
    assert close(c(x), want) and close(c(x), want)
    assert capsys.readouterr().out.count("inside Noisy") == 4


@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_a_hooked_module_breaking_inside_keeps_its_graphs_and_its_hooks(backend, capsys):
    m = Outer()
    seen = []
    m.a.register_forward_pre_hook(lambda mod, args: seen.append("pre"))
    handle = m.a.register_forward_hook(lambda mod, args, out: out + 1)  # changes the result
    x = kiln.randn(2, 4)
    want = m(x)
    seen.clear()
    e = kiln.explain(kiln.compile(m), backend=backend)(x)
    assert close(e.result, want)
    assert seen == ["pre"]
    # Noisy's forward compiles around its print, between the hooks that
    # run at call time: four graphs, and its own break is listed.
    assert e.graph_count >= 4, str(e)
    assert_noisy_print_is_listed(e)
    c = kiln.compile(m, backend=backend)
    assert close(c(x), want) and close(c(x), want)
    assert seen == ["pre"] * 3
    handle.remove()  # a removed hook no longer runs, compiled or not
    assert close(c(x), m(x)) and not close(c(x), want)


def loud_double(y):
    print("loud")
    return y * 2


def halve(y):
    return y / 2


class Scaler:
    """A plain Python object: its method is Python's (a foreign call)."""

    def __init__(self):
        self.calls = 0

    def scale(self, y):
        self.calls += 1
        return y * 3


SCALER = Scaler()


def pending_plain_call(x):
    return halve(loud_double(x + 1)) - 1


def pending_namespace_method(x):
    return kiln.relu(loud_double(x - 1)) * 2


def pending_object_method(x):
    return SCALER.scale(loud_double(x)) + 1


@pytest.mark.parametrize("fn, want, graphs", [
    # halve is pending (CALL's callee) across loud_double's break
    (pending_plain_call, lambda x: (x + 1) * 2 / 2 - 1, 3),
    # kiln.relu: LOAD_METHOD on a Python module pushed (relu, NULL)
    (pending_namespace_method, lambda x: ((x - 1) * 2).relu() * 2, 3),
    # SCALER.scale: a foreign object's method, pending with its NULL; the
    # resume function gets Python's bound method and inlines it (its graph
    # holds the scale and the + 1)
    (pending_object_method, lambda x: x * 2 * 3 + 1, 2),
])
@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_a_call_pending_across_a_break_resumes_compiled(fn, want, graphs, backend, capsys):
    x = kiln.randn(2, 4)
    e = kiln.explain(fn, backend=backend)(x)
    assert close(e.result, want(x)), str(e)
    # The frame's graph before the call (if it has ops), loud_double's after
    # its print, and the resumed frame's (the pending call and what follows),
    # which a NULL on the stack used to leave to the VM.
    assert e.graph_count == graphs, str(e)
    assert not any("split across the break" in b["reason"] for b in e.break_reasons), str(e)
    c = kiln.compile(fn, backend=backend)
    assert close(c(x), want(x)) and close(c(x), want(x))
    assert capsys.readouterr().out.count("loud") == 3


def test_print_in_an_uncompiled_module_call_goes_to_sys_stdout(capsys):
    Noisy()(kiln.ones(1, 4))
    assert capsys.readouterr().out == "inside Noisy\n"


import math


class Attention(kiln.nn.Module):
    def __init__(self, C=8, n_head=2):
        super().__init__()
        self.C, self.n_head = C, n_head
        self.qk = kiln.nn.Linear(C, C)

    def forward(self, x):
        scale = 1.0 / math.sqrt(self.C // self.n_head)
        return self.qk(x) * scale + math.floor(2.5)


@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_math_on_python_numbers_folds_in_forward(backend):
    m = Attention()
    x = kiln.randn(3, 8)
    e = kiln.explain(kiln.compile(m), backend=backend)(x)
    assert e.graph_break_count == 0 and e.graph_count == 1, str(e)
    assert close(e.result, m(x))


def test_math_error_is_raised_as_in_python():
    def f(x, n):
        return x * math.sqrt(n)
    c = kiln.compile(f)
    with pytest.raises(ValueError, match="math domain error"):
        c(kiln.ones(2), -1)
    assert close(c(kiln.ones(2), 4), kiln.ones(2) * 2)

"""Writes into tensors through views (interpreter/translator_views.cpp).

torch's program sees a write into a tensor through every tensor sharing its
memory: `b = w.clone(); b[n:2 * n].zero_()` changes b (swin v2's
qkv_bias), `x = out[:, :c]; x += s` changes out (ghostnet), and a view
taken before a write into its base sees the write. The trace is pure, so
kiln carries each write back to the tensor owning the memory and takes
every live view again. Each case runs against torch eager (the results,
what it prints, the arguments after the call) and must be one graph; the
writes kiln cannot carry back break, and CPython does them.
"""
import sys

import pytest

import kiln

torch = pytest.importorskip("torch")
F = torch.nn.functional



def swin_bias(x, w, bias):
    b = bias.clone()
    n = b.numel() // 3
    b[n:2 * n].zero_()
    return F.linear(x, w, b)


def ghost(a, s):
    out = torch.cat([a, a * 2], 1)
    x = out[:, :3]
    x += s
    return x, out


def base_write_seen_by_view(t):
    u = t * 1
    row = u[1]
    u += 1
    return row, u


def overlapping_views(t):
    u = t + 0
    a, b = u[0:2], u[1:3]
    a.mul_(3)
    return b, u


def through_transpose(t):
    u = t * 2
    v = u.t()
    v[0] = 5.0
    return u, v


def view_of_a_view(t):
    u = t - 1
    v = u[1:]
    w = v[:, 0]
    w.fill_(0.0)
    return u, v


def through_permute_and_unsqueeze(t):
    u = t.reshape(2, 3, 4) * 1
    p = u.permute(2, 0, 1).unsqueeze(0)
    p[0, 1] += 10
    return u


def setitem_after_view_dropped_and_taken_again(t):
    u = t * 1
    u[:, 0] = u[:, 1] * 2  # the view u[:, 1] is gone by the write
    col = u[:, 2]
    u[0, 2] = -1.0
    return col.clone(), u


def base_rebound_then_view_written(t):
    u = t * 1
    views = [u[0], u[2]]  # held by a container
    u = u * 2  # a new tensor: the views stay over the old one
    views[0] += 1
    return u, views


def chained_writes(t):
    u = t * 1
    r = u[1]
    for i in range(3):
        r += i
        u[:, 0] -= 1
    return r, u


def alternating_writes(t):
    # After a write through an unsqueeze or a transpose, the tensor itself
    # is a view of the write's result (found by the generator, seed
    # 1402311): its later writes still reach every view.
    y = t * 1
    v = y[None]
    v[...] = -2.25
    y[1:3] = -1.5
    v[0, 0] += 9.0
    y += 1
    u = y.t()
    u[0] = 4.0
    r = y[2]
    u[1] -= 1
    return v, y, u, r


def to_its_own_dtype_is_the_tensor(t):
    u = t * 1
    v = u.float()  # u itself, in torch
    v += 1
    return u, v is u


CASES = [
    (swin_bias, lambda: (torch.randn(2, 4), torch.randn(6, 4), torch.randn(6))),
    (ghost, lambda: (torch.randn(2, 3, 4), torch.randn(2, 3, 4))),
    (base_write_seen_by_view, lambda: (torch.randn(3, 4),)),
    (overlapping_views, lambda: (torch.randn(4, 2),)),
    (through_transpose, lambda: (torch.randn(3, 4),)),
    (view_of_a_view, lambda: (torch.randn(3, 4),)),
    (through_permute_and_unsqueeze, lambda: (torch.randn(24),)),
    (setitem_after_view_dropped_and_taken_again, lambda: (torch.randn(3, 4),)),
    (base_rebound_then_view_written, lambda: (torch.randn(3, 4),)),
    (chained_writes, lambda: (torch.randn(3, 4),)),
    (to_its_own_dtype_is_the_tensor, lambda: (torch.randn(3, 4),)),
    (alternating_writes, lambda: (torch.randn(3, 4),)),
]


def same(a, b):
    if isinstance(a, torch.Tensor):
        return type(b) is torch.Tensor and a.shape == b.shape and torch.allclose(a, b, atol=1e-6)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def run(fn, args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # the program's own error is part of what it means
        return ("raise", type(e), str(e))


def check(fn, make, graphs=1, breaks=0):
    torch.manual_seed(0)
    want_args = make()
    want = run(fn, want_args)
    compiled = kiln.compile(fn)
    for _ in range(2):
        torch.manual_seed(0)
        got_args = make()
        got = run(compiled, got_args)
        assert got[0] == want[0] and (same(want[1], got[1]) if want[0] == "ok" else want[1:] == got[1:]), (want, got)
        assert same(list(want_args), list(got_args)), "arguments after the call differ"
    torch.manual_seed(0)
    e = kiln.explain(kiln.compile(fn))(*make())
    assert (e.graph_count, e.graph_break_count) == (graphs, breaks), str(e)
    return e


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_write_through_a_view_is_seen_by_every_tensor_sharing_the_memory(fn, make):
    check(fn, make)


def reshape_that_copied(t):
    u = t * 1
    c = u.t().reshape(-1)  # not contiguous: a copy, which a write does not reach through
    c[0] = 9.0
    return u, c


def write_into_an_expanded_view(t):
    u = t * 1
    e = u.expand(3, 4)
    e[0] = 1.0  # torch refuses: several elements share one memory location
    return u


def view_of_an_argument(t):
    v = t[0]
    v += 1  # the caller's tensor: CPython writes into it
    return t * 2


def write_beside_a_live_contiguous(t):
    u = t * 1
    c = u.contiguous()  # u itself (already contiguous): torch's c sees the write
    u += 1
    return c


@pytest.mark.parametrize("fn, make, why", [
    pytest.param(write_beside_a_live_contiguous, lambda: (torch.randn(3, 4),), "contiguous", marks=pytest.mark.xfail(
        strict=True, reason="known gap: the graph returns c as its own copy, so CPython's write into u after the "
                            "break does not reach it (torch's c is u); contiguous/to do not alias in kiln's outputs")),
    (reshape_that_copied, lambda: (torch.randn(3, 4),), "a reshape that copied"),
    (write_into_an_expanded_view, lambda: (torch.randn(1, 4),), "expand"),
    (view_of_an_argument, lambda: (torch.randn(3, 4),), "a view of a graph input"),
], ids=["live_contiguous", "reshape_that_copied", "expanded_view", "view_of_an_argument"])
def test_a_write_kiln_cannot_carry_back_breaks_and_cpython_does_it(fn, make, why):
    torch.manual_seed(0)
    e = kiln.explain(kiln.compile(fn))(*make())
    assert e.graph_break_count >= 1 and any(why in b["reason"] for b in e.break_reasons), str(e)
    check(fn, make, graphs=e.graph_count, breaks=e.graph_break_count)


_LIN = torch.nn.Linear(4, 4)


def residual_with_gradients(x):
    y = _LIN(x)  # records gradients: the parameters require them
    y += x  # a write into a tensor no view shares: a new value, as any op's
    return y


def view_write_with_gradients(x):
    y = _LIN(x)
    y[0] += 1  # a write views share, into values that record gradients
    return y


def test_writes_into_tensors_that_record_gradients():
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    e = kiln.explain(kiln.compile(residual_with_gradients))(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
    want, got = residual_with_gradients(x), kiln.compile(residual_with_gradients)(x)
    assert torch.allclose(want, got) and got.requires_grad
    kiln.reset()
    want, got = view_write_with_gradients(x), kiln.compile(view_write_with_gradients)(x)
    assert torch.allclose(want, got)


_AUGMENTED = """
def f(t):
    y = t * 1
    a = y
    v = y[0]
    y += 1  # torch: in place (a is y, v sees it); kiln.Tensor has no __iadd__: y = y + 1
    v[1] = 7.0
    return a, v, y
"""


def _aliases_after_augmented_assignment():
    # A code object of its own each time: kiln's cache is per code object,
    # and its guards do not tell a torch tensor from a kiln one.
    namespace = {}
    exec(compile(_AUGMENTED, "<augmented>", "exec"), namespace)
    return namespace["f"]


def test_augmented_assignment_is_in_place_for_torch_tensors_and_rebinding_for_kilns():
    """kiln's own tensors have no in-place operators, so CPython runs
    `y += 1` as `y = y + 1`: another name for y and a view of y keep the old
    values. A trace of a Python frame over kiln tensors took torch's meaning
    (found by the generator once it wrote through views)."""
    import numpy as np
    check(_aliases_after_augmented_assignment(), lambda: (torch.randn(3, 4),))
    f = _aliases_after_augmented_assignment()
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = f(kiln.from_numpy(base.copy()))
    got = kiln.compile(f)(kiln.from_numpy(base.copy()))
    for w, g in zip(want, got):
        assert np.array_equal(w.numpy(), g.numpy())
    assert not np.array_equal(want[0].numpy(), want[2].numpy())  # a kept y's old value


def _random_write_program(seed):
    """A straight-line program over one fresh tensor: views of it and of
    each other (indexing, transposes, unsqueeze, reshape) and writes
    through any of them, built by running each candidate line in torch
    first (only lines torch accepts are kept)."""
    import random
    r = random.Random(seed)
    env = {"torch": torch, "t": torch.arange(12.0).reshape(3, 4)}
    lines = ["y0 = t * 1"]
    exec(lines[0], env)
    names = ["y0"]
    for i in range(r.randint(3, 9)):
        src = r.choice(names)
        if r.random() < 0.45:
            key = r.choice(["[0]", "[1:3]", "[:, 1]", "[None]", "[..., 0]", "[::2]", ".t()", ".transpose(0, -1)",
                            ".unsqueeze(0)", ".reshape(-1)", "[-1]"])
            line = f"v{i} = {src}{key}"
            new = f"v{i}"
        else:
            value = r.choice(["-1.5", "2.0", "0.25"])
            line = r.choice([f"{src}[...] = {value}", f"{src} += {value}", f"{src}[0] = {value}", f"{src}.mul_(2)",
                             f"{src}.zero_()", f"{src} -= {src} * 0.5"])
            new = None
        try:
            exec(line, env)
        except Exception:
            continue
        lines.append(line)
        if new:
            names.append(new)
    body = "\n".join("    " + ln for ln in lines)
    return f"def f(t):\n{body}\n    return ({', '.join(names)},)\n"


@pytest.mark.parametrize("seed", range(60))
def test_random_writes_through_views_equal_torch(seed):
    text = _random_write_program(seed)
    namespace = {"torch": torch}
    exec(compile(text, f"<views {seed}>", "exec"), namespace)
    f = namespace["f"]
    want = f(torch.arange(12.0).reshape(3, 4))
    got = kiln.compile(f)(torch.arange(12.0).reshape(3, 4))
    assert len(want) == len(got)
    for i, (w, g) in enumerate(zip(want, got)):
        assert w.shape == g.shape and torch.equal(w, g), (text, i, w, g)

"""The ops real models need (issue 13), against torch as the oracle: each op
eagerly on random inputs over dtypes, shapes, non-contiguous layouts,
broadcasting and edge cases; torch's exception types for bad input; and
each traced through kiln.compile on both backends, equal to eager, in one
graph with no break."""
import math

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "bool": torch.bool}


def k2t(x):
    """A kiln tensor as a torch tensor (a copy), tuples element by element."""
    if isinstance(x, (tuple, list)):
        return type(x)(k2t(i) for i in x)
    return torch.from_numpy(np.array(np.asarray(x), copy=True))


def t2k(t):
    return kiln.from_numpy(t.detach().numpy().copy())


def same(got, want, rtol=1e-5, atol=1e-6):
    """kiln result == torch result: shape, dtype, values (NaN equal NaN)."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            same(g, w, rtol, atol)
        return
    g = k2t(got)
    assert tuple(g.shape) == tuple(want.shape), (tuple(g.shape), tuple(want.shape))
    assert g.dtype == want.dtype, (g.dtype, want.dtype)
    if want.dtype in (torch.int64, torch.bool):
        assert torch.equal(g, want), (g, want)
    else:
        torch.testing.assert_close(g, want, rtol=rtol, atol=atol, equal_nan=True)


def rand(shape, dtype="float32", lo=-3, hi=3, seed=None):
    gen = np.random.default_rng(seed)
    if dtype == "bool":
        return torch.from_numpy(gen.random(shape) < 0.5)
    if dtype == "int64":
        return torch.from_numpy(gen.integers(lo, hi + 1, shape).astype(np.int64))
    return torch.from_numpy(gen.uniform(lo, hi, shape).astype(dtype))


def compiled_equal(fn, *args, rtol=1e-5, atol=1e-6):
    """fn traced on both backends: one graph, no break, each equal to eager
    kiln. Returns the eager result."""
    want = fn(*args)
    for backend in ("eager", "llvm"):
        kiln.reset()
        e = kiln.explain(fn, backend=backend)(*args)
        assert (e.graph_count, e.graph_break_count) == (1, 0), (backend, e.break_reasons)
        got = kiln.compile(fn, backend=backend)(*args)
        _close_kiln(got, want, rtol, atol)
    return want


def _close_kiln(got, want, rtol, atol):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _close_kiln(g, w, rtol, atol)
        return
    same(got, k2t(want), rtol, atol)


def raises_like_torch(kiln_call, torch_call):
    """Both raise, and kiln's exception is an instance of torch's type."""
    with pytest.raises(Exception) as t:
        torch_call()
    with pytest.raises(type(t.value)):
        kiln_call()


# ------------------------------------------------------------ masked_fill --

@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
@pytest.mark.parametrize("value", [2, -1.5, True, "0d"])
def test_masked_fill_matches_torch(dtype, value):
    x = rand((3, 5), dtype, seed=1)
    m = rand((5,), "bool", seed=2)  # broadcast over rows
    v = torch.tensor(2.5, dtype=torch.float64) if value == "0d" else value
    kv = t2k(v) if value == "0d" else value
    same(t2k(x).masked_fill(t2k(m), kv), x.masked_fill(m, v))
    # non-contiguous input, mask broadcasting up the result's shape
    xt = x.t()
    same(kiln.masked_fill(t2k(x).T, t2k(m[:3]), kv), xt.masked_fill(m[:3], v))
    same(kiln.masked_fill(t2k(x[0]), t2k(rand((2, 5), "bool", seed=3)), kv),
         x[0].masked_fill(rand((2, 5), "bool", seed=3), v))


def test_masked_fill_errors_match_torch():
    x, m = rand((2, 3)), rand((2, 3), "bool")
    raises_like_torch(lambda: t2k(x).masked_fill(t2k(m.long()), 1), lambda: x.masked_fill(m.long(), 1))
    raises_like_torch(lambda: t2k(x).masked_fill(t2k(m), kiln.ones(2)), lambda: x.masked_fill(m, torch.ones(2)))
    raises_like_torch(lambda: t2k(x).masked_fill(t2k(m[:, :2]), 1), lambda: x.masked_fill(m[:, :2], 1))


# ---------------------------------------------------------------- clamp --

@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_clamp_matches_torch(dtype):
    x = rand((4, 6), dtype, seed=4)
    xk = t2k(x)
    for lo, hi in [(-1, 1), (None, 0.5), (-0.5, None), (2, -2), (1, 1.5)]:
        same(kiln.clamp(xk, lo, hi), torch.clamp(x, lo, hi))
        same(xk.clamp(min=lo, max=hi), x.clamp(min=lo, max=hi))
        same(kiln.clip(xk, lo, hi), torch.clip(x, lo, hi))
    lo, hi = rand((6,), dtype, seed=5), rand((4, 1), dtype, lo=0, seed=6)
    same(kiln.clamp(xk.T, t2k(lo[:4]), None), torch.clamp(x.t(), lo[:4], None))
    same(kiln.clamp(xk, t2k(lo), t2k(hi)), torch.clamp(x, lo, hi))
    same(kiln.clamp_min(xk, 0), torch.clamp_min(x, 0))
    same(kiln.clamp_max(xk, 0), torch.clamp_max(x, 0))


def test_clamp_nan_and_errors():
    x = torch.tensor([1.0, float("nan"), 3.0, -float("inf")])
    same(kiln.clamp(t2k(x), 0, 2), torch.clamp(x, 0, 2))
    same(kiln.clamp(t2k(x), min=float("nan")), torch.clamp(x, min=float("nan")))
    same(kiln.clamp(t2k(x), min=t2k(torch.tensor([float("nan"), 0, 5, 1]))),
         torch.clamp(x, min=torch.tensor([float("nan"), 0, 5, 1])))
    raises_like_torch(lambda: kiln.clamp(t2k(x)), lambda: torch.clamp(x))


# ---------------------------------------------------------- tril / triu --

@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 2), (2, 3, 4), (0, 3)])
def test_tril_triu_match_torch(dtype, shape):
    x = rand(shape, dtype, seed=7)
    for k in (-2, -1, 0, 1, 3):
        same(kiln.tril(t2k(x), k), torch.tril(x, k))
        same(t2k(x).triu(k), x.triu(k))
        same(kiln.triu(t2k(x).transpose(-1, -2), diagonal=k), torch.triu(x.transpose(-1, -2), diagonal=k))


def test_tril_needs_two_dims():
    raises_like_torch(lambda: kiln.tril(kiln.ones(3)), lambda: torch.tril(torch.ones(3)))


# ----------------------------------------------------- split / chunk / stack --

def test_split_and_chunk_match_torch():
    x = rand((7, 6), seed=8)
    xk = t2k(x)
    for size in (1, 2, 3, 7, 10):
        same(kiln.split(xk, size), torch.split(x, size))
        same(xk.split(size, 1), x.split(size, 1))
    same(kiln.split(xk, [2, 0, 5]), torch.split(x, [2, 0, 5]))
    same(xk.split([1, 5], dim=-1), x.split([1, 5], dim=-1))
    for n in (1, 2, 3, 4, 6, 7, 9):
        same(kiln.chunk(xk, n), torch.chunk(x, n))
        same(xk.chunk(n, 1), x.chunk(n, 1))
    e = torch.zeros(0, 3)
    same(kiln.split(t2k(e), 2), torch.split(e, 2))
    same(kiln.chunk(t2k(e), 3), torch.chunk(e, 3))
    same(kiln.unbind(xk, 1), torch.unbind(x, 1))
    # the pieces are views, as torch's
    parts = kiln.split(xk, 3)
    assert parts[1].data_ptr() == xk.data_ptr() + 3 * 6 * 4


def test_split_chunk_errors_match_torch():
    x = torch.ones(5, 2)
    raises_like_torch(lambda: kiln.split(t2k(x), [2, 2]), lambda: torch.split(x, [2, 2]))
    raises_like_torch(lambda: kiln.split(t2k(x), -1), lambda: torch.split(x, -1))
    raises_like_torch(lambda: kiln.split(t2k(x), [6, -1]), lambda: torch.split(x, [6, -1]))
    raises_like_torch(lambda: kiln.chunk(t2k(x), 0), lambda: torch.chunk(x, 0))
    raises_like_torch(lambda: kiln.split(t2k(x), 2, 2), lambda: torch.split(x, 2, 2))


def test_stack_matches_torch():
    a, b, c = rand((2, 3), seed=9), rand((2, 3), "float64", seed=10), rand((2, 3), "int64", seed=11)
    for dim in (0, 1, 2, -1, -3):
        same(kiln.stack([t2k(a), t2k(b), t2k(c)], dim), torch.stack([a, b, c], dim))
    same(kiln.stack((t2k(a).T, t2k(a).T)), torch.stack((a.t(), a.t())))
    raises_like_torch(lambda: kiln.stack([]), lambda: torch.stack([]))
    raises_like_torch(lambda: kiln.stack([t2k(a), t2k(a).T]), lambda: torch.stack([a, a.t()]))
    raises_like_torch(lambda: kiln.stack([t2k(a)], 3), lambda: torch.stack([a], 3))


# ------------------------------------------------------------------ roll --

def test_roll_matches_torch():
    x = rand((3, 4, 5), "int64", seed=12)
    xk = t2k(x)
    for shifts, dims in [(1, 0), (-2, 1), (7, 2), ((1, 2), (0, 2)), ((3, -1), (2, 1)), (0, 1), (5, None),
                         (-13, None)]:
        same(kiln.roll(xk, shifts, dims), torch.roll(x, shifts, dims))
    same(xk.transpose(0, 2).roll(2, 0), x.transpose(0, 2).roll(2, 0))
    r = kiln.roll(xk, 0, 0)
    assert r.data_ptr() != xk.data_ptr()  # a new tensor, as torch's
    raises_like_torch(lambda: kiln.roll(xk, (1, 2), 0), lambda: torch.roll(x, (1, 2), 0))


# --------------------------------------------------------- argmax / argmin --

@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_argmax_argmin_match_torch_with_ties_and_nan(dtype):
    x = rand((5, 7), dtype, lo=0, hi=3, seed=13)  # few values: many ties
    if dtype != "int64":
        x = x.round()
        x[1, 3] = float("nan")
        x[1, 5] = float("nan")
    xk = t2k(x)
    for fn in ("argmax", "argmin"):
        for dim in (None, 0, 1, -1):
            for keepdim in (False, True):
                same(getattr(kiln, fn)(xk, dim, keepdim), getattr(torch, fn)(x, dim, keepdim))
                same(getattr(xk.T, fn)(dim=dim, keepdim=keepdim), getattr(x.t(), fn)(dim=dim, keepdim=keepdim))
    same(kiln.argmax(kiln.tensor(4.0)), torch.argmax(torch.tensor(4.0)))
    same(kiln.argmax(kiln.tensor(4.0), 0, True), torch.argmax(torch.tensor(4.0), 0, True))


def test_argmax_errors_match_torch():
    raises_like_torch(lambda: kiln.argmax(kiln.zeros(0)), lambda: torch.argmax(torch.zeros(0)))
    raises_like_torch(lambda: kiln.argmax(kiln.zeros(0, 2), 0), lambda: torch.argmax(torch.zeros(0, 2), 0))
    raises_like_torch(lambda: kiln.argmax(kiln.ones(2, 2), 2), lambda: torch.argmax(torch.ones(2, 2), 2))


# ---------------------------------------------------- topk / sort / gather --

def _tie_heavy(gen, kind, rows, n):
    if kind == 0:
        return gen.integers(0, 4, (rows, n)).astype(np.float32)
    if kind == 1:
        return gen.integers(-3, 3, (rows, n)).astype(np.int64)
    if kind == 2:
        a = gen.integers(0, 5, (rows, n)).astype(np.float64)
        a[gen.random((rows, n)) < 0.1] = np.nan
        return a
    return gen.standard_normal((rows, n)).astype(np.float32)


def test_topk_and_sort_order_ties_as_torch():
    """Equal values come out in torch's order (its CPU algorithms: a partial
    sort when k * 64 <= n, else nth_element; std::sort for sort), NaN as
    the largest, for every k, largest/smallest, sorted or not."""
    gen = np.random.default_rng(14)
    for trial in range(240):
        n = int(gen.integers(1, 300))
        a = _tie_heavy(gen, trial % 4, int(gen.integers(1, 4)), n)
        t, x = torch.from_numpy(a.copy()), kiln.from_numpy(a.copy())
        k = int(gen.integers(0, n + 1))
        largest, srt = bool(gen.integers(0, 2)), bool(gen.integers(0, 2))
        same(kiln.topk(x, k, 1, largest, srt), tuple(torch.topk(t, k, 1, largest, srt)))
        desc, stable = bool(gen.integers(0, 2)), bool(gen.integers(0, 2))
        same(kiln.sort(x, 1, desc, stable=stable), tuple(torch.sort(t, dim=1, descending=desc, stable=stable)))
        same(kiln.argsort(x, 1, desc, stable), torch.argsort(t, dim=1, descending=desc, stable=stable))
    # dims other than the last, non-contiguous input, a 1-d int64 tensor
    # long enough for torch's (stable) radix sort, an expanded lane
    t = torch.from_numpy(_tie_heavy(gen, 0, 6, 40)).t()
    same(kiln.topk(t2k(t.contiguous()).T.T, 3, 0), tuple(torch.topk(t, 3, 0)))
    same(t2k(t).sort(0), tuple(t.sort(0)))
    big = torch.from_numpy(gen.integers(0, 10, 40000).astype(np.int64))
    same(kiln.sort(t2k(big)), tuple(torch.sort(big)))
    same(kiln.sort(kiln.tensor([3.0]).expand(20)), tuple(torch.sort(torch.tensor([3.0]).expand(20))))


def test_topk_errors_and_scalars_match_torch():
    x = torch.ones(3, 4)
    raises_like_torch(lambda: kiln.topk(t2k(x), 5), lambda: torch.topk(x, 5))
    raises_like_torch(lambda: kiln.topk(t2k(x), -1), lambda: torch.topk(x, -1))
    same(kiln.topk(kiln.tensor(3.0), 1), tuple(torch.topk(torch.tensor(3.0), 1)))


def test_gather_matches_torch():
    x = rand((4, 5), seed=15)
    idx = torch.from_numpy(np.random.default_rng(16).integers(0, 4, (3, 5)))
    same(kiln.gather(t2k(x), 0, t2k(idx)), torch.gather(x, 0, idx))
    idx1 = torch.from_numpy(np.random.default_rng(17).integers(0, 5, (4, 7)))
    same(t2k(x).gather(1, t2k(idx1)), x.gather(1, idx1))
    same(kiln.gather(t2k(x).T, 1, t2k(idx).T), torch.gather(x.t(), 1, idx.t()))
    raises_like_torch(lambda: kiln.gather(t2k(x), 1, t2k(idx1 + 5)), lambda: torch.gather(x, 1, idx1 + 5))


# ----------------------------------------------------------------- gelu --

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_both_approximations_match_torch(dtype):
    x = rand((64,), dtype, lo=-6, hi=6, seed=18)
    same(F.gelu(t2k(x)), TF.gelu(x))
    same(F.gelu(t2k(x), approximate="tanh"), TF.gelu(x, approximate="tanh"))
    same(kiln.nn.GELU("tanh")(t2k(x)), torch.nn.GELU("tanh")(x))
    raises_like_torch(lambda: F.gelu(t2k(x), approximate="foo"), lambda: TF.gelu(x, approximate="foo"))


# -------------------------------------------------------------- dropout --

def test_dropout_identity_when_not_training():
    x = kiln.randn(4, 5)
    for y in (F.dropout(x, 0.5, training=False), F.dropout(x, 0.0), kiln.dropout(x, 0.9, False)):
        assert y.data_ptr() == x.data_ptr() and y.shape == x.shape  # the input itself, as torch's
    raises_like_torch(lambda: F.dropout(x, 1.5), lambda: TF.dropout(torch.ones(2), 1.5))
    raises_like_torch(lambda: F.dropout(kiln.ones(3, dtype=kiln.long), 0.5),
                      lambda: TF.dropout(torch.ones(3, dtype=torch.long), 0.5))


def test_dropout_in_training_is_a_scaled_bernoulli_mask():
    x = kiln.ones(200, 100)
    kiln.manual_seed(3)
    y = np.asarray(F.dropout(x, 0.3))
    kept = y != 0
    assert np.allclose(y[kept], 1 / 0.7)
    assert abs(kept.mean() - 0.7) < 0.01
    # kiln's generator: the same seed, the same mask; the Dropout module
    # draws the same numbers as the function
    kiln.manual_seed(3)
    assert np.array_equal(np.asarray(F.dropout(x, 0.3)), y)
    kiln.manual_seed(3)
    assert np.array_equal(np.asarray(kiln.nn.Dropout(0.3)(x)), y)
    z = kiln.tensor([float("nan"), float("inf"), 1.0])
    same(F.dropout(z, 1.0), TF.dropout(k2t(z), 1.0))


# ----------------------------------------------------------- *_like, device --

def test_like_constructors_match_torch():
    x = rand((3, 4), "float64", seed=19)
    xk = t2k(x)
    same(kiln.zeros_like(xk), torch.zeros_like(x))
    same(kiln.ones_like(xk.T), torch.ones_like(x.t()))
    same(kiln.full_like(xk, 7), torch.full_like(x, 7))
    same(kiln.full_like(xk, 2.5, dtype=kiln.long), torch.full_like(x, 2.5, dtype=torch.long))
    same(kiln.zeros_like(xk, dtype=kiln.bool), torch.zeros_like(x, dtype=torch.bool))
    assert kiln.empty_like(xk).shape == (3, 4) and kiln.empty_like(xk).dtype == "float64"
    r = np.asarray(kiln.rand_like(xk))
    assert r.dtype == np.float64 and r.min() >= 0 and r.max() < 1
    n = np.asarray(kiln.randn_like(kiln.zeros(100, 100)))
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    raises_like_torch(lambda: kiln.rand_like(kiln.ones(2, dtype=kiln.long)),
                      lambda: torch.rand_like(torch.ones(2, dtype=torch.long)))


def test_factories_take_device_cpu_only():
    for make in (lambda d: kiln.zeros(2, device=d), lambda d: kiln.ones(2, 3, device=d),
                 lambda d: kiln.randn(2, device=d), lambda d: kiln.rand(2, device=d),
                 lambda d: kiln.full((2,), 1.0, device=d), lambda d: kiln.arange(3, device=d),
                 lambda d: kiln.empty(2, device=d), lambda d: kiln.zeros_like(kiln.ones(2), device=d),
                 lambda d: kiln.tensor([1, 2], device=d)):
        assert make("cpu").shape[0] == 2 or make("cpu").shape[0] == 3
        make(kiln.device("cpu"))
        make(None)
        with pytest.raises(RuntimeError, match="cuda"):
            make("cuda")
    assert kiln.long == kiln.int64 == "int64" and kiln.double == "float64" and kiln.float == "float32"
    assert kiln.zeros(2, dtype=kiln.long).dtype == "int64"


# ----------------------------------------------------------------- sdpa --

def _qkv(shape_q, shape_k, seed, dtype="float32"):
    return rand(shape_q, dtype, seed=seed), rand(shape_k, dtype, seed=seed + 1), rand(shape_k, dtype, seed=seed + 2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sdpa_matches_torch(dtype):
    q, k, v = _qkv((2, 3, 5, 8), (2, 3, 4, 8), 20, dtype)
    Q, K, V = t2k(q), t2k(k), t2k(v)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    same(F.scaled_dot_product_attention(Q, K, V), TF.scaled_dot_product_attention(q, k, v), **tol)
    same(F.scaled_dot_product_attention(Q, K, V, is_causal=True),
         TF.scaled_dot_product_attention(q, k, v, is_causal=True), **tol)
    same(F.scaled_dot_product_attention(Q, K, V, scale=0.3), TF.scaled_dot_product_attention(q, k, v, scale=0.3), **tol)
    m = rand((5, 4), "bool", seed=21)
    m[2] = False  # a row with every key masked: zeros, as torch
    same(F.scaled_dot_product_attention(Q, K, V, attn_mask=t2k(m)),
         TF.scaled_dot_product_attention(q, k, v, attn_mask=m), **tol)
    same(F.scaled_dot_product_attention(Q, K, V, attn_mask=t2k(m), is_causal=True),
         TF.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True), **tol)
    fm = rand((3, 1, 4), dtype, seed=22)
    fm[1, 0, :] = float("-inf")
    same(F.scaled_dot_product_attention(Q, K, V, attn_mask=t2k(fm)),
         TF.scaled_dot_product_attention(q, k, v, attn_mask=fm), **tol)
    # 2-d and 3-d inputs, and non-contiguous ones ([B, L, H, E] transposed)
    same(F.scaled_dot_product_attention(Q[0, 0], K[0, 0], V[0, 0]),
         TF.scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0]), **tol)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)
    same(F.scaled_dot_product_attention(t2k(q.transpose(1, 2).contiguous()).transpose(1, 2), K, V),
         TF.scaled_dot_product_attention(qt, k, v), **tol)


def test_sdpa_grouped_query_and_errors_match_torch():
    q, k, v = _qkv((1, 4, 3, 8), (1, 2, 5, 8), 23)
    same(F.scaled_dot_product_attention(t2k(q), t2k(k), t2k(v), enable_gqa=True),
         TF.scaled_dot_product_attention(q, k, v, enable_gqa=True), rtol=1e-5, atol=1e-5)
    q, k, v = _qkv((2, 3, 8), (2, 4, 8), 24)
    raises_like_torch(lambda: F.scaled_dot_product_attention(t2k(q), t2k(k).to(kiln.double), t2k(v)),
                      lambda: TF.scaled_dot_product_attention(q, k.double(), v))
    raises_like_torch(lambda: F.scaled_dot_product_attention(t2k(q)[0, 0], t2k(k), t2k(v)),
                      lambda: TF.scaled_dot_product_attention(q[0, 0], k, v))
    raises_like_torch(lambda: F.scaled_dot_product_attention(t2k(q), t2k(k), t2k(v), kiln.ones(3, 4, dtype=kiln.long)),
                      lambda: TF.scaled_dot_product_attention(q, k, v, torch.ones(3, 4, dtype=torch.long)))


def test_sdpa_dropout_draws_from_kilns_generator():
    q, k, v = (kiln.randn(2, 6, 8) for _ in range(3))
    kiln.manual_seed(5)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    kiln.manual_seed(5)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    c = F.scaled_dot_product_attention(q, k, v)
    assert np.array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))


# -------------------------------------------------------------- losses --

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_with_class_indices_matches_torch(reduction, smoothing, weighted):
    gen = np.random.default_rng(25)
    w = rand((5,), lo=0, hi=2, seed=26) if weighted else None
    kw = t2k(w) if weighted else None
    for shape in [(4, 5), (3, 5, 2, 3), (5,)]:
        x = rand(shape, seed=27)
        tshape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
        t = torch.from_numpy(gen.integers(0, 5, tshape).astype(np.int64))
        if len(shape) > 1:
            t.view(-1)[1] = -100  # ignored
        same(F.cross_entropy(t2k(x), t2k(t), kw, reduction=reduction, label_smoothing=smoothing),
             TF.cross_entropy(x, t, w, reduction=reduction, label_smoothing=smoothing), rtol=1e-5, atol=1e-6)
    x = rand((4, 5), seed=28)
    t = torch.tensor([1, 7, 7, 0])
    same(F.cross_entropy(t2k(x), t2k(t), kw, ignore_index=7, reduction=reduction, label_smoothing=smoothing),
         TF.cross_entropy(x, t, w, ignore_index=7, reduction=reduction, label_smoothing=smoothing))


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_with_probabilities_matches_torch(smoothing):
    x = rand((4, 3, 2), seed=29)
    p = torch.softmax(rand((4, 3, 2), seed=30), 1)
    w = rand((3,), lo=0, hi=2, seed=31)
    for reduction in ("mean", "sum", "none"):
        same(F.cross_entropy(t2k(x), t2k(p), reduction=reduction, label_smoothing=smoothing),
             TF.cross_entropy(x, p, reduction=reduction, label_smoothing=smoothing))
        same(F.cross_entropy(t2k(x), t2k(p), t2k(w), reduction=reduction, label_smoothing=smoothing),
             TF.cross_entropy(x, p, w, reduction=reduction, label_smoothing=smoothing))


def test_cross_entropy_edge_cases_and_errors_match_torch():
    x = rand((3, 4), seed=32)
    all_ignored = torch.full((3,), -100)
    same(F.cross_entropy(t2k(x), t2k(all_ignored)), TF.cross_entropy(x, all_ignored))  # nan
    raises_like_torch(lambda: F.cross_entropy(t2k(x), t2k(torch.tensor([0, 4, 1]))),
                      lambda: TF.cross_entropy(x, torch.tensor([0, 4, 1])))
    raises_like_torch(lambda: F.cross_entropy(t2k(x), t2k(torch.tensor([0, 1]))),
                      lambda: TF.cross_entropy(x, torch.tensor([0, 1])))
    raises_like_torch(lambda: F.cross_entropy(t2k(x), t2k(torch.tensor([0, 1, 2])), reduction="avg"),
                      lambda: TF.cross_entropy(x, torch.tensor([0, 1, 2]), reduction="avg"))


def test_binary_cross_entropy_and_mse_match_torch():
    x = torch.sigmoid(rand((4, 5), seed=33))
    x[0, 0], x[0, 1] = 0.0, 1.0  # log clamped at -100, as torch
    t = torch.from_numpy(np.random.default_rng(34).random((4, 5)).astype(np.float32))
    w = rand((5,), lo=0, hi=2, seed=35)
    for reduction in ("mean", "sum", "none"):
        same(F.binary_cross_entropy(t2k(x), t2k(t), reduction=reduction),
             TF.binary_cross_entropy(x, t, reduction=reduction), rtol=1e-5, atol=1e-5)
        same(F.binary_cross_entropy(t2k(x), t2k(t), t2k(w), reduction=reduction),
             TF.binary_cross_entropy(x, t, w, reduction=reduction), rtol=1e-5, atol=1e-5)
        same(F.mse_loss(t2k(x), t2k(t), reduction=reduction), TF.mse_loss(x, t, reduction=reduction))
    raises_like_torch(lambda: F.binary_cross_entropy(t2k(x), t2k(t[0])), lambda: TF.binary_cross_entropy(x, t[0]))


# ------------------------------------------------------------ convolution --

CONV2D_CASES = [
    dict(),
    dict(stride=2),
    dict(stride=(2, 1), padding=1),
    dict(padding=(2, 0), dilation=(1, 2)),
    dict(padding="same"),
    dict(padding="same", dilation=2),
    dict(padding="valid", stride=3),
    dict(groups=2, padding=1),
    dict(groups=4, stride=2, dilation=2, padding=2),
]


@pytest.mark.filterwarnings("ignore:Using padding=.same.")
@pytest.mark.parametrize("case", range(len(CONV2D_CASES)))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv2d_matches_torch(case, dtype):
    kw = CONV2D_CASES[case]
    groups = kw.get("groups", 1)
    x = rand((2, 4, 9, 8), dtype, seed=36)
    w = rand((6 if groups != 4 else 8, 4 // groups, 3, 2), dtype, seed=37)
    b = rand((w.shape[0],), dtype, seed=38)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    same(F.conv2d(t2k(x), t2k(w), t2k(b), **kw), TF.conv2d(x, w, b, **kw), **tol)
    same(F.conv2d(t2k(x), t2k(w), None, **kw), TF.conv2d(x, w, None, **kw), **tol)
    same(F.conv2d(t2k(x)[0], t2k(w), **kw), TF.conv2d(x[0], w, **kw), **tol)  # unbatched
    xt = x.transpose(2, 3).contiguous().transpose(2, 3)  # non-contiguous input
    same(F.conv2d(t2k(x.transpose(2, 3).contiguous()).transpose(2, 3), t2k(w), t2k(b), **kw),
         TF.conv2d(xt, w, b, **kw), **tol)


@pytest.mark.parametrize("shape, kernel, kw", [
    ((3, 6, 5, 7), 1, dict()),                          # 1x1, unit stride: the input itself is the GEMM operand
    ((3, 6, 5, 7), 1, dict(groups=2)),
    ((2, 3, 20, 18), 3, dict(padding=1)),               # >= 256 positions: a GEMM per sample into the output
    ((5, 8, 4, 4), 3, dict(padding=1, groups=2)),       # few positions: the samples' patches in one GEMM
    ((4, 2, 3, 3), 3, dict()),                          # one position per sample
    ((2, 5, 33, 31), 3, dict(stride=2, padding=1)),     # strided, rows of 8+: phase planes, odd sizes
    ((1, 4, 20, 40), 3, dict(stride=(2, 3), padding=(0, 2), dilation=2)),
    ((2, 6, 30, 30), 5, dict(stride=2, padding=2)),
])
def test_conv2d_matches_torch_on_each_gemm_layout(shape, kernel, kw):
    x = rand(shape, seed=52)
    w = rand((4, shape[1] // kw.get("groups", 1), kernel, kernel), seed=53)
    b = rand((4,), seed=54)
    same(F.conv2d(t2k(x), t2k(w), t2k(b), **kw), TF.conv2d(x, w, b, **kw), rtol=1e-4, atol=1e-4)
    same(F.conv2d(t2k(x), t2k(w), None, **kw), TF.conv2d(x, w, None, **kw), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, cout, kernel, kw", [
    ((2, 16, 14, 14), 32, 3, dict(padding=1)),                  # ResNet's 'same' 3x3: the implicit GEMM
    ((3, 5, 9, 23), 40, 3, dict(padding=1)),                    # odd plane, a row-tile remainder, 3 samples
    ((1, 24, 7, 7), 64, 5, dict(padding="same", dilation=2)),   # dilated 5x5, 'same' by string
    ((2, 8, 11, 6), 80, 3, dict(padding=1, groups=2)),          # 40 a group: past the grouped kernel's 32
    ((1, 70, 3, 3), 33, 3, dict(padding=1)),                    # K = 630: three k passes of 256
])
def test_conv2d_same_layers_as_implicit_gemm_match_torch(shape, cout, kernel, kw):
    """'same' unit-stride layers of 32 or more output channels a group
    (float32: B's panels packed from the unpadded input under the taps'
    masks, gemm_f32_avx512_masked), with and without bias."""
    x = rand(shape, seed=57)
    w = rand((cout, shape[1] // kw.get("groups", 1), kernel, kernel), seed=58)
    b = rand((cout,), seed=59)
    for bias in (b, None):
        same(F.conv2d(t2k(x), t2k(w), None if bias is None else t2k(bias), **kw), TF.conv2d(x, w, bias, **kw),
             rtol=1e-4, atol=1e-4)


def test_conv2d_matches_torch_on_generated_geometries():
    """Every im2col path (a 'same' convolution's shifted block, rows of 16
    or more positions, the gather table of shorter rows), groups of samples
    run in parallel or one group split over the threads, with and without
    bias, against torch on 200 generated geometries."""
    rng = np.random.default_rng(56)
    checked = 0
    while checked < 200:
        N, groups = int(rng.integers(1, 12)), int(rng.choice([1, 1, 1, 2, 3]))
        C, O = groups * int(rng.integers(1, 6)), groups * int(rng.integers(1, 9))
        H, W = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        st = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        dil = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        pad = (int(rng.integers(0, kh)), int(rng.integers(0, kw)))
        if H + 2 * pad[0] < dil[0] * (kh - 1) + 1 or W + 2 * pad[1] < dil[1] * (kw - 1) + 1:
            continue
        x = rand((N, C, H, W), seed=1000 + checked)
        w = rand((O, C // groups, kh, kw), seed=2000 + checked)
        b = rand((O,), seed=3000 + checked) if checked % 2 else None
        kw_ = dict(stride=st, padding=pad, dilation=dil, groups=groups)
        got = F.conv2d(t2k(x), t2k(w), None if b is None else t2k(b), **kw_)
        same(got, TF.conv2d(x, w, b, **kw_), rtol=1e-4, atol=1e-4)
        checked += 1


DEPTHWISE_BACKBONE = [  # (N, C, H, W, kernel, stride): MobileNetV2/V3, EfficientNet, ConvNeXt layers
    (1, 144, 56, 56, 3, 1), (2, 96, 112, 112, 3, 2), (1, 240, 28, 28, 5, 1), (1, 672, 14, 14, 5, 2),
    (2, 960, 7, 7, 3, 1), (1, 96, 56, 56, 7, 1), (1, 768, 7, 7, 7, 1),
]


@pytest.mark.parametrize("shape", DEPTHWISE_BACKBONE)
def test_depthwise_conv2d_matches_torch_at_backbone_shapes(shape):
    """runtime/kernels/conv_depthwise.h at the shapes it is for: planes wide and
    narrow (7x7: the extended rows wrap within one vector), many planes
    split over the threads, 'same' padding k // 2, with and without bias."""
    N, C, H, W, k, s = shape
    x, w, b = rand((N, C, H, W), seed=60), rand((C, 1, k, k), seed=61), rand((C,), seed=62)
    for bias in (b, None):
        got = F.conv2d(t2k(x), t2k(w), None if bias is None else t2k(bias), stride=s, padding=k // 2, groups=C)
        same(got, TF.conv2d(x, w, bias, stride=s, padding=k // 2, groups=C), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_depthwise_conv2d_matches_torch_on_generated_geometries(dtype):
    """Depthwise (groups = input channels, channel multipliers 1-3) on 150
    generated geometries: kernels 1-7 and rectangular, strides 1-3 (each
    stride a set of phase planes), dilation 1-3, padding up to past the
    kernel's reach and asymmetric ('same' with an even kernel), batches 1-3,
    odd and 1-wide planes, non-contiguous inputs."""
    rng = np.random.default_rng(63)
    checked = 0
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    while checked < 150:
        N, C, mult = int(rng.integers(1, 4)), int(rng.integers(2, 20)), int(rng.choice([1, 1, 1, 2, 3]))
        H, W = int(rng.integers(1, 30)), int(rng.integers(1, 30))
        kh, kw = (int(rng.choice([1, 3, 5, 7])),) * 2 if checked % 3 else (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        st = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        dil = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        pad = (int(rng.integers(0, kh + 2)), int(rng.integers(0, kw + 2)))
        if checked % 10 == 0:
            st, pad = (1, 1), "same"
        elif H + 2 * pad[0] < dil[0] * (kh - 1) + 1 or W + 2 * pad[1] < dil[1] * (kw - 1) + 1:
            continue
        x = rand((N, C, H, W), dtype, seed=4000 + checked)
        if checked % 4 == 1:  # a non-contiguous input
            x = rand((N, C, W, H), dtype, seed=4000 + checked).transpose(2, 3)
        w = rand((C * mult, 1, kh, kw), dtype, seed=5000 + checked)
        b = rand((C * mult,), dtype, seed=6000 + checked) if checked % 2 else None
        kw_ = dict(stride=st, padding=pad, dilation=dil, groups=C)
        got = F.conv2d(t2k(x.contiguous()) if checked % 4 != 1 else t2k(x.transpose(2, 3).contiguous()).transpose(2, 3),
                       t2k(w), None if b is None else t2k(b), **kw_)
        same(got, TF.conv2d(x, w, b, **kw_), **tol)
        checked += 1


@pytest.mark.parametrize("N, C, H, W, pad", [
    (2, 20, 7, 7, 3), (1, 37, 7, 7, 3), (3, 16, 9, 9, 2), (1, 33, 14, 14, 3), (2, 17, 16, 16, 4),
    (1, 48, 7, 11, (3, 1)), (1, 18, 8, 14, (2, 3)),
])
def test_depthwise_conv2d_7x7_channel_blocks_match_torch(N, C, H, W, pad):
    """7x7 windows on 7- and 14-column outputs (the channel-block path):
    channel counts that leave a partial block of 16, padding on one side
    more than the other, taller than wide, batch > 1, with and without bias."""
    x, w, b = rand((N, C, H, W), seed=67), rand((C, 1, 7, 7), seed=68), rand((C,), seed=69)
    for bias in (b, None):
        same(F.conv2d(t2k(x), t2k(w), None if bias is None else t2k(bias), padding=pad, groups=C),
             TF.conv2d(x, w, bias, padding=pad, groups=C), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("H, W, pad", [(19, 21, 0), (23, 37, 1), (5, 50, 2), (30, 20, (3, 0)), (9, 33, (0, 5)),
                                      (14, 14, "same"), (11, 10, 1)])
def test_depthwise_conv2d_register_weight_rows_match_torch(k, H, W, pad):
    """3x3 and 5x5 windows on rows of 8 or more (weights in registers, 4
    or 2 output rows a group): heights that leave a partial row group,
    widths that leave a partial column block or a single one, padding
    none, 'same', past the window's reach and on one axis only."""
    x, w, b = rand((2, 7, H, W), seed=70), rand((7, 1, k, k), seed=71), rand((7,), seed=72)
    for bias in (b, None):
        same(F.conv2d(t2k(x), t2k(w), None if bias is None else t2k(bias), padding=pad, groups=7),
             TF.conv2d(x, w, bias, padding=pad, groups=7), rtol=1e-4, atol=1e-4)


def test_depthwise_conv1d_matches_torch():
    x, w, b = rand((2, 12, 40), seed=64), rand((24, 1, 5), seed=65), rand((24,), seed=66)
    for kw_ in (dict(padding=2), dict(stride=2, dilation=3, padding=4), dict(padding="same")):
        same(F.conv1d(t2k(x), t2k(w), t2k(b), groups=12, **kw_), TF.conv1d(x, w, b, groups=12, **kw_),
             rtol=1e-4, atol=1e-4)


def test_max_pool2d_keeps_torchs_nan_and_first_of_equals_rule_on_every_geometry():
    """The pooled value is the first of the window's maxima in row-major
    order (0.0 and -0.0 compare equal: which one shows), a NaN wins."""
    import itertools
    rng = np.random.default_rng(55)
    checked = 0
    for H, W, k, st, p, d, ceil in itertools.product([5, 8, 9], [6, 11], [1, 2, 3], [1, 2, 3], [0, 1], [1, 2],
                                                     [False, True]):
        if p > k // 2 or H + 2 * p < d * (k - 1) + 1 or W + 2 * p < d * (k - 1) + 1:
            continue
        x = np.round(rng.standard_normal((2, 3, H, W)).astype(np.float32), 1)
        x[0, 0, 1, 1] = np.nan
        x[1, 2, :, 2], x[1, 2, :, 3] = -0.0, 0.0
        want = TF.max_pool2d(torch.from_numpy(x), k, st, p, d, ceil_mode=ceil).numpy()
        got = np.asarray(F.max_pool2d(kiln.from_numpy(x), k, st, p, d, ceil_mode=ceil))
        assert got.shape == want.shape, (H, W, k, st, p, d, ceil)
        assert np.array_equal(got, want, equal_nan=True), (H, W, k, st, p, d, ceil)
        assert np.array_equal(np.signbit(got), np.signbit(want)), (H, W, k, st, p, d, ceil)
        checked += 1
    assert checked > 300


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=3), dict(padding="same", dilation=3),
                                dict(groups=3, padding=1)])
def test_conv1d_matches_torch(kw):
    x = rand((2, 6, 11), seed=39)
    w = rand((9, 6 // kw.get("groups", 1), 4), seed=40)
    b = rand((9,), seed=41)
    same(F.conv1d(t2k(x), t2k(w), t2k(b), **kw), TF.conv1d(x, w, b, **kw), rtol=1e-4, atol=1e-4)
    same(F.conv1d(t2k(x)[1], t2k(w), **kw), TF.conv1d(x[1], w, **kw), rtol=1e-4, atol=1e-4)


def test_conv_errors_match_torch():
    x, w = torch.ones(1, 3, 5, 5), torch.ones(4, 3, 3, 3)
    X, W = t2k(x), t2k(w)
    raises_like_torch(lambda: F.conv2d(X, t2k(torch.ones(4, 2, 3, 3))), lambda: TF.conv2d(x, torch.ones(4, 2, 3, 3)))
    raises_like_torch(lambda: F.conv2d(X, W, stride=2, padding="same"), lambda: TF.conv2d(x, w, stride=2, padding="same"))
    raises_like_torch(lambda: F.conv2d(X, t2k(torch.ones(4, 3, 7, 7))), lambda: TF.conv2d(x, torch.ones(4, 3, 7, 7)))
    raises_like_torch(lambda: F.conv2d(X[0, 0], W), lambda: TF.conv2d(x[0, 0], w))
    raises_like_torch(lambda: F.conv2d(X, W, kiln.ones(3)), lambda: TF.conv2d(x, w, torch.ones(3)))
    raises_like_torch(lambda: F.conv2d(X, W, groups=2), lambda: TF.conv2d(x, w, groups=2))
    raises_like_torch(lambda: F.conv2d(X, W, padding=-1), lambda: TF.conv2d(x, w, padding=-1))
    raises_like_torch(lambda: F.conv2d(X, W.to(kiln.double)), lambda: TF.conv2d(x, w.double()))


# ------------------------------------------------------------ batch_norm --

def test_batch_norm_training_updates_running_stats_like_torch():
    x = rand((4, 3, 5, 2), seed=42)
    rm, rv = torch.zeros(3), torch.ones(3)
    krm, krv = t2k(rm), t2k(rv)
    w, b = rand((3,), seed=43), rand((3,), seed=44)
    for step in range(3):
        xs = x * (step + 1) + step
        same(F.batch_norm(t2k(xs), krm, krv, t2k(w), t2k(b), training=True, momentum=0.2),
             TF.batch_norm(xs, rm, rv, w, b, training=True, momentum=0.2), rtol=1e-5, atol=1e-5)
        same(krm, rm, rtol=1e-6, atol=1e-6)
        same(krv, rv, rtol=1e-6, atol=1e-6)
    same(F.batch_norm(t2k(x), krm, krv, t2k(w), t2k(b)), TF.batch_norm(x, rm, rv, w, b), rtol=1e-5, atol=1e-5)
    # no running statistics: batch statistics only
    same(F.batch_norm(t2k(x[:, :, 0]), None, None, training=True), TF.batch_norm(x[:, :, 0], None, None, training=True),
         rtol=1e-5, atol=1e-5)
    raises_like_torch(lambda: F.batch_norm(t2k(x), None, None), lambda: TF.batch_norm(x, None, None))
    raises_like_torch(lambda: F.batch_norm(t2k(x[:1, :, 0, 0]), krm, krv, training=True),
                      lambda: TF.batch_norm(x[:1, :, 0, 0], rm, rv, training=True))


# --------------------------------------------------------------- pooling --

POOL_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1)),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=3, padding=1, ceil_mode=True),
]


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_pools_match_torch(case):
    kw = POOL_CASES[case]
    x = rand((2, 3, 9, 10), seed=45)
    x[0, 0, 1, 1] = float("nan")
    X = t2k(x)
    same(F.max_pool2d(X, **kw), TF.max_pool2d(x, **kw))
    same(F.max_pool2d(X[1], **kw), TF.max_pool2d(x[1], **kw))
    same(F.max_pool2d(X.transpose(2, 3), **kw), TF.max_pool2d(x.transpose(2, 3), **kw))
    for cip in (True, False):
        same(F.avg_pool2d(X, count_include_pad=cip, **kw), TF.avg_pool2d(x, count_include_pad=cip, **kw))
    same(F.avg_pool2d(X, divisor_override=5, **kw), TF.avg_pool2d(x, divisor_override=5, **kw))
    same(F.max_pool2d(X, 3, 1, 1, dilation=2), TF.max_pool2d(x, 3, 1, 1, dilation=2))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=4, stride=3, ceil_mode=True), dict(kernel_size=2, padding=1)])
def test_pools_1d_match_torch(kw):
    x = rand((2, 3, 11), seed=49)
    X = t2k(x)
    same(F.max_pool1d(X, **kw), TF.max_pool1d(x, **kw))
    same(F.max_pool1d(X[0], **kw), TF.max_pool1d(x[0], **kw))
    same(F.avg_pool1d(X, **kw), TF.avg_pool1d(x, **kw))
    same(F.avg_pool1d(X.transpose(0, 1), count_include_pad=False, **kw),
         TF.avg_pool1d(x.transpose(0, 1), count_include_pad=False, **kw))
    for size in (1, 4, 11, 13):
        same(F.adaptive_avg_pool1d(X, size), TF.adaptive_avg_pool1d(x, size))


def test_pool_errors_match_torch():
    x = torch.ones(1, 1, 4, 4)
    raises_like_torch(lambda: F.max_pool2d(t2k(x), 3, padding=2), lambda: TF.max_pool2d(x, 3, padding=2))
    raises_like_torch(lambda: F.avg_pool2d(t2k(x), 3, padding=2), lambda: TF.avg_pool2d(x, 3, padding=2))
    raises_like_torch(lambda: F.max_pool2d(t2k(x), 5), lambda: TF.max_pool2d(x, 5))
    with pytest.raises(NotImplementedError):
        F.max_pool2d(t2k(x), 2, return_indices=True)


@pytest.mark.parametrize("size", [1, 2, 3, (4, 3), (None, 2), (7, 5), 8])
def test_adaptive_avg_pool2d_matches_torch(size):
    x = rand((2, 3, 7, 5), seed=46)
    same(F.adaptive_avg_pool2d(t2k(x), size), TF.adaptive_avg_pool2d(x, size))
    same(F.adaptive_avg_pool2d(t2k(x)[0].transpose(1, 2), size), TF.adaptive_avg_pool2d(x[0].transpose(1, 2), size))


# ------------------------------------------------------------------ pad --

@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_matches_torch(mode):
    x = rand((2, 3, 4, 5), seed=47)
    for pad in [(2, 1, 0, 3), (1, 1, 1, 1)]:
        same(F.pad(t2k(x), pad, mode=mode), TF.pad(x, pad, mode=mode))
        same(F.pad(t2k(x)[0], pad, mode=mode), TF.pad(x[0], pad, mode=mode))
    same(F.pad(t2k(x)[0].transpose(1, 2), (1, 2), mode=mode), TF.pad(x[0].transpose(1, 2), (1, 2), mode=mode))
    if mode != "constant":
        raises_like_torch(lambda: F.pad(t2k(x), (1, 2), mode=mode), lambda: TF.pad(x, (1, 2), mode=mode))
        raises_like_torch(lambda: F.pad(t2k(x)[0, 0], (1, 1, 1, 1), mode=mode),
                          lambda: TF.pad(x[0, 0], (1, 1, 1, 1), mode=mode))
    if mode == "constant":
        same(F.pad(t2k(x), (1, -2, -1, 0, 2, 0), value=3.5), TF.pad(x, (1, -2, -1, 0, 2, 0), value=3.5))
        same(F.pad(t2k(x).to(kiln.long), (1, 1)), TF.pad(x.long(), (1, 1)))


def test_tensor_methods_like_torchs():
    x = rand((4, 5), seed=50)
    X = t2k(x)
    idx = torch.tensor([[0, 1, 2, 3, 0]])
    for name, args, kwargs in [("masked_fill", (x > 0, 0.0), {}), ("tril", (), {}), ("triu", (1,), {}),
                               ("split", (2,), {}), ("chunk", (2, 1), {}), ("unbind", (), {}),
                               ("clamp", (-1, 1), {}), ("clip", (), {"min": 0}), ("clamp_min", (0,), {}),
                               ("roll", (1, 0), {}), ("argmax", (), {"dim": 1}), ("argmin", (0,), {}),
                               ("topk", (2,), {"largest": False}), ("sort", (), {"descending": True}),
                               ("argsort", (0,), {}), ("gather", (0, idx), {})]:
        kargs = tuple(t2k(a) if isinstance(a, torch.Tensor) else a for a in args)
        want = getattr(x, name)(*args, **kwargs)
        same(getattr(X, name)(*kargs, **kwargs), tuple(want) if isinstance(want, tuple) else want)


# --------------------------------------------- every op traced, both backends --

def _inputs():
    gen = np.random.default_rng(48)
    x = kiln.from_numpy(gen.standard_normal((4, 6)).astype(np.float32))
    m = kiln.from_numpy(gen.random((4, 6)) < 0.3)
    idx = kiln.from_numpy(gen.integers(0, 4, (4, 6)))
    img = kiln.from_numpy(gen.standard_normal((2, 3, 8, 8)).astype(np.float32))
    w = kiln.from_numpy(gen.standard_normal((5, 3, 3, 3)).astype(np.float32))
    return x, m, idx, img, w


TRACED = {
    "masked_fill": lambda x, m, idx, img, w: x.masked_fill(m, float("-inf")) * 2,
    "clamp": lambda x, m, idx, img, w: kiln.clamp(x, -0.5, 0.5) + x.clamp(min=0),
    "clip": lambda x, m, idx, img, w: kiln.clip(x, max=0.2) * x.clip(-1, 1) + kiln.clamp_max(x, 0),
    "tril_triu": lambda x, m, idx, img, w: kiln.tril(x, 1) - x.triu(-1),
    "split": lambda x, m, idx, img, w: [p * 2 for p in x.split([2, 4], 1)],
    "chunk_unbind": lambda x, m, idx, img, w: x.chunk(3, 1)[2] + kiln.unbind(x, 1)[1].unsqueeze(1),
    "stack": lambda x, m, idx, img, w: kiln.stack([x, x * 2, x.T.T], 1),
    "roll": lambda x, m, idx, img, w: kiln.roll(x, (1, -2), (0, 1)) + x.roll(3),
    "argmax": lambda x, m, idx, img, w: (x.argmax(1), kiln.argmin(x), x.argmax(0, keepdim=True)),
    "topk_sort": lambda x, m, idx, img, w: (kiln.topk(x, 3), x.sort(0, True), kiln.argsort(x)),
    "gather": lambda x, m, idx, img, w: x.gather(0, idx),
    "gelu": lambda x, m, idx, img, w: F.gelu(x, approximate="tanh") + F.gelu(x),
    "dropout_eval": lambda x, m, idx, img, w: F.dropout(x, 0.5, training=False) + 1,
    "like": lambda x, m, idx, img, w: kiln.zeros_like(x) + kiln.ones_like(x) + kiln.full_like(x, 2.0),
    "empty": lambda x, m, idx, img, w: (kiln.empty_like(x, dtype=kiln.long) * 0, kiln.empty(2, 3) * 0,
                                        x + kiln.zeros(6, device="cpu")),
    "sdpa": lambda x, m, idx, img, w: F.scaled_dot_product_attention(
        x.view(2, 2, 6), x.view(2, 2, 6), x.view(2, 2, 6), is_causal=True),
    "sdpa_mask": lambda x, m, idx, img, w: F.scaled_dot_product_attention(
        x.view(1, 4, 6), x.view(1, 4, 6), x.view(1, 4, 6), attn_mask=m[:, :4]),
    "cross_entropy": lambda x, m, idx, img, w: F.cross_entropy(x, idx[:, 0], label_smoothing=0.1),
    "bce_mse": lambda x, m, idx, img, w: F.binary_cross_entropy(kiln.sigmoid(x), m.to("float32")) + F.mse_loss(x, x * 2),
    "conv": lambda x, m, idx, img, w: F.conv2d(img, w, padding="same") + 1,
    "conv1d": lambda x, m, idx, img, w: F.conv1d(img[:, :, 0], w[:, :, 0], stride=2),
    "pools": lambda x, m, idx, img, w: (F.max_pool2d(img, 3, 2, 1), F.avg_pool2d(img, 2, ceil_mode=True),
                                        F.adaptive_avg_pool2d(img, (3, 2))),
    "pools_1d": lambda x, m, idx, img, w: (F.max_pool1d(x, 2), F.avg_pool1d(x.unsqueeze(0), 3, 2, 1),
                                           F.adaptive_avg_pool1d(x, 4)),
    "batch_norm_eval": lambda x, m, idx, img, w: F.batch_norm(img, kiln.zeros(3), kiln.ones(3)) * 2,
    "pad": lambda x, m, idx, img, w: F.pad(x, (1, 2), value=-1.0) + F.pad(img, (1, 1, 2, 0), mode="reflect").sum(),
}


@pytest.mark.parametrize("name", sorted(TRACED))
def test_every_op_traces_in_one_graph_on_both_backends(name):
    compiled_equal(TRACED[name], *_inputs(), rtol=1e-5, atol=1e-5)


def test_traced_dropout_in_training_draws_like_eager():
    def f(x):
        return F.dropout(x, 0.25) * 3
    x = kiln.ones(50, 40)
    for backend in ("eager", "llvm"):
        kiln.reset()
        e = kiln.explain(f, backend=backend)(x)
        # kiln's tensors: kiln's generator, in the graph as in eager (a torch
        # program's random ops are CPython's: test_frames)
        assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
        g = kiln.compile(f, backend=backend)
        g(x)
        kiln.manual_seed(11)
        got = np.asarray(g(x))
        kiln.manual_seed(11)
        assert np.array_equal(got, np.asarray(f(x)))


def test_traced_rand_like_draws_like_eager():
    def f(x):
        return kiln.rand_like(x) + kiln.randn_like(x, dtype=kiln.double)
    x = kiln.zeros(30, 20)
    for backend in ("eager", "llvm"):
        kiln.reset()
        e = kiln.explain(f, backend=backend)(x)
        # kiln's tensors: kiln's generator, in the graph as in eager (a torch
        # program's random ops are CPython's: test_frames)
        assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
        g = kiln.compile(f, backend=backend)
        g(x)
        kiln.manual_seed(12)
        got = np.asarray(g(x))
        kiln.manual_seed(12)
        assert got.dtype == np.float64 and np.array_equal(got, np.asarray(f(x)))


def test_traced_batch_norm_training_updates_the_buffers_in_place():
    """In a graph, batch_norm writes the running statistics the caller
    owns, exactly as the eager call does, and a value read from them before
    the write (pending in a fused kernel) sees the old contents."""
    def f(x, rm, rv):
        before = rm * 1.0  # read before the update
        y = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
        return y, before, rm + 0.0
    x = kiln.randn(4, 3, 2)
    for backend in ("eager", "llvm"):
        rm_e, rv_e = kiln.zeros(3), kiln.ones(3)
        want = f(x, rm_e, rv_e)
        kiln.reset()
        rm_c, rv_c = kiln.zeros(3), kiln.ones(3)
        got = kiln.compile(f, backend=backend)(x, rm_c, rv_c)
        for g, w in zip(got, want):
            same(g, k2t(w))
        same(rm_c, k2t(rm_e))
        same(rv_c, k2t(rv_e))
        assert np.array_equal(np.asarray(got[1]), np.zeros(3))  # the old running mean

"""Compiled softmax, log_softmax, layer_norm and GELU (llvm backend) against
torch at transformer shapes, on adversarial data (issue 17: the row kernels
run in float32 lanes with blocked sums and one exp per element).

Tolerances are float32 bounds of the two computations, stated per case;
tests/cpp/test_codegen.cpp holds the same kernels to kiln's eager (double)
reference with the schemes' own bounds."""
import math

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")
F = torch.nn.functional

EPS = float(np.finfo(np.float32).eps)
B, H, T, C = 4, 4, 64, 128


def rows(shape, kind, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    if kind == "spread":  # x - max over a range where exp matters
        x *= 16
    elif kind == "large":  # only the largest few survive exp
        x *= 1e4
    elif kind == "peaked":
        x[..., shape[-1] // 3] = 30
    elif kind == "causal":  # attention's mask: -inf above the diagonal
        x *= 8
        x = x + np.triu(np.full((shape[-2], shape[-1]), -np.inf, np.float32), 1)
    return x


def close(got, want, rtol, atol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    assert np.array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    err = np.abs(got[fin] - want[fin])
    bound = atol + rtol * np.abs(want[fin])
    worst = np.argmax(err - bound) if err.size else 0
    assert np.all(err <= bound), (f"max excess at {worst}: got {got[fin][worst]!r}, want {want[fin][worst]!r}, "
                                  f"rtol {rtol}, atol {atol}")


@pytest.mark.parametrize("shape", [(B, T, C), (B, H, T, T), (3, 17), (5, 1), (2, 1040)])
@pytest.mark.parametrize("kind", ["spread", "large", "peaked", "causal"])
def test_softmax_and_log_softmax_match_torch(shape, kind):
    if kind == "causal" and shape[-2] != shape[-1]:
        pytest.skip("a causal mask is square")
    x = rows(shape, kind, 17)
    sm = kiln.compile(lambda t: kiln.softmax(t, -1))(kiln.from_numpy(x)).numpy()
    lsm = kiln.compile(lambda t: kiln.log_softmax(t, -1))(kiln.from_numpy(x)).numpy()
    tx = torch.from_numpy(x)
    # Both compute exp(x - max) in float32 (relative error <= |x - max| eps/2
    # + 1 ULP each side, |x - max| <= 32 where it matters) and sum in float32
    # lanes (torch: plain; kiln: blocked, <= 68 eps): 88 eps relative.
    close(sm, torch.softmax(tx, -1).numpy(), 88 * EPS, 4 * 2.0 ** -149)
    # (x - max) - log(sum): roundings of values up to |x - max| and the log's.
    lse = math.log(shape[-1])
    close(lsm, torch.log_softmax(tx, -1).numpy(), 4 * EPS, 8 * EPS * (1 + lse))


@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_layer_norm_matches_torch(offset):
    rng = np.random.default_rng(3)
    x = (offset + rng.standard_normal((B, T, C))).astype(np.float32)
    w = rng.uniform(-3, 3, C).astype(np.float32)
    b = rng.uniform(-1, 1, C).astype(np.float32)
    got = kiln.compile(lambda t, w, b: kiln.layer_norm(t, (C,), w, b))(
        kiln.from_numpy(x), kiln.from_numpy(w), kiln.from_numpy(b)).numpy()
    want = F.layer_norm(torch.from_numpy(x), (C,), torch.from_numpy(w), torch.from_numpy(b)).numpy()
    # Exact reference in double, to see which side an error is on.
    xd = x.astype(np.float64)
    mean, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    exact = (xd - mean) / np.sqrt(var + 1e-5) * w + b
    # kiln: deviations to an ULP of themselves (split mean), blocked variance.
    close(got, exact, 40 * EPS, 24 * EPS)
    # torch's float32 statistics keep the offset's rounding (at 1e4 its
    # results are off the exact ones by up to ~5e-3 here, |w| <= 3): against
    # torch only to that; the bound above is the one kiln is held to.
    assert np.abs(want - exact).max() <= 24 * EPS + 8 * 3 * offset * EPS
    close(got, want, 40 * EPS, 24 * EPS + 8 * 3 * offset * EPS)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_matches_torch(approximate):
    x = np.concatenate([np.linspace(-12, 12, 100003, dtype=np.float32),
                        np.array([0.0, -0.0, 1e-30, -1e-30, np.inf, -np.inf, np.nan], np.float32)]).reshape(1, -1)
    got = kiln.compile(lambda t: kiln.gelu(t, approximate=approximate))(kiln.from_numpy(x)).numpy()
    want = F.gelu(torch.from_numpy(x), approximate=approximate).numpy()
    # 0.5 x (1 + f(x)) with f = tanh(...) or erf(x/sqrt2) within 2.3 ULP of 1
    # absolute on each side (kiln: IrEval::tanh / erf; torch: SLEEF / its
    # own): the error is relative to |x|, not to the result.
    fin = np.isfinite(x)
    err = np.abs(got[fin].astype(np.float64) - want[fin])
    assert np.all(err <= 4 * EPS * np.abs(x[fin]) + 1e-37)
    # Non-finite inputs as kiln's eager kernel (torch 2.13 gives NaN for
    # gelu(+inf), where x * 1 is +inf).
    eager = kiln.gelu(kiln.from_numpy(x), approximate=approximate).numpy()
    np.testing.assert_array_equal(got[~fin], eager[~fin])

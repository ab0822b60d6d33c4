"""torch tensors through kiln.compile (issue 13, step 1): in and out
zero-copy, any strides, the caller's object back as itself, in-place writes
seen by the caller; tensors kiln does not take run on torch with a break that
says why; `import kiln` without torch. torch eager is the oracle."""
import gc
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

BACKENDS = ["eager", "llvm"]
DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool]


def sample(dtype, shape=(3, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype == torch.int64:
        return torch.randint(-5, 6, shape, generator=g)
    return torch.randn(shape, generator=g, dtype=dtype)


def graphs_and_breaks(fn, *args):
    e = kiln.explain(fn)(*args)
    return e.graph_count, e.graph_break_count, [b["reason"] for b in e.break_reasons]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_each_dtype_in_and_out(backend, dtype):
    def f(x, y):
        return x | y

    def g(x, y):
        return x * 2 + y

    f = f if dtype == torch.bool else g

    x, y = sample(dtype), sample(dtype, seed=1)
    c = kiln.compile(f, backend=backend)
    for _ in range(2):  # traced, then cached
        r = c(x, y)
        assert type(r) is torch.Tensor and r.dtype == dtype
        assert torch.equal(r, f(x, y))
    assert graphs_and_breaks(f, x, y)[:2] == (1, 0)


VIEWS = {
    "transposed": lambda t: t.t(),
    "offset slice": lambda t: t[1:, 1:],
    "strided": lambda t: t[:, ::2],
    "expanded": lambda t: t[:1].expand(5, 4),
    "permuted 3-d": lambda t: t.reshape(2, 3, 2).permute(2, 0, 1),
    "0-d": lambda t: t[1, 2],
    "empty": lambda t: t[:0],
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_any_strides(backend, view):
    base = torch.arange(12.0).reshape(3, 4) if view != "expanded" else torch.arange(16.0).reshape(4, 4)
    if view == "permuted 3-d":
        base = torch.arange(12.0).reshape(3, 4)
    x = VIEWS[view](base)

    def f(x):
        return x * 10 + 1

    r = kiln.compile(f, backend=backend)(x)
    assert torch.equal(r, f(x)) and r.shape == x.shape


@pytest.mark.parametrize("backend", BACKENDS)
def test_return_x_is_x(backend):
    x = torch.randn(3)

    @kiln.compile(backend=backend)
    def f(a, b):
        return a, b, (a,)

    r = f(x, x)
    assert r[0] is x and r[1] is x and r[2][0] is x


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_share_memory_zero_copy(backend):
    x = torch.arange(12.0).reshape(3, 4)

    @kiln.compile(backend=backend)
    def view_of_input(x):
        return x[1:]

    v = view_of_input(x)
    assert type(v) is torch.Tensor
    assert v.data_ptr() == x[1:].data_ptr()  # the caller's memory, not a copy
    x[2, 0] = 99.0
    assert v[1, 0].item() == 99.0
    # The input's memory outlives the caller's reference through kiln's view.
    del x
    gc.collect()
    assert v.tolist() == [[4.0, 5.0, 6.0, 7.0], [99.0, 9.0, 10.0, 11.0]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_result_is_kilns_memory_kept_alive(backend):
    @kiln.compile(backend=backend)
    def f(x):
        return x + 1

    r = f(torch.ones(1000))
    p = r.data_ptr()
    kiln.reset()
    gc.collect()
    big = [torch.zeros(1000) for _ in range(50)]  # reuse freed memory if any was freed
    assert r.data_ptr() == p and torch.equal(r, torch.full((1000,), 2.0))
    del big


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_write_reaches_the_callers_tensor(backend):
    def f(x, y):
        x[0] = 5.0
        y[:, 1] = y[:, 0]
        return x.sum()

    want_x, want_y = torch.zeros(3, 4).t(), torch.arange(6.0).reshape(3, 2)
    got_x, got_y = want_x.clone().t().contiguous().t(), want_y.clone()
    assert got_x.stride() == want_x.stride()
    want = f(want_x, want_y)
    got = kiln.compile(f, backend=backend)(got_x, got_y)
    assert torch.equal(got, want)
    assert torch.equal(got_x, want_x) and torch.equal(got_y, want_y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kiln_tensors_stay_kiln(backend):
    @kiln.compile(backend=backend)
    def f(x):
        return x + 1

    assert type(f(kiln.ones(3))) is kiln.Tensor


def test_parameter_is_taken_without_grad():
    p = torch.nn.Parameter(torch.randn(4))

    def f(p):
        return p * 3

    with torch.no_grad():
        r = kiln.compile(f)(p)
        assert type(r) is torch.Tensor and torch.equal(r, p * 3)
        assert graphs_and_breaks(f, p)[:2] == (1, 0)


class MyTensor(torch.Tensor):
    pass


REFUSED = {
    "float16": (lambda: torch.randn(3, 4, dtype=torch.float16), "dtype torch.float16"),
    "int16": (lambda: torch.arange(12, dtype=torch.int16).reshape(3, 4), "dtype torch.int16"),
    "complex": (lambda: torch.randn(3, 4, dtype=torch.complex64), "dtype torch.complex64"),
    "requires_grad": (lambda: torch.randn(3, 4, requires_grad=True), "requires grad while grad mode is on"),
    "sparse": (lambda: torch.eye(3, 4).to_sparse(), "torch.sparse_coo"),
    "subclass": (lambda: torch.randn(3, 4).as_subclass(MyTensor), "subclass of torch.Tensor"),
    "meta": (lambda: torch.empty(3, 4, device="meta"), "device meta"),
    # A public way to get a float32 tensor whose memory holds -x.
    "negative view": (lambda: torch.randn(3, 4, dtype=torch.complex64).conj().imag, "negative-bit view"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_tensors_run_on_torch_and_say_why(backend, case):
    make, words = REFUSED[case]

    def f(x):
        return x * 2

    x = make()
    want = f(x)
    got = kiln.compile(f, backend=backend)(x)
    assert type(got) is type(want) and got.dtype == want.dtype and got.layout == want.layout
    if case != "meta":
        assert torch.equal(got.to_dense() if case == "sparse" else got, want.to_dense() if case == "sparse" else want)
    if case == "requires_grad":
        assert got.requires_grad and got.grad_fn is not None  # torch's autograd ran it
    assert kiln._C._torch_refusal(x) != ""
    g, b, reasons = graphs_and_breaks(f, x)
    if case == "requires_grad":
        # Still torch's object, but traced: one graph that runs through
        # torch's autograd (test_torch_autograd.py).
        assert (g, b) == (1, 0)
        return
    assert (g, b) == (0, 1)
    assert "a torch tensor kiln does not take" in reasons[0] and words in reasons[0], reasons


def test_requires_grad_is_taken_under_no_grad():
    x = torch.randn(3, requires_grad=True)

    def f(x):
        return x * 2

    with torch.no_grad():
        assert kiln._C._torch_refusal(x) == ""
        assert graphs_and_breaks(f, x)[:2] == (1, 0)
        r = kiln.compile(f)(x)
        assert not r.requires_grad and torch.equal(r, x.detach() * 2)
    assert "requires grad" in kiln._C._torch_refusal(x)


def test_import_kiln_without_torch():
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # `import torch` now raises ImportError
        import kiln
        assert "torch" not in sys.modules or sys.modules["torch"] is None

        @kiln.compile
        def f(x):
            return x * 2 + 1

        r = f(kiln.tensor([1.0, 2.0]))
        assert r.tolist() == [3.0, 5.0], r
        assert kiln.explain(f)(kiln.tensor([1.0])).graph_count == 1
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_kiln_never_imports_torch():
    code = textwrap.dedent("""
        import sys
        import kiln
        kiln.compile(lambda x: x + 1)(kiln.tensor([1.0]))
        assert "torch" not in sys.modules
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


G = torch.zeros(3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_storage_swapped_under_a_global_or_cell_is_read_again(backend):
    # x.data = y gives the same torch object new memory without touching
    # any dict: kiln must neither read the freed memory nor the old values.
    cell = torch.zeros(3)

    def f(x):
        return x + G + cell

    c = kiln.compile(f, backend=backend)
    x = torch.ones(3)
    assert torch.equal(c(x), f(x))
    G.data = torch.full((3,), 5.0)
    cell.data = torch.full((3,), 7.0)
    assert torch.equal(c(x), f(x)) and c(x).tolist() == [13.0, 13.0, 13.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_returned_outlives_a_storage_swap(backend):
    x = torch.arange(6.0)

    @kiln.compile(backend=backend)
    def f(x):
        return x[2:]

    v = f(x)
    x.data = torch.zeros(100)  # torch views keep the old storage alive; so must kiln's
    big = [torch.full((6,), 9.0) for _ in range(100)]
    assert v.tolist() == [2.0, 3.0, 4.0, 5.0]
    del big


# ---- int32 (BLOOM's ALiBi slopes: torch.arange(..., dtype=torch.int32)) ---

def int32_program(x, i, w):
    a = torch.arange(1, 9, dtype=torch.int32)
    slopes = torch.pow(torch.full((), 0.5, dtype=torch.float32), a)  # a 0-d float ** int32: float32
    return (slopes,
            i + 3,               # a Python int keeps int32
            i * i,               # wraps around as torch's does
            i + i.long(),        # int64 wins
            i.sum(), torch.cumsum(i, 0),  # integer sums are int64
            i.max(), i // 2, i % 3, i / 2,
            x[i[:2]] + x[i[:2].long()],   # int32 indices
            x.int(),             # torch's .int() is int32
            i > 2, torch.where(i > 1, i, 0), i.to(torch.float64).mean(),
            torch.nn.functional.embedding(i[:2] % 8, w))


def test_int32_tensors_are_kiln_tensors_with_torchs_promotion():
    x = torch.randn(10)
    i = torch.tensor([1, 2, 3, 7, 2**30], dtype=torch.int32)
    w = torch.randn(8, 3)
    want = int32_program(x, i, w)
    got = kiln.compile(int32_program)(x, i, w)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype, (w, g)
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    assert kiln._C._torch_refusal(i) == ""
    g, b, reasons = graphs_and_breaks(int32_program, x, i, w)
    assert (g, b) == (1, 0), reasons

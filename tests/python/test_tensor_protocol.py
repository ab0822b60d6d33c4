"""kiln.Tensor follows torch's Python protocol (issue 12): subscripts of
every kind, item assignment, len/iter/attributes, keywords, deepcopy and
pickle. The oracle is torch 2.13 where installed (skipped otherwise), and
NumPy for the index expressions where torch and NumPy agree; compiled code
is compared with eager on both backends, with the caller's tensors checked
after the call."""
import copy
import os
import pickle
import warnings

import numpy as np
import pytest

import kiln

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
BACKENDS = ["eager", "llvm"]

SHAPE = (4, 5, 6)
BASE = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)


def K(a):
    return kiln.from_numpy(np.ascontiguousarray(a)).clone()


def T(a):
    return torch.from_numpy(np.ascontiguousarray(a).copy())


def conv(key, to):
    """The same key for another library: arrays become its tensors."""
    if isinstance(key, tuple):
        return tuple(conv(k, to) for k in key)
    if isinstance(key, np.ndarray):
        return to(key)
    return key


E = Ellipsis
S = slice
# Basic keys (views): ints, negative ints, slices with steps, None, Ellipsis.
BASIC = [0, -1, 3, S(None), S(1, 3), S(None, None, 2), S(-3, None), S(1, -1, 2), S(10, 20), S(-100, 2),
         (0, 1), (-1, -2, -3), (S(None), 2), (S(None), S(None), -1), (E, 0), (E, S(None, None, 3)), (0, E),
         (None,), (None, 0), (S(None), None, 1), (E, None), (None, E, None), (1, S(2, 4), S(None, None, 4)),
         (S(None, None, 3), E, S(1, None, 2)), (), (E,), (None, None, 2), (2, None, S(1, 2), None)]
# Advanced keys (copies): lists, int arrays, bool masks, mixed with basic.
I = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
B = lambda *v: np.array(v, dtype=bool)  # noqa: E731
ADVANCED = [[0, 2], [-1, 0, -1], I(3, 1), I(0), (I(0, 1), I(1, 2)), (I(0, 1), S(None), I(1, 2)),
            (S(None), I(4, 0)), (S(None), S(None), I(5, 5, 0)), (I(0, 3), 0), (1, I(0, 2)), (E, I(1)),
            (I(1, 2), E), (np.array([[0, 1], [2, 3]]),), (S(1, 3), np.array([[0], [4]]), I(1, 2, 3)),
            B(True, False, True, False), (S(None), B(True, True, False, False, True)),
            (B(True, False, True, False), 0), BASE[:, :, 0] > 40, BASE > 50, (E, B(*([True, False] * 3))),
            (None, I(1, 2)), (I(0, 1), None, I(2, 3)), ([0, 1], [1, 2]), (True,), (False,), (0, True),
            (I(0, 1), S(None, None, 2), [1, 2]), (S(None), [True, False, True, False, True])]


def numpy_comparable(key):
    """torch and NumPy differ when ints and arrays are split by a slice
    (torch applies ints as selects first); NumPy is the oracle elsewhere."""
    items = key if isinstance(key, tuple) else (key,)
    kinds = ["a" if isinstance(k, (np.ndarray, list)) else "i" if isinstance(k, (int, bool)) else "s"
             for k in items]
    return not ("a" in kinds and "i" in kinds)


@pytest.mark.parametrize("key", BASIC + ADVANCED, ids=repr)
def test_getitem_matches_numpy(key):
    if not numpy_comparable(key):
        pytest.skip("torch's placement differs from NumPy's here")
    want = BASE[key if not isinstance(key, list) else np.array(key)]
    got = K(BASE)[key]
    np.testing.assert_array_equal(got.numpy(), want)
    assert got.shape == want.shape


@needs_torch
@pytest.mark.parametrize("key", BASIC + ADVANCED, ids=repr)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_getitem_matches_torch(key, dtype):
    a = (BASE % 7 > 2) if dtype == "bool" else BASE.astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = T(a)[conv(key, T)].numpy()
    got = K(a)[key]
    assert got.dtype == dtype
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("key", BASIC, ids=repr)
def test_basic_index_is_a_view(key):
    x = K(BASE)
    v = x[key]
    if v.numel() == 0:
        return
    v[...] = -7.0 if v.ndim else -7.0
    assert (x.numpy() == -7).sum() == v.numel()


@pytest.mark.parametrize("key", [k for k in ADVANCED if not isinstance(k, tuple) or any(
    isinstance(i, (np.ndarray, list)) for i in k)], ids=repr)
def test_advanced_index_is_a_copy(key):
    x = K(BASE)
    v = x[key]
    if v.numel():
        v.numpy()[...] = -7
    np.testing.assert_array_equal(x.numpy(), BASE)


ERRORS = [(10, IndexError, "index 10 is out of bounds for dimension 0 with size 4"),
          ((0, -6), IndexError, "index -6 is out of bounds for dimension 1 with size 5"),
          ((0, 0, 0, 0), IndexError, "too many indices for tensor of dimension 3"),
          (S(None, None, -1), ValueError, "step must be greater than zero"),
          (S(None, None, 0), ValueError, "slice step cannot be zero"),
          (1.5, IndexError, "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are "
                            "valid indices (got float)"),
          (S(1.5, None), TypeError, "slice indices must be integers or None or have an __index__ method"),
          (np.array([0.5]), IndexError, "tensors used as indices must be long, int, byte or bool tensors"),
          (I(7), IndexError, "index 7 is out of bounds for dimension 0 with size 4"),
          (B(True, False), IndexError, "The shape of the mask [2] at index 0 does not match the shape of the "
                                       "indexed tensor [4, 5, 6] at index 0"),
          ((I(0, 1), I(0, 1, 2)), IndexError, "shape mismatch: indexing tensors could not be broadcast together "
                                               "with shapes [2], [3]")]


@pytest.mark.parametrize("key,exc,msg", ERRORS, ids=lambda v: repr(v)[:40])
def test_getitem_errors(key, exc, msg):
    with pytest.raises(exc) as e:
        K(BASE)[key]
    assert str(e.value) == msg
    if torch is not None and not isinstance(key, float):
        with pytest.raises(exc) as te:
            T(BASE)[conv(key, T)]
        assert str(te.value) == msg


def test_zero_dim_errors():
    s = kiln.tensor(3.0)
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor"):
        s[0]
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(s)
    assert s[...].shape == ()
    assert s[None].shape == (1,)


# ----- item assignment --------------------------------------------------------

SET_KEYS = BASIC + ADVANCED


def value_for(shape_after, kind):
    if kind == "scalar":
        return 0.5
    if kind == "int":
        return 3
    if kind == "row":
        n = shape_after[-1] if shape_after else 1
        return np.linspace(-1, 1, n, dtype=np.float32) if shape_after else -2.0
    return np.full(shape_after, -3, dtype=np.float32)


@pytest.mark.parametrize("key", SET_KEYS, ids=repr)
@pytest.mark.parametrize("kind", ["scalar", "int", "row", "full"])
def test_setitem_matches_torch_or_numpy(key, kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if torch is not None:
            ref = T(BASE)
            target_shape = tuple(ref[conv(key, T)].shape)
        else:
            if not numpy_comparable(key):
                pytest.skip("needs torch")
            ref = BASE.copy()
            target_shape = ref[key if not isinstance(key, list) else np.array(key)].shape
        v = value_for(target_shape, kind)
        if torch is not None:
            ref[conv(key, T)] = T(v) if isinstance(v, np.ndarray) else v
            want = ref.numpy()
        else:
            ref[key if not isinstance(key, list) else np.array(key)] = v
            want = ref
    x = K(BASE)
    x[key] = K(v) if isinstance(v, np.ndarray) else v
    np.testing.assert_array_equal(x.numpy(), want)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
@pytest.mark.parametrize("value", [0, 1, 2.7, -1.5, True])
@pytest.mark.parametrize("key", [0, (S(None), -1), (E, S(None, None, 2)), I(1, 3), (B(True, False, True, True),)],
                         ids=repr)
def test_setitem_casts_numbers_like_torch(dtype, value, key):
    a = (BASE % 3 == 0) if dtype == "bool" else BASE.astype(dtype)
    ref = T(a)
    ref[conv(key, T)] = value
    x = K(a)
    x[key] = value
    np.testing.assert_array_equal(x.numpy(), ref.numpy())


@needs_torch
def test_setitem_errors_match_torch():
    cases = [(0, np.ones(3, np.float32)), (I(0, 1), np.ones((3, 5, 6), np.float32)),
             (I(0, 1), np.ones((2, 5, 6), np.float64)), (BASE > 1000, np.ones(2, np.float32)),
             ((S(None), 0), np.ones(2, np.float32))]
    for key, v in cases:
        with pytest.raises(Exception) as te:
            t = T(BASE)
            t[conv(key, T)] = T(v)
        with pytest.raises(type(te.value)) as ke:
            x = K(BASE)
            x[key] = K(v)
        assert str(ke.value) == str(te.value)


def test_setitem_broadcast_casts_and_overlap():
    x = K(BASE[0])
    x[0] = kiln.ones(1, 6, dtype="float64")  # leading 1s dropped, float64 cast as copy_ does
    assert (x.numpy()[0] == 1).all()
    y = kiln.arange(6)
    y[1:] = y[:-1].clone()
    assert y.tolist() == [0, 0, 1, 2, 3, 4]
    z = kiln.arange(6)
    z[1:] = z[:-1]  # overlapping: read before written
    assert z.tolist() == [0, 0, 1, 2, 3, 4]
    m = kiln.tensor([0.2, 0.7, 0.9])
    m[m > 0.5] = 0.5
    assert m.tolist() == pytest.approx([0.2, 0.5, 0.5])
    idx = kiln.zeros(3, 2, dtype="int64")
    idx[:, 0] = kiln.tensor([4, 5, 6])
    assert idx.tolist() == [[4, 0], [5, 0], [6, 0]]
    w = kiln.zeros(2, 3)
    w[0] = [1.0, 2.0, 3.0]
    assert w.tolist() == [[1, 2, 3], [0, 0, 0]]


# ----- the rest of the protocol ---------------------------------------------------

def test_len_iter_and_attributes():
    x = K(BASE)
    assert len(x) == 4
    rows = list(x)
    assert len(rows) == 4 and all(r.shape == (5, 6) for r in rows)
    rows[1][0, 0] = -1.0  # views
    assert x[1, 0, 0].item() == -1.0
    assert x.ndim == 3 and x.dtype == "float32"
    assert x.device == "cpu" and str(x.device) == "cpu" and repr(x.device) == "device(type='cpu')"
    assert x.device.type == "cpu" and x.requires_grad is False
    assert x.is_contiguous() and not x.transpose(0, 1).is_contiguous()
    assert int(kiln.tensor(3)) == 3 and [10, 20, 30][kiln.tensor(1)] == 20
    assert x[kiln.tensor(2)].shape == (5, 6)  # a 0-d int tensor selects


def test_tensor_slice_bounds_and_ellipsis_in_keys():
    x = K(BASE)
    n = kiln.tensor(2)
    np.testing.assert_array_equal(x[:n].numpy(), BASE[:2])
    np.testing.assert_array_equal(x[..., n:].numpy(), BASE[..., 2:])
    with pytest.raises(TypeError, match="only integer tensors of a single element"):
        x[: kiln.tensor(2.0)]


def test_numpy_integer_keys():
    x = K(BASE)
    np.testing.assert_array_equal(x[np.int64(2), np.int32(1)].numpy(), BASE[2, 1])
    np.testing.assert_array_equal(x[np.array([0, 3], dtype=np.int32)].numpy(), BASE[[0, 3]])


METHOD_KWARGS = [
    ("sum", (), {"dim": 0}), ("sum", (), {"dim": 1, "keepdim": True}), ("mean", (), {"dim": (0, 2)}),
    ("amax", (), {"dim": -1, "keepdim": True}), ("transpose", (), {"dim0": 0, "dim1": 1}),
    ("softmax", (), {"dim": -1}), ("log_softmax", (), {"dim": 1}), ("unsqueeze", (), {"dim": 1}),
    ("squeeze", (), {"dim": 0}), ("flatten", (), {"start_dim": 1}), ("select", (), {"dim": 1, "index": 2}),
    ("slice", (), {"dim": 2, "start": 1, "end": 5, "step": 2}), ("to", (), {"dtype": "float64"}),
    ("add", (), {"other": 2.0}), ("pow", (), {"exponent": 2}), ("flatten", (), {"start_dim": 0, "end_dim": 1}),
]


def _keyword_call(name, kwargs):
    """A function calling t.<name>(**kwargs) with the keywords spelled in
    its code (as user code does), so the tracer sees CALL with kwnames."""
    src = f"def f(t):\n    return t.{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})\n"
    ns = {}
    exec(compile(src, f"<keywords {name}>", "exec"), ns)
    return ns["f"]


@pytest.mark.parametrize("name,args,kwargs", METHOD_KWARGS, ids=lambda v: str(v))
def test_method_keywords_eager_and_compiled(name, args, kwargs):
    x = K(BASE)
    want = getattr(x, name)(*args, **kwargs).numpy()
    np.testing.assert_allclose(getattr(kiln, name)(x, *args, **kwargs).numpy(), want, rtol=1e-6)
    f = _keyword_call(name, kwargs)
    np.testing.assert_allclose(f(K(BASE)).numpy(), want, rtol=1e-6)
    for backend in BACKENDS:
        np.testing.assert_allclose(kiln.compile(f, backend=backend)(K(BASE)).numpy(), want, rtol=1e-6)
        assert kiln.explain(f, backend=backend)(K(BASE)).graph_break_count == 0
    if torch is not None:
        tk = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
        if name in ("slice",):
            return
        ref = getattr(T(BASE), name)(*args, **tk).numpy()
        np.testing.assert_allclose(want, ref, rtol=1e-5)


# ----- compiled: subscripts ---------------------------------------------------------

def compiled_getitem_cases():
    fns = {
        "t[1:]": lambda t: t[1:] * 2,
        "t[:, 1]": lambda t: t[:, 1] + 1,
        "t[::2, -1]": lambda t: t[::2, -1],
        "t[None, 0]": lambda t: t[None, 0],
        "t[0, :, None]": lambda t: t[0, :, None],
        "t[[0, 2]]": lambda t: t[[0, 2]] * 3,
        "t[:, [4, 0]]": lambda t: t[:, [4, 0]],
        "t[[0, 1], :, [1, 2]]": lambda t: t[[0, 1], :, [1, 2]],
        "t[0, :, [0, 1]]": lambda t: t[0, :, [0, 1]],
        "t[idx]": lambda t, i: t[i],
        "t[:, idx]": lambda t, i: t[:, i] + 1,
        "t[idx, idx]": lambda t, i: t[i, i],
        "t[1:3, idx, 2]": lambda t, i: t[1:3, i, 2],
        "t[True]": lambda t: t[True],
        "t[..., 0]": lambda t: t[..., 0],
        "t[..., None, 1:]": lambda t: t[..., None, 1:] - 1,
        "t[[0, 1], ..., [2, 3]]": lambda t: t[[0, 1], ..., [2, 3]],
        "requires_grad": lambda t: t * (3 if t.requires_grad else 2) + (1 if t.is_contiguous() else 0),
        "t[[True, False, True, False]]": lambda t: t[[True, False, True, False]],
        "iter": lambda t: [r.sum() for r in t],
        "len/ndim/dtype/device": lambda t: t * len(t) + t.ndim + (1 if t.dtype == "float32" else 0) +
                                          (1 if t.device == "cpu" else 0),
        "keywords": lambda t: t.sum(dim=0, keepdim=True) + kiln.sum(t, dim=(0,), keepdim=True),
        "shape-const": lambda t: t.reshape(t.shape[0], -1)[:, : t.shape[1]],
        "ctor keywords": lambda t: t[0, 0, :2] + kiln.arange(start=0, end=4, step=2) + kiln.full(size=(2,),
                                                                                               fill_value=3.0),
        "op keywords": lambda t: kiln.transpose(t, dim0=0, dim1=2) + kiln.softmax(input=t, dim=0).permute(2, 1, 0),
    }
    return list(fns.items())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,fn", compiled_getitem_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_compiled_getitem_matches_eager(name, fn, backend):
    args = [K(BASE)]
    if fn.__code__.co_argcount == 2:
        args.append(kiln.tensor([3, 0, -1]))
    want = fn(*args)
    ex = kiln.explain(fn, backend=backend)(*args)
    got = kiln.compile(fn, backend=backend)(*args)
    if isinstance(want, list):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy())
    else:
        np.testing.assert_allclose(got.numpy(), want.numpy())
    assert ex.graph_count >= 1
    assert ex.graph_break_count == 0, str(ex)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_bool_mask_breaks_and_is_right(backend):
    def f(t):
        return t[t > 50] * 2
    x = K(BASE)
    np.testing.assert_allclose(kiln.compile(f, backend=backend)(x).numpy(), BASE[BASE > 50] * 2)
    ex = kiln.explain(f, backend=backend)(x)
    assert ex.graph_break_count == 1
    assert "depends on tensor values" in str(ex)


def mask_too_short(t):
    y = t * 1.0
    y[[True, False, True]] += 1  # 3 entries against a dim of 2
    return y


def mask_after_new_axis(t):
    return t[..., None, [False, True]]


def mask_beside_index_list(t, a):
    a.pop()  # an effect before the raise: it must have happened
    y = t * 1.0
    y[[0, -1, 1], [True, False, True], 1:0] = 0.1  # [3] and the mask's [2] do not broadcast
    return y


def test_compiled_assignment_through_a_mask_raises_in_order():
    from differential import check
    check(mask_beside_index_list, kiln.from_numpy(np.arange(24, dtype=np.float32).reshape(2, 3, 4)), [1, 2])


@pytest.mark.parametrize("fn", [mask_too_short, mask_after_new_axis])
def test_compiled_constant_mask_of_the_wrong_shape_raises_torchs_error(fn):
    from differential import check
    check(fn, kiln.from_numpy(np.arange(24, dtype=np.float32).reshape(2, 3, 4)))


# ----- compiled: item assignment ----------------------------------------------------

def fresh_assign_cases():
    def a(t):
        y = t * 1.0
        y[0] = 0
        return y

    def b(t):
        y = t + 0
        y[:, -1] = 1
        return y

    def c(t):
        y = t.clone()
        y[y > 50.0] = 0.5
        return y

    def d(t):
        idx = kiln.zeros(3, 2, dtype="int64")
        idx[:, 0] = kiln.arange(3)
        return t[idx[:, 0]] + idx.sum()

    def e(t):
        y = t.clone()
        s = y.sum()  # read before the write: keeps the old value
        y[1:3, ::2] = y[0, 0] * 2
        z = y
        y[..., 0] = -1.0
        return y, z, s

    def f(t, i):
        y = t.clone()
        y[i] = 7.0
        y[:, i, 0] = kiln.ones(4, 3)
        return y

    def g(t):
        y = t.clone()
        acc = [y]
        y[0, 0] = 100.0
        return acc[0]

    def helper(a):
        a[0] = 1.0

    def h(t):
        y = t * 3
        helper(y)  # the inlined helper's write is seen by the caller's name
        return y

    def i(t):
        r = t[[0, 1]]  # advanced: a copy, so writing it leaves t alone
        r[0] = 0.0
        return r, t + 0

    def augmented(t):
        y = t * 1
        y[0] += 1
        y[:, 1] *= 2
        return y

    return [a, b, c, d, e, f, g, h, i, augmented]


def _np(x):
    return [_np(i) for i in x] if isinstance(x, (tuple, list)) else x.numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", fresh_assign_cases(), ids=lambda f: f.__name__)
def test_compiled_assignment_is_functional_and_matches_eager(fn, backend):
    args = [K(BASE)]
    if fn.__code__.co_argcount == 2:
        args.append(kiln.tensor([0, 2, -1]))
    want = _np(fn(*[a.clone() for a in args]))
    x_before = args[0].numpy().copy()
    got = _np(kiln.compile(fn, backend=backend)(*args))
    for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]):
        np.testing.assert_allclose(g, w)
    np.testing.assert_array_equal(args[0].numpy(), x_before)  # the input was not written
    ex = kiln.explain(fn, backend=backend)(*args)
    assert ex.graph_break_count == 0, str(ex)


def observable_assign_cases():
    def into_input(t):
        t[0] = 0.0
        return t * 2

    def into_view(t):
        y = t.clone()
        v = y[0]
        v[1] = -5.0
        return y

    def view_alive(t):
        y = t.clone()
        v = y[1:]
        y[1] = 9.0
        return v + 0

    def into_param_like(t, w):
        w[:, 0] = t.sum()
        return w

    def view_in_list(t):
        y = t.clone()
        keep = [y[0]]
        y[0, 0] = 5.0
        return keep[0] + 0

    def reshaped_alive(t):
        y = t.clone()
        v = y.view(-1)
        y[0] = 5.0
        return v * 1

    def contiguous_alias(t):
        y = t.clone().contiguous()  # contiguous() may return its input
        y[0] = 3.0
        return y

    def augmented_input(t):
        t[0] += 1
        return t * 1

    return [into_input, into_view, view_alive, into_param_like, view_in_list, reshaped_alive, contiguous_alias,
            augmented_input]


# Writes through views of a tensor the graph made are carried back to the
# memory's owner and its live views (interpreter/translator_views.cpp);
# the rest still break.
_THROUGH_VIEWS = {"into_view", "view_alive", "view_in_list", "reshaped_alive"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [f for f in observable_assign_cases() if f.__name__ in _THROUGH_VIEWS],
                         ids=lambda f: f.__name__)
def test_assignment_through_a_view_of_a_tensor_the_graph_made_is_traced(fn, backend):
    want = fn(K(BASE[0])).numpy()
    got = kiln.compile(fn, backend=backend)(K(BASE[0])).numpy()
    np.testing.assert_allclose(got, want)
    ex = kiln.explain(fn, backend=backend)(K(BASE[0]))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [f for f in observable_assign_cases() if f.__name__ not in _THROUGH_VIEWS],
                         ids=lambda f: f.__name__)
def test_observable_assignment_breaks_and_caller_sees_it(fn, backend):
    """An input, a parameter-like argument, or a view kiln cannot write
    back through (contiguous() may return its input): the write must be
    seen, so the trace breaks there and CPython performs it in place."""
    def args():
        a = [K(BASE[0])]
        if fn.__code__.co_argcount == 2:
            a.append(kiln.zeros(2, 3))
        return a
    ref_args = args()
    want = fn(*ref_args).numpy()
    got_args = args()
    got = kiln.compile(fn, backend=backend)(*got_args).numpy()
    np.testing.assert_allclose(got, want)
    for r, g in zip(ref_args, got_args):
        np.testing.assert_array_equal(g.numpy(), r.numpy())  # the caller sees the same mutation
    ex = kiln.explain(fn, backend=backend)(*args())
    assert "in-place write into a tensor" in str(ex)


# ----- deepcopy and pickle ----------------------------------------------------------

TENSORS = {
    "f32": lambda: K(BASE),
    "f64": lambda: K(BASE.astype(np.float64)),
    "i64": lambda: K(BASE.astype(np.int64)),
    "bool": lambda: K(BASE > 30),
    "0-d": lambda: kiln.tensor(2.5),
    "view-T": lambda: K(BASE).transpose(0, 2),
    "view-step": lambda: K(BASE)[1:, ::2, 3],
    "empty": lambda: kiln.zeros(0, 3),
}


@pytest.mark.parametrize("name", list(TENSORS))
@pytest.mark.parametrize("how", ["deepcopy", "pickle2", "pickle5"])
def test_tensor_copy_and_pickle(name, how):
    t = TENSORS[name]()
    if how == "deepcopy":
        c = copy.deepcopy(t)
    else:
        c = pickle.loads(pickle.dumps(t, protocol=int(how[-1])))
    assert c.shape == t.shape and c.dtype == t.dtype
    np.testing.assert_array_equal(c.numpy(), t.numpy())
    if t.numel():
        c.numpy().reshape(-1)[0] = not c.numpy().reshape(-1)[0] if c.dtype == "bool" else 99
        assert not np.array_equal(c.numpy(), t.numpy())  # independent


def test_deepcopy_keeps_sharing_within_the_copy():
    t = kiln.ones(3)
    a, b = copy.deepcopy([t, t])
    a[0] = 5.0
    assert b[0].item() == 5.0 and t[0].item() == 1.0


class Net(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = kiln.nn.Linear(4, 3)
        self.seq = kiln.nn.Sequential(kiln.nn.Linear(3, 3), kiln.nn.ReLU())
        self.tied = self.fc  # shared submodule
        self.scale = 2.0
        self.names = ["a", "b"]
        self.register_buffer("running", kiln.zeros(3))
        self.w = kiln.nn.Parameter(kiln.ones(3))

    def forward(self, x):
        return self.seq(self.fc(x)) * self.scale + self.running + self.w


def _same_outputs(a, b):
    x = kiln.randn(2, 4)
    np.testing.assert_allclose(a(x).numpy(), b(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("how", ["deepcopy", "pickle2", "pickle4", "pickle5"])
def test_module_copy_and_pickle(how):
    kiln.manual_seed(0)
    m = Net()
    c = copy.deepcopy(m) if how == "deepcopy" else pickle.loads(pickle.dumps(m, protocol=int(how[-1])))
    assert type(c) is Net
    _same_outputs(m, c)
    x = kiln.randn(2, 4)
    np.testing.assert_allclose(kiln.compile(c)(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert [n for n, _ in c.named_parameters()] == [n for n, _ in m.named_parameters()]
    assert c.scale == 2.0 and c.names == ["a", "b"] and c.training
    # independent: mutate the copy, the original is unchanged
    c.fc.weight[0, 0] = 100.0
    c.running[0] = 7.0
    c.scale = 3.0
    assert m.fc.weight[0, 0].item() != 100.0 and m.running[0].item() == 0.0 and m.scale == 2.0
    if how == "deepcopy":
        assert c.tied is c.fc  # shared stays shared
        assert c.tied.weight[0, 0].item() == 100.0


def test_builtin_module_deepcopy_and_compile():
    kiln.manual_seed(1)
    lin = kiln.nn.Linear(4, 2)
    c = copy.deepcopy(lin)
    _same_outputs(lin, c)
    x = kiln.randn(3, 4)
    np.testing.assert_allclose(kiln.compile(c)(x).numpy(), lin(x).numpy(), rtol=1e-6)
    c.weight[0, 0] = 50.0
    assert lin.weight[0, 0].item() != 50.0


def test_module_deepcopy_keeps_hooks_pickle_refuses():
    m = kiln.nn.Linear(2, 2)
    m.register_forward_hook(lambda mod, args, out: out * 0)
    c = copy.deepcopy(m)
    assert (c(kiln.ones(1, 2)).numpy() == 0).all()
    with pytest.raises(TypeError, match="hooks"):
        pickle.dumps(m)


def test_pickled_module_class_must_be_importable():
    class Local(kiln.nn.Module):
        def forward(self, x):
            return x
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(Local())


# ----- generated index expressions (differential against torch) -------------------

def random_key(rng, shape):
    """A random subscript over `shape`: ints (negative too), slices with
    steps, None, one Ellipsis, int arrays, lists, bool masks and bools."""
    parts, dim, used_ellipsis = [], 0, False
    for _ in range(rng.integers(1, 5)):
        kind = rng.choice(["int", "slice", "none", "ellipsis", "arr", "list", "mask", "bool"],
                          p=[.2, .25, .1, .08, .15, .1, .07, .05])
        if kind == "none":
            parts.append(None)
            continue
        if kind == "bool":
            parts.append(bool(rng.integers(0, 2)))
            continue
        if kind == "ellipsis":
            if not used_ellipsis:
                parts.append(Ellipsis)
                used_ellipsis = True
            continue
        if dim >= len(shape):
            break
        n = shape[dim]
        if kind == "int":
            parts.append(int(rng.integers(-n, n)))
        elif kind == "slice":
            lo = rng.choice([None, int(rng.integers(-n - 1, n + 1))])
            hi = rng.choice([None, int(rng.integers(-n - 1, n + 2))])
            st = rng.choice([None, 1, 2, 3])
            parts.append(slice(lo, hi, st))
        elif kind == "arr":
            parts.append(rng.integers(-n, n, size=tuple(rng.integers(1, 3, size=rng.integers(1, 3)))))
        elif kind == "list":
            parts.append([int(v) for v in rng.integers(-n, n, size=rng.integers(1, 4))])
        else:
            parts.append(rng.integers(0, 2, size=n).astype(bool))
        dim += 1
    return tuple(parts)


GEN_SHAPES = [(5,), (4, 6), (3, 4, 5), (2, 3, 2, 4)]
# KILN_GENERATED_INDEX_CASES raises the count for a longer run.
GENERATED = [(s, random_key(np.random.default_rng(seed), s))
             for seed in range(int(os.environ.get("KILN_GENERATED_INDEX_CASES", "300")))
             for s in [GEN_SHAPES[seed % len(GEN_SHAPES)]]]


def _torch_outcome(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(), None
    except Exception as e:  # noqa: BLE001 - the oracle's exception is the expectation
        return None, e


@needs_torch
@pytest.mark.parametrize("shape,key", GENERATED, ids=lambda v: repr(v)[:60])
def test_generated_getitem_and_setitem_match_torch(shape, key):
    # the dtype rotates with the key (stable across runs)
    dtype = ["float32", "int64", "float64", "bool"][len(repr(key)) % 4]
    base = np.arange(np.prod(shape)).reshape(shape)
    base = base % 3 == 1 if dtype == "bool" else base.astype(dtype)
    want, err = _torch_outcome(lambda: T(base)[conv(key, T)].numpy())
    if err is not None:
        with pytest.raises(type(err)) as e:
            K(base)[key]
        assert str(e.value) == str(err)
        return
    got = K(base)[key]
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    # assignment of a number and of a value shaped like the result
    for v in [-1.5, np.full(want.shape, 7, np.float32), np.full(want.shape, 1, base.dtype)]:
        ref = T(base)
        _, err = _torch_outcome(lambda: ref.__setitem__(conv(key, T), T(v) if isinstance(v, np.ndarray) else v))
        x = K(base)
        if err is not None:
            with pytest.raises(type(err)) as e:
                x[key] = K(v) if isinstance(v, np.ndarray) else v
            assert str(e.value) == str(err)
            continue
        x[key] = K(v) if isinstance(v, np.ndarray) else v
        np.testing.assert_array_equal(x.numpy(), ref.numpy())


def _key_source(key):
    """The key as Python source, arrays passed as tensor arguments a0, a1, ..."""
    arrays, parts = [], []
    for k in key:
        if isinstance(k, np.ndarray):
            parts.append(f"a{len(arrays)}")
            arrays.append(k)
        elif isinstance(k, slice):
            parts.append(":".join("" if v is None else str(v) for v in (k.start, k.stop, k.step)))
        elif k is Ellipsis:
            parts.append("...")
        else:
            parts.append(repr(k))
    return ", ".join(parts) + ("," if len(parts) == 1 else ""), arrays


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,key", GENERATED, ids=lambda v: repr(v)[:60])
def test_generated_subscripts_compiled_match_eager(shape, key, backend):
    src, arrays = _key_source(key)
    params = "".join(f", a{i}" for i in range(len(arrays)))
    ns = {"kiln": kiln}
    exec(compile(f"def get(t{params}):\n    return t[{src}] * 2\n"
                 f"def put(t{params}):\n    y = t * 1\n    y[{src}] = -1.5\n    return y + 0\n",
                 "<generated subscript>", "exec"), ns)
    base = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for fn in (ns["get"], ns["put"]):
        args = lambda: [K(base)] + [kiln.from_numpy(np.ascontiguousarray(a)).clone() for a in arrays]  # noqa: E731
        try:
            want, want_err = fn(*args()).numpy(), None
        except Exception as e:  # noqa: BLE001
            want, want_err = None, e
        a = args()
        if want_err is not None:
            with pytest.raises(type(want_err)) as e:
                kiln.compile(fn, backend=backend)(*a)
            assert str(e.value) == str(want_err)
        else:
            np.testing.assert_array_equal(kiln.compile(fn, backend=backend)(*a).numpy(), want)
        np.testing.assert_array_equal(a[0].numpy(), base)  # the caller's tensor is untouched

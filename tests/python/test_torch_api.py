"""The torch API mapped by kiln/_torch_api.py (issue 13, step 2): every row
of the table called through kiln.compile on torch tensors, on both
backends, against torch eager (results, their types, and one graph with no
break); torch's dtypes, torch.Size, an unmapped function's break and its
result, torch's own call for arguments kiln has no lowering for."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
from kiln import _torch_api  # noqa: E402

BACKENDS = ["eager", "llvm"]


def t(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def ints(*shape, lo=0, hi=4, seed=0):
    return torch.randint(lo, hi, shape, generator=torch.Generator().manual_seed(seed))


def mask(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) > 0.5


A, B = t(3, 4), t(3, 4, seed=1)
WIDE = torch.linspace(-5.0, 5.0, 41).reshape(1, 41) * t(3, 1, seed=2).abs().add(0.5)
# Each row of FUNCTIONS: a list of calls (args, kwargs) to compare.
FUNCTION_CALLS = {
    "torch.mul": [((A, B), {}), ((A, 2.5), {})],
    "torch.floor_divide": [((A, 0.7), {})],
    "torch.remainder": [((A, 0.7), {})],
    "torch.pow": [((A.abs(), 1.5), {})],
    "torch.maximum": [((A, B), {})],
    "torch.minimum": [((A, B), {})],
    "torch.eq": [((A, A), {})], "torch.ne": [((A, B), {})], "torch.lt": [((A, B), {})],
    "torch.le": [((A, B), {})], "torch.gt": [((A, 0.0), {})], "torch.ge": [((A, B), {})],
    "torch.bitwise_and": [((ints(3, 4), ints(3, 4, seed=1)), {})],
    "torch.bitwise_or": [((mask(3, 4), mask(3, 4, seed=1)), {})],
    "torch.bitwise_xor": [((ints(3, 4), ints(3, 4, seed=1)), {})],
    "torch.bitwise_not": [((mask(3, 4),), {})],
    "torch.where": [((mask(3, 4), A, B), {})],
    "torch.masked_fill": [((A, mask(3, 4), -1.0), {})],
    "torch.clamp_min": [((A, 0.0), {})], "torch.clamp_max": [((A, 0.5), {})],
    "torch.neg": [((A,), {})], "torch.abs": [((A,), {})], "torch.exp": [((A,), {})],
    "torch.log": [((A.abs(),), {})], "torch.tanh": [((A,), {})],
    "torch.sin": [((WIDE,), {}), ((WIDE.double(),), {})], "torch.cos": [((WIDE,), {}), ((WIDE.double(),), {})], "torch.sqrt": [((A.abs(),), {})],
    "torch.rsqrt": [((A.abs() + 0.1,), {})], "torch.sigmoid": [((A,), {})], "torch.relu": [((A,), {})],
    "torch.amax": [((A, 1), {}), ((A,), {"dim": 0, "keepdim": True})],
    "torch.layer_norm": [((A, (4,)), {"eps": 1e-5})],
    "torch.matmul": [((A, t(4, 5)), {})],
    "torch.reshape": [((A, (4, 3)), {})], "torch.permute": [((A, (1, 0)), {})],
    "torch.select": [((A, 1, 2), {})], "torch.unsqueeze": [((A, 1), {})],
    "torch.squeeze": [((t(3, 1, 4), 1), {})], "torch.flatten": [((t(2, 3, 4), 1), {})],
    # torch's legacy rule: a 1-d empty tensor is skipped (a KV cache that
    # starts as torch.tensor([]) and grows along dim -2).
    "torch.cat": [(([A, B],), {"dim": 1}), (([torch.tensor([]), A],), {"dim": -2}),
                  (([torch.tensor([], dtype=torch.float64), A, B],), {})],
    "torch.concat": [(([A, B],), {})],
    "torch.concatenate": [(([A, B],), {"dim": -1})],
    "torch.argmax": [((A,), {"dim": 1})], "torch.argmin": [((A, 0), {"keepdim": True})],
    "torch.argsort": [((A,), {"dim": 1, "descending": True})],
    "torch.gather": [((A, 1, ints(3, 2)), {})],
    "torch.tril": [((A,), {"diagonal": 1})], "torch.triu": [((A, -1), {})],
    "torch.split": [((A, 2), {"dim": 1})], "torch.chunk": [((A, 2, 0), {})],
    "torch.unbind": [((A, 1), {})], "torch.stack": [(([A, B], 1), {})],
    "torch.clamp": [((A,), {"min": -0.5, "max": 0.5})], "torch.clip": [((A, -0.5), {})],
    "torch.roll": [((A, 1, 1), {})], "torch.topk": [((A, 2), {})],
    "torch.sort": [((A,), {"dim": 0})],
    "torch.conv1d": [((t(2, 3, 8), t(4, 3, 3)), {"padding": 1})],
    "torch.conv2d": [((t(1, 2, 6, 6), t(3, 2, 3, 3), t(3)), {"stride": 2})],
    "torch.max_pool1d": [((t(2, 3, 8), 2), {})], "torch.max_pool2d": [((t(1, 2, 6, 6), 2), {})],
    "torch.avg_pool1d": [((t(2, 3, 8), 2), {})], "torch.adaptive_avg_pool1d": [((t(2, 3, 8), 4), {})],
    "torch.negative": [((A,), {})], "torch.multiply": [((A, B), {})], "torch.true_divide": [((A, B), {})],
    "torch.swapaxes": [((A, 0, 1), {})], "torch.bmm": [((t(2, 3, 4), t(2, 4, 5)), {})],
    "torch.add": [((A, B), {}), ((A, B), {"alpha": 2})],
    "torch.sub": [((A, B), {}), ((A, 1.0), {"alpha": 3})], "torch.subtract": [((A, B), {})],
    "torch.div": [((A, B), {}), ((A, B), {"rounding_mode": "floor"})], "torch.divide": [((A, 2.0), {})],
    "torch.sum": [((A,), {}), ((A, 1), {"keepdim": True}), ((ints(3, 4),), {"dtype": torch.float64})],
    "torch.mean": [((A,), {"dim": (0, 1)}), ((A, -1), {"dtype": torch.float64})],
    "torch.softmax": [((A, 1), {})], "torch.log_softmax": [((A, -1), {"dtype": torch.float64})],
    "torch.embedding": [((t(5, 3), ints(2, 4, hi=5)), {})],
    "torch.dropout": [((A, 0.5, False), {})],
    "torch.clone": [((A,), {})], "torch.transpose": [((A, 0, 1), {})], "torch.t": [((A,), {})],
    "torch.mm": [((A, t(4, 2)), {})], "torch.numel": [((A,), {})],
    "torch.addmm": [((t(2), A, t(4, 2)), {}), ((t(3, 2), A, t(4, 2)), {"beta": 0.5, "alpha": 2.0}),
                    ((torch.full((3, 2), float("nan")), A, t(4, 2)), {"beta": 0})],  # beta 0: the input unread
    "torch.max": [((A,), {}), ((A, 1), {}), ((A, B), {})],
    "torch.min": [((A,), {}), ((A, 0), {"keepdim": True}), ((A, B), {})],
    "torch.addcmul": [((A, B, t(3, 1, seed=3)), {}), ((A, t(4), B), {"value": 0.5})],
    "torch.tensor": [(([1.0, 2.5],), {}), (([[1, 2], [3, 4]],), {}), (([],), {"dtype": torch.float32}),
                     ((3,), {}), (([True, False],), {}), (([1.5],), {"dtype": torch.float64}),
                     (([],), {"dtype": torch.float32, "device": torch.device("cpu")})],
    "torch.full": [(((2, 3), 1.5), {})], "torch.arange": [((5,), {}), ((1, 7, 2), {"dtype": torch.float32})],
    "torch.zeros": [((2, 3), {}), (((2, 3),), {"dtype": torch.int64})],
    "torch.ones": [((3,), {"dtype": torch.float64})],
    "torch.zeros_like": [((A,), {})], "torch.ones_like": [((A,), {"dtype": torch.int64})],
    "torch.full_like": [((A, 7.0), {})],
    "torch.nn.functional.relu": [((A,), {})], "torch.nn.functional.gelu": [((A,), {}), ((A,), {"approximate": "tanh"})],
    "torch.nn.functional.silu": [((A,), {})], "torch.nn.functional.tanh": [((A,), {})],
    "torch.nn.functional.sigmoid": [((A,), {})], "torch.nn.functional.softmax": [((A,), {"dim": -1})],
    "torch.nn.functional.log_softmax": [((A, 1), {})],
    "torch.nn.functional.layer_norm": [((A, (4,), t(4), t(4, seed=2)), {})],
    "torch.nn.functional.linear": [((A, t(5, 4), t(5)), {})],
    "torch.nn.functional.embedding": [((ints(2, 3, hi=5), t(5, 4)), {})],
    "torch.nn.functional.dropout": [((A,), {"p": 0.3, "training": False})],
    "torch.nn.functional.scaled_dot_product_attention": [((t(1, 2, 4, 8), t(1, 2, 4, 8, seed=1), t(1, 2, 4, 8, seed=2)),
                                                          {"is_causal": True})],
    "torch.nn.functional.cross_entropy": [((t(4, 5), ints(4, hi=5)), {})],
    "torch.nn.functional.binary_cross_entropy": [((torch.sigmoid(A), (B > 0).float()), {})],
    "torch.nn.functional.mse_loss": [((A, B), {})],
    "torch.nn.functional.conv1d": [((t(2, 3, 8), t(4, 3, 3)), {"stride": 2})],
    "torch.nn.functional.conv2d": [((t(1, 4, 6, 6), t(4, 2, 3, 3)), {"padding": 1, "groups": 2})],
    "torch.nn.functional.batch_norm": [((t(4, 3), t(3), t(3).abs()), {"training": False})],
    "torch.nn.functional.max_pool1d": [((t(2, 3, 8), 2), {})],
    "torch.nn.functional.max_pool2d": [((t(1, 2, 6, 6), 3), {"stride": 2, "padding": 1})],
    "torch.nn.functional.avg_pool1d": [((t(2, 3, 8), 3), {"stride": 1})],
    "torch.nn.functional.avg_pool2d": [((t(1, 2, 6, 6), 2), {})],
    "torch.nn.functional.adaptive_avg_pool1d": [((t(2, 3, 8), 2), {})],
    "torch.nn.functional.adaptive_avg_pool2d": [((t(1, 2, 6, 6), (1, 1)), {})],
    "torch.nn.functional.pad": [((A, (1, 2)), {"value": 0.5})],
    # wide values: both sides of every kink (hardswish's -3 and 3, softplus's threshold)
    "torch.nn.functional.hardtanh": [((WIDE,), {}), ((WIDE, -2.0, 0.5), {})],
    "torch.nn.functional.relu6": [((WIDE,), {})],
    "torch.nn.functional.hardswish": [((WIDE,), {})], "torch.nn.functional.hardsigmoid": [((WIDE,), {})],
    "torch.nn.functional.leaky_relu": [((WIDE,), {}), ((WIDE, 0.2), {})],
    "torch.nn.functional.elu": [((WIDE,), {}), ((WIDE,), {"alpha": 0.5})],
    "torch.nn.functional.softplus": [((WIDE,), {}), ((WIDE * 8,), {"beta": 2.0, "threshold": 10.0})],
    "torch.nn.functional.mish": [((WIDE,), {})],
    # vector norms (ConvNeXt V2's GRN, XCiT's and Swin V2's cosine attention)
    "torch.norm": [((A,), {}), ((A,), {"dim": -1}), ((t(2, 3, 4),), {"p": 1, "dim": (1, 2), "keepdim": True}),
                   ((A,), {"p": float("inf"), "dim": 0}), ((A,), {"p": 3.0, "dim": 1, "dtype": torch.float64})],
    "torch.linalg.vector_norm": [((A,), {}), ((A,), {"ord": 0, "dim": 1}), ((A,), {"ord": float("-inf"), "dim": 1})],
    "torch.nn.functional.normalize": [((t(2, 3, 4),), {}), ((t(2, 3, 4),), {"dim": -1, "p": 1.0}),
                                      ((torch.zeros(2, 3),), {})],
    "torch.baddbmm": [((t(2, 3, 5), t(2, 3, 4), t(2, 4, 5, seed=1)), {}),
                      ((torch.full((2, 3, 5), float("nan")), t(2, 3, 4), t(2, 4, 5)), {"beta": 0, "alpha": 0.5})],
    # MaxViT's spelling (spaces), ConViT's (a tuple of operands), a transpose,
    # a sum of one operand's own labels, outer and inner products
    "torch.einsum": [(("B G H I D, B G H J D -> B G H I J", t(2, 3, 4, 5, 8), t(2, 3, 4, 6, 8, seed=1)), {}),
                     (("nm,hnm->h", (t(5, 6), t(4, 5, 6, seed=1))), {}), (("ij->ji", A), {}),
                     (("ijk->j", t(3, 4, 2)), {}), (("i,j->ij", t(3), t(4, seed=1)), {}),
                     (("bhwc,hkc->bhwk", t(2, 3, 4, 5), t(3, 6, 5, seed=1)), {}), (("ij,ij->i", A, B), {})],
    # nearest resampling (hrnet's nn.Upsample, FPNs, UNets): torch's rows exactly, also where a float32 scale
    # rounds (1.7, 0.5, a recomputed 2.5, an explicit size)
    "torch.nn.functional.interpolate": [((t(2, 3, 4, 5),), {"scale_factor": 2}), ((t(2, 3, 4, 5),), {"scale_factor": 3}),
                                        ((t(2, 3, 7, 5),), {"size": (10, 3)}), ((t(2, 3, 7),), {"scale_factor": 1.7}),
                                        ((t(1, 2, 3, 4, 5),), {"scale_factor": (2, 1, 0.5)}),
                                        ((t(2, 3, 5, 5),), {"scale_factor": 2.5, "recompute_scale_factor": True})],
    # EdgeNeXt's: a bool mask's running sum in float32; RoBERTa's position ids: an int mask's, exact in int64
    "torch.cumsum": [((A, 1), {}), ((t(2, 3, 4), 0), {}), ((mask(2, 5, 6), 2), {"dtype": torch.float32}),
                     ((A.double(), -1), {}), ((ints(3, 4), 1), {}), ((mask(2, 6), 1), {}), ((t(2, 300), 1), {}),
                     ((ints(3, 4), 0), {"dtype": torch.float64})],
    "torch.nn.functional.group_norm": [((t(2, 6, 3, 3), 3, t(6), t(6, seed=1)), {}), ((t(2, 4, 5), 2), {"eps": 1e-3})],
    # transformers' packed-sequence mask (position ids, a prepended first value), n > 1, a bool tensor's xor
    "torch.diff": [((ints(3, 6),), {"prepend": ints(3, 1), "dim": -1}), ((t(4, 5), 2), {}), ((mask(4, 3),), {"dim": 0}),
                   ((t(2, 3, 4),), {"dim": 1, "append": t(2, 1, 4)}), ((t(6), 3), {})],
    # nn.LSTM's _VF.lstm: one layer with biases; bidirectional, batch_first, no biases
    "torch.lstm": [((t(5, 2, 4), (t(1, 2, 3), t(1, 2, 3, seed=1)),
                     [t(12, 4, seed=2), t(12, 3, seed=3), t(12, seed=4), t(12, seed=5)], True, 1, 0.0, False, False, False), {}),
                   ((t(2, 5, 4), (t(2, 2, 3), t(2, 2, 3, seed=1)),
                     [t(12, 4, seed=2), t(12, 3, seed=3), t(12, 4, seed=4), t(12, 3, seed=5)], False, 1, 0.0, False, True,
                      True), {})],
}
# Rows whose results are random: compared by type, shape and dtype only.
RANDOM = {"torch.rand": [((2, 3), {})], "torch.randn": [((4,), {"dtype": torch.float64})],
          "torch.empty": [((2, 3), {})], "torch.randn_like": [((A,), {})], "torch.rand_like": [((A,), {})],
          "torch.empty_like": [((A,), {})]}

METHOD_CALLS = {
    "t": [((A,), {})], "mm": [((A, t(4, 2)), {})], "addcmul": [((A, B, t(4)), {"value": -2.0})], "bmm": [((t(2, 3, 4), t(2, 4, 1)), {})],
    "to": [((A, torch.float64), {}), ((A, "cpu"), {}), ((A,), {"dtype": torch.int64}), ((A, ints(2)), {}),
           ((A, torch.float32), {"copy": True})],
    "type_as": [((A, ints(2)), {})], "view_as": [((A, t(4, 3)), {})], "reshape_as": [((A.t(), t(2, 6)), {})],
    "expand_as": [((t(3, 1), A), {})], "detach": [((A,), {})], "cpu": [((A,), {})],
    "ndimension": [((A,), {})], "nelement": [((A,), {})], "is_floating_point": [((A,), {}), ((ints(2),), {})],
    "repeat": [((A, 2, 1), {}), ((t(3), (2, 2)), {})],
    "new_zeros": [((A, 2, 3), {})], "new_ones": [((A, (2,)), {"dtype": torch.int64})],
    "new_full": [((A, (2, 2), 3.0), {})], "new_empty": [((A, 2), {})],
    "masked_fill_": [((A.clone(), mask(3, 4), 0.0), {})], "zero_": [((A.clone(),), {})],
    "fill_": [((A.clone(), 2.0), {})], "copy_": [((A.clone(), B), {})], "requires_grad_": [((A,), {})],
    "max": [((A,), {}), ((A, -1), {})], "min": [((A, 1), {"keepdim": True})],
    "sum": [((A, 0), {})], "mean": [((A,), {"dim": 1, "keepdim": True})],
    "softmax": [((A, -1), {})], "log_softmax": [((A, 0), {})], "swapaxes": [((A, 0, 1), {})],
    "add_": [((A.clone(), B), {})], "sub_": [((A.clone(), 1.0), {})], "mul_": [((A.clone(), B), {})],
    "div_": [((A.clone(), 2.0), {})], "clamp_": [((A.clone(), -0.1, 0.1), {})], "relu_": [((A.clone(),), {})],
    "tanh_": [((A.clone(),), {})], "exp_": [((A.clone(),), {})],
    "norm": [((A,), {}), ((t(2, 3, 4), 2, 1, True), {})], "cumsum": [((mask(2, 5, 6), 1), {"dtype": torch.float32})], "baddbmm": [((t(2, 3, 5), t(2, 3, 4), t(2, 4, 5)), {"alpha": 2.0})],
}
# In-place methods on a tensor the caller passed: the write must reach it
# (the VM does it; the trace breaks at the write: tensor_mutation).
INPLACE = {"masked_fill_", "zero_", "fill_", "copy_", "add_", "sub_", "mul_", "div_", "clamp_", "relu_", "tanh_",
           "exp_"}
NO_DATA = {"new_empty", "torch.empty", "empty_like"}
# Calls whose result is an input itself or a constant: nothing to compute,
# so no graph (and no break).
NO_GRAPH = {("torch.dropout", 0), ("torch.nn.functional.dropout", 0), ("torch.numel", 0), ("cpu", 0),
            ("requires_grad_", 0), ("to", 1), ("ndimension", 0), ("nelement", 0), ("is_floating_point", 0),
            ("is_floating_point", 1)} | {("torch.tensor", i) for i in range(7)}  # a constant: folded, no graph


def resolve(path):
    obj = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def clone_args(args):
    def clone(a):
        if isinstance(a, torch.Tensor):
            return a.clone()
        return [clone(x) for x in a] if isinstance(a, list) else a
    return tuple(clone(a) for a in args)


def same(want, got, tol=1e-5):
    if isinstance(want, torch.Tensor):
        assert type(got) is torch.Tensor, (type(got), want)
        assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
        if want.dtype.is_floating_point:
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        else:
            assert torch.equal(got, want), (got, want)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for w, g in zip(want, got):
            same(w, g, tol)
    else:
        assert got == want and type(got) is type(want), (got, want)


# Rows whose result is no tensor, tested below.
OTHER = {"torch.finfo", "torch.iinfo"}


def test_every_row_has_a_test():
    rows = set(_torch_api.FUNCTIONS)
    assert rows - set(FUNCTION_CALLS) - set(RANDOM) - OTHER == set()
    # and every test a row: a row the table stops giving (runtime/tensor/ops.def's
    # TORCH column no longer Same, say) fails here, not silently
    assert (set(FUNCTION_CALLS) | set(RANDOM) | OTHER) - rows == set()
    assert set(_torch_api.TENSOR_METHODS) - set(METHOD_CALLS) == set()


def test_ops_def_torch_column_is_torchs():
    """runtime/tensor/ops.def's TORCH column against torch itself, and the
    table's row of each op's own name against the column."""
    wrong = []
    for name, how in kiln._C.op_torch_functions.items():
        fn = getattr(torch, name, None)
        row = _torch_api.FUNCTIONS.get(f"torch.{name}")
        holds = {"Same": callable(fn) and row == name,          # called as the op (test_function_row)
                 "Adapted": callable(fn) and callable(row),     # through its adapter
                 "Unmapped": callable(fn) and row is None,      # torch's own
                 "NoTorch": fn is None and row is None}[how]
        if not holds:
            wrong.append((name, how, fn, row))
    assert wrong == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(FUNCTION_CALLS))
def test_function_row(backend, name):
    fn = resolve(name)
    for i, (args, kwargs) in enumerate(FUNCTION_CALLS[name]):
        def call(*a):
            return fn(*a, **kwargs)

        want = call(*clone_args(args))
        kiln.reset()
        got = kiln.compile(call, backend=backend)(*clone_args(args))
        same(want, got)
        e = kiln.explain(call, backend=backend)(*clone_args(args))
        assert (e.graph_count, e.graph_break_count) == (0 if (name, i) in NO_GRAPH else 1, 0), (name, i, str(e))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("call", [
    lambda: torch.einsum("...ij,...jk->...ik", t(2, 3, 4), t(2, 4, 5)),  # an ellipsis
    lambda: torch.einsum("ii->i", t(3, 3)),                              # a diagonal
    lambda: torch.einsum("ij,jk", t(3, 4), t(4, 5)),                     # an implicit output
    lambda: torch.einsum("ij,jk->ik", t(3, 1), t(4, 5)),                 # a size-1 label broadcast
    lambda: torch.norm(t(3, 4), p="nuc"),                                # a matrix norm
    lambda: torch.norm(ints(3, 4)),                                      # torch raises for integers
    lambda: torch.nn.functional.interpolate(t(2, 3, 4, 5), scale_factor=2, mode="bilinear"),  # not nearest
], ids=["ellipsis", "diagonal", "implicit", "broadcast", "nuc", "int", "bilinear"])
def test_einsum_and_norm_forms_kiln_does_not_take_are_torchs_own(backend, call):
    want = run_eager(call)
    got = run_eager(kiln.compile(call, backend=backend))
    assert type(want) is type(got)
    if isinstance(want, torch.Tensor):
        same(want, got)
    else:
        assert want == got


def run_eager(fn):
    try:
        return fn()
    except Exception as e:  # the program's own error is part of what it means
        return (type(e), str(e))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_function_row(backend, name):
    fn = resolve(name)
    for args, kwargs in RANDOM[name]:
        def call(*a):
            return fn(*a, **kwargs)

        want = call(*args)
        got = kiln.compile(call, backend=backend)(*args)
        assert type(got) is torch.Tensor and got.shape == want.shape and got.dtype == want.dtype
        e = kiln.explain(call, backend=backend)(*args)
        if name not in ("torch.empty", "torch.empty_like"):
            # CPython runs torch's own: the same draws under the same seed.
            assert [b["id"] for b in e.break_reasons] == ["random_op"], str(e)
            torch.manual_seed(3)
            want = call(*args)
            torch.manual_seed(3)
            assert torch.equal(kiln.compile(call, backend=backend)(*args), want)
        else:
            assert e.graph_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(METHOD_CALLS))
def test_method_row(backend, name):
    for i, (args, kwargs) in enumerate(METHOD_CALLS[name]):
        def call(x, *a):
            return getattr(x, name)(*a, **kwargs)

        want_args, got_args = clone_args(args), clone_args(args)
        want = call(*want_args)
        kiln.reset()
        got = kiln.compile(call, backend=backend)(*got_args)
        if name in NO_DATA:
            assert got.shape == want.shape and got.dtype == want.dtype
        else:
            same(want, got)
        for w, g in zip(want_args, got_args):  # the arguments after the call
            if isinstance(w, torch.Tensor):
                same(w, g)
        if name in INPLACE:
            assert got is got_args[0]
        else:
            e = kiln.explain(call, backend=backend)(*clone_args(args))
            assert (e.graph_count, e.graph_break_count) == (0 if (name, i) in NO_GRAPH else 1, 0), (name, i, str(e))


def test_inplace_method_on_a_tensor_made_in_the_trace_stays_in_the_graph():
    def f(x):
        y = x * 2
        y.add_(1)
        y.relu_()
        return y

    x = A.clone()
    same(f(x.clone()), kiln.compile(f)(x))
    assert torch.equal(x, A)
    e = kiln.explain(f)(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


def test_dtypes_are_constants():
    def f(x):
        if x.dtype == torch.float32:
            return x.to(torch.long) + torch.zeros(3, dtype=torch.int64)
        return x

    for backend in BACKENDS:
        same(f(A[0, :3]), kiln.compile(f, backend=backend)(A[0, :3]))
    e = kiln.explain(f)(A[0, :3])
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


def test_size_behaves_as_a_tuple():
    def f(x):
        b, n = x.shape
        s = x.size()
        facts = (s == torch.Size([b, n]), x.size(1) == n, len(s) == 2, s[-1] == n, isinstance(s, tuple))
        return x.reshape(s[1], s[0]).view(*x.shape[::-1]), x.shape, x.size(-1), facts

    want = f(A)
    got = kiln.compile(f)(A)
    same(want[0], got[0])
    assert got[1] == want[1] and got[2] == want[2]
    assert got[3] == want[3] == (True,) * 5
    e = kiln.explain(f)(A)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unmapped_function_runs_on_torch_and_explain_names_it(backend):
    def f(x):
        y = torch.relu(x) * 2
        z = F.unfold(y, 2)  # no kiln lowering: torch runs it
        return z + 1

    x = t(1, 2, 4, 4)
    want = f(x)
    got = kiln.compile(f, backend=backend)(x)
    same(want, got)
    e = kiln.explain(f, backend=backend)(x)
    assert e.graph_count == 2 and e.graph_break_count == 1, str(e)
    assert e.break_reasons[0]["reason"] == "torch.nn.functional.unfold has no kiln lowering"
    assert e.break_reasons[0]["id"] == "library_fallback"


def test_unmapped_builtin_is_named_where_the_program_reaches_it():
    def f(x):
        return torch.erf(x)

    same(f(A), kiln.compile(f)(A))
    e = kiln.explain(f)(A)
    assert e.break_reasons[0]["reason"] == "torch.erf has no kiln lowering", e.break_reasons


def test_unmapped_function_gets_torch_tensors_from_kiln_tensors():
    # A kiln tensor argument reaches torch's function as a torch tensor
    # over the same memory.
    def f(x):
        return torch.erf(x * 1)

    got = kiln.compile(f)(kiln.tensor([0.0, 0.5]))
    assert torch.allclose(torch.as_tensor(got.tolist()), torch.erf(torch.tensor([0.0, 0.5])))


@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_without_lowering_calls_torch(backend):
    def f(x, y, out):
        torch.add(x, y, out=out)
        return torch.div(x, y, rounding_mode="trunc")

    want_out, got_out = torch.zeros(3, 4), torch.zeros(3, 4)
    want = f(A, B, want_out)
    got = kiln.compile(f, backend=backend)(A, B, got_out)
    same(want, got)
    same(want_out, got_out)
    reasons = [b["reason"] for b in kiln.explain(f, backend=backend)(A, B, torch.zeros(3, 4)).break_reasons]
    assert "torch.add has no kiln lowering" in reasons and "torch.div has no kiln lowering" in reasons, reasons


def test_goal_one_graph_equal_to_eager():
    w1, w2 = t(8, 16), t(16, 8, seed=3)

    def block(x, mask):
        h = F.gelu(x @ w1, approximate="tanh")
        h = F.dropout(h, 0.1, training=False)
        att = torch.softmax((h @ h.transpose(-2, -1)).masked_fill(mask, float("-inf")) / 4.0, dim=-1)
        y = torch.cat([att @ h, h], dim=-1)[..., :16] @ w2
        return F.layer_norm(y + x, (8,)), torch.topk(y, 2, dim=-1).indices if False else torch.argmax(y, -1)

    x, m = t(5, 8, seed=4), torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    for backend in BACKENDS:
        same(block(x, m), kiln.compile(block, backend=backend)(x, m), tol=1e-4)
    e = kiln.explain(block)(x, m)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


# ------------------------------------------------ grad-mode context managers

@pytest.mark.parametrize("backend", BACKENDS)
def test_no_grad_and_inference_mode_blocks_trace(backend):
    def f(x):
        y = x * 2
        with torch.no_grad():
            y = torch.relu(y) + 1
        with torch.inference_mode():
            y = y * 3
        with torch.enable_grad():
            y = y - 1
        return y

    x = t(4)
    same(f(x), kiln.compile(f, backend=backend)(x))
    e = kiln.explain(f, backend=backend)(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


def test_a_block_that_breaks_runs_on_the_vm_with_torchs_grad_mode():
    def f(x):
        y = x * 2
        with torch.no_grad():
            z = F.unfold(y.view(1, 1, 2, 2), 1)  # no kiln lowering: a break inside the block
            inside = torch.is_grad_enabled()
        return z, inside, torch.is_grad_enabled()

    x = t(4)
    want = f(x)
    got = kiln.compile(f)(x)
    same(want[0], got[0])
    assert got[1:] == want[1:] == (False, True)
    e = kiln.explain(f)(x)
    assert "inside a `with` block kiln traces as a null context" in e.break_reasons[0]["reason"]


def test_no_grad_decorator_on_a_method():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        @torch.no_grad()
        def generate(self, x):
            return self.fc(x) * 2

        def forward(self, x):
            return self.generate(x)

    torch.manual_seed(0)
    m = M()
    x = t(2, 4)
    with torch.no_grad():
        same(m(x), kiln.compile(m)(x))
        e = kiln.explain(m)(x)
    # torch's decorator wraps the method in a closure: the wrapper, found on
    # the class, is pinned as itself and its cells guarded there
    # (K['...decorate_context'].__closure__[i]), so it inlines: one graph.
    assert e.graph_count == 1 and e.graph_break_count == 0, str(e)
    assert "K['context_decorator.<locals>.decorate_context'].__closure__[0]" in str(e)
    assert "kiln.linear" in e.graphs[0].code


@pytest.mark.parametrize("backend", BACKENDS)
def test_mapped_functions_on_tensors_kiln_does_not_take_run_on_torch(backend):
    def f(x, y):
        return torch.relu(x) + torch.add(x, y, alpha=2), torch.cat([x, y]), F.gelu(x)

    for x, y in [(t(3).half(), t(3, seed=1).half()), (t(3).requires_grad_(), t(3, seed=1))]:
        want = f(x, y)
        got = kiln.compile(f, backend=backend)(x, y)
        same(want, got, tol=1e-3)
        if x.requires_grad:
            assert all(g.requires_grad for g in got)


def test_every_trace_time_row_names_a_torch_function():
    assert [p for p in _torch_api.TRACE_TIME if _torch_api._resolve(torch, p) is None] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_tracing_state_functions_fold_and_compiled_code_is_compiling(backend):
    # torchvision's stochastic_depth: `if not torch.jit.is_scripting() and
    # not torch.jit.is_tracing(): _log_api_usage_once(...)` in every block.
    # torch.compiler.is_compiling() is True in traced code, as under
    # torch.compile (transformers' is_torchdynamo_compiling reads it).
    def f(x):
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            torch._C._log_api_usage_once("kiln.test.tracing_state")
        flags = (torch.compiler.is_compiling(), torch.compiler.is_dynamo_compiling(),
                 torch.onnx.is_in_onnx_export(), torch.fx._symbolic_trace.is_fx_tracing())
        return x * 2, flags

    x = t(4)
    want = f(x)
    got = kiln.compile(f, backend=backend)(x)
    same(want[0], got[0])
    assert want[1] == (False, False, False, False)
    assert got[1] == (True, True, False, False)
    e = kiln.explain(f, backend=backend)(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
    # Code CPython runs (a kiln.disable'd function) gets torch's own answer;
    # after that break the resume function is compiled again.
    @kiln.disable
    def plain():
        return torch.compiler.is_compiling()

    def g(x):
        outside = plain()
        return x + 1, outside, torch.compiler.is_compiling()

    assert kiln.compile(g, backend=backend)(x)[1:] == (False, True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_assert_on_known_conditions_folds_and_a_false_one_raises_torchs_error(backend):
    # torchvision's ViT and timm's PatchEmbed check the input size with
    # torch._assert: a shape comparison kiln guards, then nothing to run.
    def f(x):
        torch._assert(x.shape[-1] == 4, f"Wrong image width! Expected 4 but got {x.shape[-1]}")
        return x * 2

    x = t(4)
    e = kiln.explain(f, backend=backend)(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
    c = kiln.compile(f, backend=backend)
    same(f(x), c(x))
    with pytest.raises(AssertionError, match="Expected 4 but got 5"):
        f(t(5))
    with pytest.raises(AssertionError, match="Expected 4 but got 5"):
        c(t(5))


@pytest.mark.parametrize("backend", BACKENDS)
def test_finfo_and_iinfo_fold(backend):
    def f(x):
        m = torch.finfo(x.dtype).min
        return x.masked_fill(x > 0, m), torch.finfo(torch.float64).eps, torch.iinfo(torch.long).max, \
            torch.finfo().tiny

    x = t(4)
    want = f(x)
    got = kiln.compile(f, backend=backend)(x)
    same(want[0], got[0])
    assert got[1:] == want[1:]
    e = kiln.explain(f, backend=backend)(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)

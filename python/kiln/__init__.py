"""kiln: a Dynamo-style JIT tracer compiling to fused native kernels.

    import kiln
    x = kiln.randn(4, 8)
    y = kiln.softmax(x @ x.T, 1)
"""
from . import _C
from ._C import Tensor, from_numpy, manual_seed
from ._compile import compile, explain, reset, mark_dynamic, config
from ._functions import disable
from . import nn, distributed
from . import fx
from . import _threads

# Every op of the registry (runtime/tensor/ops.def) as kiln.<name>, with torch's
# names and signatures: zeros, ones, randn, add, softmax, linear, ...
for _name in _C.op_names:
    globals()[_name] = getattr(_C, _name)
del _name

float32, float64, int32, int64 = "float32", "float64", "int32", "int64"
bool_ = "bool"
# torch's other names for the same dtypes (kiln.long is torch.long's).
long, double, float = int64, float64, float32
bool = bool_


def tensor(data, dtype=None, device=None):
    """A tensor owning a copy of `data` (nested lists, numbers, an array);
    floats become float32 and ints int64 unless dtype says otherwise."""
    if device is not None and str(device) not in ("cpu", "cpu:0"):
        raise RuntimeError(f"tensor(): kiln has only the cpu device, not '{device}'")
    return _C.tensor(data, dtype)


class no_grad:
    """torch.no_grad for code ported from torch: kiln computes no gradients,
    so it changes nothing. A context manager, and a decorator that returns
    the function itself (`@kiln.no_grad()` or `@kiln.no_grad`), so a
    decorated function compiles as it is."""

    def __new__(cls, func=None):
        if func is not None:  # @kiln.no_grad without parentheses
            return func
        return super().__new__(cls)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False

    def __call__(self, func):
        return func


class inference_mode(no_grad):
    """torch.inference_mode: as no_grad (`mode` is accepted and ignored)."""

    def __new__(cls, mode=True):
        if callable(mode):
            return mode
        return object.__new__(cls)

    def __init__(self, mode=True):
        pass


class enable_grad(no_grad):
    """torch.enable_grad: as no_grad, nothing to change."""


def from_dlpack(obj):
    """A tensor sharing the memory of any DLPack producer (torch, jax, numpy)."""
    import numpy as np
    return from_numpy(np.from_dlpack(obj))


def _tensor_dlpack(self, stream=None):
    return self.numpy().__dlpack__()


Tensor.__dlpack__ = _tensor_dlpack


class device(str):
    """Where a tensor lives: always the CPU. A str subclass, so that
    `t.device == "cpu"` and `str(t.device) == "cpu"` hold as for torch.device
    (and compiled code, where `t.device` is the plain string "cpu", agrees)."""

    def __new__(cls, type="cpu", index=None):
        if str(type) != "cpu":
            raise RuntimeError(f"kiln has only the cpu device, not '{type}'")
        return super().__new__(cls, "cpu")

    @property
    def type(self):
        return "cpu"

    @property
    def index(self):
        return None

    def __repr__(self):
        return "device(type='cpu')"

    def __reduce__(self):
        return (device, ("cpu",))


_threads.follow_torch()  # torch imported first: its thread count is kiln's
# The frame hook's Python half reads this CPython's bytecode; on a version
# kiln has no tables for, kiln.compile raises (kiln/_compile.py
# _require_version) and the rest of the package (tensors, kiln.nn's
# built-in modules, the KBC API) works.
if _compile.VERSION_SUPPORTED:
    from . import _frames
    _C.frames_set_callbacks(_frames.classify, _frames.kbc, _frames.build, _compile._uses_torch)
    _C.frames_set_own_code_dir(_frames._KILN_DIR)

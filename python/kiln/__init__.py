"""kiln: a Dynamo-style JIT tracer compiling to fused native kernels.

    import kiln
    x = kiln.randn(4, 8)
    y = kiln.softmax(x @ x.T, 1)
"""
from . import _C
from ._C import Tensor, from_numpy, tensor, manual_seed
from ._compile import compile, explain, reset, mark_dynamic, disable, config
from . import nn, distributed
from . import fx

# Every op of the registry (runtime/ops.def) as kiln.<name>, with torch's
# names and signatures: zeros, ones, randn, add, softmax, linear, ...
for _name in _C.op_names:
    globals()[_name] = getattr(_C, _name)
del _name

float32, float64, int64 = "float32", "float64", "int64"
bool_ = "bool"


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

"""A convolution with its evaluation BatchNorm and activation runs as one
pass (issue 28: codegen/conv_pattern.h, runtime/kernels/conv_epilogue.h):
equal to torch eager for every activation and every convolution path
(depthwise kernels, the GEMM paths), and still equal after the module's
parameters and statistics change in place between calls, with no
recompile: the BatchNorm's per-channel scale and shift are computed from
the module's tensors on every call, never frozen into the program.
Tolerance 1e-4 as tests/python/test_torch_models.py."""
import copy

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import kiln  # noqa: E402

TOL = 1e-4
FUSED = "in one pass"

ACTIVATIONS = {
    "relu": lambda: nn.ReLU(),
    "relu_inplace": lambda: nn.ReLU(inplace=True),
    "relu6": lambda: nn.ReLU6(inplace=True),
    "hardswish": lambda: nn.Hardswish(),
    "hardsigmoid": lambda: nn.Hardsigmoid(),
    "silu": lambda: nn.SiLU(inplace=True),
    "gelu": lambda: nn.GELU(),
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "none": lambda: nn.Identity(),
}

# (in channels, out channels, kernel, stride, groups, plane): each takes
# another path of runtime/tensor/ops_conv.cpp or kernels/conv_depthwise.cpp.
CONVS = {
    "depthwise_rows": (16, 16, 3, 1, 16, 20),     # output rows >= 16
    "depthwise_s2": (8, 8, 3, 2, 8, 11),           # phase planes
    "depthwise_same": (16, 16, 7, 1, 16, 10),      # whole-plane vectors
    "depthwise_block": (32, 32, 7, 1, 32, 7),      # 16-channel blocks (7x7 on 7x7)
    "depthwise_mult": (4, 8, 3, 1, 4, 9),          # channel multiplier 2
    "gemm_direct": (6, 10, 3, 1, 1, 12),           # padded planes, no im2col
    "gemm_im2col": (6, 10, 3, 2, 1, 9),            # im2col
    "gemm_gather": (6, 10, 3, 1, 2, 5),            # short rows, grouped
    "pointwise": (8, 12, 1, 1, 1, 6),              # 1x1
    "grouped_narrow": (32, 32, 3, 1, 4, 10),       # narrow groups, one batched kernel (conv_grouped.h)
    "grouped_narrow_s2": (32, 32, 3, 2, 4, 17),    # the same over phase planes
    "gemm_implicit": (16, 32, 3, 1, 1, 12),        # 'same', 32+ output channels: implicit GEMM
    "gemm_phased": (8, 16, 3, 2, 1, 17),           # strided: one GEMM over phase planes (conv_strided.h)
}


def block(conv, act, bias=False, bn=True):
    cin, cout, k, s, g, _ = CONVS[conv]
    layers = [nn.Conv2d(cin, cout, k, stride=s, padding=k // 2, groups=g, bias=bias)]
    if bn:
        layers.append(nn.BatchNorm2d(cout))
    layers.append(ACTIVATIONS[act]())
    m = nn.Sequential(*layers)
    if bn:
        with torch.no_grad():  # statistics and affine parameters that are not the defaults
            m[1].running_mean.uniform_(-0.5, 0.5)
            m[1].running_var.uniform_(0.5, 2.0)
            m[1].weight.uniform_(0.5, 1.5)
            m[1].bias.uniform_(-0.5, 0.5)
    return m.eval()


def example(conv, n=2, dtype=torch.float32):
    cin, _, _, _, _, hw = CONVS[conv]
    return torch.randn(n, cin, hw, hw, dtype=dtype) * 2


def close(want, got, tol=TOL):
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def fused_steps():
    return kiln._C.llvm_report()["summary"].count(FUSED)


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
@pytest.mark.parametrize("conv", sorted(CONVS))
def test_conv_bn_activation_is_one_pass_equal_to_eager(conv, act):
    torch.manual_seed(0)
    m = block(conv, act, bias=conv.endswith("s2"))
    x = example(conv)
    kiln.reset()
    with torch.no_grad():
        close(m(x), kiln.compile(m, backend="llvm")(x))
    assert fused_steps() == 1, kiln._C.llvm_report()["summary"]


@pytest.mark.parametrize("act", ["relu6", "silu", "gelu", "hardswish"])
def test_conv_activation_without_batch_norm_and_float64(act):
    torch.manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        m = block("depthwise_rows", act, bias=True, bn=False).to(dtype)
        x = example("depthwise_rows", dtype=dtype)
        kiln.reset()
        with torch.no_grad():
            close(m(x), kiln.compile(m, backend="llvm")(x))
        assert fused_steps() == 1, kiln._C.llvm_report()["summary"]


def test_activations_at_their_edges():
    """Large, tiny, zero and non-finite values through every activation's
    fused form (the float32 kernels' polynomial exp and erf): as eager."""
    torch.manual_seed(2)
    edge = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 3.0, -3.0, 6.0, -6.0, 20.0, -20.0, 90.0, -90.0, 1e4, -1e4,
                         float("inf"), float("-inf")])
    for act in sorted(ACTIVATIONS):
        m = nn.Sequential(nn.Conv2d(16, 16, 1, groups=16, bias=False), ACTIVATIONS[act]()).eval()
        with torch.no_grad():
            m[0].weight.fill_(1.0)
        x = edge.repeat(2, 16, 1, 2).reshape(2, 16, 4, 8)
        if act == "gelu":  # torch's own gelu(inf) is NaN (its vectorized erf); the fused kernel gives inf
            x = x.nan_to_num(posinf=1e30, neginf=-1e30)
        kiln.reset()
        with torch.no_grad():
            want, got = m(x), kiln.compile(m, backend="llvm")(x)
        torch.testing.assert_close(got, want, rtol=TOL, atol=TOL, equal_nan=True)
        if act != "none":
            assert fused_steps() == 1, (act, kiln._C.llvm_report()["summary"])
    nan = torch.full((1, 16, 2, 8), float("nan"))
    for act in ("relu", "relu6", "hardswish", "silu", "gelu"):
        m = nn.Sequential(nn.Conv2d(16, 16, 1, groups=16, bias=False), ACTIVATIONS[act]()).eval()
        kiln.reset()
        with torch.no_grad():
            assert torch.isnan(kiln.compile(m, backend="llvm")(nan)).all(), act


def test_parameters_changed_in_place_between_calls_are_seen_without_recompiling():
    """What freezing would get wrong: the fused program reads the module's
    tensors on every call, so in-place changes of running statistics,
    BatchNorm and convolution weights (through .data too, which torch's
    version counter does not see) and load_state_dict are as eager's."""
    torch.manual_seed(3)
    m = nn.Sequential(block("depthwise_rows", "relu6", bias=True), nn.Conv2d(16, 8, 1), nn.BatchNorm2d(8),
                      nn.SiLU()).eval()
    x = example("depthwise_rows")

    def f(x):
        return m(x)

    kiln.reset()
    c = kiln.compile(f, backend="llvm")
    dw_bn, pw_conv, pw_bn = m[0][1], m[1], m[2]

    def check():
        with torch.no_grad():
            close(m(x), c(x))
        assert fused_steps() == 2, kiln._C.llvm_report()["summary"]

    check()
    with torch.no_grad():
        dw_bn.running_var.fill_(2.0)
        check()
        dw_bn.running_mean.add_(0.25)
        check()
        m[0][0].weight.data.mul_(0)
        check()
        m[0][0].weight.data.copy_(torch.randn_like(m[0][0].weight))
        m[0][0].bias.data.fill_(0.5)
        check()
        pw_bn.weight.data.mul_(-1.5)
        pw_bn.bias.data.add_(1.0)
        check()
        pw_conv.weight.mul_(0.5)
        check()
    other = copy.deepcopy(m)
    with torch.no_grad():
        for p in other.parameters():
            p.copy_(torch.randn_like(p))
        for name, b in other.named_buffers():
            if b.dtype.is_floating_point:
                b.copy_(torch.rand_like(b) + (0.5 if "var" in name else 0.0))
    m.load_state_dict(other.state_dict())
    check()
    assert kiln._C.cache_entries(kiln._compile._as_kbc(f)) == 1


def test_training_batch_norm_and_shared_outputs_are_not_fused():
    """Training BatchNorm is the batch_norm op (its statistics move as
    torch's); a convolution or BatchNorm output something else reads keeps
    its own pass; an in-place activation's input read later is its result."""
    torch.manual_seed(4)
    m = block("depthwise_rows", "relu6")
    x = example("depthwise_rows")
    m.train()
    twin = copy.deepcopy(m)
    kiln.reset()
    with torch.no_grad():
        close(m(x), kiln.compile(twin, backend="llvm")(x))
    assert fused_steps() == 0, kiln._C.llvm_report()["summary"]
    for name, b in m.named_buffers():
        close(b, dict(twin.named_buffers())[name])

    conv, bn = nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16).eval()

    def conv_read_twice(x):
        c = conv(x)
        return torch.relu(bn(c)), c

    def bn_read_twice(x):
        y = bn(conv(x))
        return torch.relu(y), y

    def inplace_then_read(x):
        y = bn(conv(x))
        r = nn.functional.relu(y, inplace=True)
        return r + y

    for fn, fused in ((conv_read_twice, 0), (bn_read_twice, 1), (inplace_then_read, 1)):
        kiln.reset()
        with torch.no_grad():
            want, got = fn(x.clone()), kiln.compile(fn, backend="llvm")(x.clone())
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            close(w, g)
        assert fused_steps() == fused, (fn.__name__, kiln._C.llvm_report()["summary"])


class Residual(nn.Module):
    """A ResNet block's tail: act(bn(conv(x)) + identity); with bn=False the
    convolution's own output (and bias) takes the residual."""

    def __init__(self, channels, k, groups, act, bn=True):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, k, padding=k // 2, groups=groups, bias=not bn)
        self.bn = nn.BatchNorm2d(channels) if bn else nn.Identity()
        self.act = ACTIVATIONS[act]()

    def forward(self, x):
        out = self.bn(self.conv(x))
        out += x
        return self.act(out)


# (channels, kernel, groups, plane): depthwise rows, depthwise 16-channel
# blocks, the GEMM's padded planes, 1x1, the implicit GEMM, narrow groups.
RESIDUAL_CONVS = [(16, 3, 16, 20), (32, 7, 32, 7), (8, 3, 1, 12), (8, 1, 1, 6), (32, 3, 1, 10), (32, 3, 4, 10)]


@pytest.mark.parametrize("act", ["relu", "relu_inplace", "silu", "none"])
@pytest.mark.parametrize("shape", RESIDUAL_CONVS)
def test_residual_add_joins_the_epilogue(shape, act):
    torch.manual_seed(5)
    channels, k, groups, hw = shape
    for bn in (True, False):
        m = Residual(channels, k, groups, act, bn=bn).eval()
        if bn:
            with torch.no_grad():
                m.bn.running_var.uniform_(0.5, 2.0)
                m.bn.running_mean.uniform_(-0.5, 0.5)
        x = torch.randn(2, channels, hw, hw)
        kiln.reset()
        with torch.no_grad():
            close(m(x), kiln.compile(m, backend="llvm")(x))
        summary = kiln._C.llvm_report()["summary"]
        assert fused_steps() == 1 and "a residual" in summary, summary


def test_a_broadcast_add_is_not_a_residual():
    """conv + a [C, 1, 1] tensor is a broadcast add, not an element-wise
    residual: it keeps its own kernel, the BatchNorm and relu fuse only when
    they come after it as a chain the pattern knows (here they do not)."""
    torch.manual_seed(6)
    conv, bn = nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16).eval()
    per_channel = torch.randn(16, 1, 1)

    def f(x):
        return torch.relu(bn(conv(x)) + per_channel)

    x = example("depthwise_rows")
    kiln.reset()
    with torch.no_grad():
        close(f(x), kiln.compile(f, backend="llvm")(x))
    assert "a residual" not in kiln._C.llvm_report()["summary"]

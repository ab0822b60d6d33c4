"""kiln.fx.symbolic_trace(model) without example inputs (issue 14): the
inputs are tensors of symbolic size; their rank, the sizes the model's ops
require and their dtype are what the model's own code fixes; a branch on a
tensor's value is an error naming its line. The oracle is the model run
eagerly on the same inputs."""
import inspect

import numpy as np
import pytest

import kiln
from kiln import fx, nn
from kiln_testing import close


def meta(gm, name):
    """The meta column of a placeholder in print_tabular ("f32[s0, 8]")."""
    for line in gm.graph.tabular().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if cells[0] == "placeholder" and cells[1] == name:
            return cells[-1]
    raise KeyError(name)


def indices(shape, high):
    return kiln.from_numpy(np.random.default_rng(0).integers(0, high, shape).astype(np.int64))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(kiln.relu(self.fc1(x)))


def test_a_linear_fixes_the_last_size_and_nothing_fixes_the_rank():
    m = MLP()
    gm = fx.symbolic_trace(m)
    # The smallest rank that traces; the size Linear requires is a number.
    assert meta(gm, "x") == "f32[8]"
    assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_module", "call_function", "call_module", "output"]
    x = kiln.randn(8)
    assert close(gm(x), m(x)) and gm._retraced == []
    # Other ranks and batches run the model's code traced for them.
    for shape in [(3, 8), (5, 8), (2, 7, 8)]:
        x = kiln.randn(*shape)
        assert close(gm(x), m(x))
    assert len(gm._retraced) == 2  # one symbolic graph per rank


class Attention(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = kiln.softmax(q @ k.transpose(-2, -1) * (1.0 / (C // self.heads) ** 0.5), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


def test_unpacking_size_fixes_the_rank_and_batch_and_length_stay_symbols():
    m = Attention()
    gm = fx.symbolic_trace(m)
    assert meta(gm, "x") == "f32[s0, s1, 32]"
    views = [n for n in gm.graph.nodes if n.target_str == "view"]
    assert views and all("s0" in str(n.args) and "s1" in str(n.args) for n in views)
    for shape in [(2, 5, 32), (3, 9, 32), (1, 4, 32)]:
        x = kiln.randn(*shape)
        assert close(gm(x), m(x), 1e-4)
    # One graph for every batch and length; size 1 specializes, as in torch.
    assert len(gm._retraced) == 1


class TinyGPT(nn.Module):
    def __init__(self, vocab=50, block=32, d=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.block = block

    def forward(self, idx, targets=None):
        b, t = idx.size()
        if t > self.block:  # (not assert: pytest rewrites asserts into code kiln does not translate)
            raise ValueError(f"sequence of {t} is longer than {self.block}")
        pos = kiln.arange(0, t)
        x = self.wte(idx) + self.wpe(pos)
        return self.head(self.ln(x))


def test_indices_are_int64_and_a_branch_on_a_size_is_a_relation():
    m = TinyGPT()
    gm = fx.symbolic_trace(m)
    # `targets` has a default: it keeps it, as forward's callers do.
    assert [n.name for n in gm.graph.nodes if n.op == "placeholder"] == ["idx"]
    assert meta(gm, "idx") == "i64[s0, s1]"
    assert gm.graph.shape_guards == ["s1 <= 32"]
    for shape in [(2, 5), (3, 32), (4, 17)]:
        idx = indices(shape, 50)
        assert close(gm(idx), m(idx), 1e-4)
    assert gm._retraced == []
    # Past the relation, the model's own assert raises, traced again.
    with pytest.raises(ValueError, match="^sequence of 33 is longer than 32$"):
        gm(indices((2, 33), 50))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = kiln.relu(self.bn(self.conv(x)))
        x = nn.functional.max_pool2d(x, 2)
        return self.fc(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def test_a_convolution_fixes_rank_and_channels_and_the_image_size_stays_symbolic():
    m = SmallCNN().eval()
    gm = fx.symbolic_trace(m)
    assert meta(gm, "x") == "f32[s0, 3, s1, s2]"
    for shape in [(2, 3, 12, 12), (3, 3, 9, 16)]:
        x = kiln.randn(*shape)
        assert close(gm(x), m(x), 1e-4)
    assert gm._retraced == []


class Masked(nn.Module):
    def forward(self, x, mask):
        return kiln.softmax(x.masked_fill(mask, -1e9), dim=-1)


def test_a_mask_is_bool_and_its_size_a_relation_with_the_other_input():
    m = Masked()
    gm = fx.symbolic_trace(m)
    assert meta(gm, "x") == "f32[s0]" and meta(gm, "mask") == "b8[s1]"
    assert gm.graph.shape_guards == ["s0 == s1"]
    x = kiln.randn(6)
    mask = kiln.from_numpy(np.array([True, False, False, True, False, False]))
    assert close(gm(x, mask), m(x, mask))
    # Inputs that break the relation are traced for what they are: the
    # model's own error.
    with pytest.raises(RuntimeError, match="masked_fill"):
        gm(kiln.randn(6), kiln.from_numpy(np.array([True, False, True])))


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            return y
        return -y


def test_a_branch_on_a_tensor_value_names_the_line():
    line = inspect.getsourcelines(Gate.forward)[1] + 2
    with pytest.raises(RuntimeError, match=rf"Gate cannot continue: branch on the value of a tensor in Gate.forward "
                                           rf"\(at .*test_fx_without_examples.py:{line}\)"):
        fx.symbolic_trace(Gate())


class LongGate(nn.Module):
    def forward(self, x):
        if x.shape[0] > 40:
            return x[:40] * 3
        return x * 2


def test_a_branch_on_a_symbolic_size_holds_only_where_its_relation_does():
    m = LongGate()
    gm = fx.symbolic_trace(m)
    assert gm.graph.shape_guards == ["s0 <= 40"]
    assert [n.target_str for n in gm.graph.nodes if n.op == "call_function"] == ["mul"]
    for n in (3, 40, 41, 64, 5):
        x = kiln.randn(n)
        assert close(gm(x), m(x))
    assert len(gm._retraced) == 1  # one graph past 40, reused


class NeedsOneImageSize(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 5)
        self.fc = nn.Linear(2 * 12 * 12, 3)

    def forward(self, x):
        # Only 28-wide images reach the Linear with 288 features.
        x = nn.functional.max_pool2d(kiln.relu(self.conv(x)), 2)
        return self.fc(x.flatten(1))


def test_sizes_a_later_op_requires_are_learned_through_the_ops_before_it():
    m = NeedsOneImageSize()
    gm = fx.symbolic_trace(m)
    # The smallest rank is an unbatched image (C, H, W), as conv2d allows;
    # one channel, and a width whose conv and pool give 12 (the Linear's).
    assert meta(gm, "x").startswith("f32[1, ")
    assert any(g.endswith("== 288") for g in gm.graph.shape_guards)
    for shape in [(2, 1, 28, 28), (3, 1, 28, 28)]:
        x = kiln.randn(*shape)
        assert close(gm(x), m(x), 1e-4)
    assert len(gm._retraced) == 1  # batched images: one graph


class SixDims(nn.Module):
    def forward(self, x):
        a, b, c, d, e, f = x.shape
        return x.sum(0) * a


def test_a_model_no_guess_satisfies_is_a_clear_error_asking_for_examples():
    with pytest.raises(RuntimeError, match=r"SixDims without example inputs: no guess of its inputs' ranks, sizes and "
                                           r"dtypes traces \(the furthest, x0 of rank 1, stopped at: .*unpacking a "
                                           r"sequence of the wrong length.*test_fx_without_examples.py:\d+\)\)\. "
                                           r"Pass example inputs"):
        fx.symbolic_trace(SixDims())
    m = SixDims()
    x = kiln.randn(2, 2, 2, 2, 2, 3)
    assert close(fx.symbolic_trace(m, x)(x), m(x))


def test_a_custom_tracer_policy_applies_without_examples():
    class NoLeaves(fx.Tracer):
        def is_leaf_module(self, m, name):
            return False

    m = MLP()
    gm = fx.GraphModule(m, NoLeaves().trace(m))
    assert "call_module" not in [n.op for n in gm.graph.nodes]
    x = kiln.randn(8)
    assert close(gm(x), m(x))

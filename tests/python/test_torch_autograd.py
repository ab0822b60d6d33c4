"""Autograd (issue 13): under grad mode, a graph that reads a torch tensor
requiring grad (an argument, a parameter) is captured as ever and runs
through torch's own ops, so torch's autograd records it; under no_grad /
inference_mode the same code runs on kiln's kernels.

Tolerance: gradients and updated parameters equal eager's within 1e-6
absolute and 1e-5 relative in float32. The autograd backend calls the same
torch functions eager calls, in the same order, so in practice they are
bit-equal; the slack covers the few nodes that do not record gradients
(masks, positions), which run on kiln's kernels."""
import copy
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
import test_torch_models as M  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


def close(want, got):
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


def mse(out, *inputs):
    return out.pow(2).mean()


def vae_step_loss(out, x, eps):
    recon, mu, logvar = out
    return M.vae_loss(recon, x, mu, logvar)


# name -> (model maker, inputs maker, loss, graphs, breaks)
MODELS = {
    "gpt2": (lambda: M.GPT(M.GPTConfig(dropout=0.1)), lambda: (torch.randint(0, 50, (2, 10)),), mse, 1, 0),
    "mlp_mixer": (lambda: M.MLPMixer(), lambda: (torch.randn(2, 3, 16, 16),), mse, 1, 0),
    "resnet18_style": (lambda: M.ResNet(M.BasicBlock, [2, 2, 2, 2]), lambda: (torch.randn(4, 3, 16, 16),), mse, 1, 0),
    "vae": (lambda: M.VAE(), lambda: (torch.rand(4, 1, 8, 8), torch.randn(4, 8)), vae_step_loss, 1, 0),
    "bert_layer": (lambda: M.BertLayer(),
                   lambda: (torch.randn(2, 5, 16), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])), mse, 1, 0),
    # nn.GRU is traced as kiln.nn.GRU (its gates unrolled over the steps).
    "gru_lm": (lambda: M.GRULM(), lambda: (torch.randint(0, 20, (2, 7)),), mse, 1, 0),
}


def training_steps(name, steps=2):
    """The same model twice (eager and kiln), trained side by side in
    train mode with SGD; gradients, parameters and buffers compared after
    every step. Dropout draws from torch's generator in both (seeded)."""
    make, inputs, loss_fn, graphs, breaks = MODELS[name]
    torch.manual_seed(0)
    model = make().train()
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)

    def step(*a):
        return loss_fn(model(*a), *a)

    compiled = kiln.compile(step)
    for i in range(steps):
        args = inputs()
        torch.manual_seed(100 + i)
        want = loss_fn(ref(*args), *args)
        ref_opt.zero_grad()
        want.backward()
        ref_opt.step()
        torch.manual_seed(100 + i)
        got = compiled(*args)
        assert type(got) is torch.Tensor and got.grad_fn is not None  # torch's autograd recorded it
        close(want, got)
        opt.zero_grad()
        got.backward()
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            assert p.grad is not None, n
            close(q.grad, p.grad)
        opt.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            close(q, p)
        for b, c in zip(model.buffers(), ref.buffers()):  # BatchNorm's running statistics and counter
            close(c, b)
    return model, step, inputs, graphs, breaks


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_step_gradients_equal_eager(name):
    model, step, inputs, graphs, breaks = training_steps(name)
    args = inputs()
    e = kiln.explain(step)(*args)
    assert (e.graph_count, e.graph_break_count) == (graphs, breaks), str(e)
    # Every graph runs through torch's autograd, and says why.
    assert all(why and why.endswith("requires grad") for why in e.autograd), e.autograd
    assert "runs through torch's autograd" in str(e)
    if breaks:
        assert e.break_reasons[-1]["id"] == "module_call" and "GRU" in e.break_reasons[-1]["reason"]
    # The same model under no_grad (and inference_mode, eval) runs on
    # kiln's kernels: the graphs say so and the result records nothing.
    model.eval()
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            e = kiln.explain(step)(*args)
            assert (e.graph_count, e.graph_break_count) == (graphs, breaks), str(e)
            assert e.autograd == [None] * graphs, e.autograd
            assert "runs through torch's autograd" not in str(e)
            want = step(*args)
            got = kiln.compile(step)(*args)
            assert not got.requires_grad
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)


def test_resnet_running_statistics_move_as_eager():
    # BatchNorm in training through the autograd backend: torch's own
    # batch_norm updates the very buffers, and the counter moves first.
    model, *_ = training_steps("resnet18_style", steps=3)
    assert int(model.bn1.num_batches_tracked) == 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def cache_entries(compiled):
    return kiln._C.cache_entries(compiled._kiln_compiled.kbc)


def test_toggling_grad_mode_selects_the_entry_without_recompiling():
    torch.manual_seed(0)
    m = Net()
    x = torch.randn(3, 4)
    c = kiln.compile(m)
    assert c(x).grad_fn is not None
    with torch.no_grad():
        assert c(x).grad_fn is None
    # Both entries now exist: switching back and forth compiles nothing.
    assert cache_entries(c) == 2
    e = kiln.explain(m)(x)
    # (the forward frame itself is traced: names from self)
    assert e.autograd == ["parameter fc.weight requires grad"]
    assert "GRAD_MODE on" in "".join(e.guards)
    with torch.no_grad():
        e = kiln.explain(m)(x)
        assert e.autograd == [None] and "GRAD_MODE off" in "".join(e.guards)
    version = kiln._C._torch_mirror_version(m)
    for _ in range(3):
        assert c(x).grad_fn is not None
        with torch.no_grad():
            assert c(x).grad_fn is None
    assert kiln._C._torch_mirror_version(m) == version  # the mirror was not read again
    assert cache_entries(c) == 2


def test_requires_grad_off_and_on_flips_the_entry():
    torch.manual_seed(0)
    m = Net()
    x = torch.randn(3, 4)
    c = kiln.compile(m)
    assert c(x).requires_grad
    for p in m.parameters():
        p.requires_grad_(False)
    out = c(x)
    assert not out.requires_grad
    close(m(x), out)
    assert kiln.explain(m)(x).autograd == [None]
    for p in m.parameters():
        p.requires_grad_(True)
    out = c(x)
    assert out.requires_grad
    out.sum().backward()
    assert m.fc.weight.grad is not None


def test_an_input_that_requires_grad():
    def f(x, w):
        return (x @ w).relu().sum(dim=1)

    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5)
    want = f(x, w)
    want.sum().backward()
    gx = x.grad.clone()
    x.grad = None
    got = kiln.compile(f)(x, w)
    close(want, got)
    got.sum().backward()
    close(gx, x.grad)
    e = kiln.explain(f)(x, w)
    assert (e.graph_count, e.graph_break_count) == (1, 0) and e.autograd == ["input L['x'] requires grad"]
    assert any("GradTensorMatch L['x'] f32[3, 4]" in g for g in e.guards), e.guards
    with torch.no_grad():  # the same tensor, now a kiln tensor: another entry, on kiln's kernels
        e = kiln.explain(f)(x, w)
        assert e.autograd == [None]
        assert not kiln.compile(f)(x, w).requires_grad
    # Another shape fails the guard: a new entry, still through autograd.
    x2 = torch.randn(2, 4, requires_grad=True)
    got = kiln.compile(f)(x2, w)
    assert got.shape == (2,) and got.grad_fn is not None


def test_integer_results_do_not_record_gradients():
    # argmax, comparisons: never require grad, as in torch.
    def f(x):
        return x.argmax(dim=1), (x > 0), x * 2

    x = torch.randn(3, 4, requires_grad=True)
    idx, mask, y = kiln.compile(f)(x)
    assert not idx.requires_grad and not mask.requires_grad and y.requires_grad
    assert torch.equal(idx, x.argmax(dim=1)) and torch.equal(mask, x > 0)


def test_dropout_in_training_is_random_like_torch():
    # Seeded: the same draws as eager (torch's generator, torch's dropout).
    torch.manual_seed(0)
    drop = nn.Dropout(0.5)
    x = torch.ones(64, 64, requires_grad=True)
    c = kiln.compile(drop)
    torch.manual_seed(7)
    want = drop(x)
    torch.manual_seed(7)
    got = c(x)
    assert torch.equal(want, got) and got.grad_fn is not None
    # Unseeded: about half dropped, and a new mask each call.
    a, b = c(x), c(x)
    assert 0.4 < (a == 0).float().mean().item() < 0.6
    assert not torch.equal(a, b)
    a.sum().backward()
    assert set(x.grad.unique().tolist()) <= {0.0, 2.0, 4.0}


def test_a_no_grad_block_inside_breaks_and_runs_under_torchs_grad_mode():
    # Traced as doing nothing elsewhere, the block would record gradients
    # in the autograd backend: it runs on the VM under torch's real no_grad.
    def f(x):
        y = x * 2
        with torch.no_grad():
            z = y + 1
        return y, z

    x = torch.randn(3, requires_grad=True)
    y, z = kiln.compile(f)(x)
    assert y.requires_grad and not z.requires_grad
    torch.testing.assert_close(z, x.detach() * 2 + 1)
    e = kiln.explain(f)(x)
    assert any(b["id"] == "grad_mode_block" for b in e.break_reasons), e.break_reasons


def test_an_op_without_a_torch_lowering_is_a_named_break():
    # The lowering is read off kiln/_torch_api.py's table when torch is
    # first seen: without OP_FORMS' setitem row (kiln's functional
    # assignment has no torch function of its name) the op has none.
    code = textwrap.dedent("""
        import kiln, kiln._torch_api as api
        del api.OP_FORMS["setitem"]
        import torch

        def f(x):
            y = x * 2
            y[0] = 0.0
            return y * 3

        x = torch.randn(3, requires_grad=True)
        got = kiln.compile(f)(x)
        want = f(x)
        assert torch.equal(got, want) and got.grad_fn is not None
        got.sum().backward()
        assert x.grad.tolist() == [0.0, 6.0, 6.0], x.grad
        e = kiln.explain(f)(x)
        reasons = [b for b in e.break_reasons if b["id"] == "no_autograd_lowering"]
        assert reasons and "kiln's setitem() has no torch lowering" in reasons[0]["reason"], e.break_reasons
        assert "input L['x'] requires grad" in reasons[0]["reason"]
        with torch.no_grad():  # kiln's kernels need no lowering: one graph
            e = kiln.explain(f)(x)
            assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_the_lowering_comes_from_the_one_table():
    # Spot checks of the reverse reading (kiln/_torch_api.py:
    # autograd_lowerings): a plain row, an F row that is the op, an @_over
    # adapter, a method form, and a kiln-only op.
    import kiln._torch_api as api
    names = {"relu", "layer_norm", "sum", "permute", "index", "zeros"}
    found = api.autograd_lowerings(torch, names, ["permute", "zeros"])
    assert found["relu"] is torch.relu
    assert found["layer_norm"] is F.layer_norm
    assert found["sum"] is torch.sum
    assert found["permute"] is torch.Tensor.permute
    assert found["index"] is api.OP_FORMS["index"]
    assert "zeros" not in found  # an adapter not @_over the op: no tensor ever reaches it


@pytest.mark.parametrize("functional", [False, True])
def test_embedding_padding_row_gets_no_gradient(functional):
    torch.manual_seed(0)
    emb = nn.Embedding(6, 3, padding_idx=0)

    def f(idx):
        out = F.embedding(idx, emb.weight, padding_idx=0) if functional else emb(idx)
        return out.pow(2).sum()

    idx = torch.tensor([[0, 1, 2], [0, 3, 0]])
    f(idx).backward()
    want = emb.weight.grad.clone()
    emb.weight.grad = None
    kiln.compile(f)(idx).backward()
    assert emb.weight.grad[0].abs().sum() == 0
    close(want, emb.weight.grad)
    e = kiln.explain(f)(idx)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
    with torch.no_grad():
        close(f(idx), kiln.compile(f)(idx))


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float", "all_masked"])
def test_attention_under_grad_mode_stays_in_the_graph_with_torchs_gradients(mask):
    # kiln's attention kernel takes q, k, v that require grad (a model's
    # projections under grad mode): it runs as its torch form
    # (_torch_api._flash_attention), one graph, eager's values and gradients.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, requires_grad=True) for _ in range(3))
    keep = torch.rand(5, 5) > 0.3
    if mask == "all_masked":
        keep[1] = False  # a row with nothing to attend to: zeros, as torch's sdpa gives
    kwargs = {"none": {}, "causal": {"is_causal": True}, "bool": {"attn_mask": keep},
              "float": {"attn_mask": torch.randn(5, 5)}, "all_masked": {"attn_mask": keep}}[mask]

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs) * 2

    want = f(q, k, v)
    want.sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    got = kiln.compile(f)(q, k, v)
    close(want, got)
    got.sum().backward()
    for g, t in zip(grads, (q, k, v)):
        close(g, t.grad)
    e = kiln.explain(f)(q, k, v)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


# ---- torch.autograd.Function: a library's custom op (BLOOM's GELU) --------

class ScaledGelu(torch.autograd.Function):
    """forward keeps what backward needs on ctx; backward is deliberately
    not forward's derivative, so a test can tell torch ran this class's own."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        ctx.mark_non_differentiable()
        if ctx.needs_input_grad[1]:  # scale is a float: False, in eager as in the trace
            scale = 0.0
        return x * torch.sigmoid(1.702 * x) * scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 0 + 42.0 * ctx.scale, None


class SetupContextGelu(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * torch.sigmoid(1.702 * x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.seen = output

    @staticmethod
    def backward(ctx, g):
        return g * 7.0


class CustomOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = ScaledGelu.apply(self.fc(x), 2.0)
        return SetupContextGelu.apply(h) + 1


def test_an_autograd_function_under_no_grad_is_its_forward_in_the_graph():
    torch.manual_seed(0)
    m = CustomOps()
    x = torch.randn(3, 4)
    with torch.no_grad():
        close(m(x), kiln.compile(m)(x))
        e = kiln.explain(m)(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


def test_an_autograd_function_that_records_gradients_runs_its_own_backward():
    """Under grad mode the Linear's output requires grad: torch's apply
    records the classes' own backwards, as in eager. ScaledGelu's ignores
    its incoming gradient (42 * scale per element), so the bias's is
    3 rows x 84, which no derivative of forward gives."""
    torch.manual_seed(0)
    m = CustomOps()
    x = torch.randn(3, 4)
    want = m(x)
    want.sum().backward()
    want_grad = m.fc.weight.grad.clone()
    m.zero_grad()
    got = kiln.compile(m)(x)
    got.sum().backward()
    close(want, got)
    close(want_grad, m.fc.weight.grad)
    assert float(m.fc.bias.grad[0]) == pytest.approx(3 * 42.0 * 2.0)

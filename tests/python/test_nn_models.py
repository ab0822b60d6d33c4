"""kiln.nn's modules for real models (issue 13) against torch.nn with the
same weights, in training and evaluation; kiln.nn.init, Module.apply,
no_grad; and two small models written in kiln.nn (a CNN with conv, batch
norm and pooling; a transformer block with a tril buffer, masked_fill and
scaled_dot_product_attention), each compiled in one graph with no break on
both backends."""
import copy
import math

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

torch = pytest.importorskip("torch")
tnn = torch.nn
TF = torch.nn.functional


def t2k(t):
    return kiln.from_numpy(t.detach().numpy().copy())


def k2t(x):
    return torch.from_numpy(np.array(np.asarray(x), copy=True))


def close(k, t, rtol=1e-5, atol=1e-5):
    torch.testing.assert_close(k2t(k), t.detach(), rtol=rtol, atol=atol, equal_nan=True)


def copy_state(km, tm):
    """torch module's parameters and buffers into the kiln module, by name."""
    kparams = dict(km.named_parameters())
    kbufs = dict(km.named_buffers())
    for name, p in tm.named_parameters():
        kparams[name][...] = t2k(p)
    for name, b in tm.named_buffers():
        kbufs[name][...] = t2k(b)
    assert sorted(kparams) == sorted(n for n, _ in tm.named_parameters())
    assert sorted(kbufs) == sorted(n for n, _ in tm.named_buffers())


def check_state(km, tm, rtol=1e-5, atol=1e-6):
    kbufs = dict(km.named_buffers())
    for name, b in tm.named_buffers():
        torch.testing.assert_close(k2t(kbufs[name]), b, rtol=rtol, atol=atol)


def one_graph_both_backends(module, *args, rtol=1e-5, atol=1e-5, graphs=1):
    """The module compiled on each backend: one graph, no break, equal to the
    eager call. Modules with state (batch norm in training) are run on deep
    copies, so each run starts from the same state."""
    want_module = copy.deepcopy(module)
    want = want_module(*args)
    for backend in ("eager", "llvm"):
        kiln.reset()
        m = copy.deepcopy(module)
        e = kiln.explain(copy.deepcopy(module), backend=backend)(*args)
        assert (e.graph_count, e.graph_break_count) == (graphs, 0), (backend, e.break_reasons)
        got = kiln.compile(m, backend=backend)(*args)
        torch.testing.assert_close(k2t(got), k2t(want), rtol=rtol, atol=atol, equal_nan=True)
        for (name, b), (_, wb) in zip(m.named_buffers(), want_module.named_buffers()):
            assert np.allclose(np.asarray(b), np.asarray(wb), rtol=1e-6, atol=1e-7), name
    return want


# ---------------------------------------------------------- module by module --

MODULES = [
    ("Conv2d", lambda: (nn.Conv2d(3, 6, 3, padding=1), tnn.Conv2d(3, 6, 3, padding=1)), (2, 3, 7, 7)),
    ("Conv2d strided", lambda: (nn.Conv2d(4, 4, (3, 2), stride=2, groups=2, bias=False),
                                tnn.Conv2d(4, 4, (3, 2), stride=2, groups=2, bias=False)), (2, 4, 9, 8)),
    ("Conv2d same dilated", lambda: (nn.Conv2d(2, 3, 3, padding="same", dilation=2),
                                     tnn.Conv2d(2, 3, 3, padding="same", dilation=2)), (1, 2, 8, 8)),
    ("Conv2d reflect", lambda: (nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"),
                                tnn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect")), (2, 2, 6, 5)),
    ("Conv2d circular same", lambda: (nn.Conv2d(2, 2, 4, padding="same", padding_mode="circular"),
                                      tnn.Conv2d(2, 2, 4, padding="same", padding_mode="circular")), (1, 2, 6, 6)),
    ("Conv1d", lambda: (nn.Conv1d(3, 5, 4, stride=2, padding=2), tnn.Conv1d(3, 5, 4, stride=2, padding=2)), (2, 3, 11)),
    ("Conv1d replicate", lambda: (nn.Conv1d(3, 3, 3, padding=2, padding_mode="replicate", groups=3),
                                  tnn.Conv1d(3, 3, 3, padding=2, padding_mode="replicate", groups=3)), (2, 3, 7)),
    ("MaxPool2d", lambda: (nn.MaxPool2d(3, 2, 1), tnn.MaxPool2d(3, 2, 1)), (2, 3, 9, 9)),
    ("MaxPool2d ceil", lambda: (nn.MaxPool2d(2, ceil_mode=True), tnn.MaxPool2d(2, ceil_mode=True)), (1, 2, 5, 7)),
    ("AvgPool2d", lambda: (nn.AvgPool2d(3, 2, 1, count_include_pad=False), tnn.AvgPool2d(3, 2, 1, count_include_pad=False)),
     (2, 3, 8, 9)),
    ("AdaptiveAvgPool2d", lambda: (nn.AdaptiveAvgPool2d((3, None)), tnn.AdaptiveAvgPool2d((3, None))), (2, 3, 7, 5)),
    ("MaxPool1d", lambda: (nn.MaxPool1d(3, 2, 1), tnn.MaxPool1d(3, 2, 1)), (2, 3, 9)),
    ("AvgPool1d", lambda: (nn.AvgPool1d(2, ceil_mode=True), tnn.AvgPool1d(2, ceil_mode=True)), (2, 3, 9)),
    ("AdaptiveAvgPool1d", lambda: (nn.AdaptiveAvgPool1d(4), tnn.AdaptiveAvgPool1d(4)), (2, 3, 9)),
    ("Tanh", lambda: (nn.Tanh(), tnn.Tanh()), (3, 4)),
    ("Sigmoid", lambda: (nn.Sigmoid(), tnn.Sigmoid()), (3, 4)),
    ("SiLU", lambda: (nn.SiLU(), tnn.SiLU()), (3, 4)),
    ("GELU tanh", lambda: (nn.GELU(approximate="tanh"), tnn.GELU(approximate="tanh")), (3, 4)),
    ("Softmax", lambda: (nn.Softmax(dim=0), tnn.Softmax(dim=0)), (3, 4)),
    ("Flatten", lambda: (nn.Flatten(), tnn.Flatten()), (2, 3, 4)),
    ("Identity", lambda: (nn.Identity(54), tnn.Identity(54)), (2, 3)),
]


@pytest.mark.parametrize("name", [m[0] for m in MODULES])
def test_module_matches_torch_and_compiles_in_one_graph(name):
    make, shape = next((m[1], m[2]) for m in MODULES if m[0] == name)
    km, tm = make()
    copy_state(km, tm)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    close(km(t2k(x)), tm(x), rtol=1e-4, atol=1e-5)
    # Identity computes nothing: no graph at all
    one_graph_both_backends(km, t2k(x), rtol=1e-4, atol=1e-5, graphs=0 if name == "Identity" else 1)


@pytest.mark.parametrize("kind", ["1d", "1d3", "2d"])
@pytest.mark.parametrize("config", [dict(), dict(momentum=None), dict(affine=False), dict(track_running_stats=False),
                                    dict(momentum=0.3, eps=1e-3)])
def test_batch_norm_modules_match_torch_in_training_and_eval(kind, config):
    n = 4
    km = (nn.BatchNorm1d if kind.startswith("1d") else nn.BatchNorm2d)(n, **config)
    tm = (tnn.BatchNorm1d if kind.startswith("1d") else tnn.BatchNorm2d)(n, **config)
    gen = torch.Generator().manual_seed(2)
    if config.get("affine", True):
        with torch.no_grad():
            tm.weight.uniform_(0.5, 1.5, generator=gen)
            tm.bias.uniform_(-1, 1, generator=gen)
    copy_state(km, tm)
    shape = {"1d": (8, n), "1d3": (3, n, 5), "2d": (2, n, 3, 3)}[kind]
    for step in range(3):
        x = torch.randn(*shape, generator=gen) * (step + 1) + step
        close(km(t2k(x)), tm(x))
        check_state(km, tm)
    km.eval()
    tm.eval()
    x = torch.randn(*shape, generator=gen)
    close(km(t2k(x)), tm(x))
    check_state(km, tm)


def test_batch_norm_compiled_in_training_updates_buffers_like_eager():
    m = nn.BatchNorm2d(3)
    x = kiln.randn(4, 3, 2, 2)
    one_graph_both_backends(m, x)
    for backend in ("eager", "llvm"):
        kiln.reset()
        eager_m, compiled_m = copy.deepcopy(m), copy.deepcopy(m)
        f = kiln.compile(compiled_m, backend=backend)
        for step in range(3):
            xs = x * (step + 1)
            assert np.allclose(np.asarray(f(xs)), np.asarray(eager_m(xs)), atol=1e-6)
        assert int(compiled_m.num_batches_tracked.item()) == 3
        for name, b in eager_m.named_buffers():
            assert np.allclose(np.asarray(dict(compiled_m.named_buffers())[name]), np.asarray(b), atol=1e-7)
        compiled_m.eval()
        eager_m.eval()
        assert np.allclose(np.asarray(f(x)), np.asarray(eager_m(x)), atol=1e-6)  # train/eval recompiles


def test_module_errors_match_torch():
    for kiln_call, torch_call in [
        (lambda: nn.BatchNorm2d(3)(kiln.ones(2, 3, 4)), lambda: tnn.BatchNorm2d(3)(torch.ones(2, 3, 4))),
        (lambda: nn.BatchNorm1d(3)(kiln.ones(1, 3, 4, 4)), lambda: tnn.BatchNorm1d(3)(torch.ones(1, 3, 4, 4))),
        (lambda: nn.Conv2d(3, 4, 3, groups=2), lambda: tnn.Conv2d(3, 4, 3, groups=2)),
        (lambda: nn.Conv2d(2, 4, 3, stride=2, padding="same"), lambda: tnn.Conv2d(2, 4, 3, stride=2, padding="same")),
        (lambda: nn.Conv2d(2, 4, 3, padding="full"), lambda: tnn.Conv2d(2, 4, 3, padding="full")),
        (lambda: nn.Conv2d(3, 4, 3)(kiln.ones(1, 2, 5, 5)), lambda: tnn.Conv2d(3, 4, 3)(torch.ones(1, 2, 5, 5))),
    ]:
        with pytest.raises(Exception) as t:
            torch_call()
        with pytest.raises(type(t.value)):
            kiln_call()


def test_dropout_module_honours_train_and_eval():
    d = nn.Dropout(0.5)
    x = kiln.ones(100, 10)
    assert (np.asarray(d(x)) == 0).any()
    d.eval()
    assert np.array_equal(np.asarray(d(x)), np.asarray(x))
    f = kiln.compile(d)
    assert np.array_equal(np.asarray(f(x)), np.asarray(x))
    d.train()
    assert (np.asarray(f(x)) == 0).any()


# ------------------------------------------------------------ init / apply --

def test_init_functions_fill_in_place_with_torchs_distributions():
    init = nn.init
    w = kiln.zeros(300, 200)
    assert init.uniform_(w, -2, 3) is w
    a = np.asarray(w)
    assert a.min() >= -2 and a.max() < 3 and abs(a.mean() - 0.5) < 0.05
    init.normal_(w, 1.0, 0.02)
    assert abs(np.asarray(w).mean() - 1) < 0.001 and abs(np.asarray(w).std() - 0.02) < 0.001
    init.trunc_normal_(w, 0, 1, -0.5, 0.5)
    assert np.abs(np.asarray(w)).max() <= 0.5 and np.asarray(w).std() > 0.2
    init.constant_(w, 0.25)
    assert (np.asarray(w) == 0.25).all()
    init.zeros_(w)
    assert (np.asarray(w) == 0).all()
    init.ones_(w)
    assert (np.asarray(w) == 1).all()
    bound = math.sqrt(6 / (300 + 200))
    init.xavier_uniform_(w)
    assert np.abs(np.asarray(w)).max() <= bound and np.abs(np.asarray(w)).max() > 0.9 * bound
    init.xavier_normal_(w, gain=2.0)
    assert abs(np.asarray(w).std() - 2 * math.sqrt(2 / 500)) < 0.005
    init.kaiming_uniform_(w, a=math.sqrt(5))
    assert np.abs(np.asarray(w)).max() <= 1 / math.sqrt(200)
    init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(np.asarray(w).std() - math.sqrt(2 / 300)) < 0.005
    conv = kiln.zeros(8, 4, 3, 3)
    init.kaiming_uniform_(conv, nonlinearity="relu")
    assert np.abs(np.asarray(conv)).max() <= math.sqrt(3) * math.sqrt(2) / math.sqrt(36)
    for nl, p in [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None), ("relu", None),
                  ("leaky_relu", None), ("leaky_relu", 0.2), ("selu", None)]:
        assert init.calculate_gain(nl, p) == pytest.approx(torch.nn.init.calculate_gain(nl, p))
    with pytest.raises(ValueError):
        init.calculate_gain("swish")
    with pytest.raises(ValueError):
        init.xavier_uniform_(kiln.zeros(3))
    kiln.manual_seed(4)
    a = np.asarray(init.normal_(kiln.zeros(5)))
    kiln.manual_seed(4)
    assert np.array_equal(a, np.asarray(init.normal_(kiln.zeros(5))))  # kiln's seeded generator


def test_apply_visits_children_first_like_torch():
    def build(mod):
        return mod.Sequential(mod.Linear(2, 3), mod.Sequential(mod.Tanh(), mod.Linear(3, 1)))
    seen_k, seen_t = [], []
    km, tm = build(nn), build(tnn)
    assert km.apply(lambda m: seen_k.append(type(m).__name__)) is km
    tm.apply(lambda m: seen_t.append(type(m).__name__))
    assert seen_k == seen_t

    def init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            nn.init.zeros_(m.bias)
    km.apply(init_weights)
    assert (np.asarray(km[0].bias) == 0).all() and np.asarray(km[1][1].weight).std() < 0.1


def test_conv_default_init_is_torchs_kaiming_uniform():
    c = nn.Conv2d(4, 8, 3)
    bound = 1 / math.sqrt(4 * 9)
    w, b = np.asarray(c.weight), np.asarray(c.bias)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(b).max() <= bound


# --------------------------------------------------------- no_grad, aliases --

def test_no_grad_is_a_context_manager_and_a_transparent_decorator():
    def f(x):
        return x * 2

    assert kiln.no_grad()(f) is f
    assert kiln.no_grad(f) is f
    assert kiln.inference_mode()(f) is f and kiln.inference_mode(f) is f
    with kiln.no_grad():
        y = f(kiln.ones(2))
    with kiln.inference_mode(), kiln.enable_grad():
        pass
    assert np.asarray(y).tolist() == [2, 2]

    @kiln.no_grad()
    def g(x):
        return kiln.relu(x) + 1
    e = kiln.explain(g)(kiln.randn(3))
    assert (e.graph_count, e.graph_break_count) == (1, 0)


def test_module_to_cpu_is_the_module():
    m = nn.Linear(2, 2)
    assert m.to("cpu") is m and m.to(kiln.device("cpu")) is m and m.to(device="cpu") is m
    with pytest.raises(RuntimeError, match="cuda"):
        m.to("cuda")


# ------------------------------------------------------------ small models --

class KilnCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AvgPool2d(2, ceil_mode=True))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.features(x)
        x = kiln.flatten(self.pool(x), 1)
        return F.log_softmax(self.fc(F.dropout(x, 0.2, self.training)), -1)


class TorchCNN(tnn.Module):
    def __init__(self):
        super().__init__()
        self.features = tnn.Sequential(
            tnn.Conv2d(3, 8, 3, padding=1, bias=False), tnn.BatchNorm2d(8), tnn.ReLU(), tnn.MaxPool2d(2),
            tnn.Conv2d(8, 16, 3, stride=2, padding=1), tnn.BatchNorm2d(16), tnn.ReLU(),
            tnn.AvgPool2d(2, ceil_mode=True))
        self.pool = tnn.AdaptiveAvgPool2d(1)
        self.fc = tnn.Linear(16, 10)

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(self.pool(x), 1)
        return TF.log_softmax(self.fc(TF.dropout(x, 0.2, self.training)), -1)


def test_small_cnn_matches_torch_and_compiles_in_one_graph():
    km, tm = KilnCNN(), TorchCNN()
    copy_state(km, tm)
    km.eval()
    tm.eval()
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 16, 16, generator=gen)
    close(km(t2k(x)), tm(x), rtol=1e-4, atol=1e-5)
    one_graph_both_backends(km, t2k(x), rtol=1e-4, atol=1e-5)
    # training mode without dropout randomness in the comparison: batch
    # statistics and running-stat updates equal torch's step after step
    km.train()
    tm.train()
    km.fc.weight[...] = 0  # dropout's mask then cannot show in the output
    with torch.no_grad():
        tm.fc.weight.zero_()
    for step in range(3):
        xs = x * (1 + step)
        close(km(t2k(xs)), tm(xs), rtol=1e-4, atol=1e-5)
    check_state(km, tm, rtol=1e-4, atol=1e-5)
    compiled_m = copy.deepcopy(km)
    eager_m = copy.deepcopy(km)
    f = kiln.compile(compiled_m)
    for step in range(2):
        kiln.manual_seed(step)
        got = f(t2k(x))
        kiln.manual_seed(step)
        want = eager_m(t2k(x))
        torch.testing.assert_close(k2t(got), k2t(want), rtol=1e-5, atol=1e-5)
    for name, b in eager_m.named_buffers():
        assert np.allclose(np.asarray(dict(compiled_m.named_buffers())[name]), np.asarray(b), atol=1e-6), name


class KilnBlock(nn.Module):
    """A GPT-2 style block: causal self-attention over a registered tril
    buffer with masked_fill (minGPT's way) or SDPA (nanoGPT's), then an MLP
    with tanh-GELU."""

    def __init__(self, d, heads, block_size, sdpa):
        super().__init__()
        self.n_head, self.sdpa = heads, sdpa
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU(approximate="tanh")
        self.mlp_proj = nn.Linear(4 * d, d)
        self.attn_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", kiln.tril(kiln.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def attn(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.1 if self.training else 0,
                                               is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = self.attn_dropout(att) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


class TorchBlock(tnn.Module):
    def __init__(self, d, heads, block_size):
        super().__init__()
        self.n_head = heads
        self.ln_1 = tnn.LayerNorm(d)
        self.c_attn = tnn.Linear(d, 3 * d)
        self.c_proj = tnn.Linear(d, d)
        self.ln_2 = tnn.LayerNorm(d)
        self.c_fc = tnn.Linear(d, 4 * d)
        self.gelu = tnn.GELU(approximate="tanh")
        self.mlp_proj = tnn.Linear(4 * d, d)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        h = self.ln_1(x)
        q, k, v = self.c_attn(h).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


@pytest.mark.parametrize("sdpa", [False, True])
def test_transformer_block_matches_torch_and_compiles_in_one_graph(sdpa):
    km, tm = KilnBlock(16, 4, 8, sdpa), TorchBlock(16, 4, 8)
    copy_state(km, tm)
    km.eval()
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(5))
    close(km(t2k(x)), tm(x), rtol=1e-4, atol=1e-5)
    one_graph_both_backends(km, t2k(x), rtol=1e-4, atol=1e-5)
    km.train()  # dropout inside: still one graph
    e = kiln.explain(km)(t2k(x))
    assert (e.graph_count, e.graph_break_count) == (1, 0)


def test_top_k_sampling_step_compiles_in_one_graph():
    """nanoGPT's generate(): crop the logits to the top k with topk and
    masked_fill, then softmax."""
    def step(logits, k):
        v, _ = kiln.topk(logits, k)
        logits = logits.masked_fill(logits < v[:, -1:], float("-inf"))
        return F.softmax(logits, dim=-1)

    logits = kiln.randn(3, 50)
    probs = np.asarray(step(logits, 5))
    assert ((probs > 0).sum(-1) == 5).all() and np.allclose(probs.sum(-1), 1)
    t = k2t(logits)
    v, _ = torch.topk(t, 5)
    close(step(logits, 5), TF.softmax(t.masked_fill(t < v[:, [-1]], float("-inf")), dim=-1))
    for backend in ("eager", "llvm"):
        kiln.reset()
        e = kiln.explain(step, backend=backend)(logits, 5)
        assert (e.graph_count, e.graph_break_count) == (1, 0)
        assert np.allclose(np.asarray(kiln.compile(step, backend=backend)(logits, 5)), probs, atol=1e-6)

"""torch.nn.Module instances compiled unchanged (issue 13, step 3): kiln
mirrors the torch module's own dicts (python/src/torch_modules.h). torch
eager is the oracle for results; explain pins graphs and breaks; every
kind of change to the module recompiles."""
import dataclasses
import weakref

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402

BACKENDS = ["eager", "llvm"]


def seeded(seed=0):
    torch.manual_seed(seed)


def same(want, got, tol=1e-5):
    if isinstance(want, torch.Tensor):
        assert type(got) is torch.Tensor, type(got)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    elif isinstance(want, (tuple, list)):
        assert len(want) == len(got)
        for w, g in zip(want, got):
            same(w, g, tol)
    else:
        assert want == got


def one_graph(m, *args):
    e = kiln.explain(m)(*args)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
    return e


def entries(compiled):
    return kiln._C.cache_entries(compiled._kiln_compiled.kbc)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 2 * d)
        self.proj = nn.Linear(2 * d, d)
        self.ln = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.drop(self.proj(F.gelu(self.fc(self.ln(x)))))


class Net(nn.Module):
    def __init__(self, n=3, d=8):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d) for _ in range(n)])
        self.head = nn.Linear(d, 4, bias=False)

    def forward(self, x):
        return self.head(self.blocks(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_model_compiles_to_one_graph_equal_to_eager(backend):
    seeded()
    m = Net().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        want = m(x)
        c = kiln.compile(m, backend=backend)
        for _ in range(3):
            same(want, c(x))
        assert entries(c) == 1
        e = one_graph(m, x)
    # Parameters are get_attr nodes named by their path.
    targets = [n.target for n in e.graphs[0].graph.nodes if n.op == "get_attr"]
    # Named from the traced frame's root: its forward's self (torch.compile's too).
    assert "blocks.0.fc.weight" in targets and "head.weight" in targets, targets


def test_inference_mode_too():
    seeded()
    m = Net(2).eval()
    x = torch.randn(3, 8)
    with torch.inference_mode():
        same(m(x), kiln.compile(m)(x))


def test_grad_mode_with_parameters_that_require_grad_runs_through_torch_autograd():
    # Traced as ever (one graph), run through torch's own ops so that
    # gradients flow (test_torch_autograd.py has the rest).
    seeded()
    m = Net(2).eval()
    x = torch.randn(3, 8)
    got = kiln.compile(m)(x)
    want = m(x)
    same(want, got)
    assert got.grad_fn is not None  # torch's autograd ran it: gradients flow
    got.sum().backward()
    assert m.head.weight.grad is not None
    e = one_graph(m, x)
    assert e.autograd == ["parameter blocks.0.ln.weight requires grad"], e.autograd
    with torch.no_grad():  # the same module on kiln's kernels
        assert one_graph(m, x).autograd == [None]


class Lookup(nn.Module):
    """Attribute lookup order: _parameters, _modules, _buffers, the instance
    __dict__, the class, then a user __getattr__."""
    scale = 3.0  # a class attribute

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.sub = nn.Linear(4, 4)
        self.register_buffer("mask", torch.tensor([1.0, 0.0, 1.0, 0.0]))
        self.offset = 0.5  # a plain attribute (instance __dict__)

    @property
    def doubled(self):
        return self.w * 2

    def __getattr__(self, name):
        if name == "fallback":
            return 7.0
        return super().__getattr__(name)

    def forward(self, x):
        return self.sub(x * self.w * self.mask) * self.scale + self.offset + self.doubled + self.fallback


@pytest.mark.parametrize("backend", BACKENDS)
def test_attribute_lookup_as_torch(backend):
    seeded()
    m = Lookup()
    x = torch.randn(2, 4)
    with torch.no_grad():
        same(m(x), kiln.compile(m, backend=backend)(x))
        one_graph(m, x)


def test_missing_attribute_is_torchs_attribute_error():
    class Bad(nn.Module):
        def forward(self, x):
            return x * self.nope

    m = Bad()
    with pytest.raises(AttributeError) as want:
        m(torch.ones(2))
    with torch.no_grad(), pytest.raises(AttributeError) as got:
        kiln.compile(m)(torch.ones(2))
    assert str(got.value) == str(want.value)


@dataclasses.dataclass
class Config:
    d: int = 8
    n_head: int = 2
    bias: bool = True


class Attn(nn.Module):
    def __init__(self, cfg, T=6):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d, 3 * cfg.d, bias=cfg.bias)
        self.register_buffer("tril", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(self.cfg.d, dim=2)
        hd = C // self.cfg.n_head
        q = q.view(B, T, self.cfg.n_head, hd).transpose(1, 2)
        k = k.view(B, T, self.cfg.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.cfg.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / hd ** 0.5)
        att = att.masked_fill(self.tril[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return (att @ v).transpose(1, 2).contiguous().view(B, T, C)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dataclass_config_and_registered_tril_buffer(backend):
    seeded()
    m = Attn(Config())
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        same(m(x), kiln.compile(m, backend=backend)(x), tol=1e-4)
        one_graph(m, x)


class Containers(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})
        self.seq = nn.Sequential(nn.ReLU(), nn.Linear(4, 4), nn.Tanh())

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) + i
        x = self.seq(x) + self.layers[-1](x)
        return [self.heads[k](x) for k in self.heads] + [len(self.layers)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_containers_unrolled(backend):
    seeded()
    m = Containers()
    x = torch.randn(2, 4)
    with torch.no_grad():
        same(m(x), kiln.compile(m, backend=backend)(x))
        one_graph(m, x)


class Introspect(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))

    def forward(self, x):
        total = x.sum() * 0
        for p in self.parameters():
            total = total + p.sum()
        names = [n for n, _ in self.named_parameters()]
        nbuf = len(list(self.buffers()))
        kids = len(list(self.children()))
        mods = len(list(self.modules()))
        return total, names, nbuf, kids, mods, self.training


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameters_and_children_answered_in_traced_code(backend):
    seeded()
    m = Introspect().eval()
    x = torch.randn(2, 3)
    with torch.no_grad():
        same(m(x), kiln.compile(m, backend=backend)(x))
        one_graph(m, x)


def test_a_parameter_returned_is_the_parameter_itself():
    class Get(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return self.fc.weight, self.fc(x)

    m = Get()
    with torch.no_grad():
        w, _ = kiln.compile(m)(torch.ones(2))
    assert w is m.fc.weight


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(10, 4)
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying

    def forward(self, idx):
        return self.lm_head(self.wte(idx))


def test_weight_tying_is_one_get_attr():
    seeded()
    m = Tied()
    idx = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        same(m(idx), kiln.compile(m)(idx))
        e = one_graph(m, idx)
    targets = [n.target for n in e.graphs[0].graph.nodes if n.op == "get_attr"]
    assert len(targets) == 1, targets


class WeakWeights(nn.Module):
    """torch's RNNs check their weights through weakrefs on every forward
    (RNNBase._weights_have_changed): `ref() is not weight`."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.b = nn.Parameter(torch.randn(4), requires_grad=False)
        self.refs = [weakref.ref(self.w), weakref.ref(self.b)]
        self.names = ["w", "b"]

    def changed(self):
        for ref, name in zip(self.refs, self.names, strict=True):
            weight = getattr(self, name) if hasattr(self, name) else None
            if weight is not None and ref is not None and ref() is not weight:
                return True
        return False

    def forward(self, x):
        if self.changed():
            x = x + 1
        return x @ self.w + self.b


def test_a_weakref_to_a_parameter_is_that_parameter_in_the_trace():
    seeded()
    m = WeakWeights()
    x = torch.randn(2, 4)
    c = kiln.compile(m)
    with torch.no_grad():
        one_graph(m, x)
        same(m(x), c(x))
        # A new Parameter: the refs now point elsewhere (the old one is dead),
        # and `ref() is not weight` is True in eager; the module's version
        # guard recompiles and the trace answers the same.
        m.w = nn.Parameter(torch.randn(4, 4))
        assert m.changed()
        same(m(x), c(x))
    with torch.no_grad():
        keep = m.w
        m.refs = [weakref.ref(keep), weakref.ref(m.b)]
        assert not m.changed()
        same(m(x), c(x))


class Recurrent(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.lstm = nn.LSTM(4, 3, **kw)

    def forward(self, x, hx=None):
        out, (h, c) = self.lstm(x, hx)
        return out * 2, h, c


LSTMS = [
    ({}, (5, 2, 4)),
    ({"batch_first": True}, (2, 5, 4)),
    ({"bidirectional": True, "num_layers": 2}, (5, 2, 4)),
    ({"bias": False, "num_layers": 3}, (6, 1, 4)),
    ({"bidirectional": True, "batch_first": True}, (4, 7, 4)),
    ({}, (5, 4)),  # unbatched
]


@pytest.mark.parametrize("kw,shape", LSTMS, ids=[f"{kw}-{shape}" for kw, shape in LSTMS])
def test_an_lstm_is_one_graph_equal_to_eager(kw, shape):
    """torch's LSTM (RNNBase._weights_have_changed's weakrefs, then
    _VF.lstm) in one graph: the recurrence unrolled over kiln's ops."""
    seeded()
    m = Recurrent(**kw).eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        same(m(x), kiln.compile(m)(x))
        one_graph(m, x)


def test_an_lstm_with_a_given_state_and_another_length():
    seeded()
    m = Recurrent(num_layers=2).eval()
    c = kiln.compile(m)
    with torch.no_grad():
        for steps in (5, 9):
            x = torch.randn(steps, 2, 4)
            hx = (torch.randn(2, 2, 3), torch.randn(2, 2, 3))
            same(m(x, hx), c(x, hx))


def test_lstms_kiln_does_not_lower_run_torchs_own():
    """Projections (proj_size) and packed sequences run torch's own LSTM
    kernel: a break named for it, the answer eager's."""
    seeded()
    proj = nn.LSTM(4, 3, proj_size=2).eval()
    x = torch.randn(5, 2, 4)
    packed = nn.utils.rnn.pack_padded_sequence(x, [5, 3])
    plain = nn.LSTM(4, 3).eval()

    def run_packed(p):
        out, (h, c) = plain(p)
        return out.data * 2, h, c

    with torch.no_grad():
        same(proj(x), kiln.compile(proj)(x))
        same(run_packed(packed), kiln.compile(run_packed)(packed))
        e = kiln.explain(Recurrent(proj_size=2).eval())(x)
    assert e.graph_break_count >= 1
    assert "lstm" in " | ".join(r["reason"] for r in e.break_reasons)


def test_hooks_from_torchs_own_dicts():
    seeded()
    m = Net(2).eval()
    x = torch.randn(2, 8)
    calls = []

    def pre(mod, args):
        return (args[0] * 2,)

    def post(mod, args, out):
        return out + 1

    def global_post(mod, args, out):
        if isinstance(mod, nn.Linear):
            return out * 0.5
        return None

    h1 = m.blocks[0].register_forward_pre_hook(pre)
    h2 = m.head.register_forward_hook(post)
    h3 = nn.modules.module.register_module_forward_hook(global_post)
    try:
        with torch.no_grad():
            want = m(x)
            same(want, kiln.compile(m)(x))
            one_graph(m, x)
            # Each hook once, the global one first (translating a hook
            # function syncs again mid-read: it once ran them twice).
            assert kiln._C._torch_mirror_hooks(m.blocks[0]) == (1, 1)
            assert kiln._C._torch_mirror_hooks(m.head) == (0, 2)
    finally:
        h1.remove(), h2.remove(), h3.remove()
    with torch.no_grad():
        same(m(x), kiln.compile(m)(x))  # the hooks are gone: the result changes back
    del calls


def test_kiln_code_stores_reach_the_torch_module():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.calls = 0

        def forward(self, x):
            self.calls = self.calls + 1
            self.last = x.sum()
            return self.fc(x)

    m = Counter()
    c = kiln.compile(m)
    with torch.no_grad():
        c(torch.ones(2))
        c(torch.ones(2) * 2)
    assert m.calls == 2 and type(m.last) is torch.Tensor and m.last.item() == 4.0


def test_batch_norm_training_updates_torchs_running_stats():
    seeded()
    want_m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    got_m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    got_m.load_state_dict(want_m.state_dict())
    x = torch.randn(5, 3)
    with torch.no_grad():
        want = want_m(x)
        got = kiln.compile(got_m)(x)
    same(want, got)
    same(want_m[1].running_mean, got_m[1].running_mean)
    same(want_m[1].running_var, got_m[1].running_var)
    assert got_m[1].num_batches_tracked.item() == 1


# ------------------------------------------------------- every change recompiles

class Guarded(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if self.training:
            y = y * 2
        for name, child in self.named_children():
            if name == "extra":
                y = child(y)
        return y


def changes():
    def replace_param(m):
        m.fc.weight = nn.Parameter(torch.randn(4, 4))

    def add_submodule(m):
        m.extra = nn.Linear(4, 4)

    def delete_submodule(m):
        del m.extra

    def add_hook(m):
        m.fc.register_forward_hook(lambda mod, a, out: out * 3)

    def train_eval(m):
        m.eval()

    def dtype(m):
        m.double()
        return "double"

    def data_swap(m):
        m.fc.weight.data = torch.randn(4, 4)

    def buffer_change(m):
        m.fc.register_buffer("unused", torch.zeros(1))

    # Writes that bypass __setattr__ (kiln/_torch_watch.py signals each).
    def modules_dict(m):
        m._modules["extra"] = nn.Linear(4, 4)

    def parameters_dict(m):
        m.fc._parameters["weight"] = nn.Parameter(torch.randn(4, 4))

    def hook_removed(m):
        m.fc._kiln_test_handle.remove()

    def requires_grad_flipped(m):
        m.fc.weight.requires_grad_(False)

    def requires_grad_set(m):
        m.fc.bias.requires_grad = False

    def swapped(m):
        torch.utils.swap_tensors(m.fc.weight, nn.Parameter(torch.randn(4, 4)))

    def set_storage(m):
        m.fc.weight.set_(torch.randn(4, 4))

    def transposed_in_place(m):
        m.fc.weight.t_()

    def global_hook(m):
        return torch.nn.modules.module.register_module_forward_hook(lambda mod, a, out: out + 1)

    return {"parameter replaced": replace_param, "submodule added": add_submodule,
            "submodule deleted": delete_submodule, "hook added": add_hook, "train/eval flipped": train_eval,
            "dtype changed": dtype, "parameter data swapped": data_swap, "buffer added": buffer_change,
            "_modules written": modules_dict, "_parameters written": parameters_dict, "hook removed": hook_removed,
            "requires_grad_()": requires_grad_flipped, "requires_grad set": requires_grad_set,
            "swap_tensors": swapped, "set_()": set_storage, "t_()": transposed_in_place,
            "global hook added": global_hook}


@pytest.mark.parametrize("kind", sorted(changes()))
def test_every_change_recompiles(kind):
    seeded()
    m = Guarded().train()
    if kind == "submodule deleted":
        m.extra = nn.Linear(4, 4)
    if kind == "hook removed":
        m.fc._kiln_test_handle = m.fc.register_forward_hook(lambda mod, a, out: out * 3)
    x = torch.randn(3, 4)
    c = kiln.compile(m)
    with torch.no_grad():
        same(m(x), c(x))
        before = entries(c)
        assert before == 1
        same(m(x), c(x))
        assert entries(c) == before  # cached: nothing changed yet
        versions = (kiln._C._torch_mirror_version(m), kiln._C._torch_mirror_version(m.fc))
        assert None not in versions
        walks = kiln._C._torch_walks()
        for _ in range(3):
            c(x)
        assert kiln._C._torch_walks() == walks  # unchanged: no walk over the tree
        done = changes()[kind](m)
        if done == "double":
            x = x.double()
        try:
            want = m(x)
            got = c(x)
        finally:
            if hasattr(done, "remove"):
                done.remove()
        same(want, got)
        assert entries(c) == before + 1, kind
        # The change reached the mirror of the module it happened on: a new
        # module version there (the root's or fc's).
        after = (kiln._C._torch_mirror_version(m), kiln._C._torch_mirror_version(m.fc))
        assert after != versions, kind
    del got


def test_unchanged_tree_recompiles_never():
    seeded()
    m = Net(4).eval()
    c = kiln.compile(m)
    x = torch.randn(2, 8)
    with torch.no_grad():
        for _ in range(5):
            same(m(x), c(x))
    assert entries(c) == 1


def test_mirrors_follow_the_torch_module_lifetime():
    import gc

    with torch.no_grad():
        m = Net(1)
        kiln.compile(m)(torch.randn(1, 8))
        n = kiln._C._torch_mirror_count()
        assert n > 0
        del m
        gc.collect()
        kiln.reset()
        kiln._C.sync_python_state()
    assert kiln._C._torch_mirror_count() < n


def test_a_replaced_parameter_is_let_go():
    import gc
    import weakref

    m = nn.Linear(2, 2)
    c = kiln.compile(m)
    with torch.no_grad():
        c(torch.ones(2))
        old = weakref.ref(m.weight)
        m.weight = nn.Parameter(torch.randn(2, 2))
        same(m(torch.ones(2)), c(torch.ones(2)))
    kiln.reset()
    gc.collect()
    assert old() is None


def test_many_compiled_modules_each_keep_their_own_cache(capfd):
    # kiln.compile(module) ran every module through one KBC function whose
    # cache is per code: the ninth module hit cache_size_limit and ran on
    # the VM. On the frames path the cache is forward's code's, one entry
    # per instance, and cache_size_limit counts an instance's own entries.
    ms = [nn.Linear(2, 2) for _ in range(12)]
    cs = [kiln.compile(m) for m in ms]
    x = torch.ones(1, 2)
    with torch.no_grad():
        for m, c in zip(ms, cs):
            same(m(x), c(x))
        for c in cs:
            assert entries(c) == len(ms)
    assert "cache_size_limit" not in capfd.readouterr().err


# -- the program's classes, read as Python reads them (issue 26) --------------

def test_a_changed_class_attribute_is_seen_by_compiled_code_new_instances_and_after_reset():
    class Scaled(nn.Module):
        K = 1.0

        def forward(self, x):
            return x * self.K

    m = Scaled()
    f = kiln.compile(m)
    x = torch.ones(2)
    same(m(x), f(x))
    Scaled.K = 5.0  # on the class: no instance dict changes
    same(m(x), f(x))
    kiln.reset()
    fresh = Scaled()
    same(fresh(x), kiln.compile(fresh)(x))
    Scaled.forward = lambda self, x: x - self.K  # replaced on the class
    same(m(x), f(x))


def test_a_base_class_change_is_seen_through_the_subclass():
    class Base(nn.Module):
        def scale(self):
            return 2.0

    class Child(Base):
        def forward(self, x):
            return x * self.scale()

    m = Child()
    f = kiln.compile(m)
    x = torch.ones(2)
    same(m(x), f(x))
    Base.scale = lambda self: 7.0
    same(m(x), f(x))


def test_a_method_named_like_a_submodule_wins_as_in_python():
    """torch's _modules are reached through Module.__getattr__, after the
    class: a method of that name is what self.helper reads."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.helper = nn.Identity()  # registered in _modules
            self.lin = nn.Linear(2, 2)

        def helper(self, x):
            return x * 100

        def forward(self, x):
            return self.helper(self.lin(x))

    seeded()
    m = Net().eval()
    x = torch.ones(1, 2)
    with torch.no_grad():
        same(m(x), kiln.compile(m)(x))


@pytest.mark.parametrize("call", [
    lambda m: [n for n, _ in m.named_parameters(prefix="foo")],
    lambda m: [n for n, _ in m.named_parameters("p", False)],
    lambda m: [n for n, _ in m.named_buffers(prefix="b")],
    lambda m: [n for n, _ in m.named_modules(prefix="root")],
    lambda m: [n for n, _ in m.named_parameters(remove_duplicate=False)],
], ids=["prefix", "positional", "buffers", "modules", "duplicates"])
def test_named_walkers_take_torchs_arguments(call):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.b = self.a  # shared: remove_duplicate decides
            self.bn = nn.BatchNorm1d(2)

        def forward(self, x):
            return call(self), x + 1

    m = Net().eval()
    want = m(torch.ones(1, 2))
    got = kiln.compile(m)(torch.ones(1, 2))
    assert want[0] == got[0]
    same(want[1], got[1])


# -- a slice of a ModuleList / Sequential (llama's self.layers[:n]) ----------

class Sliced(nn.Module):
    """transformers' decoders loop over `self.layers[: config.num_hidden_layers]`."""

    def __init__(self, upto, escape=False):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])
        self.stages = nn.Sequential(nn.ReLU(), nn.Linear(4, 4), nn.Tanh())
        self.upto = upto
        self.escape = escape

    def forward(self, x):
        for layer in self.layers[: self.upto]:
            x = layer(x)
        first, *rest = self.layers[1:3]
        x = first(x) + len(rest) + len(self.layers[::2])
        x = self.layers[-2:][0](x)
        for m in self.stages[1:]:
            x = m(x)
        if self.escape:
            return x, self.layers[:2], callable(self.layers[:1])
        return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slice_of_a_module_container_stays_in_the_graph(backend):
    seeded()
    m = Sliced(3).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        same(m(x), kiln.compile(m, backend=backend)(x))
        one_graph(kiln.compile(m, backend=backend), x)


def test_a_slice_of_a_module_container_is_cpythons_own_when_it_leaves_the_graph():
    seeded()
    m = Sliced(2, escape=True).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        want, got = m(x), kiln.compile(m)(x)
    same(want[0], got[0])
    assert type(got[1]) is nn.ModuleList and list(got[1]) == list(m.layers[:2])
    assert got[2] is True


def test_a_changed_slice_bound_recompiles():
    seeded()
    m = Sliced(1).eval()
    x = torch.randn(2, 4)
    c = kiln.compile(m)
    with torch.no_grad():
        same(m(x), c(x))
        m.upto = 4
        same(m(x), c(x))


class GroupedBlock(nn.Module):
    """A ResNeXt/RegNet bottleneck's grouped part: a grouped 3x3 (stride
    1 or 2), ReLU, a grouped 1x1 of another width."""

    def __init__(self, c, groups, stride, out_groups):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride, 1, groups=groups)
        self.point = nn.Conv2d(c, 2 * c, 1, groups=out_groups, bias=False)

    def forward(self, x):
        return self.point(torch.relu(self.conv(x)))


@pytest.mark.parametrize("c, groups, stride, out_groups, hw", [
    (128, 32, 1, 8, 14),   # ResNeXt 32x4d: 4 channels a group, 'same' padding read in place
    (64, 8, 2, 4, 15),     # RegNet's group width 8, a stride-2 first block (phase planes), odd plane
    (96, 6, 1, 3, 7),      # 16 channels a group on a 7x7 plane
    (36, 3, 1, 2, 9),      # 12 a group: channel tiles of 6 + 6
])
def test_grouped_convolutions_compiled_equal_eager(c, groups, stride, out_groups, hw):
    """Grouped convolutions of narrow groups (runtime/kernels/conv_grouped.h)
    through kiln.compile against torch eager, batch 2, in one graph."""
    seeded(28)
    m = GroupedBlock(c, groups, stride, out_groups).eval()
    x = torch.randn(2, c, hw, hw)
    with torch.no_grad():
        one_graph(m, x)
        same(m(x), kiln.compile(m)(x), tol=1e-4)

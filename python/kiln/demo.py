"""python -m kiln.demo: kiln compiles two models written as kiln.nn modules
(an MLP and a small transformer block) and shows what it captured, where
and why the graph broke, and its speed against eager.
"""
import math
import time

import kiln
from kiln import nn


class MLP(nn.Module):
    def __init__(self, d, hidden, depth):
        super().__init__()
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d)]
        self.layers = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.layers(x))


class Attention(nn.Module):
    """Single-head self-attention over a sequence x: [T, D]."""

    def __init__(self, d):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.scale = 1.0 / math.sqrt(d)

    def forward(self, x):
        scores = self.q(x) @ self.k(x).T * self.scale
        return self.out(kiln.softmax(scores, -1) @ self.v(x))


class TransformerBlock(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def step(model, x):
    """One step of a user's loop: the model, then a print (a graph break)."""
    y = model(x)
    print("  step output", y.shape, "mean(y*y) =", (y * y).mean().item())
    return y.sum(-1)


def per_call_us(fn, *args, reps=50):
    fn(*args)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(*args)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e6


def show(name, model, x):
    print(f"== {name} ==")
    print(model)
    report = kiln.explain(model)(x)
    print(f"\n-- what kiln captured (kiln.explain) --")
    print(f"graphs: {report.graph_count}, graph breaks: {report.graph_break_count}, "
          f"ops per graph: {report.ops_per_graph}")
    print(report.graphs[0].code)

    print("-- a step with a print in it: the break, its reason, line and hint --")
    e = kiln.explain(step)(model, x)
    for b in e.break_reasons:
        print(f"  break: {b['reason']}\n    at {b['where']}\n    hint: {b['hint']}")

    compiled = kiln.compile(model)
    want = model(x)
    got = compiled(x)
    err = ((got - want).abs().amax() / want.abs().amax()).item()
    eager_us = per_call_us(model, x)
    compiled_us = per_call_us(compiled, x)
    print(f"\n-- speed: eager (kiln's reference kernels, node by node) vs compiled (llvm) --")
    print(f"  eager {eager_us:8.1f} us/call   compiled {compiled_us:8.1f} us/call   "
          f"{eager_us / compiled_us:5.2f}x   (max rel diff {err:.1e})\n")


def main():
    kiln.manual_seed(0)
    show("MLP: 3 x (Linear 256->1024, GELU, Linear 1024->256), residual, LayerNorm",
         MLP(256, 1024, 3), kiln.randn(64, 256))
    show("Transformer block: LayerNorm, self-attention, LayerNorm, MLP (d=128, T=64)",
         TransformerBlock(128, 512), kiln.randn(64, 128))


if __name__ == "__main__":
    main()

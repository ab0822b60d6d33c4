#!/usr/bin/env python3
"""Compile time against model size (issue 17's picture): a torch model of
N residual blocks (LayerNorm, Linear 64->256, GELU, Linear 256->64, add;
B=8, T=32: what torch.fx can trace too, unlike GPT's `b, t = idx.size()`),
the time from a fresh compiler to the first result, for kiln
(`kiln.compile`), Dynamo's capture alone
(`torch.compile(backend="eager")`), `torch.fx.symbolic_trace` (tracing
only: it runs nothing) and inductor (`torch.compile`), in one process,
each from empty on-disk caches.

    python3 benchmarks/compile_scaling.py [--layers 1,4,16,64,256] [--inductor-layers 1,4,16] [--json out.json]

Inductor's compile takes tens of seconds per model; it runs on the smaller
sizes only (--inductor-layers) so `make bench` stays short.
"""
import argparse
import json
import os
import tempfile
import time

# Empty on-disk caches, set before torch and kiln read them.
os.environ.setdefault("KILN_NUM_THREADS", "1")
os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-scaling-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-scaling-")

import torch  # noqa: E402
import torch.fx  # noqa: E402
from torch import _dynamo  # noqa: E402

import kiln  # noqa: E402


# At module level, as models usually are: a class made inside a function
# whose forward reads a local `torch` from a closure cell is a graph break
# in kiln today (its closure has no guard source).
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(64)
        self.fc1 = torch.nn.Linear(64, 256)
        self.fc2 = torch.nn.Linear(256, 64)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="1,4,16,64,256")
    ap.add_argument("--inductor-layers", default="1,4,16")
    ap.add_argument("--json")
    args = ap.parse_args()

    torch.set_num_threads(1)
    layers = [int(x) for x in args.layers.split(",")]
    ind_layers = {int(x) for x in args.inductor_layers.split(",") if x}
    out = {"layers": layers, "kiln": [], "dynamo": [], "fx": [], "inductor": {}}
    print(f"{'blocks':>6}{'ops':>6}{'kiln':>11}{'dynamo':>11}{'torch.fx':>11}{'inductor':>12}")
    for n in layers:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[Block() for _ in range(n)]).eval()
        idx = torch.randn(8, 32, 64)

        def timed(fn):
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0

        with torch.no_grad():
            kiln.reset()
            tk = timed(lambda: kiln.compile(model)(idx))
            kiln.reset()
            ops = sum(kiln.explain(model)(idx).ops_per_graph)
            _dynamo.reset()
            td = timed(lambda: torch.compile(model, backend="eager")(idx))
            tf = timed(lambda: torch.fx.symbolic_trace(model))
            ti = None
            if n in ind_layers:
                _dynamo.reset()
                ti = timed(lambda: torch.compile(model)(idx))
                out["inductor"][n] = ti
        out["kiln"].append(tk)
        out["dynamo"].append(td)
        out["fx"].append(tf)
        print(f"{n:>6}{ops:>6}{tk * 1e3:>8.1f} ms{td * 1e3:>8.1f} ms{tf * 1e3:>8.1f} ms"
              f"{'' if ti is None else f'{ti * 1e3:>9.0f} ms'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

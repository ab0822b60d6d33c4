#!/usr/bin/env python3
"""Module tracing from Python (issue 6): issue 4's model families built as
kiln.nn modules and as torch.nn modules of the same structure, traced by
kiln and by torch in the same run (a peer that is not installed prints n/a).

    python3 benchmarks/python_tracing.py [--sizes 10,30,100,300,1000] [--reps 3]

(a) chain: D blocks, each holding a child block and a Linear(8, 8);
    forward = relu(fc(child(x))). Modules = 2D.
(b) flat: Sequential of N (Linear(8, 8), ReLU) pairs. Modules = 2N + 1.
Input: a (2, 8) float32 tensor (the same values for kiln and torch).

Measured, each on a freshly built model after kiln.reset() /
torch._dynamo.reset() (so no compiled entry or trace of an earlier
model helps; the classes, and so their translated / bytecode-analysed
forward, are shared, on both sides):
(1) symbolic tracing: kiln.fx.symbolic_trace(model, x) vs
    torch.fx.symbolic_trace(model). Target: >= 20x faster.
(2) compile: kiln.compile(model, backend=B) + its first call (trace +
    backend) vs torch.compile(model, backend="eager") + its first call
    (Dynamo's tracing only, no code generation). The ratio and its target
    (>= 100x) are kiln backend="eager" vs Dynamo backend="eager": tracing
    vs tracing. kiln backend="llvm" (each run in a fresh process with the
    disk cache off: kiln reuses a compiled kernel set for any model of the
    same program in a process) and torch's default (inductor, its caches
    disabled by force_disable_caches) are printed for information.
Every kiln result (fx GraphModule and compiled call) is checked against
the model's own result (np.allclose) computed with numpy from its
parameters, which is also checked against kiln's eager call m(x) where
kiln's reference VM can run it (its frame limit is 1,000, so chains deeper
than 500 blocks raise RecursionError there); torch.compile's result is
checked against the torch model's eager call. Times are the best of --reps
for kiln and torch.fx (one run for torch.fx at >= 1000 modules); Dynamo and
inductor run once per size, and a size is skipped (n/a) when extrapolating
from the previous sizes (exponent >= 1.5) predicts more than --peer-limit
seconds for one compile.
"""
import argparse
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
import warnings

# kiln's llvm backend keeps compiled kernels on disk (~/.cache/kiln) and, per
# process, by program fingerprint (weights are not part of it): off, and the
# llvm measurements run in fresh processes (see kiln_llvm_cold).
os.environ.setdefault("KILN_CACHE_DIR", "off")

import numpy as np

import kiln

try:
    import torch
    import torch.fx
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

FX_TARGET = 20.0
COMPILE_TARGET = 100.0
WIDTH = 8


# --- the models ---------------------------------------------------------------
class KBlock(kiln.nn.Module):
    def __init__(self, child):
        super().__init__()
        self.child = child
        self.fc = kiln.nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        if self.child is not None:
            x = self.child(x)
        return kiln.relu(self.fc(x))


def kiln_model(family, n):
    if family == "chain":
        m = None
        for _ in range(n):
            m = KBlock(m)
        return m
    layers = []
    for _ in range(n):
        layers += [kiln.nn.Linear(WIDTH, WIDTH), kiln.nn.ReLU()]
    return kiln.nn.Sequential(*layers)


if torch is not None:
    class TBlock(torch.nn.Module):
        def __init__(self, child):
            super().__init__()
            self.child = child
            self.fc = torch.nn.Linear(WIDTH, WIDTH)

        def forward(self, x):
            if self.child is not None:
                x = self.child(x)
            return torch.relu(self.fc(x))


def torch_model(family, n):
    if family == "chain":
        m = None
        for _ in range(n):
            m = TBlock(m)
        return m
    layers = []
    for _ in range(n):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def modules_of(family, n):
    return 2 * n if family == "chain" else 2 * n + 1


def reference(family, m, x):
    """The model's result computed with numpy from its parameters."""
    linears = []
    if family == "chain":
        while m is not None:
            linears.append(m.fc)
            m = m.child
        linears.reverse()
    else:
        linears = [m[i] for i in range(0, len(m), 2)]
    y = x.numpy()
    for fc in linears:
        y = np.maximum(y @ fc.weight.numpy().T + fc.bias.numpy(), 0)
    return y


def check(what, got, want):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
        raise SystemExit(f"{what}: result differs from the model's (max abs diff "
                         f"{np.max(np.abs(got - want)):.3g})")


# --- the measurements ---------------------------------------------------------
def timed(fn):
    """fn's wall time with the cyclic garbage collector off, as timeit does.
    (With --collect, gc.collect() runs before each model is built: with
    torch imported it walks millions of objects and leaves the CPU caches
    cold, which makes kiln's small traces 2-3x slower.)"""
    gc.disable()
    try:
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out
    finally:
        gc.enable()


def fresh(build, *args):
    if COLLECT[0]:
        gc.collect()
    return build(*args)


COLLECT = [False]  # --collect


def kiln_fx(family, n, x, reps):
    best = math.inf
    for _ in range(reps):
        kiln.reset()
        m = fresh(kiln_model, family, n)
        t, gm = timed(lambda: kiln.fx.symbolic_trace(m, x))
        check(f"kiln.fx {family} {n}", gm(x), reference(family, m, x))
        best = min(best, t)
        del gm, m
    return best


def kiln_compile(family, n, x, backend, reps):
    best = math.inf
    for _ in range(reps):
        kiln.reset()
        m = fresh(kiln_model, family, n)
        want = reference(family, m, x)
        t, y = timed(lambda: kiln.compile(m, backend=backend)(x))
        check(f"kiln.compile({backend}) {family} {n}", y, want)
        best = min(best, t)
        del m
    kiln.reset()
    return best


def kiln_llvm_cold(family, n, reps):
    """kiln.compile(backend="llvm") + first call, each in a fresh process
    (no kernel compiled earlier, in the process or on disk, is reused),
    after compiling an unrelated function there (LLVM's JIT is loaded)."""
    best = math.inf
    for _ in range(reps):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--llvm-child", f"{family},{n}"],
                             check=True, capture_output=True, text=True,
                             env=dict(os.environ, KILN_CACHE_DIR="off"))
        best = min(best, json.loads(out.stdout.strip().splitlines()[-1])["seconds"])
    return best


def llvm_child(spec):
    family, n = spec.split(",")
    n = int(n)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20 * n + 1000))
    warm = kiln.compile(lambda a: kiln.exp(a * 3.0) - 1.0)
    warm(kiln.randn(5, 3))
    x = kiln.randn(2, WIDTH)
    t = kiln_compile(family, n, x, "llvm", 1)
    print(json.dumps({"seconds": t}))


def torch_fx(family, n, reps):
    best = math.inf
    for _ in range(reps):
        m = fresh(torch_model, family, n)
        t, _ = timed(lambda: torch.fx.symbolic_trace(m))
        best = min(best, t)
        del m
    return best


def torch_compile(family, n, tx, backend):
    torch._dynamo.reset()
    m = fresh(torch_model, family, n)
    with torch.no_grad():
        want = m(tx).numpy()
    if backend is None:
        t, y = timed(lambda: torch.compile(m)(tx))
    else:
        t, y = timed(lambda: torch.compile(m, backend=backend)(tx))
    check(f"torch.compile({backend or 'inductor'}) {family} {n}", y.detach(), want)
    torch._dynamo.reset()
    return t


class Capped:
    """Runs a peer measurement unless the previous sizes predict more than
    `limit` seconds for it."""

    def __init__(self, limit):
        self.limit = limit
        self.points = []

    def predict(self, n):
        if not self.points:
            return 0.0
        (n1, t1) = self.points[-1]
        k = 1.5
        if len(self.points) >= 2:
            n0, t0 = self.points[-2]
            k = max(k, math.log(t1 / t0) / math.log(n1 / n0))
        return t1 * (n / n1) ** k

    def run(self, n, fn):
        if self.predict(n) > self.limit:
            return None
        t = fn()
        self.points.append((n, t))
        return t


def fmt(v, spec, width):
    return f"{'n/a':>{width}}" if v is None else f"{v:>{width}{spec}}"


def ratio(v, width):
    if v is None:
        return f"{'n/a':>{width}}"
    return f"{v:>{width - 1}.{1 if v < 100 else 0}f}x"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,30,100,300,1000")
    ap.add_argument("--families", default="chain,flat")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peer-limit", type=float, default=30.0,
                    help="skip a Dynamo / inductor size predicted to take longer than this (s)")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--collect", action="store_true", help="gc.collect() before building each model")
    ap.add_argument("--llvm-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    COLLECT[0] = args.collect
    if args.llvm_child:
        return llvm_child(args.llvm_child)
    sizes = [int(s) for s in args.sizes.split(",")]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20 * max(sizes) + 1000))

    x = kiln.randn(2, WIDTH)
    tx = torch.from_numpy(x.numpy().copy()) if torch is not None else None
    if torch is not None:
        torch.set_num_threads(2)
        import torch._inductor.config as inductor_config
        inductor_config.force_disable_caches = True  # every compile really compiles
        warnings.filterwarnings("ignore", message=".*force_disable_caches.*")
        import logging
        logging.getLogger("torch._dynamo").setLevel(logging.ERROR)

    print(f"python {platform.python_version()}, kiln, torch {torch.__version__ if torch else 'n/a'}; "
          f"{os.cpu_count()} cpus; load average {os.getloadavg()[0]:.2f}")

    # Warm-up at the smallest size, not reported: one-time imports and
    # initialisation (Dynamo's and inductor's first compile import most of
    # torch._dynamo / torch._inductor; kiln loads its LLVM JIT).
    t_warm = {}
    for family in args.families.split(","):
        m = kiln_model(family, 10)
        assert np.allclose(m(x).numpy(), reference(family, m, x), rtol=1e-4, atol=1e-5)
        t_warm["kiln fx"] = kiln_fx(family, 10, x, 1)
        t_warm["kiln eager"] = kiln_compile(family, 10, x, "eager", 1)
        if torch is not None:
            t_warm["torch.fx"] = torch_fx(family, 10, 1)
            t_warm["dynamo eager"] = torch_compile(family, 10, tx, "eager")
            if not args.no_inductor:
                t_warm["inductor"] = torch_compile(family, 10, tx, None)
    print("warm-up (first calls in the process, size 10, not in the tables): " +
          ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in t_warm.items()))

    verdicts = []
    for family in args.families.split(","):
        label = "(a) chain" if family == "chain" else "(b) flat"
        print(f"\n{label}: times in ms; fx = symbolic_trace; compile = compile + first call")
        print(f"{'size':>5}{'mods':>6} |{'kiln fx':>9}{'us/mod':>7}{'torch.fx':>10}{'us/mod':>7}{'ratio':>7}  fx>=20x"
              f" |{'kiln eager':>11}{'llvm':>9}{'Dynamo eager':>13}{'ratio':>7}  comp>=100x"
              f" |{'inductor':>10}{'ind/llvm':>9}")
        dyn = Capped(args.peer_limit)
        ind = Capped(args.peer_limit)
        for n in sizes:
            mods = modules_of(family, n)
            m = kiln_model(family, n)
            if family == "flat" or n <= 500:  # kiln's reference VM: 1,000 frames
                check(f"kiln eager m(x) {family} {n}", m(x), reference(family, m, x))
            del m
            k_fx = kiln_fx(family, n, x, args.reps)
            k_eager = kiln_compile(family, n, x, "eager", args.reps)
            k_llvm = kiln_llvm_cold(family, n, args.reps if n < 1000 else 1)
            t_fx = d_eager = d_ind = None
            if torch is not None:
                t_fx = torch_fx(family, n, args.reps if mods < 1000 else 1)
                d_eager = dyn.run(n, lambda: torch_compile(family, n, tx, "eager"))
                if not args.no_inductor:
                    d_ind = ind.run(n, lambda: torch_compile(family, n, tx, None))
            r_fx = t_fx / k_fx if t_fx is not None else None
            r_c = d_eager / k_eager if d_eager is not None else None
            r_ind = d_ind / k_llvm if d_ind is not None else None
            v_fx = "n/a" if r_fx is None else ("PASS" if r_fx >= FX_TARGET else "MISS")
            v_c = "n/a" if r_c is None else ("PASS" if r_c >= COMPILE_TARGET else "MISS")
            verdicts += [(family, n, "fx", v_fx), (family, n, "compile", v_c)]
            print(f"{n:>5}{mods:>6} |{k_fx * 1e3:>9.2f}{k_fx * 1e6 / mods:>7.1f}"
                  f"{fmt(t_fx and t_fx * 1e3, '.1f', 10)}{fmt(t_fx and t_fx * 1e6 / mods, '.0f', 7)}"
                  f"{ratio(r_fx, 7)}  {v_fx:<7}"
                  f" |{k_eager * 1e3:>11.2f}{k_llvm * 1e3:>9.1f}{fmt(d_eager and d_eager * 1e3, '.0f', 13)}"
                  f"{ratio(r_c, 7)}  {v_c:<10}"
                  f" |{fmt(d_ind and d_ind * 1e3, '.0f', 10)}{ratio(r_ind, 9)}", flush=True)
    misses = [v for v in verdicts if v[3] == "MISS"]
    print(f"\nTargets: symbolic_trace >= {FX_TARGET:.0f}x faster than torch.fx; compile (kiln eager vs "
          f"Dynamo eager) >= {COMPILE_TARGET:.0f}x. "
          + ("all measured sizes PASS" if not misses else
             "MISS: " + ", ".join(f"{f} {n} {what}" for f, n, what, _ in misses)))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

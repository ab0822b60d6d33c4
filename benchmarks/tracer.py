#!/usr/bin/env python3
"""Tracer benchmarks (issue 3): trace speed and cached-call overhead,
kiln beside torch.compile (Dynamo, backend="eager": tracing and guards
only, the same kernels) measured in the same run when torch is installed.

    python3 benchmarks/tracer.py [--build build] [--sizes 10,100,1000,3000,10000]

Trace cost is kiln's default backend (llvm): trace + schedule + the
compiled call's setup, with the kernels found in the process's compile
cache (best of 3 after the first), and "cold", the first of those calls,
which also compiles the kernels with LLVM (disk cache off). Targets
(issue 17): trace cost <= 10 us per op flat from 10 to 10,000 ops; a cached
call with 100 tensor inputs, and with an unchanged 100-layer module tree,
costs at most 1 us beyond its kernels.
"""
import argparse
import json
import os
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def kiln(build, *args):
    exe = os.path.join(build, "benchmarks", "bench_tracer")
    env = dict(os.environ, KILN_CACHE_DIR="off")  # "cold" compiles; never a disk hit
    return json.loads(subprocess.run([exe, *map(str, args)], check=True, capture_output=True, text=True,
                                     env=env).stdout)


def dynamo_trace(n):
    import torch
    src = "def f(x):\n" + "    x = x + 1.0\n" * n + "    return x\n"
    ns = {}
    exec(src, ns)
    torch._dynamo.reset()
    g = torch.compile(ns["f"], backend="eager")
    x = torch.ones(4)
    t0 = time.perf_counter()
    g(x)
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    g(x)
    return first - (time.perf_counter() - t1)


def best(fn, iters=2000, reps=5):
    out = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        out = min(out, (time.perf_counter() - t0) / iters)
    return out


def dynamo_call_inputs(n, dynamic=None):
    import torch
    names = ", ".join(f"x{i}" for i in range(n))
    body = "".join(f"    x{i}.ndim\n" for i in range(n))
    ns = {}
    exec(f"def f({names}):\n{body}    return x0 + x1\n", ns)
    torch._dynamo.reset()
    g = torch.compile(ns["f"], backend="eager", dynamic=dynamic)
    args = [torch.ones(4) for _ in range(n)]
    g(*args)
    call = best(lambda: g(*args))
    kernel = best(lambda: args[0] + args[1])
    return call, kernel


def dynamo_call_modules_walk(n):
    import sys
    # Dynamo inlines each nested call with several Python frames of its own:
    # 100 levels pass Python's default limit (torch users raise it too).
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    return dynamo_call_modules(n, walk=True)


def dynamo_call_inputs_dynamic(n):
    return dynamo_call_inputs(n, dynamic=True)


def dynamo_call_modules(n, walk=False):
    import torch

    class Block(torch.nn.Module):
        def __init__(self, depth):
            super().__init__()
            self.scale = 2.0
            self.child = Block(depth - 1) if depth > 0 else None

        def forward(self, x):
            x = x * self.scale
            return self.child(x) if walk and self.child is not None else x

    torch._dynamo.reset()
    m = Block(n - 1)
    g = torch.compile(m, backend="eager")
    x = torch.ones(4)
    g(x)
    call = best(lambda: g(x))
    kernel = best(lambda: x * 2.0)
    return call, kernel


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--sizes", default="10,100,1000,3000,10000")
    args = ap.parse_args()
    try:
        import torch
        have_torch = True
        print(f"peer: torch {torch.__version__} torch.compile(backend='eager')")
    except ImportError:
        have_torch = False
        print("peer: torch not installed (pip install torch==2.13.0 to compare)")

    print("\nTrace + compile cost of straight-line code (first call minus a cached call), x = x + 1.0 repeated")
    print(f"{'ops':>8}{'backend':>9}{'kiln us/op':>12}{'cold us/op':>12}{'kiln instr/s':>15}{'dynamo us/op':>14}"
          f"{'dynamo/kiln':>13}  target")
    for n in map(int, args.sizes.split(",")):
        k = kiln(args.build, "trace", n)
        d = dynamo_trace(n) if have_torch and n <= 1000 else None
        dcol = f"{d * 1e6 / n:>14.1f}" if d else f"{'(skipped)':>14}"
        ratio = f"{d / k['seconds']:>13.0f}" if d else f"{'':>13}"
        ok = "ok" if k["us_per_op"] <= 10.0 else "MISSED"
        print(f"{n:>8}{k['backend']:>9}{k['us_per_op']:>12.2f}{k['cold_us_per_op']:>12.1f}{k['instr_per_s']:>15.0f}"
              f"{dcol}{ratio}  <= 10 us/op {ok}")
    print("(kiln us/op: kernels from the process's compile cache; cold: the first call, LLVM compiling them)")

    print("\nCached call overhead (call minus its kernels), microseconds")
    print(f"{'case':<28}{'kiln':>8}{'dynamo':>10}{'dynamo/kiln':>13}  target")
    for label, mode, fn in (("100 tensor inputs", "call_inputs", dynamo_call_inputs),
                            ("100 inputs, sizes symbolic", "call_inputs_dynamic", dynamo_call_inputs_dynamic),
                            ("100-layer module tree", "call_modules", dynamo_call_modules),
                            ("100-layer tree, forward walks", "call_modules_walk", dynamo_call_modules_walk)):
        k = kiln(args.build, mode, 100)
        if have_torch:
            call, kernel = fn(100)
            d = (call - kernel) * 1e6
            print(f"{label:<28}{k['overhead_us']:>8.2f}{d:>10.1f}{d / k['overhead_us']:>13.0f}  <= 1.0 us "
                  f"{'ok' if k['overhead_us'] <= 1.0 else 'MISSED'}")
        else:
            print(f"{label:<28}{k['overhead_us']:>8.2f}{'-':>10}{'':>13}  <= 1.0 us "
                  f"{'ok' if k['overhead_us'] <= 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Cached-call cost of kiln.compile on a torch.nn.Module tree (issue 13):
the same chain of N blocks (Linear(8, 8) + ReLU + residual) written in
torch.nn and in kiln.nn, called compiled on a 2x8 float32 input, beside
torch eager. The torch tree's cost per call includes syncing its mirrors
(python/src/torch_modules.h): with no change signalled since the last
sync (kiln/_torch_watch.py) that is one epoch comparison, as the kiln.nn
tree's guards are; so the cached call minus the kernels does not grow
with the tree.

    python3 benchmarks/torch_module_calls.py [--iters 2000] [--repeats 5]
"""
import argparse
import time

import torch
import torch.nn as tnn

import kiln
import kiln.nn as knn


def torch_chain(n):
    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.fc = tnn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.fc(x)) + x

    return tnn.Sequential(*[Block() for _ in range(n)]).eval()


def kiln_chain(n):
    class Block(knn.Module):
        def __init__(self):
            super().__init__()
            self.fc = knn.Linear(8, 8)

        def forward(self, x):
            return kiln.relu(self.fc(x)) + x

    return knn.Sequential(*[Block() for _ in range(n)])


def best(fn, iters, repeats):
    out = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            fn()
        out = min(out, (time.perf_counter_ns() - t0) / iters)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"{'blocks':>6} {'torch eager':>12} {'kiln(torch m)':>14} {'kiln(kiln.nn)':>14}   us per call")
    with torch.no_grad():
        for n in (1, 10, 100):
            tm, km = torch_chain(n), kiln_chain(n)
            x, kx = torch.randn(2, 8), kiln.randn(2, 8)
            ct, ck = kiln.compile(tm), kiln.compile(km)
            assert torch.allclose(ct(x), tm(x), atol=1e-4)
            ck(kx)
            # Both compiled modules run the one KBC call_module function,
            # whose cache is per code: an entry per module, none added while
            # timing.
            entries = kiln._C.cache_entries(ct._kiln_compiled.kbc)
            e = best(lambda: tm(x), args.iters, args.repeats) / 1000
            a = best(lambda: ct(x), args.iters, args.repeats) / 1000
            b = best(lambda: ck(kx), args.iters, args.repeats) / 1000
            assert kiln._C.cache_entries(ct._kiln_compiled.kbc) == entries
            print(f"{n:>6} {e:>12.1f} {a:>14.1f} {b:>14.1f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Depthwise convolutions alone, kiln against torch eager (issue 28's
before/after): a biased nn.Conv2d(groups=C) per backbone shape, batch 2,
kiln.compile(dynamic=False), the two alternating in one process, medians
of --reps rounds of --calls calls. Runs on any kiln tree, so run it with
KILN_NUM_THREADS=1 on a tree whose pool does not follow torch's threads.

    KILN_NUM_THREADS=1 python3 benchmarks/depthwise_vs_eager.py [--reps 7] [--calls 5]

For inductor beside both, and BatchNorm + activation: kernels.py --depthwise.
"""
import argparse
import statistics
import time

import torch

import kiln

SHAPES = [(96, 112, 3, 2), (144, 56, 3, 1), (576, 14, 3, 1), (960, 7, 3, 1), (72, 56, 5, 2), (672, 14, 5, 1),
          (240, 28, 5, 1), (1152, 7, 3, 1), (96, 56, 7, 1), (768, 7, 7, 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"kiln {kiln.__file__}, torch {torch.__version__}, 1 thread")
    with torch.no_grad():
        for C, H, k, s in SHAPES:
            m = torch.nn.Conv2d(C, C, k, s, k // 2, groups=C).eval()
            x = torch.randn(2, C, H, H)
            cm = kiln.compile(m, dynamic=False)
            assert float((cm(x) - m(x)).abs().max()) < 1e-4
            res = [[], []]
            for _ in range(args.reps):
                for i, f in enumerate((cm, m)):
                    t = time.perf_counter()
                    for _ in range(args.calls):
                        f(x)
                    res[i].append((time.perf_counter() - t) / args.calls * 1e6)
            a, b = statistics.median(res[0]), statistics.median(res[1])
            print(f"{C} {H}x{H} k{k} s{s}: kiln {a:.0f} us eager {b:.0f} us ratio {a / b:.2f}")


if __name__ == "__main__":
    main()

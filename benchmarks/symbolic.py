#!/usr/bin/env python3
"""symbolic_trace on deep and wide module trees (issue 4's headline),
kiln beside torch.fx.symbolic_trace measured in the same run (if torch is
installed).

    python3 benchmarks/symbolic.py [--build build]

(a) chain: D blocks, each holding a child block and a Linear; forward =
    relu(fc(child(x))). (b) flat: Sequential of N (Linear, ReLU) pairs.
Targets: <= 5 us per module at every size, and per-module cost flat from
10 to 10,000 modules (log-log slope of total time vs modules < 1.1).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def kiln(build, mode, n):
    exe = os.path.join(build, "benchmarks", "bench_symbolic")
    return json.loads(subprocess.run([exe, mode, str(n)], check=True, capture_output=True, text=True).stdout)


def fx_time(mode, n):
    import torch
    import torch.fx

    class Block(torch.nn.Module):
        def __init__(self, child):
            super().__init__()
            self.child = child
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            if self.child is not None:
                x = self.child(x)
            return torch.relu(self.fc(x))

    sys.setrecursionlimit(max(10000, 10 * n))
    if mode == "chain":
        m = None
        for _ in range(n):
            m = Block(m)
        modules = 2 * n
    else:
        layers = []
        for _ in range(n):
            layers += [torch.nn.Linear(4, 4), torch.nn.ReLU()]
        m = torch.nn.Sequential(*layers)
        modules = 2 * n + 1
    best = 1e30
    for _ in range(3 if n <= 500 else 1):
        t0 = time.perf_counter()
        torch.fx.symbolic_trace(m)
        best = min(best, time.perf_counter() - t0)
    return best, modules


def slope(points):
    (x0, y0), (x1, y1) = points[0], points[-1]
    return math.log(y1 / y0) / math.log(x1 / x0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    for mode, sizes in (("flat", (5, 50, 500, 5000)), ("chain", (5, 50, 500, 5000))):
        print(f"\n({'b' if mode == 'flat' else 'a'}) {mode}")
        print(f"{'modules':>8}{'nodes':>7}{'kiln ms':>10}{'kiln us/mod':>13}{'fx us/mod':>11}{'fx/kiln':>9}  target <= 5 us/mod")
        pts = []
        for n in sizes:
            k = kiln(args.build, mode, n)
            pts.append((k["modules"], k["seconds"]))
            fx = ""
            ratio = ""
            if have_torch and not (mode == "chain" and n > 500):
                s, _ = fx_time(mode, n)
                fx = f"{s * 1e6 / k['modules']:>11.1f}"
                ratio = f"{s / k['seconds']:>9.0f}"
            elif have_torch:
                fx, ratio = f"{'(skipped)':>11}", f"{'':>9}"
            ok = "ok" if k["us_per_module"] <= 5 else "MISSED"
            print(f"{k['modules']:>8}{k['nodes']:>7}{k['seconds'] * 1e3:>10.2f}{k['us_per_module']:>13.2f}{fx:>11}{ratio:>9}  {ok}")
        s = slope(pts)
        print(f"log-log slope of time vs modules: {s:.2f} (target < 1.1: {'ok' if s < 1.1 else 'MISSED'})")


if __name__ == "__main__":
    main()

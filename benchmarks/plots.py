#!/usr/bin/env python3
"""The pictures `make bench` writes (issue 17), from the JSON the
benchmarks leave:
- compile_time.png: time to the first result against model size, log-log:
  kiln, Dynamo's capture, torch.fx, inductor (benchmarks/compile_scaling.py).
- steady_state.png: each real model's steady-state time per call, kiln and
  inductor relative to torch eager (benchmarks/torch_models.py).

    python3 benchmarks/plots.py --scaling scaling.json --models models.json --out benchmarks/plots
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def compile_plot(data, path):
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    n = data["layers"]
    for key, label, style in (("kiln", "kiln.compile", "o-"), ("dynamo", "Dynamo capture (backend=eager)", "s-"),
                              ("fx", "torch.fx.symbolic_trace (trace only)", "^-")):
        ax.plot(n, [t * 1e3 for t in data[key]], style, label=label)
    ind = sorted((int(k), v) for k, v in data["inductor"].items())
    if ind:
        ax.plot([k for k, _ in ind], [v * 1e3 for _, v in ind], "d-", label="inductor (torch.compile)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("residual blocks (LayerNorm, Linear, GELU, Linear, add)")
    ax.set_ylabel("time to first result (ms)")
    ax.set_title("Compile time against model size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def steady_plot(data, path):
    names = list(data)
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    width = 0.38
    xs = range(len(names))
    for i, (key, label) in enumerate((("kiln", "kiln"), ("inductor", "inductor"))):
        vals = [data[m]["steady_s"].get(key, float("nan")) / data[m]["steady_s"]["eager"] for m in names]
        ax.bar([x + (i - 0.5) * width for x in xs], vals, width, label=label)
    ax.axhline(1.0, color="black", linewidth=1, label="torch eager")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names)
    ax.set_ylabel("steady-state time / torch eager (lower is faster)")
    ax.set_title("Steady-state forward, relative to torch eager")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scaling", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(args.scaling) as f:
        compile_plot(json.load(f), os.path.join(args.out, "compile_time.png"))
    with open(args.models) as f:
        steady_plot(json.load(f), os.path.join(args.out, "steady_state.png"))
    print(f"plots: {args.out}/compile_time.png, {args.out}/steady_state.png")


if __name__ == "__main__":
    main()

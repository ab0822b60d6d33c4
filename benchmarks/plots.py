#!/usr/bin/env python3
"""The pictures `make bench` writes (issue 17), from the JSON the
benchmarks leave:
- compile_time.png: time to the first result against model size, log-log:
  kiln, Dynamo's capture, torch.fx, inductor (benchmarks/compile_scaling.py).
- steady_state.png: each real model's steady-state time per call, kiln and
  inductor relative to torch eager (benchmarks/torch_models.py).

- model_zoo.png: every zoo model measured (benchmarks/model_zoo.py's
  --out-dir shards): kiln's first call against inductor's and Dynamo's
  capture, and its steady state against eager and inductor, at one thread.

    python3 benchmarks/plots.py --scaling scaling.json --models models.json --out benchmarks/plots
    python3 benchmarks/plots.py --zoo benchmarks/zoo_runs/NAME
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


def _zoo_rows(shard_dir, threads=1):
    rows = []
    d = os.path.join(shard_dir, f"{threads}t")
    for fname in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        with open(os.path.join(d, fname)) as f:
            r = json.load(f)
        first = {e: (r["first"].get(e) or {}).get("seconds") for e in ("kiln", "dynamo", "inductor")}
        ratio = r["steady"].get("ratio", {})
        rows.append((fname[:-5], first, ratio.get("kiln/eager"), ratio.get("kiln/inductor")))
    return rows


def zoo_plot(shard_dir, path, total):
    rows = _zoo_rows(shard_dir)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    xs = range(len(rows))
    for key, label, marker in (("inductor", "inductor first call / kiln's", "o"),
                               ("dynamo", "Dynamo's capture / kiln's first call", "s")):
        ax1.scatter(list(xs), [f[key] / f["kiln"] if f[key] and f["kiln"] else float("nan") for _, f, _, _ in rows],
                    marker=marker, s=14, label=label)
    for y, style, label in ((50, "--", "target 50x (inductor)"), (5, ":", "target 5x (Dynamo)")):
        ax1.axhline(y, color="gray", linestyle=style, linewidth=1, label=label)
    ax1.set_yscale("log")
    ax1.set_xlabel("zoo model (torchvision, timm, transformers; alphabetical)")
    ax1.set_ylabel("how many times faster kiln's first call is")
    ax1.set_title("First call (compile + one run)")
    ax1.legend(fontsize=8)
    for i, (label, marker) in enumerate((("kiln / eager", "o"), ("kiln / inductor (freezing)", "s"))):
        ax2.scatter(list(xs), [r[2 + i] if r[2 + i] else float("nan") for r in rows], marker=marker, s=14, label=label)
    ax2.axhline(1.0, color="black", linewidth=1)
    ax2.axhline(0.8, color="gray", linestyle="--", linewidth=1, label="target geomean 0.8 (inductor)")
    ax2.set_yscale("log")
    ax2.set_xlabel("zoo model")
    ax2.set_ylabel("steady-state time ratio (lower: kiln faster)")
    ax2.set_title("Steady state, one thread")
    ax2.legend(fontsize=8)
    fig.suptitle(f"The model zoo: {len(rows)} of {total} forward entries measured", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scaling")
    ap.add_argument("--models")
    ap.add_argument("--zoo", help="a model_zoo.py --out-dir: draw model_zoo.png from its shards")
    ap.add_argument("--zoo-total", type=int, default=169, help="the zoo's forward entries, for the title")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.zoo:
        zoo_plot(args.zoo, os.path.join(args.out, "model_zoo.png"), args.zoo_total)
        print(f"plot: {args.out}/model_zoo.png")
        if not (args.scaling and args.models):
            return
    with open(args.scaling) as f:
        compile_plot(json.load(f), os.path.join(args.out, "compile_time.png"))
    with open(args.models) as f:
        steady_plot(json.load(f), os.path.join(args.out, "steady_state.png"))
    print(f"plots: {args.out}/compile_time.png, {args.out}/steady_state.png")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Real torch models through kiln.compile (issues 13 and 17): first call
(compile included) and steady-state forward, beside torch eager,
`torch.compile` (inductor) and `torch.compile(backend="eager")` (Dynamo's
capture alone), in one process.

    python3 benchmarks/torch_models.py [--reps 7] [--target-ms 20] [--models gpt,mixer,...]

The models are the real-model suite of tests/python/test_torch_models.py,
written in plain torch, at benchmark sizes (below). Every model runs in
eval mode under torch.no_grad().

- first call: a fresh compiler (kiln.reset(); torch._dynamo.reset()) and
  empty on-disk caches (kiln's and inductor's), then one call: what a user
  waits for. Measured once per engine and model (inductor takes seconds).
  Targets (issue 13): kiln >= 50x faster than inductor, >= 5x faster than
  Dynamo's capture (backend="eager").
- steady state: every engine compiled; the engines alternate, --reps
  rounds, each round calling one engine back to back for about
  --target-ms; the figure is the median time per call, the ratio the median
  of per-round ratios. Targets: kiln no slower than torch eager on every
  model (issue 13); at most 1.0x inductor on every model and geomean at
  most 0.85x (issue 17).
Inductor runs with `torch._inductor.config.freezing = True`, its CPU
inference setting (weights folded and packed at compile time), as in
benchmarks/model_zoo.py and kernels.py (issue 28); --no-freezing runs it
without. Each engine's output is checked against eager's first (max abs error).
--threads (default 1) sets torch's, kiln's and OpenBLAS's threads alike.
"""
import argparse
import math
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def models(torch):
    """name -> (model, inputs), at benchmark sizes."""
    import test_torch_models as tm

    torch.manual_seed(0)
    out = {}
    gpt = tm.GPT(tm.GPTConfig(block_size=64, vocab_size=512, n_layer=4, n_head=4, n_embd=128))
    out["gpt"] = (gpt, (torch.randint(0, 512, (4, 64)),))
    mixer = tm.MLPMixer(image=32, patch=4, channels=3, dim=128, depth=4, classes=10)
    out["mlp-mixer"] = (mixer, (torch.randn(8, 3, 32, 32),))
    resnet = tm.ResNet(tm.BasicBlock, [2, 2, 2, 2], width=16)
    with torch.no_grad():  # running statistics that are not the defaults
        resnet.train()
        resnet(torch.randn(8, 3, 32, 32))
    out["resnet18"] = (resnet, (torch.randn(8, 3, 32, 32),))
    out["vae"] = (tm.VAE(), (torch.rand(64, 1, 8, 8), torch.randn(64, 8)))
    bert = tm.BertLayer(hidden=128, heads=4, intermediate=512)
    mask = torch.ones(4, 64, dtype=torch.long)
    mask[0, 40:] = 0
    out["bert-layer"] = (bert, (torch.randn(4, 64, 128), mask))
    out["gru-lm"] = (tm.GRULM(vocab=1000, emb=64, hidden=128), (torch.randint(0, 1000, (8, 32)),))
    for m, _ in out.values():
        m.eval()
    return out


def first_output(r):
    return r[0] if isinstance(r, (tuple, list)) else r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--target-ms", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="", help="comma-separated subset")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--no-freezing", action="store_true", help="inductor without freezing (the default before issue 28)")
    ap.add_argument("--json", help="also write the figures here (benchmarks/plots.py reads them)")
    args = ap.parse_args()
    os.environ["KILN_NUM_THREADS"] = str(args.threads)
    os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-models-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-models-")
    import torch
    from torch import _dynamo

    import kiln

    torch.set_num_threads(args.threads)
    import torch._inductor.config as inductor_config
    inductor_config.freezing = not args.no_freezing
    suite = models(torch)
    if args.models:
        suite = {k: v for k, v in suite.items() if k in args.models.split(",")}

    print(f"{args.threads} thread(s); first call = fresh compiler and empty disk caches; steady = median of "
          f"{args.reps} alternating rounds of ~{args.target_ms:.0f} ms")
    rows = []
    for name, (model, inputs) in suite.items():
        with torch.no_grad():
            want = first_output(model(*inputs))
            engines, first, errs = {"eager": model}, {}, {}

            def cold(label, make):
                t0 = time.perf_counter()
                fn = make()
                out = first_output(fn(*inputs))
                first[label] = time.perf_counter() - t0
                errs[label] = float((out - want).abs().max())
                engines[label] = fn

            kiln.reset()
            cold("kiln", lambda: kiln.compile(model))
            report = kiln._C.llvm_report()
            e = kiln.explain(model)(*inputs)
            graphs, breaks = e.graph_count, e.graph_break_count
            _dynamo.reset()
            cold("dynamo", lambda: torch.compile(model, backend="eager"))
            if not args.no_inductor:
                _dynamo.reset()
                cold("inductor", lambda: torch.compile(model))

            steady = {k: [] for k in engines}
            ratios = {k: [] for k in engines if k != "kiln"}
            for _ in range(args.reps):
                per = {}
                for label, fn in engines.items():
                    fn(*inputs)
                    n, t0 = 0, time.perf_counter()
                    while True:
                        fn(*inputs)
                        n += 1
                        el = time.perf_counter() - t0
                        if el * 1e3 >= args.target_ms and n >= 3:
                            break
                    per[label] = el / n
                    steady[label].append(per[label])
                for k in ratios:
                    ratios[k].append(per["kiln"] / per[k])
        rows.append((name, first, {k: statistics.median(v) for k, v in steady.items()},
                     {k: statistics.median(v) for k, v in ratios.items()}, errs, graphs, breaks, report))

    print("\nfirst call (compile included)")
    print(f"{'model':<12}{'kiln':>10}{'dynamo':>11}{'inductor':>12}{'inductor/kiln':>15}{'dynamo/kiln':>13}"
          f"  kiln graphs/breaks")
    for name, first, _, _, _, graphs, breaks, _ in rows:
        k, d, ind = first["kiln"], first["dynamo"], first.get("inductor")
        ind_cols = "" if ind is None else f"{ind * 1e3:>9.0f} ms{ind / k:>14.0f}x"
        print(f"{name:<12}{k * 1e3:>7.1f} ms{d * 1e3:>8.1f} ms{ind_cols}{d / k:>12.1f}x  {graphs}/{breaks}")
    print("\nsteady state (per call)")
    print(f"{'model':<12}{'kiln':>11}{'eager':>11}{'inductor':>12}{'kiln/eager':>12}{'kiln/inductor':>15}"
          f"{'max |err|':>11}  llvm")
    geo = []
    for name, _, st, rt, errs, _, _, report in rows:
        ind = st.get("inductor")
        ind_cols = "" if ind is None else f"{ind * 1e3:>9.3f} ms"
        ratio_cols = f"{rt['eager']:>12.2f}" + ("" if ind is None else f"{rt['inductor']:>15.2f}")
        if ind is not None:
            geo.append(rt["inductor"])
        if report["fell_back"]:
            llvm = "fell back: " + report["reason"]
        else:
            llvm = f"{report['kernels']} kernels, {report['gemms']} gemms, {report['eager_steps']} eager steps"
        print(f"{name:<12}{st['kiln'] * 1e3:>8.3f} ms{st['eager'] * 1e3:>8.3f} ms{ind_cols}{ratio_cols}"
              f"{errs['kiln']:>11.1e}  {llvm}")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({name: {"first_s": first, "steady_s": st, "graphs": graphs, "breaks": breaks}
                       for name, first, st, _, _, graphs, breaks, _ in rows}, f, indent=1)
    if geo:
        print(f"\ngeomean kiln/inductor: {math.exp(sum(map(math.log, geo)) / len(geo)):.2f} (target <= 0.85; "
              f"each <= 1.0)")


if __name__ == "__main__":
    main()

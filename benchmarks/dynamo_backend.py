#!/usr/bin/env python3
"""torch.compile(model, backend="kiln") against backend="inductor" (issue 29):
the same Dynamo capture, backend against backend, on the real-model suite
(benchmarks/torch_models.py's models and sizes, eval mode, no_grad).

    python3 benchmarks/dynamo_backend.py [--reps 5] [--target-ms 20] [--models gpt,vae,...] [--threads 1]

- first call: Dynamo's capture plus the backend's compile plus one run,
  what a user of torch.compile waits for. Each is measured in a fresh
  process (this script re-run with --first ENGINE MODEL): kiln keeps the
  kernels it linked for the life of the process and inductor keeps its
  compiled graphs in memory, so only a new process has truly cold caches
  for both; disk caches point at new empty directories. Engines:
  kiln-dynamo (torch.compile(backend="kiln")), inductor
  (torch.compile(), freezing on), dynamo-eager (backend="eager": the
  capture alone) and kiln (kiln.compile: kiln's own capture).
  Target: kiln-dynamo >= 5x faster than inductor on every model.
  --warm: Dynamo and kiln first run once on an unrelated function in that
  process, so their one-time start-up (imports, Dynamo's first frame) is
  left out and the figure is the capture and the compile of this model.
- steady state: in one process, every engine compiled, the engines
  alternate (--reps rounds, each calling one engine for ~--target-ms);
  the figure is the median per call, the ratio the median of per-round
  ratios. inductor runs with torch._inductor.config.freezing = True
  (parameters folded as constants: its best inference setting).
  Target: kiln-dynamo / inductor geomean <= 1.0.
Outputs are checked against eager's first (max abs error).
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

ENGINES = ("kiln-dynamo", "inductor", "dynamo-eager", "kiln")


def first_output(r):
    return r[0] if isinstance(r, (tuple, list)) else r


def make(engine, model, torch):
    import kiln
    if engine == "kiln-dynamo":
        return torch.compile(model, backend="kiln")
    if engine == "inductor":
        import torch._inductor.config as ic
        ic.freezing = True
        return torch.compile(model)
    if engine == "dynamo-eager":
        return torch.compile(model, backend="eager")
    if engine == "kiln":
        return kiln.compile(model)
    raise ValueError(engine)


def setup(threads):
    os.environ["KILN_NUM_THREADS"] = str(threads)
    os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-dynamo-bench-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-dynamo-bench-")
    import torch
    torch.set_num_threads(threads)
    # nn.GRU: Dynamo refuses it otherwise (the whole frame would run eager
    # for every backend, and gru-lm would measure nothing).
    torch._dynamo.config.allow_rnn = True
    return torch


def one_first_call(engine, name, threads, warm):
    """--first: one cold first call in this (fresh) process; prints seconds
    and the max abs error against eager. warm: Dynamo (and kiln) already
    ran once in the process on an unrelated function, so the figure leaves
    out their one-time start-up (imports, Dynamo's first frame)."""
    torch = setup(threads)
    from torch_models import models
    model, inputs = models(torch)[name]
    if warm:
        import kiln
        torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.ones(3))
        kiln.compile(lambda x: x * 2 + 1)(torch.ones(3))
        torch._dynamo.reset()
        kiln.reset()
    with torch.no_grad():
        want = first_output(model(*inputs))
        t0 = time.perf_counter()
        fn = make(engine, model, torch)
        out = first_output(fn(*inputs))
        dt = time.perf_counter() - t0
    print(f"{dt!r} {float((out - want).abs().max())!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--target-ms", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="", help="comma-separated subset")
    ap.add_argument("--first", nargs=2, metavar=("ENGINE", "MODEL"), help=argparse.SUPPRESS)
    ap.add_argument("--warm", action="store_true",
                    help="first calls after Dynamo and kiln ran once in the process (their start-up left out)")
    args = ap.parse_args()
    if args.first:
        return one_first_call(args.first[0], args.first[1], args.threads, args.warm)

    torch = setup(args.threads)
    from torch_models import models
    suite = models(torch)
    if args.models:
        suite = {k: v for k, v in suite.items() if k in args.models.split(",")}
    print(f"{args.threads} thread(s); first call = a fresh process per engine and model (capture + compile + "
          f"run{'; Dynamo and kiln started first' if args.warm else ''}); steady = median of {args.reps} alternating rounds of ~{args.target_ms:.0f} ms; "
          f"inductor with freezing")

    first = {}
    for name in suite:
        for engine in ENGINES:
            r = subprocess.run([sys.executable, __file__, "--first", engine, name, "--threads", str(args.threads)]
                               + (["--warm"] if args.warm else []), check=True, capture_output=True, text=True)
            dt, err = map(float, r.stdout.split()[-2:])
            first[name, engine] = (dt, err)
            print(f"  first call {name:<12}{engine:<14}{dt * 1e3:>10.1f} ms  max |err| {err:.1e}", flush=True)

    rows = []
    from kiln import _dynamo_backend
    for name, (model, inputs) in suite.items():
        with torch.no_grad():
            want = first_output(model(*inputs))
            engines = {"eager": model}
            errs = {}
            # Dynamo keeps one cache per code object; an entry is reused only
            # by the backend that compiled it (its backend guard), so the
            # three wrappers coexist on model.forward.
            torch._dynamo.reset()
            for engine in ("kiln-dynamo", "inductor", "kiln"):
                fn = make(engine, model, torch)
                errs[engine] = float((first_output(fn(*inputs)) - want).abs().max())
                engines[engine] = fn
                if engine == "kiln-dynamo":
                    plan = _dynamo_backend.last_plans()[-1]
            for fn in engines.values():
                fn(*inputs)
            steady = {k: [] for k in engines}
            ratios = {k: [] for k in engines if k != "kiln-dynamo"}
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
                    ratios[k].append(per["kiln-dynamo"] / per[k])
        rows.append((name, {k: statistics.median(v) for k, v in steady.items()},
                     {k: statistics.median(v) for k, v in ratios.items()}, errs, plan))

    print("\nfirst call (Dynamo capture + backend compile + one run; fresh process each)")
    print(f"{'model':<12}{'kiln-dynamo':>13}{'inductor':>12}{'inductor/kd':>13}{'dynamo-eager':>14}"
          f"{'kiln.compile':>14}{'kd/kiln.compile':>17}")
    worst = math.inf
    for name in suite:
        kd, ind, de, kc = (first[name, e][0] for e in ENGINES)
        worst = min(worst, ind / kd)
        print(f"{name:<12}{kd * 1e3:>10.1f} ms{ind * 1e3:>9.0f} ms{ind / kd:>12.1f}x{de * 1e3:>11.1f} ms"
              f"{kc * 1e3:>11.1f} ms{kd / kc:>16.1f}x")
    print(f"inductor/kiln-dynamo, worst model: {worst:.1f}x (target >= 5x on every model)")

    print("\nsteady state (per call)")
    print(f"{'model':<12}{'kiln-dynamo':>13}{'inductor':>12}{'kiln.compile':>14}{'eager':>11}{'kd/inductor':>13}"
          f"{'kd/kiln':>9}{'kd/eager':>10}{'max |err|':>11}  kiln nodes / segments / eager nodes")
    geo = []
    for name, st, rt, errs, plan in rows:
        geo.append(rt["inductor"])
        print(f"{name:<12}{st['kiln-dynamo'] * 1e3:>10.3f} ms{st['inductor'] * 1e3:>9.3f} ms"
              f"{st['kiln'] * 1e3:>11.3f} ms{st['eager'] * 1e3:>8.3f} ms{rt['inductor']:>13.2f}{rt['kiln']:>9.2f}"
              f"{rt['eager']:>10.2f}{errs['kiln-dynamo']:>11.1e}  {plan['kiln_nodes']}/{plan['nodes']} / "
              f"{plan['segments']} / {[e[1] for e in plan['eager']]}")
    print(f"\ngeomean kiln-dynamo/inductor: {math.exp(sum(map(math.log, geo)) / len(geo)):.2f} (target <= 1.0)")


if __name__ == "__main__":
    main()

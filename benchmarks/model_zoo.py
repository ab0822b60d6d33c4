#!/usr/bin/env python3
"""The model zoo timed (issue 27): every forward entry of tests/python/zoo
(torchvision, timm and transformers models as their libraries build them),
kiln against torch eager, Dynamo's capture and inductor.

    python3 benchmarks/model_zoo.py [-k resnet] [--models a,b] [--threads 1,2]
                                    [--reps 5] [--target-ms 20] [--json out.json]

- first call: compile + one run, each engine and model in a fresh process
  (inductor's: the steady-state process below, before anything else
  compiles in it) whose imports (torch, torchvision, timm, transformers, kiln,
  torch._dynamo: the zoo worker's own set-up) and eager run are done
  before the clock starts, with empty caches (kiln's compile cache off,
  inductor's in a new directory). Engines: kiln (kiln.compile), dynamo
  (torch.compile(backend="eager"): Dynamo's capture alone) and inductor
  (torch.compile with torch._inductor.config.freezing = True, its CPU
  inference setting). Targets: kiln at least 50x faster than inductor and
  5x faster than Dynamo's capture, on every model inductor compiles.
- steady state: in a fresh process per model, kiln, eager and inductor
  alternate (--reps rounds, each calling one engine for ~--target-ms); the
  figure is the median per call, the ratio the median of per-round
  ratios. Targets: no model slower than eager, geomean at most 0.8x
  inductor, no model above 1.2x inductor.
- steady state at every --threads count (torch.set_num_threads =
  KILN_NUM_THREADS), each with its own inductor compile; kiln's and
  Dynamo's first calls at the first count only.
- --out-dir keeps one JSON per model and thread count, and a model already
  measured there is skipped: the whole zoo (about two hours on two cores)
  can be measured over several sittings, then --report-only prints it.

Every engine's output is compared with eager's by the zoo's own comparison
(tests/python/zoo/harness.compare, the zoo's tolerances); a model kiln
answers wrongly is reported, not timed. generate() entries are left out:
their time is transformers' decoding loop, not a compiled graph.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ENGINES = ("kiln", "dynamo", "inductor")


def _zoo():
    sys.path.insert(0, ROOT)
    from tests.python.zoo import harness, models
    return harness, models


def _setup(threads):
    os.environ["KILN_NUM_THREADS"] = str(threads)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="zoo-bench-inductor-")
    harness, models = _zoo()
    harness.setup_worker()  # KILN_CACHE_DIR=off: kiln compiles from scratch
    import torch
    torch.set_num_threads(threads)
    return torch, harness, models


def _make(engine, model, torch):
    import kiln
    if engine == "kiln":
        return kiln.compile(model)
    if engine == "dynamo":
        return torch.compile(model, backend="eager")
    if engine == "inductor":
        import torch._inductor.config as ic
        ic.freezing = True
        return torch.compile(model)
    raise ValueError(engine)


def _build(models, name, torch):
    spec = models.SPECS[name]
    torch.manual_seed(0)
    model, args = spec.build()
    return spec, model, args


def first_call(engine, name, threads):
    """Child process: one cold compile + first call (kiln, dynamo); prints a JSON line."""
    torch, harness, models = _setup(threads)
    spec, model, args = _build(models, name, torch)
    out = {"seconds": None, "error": None}
    with torch.no_grad():
        want = model(*args)
        try:
            t0 = time.perf_counter()
            got = _make(engine, model, torch)(*args)
            out["seconds"] = time.perf_counter() - t0
            out["error"], out["max_abs_diff"] = harness.compare(want, got, spec.rtol, spec.atol)
        except Exception as e:  # inductor fails on some models: reported, never fatal
            out["error"] = harness.describe_error(e)
    print(json.dumps(out))


def _per_call(fn, args, target_ms):
    fn(*args)
    n, t0 = 0, time.perf_counter()
    while True:
        fn(*args)
        n += 1
        el = time.perf_counter() - t0
        if el * 1e3 >= target_ms and n >= 3:
            return el / n


def steady(name, threads, reps, target_ms):
    """Child process: inductor's cold first call, then kiln, eager and
    inductor alternating; prints a JSON line."""
    torch, harness, models = _setup(threads)
    spec, model, args = _build(models, name, torch)
    out = {"per_call": {}, "ratio": {}, "error": {}}
    with torch.no_grad():
        want = model(*args)
        engines = {"eager": model}
        # inductor first, on this cold process: its compile is also its
        # first-call figure (one inductor compile per model, not two: they
        # take a minute each here).
        for engine in ("inductor", "kiln"):
            try:
                t0 = time.perf_counter()
                fn = _make(engine, model, torch)
                got = fn(*args)
                if engine == "inductor":
                    out["inductor_first"] = time.perf_counter() - t0
                what, _ = harness.compare(want, got, spec.rtol, spec.atol)
            except Exception as e:
                what = harness.describe_error(e)
            if what:
                out["error"][engine] = what
            else:
                engines[engine] = fn
        samples = {k: [] for k in engines}
        ratios = {k: [] for k in engines if k != "kiln"}
        for _ in range(reps):
            per = {label: _per_call(fn, args, target_ms) for label, fn in engines.items()}
            for label, t in per.items():
                samples[label].append(t)
            if "kiln" in per:
                for k in ratios:
                    ratios[k].append(per["kiln"] / per[k])
        out["per_call"] = {k: statistics.median(v) for k, v in samples.items()}
        out["ratio"] = {f"kiln/{k}": statistics.median(v) for k, v in ratios.items() if v}
    print(json.dumps(out))


def _child(args, timeout=1800):
    r = subprocess.run([sys.executable, __file__] + args, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        return {"error": f"exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:200]}"}
    return json.loads(lines[-1])


def _geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def _fmt(x, scale, spec, suffix=""):
    return "-" if x is None else format(x * scale, spec) + suffix


def report(threads, rows):
    print(f"\n{threads} thread(s)")
    print(f"{'model':<34}{'kiln 1st':>10}{'dynamo 1st':>12}{'ind. 1st':>10}{'ind/kiln':>9}{'dyn/kiln':>9}"
          f"{'kiln':>10}{'eager':>10}{'inductor':>10}{'k/eager':>8}{'k/ind':>7}  notes")
    first_ind, first_dyn, vs_ind, vs_eager = [], [], [], []
    for name, r in rows:
        f = r["first"]
        s = r["steady"]
        sec = {e: f[e].get("seconds") if not f[e].get("error") else None for e in ENGINES}
        notes = [f"{e}: {f[e]['error']}" for e in ENGINES if f[e].get("error")]
        notes += [f"steady {e}: {w}" for e, w in s.get("error", {}).items()] if isinstance(s.get("error"), dict) \
            else [f"steady: {s.get('error')}"] if s.get("error") else []
        pc, rt = s.get("per_call", {}), s.get("ratio", {})
        ind_k = sec["inductor"] / sec["kiln"] if sec["kiln"] and sec["inductor"] else None
        dyn_k = sec["dynamo"] / sec["kiln"] if sec["kiln"] and sec["dynamo"] else None
        if ind_k:
            first_ind.append((name, ind_k))
        if dyn_k and sec["inductor"]:
            first_dyn.append((name, dyn_k))
        if "kiln/inductor" in rt:
            vs_ind.append((name, rt["kiln/inductor"]))
        if "kiln/eager" in rt:
            vs_eager.append((name, rt["kiln/eager"]))
        print(f"{name:<34}{_fmt(sec['kiln'], 1e3, '.1f'):>10}{_fmt(sec['dynamo'], 1e3, '.1f'):>12}"
              f"{_fmt(sec['inductor'], 1e3, '.1f'):>10}{_fmt(ind_k, 1, '.1f', 'x'):>9}{_fmt(dyn_k, 1, '.1f', 'x'):>9}"
              f"{_fmt(pc.get('kiln'), 1e3, '.3f'):>10}{_fmt(pc.get('eager'), 1e3, '.3f'):>10}"
              f"{_fmt(pc.get('inductor'), 1e3, '.3f'):>10}{_fmt(rt.get('kiln/eager'), 1, '.2f'):>8}"
              f"{_fmt(rt.get('kiln/inductor'), 1, '.2f'):>7}  {'; '.join(notes)[:160]}")
    worst = lambda xs, hi: (max if hi else min)(xs, key=lambda kv: kv[1]) if xs else ("-", float("nan"))
    n, w = worst(first_ind, False)
    print(f"first call, inductor/kiln: worst {w:.1f}x ({n}) over {len(first_ind)} models (target >= 50x)")
    n, w = worst(first_dyn, False)
    print(f"first call, Dynamo's capture/kiln: worst {w:.1f}x ({n}) (target >= 5x)")
    n, w = worst(vs_eager, True)
    print(f"steady, kiln/eager: worst {w:.2f} ({n}), models above 1.0: "
          f"{sum(1 for _, x in vs_eager if x > 1.0)}/{len(vs_eager)} (target: none)")
    n, w = worst(vs_ind, True)
    print(f"steady, kiln/inductor: geomean {_geomean([x for _, x in vs_ind]):.2f} (target <= 0.8), worst {w:.2f} "
          f"({n}), above 1.2: {sum(1 for _, x in vs_ind if x > 1.2)}/{len(vs_ind)} (target: none)")


def _measure(name, threads, first_threads, args):
    """One model at one thread count. kiln's and Dynamo's first calls are
    measured at the first --threads count only (their capture is
    single-threaded; a second figure would double the run for nothing);
    inductor's is its compile inside each steady process, since its kernels
    bake the thread count in at compile time."""
    first = {}
    if threads == first_threads:
        first = {e: _child(["--first", e, name, "--threads", str(threads)]) for e in ("kiln", "dynamo")}
    st = _child(["--steady", name, "--threads", str(threads), "--reps", str(args.reps),
                 "--target-ms", str(args.target_ms)])
    first["inductor"] = {"seconds": st.get("inductor_first"),
                         "error": (st.get("error") or {}).get("inductor") if isinstance(st.get("error"), dict)
                         else st.get("error")}
    return {"first": first, "steady": st}


def _kiln_commit():
    """The commit of the kiln the children import (its source tree's HEAD):
    a run over several sittings says which figures came from which code."""
    import kiln
    src = os.path.dirname(os.path.realpath(kiln.__file__))
    r = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None


def _shard(out_dir, threads, name):
    return os.path.join(out_dir, f"{threads}t", name + ".json") if out_dir else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated zoo names")
    ap.add_argument("-k", action="append", default=[], help="models whose name contains this")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--target-ms", type=float, default=20.0)
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--out-dir", help="one JSON per model and thread count here; a model already there is "
                                      "not measured again (a whole-zoo run spans several sittings)")
    ap.add_argument("--report-only", action="store_true", help="print the report from --out-dir, measure nothing")
    ap.add_argument("--first", nargs=2, metavar=("ENGINE", "MODEL"), help=argparse.SUPPRESS)
    ap.add_argument("--steady", metavar="MODEL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.first:
        return first_call(args.first[0], args.first[1], int(args.threads))
    if args.steady:
        return steady(args.steady, int(args.threads), args.reps, args.target_ms)

    _, models = _zoo()
    names = [n for n, s in models.SPECS.items() if s.kind == "forward"]
    if args.models:
        names = [n for n in names if n in args.models.split(",")]
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    thread_counts = [int(t) for t in args.threads.split(",")]
    commit = None if args.report_only else _kiln_commit()
    results = {}
    for threads in thread_counts:
        rows = []
        for name in names:
            shard = _shard(args.out_dir, threads, name)
            if shard and os.path.exists(shard):
                with open(shard) as f:
                    row = json.load(f)
            elif args.report_only:
                continue
            else:
                row = _measure(name, threads, thread_counts[0], args)
                row["kiln_commit"] = commit
                if shard:
                    os.makedirs(os.path.dirname(shard), exist_ok=True)
                    with open(shard, "w") as f:
                        json.dump(row, f, indent=1)
                first = row["first"]
                print(f"  {threads}t {name}: first " + ", ".join(
                    f"{e} {first[e]['seconds'] * 1e3:.0f} ms" if first.get(e, {}).get("seconds") else f"{e} -"
                    for e in ENGINES), flush=True)
            rows.append((name, row))
        results[threads] = rows
    # kiln's and Dynamo's first calls (measured once) are shown on every thread count's table.
    once = dict(results.get(thread_counts[0], []))
    for threads, rows in results.items():
        for name, row in rows:
            for e in ("kiln", "dynamo"):
                row["first"].setdefault(e, once.get(name, {}).get("first", {}).get(e, {"seconds": None}))
        report(threads, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(t): dict(rows) for t, rows in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()

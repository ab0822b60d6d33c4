#!/usr/bin/env python3
"""The tracer per CPython version (issue 30): kiln.compile's first call
and cached call under every interpreter kiln is built for, side by side,
each against 3.11's. Target: no version more than 1.2x slower than 3.11.

    python3 benchmarks/versions.py [--reps 9] [--iters 2000] [--sizes 10,100,1000]
                                   [--versions 3.10,3.11,3.12,3.13] [--build build] [--json FILE]

Run with the default python3 (3.11, the package installed editable): it
finds the other interpreters (scripts/pythons.sh; each runs kiln from
<build>/python3XY/) and runs this file with --worker under each, one fresh
process per version per round, the versions alternating round by round
(the order rotating each round) so the machine's drift (5-10% between
hours) falls on every version alike. The disk cache is off
(KILN_CACHE_DIR=off); OMP_NUM_THREADS=1. A version on which kiln.compile
raises UnsupportedVersion shows as "unsupported" (its eager rows are still
measured); a worker that fails otherwise (a result that differs, a graph
count other than expected, a crash) is an error: the driver prints it,
drops that version and exits 1 at the end.

To time a snapshot of kiln while python/kiln is being edited (a commit's
files with the built modules beside them, one <dir>/python3XY/kiln per
version, 3.11's included): --build <dir>. A version whose <dir>/python3XY
exists runs with PYTHONPATH=<dir>/python3XY plus its own site-packages
and -S, so the editable install's import hook does not win; the worker
reports where kiln came from and the driver checks it.

The functions (pure Python over kiln's own tensors, no torch, so they run
on every version; inputs x, y: 4 float32s each):
- line N: a straight-line function of N tensor ops (x + 1.0, x * y,
  kiln.relu(x), x - 0.5 in turn): one graph; the trace cost per op;
- loop + call: a 10-iteration loop calling a helper (relu(x * y) + 1.0)
  that the tracer inlines, 40 ops: one graph;
- break once: two ops, print(..., file=<devnull>), two more ops: two
  graphs and one break, so the resume path (the resume function made
  after the break, and its frame) is in both measurements.

Backends: "eager" (kiln's reference kernels: no code generation) for the
first calls: the issue is the Python side (the frontend's translation of
each version's bytecode, the tracer's work, the frame hook), and the
default backend's LLVM compile is C++ that is the same on every version;
one first-call row, "line 100, llvm" (the middle size), has the default
backend for completeness (it compiles the kernels with LLVM). Cached
calls are given with both: with "eager" the graph call runs one reference
kernel per op (0.5 us each, C++), which dominates the bigger functions;
with "llvm" the graph is one fused kernel, so those rows are nearly all
the per-call overhead that differs per version.

Rows (each round a fresh process per version; each cell the median over
--reps rounds of the round's best of 5 samples (the llvm first call: one
sample); the best, because this guest runs at half speed for
stretches of seconds, within one process too, and a sample that falls in
such a stretch says nothing about the version):
(1) first call: kiln.compile(f) + its first call, from empty caches:
    kiln.reset() and a fresh code object each time (kiln keeps a code
    object's translation for its life), after a warm-up compile of an
    unrelated function (each backend) has paid the process's one-time
    costs: the frontend's translation, the trace, the backend, the
    guards. The llvm row is one sample per round, the first call of its
    program in the process (a process reuses a program's kernels).
(2) cached call: each compiled function called again with the same
    inputs, --iters calls per sample for functions of at most 10 ops
    (iters * 10 / ops for bigger ones; the cyclic GC off inside a sample,
    as timeit has it): the frame hook, the guards, the graph call and, for
    break once, the resume function's frame.
(3) eager: each function uncompiled, timed the same way, and a pure-Python
    loop (dict, str and tuple work, no kiln) for CPython's own speed on
    these builds; for scale, no target.

Each compiled result is checked against the uncompiled call's: exactly
(np.array_equal) with the eager backend, np.allclose with llvm, on the
first call and after the cached calls; and in every round kiln.explain
checks each function traced to the graphs and breaks listed above (a
function kiln left to CPython would time CPython, not kiln).

A ratio column is the median over rounds of that round's version / 3.11
(the two processes ran seconds apart), not the ratio of the medians,
followed by the quartiles of those ratios (the middle half of the
rounds); a median above 1.2x misses the target.
"""
import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BASE = "3.11"
TARGET = 1.2
SAMPLES = 5  # cached and eager samples per round, inside a worker
FIRST_SAMPLES = 5  # first-call samples per round (eager backend)

OPS = ("x = x + 1.0", "x = x * y", "x = kiln.relu(x)", "x = x - 0.5")

LOOP_SOURCE = """
def helper(x, y):
    return kiln.relu(x * y) + 1.0

def f(x, y):
    for i in range(10):
        x = helper(x, y) - i * 0.1
    return x
"""

BREAK_SOURCE = """
def f(x, y):
    z = kiln.relu(x * y) + 1.0
    print("break", file=NULL)
    return z * 2.0 - x
"""

# CPython's own speed on these builds (no kiln): the kind of work the
# frontend does per instruction (dicts, strings, tuples, a sort).
PURE_SOURCE = """
def f(x, y):
    d = {}
    for i in range(200):
        k = f"v{i % 17}"
        d[k] = d.get(k, 0) + i
        t = (i, k, len(d))
    return sorted(d.items())[0], t
"""
PURE = "pure Python"

WARMUP_SOURCE = """
def f(x, y):
    return kiln.sigmoid(x) * y + 3.0
"""


def line_source(n):
    return "def f(x, y):\n" + "".join(f"    {OPS[i % len(OPS)]}\n" for i in range(n)) + "    return x\n"


def functions(sizes):
    """(name, source, tensor ops, expected (graphs, breaks)) per function."""
    out = [(f"line {n}", line_source(n), n, (1, 0)) for n in sizes]
    out.append(("loop + call", LOOP_SOURCE, 40, (1, 0)))
    out.append(("break once", BREAK_SOURCE, 4, (2, 1)))
    return out


def cases(sizes):
    """(row, function, source, backend, ops, expected, first call timed) per row:
    every function with the eager backend, then with llvm (the first call
    timed for one of them, the middle size's)."""
    fns = functions(sizes)
    llvm_first = f"line {sizes[len(sizes) // 2]}"
    return ([(name, name, src, "eager", ops, exp, True) for name, src, ops, exp in fns]
            + [(f"{name}, llvm", name, src, "llvm", ops, exp, name == llvm_first) for name, src, ops, exp in fns])


# --- the worker: one round under one interpreter ------------------------------
def worker(args):
    import numpy as np

    import kiln
    try:
        from kiln import UnsupportedVersion
    except ImportError:
        from kiln._bytecode_tables import UnsupportedVersion

    null = open(os.devnull, "w")
    x = kiln.tensor([1.0, -2.0, 3.0, -4.0])
    y = kiln.tensor([0.5, 0.25, 0.75, 0.5])
    rows = cases([int(s) for s in args.sizes.split(",")])
    out = {"version": "%d.%d" % sys.version_info[:2], "python": platform.python_version(), "kiln": kiln.__file__,
           "torch_loaded": "torch" in sys.modules, "supported": True, "reason": None,
           "first": {}, "cached": {}, "eager": {}, "graphs": {}}

    def fresh(source, name):
        # A new code object each time: kiln keeps a code object's translation for its life.
        ns = {"kiln": kiln, "NULL": null, "__name__": f"versions_bench_{name}"}
        exec(compile(source, f"<benchmarks/versions.py: {name}>", "exec"), ns)
        return ns["f"]

    def same(got, want, backend, what):
        got, want = np.asarray(got), np.asarray(want)
        ok = np.array_equal(got, want) if backend == "eager" else np.allclose(got, want, rtol=1e-5, atol=1e-6)
        if not ok:
            raise SystemExit(f"python {out['python']}: {what}: the compiled result differs from eager:\n"
                             f"  compiled {got.tolist()}\n  eager    {want.tolist()}")

    def per_call_ns(fn, iters):
        # As timeit: no cyclic GC inside a sample (a collection's cost is
        # the size of the whole heap, which differs with what the worker has
        # compiled, so it would land on whichever row crossed the threshold).
        gc.collect()
        gc.disable()
        try:
            t = time.perf_counter_ns()
            for _ in range(iters):
                fn(x, y)
            return (time.perf_counter_ns() - t) / iters
        finally:
            gc.enable()

    def iters_for(ops):
        return max(10, args.iters * 10 // max(10, ops))

    # The eager (uncompiled) result of every function: what each compiled row must give.
    fns = functions([int(s) for s in args.sizes.split(",")])
    plain = {name: fresh(src, name) for name, src, *_ in fns}
    want = {name: np.asarray(fn(x, y)).copy() for name, fn in plain.items()}
    plain[PURE] = fresh(PURE_SOURCE, "pure")

    # The process's one-time costs (imports inside kiln, the frame hook's
    # setup, LLVM's initialisation) on an unrelated function, each backend.
    try:
        for backend in ("eager", "llvm"):
            kiln.compile(fresh(WARMUP_SOURCE, "warmup"), backend=backend)(x, y)
    except UnsupportedVersion as e:
        out["supported"], out["reason"] = False, str(e)

    if out["supported"]:
        # (1) first calls: the eager-backend rows FIRST_SAMPLES times each (a fresh
        # code object each time), the llvm row once (a process reuses a
        # program's kernels); the round's figure is the best sample.
        first = {row: [] for row, *_, timed in rows if timed}
        for s in range(FIRST_SAMPLES):
            for row, fname, src, backend, ops, _, timed in rows:
                if not timed or (backend == "llvm" and s > 0):
                    continue
                fn = fresh(src, fname)
                kiln.reset()
                gc.collect()
                t = time.perf_counter_ns()
                r = kiln.compile(fn, backend=backend)(x, y)
                first[row].append((time.perf_counter_ns() - t) / 1e6)
                same(r, want[fname], backend, f"{row}: first call")
        out["first"] = {row: min(v) for row, v in first.items()}

        # (2) cached calls: every row compiled once (no reset between), SAMPLES
        # interleaved samples, the best kept.
        kiln.reset()
        compiled = {}
        for row, fname, src, backend, ops, _, _ in rows:
            c = kiln.compile(fresh(src, fname), backend=backend)
            same(c(x, y), want[fname], backend, f"{row}: first call")
            c(x, y)
            compiled[row] = c
        samples = {row: [] for row, *_ in rows}
        for _ in range(SAMPLES):
            for row, fname, src, backend, ops, _, _ in rows:
                samples[row].append(per_call_ns(compiled[row], iters_for(ops)))
        out["cached"] = {row: min(v) for row, v in samples.items()}
        for row, fname, src, backend, ops, _, _ in rows:
            same(compiled[row](x, y), want[fname], backend, f"{row}: cached call")

    # (3) eager calls, timed the same way.
    samples = {name: [] for name in plain}
    for _ in range(SAMPLES):
        for name, src, ops, _ in fns + [(PURE, PURE_SOURCE, 40, None)]:
            samples[name].append(per_call_ns(plain[name], iters_for(ops)))
    out["eager"] = {name: min(v) for name, v in samples.items()}

    if out["supported"]:
        for row, fname, src, backend, ops, expected, _ in rows:
            e = kiln.explain(fresh(src, fname), backend=backend)(x, y)
            got = (e.graph_count, e.graph_break_count)
            if got != expected or e.left_to_cpython_reasons:
                raise SystemExit(f"python {out['python']}: {row}: {got[0]} graph(s), {got[1]} break(s) "
                                 f"(expected {expected[0]}, {expected[1]}):\n{e}")
            out["graphs"][row] = got
    null.close()
    json.dump(out, sys.stdout)


# --- the driver ----------------------------------------------------------------
def interpreters(build, wanted):
    """{version: (interpreter, PYTHONPATH or None)}. The running interpreter
    (3.11) runs kiln as installed, unless <build>/python311/kiln exists (a
    tree made to run every version from a snapshot of kiln, say)."""
    own = os.path.join(build, "python3%d" % sys.version_info[1])
    own = own if os.path.isdir(os.path.join(own, "kiln")) else None
    found = {"%d.%d" % sys.version_info[:2]: (sys.executable, own)}
    listed = subprocess.run(["bash", os.path.join(REPO, "scripts", "pythons.sh")], check=True,
                            capture_output=True, text=True).stdout.split()
    notes = []
    for path in listed:
        v = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], check=True,
                           capture_output=True, text=True).stdout.strip()
        tree = os.path.join(build, "python3" + v.split(".")[1])
        if not os.path.isdir(os.path.join(tree, "kiln")):
            notes.append(f"{v}: {path} found, but kiln was not built for it ({tree}/kiln missing)")
            continue
        found.setdefault(v, (path, tree))
    if wanted:
        missing = [v for v in wanted if v not in found]
        if missing:
            raise SystemExit(f"versions.py: no interpreter with kiln for {', '.join(missing)} "
                             f"(found {', '.join(sorted(found))}){''.join(chr(10) + n for n in notes)}")
        found = {v: found[v] for v in wanted}
    key = lambda v: tuple(map(int, v.split(".")))
    return {v: found[v] for v in sorted(found, key=key)}, notes


def run_worker(interp, tree, args):
    env = dict(os.environ, KILN_CACHE_DIR="off", OMP_NUM_THREADS="1")
    cmd = [interp, os.path.abspath(__file__), "--worker", "--iters", str(args.iters), "--sizes", args.sizes]
    if tree is not None:
        # kiln from the tree, numpy from the interpreter's site-packages, and
        # no .pth files (-S): an editable install's import hook would win over
        # PYTHONPATH.
        site = subprocess.run([interp, "-c", "import os, site; print(os.pathsep.join(site.getsitepackages()))"],
                              check=True, capture_output=True, text=True).stdout.strip()
        env["PYTHONPATH"] = tree + os.pathsep + site
        cmd.insert(1, "-S")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE)
    if p.returncode != 0:
        return None, (p.stderr.strip() or p.stdout.strip() or f"exit status {p.returncode}")
    out = json.loads(p.stdout)
    if tree is not None and not out["kiln"].startswith(tree):
        return None, f"kiln was imported from {out['kiln']}, not {tree}"
    return out, None


def fmt(v, unit):
    if unit == "ms":
        return f"{v:.2f}" if v < 100 else f"{v:.1f}"
    return f"{v / 1000:.2f}" if v < 100_000 else f"{v / 1000:.1f}"  # ns in, us out


def table(title, key, names, versions, results, errors, unit, target):
    others = [v for v in versions if v != BASE]
    w, rw = 12, 17
    print(f"\n{title}")
    head = f"{'row':<18}" + "".join(f"{v:>{w}}" for v in versions)
    if BASE in versions and others:
        head += "   " + "".join(f"{v + '/' + BASE:>{rw}}" for v in others)
        head += f"   {'target' if target else '':<10}"
    print(head)
    for name in names:
        line = f"{name:<18}"
        for v in versions:
            rounds = results[v]
            if v in errors:
                cell = "error"
            elif rounds and not rounds[0]["supported"] and key != "eager":
                cell = "unsupported"
            elif rounds and name in rounds[0][key]:
                cell = fmt(statistics.median(r[key][name] for r in rounds), unit)
            else:
                cell = "-"
            line += f"{cell:>{w}}"
        worst = None
        if BASE in versions and others:
            line += "   "
            for v in others:
                pairs = [(a[key][name], b[key][name]) for a, b in zip(results[v], results[BASE])
                         if name in a[key] and name in b[key]]
                if v in errors or not pairs:
                    cell = "-"
                else:
                    ratios = [a / b for a, b in pairs]
                    ratio = statistics.median(ratios)
                    worst = ratio if worst is None else max(worst, ratio)
                    cell = f"{ratio:.2f}x"
                    if len(ratios) >= 4:  # and the middle half of the rounds' ratios
                        q1, _, q3 = statistics.quantiles(ratios, n=4)
                        cell += f" {q1:.2f}-{q3:.2f}"
                line += f"{cell:>{rw}}"
            if target:
                verdict = "-" if worst is None else ("holds" if worst <= TARGET else "MISSED")
                line += f"   <= {TARGET}x {verdict}"
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=9, help="rounds; each version runs once per round (default 9)")
    ap.add_argument("--iters", type=int, default=2000,
                    help="calls per cached/eager sample for functions of <= 10 ops; iters*10/ops for bigger ones")
    ap.add_argument("--sizes", default="10,100,1000", help="N of the straight-line functions (default 10,100,1000)")
    ap.add_argument("--versions", default="", help="e.g. 3.11,3.12 (default: every interpreter found)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="where <build>/python3XY/kiln are (default: the repository's build/)")
    ap.add_argument("--json", default=None, help="also write every round's figures to this file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    wanted = [v.strip() for v in args.versions.split(",") if v.strip()]
    found, notes = interpreters(os.path.abspath(args.build), wanted)
    versions = list(found)
    print(f"kiln's tracer per CPython version: {platform.machine()}, {os.cpu_count()} cores, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.reps} rounds, versions alternating "
          f"(the order rotating each round), each a fresh process")
    for n in notes:
        print(f"  note: {n}")
    if BASE not in versions:
        print(f"  note: {BASE} is not among the versions: no ratios")

    results = {v: [] for v in versions}
    errors = {}
    t0 = time.time()
    for r in range(args.reps):
        order = versions[r % len(versions):] + versions[:r % len(versions)]
        for i, v in enumerate(order):
            if v in errors:
                continue
            interp, tree = found[v]
            out, err = run_worker(interp, tree, args)
            if err is not None:
                errors[v] = err
                print(f"\n{v}: the worker FAILED in round {r + 1}:\n{err}\n", file=sys.stderr)
                continue
            if out["version"] != v:
                raise SystemExit(f"versions.py: {interp} ran python {out['version']}, expected {v}")
            results[v].append(out)
        print(f"  round {r + 1}/{args.reps} done ({time.time() - t0:.0f} s)", file=sys.stderr)

    for v in versions:
        if v in errors:
            print(f"  {v}: ERROR (see above)")
            continue
        first = results[v][0]
        what = ("kiln.compile works" if first["supported"] else f"unsupported: {first['reason']}")
        extra = "; torch imported in the worker!" if first["torch_loaded"] else ""
        print(f"  python {first['python']} ({found[v][0]}; kiln from {os.path.dirname(first['kiln'])}): "
              f"{what}{extra}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"versions": {v: list(found[v]) for v in versions}, "rounds": results,
                       "errors": errors}, f, indent=1)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = cases(sizes)
    table(f"(1) first call: kiln.compile(f) + f(x, y), empty caches, ms (median of {args.reps} rounds, "
          f"each the best of {FIRST_SAMPLES} samples; the llvm row one sample per round)",
          "first", [row for row, *_, timed in rows if timed], versions, results, errors, "ms", True)
    table(f"(2) cached call: the compiled f(x, y) again, us per call (median of {args.reps} rounds, "
          f"each the best of {SAMPLES} samples)",
          "cached", [row for row, *_ in rows], versions, results, errors, "us", True)
    table("(3) eager: the uncompiled f(x, y), us per call (for scale: CPython's own speed and kiln's "
          "eager ops; no target)",
          "eager", [name for name, *_ in functions(sizes)] + [PURE], versions, results, errors, "us", False)
    print(f"\nratios: the median over rounds of version / {BASE} in the same round, then the quartiles of "
          f"those ratios; target <= {TARGET}x. "
          f"load average at the end: {os.getloadavg()[0]:.2f}; {time.time() - t0:.0f} s")
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

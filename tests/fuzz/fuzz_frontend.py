"""The CPython-to-KBC frontend fuzz target: random Python functions.

A generator, not a byte mutator: tests/python/progen.py makes a random
module (classes, globals, closures, exceptions, containers, tensors) with a
function `f` for each seed, and its differential harness runs `f` on CPython
(the oracle) and through kiln.compile on both backends (the frontend
translates every code object it meets to KBC, the tracer and the backend run
it). Invariant, as for the KBC targets: kiln's result, exception (type and
message), printed output, argument state and globals equal CPython's; a
function the frontend cannot translate runs on CPython and counts as such;
never a crash or a hang (each worker is its own process, restarted after
one; a program past --timeout is a hang).

Each run starts at a seed drawn from the clock (far above the 0..3999 that
test_generated_frames.py covers in CI), so every run explores new
programs; the seed range is printed, and a failing seed reproduces with
`python tests/python/progen.py --seed SEED --count 1`. Failures are written
to --artifacts as seed-N.txt (the report and the program's source).

    python tests/fuzz/fuzz_frontend.py --seconds 60 [--seed S] [--artifacts DIR]
"""
import argparse
import contextlib
import io
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import progen  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: from the clock)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120, help="seconds one program may take")
    ap.add_argument("--artifacts", default=None)
    args = ap.parse_args(argv)
    first = args.seed if args.seed is not None else 10_000_000 + (int(time.time() * 1000) % 1_000_000_000)
    feats = progen.parse_features("")
    deadline = time.time() + args.seconds
    seed, batch = first, 8 * args.jobs
    totals = {"programs": 0, "translated": 0, "differences": 0, "crashes": 0, "hangs": 0}
    failures = []
    start = time.time()
    while time.time() < deadline and not failures:
        with contextlib.redirect_stdout(io.StringIO()):
            stats, failed = progen.run_many(batch, seed, args.jobs, feats, args.timeout, show=0, quiet=True)
        for k in totals:
            totals[k] += stats[k]
        failures += failed
        seed += batch
        # The next batch fits the time left at the rate so far (each batch
        # also pays a worker start: import kiln).
        rate = totals["programs"] / max(time.time() - start, 1e-3)
        left = deadline - time.time()
        batch = max(args.jobs, min(512, int(left * rate * 0.8)))
    for rec in failures:
        print(f"=== FAILED seed {rec['seed']}\n{rec['report']}\n")
        if args.artifacts:
            os.makedirs(args.artifacts, exist_ok=True)
            with open(os.path.join(args.artifacts, f"seed-{rec['seed']}.txt"), "w") as f:
                f.write(rec["report"])
    print(f"fuzz_frontend: {totals['programs']} programs (seeds {first}..{seed - 1}), "
          f"{totals['translated']} translated by the frontend, {totals['differences']} differences, "
          f"{totals['crashes']} crashes, {totals['hangs']} hangs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

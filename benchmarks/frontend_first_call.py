"""First call of zoo models with two copies of kiln's Python package: the
whole first call and the part of it spent in the frontend (bytecode ->
KBC, kiln/_frontend.py), in fresh processes, alternating the two sides.

    python3 benchmarks/frontend_first_call.py OLD_PATH NEW_PATH \
        [--models transformers.gpt2 transformers.bert] [--reps 5]

OLD_PATH and NEW_PATH are directories whose kiln/ is the package (an
overlay of a tree's python/kiln beside a built _C). Each rep runs every
model once per side, old then new, each in a process of its own (the
first call is the first translation of the model's code); the table has
the medians. Issue 27 (benchmarks/RESULTS.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)

_WORKER = r"""
import sys, time, json
sys.path.insert(0, REPO)
from tests.python.zoo import harness, models
harness.setup_worker()
import torch, kiln
from kiln import _frontend
spent = [0.0]
init = _frontend._Program.__init__
def timed(self, code):  # a _Program is one translate(): its nested functions are inside
    t = time.perf_counter()
    try:
        init(self, code)
    finally:
        spent[0] += time.perf_counter() - t
_frontend._Program.__init__ = timed
model, args = models.SPECS[NAME].build()
with torch.no_grad():
    model(*args)
    compiled = kiln.compile(model)
    spent[0] = 0.0
    t = time.perf_counter()
    compiled(*args)
    first = time.perf_counter() - t
print(json.dumps({"first_ms": first * 1e3, "frontend_ms": spent[0] * 1e3}))
"""


def run(path, name):
    env = dict(os.environ, PYTHONPATH=path, SKBUILD_EDITABLE_SKIP=os.environ.get(
        "SKBUILD_EDITABLE_SKIP", "/work/main/build"))
    code = _WORKER.replace("REPO", repr(_REPO)).replace("NAME", repr(name))
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--models", nargs="+", default=["transformers.gpt2", "transformers.bert"])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    results = {(m, side): [] for m in args.models for side in ("old", "new")}
    for _ in range(args.reps):
        for m in args.models:
            for side, path in (("old", args.old), ("new", args.new)):
                results[m, side].append(run(path, m))
    print(f"median of {args.reps} fresh processes each, ms        old      new   old/new")
    for m in args.models:
        for field in ("first_ms", "frontend_ms"):
            old = statistics.median(r[field] for r in results[m, "old"])
            new = statistics.median(r[field] for r in results[m, "new"])
            label = f"{m} {'first call' if field == 'first_ms' else '  frontend'}"
            print(f"{label:48s} {old:8.1f} {new:8.1f} {old / new:8.2f}x")


if __name__ == "__main__":
    main()

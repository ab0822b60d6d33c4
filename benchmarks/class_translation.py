#!/usr/bin/env python3
"""When kiln reads a library class (issue 26): the first call of
kiln.compile(model) on transformers and timm models, with each class
attribute read, and each method translated, when the tracer first looks it
up (kiln's rule) against the whole class read when kiln first meets it,
every attribute of its MRO converted and every function translated (the
rule before; reproduced here by wrapping kiln._torch_api.read_class_attr).
Peer: eager's first call of the same model (torch.compile's first calls
of these models, 15-60 s each, are in tests/python/zoo/expected.json's
dynamo_s).

    python3 benchmarks/class_translation.py [--models transformers.gpt2,...] [--reps 3]

Each measurement is a fresh process (no translation, compiled entry or
kernel cached from an earlier one; kiln's disk cache off: KILN_CACHE_DIR=off), the two rules
alternating; the median of --reps is reported, with the number of Python
functions kiln translated to KBC in that first call.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = "transformers.gpt2,transformers.bert,transformers.llama,transformers.t5,timm.vit_tiny_patch16_224"

WORKER = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
import tests.python.zoo.torchvision_cpu  # noqa: F401  (torchvision beside a CPU torch)
import torch
import kiln
import kiln.nn
from kiln import _C, _functions
from tests.python.zoo import models

if {eager_rule!r}:
    # The rule before: a class read whole when kiln first meets it, every
    # attribute of its MRO converted and every function translated.
    from kiln import _torch_api
    lazy = _torch_api.read_class_attr
    whole = set()

    def eager(cls, name):
        if cls not in whole:
            whole.add(cls)
            for n in {{n for klass in cls.__mro__ for n in vars(klass)}}:
                klass, attr = kiln.nn.first_definition(cls, n, set())
                if lazy(cls, n) is not None and callable(attr) and hasattr(attr, "__code__"):
                    _functions._as_kbc(attr)
        return lazy(cls, name)
    _torch_api.read_class_attr = eager

torch.manual_seed(0)
model, args = models.SPECS[{name!r}].build()
with torch.no_grad():
    t = time.perf_counter()
    want = model(*args)
    eager_s = time.perf_counter() - t
    t = time.perf_counter()
    got = kiln.compile(model)(*args)
    kiln_s = time.perf_counter() - t
print(json.dumps({{"kiln_s": kiln_s, "eager_s": eager_s, "translated": len(_functions._kbc)}}))
"""


def run(name, eager_rule):
    env = dict(os.environ, KILN_CACHE_DIR="off", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", WORKER.format(root=ROOT, name=name, eager_rule=eager_rule)],
                         capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print("first call of kiln.compile(model) (s; median of fresh processes) and functions translated to KBC")
    print(f"{'model':32} {'lazy (now)':>11} {'up front':>9} {'ratio':>6} {'fns now':>8} {'fns before':>10} {'eager':>7}")
    for name in args.models.split(","):
        lazy, eager = [], []
        for _ in range(args.reps):
            lazy.append(run(name, False))
            eager.append(run(name, True))
        lz = statistics.median(r["kiln_s"] for r in lazy)
        ea = statistics.median(r["kiln_s"] for r in eager)
        print(f"{name:32} {lz:11.3f} {ea:9.3f} {ea / lz:6.2f} {lazy[0]['translated']:8d} "
              f"{eager[0]['translated']:10d} {statistics.median(r['eager_s'] for r in lazy):7.3f}")


if __name__ == "__main__":
    main()

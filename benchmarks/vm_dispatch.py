#!/usr/bin/env python3
"""VM dispatch cost: ns per executed instruction, kiln's VM beside CPython.

Runs the KBC programs in benchmarks/programs/dispatch.kbc with
build/benchmarks/bench_vm and the same code in this CPython, in one run.
CPython's instruction count comes from an opcode trace of a small run
(instructions per iteration are constant), its time from untraced runs.

    python3 benchmarks/vm_dispatch.py [--build build] [--n 5000000]

Target (issue 2): no slower per instruction than CPython, i.e. ratio <= 1.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def int_loop(n):
    i = 0
    s = 0
    while i < n:
        s += i
        i += 1
    return s


class Linear:
    """Plain-attribute stand-in: weight lives in the instance __dict__."""

    def __init__(self):
        self.weight = [[0.0, 0.0], [0.0, 0.0]]


class TorchLikeModule:
    """torch.nn.Module's layout: submodules in _modules, reached through
    __getattr__ (what `self.fc` costs in eager PyTorch)."""

    def __init__(self):
        object.__setattr__(self, "_modules", {"fc": Linear()})
        object.__setattr__(self, "scale", 3)

    def __getattr__(self, name):
        modules = self.__dict__["_modules"]
        if name in modules:
            return modules[name]
        raise AttributeError(name)


class PlainBlock:
    def __init__(self):
        self.fc = Linear()
        self.scale = 3


def make_attr_loop(cls):
    def attr_loop(n):
        m = cls()
        for i in range(n):
            m.scale
            m.fc.weight
        return None

    return attr_loop


def count_instructions(fn, n):
    count = 0
    code = fn.__code__

    def tracer(frame, event, arg):
        nonlocal count
        if frame.f_code is code:
            frame.f_trace_opcodes = True
            if event == "opcode":
                count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn(n)
    finally:
        sys.settrace(None)
    return count


def cpython_ns_per_instr(fn, n, repeats):
    # Instructions grow linearly in n: count two small runs, extrapolate.
    c1, c2 = count_instructions(fn, 1000), count_instructions(fn, 2000)
    per_iter = (c2 - c1) / 1000
    total = c1 + per_iter * (n - 1000)
    best = min(timed(fn, n) for _ in range(repeats))
    return best * 1e9 / total, total, best


def timed(fn, n):
    t0 = time.perf_counter()
    fn(n)
    return time.perf_counter() - t0


def kiln_ns_per_instr(build, entry, n, repeats):
    exe = os.path.join(build, "benchmarks", "bench_vm")
    out = subprocess.run([exe, os.path.join(HERE, "programs", "dispatch.kbc"), entry, str(n), str(repeats)],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return r["ns_per_instr"], r["instructions"], r["seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--n", type=int, default=3_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    print(f"VM dispatch, n={args.n}, best of {args.repeats}; CPython {sys.version.split()[0]}")
    print(f"{'benchmark':<34}{'kiln ns/instr':>14}{'CPython ns/instr':>18}{'kiln/CPython':>14}  target")
    rows = [
        ("int loop (s += i)", "int_loop", int_loop),
        ("attr loop vs plain class", "attr_loop", make_attr_loop(PlainBlock)),
        ("attr loop vs torch-like __getattr__", "attr_loop", make_attr_loop(TorchLikeModule)),
    ]
    for label, entry, pyfn in rows:
        k_ns, k_instr, k_s = kiln_ns_per_instr(args.build, entry, args.n, args.repeats)
        c_ns, c_instr, c_s = cpython_ns_per_instr(pyfn, args.n, args.repeats)
        ratio = k_ns / c_ns
        print(f"{label:<34}{k_ns:>14.2f}{c_ns:>18.2f}{ratio:>14.2f}  <= 1.00 {'ok' if ratio <= 1 else 'MISSED'}")
        print(f"{'':<34}{'(' + str(k_instr) + ' instr, ' + format(k_s, '.3f') + ' s)':>14}"
              f"{'(' + str(int(c_instr)) + ' instr, ' + format(c_s, '.3f') + ' s)':>32}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Normalisation, activation, GEMM, convolution and attention kernels
(issue 17): kiln's compiled call
(`kiln.compile`, llvm backend) against torch eager on the same data, in the
same process, at transformer shapes.

    python3 benchmarks/kernels.py [--reps 15] [--target-ms 2] [--threads 1]

Each case is one compiled function of one op (softmax, log_softmax,
layer_norm, GELU in both forms, attention's scale + mask + softmax, linear,
a 3x3 convolution, causal scaled_dot_product_attention).
Timing: the two sides alternate, kiln then torch, --reps rounds; a round
calls one side back to back for about --target-ms and records the time per
call; the figure is the median over rounds, and the ratio is the median of
the per-round ratios kiln/torch (so a machine whose speed drifts hurts both
alike). The whole call is timed on both sides (kiln: guards, dispatch and
the kernel; torch: its dispatcher and kernel). Every case first checks
kiln's result against torch's (max abs error, and max relative error
where |torch's| >= 1e-3). --threads N gives both sides N threads
(KILN_NUM_THREADS, torch.set_num_threads); on this shared 2-core machine
torch's OpenMP threads spin between calls and its 2-thread figures swing
by 100x with the other sessions' load, so 1 is the default.
Target: each kiln/torch ratio <= 1.0.
"""
import argparse
import os
import statistics
import time

import numpy as np

import kiln
import kiln.nn.functional as KF

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None


def cases():
    """(name, shape, kiln fn, torch fn, makes the extra inputs)."""
    B, T, C, H = 4, 64, 128, 4
    rng = np.random.default_rng(17)

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w, b = normal(C), normal(C)
    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    out = []
    for name, shape in (("softmax", (B, T, C)), ("softmax", (B, H, T, T))):
        out.append((name, shape, lambda x: kiln.softmax(x, -1), lambda x: torch.softmax(x, -1), ()))
    out.append(("log_softmax", (B, H, T, T), lambda x: kiln.log_softmax(x, -1),
                lambda x: torch.log_softmax(x, -1), ()))
    out.append(("scale+mask+softmax", (B, H, T, T), lambda x, m: kiln.softmax(x * 0.125 + m, -1),
                lambda x, m: torch.softmax(x * 0.125 + m, -1), (mask,)))
    out.append(("layer_norm", (B, T, C), lambda x, w, b: kiln.layer_norm(x, (C,), w, b),
                lambda x, w, b: F.layer_norm(x, (C,), w, b), (w, b)))
    for shape in ((B, T, 4 * C),):
        out.append(("gelu tanh", shape, lambda x: kiln.gelu(x, approximate="tanh"),
                    lambda x: F.gelu(x, approximate="tanh"), ()))
        out.append(("gelu erf", shape, lambda x: kiln.gelu(x), lambda x: F.gelu(x), ()))
    # The GEMM (kiln's own AVX-512 kernel where the CPU has it), a ResNet
    # convolution (im2col + that GEMM), and attention as one tiled kernel:
    # SDPA at the GPT's shape and at a long sequence, causal.
    wl = normal(3 * C, C, scale=0.1)
    out.append(("linear", (B * T, C), lambda x, w: KF.linear(x, w), lambda x, w: F.linear(x, w), (wl,)))
    wc = normal(16, 16, 3, 3, scale=0.1)
    out.append(("conv2d 3x3", (8, 16, 16, 16), lambda x, w: KF.conv2d(x, w, padding=1),
                lambda x, w: F.conv2d(x, w, padding=1), (wc,)))
    for shape in ((B, H, T, C // H), (1, 8, 512, 64)):
        kv = (normal(*shape), normal(*shape))
        out.append(("sdpa causal", shape, lambda q, k, v: KF.scaled_dot_product_attention(q, k, v, is_causal=True),
                    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), kv))
    return [(n, s, kf, tf, (normal(*s, scale=3.0),) + extra) for n, s, kf, tf, extra in out]


def per_call(fn, args, target_s):
    n = 1
    while True:  # calibrate: enough calls for target_s
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        dt = time.perf_counter() - t0
        if dt >= target_s / 4 or n >= 1 << 16:
            return max(1, int(n * target_s / max(dt, 1e-9)))
        n *= 4


def timed(fn, args, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return (time.perf_counter() - t0) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--target-ms", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=1, help="threads for each side (0: each one's default)")
    args = ap.parse_args()
    if torch is None:
        print("torch is not installed: nothing to compare with (pip install torch==2.13.0)")
        return
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["KILN_NUM_THREADS"] = str(args.threads)  # read when kiln's pool starts (first kernel)
    os.environ.setdefault("KILN_CACHE_DIR", "off")
    print(f"kiln (llvm backend) vs torch {torch.__version__} eager, threads: kiln "
          f"{os.environ.get('KILN_NUM_THREADS', 'default')}, torch {torch.get_num_threads()}; "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}; medians of {args.reps} alternating rounds")
    print(f"{'case':<20}{'shape':<18}{'kiln us':>9}{'torch us':>10}{'kiln/torch':>12}{'max abs err':>13}"
          f"{'max rel err':>13}  target")
    for name, shape, kfn, tfn, data in cases():
        kargs = [kiln.from_numpy(a) for a in data]
        targs = [torch.from_numpy(a) for a in data]
        compiled = kiln.compile(kfn)
        got = compiled(*kargs).numpy()
        want = tfn(*targs).numpy()
        fin = np.isfinite(want)
        assert np.array_equal(fin, np.isfinite(got)) and np.array_equal(want[~fin], got[~fin]), name
        err = np.abs(got[fin].astype(np.float64) - want[fin])
        abs_err = float(err.max()) if err.size else 0.0
        big = np.abs(want[fin]) >= 1e-3
        rel_err = float((err[big] / np.abs(want[fin][big])).max()) if big.any() else 0.0
        nk = per_call(compiled, kargs, args.target_ms / 1e3)
        nt = per_call(tfn, targs, args.target_ms / 1e3)
        ks, ts, rs = [], [], []
        for _ in range(args.reps):
            k = timed(compiled, kargs, nk)
            t = timed(tfn, targs, nt)
            ks.append(k)
            ts.append(t)
            rs.append(k / t)
        k, t, r = statistics.median(ks), statistics.median(ts), statistics.median(rs)
        print(f"{name:<20}{str(shape):<18}{k * 1e6:>9.1f}{t * 1e6:>10.1f}{r:>12.2f}{abs_err:>13.2e}{rel_err:>13.2e}"
              f"  <= 1.0 {'ok' if r <= 1.0 else 'MISSED'}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

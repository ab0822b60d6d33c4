#!/usr/bin/env python3
"""Normalisation, activation, GEMM, convolution and attention kernels
(issue 17): kiln's compiled call
(`kiln.compile`, llvm backend) against torch eager on the same data, in the
same process, at transformer shapes.

    python3 benchmarks/kernels.py [--reps 15] [--target-ms 2] [--threads 1]
    python3 benchmarks/kernels.py --depthwise [--reps 9] [--threads-list 1,2]
    python3 benchmarks/kernels.py --convs [--reps 9] [--threads-list 1,2] [--only resnext]

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

--depthwise (issue 28): depthwise convolution layers at backbone shapes
(MobileNetV2/V3, EfficientNet-B0, ConvNeXt's 7x7; batch 2 at 224x224), as
torch modules in eval under no_grad: the convolution alone and, where the
backbone has them, with its BatchNorm and activation. Three engines on the
same module and input, alternating within each round: kiln (kiln.compile
of the module), torch eager, and inductor with freezing
(`torch._inductor.config.freezing = True`, its CPU inference setting), at
each thread count of --threads-list: `torch.set_num_threads(n)`, which
kiln's pool follows (KILN_NUM_THREADS must be unset). Targets: kiln/eager
<= 0.8 at every shape.

--convs (issue 28): the same three engines on the backbones' dense 3x3
and 1x1 convolutions (ResNet-18/50, MobileNetV2's pointwise layers), their
grouped ones (ResNeXt-50 32x4d, RegNetY-400MF's and RegNetX-400MF's group
widths 8 and 16) and the depthwise layers above (the convolution alone),
biased, batch 2. Target: kiln/eager <= 0.8 at every row. --no-inductor
skips inductor's compiles; --stat min reports each engine's fastest round
(on this shared machine the medians of one run swing by 2x with the other
sessions' load, the minima by ~10%).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import kiln
import kiln.nn.functional as KF

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


# (name, N, C, H, W, kernel, stride, block): block is what follows the
# convolution in that backbone ("bias": a biased convolution alone).
DEPTHWISE_LAYERS = [
    ("mbv2 s2", 2, 96, 112, 112, 3, 2, "relu6"),
    ("mbv2", 2, 144, 56, 56, 3, 1, "relu6"),
    ("mbv2", 2, 576, 14, 14, 3, 1, "relu6"),
    ("mbv2", 2, 960, 7, 7, 3, 1, "relu6"),
    ("mbv3 5x5 s2", 2, 72, 56, 56, 5, 2, "relu"),
    ("mbv3 5x5", 2, 672, 14, 14, 5, 1, "hardswish"),
    ("effnet 5x5", 2, 240, 28, 28, 5, 1, "silu"),
    ("effnet", 2, 1152, 7, 7, 3, 1, "silu"),
    ("convnext 7x7", 2, 96, 56, 56, 7, 1, "bias"),
    ("convnext 7x7", 2, 768, 7, 7, 7, 1, "bias"),
]


def depthwise_modules(C, k, s, block):
    """The layer's modules: the convolution alone, and with BN + activation."""
    nn = torch.nn
    act = {"relu6": nn.ReLU6, "relu": nn.ReLU, "hardswish": nn.Hardswish, "silu": nn.SiLU, "gelu": nn.GELU}
    conv = nn.Conv2d(C, C, k, s, k // 2, groups=C, bias=True)
    out = [("conv", conv)]
    if block != "bias":
        bn = nn.BatchNorm2d(C)
        with torch.no_grad():  # not the identity: running statistics as a trained model has them
            bn.running_mean.uniform_(-0.5, 0.5), bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-0.5, 0.5)
        out.append((f"+bn+{block}", nn.Sequential(nn.Conv2d(C, C, k, s, k // 2, groups=C, bias=False), bn,
                                                  act[block]())))
    return [(n, m.eval()) for n, m in out]


# (name, N, C_in, C_out, H, W, kernel, stride, groups): the dense and
# grouped convolutions of the backbones (issue 28), batch 2 at 224x224 (so
# 56x56 is a ResNet's first stage). Biased convolutions alone: the
# BatchNorm after them is folded or fused elsewhere (branch bnfold).
CONV_LAYERS = [
    ("resnet18", 2, 64, 64, 56, 56, 3, 1, 1),
    ("resnet18 s2", 2, 64, 128, 56, 56, 3, 2, 1),
    ("resnet18", 2, 128, 128, 28, 28, 3, 1, 1),
    ("resnet18", 2, 256, 256, 14, 14, 3, 1, 1),
    ("resnet18", 2, 512, 512, 7, 7, 3, 1, 1),
    ("resnet50 1x1", 2, 256, 64, 56, 56, 1, 1, 1),
    ("resnet50 1x1", 2, 64, 256, 56, 56, 1, 1, 1),
    ("resnet50 1x1", 2, 512, 128, 28, 28, 1, 1, 1),
    ("resnet50 1x1", 2, 1024, 256, 14, 14, 1, 1, 1),
    ("resnet50 1x1", 2, 2048, 512, 7, 7, 1, 1, 1),
    ("resnet50 1x1 s2", 2, 256, 512, 56, 56, 1, 2, 1),
    ("resnet50 s2", 2, 128, 128, 56, 56, 3, 2, 1),
    ("mbv2 1x1", 2, 24, 144, 56, 56, 1, 1, 1),
    ("mbv2 1x1", 2, 144, 24, 56, 56, 1, 1, 1),
    ("mbv2 1x1", 2, 576, 96, 14, 14, 1, 1, 1),
    ("mbv2 1x1", 2, 960, 160, 7, 7, 1, 1, 1),
    ("resnext 32x4d", 2, 128, 128, 56, 56, 3, 1, 32),
    ("resnext s2", 2, 256, 256, 56, 56, 3, 2, 32),
    ("resnext 32x8", 2, 256, 256, 28, 28, 3, 1, 32),
    ("resnext 32x16", 2, 512, 512, 14, 14, 3, 1, 32),
    ("resnext 32x32", 2, 1024, 1024, 7, 7, 3, 1, 32),
    ("regnety400 g8", 2, 48, 48, 56, 56, 3, 1, 6),
    ("regnety400 g8", 2, 104, 104, 28, 28, 3, 1, 13),
    ("regnety400 g8", 2, 208, 208, 14, 14, 3, 1, 26),
    ("regnety400 g8", 2, 440, 440, 7, 7, 3, 1, 55),
    ("regnety400 s2", 2, 104, 104, 56, 56, 3, 2, 13),
    ("regnetx400 g16", 2, 64, 64, 28, 28, 3, 1, 4),
    ("regnetx400 g16", 2, 160, 160, 14, 14, 3, 1, 10),
    ("regnetx400 g16", 2, 400, 400, 7, 7, 3, 1, 25),
]


def conv_rows():
    """(layer, shape, k/s, module name, module) for --convs: CONV_LAYERS,
    then the depthwise layers' convolutions alone."""
    nn = torch.nn
    for name, N, C, O, H, W, k, s, g in CONV_LAYERS:
        mname = "conv" if g == 1 else f"groups {g}"
        yield name, (N, C, H, W), f"{k}/{s}", f"{mname} ->{O}", nn.Conv2d(C, O, k, s, k // 2, groups=g).eval()
    for name, N, C, H, W, k, s, block in DEPTHWISE_LAYERS:
        yield name, (N, C, H, W), f"{k}/{s}", "depthwise", depthwise_modules(C, k, s, block)[0][1]


# Linears on few rows (M, in, out): classifier heads at batch 2, a decoding
# step, ConvNeXt's late stages (its Linears run over B*H*W tokens), and the
# rows past gemm_f32's small-m crossover (kNtRowsLimit = 16).
LINEAR_LAYERS = [
    ("alexnet fc6", 2, 9216, 4096),
    ("alexnet fc7", 2, 4096, 4096),
    ("vgg/alex head", 2, 4096, 1000),
    ("decode step", 1, 768, 3072),
    ("convnext_l s4", 8, 1536, 6144),
    ("convnext_l s4", 8, 6144, 1536),
    ("tokens 16", 16, 768, 3072),
    ("tokens 32", 32, 768, 3072),
    ("tokens 64", 64, 768, 3072),
    ("tokens 256", 256, 768, 3072),
]


# transformers' GPT2Block (LayerNorm, c_attn Conv1D, causal attention,
# c_proj, residual; LayerNorm, MLP with the tanh GELU, residual) at GPT-2
# small's and medium's widths: (name, batch, tokens, n_embd, n_head).
GPT_BLOCKS = [
    ("gpt2 small", 1, 64, 768, 12),
    ("gpt2 small", 4, 64, 768, 12),
    ("gpt2 small", 1, 256, 768, 12),
    ("gpt2 medium", 1, 64, 1024, 16),
    ("gpt2 medium", 4, 64, 1024, 16),
]


def gpt_rows():
    """(layer, shape, -, module name, module) for --gpt: one GPT2Block, its
    hidden states out (the block returns a tuple)."""
    sys.path.insert(0, ROOT)
    from tests.python.zoo import torchvision_cpu  # noqa: F401 - transformers imports torchvision (docs/zoo.md)
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    class Block(torch.nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.block = GPT2Block(cfg, layer_idx=0)

        def forward(self, x):
            return self.block(x)[0]

    for name, B, T, C, H in GPT_BLOCKS:
        cfg = GPT2Config(n_embd=C, n_head=H, n_positions=max(1024, T), attn_implementation="sdpa")
        yield name, (B, T, C), "-", "GPT2Block", Block(cfg).eval()


def linear_rows():
    """(layer, shape, -, module name, module) for --linears."""
    for name, M, i, o in LINEAR_LAYERS:
        yield name, (M, i), "-", f"linear ->{o}", torch.nn.Linear(i, o).eval()


def depthwise_rows():
    """(layer, shape, k/s, module name, module) for --depthwise."""
    for name, N, C, H, W, k, s, block in DEPTHWISE_LAYERS:
        for mname, mod in depthwise_modules(C, k, s, block):
            yield name, (N, C, H, W), f"{k}/{s}", mname, mod


def run_layers(args, title, rows):
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config
    inductor_config.freezing = True
    # Each thread count is a recompile for dynamo (its guards hold
    # num_threads), and every Conv2d/Sequential shares one code object: the
    # default limit of 8 would silently leave later rows to eager.
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, 4096)
    if os.environ.get("KILN_NUM_THREADS"):
        raise SystemExit("--depthwise/--convs/--linears: unset KILN_NUM_THREADS (kiln follows torch.set_num_threads)")
    threads = [int(t) for t in args.threads_list.split(",")]
    engines_used = ("kiln", "eager") if args.no_inductor else ("kiln", "eager", "inductor")
    torch.manual_seed(0)
    print(f"{title}: kiln (llvm backend) vs torch {torch.__version__} {' and '.join(engines_used[1:])}"
          f"{' (freezing)' if not args.no_inductor else ''}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}; "
          f"{'medians' if args.stat == 'median' else 'minima'} of {args.reps} alternating rounds")
    print(f"{'layer':<16}{'shape':<20}{'k/s':<6}{'module':<16}{'thr':>4}{'kiln us':>10}{'eager us':>10}"
          f"{'induct us':>10}{'k/eager':>9}{'k/induct':>9}{'max err':>10}")
    with torch.no_grad():
        for name, shape, ks, mname, mod in rows:
            if args.only not in name:
                continue
            x = torch.randn(*shape)
            torch.set_num_threads(threads[0])
            want = mod(x)
            # Static shapes for both compilers: every layer here is a
            # new instance of the same classes, so their shared forward
            # code would otherwise be recompiled with dynamic sizes from
            # the second row on (automatic dynamic shapes, in kiln as in
            # dynamo), which no whole-model compile of one layer sees.
            engines = [kiln.compile(mod, dynamic=False), mod]
            if not args.no_inductor:
                engines.append(torch.compile(mod, dynamic=False))
            err = max(float((e(x) - want).abs().max()) for e in engines[:1] + engines[2:])
            for th in threads:
                torch.set_num_threads(th)
                ns = [per_call(e, (x,), args.target_ms / 1e3) for e in engines]
                times = [[] for _ in engines]
                for _ in range(args.reps):
                    for i, e in enumerate(engines):
                        times[i].append(timed(e, (x,), ns[i]))
                if args.stat == "min":  # the fastest round of each: what the other sessions' load left alone
                    kr = min(times[0]) / min(times[1])
                    ki = min(times[0]) / min(times[2]) if len(engines) > 2 else float("nan")
                    us = [min(t) * 1e6 for t in times] + [float("nan")] * (3 - len(engines))
                else:
                    kr = statistics.median(a / b for a, b in zip(times[0], times[1]))
                    ki = statistics.median(a / b for a, b in zip(times[0], times[2])) if len(engines) > 2 else float("nan")
                    us = [statistics.median(t) * 1e6 for t in times] + [float("nan")] * (3 - len(engines))
                print(f"{name:<16}{str(shape):<20}{ks:<6}{mname:<16}{th:>4}{us[0]:>10.1f}"
                      f"{us[1]:>10.1f}{us[2]:>10.1f}{kr:>9.2f}{ki:>9.2f}{err:>10.1e}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


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
    ap.add_argument("--depthwise", action="store_true", help="the depthwise rows (issue 28) instead")
    ap.add_argument("--convs", action="store_true",
                    help="the dense, 1x1, grouped and depthwise convolutions of the backbones (issue 28) instead")
    ap.add_argument("--gpt", action="store_true", help="transformers' GPT2Block at GPT-2 small and medium widths instead")
    ap.add_argument("--linears", action="store_true",
                    help="Linear layers on few rows (heads, decoding steps, late ConvNeXt stages) instead")
    ap.add_argument("--threads-list", default="1,2", help="--depthwise/--convs/--linears/--gpt: thread counts, each for every engine")
    ap.add_argument("--only", default="", help="--depthwise/--convs/--linears/--gpt: only the layers whose name contains this")
    ap.add_argument("--no-inductor", action="store_true", help="--depthwise/--convs/--linears/--gpt: kiln and eager only (quicker)")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="--depthwise/--convs/--linears/--gpt: per engine, the median round and the median of the per-round ratios, "
                         "or the fastest round and the ratio of the fastest (steadier on a loaded machine)")
    args = ap.parse_args()
    if torch is None:
        print("torch is not installed: nothing to compare with (pip install torch==2.13.0)")
        return
    # The layer suites: each a table of modules against eager and inductor.
    suites = {"depthwise": ("depthwise convolutions", depthwise_rows), "convs": ("convolutions", conv_rows),
              "linears": ("linears on few rows", linear_rows), "gpt": ("GPT-2 blocks", gpt_rows)}
    for flag, (title, rows) in suites.items():
        if getattr(args, flag):
            return run_layers(args, title, rows())
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

#!/usr/bin/env python3
"""`make demo`, second half: kiln on models as their libraries build them.

A torchvision ResNet-18 and a HuggingFace GPT-2 (random weights from the
library's own constructors: no download), each compiled unchanged with
kiln.compile. For each: what kiln captured (graphs, breaks and their
reasons in plain words), the result against eager, and the first call and
steady state beside torch eager and torch.compile (inductor, freezing on:
its CPU inference setting). GPT-2 then generates 16 tokens through
transformers' own generate() with the compiled forward, as transformers
documents for torch.compile.

    python3 examples/library_demo.py [--no-inductor] [--threads N]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-demo-inductor-"))
os.environ.setdefault("KILN_CACHE_DIR", "off")  # the first call below is a cold compile

# torchvision's wheel here is a CUDA build: this makes its pure-Python
# models importable beside the CPU torch (docs/zoo.md says why and how).
import tests.python.zoo.torchvision_cpu  # noqa: E402,F401
import torch  # noqa: E402

import kiln  # noqa: E402


def timed_first(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def steady(fns, args, rounds=7, target_s=0.05):
    """Median seconds per call of each fn, the fns alternating per round."""
    samples = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            n, t0 = 0, time.perf_counter()
            while True:
                fn(*args)
                n += 1
                if time.perf_counter() - t0 >= target_s and n >= 3:
                    break
            samples[k].append((time.perf_counter() - t0) / n)
    return {k: statistics.median(v) for k, v in samples.items()}


def show_capture(model, args):
    e = kiln.explain(model)(*args)
    print(f"  kiln captured {e.graph_count} graph(s), {sum(e.ops_per_graph)} ops, {e.graph_break_count} break(s)")
    seen = {}
    for b in e.break_reasons:
        seen.setdefault(b["reason"], 0)
        seen[b["reason"]] += 1
    for reason, n in sorted(seen.items(), key=lambda kv: -kv[1])[:5]:
        print(f"    {n:4d} x {reason[:150]}")
    if len(seen) > 5:
        print(f"    ... and {len(seen) - 5} other reason(s): kiln.explain(model)(*args) lists every one")


def first_output(r):
    if isinstance(r, torch.Tensor):
        return r
    if hasattr(r, "logits"):
        return r.logits
    return r[0]


def compare_engines(name, model, args, inductor):
    print(f"\n== {name} ==")
    with torch.no_grad():
        want = first_output(model(*args))
        show_capture(model, args)
        kiln.reset()
        compiled, kiln_first = timed_first(kiln.compile(model), *args)
        err = float((first_output(compiled) - want).abs().max())
        print(f"  result against eager: max |difference| {err:.1e}")
        fns = {"eager": model, "kiln": kiln.compile(model)}
        firsts = {"kiln": kiln_first}
        if inductor:
            import torch._inductor.config as ic
            ic.freezing = True
            tc = torch.compile(model)
            _, firsts["torch.compile"] = timed_first(tc, *args)
            fns["torch.compile"] = tc
        st = steady(fns, args)
    print(f"  {'':16}{'first call':>12}{'steady':>12}")
    print(f"  {'eager':16}{'-':>12}{st['eager'] * 1e3:>9.2f} ms")
    for k in firsts:
        print(f"  {k:16}{firsts[k]:>10.2f} s{st[k] * 1e3:>9.2f} ms")
    line = f"  kiln: steady {st['kiln'] / st['eager']:.2f}x eager's time"
    if inductor:
        line += (f", {st['kiln'] / st['torch.compile']:.2f}x torch.compile's; first call "
                 f"{firsts['torch.compile'] / firsts['kiln']:.0f}x faster than torch.compile's")
    print(line)


def gpt2_generate(model, prompt):
    print("\n== GPT-2 generate(): 16 new tokens, greedy, KV cache, forward compiled by kiln ==")
    kw = dict(max_new_tokens=16, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        t0 = time.perf_counter()
        want = model.generate(prompt, **kw)
        t_eager = time.perf_counter() - t0
        kiln.reset()
        model.forward = kiln.compile(model.forward)
        try:
            t0 = time.perf_counter()
            got = model.generate(prompt, **kw)
            t_first = time.perf_counter() - t0
            t0 = time.perf_counter()
            model.generate(prompt, **kw)
            t_again = time.perf_counter() - t0
        finally:
            del model.forward
    print(f"  tokens: {got[0, prompt.shape[1]:].tolist()}")
    print(f"  the same tokens as eager: {torch.equal(got, want)}")
    print(f"  eager {t_eager * 1e3:.0f} ms; kiln first generate {t_first * 1e3:.0f} ms (compiles as lengths "
          f"grow), again {t_again * 1e3:.0f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-inductor", action="store_true", help="leave torch.compile out (it compiles for minutes)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)  # kiln's pool follows torch's count
    torch.manual_seed(0)

    import torchvision
    cnn = torchvision.models.resnet18().eval()
    compare_engines("torchvision resnet18 (batch 2, 224x224)", cnn, (torch.randn(2, 3, 224, 224),),
                    not args.no_inductor)

    import transformers
    config = transformers.GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=256)
    gpt2 = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 1000, (2, 32))
    compare_engines("transformers GPT-2 (2 layers, d=128; batch 2, 32 tokens)", gpt2, (ids,),
                    not args.no_inductor)
    gpt2_generate(gpt2, ids[:1, :8])


if __name__ == "__main__":
    main()

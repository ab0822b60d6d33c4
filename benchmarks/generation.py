#!/usr/bin/env python3
"""Generating tokens one at a time from a torch GPT (issue 14): the
sequence length T grows by one per step, so a compiler that specializes on
sizes recompiles every step. kiln (`kiln.compile(model)`: automatic dynamic
shapes, llvm backend), torch eager and `torch.compile(model, dynamic=None)`
(inductor, automatic dynamic) run the same greedy loop in one process.

    python3 benchmarks/generation.py [--tokens 128] [--prompt 8] [--reps 3]

Figures:
- total: the whole loop from a cold compiler (kiln.reset() /
  torch._dynamo.reset(), and empty on-disk caches unless --warm-cache),
  compile time included: what a user's first generate() costs. Once per
  engine (inductor's compile takes minutes).
- steady: the same loop again, every entry compiled; the engines alternate,
  --reps rounds, median per engine; per token = loop / tokens.
- dynamic vs static at the same T: kiln's symbolic entry against an entry
  compiled for exactly that T (dynamic=False), called alternately, median
  per call over rounds of --calls calls.
Targets (issue 14): kiln's total below torch eager's; kiln's per-call
latency at each T at most 1.1x its static-shape latency there.
Each engine's logits are checked against eager at every step of the cold
loop (max abs error). --threads (default 1) sets torch's and kiln's
threads alike: torch's OpenMP threads spin between calls, and on a shared
machine that swings its figures.
"""
import argparse
import copy
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import torch  # noqa: E402

import kiln  # noqa: E402
from test_torch_models import GPT, GPTConfig  # noqa: E402


def greedy(step, prompt, tokens, check=None):
    """Runs `tokens` steps of greedy generation through step(idx) -> logits."""
    idx = prompt
    with torch.no_grad():
        for _ in range(tokens):
            logits = step(idx)
            if check is not None:
                check(idx, logits)
            idx = torch.cat((idx, logits[:, -1, :].argmax(-1, keepdim=True)), dim=1)
    return idx


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-inductor", action="store_true", help="skip torch.compile (its compile takes minutes)")
    ap.add_argument("--warm-cache", action="store_true",
                    help="keep kiln's and inductor's on-disk caches (default: empty ones, a first run)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["KILN_NUM_THREADS"] = str(args.threads)
    if not args.warm_cache:
        # Both compilers start from empty on-disk caches: the cold figures
        # are a user's very first run (a later process reuses the kernels).
        os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-gen-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-gen-")

    cfg = GPTConfig(block_size=args.prompt + args.tokens, vocab_size=512, n_layer=4, n_head=4, n_embd=128)
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt))
    print(f"GPT: {cfg.n_layer} layers, d={cfg.n_embd}, {cfg.n_head} heads, vocab {cfg.vocab_size}; "
          f"batch 1, prompt {args.prompt}, {args.tokens} tokens (T {args.prompt}..{args.prompt + args.tokens - 1}); "
          f"{args.threads} thread(s)")

    engines = {"torch eager": model}
    errors = {}

    def checker(name):
        def check(idx, logits):
            with torch.no_grad():
                want = model(idx)
            errors[name] = max(errors.get(name, 0.0), float((logits - want).abs().max()))
        return check

    totals = {}
    t0 = time.perf_counter()
    want_ids = greedy(model, prompt, args.tokens)
    totals["torch eager"] = time.perf_counter() - t0

    kiln.reset()
    t0 = time.perf_counter()
    k = kiln.compile(model)
    ids = greedy(k, prompt, args.tokens)
    totals["kiln"] = time.perf_counter() - t0
    engines["kiln"] = k
    kiln_entries = kiln._C.cache_entries(k._kiln_entry)
    greedy(k, prompt, args.tokens, checker("kiln"))  # outside the timing: each step against eager
    assert torch.equal(ids, want_ids), "kiln generated other tokens than eager"

    if not args.no_inductor:
        from torch import _dynamo
        _dynamo.reset()
        t0 = time.perf_counter()
        ind = torch.compile(model, dynamic=None)
        greedy(ind, prompt, args.tokens)
        totals["inductor"] = time.perf_counter() - t0
        engines["inductor"] = ind
        greedy(ind, prompt, args.tokens, checker("inductor"))

    # Steady state: every entry compiled; alternate the engines.
    steady = {name: [] for name in engines}
    for _ in range(args.reps):
        for name, step in engines.items():
            t0 = time.perf_counter()
            greedy(step, prompt, args.tokens)
            steady[name].append(time.perf_counter() - t0)

    print(f"\n{'engine':<13}{'total (compile incl.)':>24}{'steady loop':>14}{'per token':>12}{'max |err|':>12}")
    for name in engines:
        med = statistics.median(steady[name])
        err = errors.get(name)
        print(f"{name:<13}{totals[name] * 1e3:>21.1f} ms{med * 1e3:>11.1f} ms{med / args.tokens * 1e3:>9.3f} ms"
              f"{'' if err is None else f'{err:>12.2e}'}")
    print(f"kiln compiled {kiln_entries} entries for the {args.tokens} lengths")
    verdict = "met" if totals["kiln"] < totals["torch eager"] else "NOT met"
    print(f"target: kiln total < torch eager total: {totals['kiln'] * 1e3:.1f} ms vs "
          f"{totals['torch eager'] * 1e3:.1f} ms ({verdict})")

    # Dynamic entry against a static one at the same length.
    print(f"\n{'T':>5}{'kiln dynamic':>15}{'kiln static':>14}{'ratio':>8}   (target <= 1.10)")
    worst = 0.0
    for T in sorted({args.prompt + 8, args.prompt + args.tokens // 2, args.prompt + args.tokens - 1}):
        idx = torch.randint(0, cfg.vocab_size, (1, T))
        # An entry for exactly this T: a copy of the model (entries are per
        # code object and guard the module's identity, so the copy's never
        # serves the original's calls, nor the other way round).
        static = kiln.compile(copy.deepcopy(model), dynamic=False)
        with torch.no_grad():
            static(idx)
            k(idx)
            dyn_t, st_t, ratios = [], [], []
            for _ in range(args.reps * 3):
                per = []
                for fn in (k, static):
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        fn(idx)
                    per.append((time.perf_counter() - t0) / args.calls)
                dyn_t.append(per[0])
                st_t.append(per[1])
                ratios.append(per[0] / per[1])
        r = statistics.median(ratios)
        worst = max(worst, r)
        print(f"{T:>5}{statistics.median(dyn_t) * 1e3:>12.3f} ms{statistics.median(st_t) * 1e3:>11.3f} ms{r:>8.2f}")
    print(f"target: dynamic/static <= 1.10 at every T: worst {worst:.2f} ({'met' if worst <= 1.10 else 'NOT met'})")


if __name__ == "__main__":
    main()

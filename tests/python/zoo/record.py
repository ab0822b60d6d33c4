"""Re-runs the zoo and rewrites the pins (tests/python/zoo/expected.json).

    python3 -m tests.python.zoo.record                 # every model, dynamo re-measured
    python3 -m tests.python.zoo.record timm.resnet18 transformers.gpt2   # only these (others kept)
    python3 -m tests.python.zoo.record -k swin         # names containing 'swin'
    python3 -m tests.python.zoo.record --keep-dynamo   # kiln only; dynamo's counts kept from the pins
    python3 -m tests.python.zoo.record --backend       # torch.compile(backend="kiln"): expected_backend.json

An improvement in kiln is a pin change: run this, look at `git diff
tests/python/zoo/expected.json`, and commit the pins with the change.
Prints the table (as `python3 -m tests.python.zoo.report`) at the end.
"""
import argparse
import json
import os
import sys
import time

from . import harness, models

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "expected.json")
# The pins of the backend mode (torch.compile(model, backend="kiln")): a
# sibling file, so that kiln.compile's pins and the backend's change apart.
EXPECTED_BACKEND = os.path.join(HERE, "expected_backend.json")

# What the pins keep of a record, in this order (the rest of a record:
# tracebacks, the list of reasons, wall time, is printed, not kept).
KEPT = ("status", "error", "kiln_graphs", "kiln_breaks", "dynamo_graphs", "dynamo_breaks",
        "kiln_reason", "dynamo_reason", "kiln_explain_error", "dynamo_error", "max_abs_diff",
        "build_s", "eager_s", "kiln_first_s", "explain_s", "dynamo_s", "cpu_s", "wall_s")


def load(path=EXPECTED):
    if not os.path.exists(path):
        return {"meta": {}, "models": {}}
    with open(path) as f:
        return json.load(f)


def dump(data, path=EXPECTED):
    """One model a line: a pin change is a one-line diff."""
    lines = ["{", f' "meta": {json.dumps(data["meta"], sort_keys=True)},', ' "models": {']
    names = [n for n in models.SPECS if n in data["models"]]
    names += sorted(n for n in data["models"] if n not in models.SPECS)
    for i, n in enumerate(names):
        comma = "," if i < len(names) - 1 else ""
        lines.append(f"  {json.dumps(n)}: {json.dumps(data['models'][n])}{comma}")
    lines += [" }", "}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


KEPT_BACKEND = ("status", "error", "graphs", "breaks", "nodes", "kiln_nodes", "segments", "eager_ops", "gave_up",
                "plans", "dynamo_reason", "eager_reasons", "max_abs_diff", "build_s", "eager_s", "kiln_first_s",
                "second_s", "cpu_s", "wall_s")


def pin_of(rec, mode="kiln"):
    return {k: rec.get(k) for k in (KEPT_BACKEND if mode == "backend" else KEPT)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="models to re-run (default: all)")
    ap.add_argument("-k", action="append", default=[], help="re-run models whose name contains this")
    ap.add_argument("--keep-dynamo", action="store_true",
                    help="do not re-run torch._dynamo.explain; keep its pinned counts")
    ap.add_argument("--backend", action="store_true",
                    help='torch.compile(model, backend="kiln") instead of kiln.compile; pins in expected_backend.json')
    ap.add_argument("--out", default=None, help="the pins file to rewrite")
    a = ap.parse_args(argv)
    mode = "backend" if a.backend else "kiln"
    a.out = a.out or (EXPECTED_BACKEND if a.backend else EXPECTED)
    unknown = [n for n in a.names if n not in models.SPECS]
    if unknown:
        ap.error(f"unknown models: {unknown}")
    names = [n for n in models.SPECS
             if (not a.names and not a.k) or n in a.names or any(k in n for k in a.k)]
    data = load(a.out)
    worker = harness.Worker()
    t0 = time.perf_counter()
    try:
        data["meta"] = dict(worker.versions(), rtol=models.RTOL, atol=models.ATOL)
        for i, n in enumerate(names):
            rec = worker.run(n, dynamo=not a.keep_dynamo, mode=mode)
            pin = pin_of(rec, mode)
            old = data["models"].get(n)
            if mode == "backend":
                data["models"][n] = pin
                change = "" if old is None or all(old.get(k) == pin.get(k) for k in harness.PINNED_BACKEND) \
                    else "  (pin changed)"
                print(f"[{i + 1}/{len(names)}] {n}: {rec['status']} dynamo {rec.get('graphs')}/{rec.get('breaks')}"
                      f" kiln nodes {rec.get('kiln_nodes')}/{rec.get('nodes')} segments {rec.get('segments')}"
                      f" eager {rec.get('eager_ops')}{' gave up ' + str(rec['gave_up']) if rec.get('gave_up') else ''}"
                      f" {rec.get('wall_s')} s"
                      f"{'  ' + rec['error'] if rec.get('error') else ''}{change}", flush=True)
                if rec["status"] == "harness-error":
                    print(rec.get("traceback", ""), file=sys.stderr)
                dump(data, a.out)
                continue
            if a.keep_dynamo and old:
                for k in ("dynamo_graphs", "dynamo_breaks", "dynamo_reason", "dynamo_error", "dynamo_s"):
                    pin[k] = old.get(k)
            data["models"][n] = pin
            change = "" if old is None or all(old.get(k) == pin.get(k) for k in harness.PINNED + harness.PINNED_DYNAMO) \
                else "  (pin changed)"
            print(f"[{i + 1}/{len(names)}] {n}: {rec['status']} kiln {rec.get('kiln_graphs')}/{rec.get('kiln_breaks')}"
                  f" dynamo {pin.get('dynamo_graphs')}/{pin.get('dynamo_breaks')} {rec.get('wall_s')} s"
                  f"{'  ' + rec['error'] if rec.get('error') else ''}{change}", flush=True)
            if rec["status"] == "harness-error":
                print(rec.get("traceback", ""), file=sys.stderr)
            dump(data, a.out)
    finally:
        worker.close()
    print(f"{len(names)} models in {time.perf_counter() - t0:.0f} s; pins written to {a.out}")
    from . import report
    if mode == "backend":
        report.print_backend(data)
    else:
        report.print_table(data)


if __name__ == "__main__":
    main()

"""The zoo's table from the pins (tests/python/zoo/expected.json):

    python3 -m tests.python.zoo.report              # plain text
    python3 -m tests.python.zoo.report --markdown   # as in tests/python/zoo/README.md
    python3 -m tests.python.zoo.report -k timm      # only names containing 'timm'
    python3 -m tests.python.zoo.report --readme     # rewrite the table in tests/python/zoo/README.md
    python3 -m tests.python.zoo.report --backend    # torch.compile(backend="kiln"), from expected_backend.json

Per model: status (ok = kiln's output equals eager within the tolerance),
kiln's graphs/breaks, torch.compile's (torch._dynamo.explain) graphs/breaks,
the first reason (kiln's break, else kiln's error, else Dynamo's break), and
times; then the totals.
"""
import argparse
import io
import os

from . import models
from .record import load


def _counts(g, b):
    return "-" if g is None else f"{g}/{b}"


def _first_reason(p):
    if p["status"] in ("raises", "crash", "timeout", "wrong"):
        return p.get("error") or ""
    if p.get("kiln_reason"):
        return "kiln: " + p["kiln_reason"]
    if p.get("dynamo_reason"):
        return "dynamo: " + p["dynamo_reason"]
    return ""


def _secs(x):
    return "-" if x is None else f"{x:.2f}"


def rows(data, only=()):
    out = []
    for name, p in data["models"].items():
        if only and not any(k in name for k in only):
            continue
        out.append((name, p["status"], _counts(p.get("kiln_graphs"), p.get("kiln_breaks")),
                    _counts(p.get("dynamo_graphs"), p.get("dynamo_breaks")),
                    _secs(p.get("eager_s")), _secs(p.get("kiln_first_s")), _first_reason(p)))
    return out


def totals(data, only=()):
    ps = [p for n, p in data["models"].items() if not only or any(k in n for k in only)]
    fwd = [p for n, p in data["models"].items() if (not only or any(k in n for k in only))
           and models.SPECS.get(n) is not None and models.SPECS[n].kind == "forward"]
    libs = {}
    for n, p in data["models"].items():
        if only and not any(k in n for k in only):
            continue
        lib = n.split(".")[0]
        d = libs.setdefault(lib, {"models": 0, "ok": 0})
        d["models"] += 1
        d["ok"] += p["status"] == "ok"
    return {
        "entries": len(ps),
        "ok": sum(p["status"] == "ok" for p in ps),
        "wrong": sum(p["status"] == "wrong" for p in ps),
        "raises": sum(p["status"] == "raises" for p in ps),
        "crash": sum(p["status"] in ("crash", "timeout") for p in ps),
        "forward": len(fwd),
        "kiln_one_graph": sum(p["status"] == "ok" and p.get("kiln_graphs") == 1 and p.get("kiln_breaks") == 0
                              for p in fwd),
        "dynamo_one_graph": sum(p.get("dynamo_graphs") == 1 and p.get("dynamo_breaks") == 0 for p in fwd),
        "kiln_more_breaks": sum(p.get("kiln_breaks") is not None and p.get("dynamo_breaks") is not None
                                and p["kiln_breaks"] > p["dynamo_breaks"] for p in fwd),
        "libraries": libs,
    }


def totals_text(t):
    libs = ", ".join(f"{lib} {d['ok']}/{d['models']}" for lib, d in t["libraries"].items())
    return (f"{t['entries']} entries ({t['forward']} forward calls, {t['entries'] - t['forward']} generate() runs): "
            f"{t['ok']} equal eager ({libs}), {t['wrong']} differ, {t['raises']} raise, "
            f"{t['crash']} crash or time out.\n"
            f"Forward calls in one graph with no break: kiln {t['kiln_one_graph']} (and equal eager), "
            f"torch.compile {t['dynamo_one_graph']}; kiln breaks more often than torch.compile on "
            f"{t['kiln_more_breaks']}.")


HEAD = ("model", "status", "kiln g/b", "dynamo g/b", "eager s", "kiln 1st s", "first reason")


def print_table(data, only=(), markdown=False, file=None):
    rs = rows(data, only)
    if markdown:
        print("| " + " | ".join(HEAD) + " |", file=file)
        print("|" + "|".join(" --- " for _ in HEAD) + "|", file=file)
        for r in rs:
            cells = [c.replace("|", "\\|") for c in r]
            cells[-1] = f"`{cells[-1]}`" if cells[-1] else ""
            print("| " + " | ".join(cells) + " |", file=file)
        print(file=file)
    else:
        _print_columns(HEAD, rs, file)
    print(totals_text(totals(data, only)), file=file)


# ------------------------------------------ torch.compile(backend="kiln")

BACKEND_HEAD = ("model", "status", "dynamo g/b", "kiln nodes", "segments", "1st s", "nodes run as torch eager")


def backend_rows(data, only=()):
    out = []
    for name, p in data["models"].items():
        if only and not any(k in name for k in only):
            continue
        nodes = "-" if p.get("nodes") is None else f"{p['kiln_nodes']}/{p['nodes']}"
        eager = ", ".join(f"{t} x{c}" for t, c in (p.get("eager_ops") or {}).items())
        if p.get("gave_up"):
            eager += f"; on CPython after 8 recompiles: {', '.join(p['gave_up'])}"
        out.append((name, p["status"], _counts(p.get("graphs"), p.get("breaks")), nodes,
                    "-" if p.get("segments") is None else str(p["segments"]), _secs(p.get("kiln_first_s")),
                    p.get("error") or eager))
    return out


def backend_totals(data, only=()):
    ps = {n: p for n, p in data["models"].items() if not only or any(k in n for k in only)}
    libs = {}
    for n, p in ps.items():
        d = libs.setdefault(n.split(".")[0], {"models": 0, "ok": 0})
        d["models"] += 1
        d["ok"] += p["status"] == "ok"
    ops = {}
    for n, p in ps.items():
        for t in (p.get("eager_ops") or {}):
            ops.setdefault(t, []).append(n)
    return {
        "entries": len(ps),
        "ok": sum(p["status"] == "ok" for p in ps.values()),
        "wrong": sum(p["status"] == "wrong" for p in ps.values()),
        "raises": sum(p["status"] == "raises" for p in ps.values()),
        "crash": sum(p["status"] in ("crash", "timeout") for p in ps.values()),
        "nodes": sum(p.get("nodes") or 0 for p in ps.values()),
        "kiln_nodes": sum(p.get("kiln_nodes") or 0 for p in ps.values()),
        "all_kiln": sum(p["status"] == "ok" and p.get("nodes") is not None and p["kiln_nodes"] == p["nodes"]
                        for p in ps.values()),
        "with_eager": sum(bool(p.get("eager_ops")) for p in ps.values()),
        "gave_up": sum(bool(p.get("gave_up")) for p in ps.values()),
        "eager_ops": {t: len(ns) for t, ns in sorted(ops.items(), key=lambda kv: -len(kv[1]))},
        "libraries": libs,
    }


def backend_totals_text(t):
    libs = ", ".join(f"{lib} {d['ok']}/{d['models']}" for lib, d in t["libraries"].items())
    share = 100.0 * t["kiln_nodes"] / t["nodes"] if t["nodes"] else 0.0
    ops = ", ".join(f"{op} ({n})" for op, n in t["eager_ops"].items()) or "none"
    return (f"{t['entries']} entries through torch.compile(backend=\"kiln\"): {t['ok']} equal eager ({libs}), "
            f"{t['wrong']} differ, {t['raises']} raise, {t['crash']} crash or time out.\n"
            f"Nodes of Dynamo's graphs run in kiln segments: {t['kiln_nodes']}/{t['nodes']} ({share:.1f}%); "
            f"entries with every node in kiln: {t['all_kiln']}; with nodes run as torch eager: {t['with_eager']}.\n"
            f"Ops run as torch eager (entries): {ops}.\n"
            f"Entries with a kiln segment that recompiled up to cache_size_limit and then ran on CPython: "
            f"{t['gave_up']}.")


def _print_columns(head, rs, file):
    """rows as aligned columns, the last (the reason) cut at 110 characters."""
    widths = [max(len(h), *(len(r[i]) for r in rs)) if rs else len(h) for i, h in enumerate(head[:-1])]
    fmt = "  ".join(f"{{:{w}}}" for w in widths) + "  {}"
    print(fmt.format(*head), file=file)
    for r in rs:
        print(fmt.format(*r[:-1], r[-1][:110]), file=file)
    print(file=file)


def print_backend(data, only=(), file=None):
    _print_columns(BACKEND_HEAD, backend_rows(data, only), file)
    print(backend_totals_text(backend_totals(data, only)), file=file)


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")
BEGIN, END = "<!-- zoo table: begin -->", "<!-- zoo table: end -->"


def write_readme(data):
    """Replaces what stands between the markers in README.md with the table."""
    out = io.StringIO()
    _print_meta(data, out)
    print_table(data, markdown=True, file=out)
    with open(README) as f:
        text = f.read()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(README, "w") as f:
        f.write(f"{head}{BEGIN}\n{out.getvalue()}{END}{tail}")


def _print_meta(data, file=None):
    m = data.get("meta") or {}
    if m:
        print(f"torch {m.get('torch')}, torchvision {m.get('torchvision')}, timm {m.get('timm')}, "
              f"transformers {m.get('transformers')}; float tolerance rtol={m.get('rtol')} atol={m.get('atol')}\n",
              file=file)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", action="append", default=[], help="only names containing this")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--readme", action="store_true", help="rewrite the table in README.md")
    ap.add_argument("--backend", action="store_true",
                    help='torch.compile(backend="kiln"): the pins of expected_backend.json')
    a = ap.parse_args(argv)
    if a.backend:
        from .record import EXPECTED_BACKEND
        data = load(EXPECTED_BACKEND)
        _print_meta(data)
        print_backend(data, a.k)
        return
    data = load()
    if a.readme:
        write_readme(data)
        print(f"table written to {README}")
        return
    _print_meta(data)
    print_table(data, a.k, a.markdown)


if __name__ == "__main__":
    main()

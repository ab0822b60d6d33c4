"""Check that two copies of kiln's frontend translate a corpus identically.

The frontend (kiln/_frontend.py) turns CPython bytecode into KBC text. A
change meant to make it faster must not change a byte of what it gives, so
this translates every code object reachable from a broad corpus of real
code (transformers, timm, torchvision, torch.nn and stdlib modules) with
two copies of the package, each in its own process, and compares every
field of every Translation and every failure message.

    # each side: a directory whose kiln/ is the package to test
    python3 tools/frontend_equivalence.py compare OLD_PATH NEW_PATH [--python PY]
    # one side (what `compare` runs in each process)
    python3 tools/frontend_equivalence.py dump OUT.json
    # the frontend's time over the corpus (translation cache cleared each run)
    python3 tools/frontend_equivalence.py time [--runs N]

Modules that do not import on the running Python (torch is absent from
the 3.10/3.12/3.13 interpreters of build/python31X) are skipped and listed.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import pkgutil
import subprocess
import sys
import time
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)

# Packages walked whole (every submodule that imports) and single modules.
_PACKAGES = [
    *(f"transformers.models.{m}" for m in ("gpt2", "bert", "llama", "t5", "bart", "opt", "phi", "vit")),
    "timm.models", "timm.layers", "torchvision.models", "torch.nn.modules",
    # stdlib packages, for breadth (and for the interpreters without torch)
    "email", "logging", "unittest", "xml", "http", "urllib", "importlib", "json", "concurrent", "asyncio",
]
_MODULES = [
    "transformers.modeling_utils", "transformers.configuration_utils", "transformers.cache_utils",
    "transformers.masking_utils", "transformers.utils.generic", "torch.nn.functional",
    "copy", "collections", "functools", "dataclasses", "enum", "typing",
    # more stdlib, for the interpreters without torch
    "inspect", "ast", "json.decoder", "json.encoder", "argparse", "textwrap", "difflib", "pathlib",
    "string", "operator", "heapq", "bisect", "statistics", "fractions", "contextlib", "abc",
    "weakref", "tokenize", "pprint", "shlex", "configparser", "csv", "calendar", "gettext",
    "_pydecimal", "pydoc", "tarfile", "zipfile", "subprocess", "threading", "datetime", "_pydatetime",
    "random", "glob", "shutil", "tempfile", "traceback", "linecache", "locale", "socket", "selectors",
]


def _import_corpus():
    """The corpus modules that import here, and the names of those that do not."""
    if any(p.startswith(("torchvision", "timm", "transformers")) for p in _PACKAGES + _MODULES):
        try:
            sys.path.insert(0, _REPO)
            from tests.python.zoo import harness  # torchvision only through the zoo's shim
            harness.setup_worker()
        except Exception:
            pass
    mods, missing = [], []
    for name in _PACKAGES:
        try:
            pkg = importlib.import_module(name)
        except Exception:
            missing.append(name)
            continue
        mods.append(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, name + ".", onerror=missing.append):
            if info.name.endswith(".__main__"):
                continue  # a program (unittest's runs the tests), not a module
            try:
                mods.append(importlib.import_module(info.name))
            except (Exception, SystemExit):
                missing.append(info.name)
    for name in _MODULES:
        try:
            mods.append(importlib.import_module(name))
        except Exception:
            missing.append(name)
    return mods, missing


def corpus():
    """[(key, function or code)]: every function defined in a corpus module
    (at its top level or in its classes), then every code object nested in
    one, each once, in a fixed order."""
    mods, missing = _import_corpus()
    seen_mods, seen_codes, items = set(), set(), []

    def add_code(key, obj, code):
        if id(code) in seen_codes:
            return
        seen_codes.add(id(code))
        items.append((key, obj))
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                add_code(f"{key}/{const.co_name}@{const.co_firstlineno}", const, const)

    def add(modname, obj, depth=0):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, property):
            for acc in (obj.fget, obj.fset, obj.fdel):
                if acc is not None:
                    add(modname, acc, depth)
            return
        if isinstance(obj, types.FunctionType) and getattr(obj, "__module__", None) == modname:
            add_code(f"{modname}:{obj.__qualname__}@{obj.__code__.co_firstlineno}", obj, obj.__code__)
        elif isinstance(obj, type) and obj.__module__ == modname and depth < 3:
            for value in list(vars(obj).values()):
                add(modname, value, depth + 1)

    for mod in sorted(mods, key=lambda m: m.__name__):
        if mod.__name__ in seen_mods:
            continue
        seen_mods.add(mod.__name__)
        for value in list(vars(mod).values()):
            add(mod.__name__, value)
    return items, missing


def _record(kiln_frontend, obj, own_defaults):
    try:
        t = kiln_frontend.translate(obj, own_defaults=own_defaults)
    except kiln_frontend.Untranslatable as exc:
        return {"untranslatable": str(exc), "reason": exc.reason, "lineno": exc.lineno}
    except Exception as exc:  # a crash is a result too: both sides must crash alike
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "name": t.name, "text": t.text, "filename": t.filename, "firstlineno": t.firstlineno,
        "lines": list(t.lines), "functions": list(t.functions), "globals_used": list(t.globals_used),
        "globals_stored": list(t.globals_stored), "builtins_required": list(t.builtins_required),
        "freevars": list(t.freevars), "cellvars": list(t.cellvars),
        "kbc_starts": repr(sorted(t.kbc_starts.items())),
        "nested_codes": repr(sorted((k, v.co_name, v.co_firstlineno) for k, v in (t.nested_codes or {}).items())),
    }


def dump(out_path):
    import kiln._frontend as fe
    items, missing = corpus()
    result = {}
    for key, obj in items:
        entry = {"plain": _record(fe, obj, False)}
        if isinstance(obj, types.FunctionType):
            entry["own_defaults"] = _record(fe, obj, True)
        result[key] = entry
    with open(out_path, "w") as f:
        json.dump({"kiln": fe.__file__, "python": sys.version.split()[0], "missing": missing,
                   "results": result}, f)


def time_corpus(runs):
    import kiln._frontend as fe
    items, _ = corpus()
    codes = [obj for _, obj in items]
    best = None
    for _ in range(runs):
        fe._cache.clear()
        # CPU time: the machine is shared, and wall time counts the waits.
        t0 = time.process_time()
        for obj in codes:
            try:
                fe.translate(obj, own_defaults=True)
            except fe.Untranslatable:
                pass
        dt = time.process_time() - t0
        best = dt if best is None else min(best, dt)
    print(f"{fe.__file__}: {len(codes)} functions, best of {runs}: {best * 1e3:.1f} ms CPU")


def compare(old, new, python):
    dumps = []
    for side, path in (("old", old), ("new", new)):
        out = f"/tmp/frontend_equivalence_{os.getpid()}_{side}.json"
        # A fixed hash seed: a frozenset of strings iterates (and is spelled)
        # in an order that depends on the strings' hashes.
        env = dict(os.environ, PYTHONPATH=path, PYTHONHASHSEED="0", SKBUILD_EDITABLE_SKIP=os.environ.get(
            "SKBUILD_EDITABLE_SKIP", "/work/main/build"))
        subprocess.run([python, os.path.abspath(__file__), "dump", out], env=env, check=True)
        with open(out) as f:
            dumps.append(json.load(f))
        os.unlink(out)
    a, b = dumps
    print(f"old: {a['kiln']}\nnew: {b['kiln']}\npython {a['python']}")
    if a["missing"]:
        print(f"modules not importable here (skipped): {len(a['missing'])}")
    ra, rb = a["results"], b["results"]
    diffs = [k for k in ra.keys() | rb.keys() if ra.get(k) != rb.get(k)]
    n_ok = sum(1 for v in ra.values() if "text" in v["plain"])
    n_fail = len(ra) - n_ok
    print(f"compared {len(ra)} code objects ({n_ok} translated, {n_fail} refused or failing); "
          f"{len(diffs)} differences")
    for k in sorted(diffs)[:20]:
        print("DIFF", k)
        for side, r in (("old", ra.get(k)), ("new", rb.get(k))):
            print(f"  {side}: {json.dumps(r)[:600]}")
    return 1 if diffs or len(ra) != len(rb) else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    t = sub.add_parser("time")
    t.add_argument("--runs", type=int, default=5)
    c = sub.add_parser("compare")
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args.out)
    elif args.cmd == "time":
        time_corpus(args.runs)
    else:
        sys.exit(compare(args.old, args.new, args.python))


if __name__ == "__main__":
    main()

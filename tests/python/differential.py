"""The differential harness: CPython is the oracle.

`check(fn, *args)` runs `fn` on CPython and through `kiln.compile` (each
backend, twice: the traced call and the cached call), every run on fresh
copies of the same inputs, and compares

- the return value (tensors: dtype, shape and values; containers
  structurally, sets in their iteration order), and which argument it *is*
  when it is one of them,
- the exception: its type and its message,
- the state of every argument after the call (a mutation is part of what a
  program means), and
- the module globals named in `globals_`, each reset before every run.

A mismatch raises AssertionError naming the run and what differs.
"""
import copy

import numpy as np

import kiln

BACKENDS = ("eager", "llvm")


def clone(x, memo=None):
    """A deep copy that keeps aliasing inside `x` (as copy.deepcopy does) and
    copies kiln tensors by value."""
    if memo is None:
        memo = {}
    if id(x) in memo:
        return memo[id(x)]
    if isinstance(x, kiln.Tensor):
        out = kiln.from_numpy(np.array(x.numpy(), copy=True))
    elif isinstance(x, list):
        out = []
        memo[id(x)] = out
        out.extend(clone(i, memo) for i in x)
        return out
    elif isinstance(x, dict):
        out = {}
        memo[id(x)] = out
        for k, v in x.items():
            out[k] = clone(v, memo)
        return out
    elif isinstance(x, set):
        out = set(x)
    elif isinstance(x, tuple):
        out = tuple(clone(i, memo) for i in x)
    else:
        out = copy.deepcopy(x, memo)
    memo[id(x)] = out
    return out


def _same(a, b, path, tol):
    if isinstance(a, kiln.Tensor) or isinstance(b, kiln.Tensor):
        if not (isinstance(a, kiln.Tensor) and isinstance(b, kiln.Tensor)):
            return f"{path}: {type(a).__name__} vs {type(b).__name__}"
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
            return f"{path}: tensor {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        if not np.allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol, equal_nan=True):
            return f"{path}: tensor values differ:\n{a.numpy()}\nvs\n{b.numpy()}"
        return None
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} {a!r} vs {type(b).__name__} {b!r}"
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _same(x, y, f"{path}[{i}]", tol)
            if d:
                return d
        return None
    if isinstance(a, (set, frozenset)):
        # By order too: kiln's sets iterate in CPython's order (runtime/value.h SetObj).
        if len(a) != len(b) or a != b:
            return f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _same(x, y, f"{path} (iterated)[{i}]", tol)
            if d:
                return f"{d}: {a!r} vs {b!r} iterate in another order"
        return None
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            return f"{path}: keys {list(a.keys())} vs {list(b.keys())}"
        for k in a:
            d = _same(a[k], b[k], f"{path}[{k!r}]", tol)
            if d:
                return d
        return None
    if isinstance(a, float) and isinstance(b, float):
        if (a != a and b != b) or a == b:
            return None
        return None if abs(a - b) <= tol * max(1.0, abs(a)) else f"{path}: {a!r} vs {b!r}"
    if type(a).__eq__ is object.__eq__ and not callable(a):
        # Plain objects: the two runs work on copies, so compare their state
        # (identity is compared where it matters: results and aliasing).
        if hasattr(a, "__dict__"):
            return _same(vars(a), vars(b), f"{path}.__dict__", tol)
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def _run(fn, args, kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as e:  # the program's own exception is part of its meaning
        return ("raise", e)


def _alias(result, args):
    """Which argument (by position) the result is, if it is one. (Not for
    numbers and strings: CPython's identity of those is an implementation
    detail, e.g. round(1234, 2) is its argument, round(5, 2) a cached 5.)"""
    if isinstance(result, (int, float, str, bytes)) or result is None:
        return None
    for i, a in enumerate(args):
        if result is a:
            return i
    return None


def _compare(want, got, want_args, got_args, label, tol):
    if want[0] != got[0]:
        what = lambda r: f"returned {r[1]!r}" if r[0] == "ok" else f"raised {type(r[1]).__name__}: {r[1]}"
        raise AssertionError(f"{label}: CPython {what(want)}, kiln {what(got)}")
    if want[0] == "raise":
        if type(want[1]) is not type(got[1]) or str(want[1]) != str(got[1]):
            raise AssertionError(f"{label}: CPython raised {type(want[1]).__name__}: {want[1]}, "
                                 f"kiln raised {type(got[1]).__name__}: {got[1]}")
    else:
        d = _same(want[1], got[1], "result", tol)
        if d:
            raise AssertionError(f"{label}: {d}")
        if _alias(want[1], want_args) != _alias(got[1], got_args):
            raise AssertionError(f"{label}: CPython's result is argument {_alias(want[1], want_args)}, "
                                 f"kiln's is argument {_alias(got[1], got_args)}")
    d = _same(list(want_args), list(got_args), "arguments after the call", tol)
    if d:
        raise AssertionError(f"{label}: {d}")


def check(fn, *args, kwargs=None, globals_=None, backends=BACKENDS, calls=2, tol=1e-5, compile_kwargs=None):
    """Runs fn on CPython and compiled (each backend, `calls` times) and
    compares everything a program's meaning includes. Returns CPython's
    outcome ("ok", value) or ("raise", exception) for further checks."""
    kwargs = kwargs or {}
    globals_ = globals_ or {}
    g = fn.__globals__

    def fresh():
        for name, value in globals_.items():
            g[name] = clone(value)
        return clone(list(args)), clone(kwargs)

    want_args, want_kwargs = fresh()
    want = _run(fn, want_args, want_kwargs)
    want_globals = {name: g[name] for name in globals_}
    for backend in backends:
        compiled = kiln.compile(fn, backend=backend, **(compile_kwargs or {}))
        for n in range(calls):
            got_args, got_kwargs = fresh()
            got = _run(compiled, got_args, got_kwargs)
            label = f"{fn.__name__} [{backend}, call {n + 1}]"
            _compare(want, got, want_args, got_args, label, tol)
            for name in globals_:
                d = _same(want_globals[name], g[name], f"global {name}", tol)
                if d:
                    raise AssertionError(f"{label}: {d}")
        kiln.reset()
    for name, value in globals_.items():
        g[name] = clone(value)
    return want

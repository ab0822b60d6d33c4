"""The differential harness: CPython is the oracle.

`check(fn, *args)` runs `fn` on CPython and through `kiln.compile` (each
backend, twice: the traced call and the cached call), every run on fresh
copies of the same inputs, and compares

- the return value (tensors: dtype, shape and values; containers
  structurally, sets in their iteration order), and which argument it *is*
  when it is one of them,
- the exception: its type and its message,
- the state of every argument after the call, positional and keyword (a
  mutation is part of what a program means), and
- the module globals named in `globals_`, each reset before every run.

Exact mode (`exact=True`, the default: CPython itself runs everything
outside graphs, so nothing but tensor values may differ) also compares

- Python floats bit for bit (NaN equals NaN, -0.0 is not 0.0): they are
  CPython's own results there; the tolerance `tol` stays for tensor values,
  which kiln's kernels compute;
- what each run prints (stdout captured per run, compared as text);
- objects without `__dict__` (classes with `__slots__`) by their slots.

exact=False keeps a tolerance for Python floats (a test of kiln's own float
arithmetic, which only KBC programs run).

A mismatch raises AssertionError naming the run and what differs.
"""
import contextlib
import copy
import io
import math

import numpy as np

import kiln
from kiln._bytecode_tables import UnsupportedVersion

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


class _Unset:
    """A slot never assigned (or deleted): reading it raises AttributeError."""

    def __repr__(self):
        return "<unset>"


_UNSET = _Unset()


def _slot_names(cls):
    """Every slot an instance of `cls` has, base classes' first."""
    names = []
    for klass in reversed(cls.__mro__):
        slots = klass.__dict__.get("__slots__", ())
        for name in ([slots] if isinstance(slots, str) else slots):
            if name not in ("__dict__", "__weakref__") and name not in names:
                names.append(name)
    return names


def _same_float(a, b):
    """Bitwise: CPython's result is the only right one on the frames path."""
    if a != a or b != b:
        return a != a and b != b
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _same(a, b, path, tol, exact=False):
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
            d = _same(x, y, f"{path}[{i}]", tol, exact)
            if d:
                return d
        return None
    if isinstance(a, (set, frozenset)):
        # By order too: kiln's sets iterate in CPython's order (runtime/value/value.h SetObj).
        if len(a) != len(b) or a != b:
            return f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _same(x, y, f"{path} (iterated)[{i}]", tol, exact)
            if d:
                return f"{d}: {a!r} vs {b!r} iterate in another order"
        return None
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            return f"{path}: keys {list(a.keys())} vs {list(b.keys())}"
        for k in a:
            d = _same(a[k], b[k], f"{path}[{k!r}]", tol, exact)
            if d:
                return d
        return None
    if isinstance(a, float) and isinstance(b, float):
        if exact:
            return None if _same_float(a, b) else f"{path}: {a!r} vs {b!r} (floats compared exactly)"
        if (a != a and b != b) or a == b:
            return None
        return None if abs(a - b) <= tol * max(1.0, abs(a)) else f"{path}: {a!r} vs {b!r}"
    if exact and isinstance(a, complex):
        if _same_float(a.real, b.real) and _same_float(a.imag, b.imag):
            return None
        return f"{path}: {a!r} vs {b!r} (compared exactly)"
    if type(a).__eq__ is object.__eq__ and not callable(a):
        # Plain objects: the two runs work on copies, so compare their state
        # (identity is compared where it matters: results and aliasing).
        if exact:
            names = _slot_names(type(a))
            if names:
                got = lambda o: {n: getattr(o, n, _UNSET) for n in names}  # noqa: E731
                d = _same(got(a), got(b), f"{path} (slots)", tol, exact)
                if d:
                    return d
        if hasattr(a, "__dict__"):
            return _same(vars(a), vars(b), f"{path}.__dict__", tol, exact)
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def _run(fn, args, kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except UnsupportedVersion:
        raise  # not the program\'s: kiln does not read this CPython yet (conftest.py)
    except Exception as e:  # the program's own exception is part of its meaning
        return ("raise", e)


def _run_printing(fn, args, kwargs, capture):
    """(_run's outcome, what the call printed: None unless `capture`)."""
    if not capture:
        return _run(fn, args, kwargs), None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        r = _run(fn, args, kwargs)
    return r, out.getvalue()


def _alias(result, args, kwargs=None):
    """Which argument (by position, or by keyword) the result is, if it is
    one. (Not for numbers and strings: CPython's identity of those is an
    implementation detail, e.g. round(1234, 2) is its argument, round(5, 2) a
    cached 5.)"""
    if isinstance(result, (int, float, str, bytes)) or result is None:
        return None
    for i, a in enumerate(args):
        if result is a:
            return i
    for k, a in (kwargs or {}).items():
        if result is a:
            return k
    return None


def _compare(want, got, want_args, got_args, label, tol, want_kwargs=None, got_kwargs=None, exact=False):
    if want[0] != got[0]:
        what = lambda r: f"returned {r[1]!r}" if r[0] == "ok" else f"raised {type(r[1]).__name__}: {r[1]}"
        raise AssertionError(f"{label}: CPython {what(want)}, kiln {what(got)}")
    if want[0] == "raise":
        if type(want[1]) is not type(got[1]) or str(want[1]) != str(got[1]):
            raise AssertionError(f"{label}: CPython raised {type(want[1]).__name__}: {want[1]}, "
                                 f"kiln raised {type(got[1]).__name__}: {got[1]}")
    else:
        d = _same(want[1], got[1], "result", tol, exact)
        if d:
            raise AssertionError(f"{label}: {d}")
        wa, ga = _alias(want[1], want_args, want_kwargs), _alias(got[1], got_args, got_kwargs)
        if wa != ga:
            raise AssertionError(f"{label}: CPython's result is argument {wa}, kiln's is argument {ga}")
    d = _same(list(want_args), list(got_args), "arguments after the call", tol, exact)
    if d:
        raise AssertionError(f"{label}: {d}")
    d = _same(want_kwargs or {}, got_kwargs or {}, "keyword arguments after the call", tol, exact)
    if d:
        raise AssertionError(f"{label}: {d}")


def check(fn, *args, kwargs=None, globals_=None, backends=BACKENDS, calls=2, tol=1e-5, compile_kwargs=None,
          exact=None):
    """Runs fn on CPython and compiled (each backend, `calls` times) and
    compares everything a program's meaning includes. `exact` (None: on) is
    the exact mode of the module docstring. Returns CPython's outcome ("ok", value) or ("raise",
    exception) for further checks."""
    kwargs = kwargs or {}
    globals_ = globals_ or {}
    if exact is None:
        exact = True
    g = fn.__globals__

    def fresh():
        for name, value in globals_.items():
            g[name] = clone(value)
        # one copy of both: a list passed positionally and by keyword stays
        # one list
        a, k = clone((list(args), kwargs))
        return a, k

    want_args, want_kwargs = fresh()
    want, want_out = _run_printing(fn, want_args, want_kwargs, exact)
    want_globals = {name: g[name] for name in globals_}
    for backend in backends:
        compiled = kiln.compile(fn, backend=backend, **(compile_kwargs or {}))
        for n in range(calls):
            got_args, got_kwargs = fresh()
            got, got_out = _run_printing(compiled, got_args, got_kwargs, exact)
            label = f"{fn.__name__} [{backend}, call {n + 1}]"
            _compare(want, got, want_args, got_args, label, tol, want_kwargs, got_kwargs, exact)
            if want_out != got_out:
                raise AssertionError(f"{label}: printed output differs:\nCPython printed {want_out!r}\n"
                                     f"kiln printed    {got_out!r}")
            for name in globals_:
                d = _same(want_globals[name], g[name], f"global {name}", tol, exact)
                if d:
                    raise AssertionError(f"{label}: {d}")
        kiln.reset()
    for name, value in globals_.items():
        g[name] = clone(value)
    return want

"""Python functions as the KBC functions the tracer reads, and kiln.disable.

A Python function is translated to KBC once per code object
(kiln/_frontend.py) and made a KBC function whose globals mirror the
function's module dict live (python/src/functions.cpp), once per function
object, since defaults and closures are per function. `_C` asks for it
through the converter registered here whenever a Python function reaches
kiln code; kiln.nn, kiln.fx, kiln.compile and the frame hook
(kiln/_frames.py) ask `_as_kbc` directly.

This module sits below everything that compiles or traces (kiln.nn,
kiln.fx, kiln._compile, kiln._frames), so they all reach it without
reaching each other (docs/architecture.md, "python/kiln import order").
"""
import logging
import types
import weakref

from . import _C, _frontend

log = logging.getLogger("kiln.frontend")

# Python function -> (its __code__ then, its KBC function or None: keep it a
# Python call). Per function object, since defaults and closures are per
# function; made again when the program replaces fn.__code__.
_kbc = weakref.WeakKeyDictionary()
_disabled = weakref.WeakSet()
_disabled_codes = weakref.WeakSet()  # the frame hook's view: frames of these codes, and their callees, run on CPython
# code -> the functions of it kiln was asked about, for known_function.
_by_code = weakref.WeakKeyDictionary()


def note(fn):
    """Remember fn as the function of its code (known_function)."""
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        _by_code.setdefault(code, weakref.WeakSet()).add(fn)


def known_function(made):
    """On CPython 3.10 a frame has no function: the frame hook makes one of
    its code, globals and closure cells (python/src/frame_access.h). The
    function kiln already knows with that code, globals and cells is the
    same function but for its defaults, which a frame whose arguments are
    bound never reads: its KBC form and compiled entries are the frame's
    (kiln.compile(f)'s are f's). `made` itself when there is none."""
    cells = made.__closure__ or ()
    for fn in _by_code.get(made.__code__, ()):
        if fn.__globals__ is made.__globals__ and len(fn.__closure__ or ()) == len(cells) \
                and all(a is b for a, b in zip(fn.__closure__ or (), cells)):
            return fn
    return made


def _as_kbc(fn):
    """The KBC function for a Python function, or None when it stays Python."""
    code = getattr(fn, "__code__", None)
    try:
        seen, kbc = _kbc[fn]
        if seen is code:
            return kbc
    except KeyError:
        pass
    except TypeError:
        return None
    if fn in _disabled:
        _kbc[fn] = (code, None)
        return None
    note(fn)
    try:
        tr = _frontend.translate(fn, own_defaults=True)
    except _frontend.Untranslatable as e:
        log.info("%s runs on CPython: %s", fn.__qualname__, e)
        _kbc[fn] = (code, None)
        return None
    kbc = _C.make_kbc_function(tr.text, tr.name, tr.filename, fn.__globals__, list(tr.globals_used),
                               fn.__defaults__, fn.__kwdefaults__, None, fn, tr.nested_codes or {})
    _kbc[fn] = (code, kbc)
    # The cells after caching: a closure that holds fn itself (transformers'
    # forward_with_checkpointing compares type(self).forward with itself)
    # finds this KBC function instead of translating fn again, forever.
    if fn.__closure__:
        try:
            _C.set_kbc_closure(kbc, fn.__closure__)
        except BaseException:
            _kbc.pop(fn, None)
            raise
    # After caching: a function that calls itself finds its own KBC form.
    _C.sync_python_state()
    return kbc


_C._set_function_converter(_as_kbc)


def disable(fn):
    """Keep fn out of tracing: compiled code calls it as plain Python (a
    graph break), and kiln.compile(fn) runs it unchanged. On the frames
    path what fn calls runs on CPython too (torch._dynamo.disable's rule)."""
    _disabled.add(fn)
    _kbc.pop(fn, None)
    code = getattr(fn, "__code__", None)
    if code is not None:
        _disabled_codes.add(code)
    return fn

"""kiln.compile, kiln.explain and friends for Python callers.

kiln.compile(fn) returns fn called as itself with kiln's frame hook on
(python/src/eval_frame_hook.cpp, kiln/_frames.py): CPython runs every
instruction kiln does not put in a graph, on the program's own objects;
each frame the call starts (fn's own, those it calls, a module's forward)
is traced on first sight, its graphs compiled, and later calls check the
frame's guards and run the compiled code. The KBC VM runs KBC programs
(the C++ API, the `kiln` tool), never a Python program.

A frame kiln cannot trace (a generator, code the frontend refuses, a
failure inside kiln) runs on CPython, and says so: in the logs
(`KILN_LOGS=frames`) and in kiln.explain; kiln.config.strict raises
instead.
"""
import functools
import inspect
import logging

from . import _C, _bytecode_tables as T, _frontend_opcodes, _threads, fx, nn
from . import _functions
from ._functions import _as_kbc  # noqa: F401 - kiln._compile._as_kbc: the tests read KBC views through it

log = logging.getLogger("kiln.frontend")


class Config:
    """Process-wide settings, read when a function is compiled.

    cache_size_limit: compiled entries per code object (per module instance
        for a method) before its frames run on CPython unchanged.
    enable_compiler_collectives: under mpirun, the ranks agree on input sizes
        before compiling a frame, so every rank builds the same graph and
        guards (a size that differs on any rank becomes dynamic on all).
    enable_guard_collectives: the ranks agree at each cache lookup whether any
        missed; then all recompile together.
    collective_timeout_s: a rank that does not arrive in time makes the
        others raise instead of hanging.
    The collective flags default to KILN_COMPILER_COLLECTIVES /
    KILN_GUARD_COLLECTIVES / KILN_COLLECTIVE_TIMEOUT_S."""

    def __init__(self):
        import os
        self.cache_size_limit = 8
        # strict: a failure inside kiln (frontend, tracer, backend) raises
        # instead of leaving the frame to CPython (the tests set it).
        self.strict = os.environ.get("KILN_STRICT") == "1"
        self.enable_compiler_collectives = os.environ.get("KILN_COMPILER_COLLECTIVES") == "1"
        self.enable_guard_collectives = os.environ.get("KILN_GUARD_COLLECTIVES") == "1"
        self.collective_timeout_s = float(os.environ.get("KILN_COLLECTIVE_TIMEOUT_S", "60"))

    def _apply(self):
        _C._set_collectives(bool(self.enable_compiler_collectives), bool(self.enable_guard_collectives),
                            float(self.collective_timeout_s))


config = Config()

def _is_torch(obj):
    """obj is torch's (its module, one of its functions, classes or objects):
    read without running user code."""
    if inspect.ismodule(obj):
        name = obj.__name__
    else:
        name = getattr(type(obj), "__module__", "") or ""
        if isinstance(obj, type) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
            name = obj.__dict__.get("__module__", "") if isinstance(obj, type) else (obj.__module__ or "")
    return name == "torch" or name.startswith("torch.")


def _uses_torch(fn):
    """Whether fn reads torch (a global or closure variable holding torch or
    one of its objects, in fn or a function nested in it): its tensor
    results then leave as torch tensors even when no torch tensor came in
    (torch.arange(5) gives a torch tensor, as in eager). Decided once, at
    kiln.compile; never imports torch."""
    import sys
    if sys.modules.get("torch") is None:
        return False
    names, codes = set(), [fn.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if inspect.iscode(c))
    g = fn.__globals__
    if any(_is_torch(g[n]) for n in names if n in g):
        return True
    return any(_is_torch(c.cell_contents) for c in (fn.__closure__ or ()) if _cell_full(c))


def _cell_full(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


# Python backends by identity: registered once each, under a name of their own.
_python_backends = {}


def _backend_name(backend):
    """A backend name for _C: a name as given, or a Python callable
    (gm: kiln.fx.GraphModule, example_inputs) -> callable, registered once."""
    if isinstance(backend, str):
        return backend
    if not callable(backend):
        raise TypeError(f"kiln.compile: backend must be a name or a callable, not {type(backend).__name__}")
    entry = _python_backends.get(id(backend))
    if entry is None or entry[0] is not backend:
        name = f"python:{getattr(backend, '__qualname__', type(backend).__name__)}@{id(backend):x}"
        _C.register_python_backend(name, backend)
        entry = _python_backends[id(backend)] = (backend, name)  # kept alive: the registry holds it too
    return entry[1]


def compile(fn=None, *, backend="llvm", fullgraph=False, dynamic=None):
    """Compile a function (as `@kiln.compile`, `@kiln.compile(...)` or
    `kiln.compile(fn)`), a bound method (`kiln.compile(model.forward)`: self
    stays bound) or a torch or kiln.nn module. backend: "llvm" (default), "eager", a
    registered name, or a Python callable (gm, example_inputs) -> callable.
    fullgraph: a graph break is an error. dynamic: None (automatic), True
    (all dims dynamic from the start) or False (never)."""
    if fn is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph, dynamic=dynamic)
    _require_version()
    _threads.follow_torch()
    backend = _backend_name(backend)
    if inspect.ismethod(fn):
        # model.forward: the function compiled, self passed first on each call
        # (no hooks: torch.compile(model.forward) does not run __call__ either).
        inner = compile(fn.__func__, backend=backend, fullgraph=fullgraph, dynamic=dynamic)
        owner = fn.__self__

        @functools.wraps(fn)
        def bound(*args, **kwargs):
            return inner(owner, *args, **kwargs)

        bound._kiln_compiled = getattr(inner, "_kiln_compiled", None)
        bound._kiln_bound = (fn.__func__, owner)
        return bound
    if _is_module(fn) or (callable(fn) and hasattr(fn, "__code__")):
        # A module: torch (kiln.nn) runs Module.__call__, hooks and all, on
        # CPython; the hook compiles the frames it reaches.
        return _compile_frames(fn, backend, fullgraph, dynamic)
    if not callable(fn):
        raise TypeError(f"kiln.compile expects a function or a module, got {type(fn).__name__}")
    raise TypeError(f"kiln.compile: {type(fn).__name__} objects are not supported "
                    "(Python functions, bound methods and torch or kiln.nn modules are)")


# kiln reads this CPython's bytecode: the frame hook's Python side
# (kiln/_frames.py) is loaded only then (kiln/__init__.py); otherwise
# kiln.compile and kiln.explain raise, once, saying so.
VERSION_SUPPORTED = _frontend_opcodes.SUPPORTED
_require_version = _frontend_opcodes.require


def _compile_frames(fn, backend, fullgraph, dynamic):
    """fn called as itself, with kiln compiling the frames CPython starts
    (fn's own and those it calls) through the frame hook."""
    config._apply()
    compiled = _C.FrameCompiled(fn, backend, fullgraph, dynamic, config.cache_size_limit, bool(config.strict))
    _functions.note(getattr(fn, "__func__", fn))  # (3.10: its frames' function is fn: known_function)
    call = compiled.fastcall
    module = fn if _is_module(fn) else None

    @functools.wraps(type(fn).forward if module is not None else fn)
    def wrapper(*args, **kwargs):
        return call(*args, **kwargs)

    wrapper._kiln_compiled = compiled
    wrapper._kiln_frames = True
    if module is not None:
        wrapper.module = module
        # The KBC function whose cache holds the module call's entries (a
        # kiln.nn module's) or its forward frame's (a torch module's): what
        # _C.cache_entries counts.
        try:
            wrapper._kiln_entry = compiled.kbc
        except Exception as e:  # a forward kiln cannot translate runs on CPython: no entries
            log.info("%s: no cache of its own: %s", type(fn).__qualname__, e)
            wrapper._kiln_entry = None
    return wrapper


def _is_torch_module(obj):
    """obj is a torch.nn.Module (never imports torch)."""
    import sys
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def _is_module(obj):
    """obj is a torch.nn.Module or a kiln.nn.Module."""
    return isinstance(obj, nn.Module) or _is_torch_module(obj)


class Explanation:
    """What kiln did for one call: graphs, breaks (with their reason, the
    user's file:line and a hint), ops per graph, guards."""

    def __init__(self, report):
        self.graph_count = report["graph_count"]
        self.graph_break_count = report["graph_break_count"]
        self.break_reasons = [
            {"reason": b["reason"], "where": f"{b['file']}:{b['line']}", "hint": b["hint"], "id": b["id"]}
            for b in report["breaks"]]
        self.ops_per_graph = report["ops_per_graph"]
        # Per graph: why it runs through torch's autograd (torch's own ops,
        # so gradients flow), or None when it runs on kiln's kernels.
        self.autograd = [why or None for why in report.get("autograd_per_graph", [])]
        # The captured graphs as kiln.fx GraphModules (.code, .graph.nodes,
        # callable on the graph's inputs).
        self.graphs = [fx._captured(g) for g in report["graph_objects"]]
        self.guards = report["guards"]
        self.recompile_reasons = report["recompile_reasons"]
        self.result = report["result"]
        self.error = report["error"]
        self._text = report["text"].replace("the embedder's autograd", "torch's autograd")
        if self.error and str(self.error) not in self._text:
            self._text += f"The call raised: {self.error}\n"
        # Frames kiln left to CPython during the call (frames path): what
        # kiln failed at, per function ({"function", "where", "reason"}).
        self.left_to_cpython_reasons = list(report.get("left_to_cpython", []))
        for x in self.left_to_cpython_reasons:
            what = "runs on CPython (not compiled)" if x.get("whole_frame", True) else "after a break"
            self._text += f"{x['function']} {what}: {x['reason']}\n  at {x['where']}\n"

    def __str__(self):
        return self._text

    __repr__ = __str__


def explain(fn, *, backend="llvm"):
    """kiln.explain(fn)(*args): compile fn afresh, call it once, report."""
    _require_version()
    backend = _backend_name(backend)
    # What kiln.compile returns leads back to what it compiled: a module, a
    # bound method (its function and self), or a function.
    bound_self = ()
    if _is_module(fn):
        target = fn
    elif getattr(fn, "module", None) is not None and hasattr(fn, "_kiln_compiled"):
        target = fn.module
    elif hasattr(fn, "_kiln_bound"):
        target, owner = fn._kiln_bound
        bound_self = (owner,)
    elif inspect.ismethod(fn):
        target, bound_self = fn.__func__, (fn.__self__,)
    else:
        target = getattr(fn, "__wrapped__", fn)

    def run(*args, **kwargs):
        config._apply()
        reset()
        compiled = fn._kiln_compiled if getattr(fn, "_kiln_frames", False) else _C.FrameCompiled(
            target, backend, False, None, config.cache_size_limit, bool(config.strict))
        report = _C.frames_explain(compiled, *(bound_self + args), **kwargs)
        # fn's own frame left to CPython without running through the hook
        # (a generator function's call runs none): explain says so too.
        code = getattr(target, "__code__", None)
        why = _C.frames_skip_reason(code) if code is not None else None
        if why is not None and not any(x["function"] == T.qualname(code) for x in report["left_to_cpython"]):
            report["left_to_cpython"].append({"function": T.qualname(code), "reason": why, "whole_frame": True,
                                              "where": f"{code.co_filename}:{code.co_firstlineno}"})
        return Explanation(report)

    return run


def reset():
    """Forget every compiled entry (the next call traces again)."""
    _C.reset()
    _C.frames_reset()


def mark_dynamic(t, dim):
    """Trace dimension `dim` of tensor `t` as dynamic from the first compile."""
    _C.mark_dynamic(t, dim)

"""kiln.compile, kiln.explain and friends for Python functions.

A Python function is translated to KBC once per code object
(kiln._frontend) and made a KBC function whose globals mirror the
function's module dict live (kiln._functions, python/src/functions.cpp).
Compiled calls go straight into C++: the guard check, the compiled graph
and the residual code, with the arguments converted once.

A function kiln cannot translate (try/except, with, generators, ...) runs
on CPython, and says so: in the logs (`KILN_LOGS=graph_breaks` or the
`kiln.frontend` Python logger) and in kiln.explain.
"""
import functools
import inspect
import logging

from . import _C, _frontend, fx, nn
from ._functions import _as_kbc, _disabled

log = logging.getLogger("kiln.frontend")


class Config:
    """Process-wide settings, read when a function is compiled.

    cache_size_limit: compiled entries per function before it runs on the VM.
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
        # python_frames (the default): kiln compiles a Python function's
        # frames through the frame hook (PEP 523; kiln/_frames.py): CPython
        # runs everything outside the graphs, on the program's own objects,
        # and the frames the function calls are compiled too.
        # KILN_PYTHON_FRAMES=0 (or False here) selects the older path, which
        # runs the code around graphs on the KBC VM over kiln's copies; it
        # goes once kiln.nn's modules have moved too (docs/architecture.md).
        self.python_frames = os.environ.get("KILN_PYTHON_FRAMES", "1") != "0"
        # strict: a failure inside kiln (frontend, tracer, backend) raises
        # instead of leaving the frame to CPython (frames path; the tests
        # set it).
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
    stays bound) or a kiln.nn.Module. backend: "llvm" (default), "eager", a
    registered name, or a Python callable (gm, example_inputs) -> callable.
    fullgraph: a graph break is an error. dynamic: None (automatic), True
    (all dims dynamic from the start) or False (never)."""
    if fn is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph, dynamic=dynamic)
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
    if config.python_frames and _is_module(fn):
        # torch (kiln.nn) runs Module.__call__, hooks and all, on CPython;
        # the hook compiles the forward frames it reaches.
        return _compile_frames(fn, backend, fullgraph, dynamic)
    if isinstance(fn, nn.Module) or _is_torch_module(fn):
        return _compile_module(fn, backend, fullgraph, dynamic)
    if not callable(fn):
        raise TypeError(f"kiln.compile expects a function or a kiln.nn.Module, got {type(fn).__name__}")
    if not hasattr(fn, "__code__"):
        raise TypeError(f"kiln.compile: {type(fn).__name__} objects are not supported "
                        "(Python functions and kiln.nn modules are)")
    if config.python_frames:
        return _compile_frames(fn, backend, fullgraph, dynamic)
    kbc = _as_kbc(fn)
    if kbc is None:
        log.warning("kiln.compile(%s): not translatable; it runs on CPython", fn.__qualname__)
        return fn
    config._apply()
    compiled = _C.compile(fn, kbc, backend, fullgraph, dynamic, config.cache_size_limit)
    compiled.torch_out = _uses_torch(fn)
    call = compiled.fastcall  # the call without pybind11's dispatcher

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return call(*args, **kwargs)

    wrapper._kiln_compiled = compiled
    return wrapper


def _compile_frames(fn, backend, fullgraph, dynamic):
    """fn called as itself, with kiln compiling the frames CPython starts
    (fn's own and those it calls) through the frame hook."""
    config._apply()
    compiled = _C.FrameCompiled(fn, backend, fullgraph, dynamic, config.cache_size_limit, bool(config.strict))
    call = compiled.fastcall
    module = fn if _is_module(fn) else None

    @functools.wraps(type(fn).forward if module is not None else fn)
    def wrapper(*args, **kwargs):
        return call(*args, **kwargs)

    wrapper._kiln_compiled = compiled
    wrapper._kiln_frames = True
    if module is not None:
        wrapper.module = module
        # The KBC function whose cache holds the forward frame's entries
        # (what _C.cache_entries counts), as _compile_module's wrapper has.
        try:
            wrapper._kiln_entry = compiled.kbc
        except Exception as e:  # a forward kiln cannot translate runs on CPython: no entries
            log.info("%s: no cache of its own: %s", type(fn).__qualname__, e)
            wrapper._kiln_entry = None
    return wrapper


# Calling a module is pre-hooks, forward, hooks (runtime/module.h): the
# traced entry point is a one-line KBC function that calls it, so a
# module's compiled entries are guarded on the module itself.
_CALL_MODULE_KBC = """
.func call_module(m, *args, **kwargs)
    LOAD_FAST m
    LOAD_FAST args
    LOAD_FAST kwargs
    CALL_EX 1
    RETURN_VALUE
.end
"""


def _call_module_function():
    """A call_module function of its own: compiled entries are cached per
    code object, so modules compiled through one shared function would
    share (and exhaust) one cache_size_limit, the ninth module running on
    the VM."""
    return _C.assemble(_CALL_MODULE_KBC, "<kiln.compile(module)>").global_("call_module")


_CALL_MODULE = _call_module_function()


def _no_closure():
    pass


def _is_torch_module(obj):
    """obj is a torch.nn.Module (never imports torch)."""
    import sys
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def _is_module(obj):
    """obj is a torch.nn.Module or a kiln.nn.Module."""
    return isinstance(obj, nn.Module) or _is_torch_module(obj)


def _compile_module(module, backend, fullgraph, dynamic):
    config._apply()
    entry = _call_module_function()
    compiled = _C.compile(_no_closure, entry, backend, fullgraph, dynamic, config.cache_size_limit)
    compiled.torch_out = _is_torch_module(module)  # a torch model returns torch tensors
    fast = compiled.fastcall

    @functools.wraps(type(module).forward)
    def call(*args, **kwargs):
        return fast(module, *args, **kwargs)

    call._kiln_compiled = compiled
    call._kiln_entry = entry  # the function whose cache holds this module's entries
    call.module = module
    return call


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

    @classmethod
    def left_to_cpython(cls, fn, reason):
        """The report for a function kiln leaves to CPython: no graphs, and why."""
        name = getattr(fn, "__qualname__", repr(fn))
        code = getattr(fn, "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code else "?"
        report = {"graph_count": 0, "graph_break_count": 0, "breaks": [], "ops_per_graph": [],
                  "graph_objects": [], "guards": [], "recompile_reasons": [], "result": None, "error": None,
                  "text": f"{name} runs on CPython (not compiled): {reason}\n  at {where}\n"}
        e = cls(report)
        e.left_to_cpython_reasons = [{"function": name, "where": where, "reason": reason}]
        return e

    def __str__(self):
        return self._text

    __repr__ = __str__


def explain(fn, *, backend="llvm"):
    """kiln.explain(fn)(*args): compile fn afresh, call it once, report."""
    backend = _backend_name(backend)
    # What kiln.compile returns leads back to what it compiled: a module, a
    # bound method (its function and self), or a function.
    bound_self = ()
    if _is_torch_module(fn) or isinstance(fn, nn.Module):
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
        if getattr(fn, "_kiln_frames", False) or (config.python_frames and (
                inspect.isfunction(target) or _is_module(target))):
            reset()
            compiled = fn._kiln_compiled if getattr(fn, "_kiln_frames", False) else _C.FrameCompiled(
                target, backend, False, None, config.cache_size_limit, bool(config.strict))
            report = _C.frames_explain(compiled, *(bound_self + args), **kwargs)
            # fn's own frame left to CPython without running through the hook
            # (a generator function's call runs none): explain says so too.
            code = getattr(target, "__code__", None)
            why = _C.frames_skip_reason(code) if code is not None else None
            if why is not None and not any(x["function"] == code.co_qualname for x in report["left_to_cpython"]):
                report["left_to_cpython"].append({"function": code.co_qualname, "reason": why, "whole_frame": True,
                                                  "where": f"{code.co_filename}:{code.co_firstlineno}"})
            return Explanation(report)
        if isinstance(target, nn.Module) or _is_torch_module(target):
            return Explanation(_C.explain(_CALL_MODULE, (target,) + args, backend, config.cache_size_limit))
        kbc = _as_kbc(target)
        if kbc is None:
            return Explanation.left_to_cpython(target, _untranslatable_reason(target))
        return Explanation(_C.explain(kbc, bound_self + args, backend, config.cache_size_limit))

    return run


def _untranslatable_reason(fn):
    if fn in _disabled:
        return "kiln.disable"
    try:
        _frontend.translate(fn)
    except _frontend.Untranslatable as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - reported, not raised: explain describes
        return f"{type(e).__name__}: {e}"
    return "not a Python function kiln translates"


def reset():
    """Forget every compiled entry (the next call traces again)."""
    _C.reset()
    _C.frames_reset()


def mark_dynamic(t, dim):
    """Trace dimension `dim` of tensor `t` as dynamic from the first compile."""
    _C.mark_dynamic(t, dim)

"""The zoo's harness: runs one model (eager, kiln, kiln.explain, and
torch._dynamo.explain when asked) and returns a record; and the worker
process the tests and the record script run models in.

Why a worker process: kiln on a library model can crash the process
(RecursionError turned SIGSEGV, a C++ abort) or hang, and what one model
leaves in a process (kiln's caches of translated functions, say) can change
the next one's graph and break counts. The worker is spawned once and
imports torch, torchvision, timm, transformers and kiln without running
anything; each model then runs in a process forked from it (milliseconds,
the imports shared copy-on-write). A model's process that dies or exceeds
the timeout is recorded as `crash` (with the signal) or `timeout`; the
worker goes on with the next. The test process only sends names and
compares records with the pins, so one model can never take the suite down,
and every model starts from the same state whatever ran before it (a
pytest -k subset gives the same records as the whole zoo).

A record (a dict, JSON-ready):
  status        ok | wrong | raises | crash | timeout
  error         raises: "Type: first line of the message" (addresses masked);
                wrong: what differs ("values: out.logits", "type: out ...");
                crash: the signal; timeout: the limit
  kiln_graphs, kiln_breaks, kiln_reason     kiln.explain(model)(*args)
                (None for generate entries: explain takes positional
                arguments only; the forward entry of the same model has them)
  dynamo_graphs, dynamo_breaks, dynamo_reason   torch._dynamo.explain
  max_abs_diff  largest |kiln - eager| over float outputs (ok and wrong)
  build_s, eager_s, kiln_first_s, explain_s, dynamo_s   seconds (wall)
  cpu_s         the worker's CPU seconds for the whole entry (all threads)

A record of the backend mode (torch.compile(model, backend="kiln"),
run_model(mode="backend"); pins in expected_backend.json): status, error,
max_abs_diff and the times as above (kiln_first_s: Dynamo's capture, the
backend's compile and the first call), for forward entries over a first
and a second call (second_s: the second, where the backend's re-planned
segments compile), and
  graphs, breaks   Dynamo's graphs and graph breaks in that run (its
                   counters: stats.unique_graphs, graph_break)
  dynamo_reason    Dynamo's first break reason
  plans, nodes, kiln_nodes, segments   the backend's plans over those
                   graphs (kiln._dynamo_backend.last_plans()): graphs
                   planned, compute nodes, nodes run in kiln-compiled
                   segments, kiln-compiled segments
  eager_ops        {target: count} of the nodes run as torch eager
  gave_up          the kiln segments that recompiled up to kiln's
                   cache_size_limit (8) and then ran on CPython, i.e. as
                   torch eager (kiln's warning; generate() entries whose
                   segments specialise on a length that grows each step)
  eager_reasons    {target: its first reason} (information)
"""
import gc
import math
import os
import re
import signal
import sys
import time
import traceback

from . import models

# Seconds one model may take in the worker (eager, kiln and both explains).
TIMEOUT = float(os.environ.get("KILN_ZOO_TIMEOUT", "300"))
STARTUP_TIMEOUT = 300.0

# The fields a test compares with the pins; the rest is information.
PINNED = ("status", "error", "kiln_graphs", "kiln_breaks")
PINNED_DYNAMO = ("dynamo_graphs", "dynamo_breaks")
# The backend mode (torch.compile(model, backend="kiln")): its record's
# fields, and those its tests compare with the pins (expected_backend.json).
BACKEND_FIELDS = ("graphs", "breaks", "nodes", "kiln_nodes", "segments", "eager_ops", "gave_up", "dynamo_reason")
PINNED_BACKEND = ("status", "error", "graphs", "breaks", "nodes", "kiln_nodes", "segments", "eager_ops", "gave_up")


def _one_line(text, limit=240):
    """The first line of a message (the last of a traceback), addresses masked."""
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    line = (lines[-1] if lines[0].startswith("Traceback") else lines[0]).strip() if lines else ""
    line = re.sub(r"0x[0-9a-fA-F]{4,}", "0x?", line)
    return line if len(line) <= limit else line[:limit - 3] + "..."


def describe_error(e):
    """'Type: first line of the message', stable across runs."""
    msg = _one_line(e)
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


# ------------------------------------------------------------ comparison

def _flatten(obj, path, out):
    """(path, leaf) pairs of an output: tensors, tuples, lists, dicts (and
    transformers' ModelOutput, an OrderedDict), KV caches, plain values."""
    import torch
    if isinstance(obj, torch.Tensor) or type(obj).__module__.startswith("kiln"):
        out.append((path, obj))
    elif isinstance(obj, (tuple, list)):
        out.append((path, _Container(obj)))
        for i, v in enumerate(obj):
            _flatten(v, f"{path}[{i}]", out)
    elif isinstance(obj, dict):
        out.append((path, _Container(obj)))
        for k, v in obj.items():
            _flatten(v, f"{path}.{k}", out)
    elif hasattr(obj, "layers") and hasattr(obj, "get_seq_length"):  # transformers.Cache
        out.append((path, _Container(obj)))
        for i, layer in enumerate(obj.layers):
            for attr in ("keys", "values"):
                _flatten(getattr(layer, attr, None), f"{path}.layers[{i}].{attr}", out)
    else:
        out.append((path, obj))


class _Container:
    def __init__(self, obj):
        self.type = type(obj)
        self.keys = list(obj.keys()) if isinstance(obj, dict) else len(getattr(obj, "layers", obj))

    def __eq__(self, other):
        return isinstance(other, _Container) and (self.type, self.keys) == (other.type, other.keys)


def _typename(obj):
    t = obj.type if isinstance(obj, _Container) else type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def compare(want, got, rtol, atol):
    """(None, max_abs_diff) when got equals want within the tolerance, else
    (what differs, max_abs_diff). Float tensors: elementwise
    |got - want| <= atol * max(1, max|want|) + rtol * |want| (models.RTOL,
    models.ATOL): atol is relative to the tensor's largest value when that
    is above 1, since float32 rounding scales with it (random weights and
    identity batch norms make some CNNs' logits 1e4 to 1e8, where
    cancellation leaves single small logits with a relative error of 1e-2
    and every error within 1e-6 of the largest)."""
    import torch
    a, b = [], []
    _flatten(want, "out", a)
    _flatten(got, "out", b)
    worst = 0.0
    if [p for p, _ in a] != [p for p, _ in b]:
        first = next((pa for (pa, _), (pb, _) in zip(a, b) if pa != pb), a[len(b)][0] if len(a) > len(b) else b[len(a)][0])
        return f"structure: {first}", None
    for (path, w), (_, g) in zip(a, b):
        if type(w) is not type(g) and not (isinstance(w, _Container) and isinstance(g, _Container)):
            return f"type: {path} is {_typename(g)}, eager gives {_typename(w)}", None
        if isinstance(w, _Container):
            if w != g:
                return f"type: {path} is {_typename(g)} {g.keys}, eager gives {_typename(w)} {w.keys}", None
        elif isinstance(w, torch.Tensor):
            if w.shape != g.shape or w.dtype != g.dtype:
                return f"shape: {path} is {tuple(g.shape)} {g.dtype}, eager gives {tuple(w.shape)} {w.dtype}", None
            if w.is_floating_point() or w.is_complex():
                scale = 1.0
                if w.numel():
                    diff = (g.double() - w.double()).abs()
                    finite = torch.isfinite(diff)
                    if finite.any():
                        worst = max(worst, float(diff[finite].max()))
                    mag = w.double().abs()
                    mag = mag[torch.isfinite(mag)]
                    if mag.numel():
                        scale = max(1.0, float(mag.max()))
                if not torch.allclose(g, w, rtol=rtol, atol=atol * scale, equal_nan=True):
                    return f"values: {path}", worst
            elif not torch.equal(g, w):
                return f"values: {path}", worst
        elif isinstance(w, float) and isinstance(g, float):
            if not (math.isclose(g, w, rel_tol=rtol, abs_tol=atol) or (math.isnan(g) and math.isnan(w))):
                return f"values: {path}", worst
        elif isinstance(w, (int, str, bool, type(None))) and w != g:
            return f"values: {path}", worst
    return None, worst


# ------------------------------------------------------------ in the worker

def _reasons(items):
    seen = []
    for r in items:
        r = _one_line(r, 240)
        if r not in seen:
            seen.append(r)
    return seen


def _kiln_explain(rec, model, args):
    import kiln
    kiln.reset()
    t = time.perf_counter()
    try:
        ex = kiln.explain(model)(*args)
    except BaseException as e:  # noqa: BLE001 - recorded
        if isinstance(e, KeyboardInterrupt):
            raise
        rec["kiln_explain_error"] = describe_error(e)
        return
    finally:
        rec["explain_s"] = round(time.perf_counter() - t, 3)
    rec["kiln_graphs"] = ex.graph_count
    rec["kiln_breaks"] = ex.graph_break_count
    reasons = _reasons([f"{_one_line(b['reason'], 160)} ({os.path.basename(str(b['where']))})" for b in ex.break_reasons]
                       + [r["reason"] for r in getattr(ex, "left_to_cpython_reasons", [])])
    # The first root cause: a break in an inlined function is reported at
    # every frame around it ("graph break inside the inlined function ...").
    roots = [r for r in reasons if not r.startswith("graph break inside the inlined function")]
    rec["kiln_reason"] = (roots or reasons or [None])[0]
    rec["kiln_reasons"] = reasons[:5]
    if ex.error:
        rec["kiln_explain_error"] = _one_line(ex.error)


_dynamo_warm = False


def _dynamo_where(reason):
    """' (file.py:line in function)': where the user's code broke."""
    stack = getattr(reason, "user_stack", None) or []
    if not stack:
        return ""
    f = stack[-1]
    return f" ({os.path.basename(f.filename)}:{f.lineno} in {f.name})"


def _dynamo_explain(rec, model, args):
    import torch
    import torch._dynamo
    global _dynamo_warm
    if not _dynamo_warm:  # Dynamo's one-time costs, not the first model's
        _dynamo_warm = True
        torch._dynamo.explain(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))(torch.randn(2, 4))
    torch._dynamo.reset()
    t = time.perf_counter()
    try:
        d = torch._dynamo.explain(model)(*args)
    except Exception as e:  # noqa: BLE001 - recorded
        rec["dynamo_error"] = describe_error(e)
        return
    finally:
        rec["dynamo_s"] = round(time.perf_counter() - t, 3)
        torch._dynamo.reset()
    rec["dynamo_graphs"] = d.graph_count
    rec["dynamo_breaks"] = d.graph_break_count
    reasons = _reasons([_one_line(r.reason, 160) + _dynamo_where(r) for r in d.break_reasons])
    rec["dynamo_reason"] = reasons[0] if reasons else None
    rec["dynamo_reasons"] = reasons[:5]


def _kiln_call(rec, fn):
    """Runs fn (kiln's compile and first call); the result, or None with
    rec's status and error set."""
    t = time.perf_counter()
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001 - RecursionError, SystemError, ... all recorded
        if isinstance(e, KeyboardInterrupt):
            raise
        rec["status"] = "raises"
        rec["error"] = describe_error(e)
        rec["traceback"] = traceback.format_exc(limit=-8)[-4000:]
        return None
    finally:
        rec["kiln_first_s"] = round(time.perf_counter() - t, 3)


def _empty_record(name, mode):
    spec = models.SPECS[name]
    rec = {"name": name, "library": spec.library, "kind": spec.kind, "status": None, "error": None}
    rec.update(dict.fromkeys(BACKEND_FIELDS if mode == "backend" else
                             ("kiln_graphs", "kiln_breaks", "kiln_reason",
                              "dynamo_graphs", "dynamo_breaks", "dynamo_reason")))
    return rec


def _backend_compile(fn):
    """torch.compile(fn, backend="kiln"): found by name, through the
    torch_dynamo_backends entry point `pip install` registers."""
    import torch
    return torch.compile(fn, backend="kiln")


class _StderrTap:
    """The process's stderr (fd 2) into a file until stop(), which puts it
    back, echoes what was written and returns it: kiln's C++ core reports a
    function that hit cache_size_limit there only."""

    def __init__(self):
        import tempfile
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)

    def stop(self):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        text = self.file.read().decode(errors="replace")
        self.file.close()
        sys.stderr.write(text)
        return text


def _backend_counts(rec, stderr=""):
    """What Dynamo and the kiln backend did in this process (it is a fresh
    fork per model, and the counters were cleared before the compile):
    Dynamo's graphs and breaks (its counters), the backend's plans summed
    over those graphs (kiln._dynamo_backend.last_plans()), and the kiln
    segments that recompiled up to kiln's cache_size_limit and from then
    on ran on CPython, i.e. as torch eager (kiln's warning on stderr)."""
    rec["gave_up"] = sorted(set(re.findall(r"kiln: warning: (\S+) recompiled \d+ times", stderr)))
    from torch._dynamo.utils import counters
    from kiln import _dynamo_backend
    rec["graphs"] = int(counters["stats"]["unique_graphs"])
    rec["breaks"] = int(sum(counters["graph_break"].values()))
    reasons = _reasons(counters["graph_break"])
    rec["dynamo_reason"] = reasons[0] if reasons else None
    plans = _dynamo_backend.last_plans()
    rec["plans"] = len(plans)
    rec["nodes"] = sum(p["nodes"] for p in plans)
    rec["kiln_nodes"] = sum(p["kiln_nodes"] for p in plans)
    rec["segments"] = sum(p["compiled"] for p in plans)  # segments kiln compiled and ran
    eager = {}
    why = {}
    for p in plans:
        for _, target, reason in p["eager"]:
            eager[target] = eager.get(target, 0) + 1
            why.setdefault(target, _one_line(reason, 200))
    rec["eager_ops"] = dict(sorted(eager.items()))
    rec["eager_reasons"] = dict(sorted(why.items()))


def run_model(name, dynamo=True, mode="kiln"):
    """Runs one zoo model; returns its record (see the module's doc).
    mode "kiln": kiln.compile (and kiln.explain, torch._dynamo.explain when
    dynamo); mode "backend": torch.compile(model, backend="kiln"), compared
    with eager the same way, with Dynamo's counts and the backend's plan."""
    import torch
    import kiln
    spec = models.SPECS[name]
    rec = _empty_record(name, mode)
    if mode == "backend":
        import torch._dynamo
        from torch._dynamo.utils import counters
        from kiln import _dynamo_backend
        torch._dynamo.reset()
        counters.clear()
        _dynamo_backend._plans.clear()
        _dynamo_backend.PLANS_KEPT = 1 << 20  # every graph's plan, however many Dynamo makes
        tap = _StderrTap()
    kiln.reset()
    torch.manual_seed(0)
    kiln.manual_seed(0)
    cpu = time.process_time()
    t = time.perf_counter()
    model, args = spec.build()
    rec["build_s"] = round(time.perf_counter() - t, 3)
    with torch.no_grad():
        if spec.kind == "generate":
            kwargs = models.generate_kwargs(spec.generate)
            torch.manual_seed(1)
            t = time.perf_counter()
            want = model.generate(*args, **kwargs)
            rec["eager_s"] = round(time.perf_counter() - t, 3)

            def kiln_generate():
                # What transformers documents for torch.compile: compile the
                # forward, generate() as usual (KV cache, sampling).
                model.forward = (_backend_compile if mode == "backend" else kiln.compile)(model.forward)
                try:
                    torch.manual_seed(1)
                    return model.generate(*args, **kwargs)
                finally:
                    del model.forward
            got = _kiln_call(rec, kiln_generate)
            rtol = atol = 0.0
        else:
            torch.manual_seed(1)
            t = time.perf_counter()
            want = model(*args)
            rec["eager_s"] = round(time.perf_counter() - t, 3)
            kiln.reset()
            torch.manual_seed(1)
            compile_ = _backend_compile if mode == "backend" else kiln.compile
            compiled = []

            def first_call():
                compiled.append(compile_(model))
                return compiled[0](*args)
            got = _kiln_call(rec, first_call)
            rtol, atol = spec.rtol, spec.atol
        if rec["status"] is None:
            what, worst = compare(want, got, rtol, atol)
            rec["status"] = "wrong" if what else "ok"
            rec["error"] = what
            rec["max_abs_diff"] = None if worst is None else float(f"{worst:.3g}")
        del got
        if mode == "backend" and spec.kind == "forward" and rec["status"] == "ok":
            # The cached call too: Dynamo's guards pass, the backend's
            # driver runs as re-planned after the first call (a node kiln
            # refused there runs as torch eager, the rest in whole segments).
            torch.manual_seed(1)
            t = time.perf_counter()
            try:
                again = compiled[0](*args)
            except Exception as e:  # noqa: BLE001 - recorded
                rec["status"], rec["error"] = "raises", "second call: " + describe_error(e)
                rec["traceback"] = traceback.format_exc(limit=-8)[-4000:]
            else:
                rec["second_s"] = round(time.perf_counter() - t, 3)
                what, worst = compare(want, again, rtol, atol)
                if what:
                    rec["status"], rec["error"] = "wrong", "second call: " + what
                rec["max_abs_diff"] = max(rec["max_abs_diff"] or 0.0, float(f"{worst or 0.0:.3g}"))
                del again
        compiled = None
        if mode == "backend":
            _backend_counts(rec, tap.stop())
        elif spec.kind == "forward":
            _kiln_explain(rec, model, args)
            if dynamo:
                _dynamo_explain(rec, model, args)
    kiln.reset()
    del model, args, want
    gc.collect()
    rec["cpu_s"] = round(time.process_time() - cpu, 3)
    return rec


def setup_worker():
    """Environment and imports of the worker: nothing is run (no thread
    pool started), so that it can fork a process per model."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # Compiled kernels in memory only: every run compiles from scratch, so
    # kiln's first-call times do not depend on what an earlier run cached.
    os.environ.setdefault("KILN_CACHE_DIR", "off")
    from . import torchvision_cpu  # noqa: F401 - before torchvision, timm, transformers
    import warnings
    import torch  # noqa: F401
    import torchvision  # noqa: F401
    import timm  # noqa: F401
    import transformers  # noqa: F401
    import kiln  # noqa: F401
    import torch._dynamo  # noqa: F401 - imported once here, not in every model's process
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()


def versions():
    import torch
    import torchvision
    import timm
    import transformers
    return {"python": sys.version.split()[0], "torch": torch.__version__, "torchvision": torchvision.__version__,
            "timm": timm.__version__, "transformers": transformers.__version__}


def _die_with_parent():
    """Linux: the worker is killed when the test process dies (a killed
    pytest leaves no worker computing on)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_forked(name, dynamo, timeout, mode="kiln"):
    """Runs one model in a child forked from the worker: (record, None), or
    (None, (status, error)) when the child dies or passes the timeout."""
    import pickle
    import select
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the model's process: run, send the record, leave
        os.close(r)
        try:
            try:
                rec = run_model(name, dynamo, mode)
            except BaseException as e:  # noqa: BLE001 - a harness or eager failure, not kiln's
                rec = {"name": name, "status": "harness-error", "error": describe_error(e),
                       "traceback": traceback.format_exc()}
            data = pickle.dumps(rec)
            with os.fdopen(w, "wb") as f:
                f.write(data)
        finally:
            os._exit(0)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout
    with os.fdopen(r, "rb") as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([f], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None, ("timeout", f"no result after {timeout:.0f} s")
            chunk = os.read(f.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if chunks:
        try:
            return pickle.loads(b"".join(chunks)), None
        except Exception:  # noqa: BLE001 - a record cut short: the child died writing it
            pass
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return None, ("crash", _exit_text(code))


def _serve(conn):
    """The worker: imports once, then forks a process per model, so that
    every model starts from the same state (what one model leaves in kiln,
    torch or the libraries never changes the next one's pins) and a crash
    or a hang ends that model's process only. Messages: ("run", name,
    dynamo, timeout, mode) -> (record, failure); ("versions",) -> dict."""
    _die_with_parent()
    try:
        setup_worker()
    except BaseException as e:  # noqa: BLE001 - the parent reports it
        conn.send(("error", describe_error(e), traceback.format_exc()))
        return
    conn.send(("ready",))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "run":
            conn.send(_run_forked(*msg[1:]))
        elif msg[0] == "versions":
            conn.send(versions())
        else:
            return


# ------------------------------------------------------- in the test process

class Worker:
    """The parent's handle on the worker process (restarted if it dies)."""

    def __init__(self, timeout=TIMEOUT):
        self.timeout = timeout
        self.proc = None
        self.conn = None

    def _start(self):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="kiln-zoo-worker")
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(STARTUP_TIMEOUT):
            self._kill()
            raise RuntimeError(f"zoo worker: not ready after {STARTUP_TIMEOUT:.0f} s")
        try:
            msg = parent.recv()
        except EOFError:
            code = self._reap()
            raise RuntimeError(f"zoo worker died while starting ({_exit_text(code)})") from None
        if msg[0] != "ready":
            self._reap()
            raise RuntimeError(f"zoo worker could not start: {msg[1]}\n{msg[2]}")

    def _kill(self):
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        return self._reap()

    def _reap(self):
        code = None
        if self.proc is not None:
            self.proc.join(10)
            code = self.proc.exitcode
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None
        return code

    def _ask(self, msg, timeout):
        if self.proc is None or not self.proc.is_alive():
            self._reap()
            self._start()
        self.conn.send(msg)
        if self.conn.poll(timeout):
            try:
                return self.conn.recv(), None
            except EOFError:
                pass
            return None, ("crash", "worker: " + _exit_text(self._reap()))
        self._kill()
        return None, ("timeout", f"worker: no answer after {timeout:.0f} s")

    def run(self, name, dynamo=True, mode="kiln"):
        t = time.perf_counter()
        answer, failure = self._ask(("run", name, dynamo, self.timeout, mode), self.timeout + 60)
        rec = None
        if answer is not None:
            rec, failure = answer
        if failure:
            rec = _empty_record(name, mode)
            rec["status"], rec["error"] = failure
        rec["wall_s"] = round(time.perf_counter() - t, 3)
        return rec

    def versions(self):
        answer, failure = self._ask(("versions",), STARTUP_TIMEOUT)
        if failure:
            raise RuntimeError(f"zoo worker: {failure}")
        return answer

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(("stop",))
            except OSError:
                pass
            self.proc.join(10)
        self._kill()


def _exit_text(code):
    if code is None:
        return "worker gone"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"

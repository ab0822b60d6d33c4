"""kiln's Python side of the frame hook (python/src/eval_frame_hook.cpp).

The hook calls three functions here:

- `classify(code)`: whether frames of this code are traced at all (None) or
  left to CPython (the reason). Decided once per code object.
- `kbc(func)`: the function's KBC form, which the tracer reads it through
  (kiln._functions._as_kbc; None when kiln cannot translate it).
- `build(code, info)`: the CPython code object a cache entry runs instead
  of `code`, made from the entry's residual (KBC that calls the compiled
  graph, rebuilds the values the rest of the frame needs and replays the
  trace's side effects). Returns a code object, or the reason none can be
  made (the frame then runs unchanged).

The code `build` makes, for original code C:

    C's prologue (MAKE_CELL, COPY_FREE_VARS), RESUME 0
    the residual, translated instruction by instruction to CPython 3.11
    -- a trace that ended in a return: the residual returns; nothing else --
    -- a trace that stopped at a break (the entry's continuation): --
    STORE_FAST the live locals into C's own slots (from the residual's temporaries)
    push C's value stack at the breaking instruction (PUSH_NULL where C has a NULL)
    JUMP_FORWARD to the breaking instruction in ...
    ... a copy of all of C's bytecode, under C's exception table

so CPython runs the breaking instruction and everything after it on the
program's own objects, with the handlers of any try or with block it is in.
Outside try and with blocks the tail is Dynamo's instead: the breaking
instruction's run copied here, then a call of the resume function
(kiln/_resume.py) of the next instruction (of each edge, for a branch),
a frame of its own that the hook traces again. Frames either form calls
come back to the hook as frames of their own.

Trap: in 3.11 a call needs a NULL (or a method's self) *below* the
callable, and the residual pushes the callable before anyone knows it will
be called. A residual CALL therefore packs its arguments in a tuple and
rotates a NULL under the callable with SWAPs before CALL_FUNCTION_EX;
LOAD_METHOD / CALL_METHOD keep CPython's own pair.
"""
import dis
import inspect
import logging
import os
import sys
import sysconfig
import types

from . import _bytecode as B
from . import _bytecode_tables as T
from . import _C, _compile, _frontend, _functions, _resume, nn
from ._instructions import instructions, nested_qualnames

__all__ = ["classify", "kbc", "build", "Refused"]

_log = logging.getLogger("kiln.frames")


class Refused(Exception):
    """The residual has a construct this translation does not make CPython
    code for; the frame runs unchanged."""


# Called at trace time on the function the trace pins, its immutable answer
# kept as a constant (Dynamo's InspectSignatureVariable): transformers'
# apply_chunking_to_forward counts len(inspect.signature(fn).parameters) in
# every BERT-style layer. A Signature depends on the function's code,
# defaults and annotations and its __signature__ / __wrapped__; the trace's
# guards pin the function, not those attributes.
_C._fold_at_trace_time(inspect.signature)

# os.environ.get("X") / os.environ["X"] / "X" in os.environ in traced code
# (transformers' use_gqa_in_sdpa in every LLaMA-style attention): read at
# trace time under a guard on that variable (a changed or new value
# recompiles), instead of tracing _Environ's own code, which encodes the key
# to bytes (Dynamo inlines it and guards os.environ's dict alike).
_C._environ_mapping(os.environ)


# -- which frames are traced ------------------------------------------------

_KILN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# kiln.nn.Module.__call__ calls the program back (a subclass's forward), as
# torch's does: its frames are not traced, but what they call is looked at.
_KILN_NN_DIR = os.path.join(_KILN_DIR, "nn") + os.sep


def _dir(path):
    return os.path.abspath(path).rstrip(os.sep) + os.sep


def _site_dirs():
    """Where installed packages live: this environment's site-packages and,
    in a virtual environment made with --system-site-packages, the base
    interpreter's too (sys.base_prefix's purelib/platlib, which lie under
    the base's standard library: without them, torchvision or transformers
    installed there read as the standard library and were never traced)."""
    dirs = set()
    for scheme_vars in (None, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=scheme_vars) if scheme_vars else sysconfig.get_paths()
        dirs.update(_dir(paths[k]) for k in ("purelib", "platlib"))
    return tuple(dirs)


_STDLIB = tuple({_dir(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib")})
_SITE = _site_dirs()


def _package_dir(name):
    mod = sys.modules.get(name)
    return _dir(os.path.dirname(mod.__file__)) if mod is not None and getattr(mod, "__file__", None) else None


_NOT_FUNCTIONS = ("<module>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")


# torch's nn.Sequential.forward (`for module in self: input =
# module(input)`): traced as its own code, not as kiln's module call, so a
# break at one child resumes at the next child in a function of this code
# (the loop's iterator crosses as its remaining children) instead of
# leaving the whole container to CPython, each child then a graph of its own.
_TRACED_AS_CODE = set()


def _builtin_forwards():
    """{forward code of a module class whose forward is kiln's own: that
    class}. Such a frame is traced as kiln's module call (its forward as
    the tracer knows it), not as its code: the torch classes kiln maps
    (kiln/_torch_api.py MODULES: their forwards are torch's internals, _VF
    calls and all), and kiln.nn's own classes (their forwards are kiln's
    code, which the hook otherwise leaves to CPython)."""
    if not _BUILTIN_FORWARDS:
        for cls in vars(nn).values():
            if isinstance(cls, type) and issubclass(cls, nn.Module) and cls.__module__ == nn.__name__:
                _add_forward(cls)
    torch = sys.modules.get("torch")
    if torch is not None and not _TORCH_MAPPED:
        from . import _torch_api
        _TORCH_MAPPED.append(torch)
        for cls in _torch_api._mapped_classes(torch):
            if cls is not torch.nn.Sequential:
                _add_forward(cls)
            else:
                _TRACED_AS_CODE.add(cls.forward.__code__)
    return _BUILTIN_FORWARDS


def _add_forward(cls):
    fwd = cls.__dict__.get("forward")
    if fwd is not None and hasattr(fwd, "__code__") and fwd.__code__ is not _BASE_FORWARD_CODE:
        _BUILTIN_FORWARDS[fwd.__code__] = cls


_BUILTIN_FORWARDS = {}
_TORCH_MAPPED = []  # torch, once its classes are in _BUILTIN_FORWARDS
_BASE_FORWARD_CODE = nn.Module.forward.__code__  # it raises: CPython runs it


# kiln.nn.Module.__call__ of the module kiln.compile was given: traced as
# the module call it is (pre-hooks, forward and hooks in one trace); a break
# in it leaves the frame to CPython, whose hooks and forward are then frames
# of their own, as they are for every other module CPython calls.
_MODULE_CALL_CODE = nn.Module.__call__.__code__


def classify(code):
    """None when frames of `code` are traced, "root module call" when only
    the compiled module's own call is, "module forward" when only a module
    whose class's forward is this code is (not a subclass's super().forward),
    else (why CPython runs them, whether what they call is left to CPython
    too)."""
    if code is _MODULE_CALL_CODE:
        return "root module call"  # traced for kiln.compile(module)'s own module only
    if code in _builtin_forwards():
        return "module forward"  # traced when the module's own class's forward is this one
    if code in _TRACED_AS_CODE:
        return None
    if code.co_name in _NOT_FUNCTIONS:
        return f"{code.co_name} code (not a function body)", False
    if code in _functions._disabled_codes:
        return "kiln.disable", True
    fname = os.path.abspath(code.co_filename) if not code.co_filename.startswith("<") else code.co_filename
    if fname.startswith(_KILN_DIR):
        return "kiln's own code", not fname.startswith(_KILN_NN_DIR)
    if fname.startswith("<frozen "):
        return "the standard library", True
    # torch's and numpy's own Python is what eager runs; the tracer maps
    # their API from the outside (kiln/_torch_api.py), never their frames.
    # torch calls the program back (Module.__call__ -> forward, hooks), so
    # its callees are still looked at.
    torch_dir = _package_dir("torch")
    if torch_dir and fname.startswith(torch_dir):
        return "library code (torch)", False
    for name in ("numpy", "pybind11", "_pytest", "pluggy"):
        d = _package_dir(name)
        if d and fname.startswith(d):
            return f"library code ({name})", True
    # Other installed packages are programs too (transformers, timm,
    # torchvision's models): traced. site-packages lies under the standard
    # library's directory, so it is checked first.
    if any(fname.startswith(d) for d in _SITE):
        return None
    if any(fname.startswith(d) for d in _STDLIB):
        return "the standard library", True
    return None


def kbc(func):
    if _C.fault_enabled("frontend"):
        raise RuntimeError("kiln: injected fault at frontend (KILN_FAULT)")
    if isinstance(func, nn.Module):  # FrameCompiled.kbc of a compiled kiln.nn module: its call's
        func = type(func).__call__
    elif _compile._is_torch_module(func):  # ... of a torch module: its forward's
        func = type(func).forward
    code = getattr(func, "__code__", None)
    if code is _MODULE_CALL_CODE or code in _builtin_forwards():
        return _module_call_kbc(code)
    if T.VERSION == (3, 10):  # the hook made func of the frame's code (frame_access.h)
        func = _functions.known_function(func)
    return _functions._as_kbc(func)


_MODULE_CALLS = {}


def _module_call_kbc(code):
    """For kiln.nn.Module.__call__ and the forward frames of the module
    classes whose forward is kiln's: a KBC function of the same parameters
    (the residual stores into the frame's slots by name) that calls the
    module (hooks and all) or its forward, so the tracer runs kiln's module
    call over the module (torch's own forward is its internals, _VF calls
    and all)."""
    hit = _MODULE_CALLS.get(code)
    if hit is None:
        n = code.co_argcount + code.co_kwonlyargcount
        names = code.co_varnames[:n]
        rest = code.co_varnames[n:]
        varargs = rest[0] if code.co_flags & T.CO_VARARGS else None
        varkw = rest[1 if varargs else 0] if code.co_flags & T.CO_VARKEYWORDS else None
        if code.co_kwonlyargcount or code.co_posonlyargcount:
            hit = None
        else:
            params = ", ".join(list(names) + ([f"*{varargs}"] if varargs else []) + ([f"**{varkw}"] if varkw else []))
            body = [f"LOAD_FAST {names[0]}"] + ([] if code is _MODULE_CALL_CODE else ["LOAD_ATTR forward"])
            body += [f"LOAD_FAST {p}" for p in names[1:]] + [f"BUILD_LIST {len(names) - 1}"]
            if varargs:
                body += [f"LOAD_FAST {varargs}", "LIST_EXTEND 1"]
            body += [f"LOAD_FAST {varkw}", "CALL_EX 1"] if varkw else ["CALL_EX 0"]
            body += ["RETURN_VALUE"]
            text = f".func {code.co_name}({params})\n" + "".join(f"    {b}\n" for b in body) + ".end\n"
            hit = _C.assemble(text, code.co_filename).global_(code.co_name)
        _MODULE_CALLS[code] = hit
    return hit


# -- the residual as CPython code ---------------------------------------------

_CMP_OPS = {sym: i for i, sym in enumerate(dis.cmp_op)}
_NB = {sym: i for i, sym in enumerate(("+", "&", "//", "<<", "@", "*", "%", "|", "**", ">>", "-", "/", "^"))}


def build(code, info):
    if _C.fault_enabled("residual"):
        raise RuntimeError("kiln: injected fault at residual (KILN_FAULT)")
    if (code in _builtin_forwards() or code is _MODULE_CALL_CODE) and info["continuation"] is not None:
        # The trace ran kiln's module call, not this code: no offset of it
        # to go on from. CPython runs the frame; what it calls (hooks, a
        # forward) comes back to the hook as frames of their own.
        return f"{T.qualname(code)}: a break inside the module call kiln traced for it (CPython runs it)"
    try:
        builder = _Builder(code, info)
        return builder.code(), builder.tail_note
    except (Refused, B.StackMergeError) as e:
        return f"{T.qualname(code)}: {e}"


class _Builder:
    def __init__(self, code, info):
        self.orig = code
        self.info = info
        self.bc = B.decode(code)
        self.consts = list(code.co_consts)
        self.names = list(code.co_names)
        self.varnames = list(code.co_varnames)
        self._const_index = {}
        self._name_index = {}
        kbc_varnames = info["varnames"]
        self.local_slot = {}  # residual local index -> C's varnames index (new ones appended)
        for i, n in enumerate(kbc_varnames):
            if i < info["nlocals"] and n in code.co_varnames:
                self.local_slot[i] = code.co_varnames.index(n)
            else:
                self.local_slot[i] = self._temp(n.lstrip("_"))
        self._run_copies = []     # original instructions copied into the tail (slots to relayout)
        self.tail_note = None  # set when the frame's rest is the original's copy (explain shows it)
        self._closure_fixups = []  # (LOAD_CLOSURE, name): indexed once every local is known
        body = self.bc.instrs
        pro_end = _resume._prologue_end(self.bc)
        self.prologue = body[:pro_end + 1]
        self.body = body[pro_end + 1:]

    # constants and names appended to C's own tables, so every operand of
    # C's copied bytecode keeps its meaning
    def const(self, i):
        if i not in self._const_index:
            if self.info["const_is_code"][i]:
                raise Refused("the residual makes a function the trace created")
            made_in = self.info["code_globals"].get(i)
            if made_in is not None and made_in is not self.info["globals"]:
                # CPython's MAKE_FUNCTION takes the running frame's globals.
                raise Refused("the residual makes a function another module's code made")
            self._const_index[i] = len(self.consts)
            self.consts.append(self.info["consts"][i])
        return self._const_index[i]

    def new_const(self, value):
        self.consts.append(value)
        return len(self.consts) - 1

    def name(self, i):
        s = self.info["names"][i]
        if s not in self._name_index:
            if s in self.names:
                self._name_index[s] = self.names.index(s)
            else:
                self._name_index[s] = len(self.names)
                self.names.append(s)
        return self._name_index[s]

    def code(self):
        positions = self._positions()
        prefix = self._translate(positions)
        cont = self.info["continuation"]
        if cont is None:
            instrs = self.prologue + prefix
            exc = []
        else:
            try:
                resumed, why = self._resume(cont, positions), None
            except (Refused, _resume.ResumeError) as e:
                resumed, why = None, str(e)
            if resumed is None:
                # explain says so: nothing after the break in this frame is compiled.
                self.tail_note = (f"from line {positions.lineno} on, CPython runs the rest of the frame "
                                  f"({why}); the frames it calls are still compiled")
                _log.debug("%s: jumping into the original instead of a resume function: %s",
                           T.qualname(self.orig), why)
            if resumed is not None:
                instrs = self.prologue + prefix + resumed
                exc = []
            else:
                instrs = self.prologue + prefix + self._continue(cont, positions) + self.body
                exc = self.bc.exc_table
        old_names = B.localsplus_names(self.orig)
        new_names = B.new_localsplus(self.varnames, self.orig.co_cellvars, self.orig.co_freevars)
        B.relayout_locals(self.prologue + self.body + self._run_copies, old_names, new_names)
        for ins, name in self._closure_fixups:  # cells and frees sit after every local, the new ones too
            ins.arg = B.free_slot(new_names, name)
        bc = B.Bytecode(instrs, exc, self.orig)
        # The hook calls this code with the frame's bound parameters, all
        # positional: the *args tuple and **kwargs dict as themselves.
        c = self.orig
        nparams = c.co_argcount + c.co_kwonlyargcount + bool(c.co_flags & T.CO_VARARGS) + \
            bool(c.co_flags & T.CO_VARKEYWORDS)
        new = B.assemble(bc, co_consts=tuple(self.consts), co_names=tuple(self.names),
                         co_varnames=tuple(self.varnames), co_nlocals=len(self.varnames),
                         co_argcount=nparams, co_posonlyargcount=0, co_kwonlyargcount=0,
                         co_flags=c.co_flags & ~(T.CO_VARARGS | T.CO_VARKEYWORDS))
        if B.localsplus_names(new) != new_names:
            raise AssertionError(f"slot layout of kiln's code for {T.qualname(self.orig)} is not as built")
        return new

    def _positions(self):
        cont = self.info["continuation"]
        if cont is not None:
            target = self._target(cont)[0]
            return target.positions
        return T.Positions(self.orig.co_firstlineno, self.orig.co_firstlineno, None, None)

    def _target(self, cont):
        """(where CPython resumes, the frontend's stack kinds there, the
        instruction whose translation broke): the first two differ when a
        run of instructions that emit no KBC precedes it (kiln/_frontend.py's
        kbc_starts), which CPython re-runs."""
        starts = _frontend.translate(self.orig).kbc_starts
        start = starts.get(cont["pc"])
        if start is None:
            raise Refused("the break is inside the translation of one CPython instruction")
        offset, kinds, emitter = start
        return self.bc.at_offset(offset), kinds, self.bc.at_offset(emitter)

    def _continue(self, cont, pos):
        """The tail that jumps into the copy of C's bytecode at the breaking
        instruction, with C's locals and stack as the trace left them."""
        target, kinds, _ = self._target(cont)
        blocks = B.block_stacks(self.bc).get(target, ())  # (3.10's; none on 3.11+)
        out = self._store_live_locals(cont, pos) + self._push(_cpython_slots(kinds, cont["stack"]), pos, blocks)
        out += _to_bool(target.opname, pos)
        out.append(B.Instr("JUMP_FORWARD", target=target, positions=pos))
        return out

    def _store_live_locals(self, cont, pos):
        """The live locals from the residual's temporaries into C's own slots."""
        out = []
        for name, temp in zip(cont["live_names"], cont["live_temps"]):
            if name not in self.orig.co_varnames:
                raise Refused(f"live local {name!r} is not a plain local of the frame")
            out.append(B.Instr("LOAD_FAST", self.local_slot[temp], positions=pos))
            out.append(B.Instr("STORE_FAST", self.orig.co_varnames.index(name), positions=pos))
        return out

    def _push(self, slots, pos, blocks=()):
        """Push CPython's stack `slots` (and, 3.10, the frame's try and with
        `blocks` there: _resume.push_frame)."""
        loads = [None if temp < 0 else [self._load(temp, pos)] for _, temp in slots]
        try:
            return _resume.push_frame(loads, blocks, pos, self.const_index, self.name_index)
        except _resume.ResumeError as e:
            raise Refused(f"a break {e}") from None

    def const_index(self, value):
        """Where `value` is in the new co_consts (appended once)."""
        for i, x in enumerate(self.consts):
            if x is value:
                return i
        return self.new_const(value)

    def name_index(self, s):
        """Where name `s` is in the new co_names (appended once)."""
        if s not in self.names:
            self.names.append(s)
        return self.names.index(s)

    # -- after a break: run the breaking instruction, then a resume function --

    def _resume(self, cont, pos):
        """The tail that runs the breaking CPython instruction here, then
        calls the resume function (kiln/_resume.py) of the next instruction
        with the stack and live locals, so the rest of the frame is a frame
        of its own the hook traces again (Dynamo's resume functions).
        Refused when that shape does not apply (the break is inside a try or
        with block, whose handlers only the jump into the original keeps; the
        instruction is no plain one; its results are not plain values): the
        caller then jumps into a copy of the original."""
        target, kinds, brk = self._target(cont)
        instrs = self.bc.instrs
        start = instrs.index(target)
        emit = instrs.index(brk)
        if self.bc.handlers_of().get(brk) or self.bc.handlers_of().get(target):
            raise Refused("the break is inside a try or with block, whose handlers must see it")
        # A break inside a loop would make a resume function per iteration,
        # each called from the one before: the stack grows with the trip
        # count (RecursionError) and so does compile time. CPython runs the
        # loop's rest instead, as Dynamo skips such a frame.
        where = {ins: i for i, ins in enumerate(instrs)}
        if any(ins.target is not None and where.get(ins.target, len(instrs)) <= emit < i
               for i, ins in enumerate(instrs) if i > emit):
            raise Refused("the break is inside a loop, where a resume function per iteration would nest")
        pops = T.inputs(brk.opname, brk.arg)
        if pops is None:
            raise Refused(f"the breaking instruction {brk.opname} is not a plain one")
        shapes = self._shapes()
        before = shapes.get(brk)
        if before is None:
            raise Refused(f"the stack at {brk.opname} is not known")
        lower = len(before) - pops  # slots the breaking instruction leaves alone
        if lower < 0 or lower > len(kinds):
            raise Refused(f"the traced stack does not match CPython's at {brk.opname}")
        edges = [(instrs[emit + 1], False)] if brk.opcode not in _BRANCHES else \
            [(instrs[emit + 1], False), (brk.target, True)]
        for nxt, _ in edges:
            after = shapes.get(nxt)
            if after is None or any(k != "v" for k in after[lower:]):
                raise Refused(f"{brk.opname}'s results are not plain values")
        slots = _cpython_slots(kinds, cont["stack"])
        out = self._store_live_locals(cont, pos) + self._push(slots[lower:], pos)
        # (jump targets stay C's: the last one, a branch's, is retargeted below)
        run = _to_bool(target.opname, pos) + \
            [B.Instr(ins.opname, ins.arg, target=ins.target, positions=ins.positions) for ins in instrs[start:emit + 1]]
        self._run_copies += run
        out.extend(run)
        bound = set(cont["live_names"]) | {self.orig.co_varnames[i] for ins in run
                                            for effect, i in _resume.local_uses(ins) if effect == "store"}
        if len(edges) == 1:
            out.extend(self._call_resume(edges[0][0], slots[:lower], bound, pos))
        else:
            taken = self._call_resume(edges[1][0], slots[:lower], bound, pos)
            run[-1].target = taken[0]
            out.extend(self._call_resume(edges[0][0], slots[:lower], bound, pos) + taken)
        return out

    def _shapes(self):
        if not hasattr(self, "_shape_cache"):
            self._shape_cache = B.stack_analysis(self.bc, mark_lasti=True)
        return self._shape_cache

    def _call_resume(self, nxt, lower_slots, bound, pos):
        """With the instruction's results on the stack: calls the resume
        function at `nxt` with the untouched slots, the results and the
        bound live locals, and returns its result."""
        I = lambda name, arg=None: B.Instr(name, arg, positions=pos)  # noqa: E731
        expected = self._shapes()[nxt]
        results = len(expected) - len(lower_slots)
        live = [n for n in _resume.live_locals_at(self.orig, nxt.offset) if n in bound]
        kinds = []
        out = []
        # The results into temporaries (they are on top, the last first).
        res_temps = [self._temp(f"result{i}") for i in range(results)]
        for t in reversed(res_temps):
            out.append(I("STORE_FAST", t))
        args = []  # instructions pushing each argument
        i = 0
        while i < len(lower_slots):
            want = expected[i]
            kind, temp = lower_slots[i]
            if want == "N":
                kinds.append("N")
            elif want == "M":
                # A method pair, passed as a plain call's pair of the callable it stands for.
                kinds += T.CALL_PAIR
                meth, self_ = lower_slots[i][1], lower_slots[i + 1][1]
                if meth < 0 or self_ < 0:  # a NULL and the callable
                    args.append([self._load(max(meth, self_), pos)])
                else:                      # (function, self): the bound method
                    args.append([I("LOAD_CONST", self.new_const(_bind))] + _resume.null_beside(1, pos) +
                                [self._load(meth, pos), self._load(self_, pos)] + _call(2, pos))
                i += 1
            else:
                if temp < 0:
                    raise Refused("a NULL where the resumed frame has a value")
                kinds.append("v")
                args.append([self._load(temp, pos)])
            i += 1
        for t in res_temps:
            kinds.append("v")
            args.append([I("LOAD_FAST", t)])
        code = _resume.make_resume(self.orig, nxt.offset, kinds, live)
        info = _resume.resume_info(code)
        if info.freevars:
            for name in info.freevars:  # the frame's own cells and free variables, by name
                out += _emit(T.closure_load(0), pos)
                self._closure_fixups.append((out[-1], name))
            out.append(I("BUILD_TUPLE", len(info.freevars)))
            out.append(I("LOAD_CONST", self.new_const(code)))
            out += _emit(T.make_function(0x08, self.const_index(T.qualname(self.orig))), pos)
        else:
            # One function object for every call (the entry's globals are
            # this frame's): no MAKE_FUNCTION per call, and the hook finds
            # the same function again.
            out.append(I("LOAD_CONST", self.new_const(types.FunctionType(code, self.info["globals"]))))
        out += _resume.null_beside(1, pos)
        by_name = {n: [I("LOAD_FAST", self.orig.co_varnames.index(n))] for n in live}
        stack_args = iter(args)
        for p in info.params:
            out.extend(by_name[p] if p in by_name else next(stack_args))
        n = len(info.params)
        out += _call(n, pos) + [I("RETURN_VALUE")]
        return out

    def _temp(self, what):
        name = "___kiln" + what
        while name in self.varnames:
            name = "_" + name
        self.varnames.append(name)
        return len(self.varnames) - 1

    def _load(self, temp, pos):
        return B.Instr("LOAD_FAST", self.local_slot[temp], positions=pos)

    def _translate(self, pos):
        """The residual's KBC as CPython instructions (jumps resolved)."""
        kinstrs = self.info["instrs"]
        cont = self.info["continuation"]
        if cont is not None:
            kinstrs = kinstrs[:-2]  # LOAD_CONST None; RETURN_VALUE: the continuation goes there instead
        out, first = [], []
        jumps = []  # (Instr, KBC target index)
        for op, a, b, sym, line in kinstrs:
            first.append(len(out))
            p = T.Positions(line, line, None, None) if line > 0 else pos
            emitted = self._one(op, a, b, sym, p, jumps)
            out.extend(emitted)
        first.append(len(out))
        for ins, t in jumps:
            if first[t] >= len(out):
                raise Refused("a residual jump to its end")
            ins.target = out[first[t]]
        if T.FOR_ITER_SKIPS:
            for ins, _ in jumps:
                if ins.opname == "FOR_ITER":
                    self._end_for_before(out, ins)
        return out

    @staticmethod
    def _end_for_before(out, for_iter):
        """3.12+: FOR_ITER's jump names an END_FOR that it skips (3.13: and
        the POP_TOP after it). Put them before the loop's exit, which only
        the loop's back edge precedes (so nothing falls into them), and aim
        the jump at the first."""
        at = out.index(for_iter.target)
        if at == 0 or out[at - 1].opcode not in T.UNCONDITIONAL_JUMPS | T.TERMINATORS:
            raise Refused("a residual loop whose exit is reached by falling through")
        skipped = [B.Instr(name, positions=for_iter.positions) for name in T.FOR_ITER_SKIPS]
        out[at:at] = skipped
        for_iter.target = skipped[0]

    def _one(self, op, a, b, sym, p, jumps):
        I = lambda name, arg=None: B.Instr(name, arg, positions=p)  # noqa: E731
        if op == "LOAD_CONST":
            self._last_const = self.info["consts"][a]  # (a function's code, for MAKE_FUNCTION's qualname)
            return [I("LOAD_CONST", self.const(a))]
        if op in ("LOAD_FAST", "STORE_FAST", "DELETE_FAST"):
            slot = self.local_slot[a]
            if slot < len(self.orig.co_varnames) and self.orig.co_varnames[slot] in self.orig.co_cellvars:
                # A parameter a closure captures: after MAKE_CELL its slot
                # holds the cell (3.11 keeps a cell argument in its own
                # slot; 3.10 in a cell slot of its own, where the frame
                # moved the argument): its cell by name, as LOAD_DEREF reads it.
                ins = I(op.replace("FAST", "DEREF"), 0)
                self._closure_fixups.append((ins, self.orig.co_varnames[slot]))
                return [ins]
            return [I(op, slot)]
        if op == "MAKE_FUNCTION":
            # A closure the trace made, made again from its CPython code
            # (kiln/_frontend.py nested_codes; the constant is checked in
            # const()): KBC's flags are CPython's but the closure's bit, 4
            # here and 8 there (a code with annotations is never made here).
            return _emit(T.make_function((a & 3) | (8 if a & 4 else 0),
                                         self.const_index(self._nested_qualname(self._last_const))), p)
        if op in ("LOAD_DEREF", "STORE_DEREF", "LOAD_CLOSURE"):
            # The frame's own cells and free variables by name (their slots
            # are known once every temporary is: fixed up in code()); a cell
            # the trace made has no CPython form here.
            name = (list(self.info["cellvars"]) + list(self.info["freevars"]))[a]
            if name not in self.orig.co_cellvars and name not in self.orig.co_freevars:
                raise Refused(f"a closure cell the trace made ({name})")
            ins = _emit(T.closure_load(0), p)[0] if op == "LOAD_CLOSURE" else I(op, 0)
            self._closure_fixups.append((ins, name))
            return [ins]
        if op == "LOAD_GLOBAL":
            return [I("LOAD_GLOBAL", self.name(a) << T.NAME_ARG_SHIFTS.get("LOAD_GLOBAL", 0))]
        if op in ("LOAD_ATTR", "LOAD_METHOD"):
            return _emit(T.attribute(self.name(a), op == "LOAD_METHOD"), p)
        if op in ("STORE_ATTR", "DELETE_ATTR", "STORE_GLOBAL"):
            return [I(op, self.name(a))]
        if op in ("BUILD_LIST", "BUILD_TUPLE", "BUILD_SLICE", "LIST_EXTEND"):
            return [I(op, a)]
        if op in ("COPY", "SWAP"):
            return _emit(T.copy(a) if op == "COPY" else T.swap(a), p)
        if op == "BUILD_DICT":
            return [I("BUILD_MAP", a)]
        if op == "PUSH_NULL" and not T.CALL_TAKES_NULL:
            raise Refused("a residual NULL (CPython 3.10 has no PUSH_NULL)")
        if op in ("BINARY_SUBSCR", "STORE_SUBSCR", "GET_ITER", "POP_TOP", "RETURN_VALUE", "PUSH_NULL"):
            return [I(op)]
        if op == "BINARY_OP":
            return _emit(T.binary_op(_NB[sym], b), p)
        if op == "COMPARE_OP":
            if sym in _CMP_OPS:
                return [I("COMPARE_OP", T.compare(_CMP_OPS[sym]))]
            if sym in ("is", "is not"):
                return [I("IS_OP", int(sym == "is not"))]
            if sym in ("in", "not in"):
                return [I("CONTAINS_OP", int(sym == "not in"))]
            raise Refused(f"comparison {sym!r}")
        if op == "CALL":
            return self._call_n(a, p)
        if op == "CALL_METHOD":
            return _emit(T.call_method(a), p)
        if op in ("CALL_KW", "CALL_METHOD_KW"):
            names = self.info["consts"][b]
            if op == "CALL_METHOD_KW" and T.call_method is not T.call:
                # (3.10's CALL_METHOD has no keyword form; its compiler
                # loads the attribute for a keyword call)
                raise Refused("a residual keyword call of a method pair (CPython 3.10)")
            if op == "CALL_KW":
                # callable a1..an -> [NULL, callable, a1..an] needs the NULL
                # under the callable: pack, rotate, unpack isn't possible, so
                # call through a helper with one tuple.
                return [I("BUILD_TUPLE", a), I("LOAD_CONST", self.new_const(names)), I("BUILD_TUPLE", 3),
                        I("LOAD_CONST", self.new_const(_call_kw))] + _emit(T.swap(2), p) + self._call_with_tuple(p)
            return _emit(T.call_kw(a, self.new_const(tuple(names))), p)
        if op == "CALL_EX":
            return _resume.null_beside(2 + (a & 1), p) + [I("CALL_FUNCTION_EX", a & 1)]
        if op in ("JUMP", "POP_JUMP_IF_FALSE", "FOR_ITER"):
            name = {"JUMP": "JUMP_FORWARD", "POP_JUMP_IF_FALSE": T.JUMP_IF_FALSE, "FOR_ITER": "FOR_ITER"}[op]
            ins = B.Instr(name, 0, positions=p)
            jumps.append((ins, a))
            return _to_bool(name, p) + [ins]
        raise Refused(f"residual instruction {op}")

    def _nested_qualname(self, code):
        """The __qualname__ the original's MAKE_FUNCTION gives nested `code`
        (3.10, whose code objects have none; its name otherwise)."""
        if not isinstance(code, types.CodeType):
            raise Refused("the residual makes a function from no code constant")
        if hasattr(code, "co_qualname"):
            return code.co_qualname
        return nested_qualnames(instructions(self.orig)).get(id(code), code.co_name)

    def _call_n(self, n, p):
        if n == 0:
            return _resume.null_beside(1, p) + _call(0, p)
        return [B.Instr("BUILD_TUPLE", n, positions=p)] + self._call_with_tuple(p)

    def _call_with_tuple(self, p):
        """[f, args tuple] -> f(*args)."""
        return _resume.null_beside(2, p) + [B.Instr("CALL_FUNCTION_EX", 0, positions=p)]


# Instructions that may go either way: a resume function per edge.
_BRANCHES = T.JUMP_OPS - T.UNCONDITIONAL_JUMPS


_emit = _resume.emit


def _to_bool(opname, pos):
    """TO_BOOL before an instruction that reads a bool only (3.13), where
    kiln's code gives it a value the trace had: a tensor's truth, say."""
    return [B.Instr("TO_BOOL", positions=pos)] if opname in T.BOOL_OPERAND else []


def _call(n, pos):
    return _emit(T.call(n), pos)

def _cpython_slots(kinds, kbc_slots):
    """CPython's stack at a break, bottom first, as (kind, residual temp;
    -1 a NULL): the frontend's kinds there over the residual's KBC slots (a
    virtual NULL 'N' has none; KBC's method pair is (meth, self) or, for an
    attribute that is no method, (attr, NULL), which is 3.13's order too,
    where 3.11 and 3.12 have (NULL, attr))."""
    if "C" in kinds:
        # The local a 3.12 inlined comprehension saved sits on CPython's
        # stack: the resume would have to put it there and the
        # comprehension's own value in the local.
        raise Refused("a break inside a list, set or dict comprehension (CPython 3.12 inlines them)")
    if "X" in kinds or "K" in kinds:
        # (the frontend resumes before such runs: kbc_starts)
        raise Refused(f"a break between the parts of one CPython construct ({kinds})")
    if len(kbc_slots) != sum(1 for k in kinds if k != "N"):
        raise Refused(f"the traced stack ({len(kbc_slots)} slots) is not CPython's ({kinds})")
    it = iter(kbc_slots)
    out = []
    i = 0
    while i < len(kinds):
        k = kinds[i]
        if k == "N":
            out.append(("N", -1))
        elif k == "M":
            meth, self_ = next(it), next(it)
            null_first = self_ < 0 and T.CALL_PAIR[0] == "N"
            out += [("M", -1), ("S", meth)] if null_first else [("M", meth), ("S", self_)]
            i += 1
        else:
            t = next(it)
            if t < 0:
                raise Refused("a NULL where CPython has a value")
            out.append((k, t))
        i += 1
    return out


def _bind(meth, self_):
    """LOAD_METHOD's (function, self) pair as the bound method a call of it stands for."""
    return types.MethodType(meth, self_)


def _call_kw(fn, values, names):
    """fn called with `values`, the last len(names) of them by keyword."""
    n = len(values) - len(names)
    return fn(*values[:n], **dict(zip(names, values[n:])))

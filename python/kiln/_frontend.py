"""The Python frontend: CPython bytecode (3.10 to 3.13) -> KBC text.

`translate(fn_or_code)` turns one Python function (its code object, read
with `dis`) into KBC text (docs/kbc.md) that kiln's VM and tracer run with
exactly CPython's results. A code object is translated once; the result (or
the reason it cannot be translated) is cached for the code object's life.

What the translation is
-----------------------
One `.func` named like the function (`<lambda>` becomes `_lambda_`), plus
one `.func` for every code object it creates at run time (nested defs,
lambdas, comprehensions), named `PARENT__CHILD` (`f__g`, `f__listcomp`,
`f__lambda_2`), so several translations can share one program. Nested
functions stay functions, made by MAKE_FUNCTION exactly where CPython makes
them; in particular a 3.11 comprehension is a nested code object called
once with its iterator, and so is its translation (its own scope, its `.0`
argument, cells for closures over the loop variable all come for free, and
the tracer inlines the call anyway).

How the stack is mapped
-----------------------
CPython's and KBC's stacks hold the same values in the same order except
for the NULL that 3.11 pushes below a callable (PUSH_NULL, the low bit of
LOAD_GLOBAL). KBC's CALL has no NULL, so the NULL is *virtual*: it is kept
in the translator's abstract stack and never emitted. The abstract stack is
computed by a data-flow pass over CPython's control-flow graph (3.11's
compiler gives every instruction one stack shape; a merge of two different
shapes is refused, not guessed). Each slot has a kind:

  v  a value                       N  the virtual NULL (no KBC slot)
  M  LOAD_METHOD's first slot      S  LOAD_METHOD's second slot

Depth operands (COPY, SWAP, LIST_APPEND, ...) are recounted without the
virtual NULLs. CALL n then picks the KBC form from the two slots under the
arguments: `N v` is CALL n, `M S` (LOAD_METHOD) is CALL_METHOD n, `v v` (a
callable and its first argument, as 3.11 calls comprehensions and
AssertionError) is CALL n+1; a pending KW_NAMES makes them CALL_KW /
CALL_METHOD_KW. An instruction meeting any other kind where it expects a
value is Untranslatable: the invariant is that every emitted instruction
sees the very values CPython's would.

Jumps become labels `L<offset>` (CPython's byte offset of the target);
labels the translator makes itself are `X<offset>_<what>`. FOR_ITER and the
conditional jumps have the same stack effects in both bytecodes; 3.11's
forward/backward variants all become the one KBC opcode.

Where KBC has no opcode, a short exact sequence replaces it: MAP_ADD is a
STORE_SUBSCR into the dict fetched with COPY, DICT_UPDATE calls
`dict.update`, LIST_TO_TUPLE calls `tuple`, UNPACK_EX slices a list copy
(after CPython's length check). FORMAT_VALUE, DICT_MERGE, BUILD_SET, SET_ADD,
SET_UPDATE and LOAD_ASSERTION_ERROR have KBC opcodes of the same meaning
(so an f-string or an assert never reads a global a program may rebind),
a frozenset constant (`x in {"a", "b"}`) is a KBC frozenset literal, and
positional-only parameters keep their `/` in the `.func` header. Names these sequences read from the builtins are listed in
`Translation.builtins_required`: a program that rebinds them would change
their meaning.

The opcode table
----------------
`_ROWS` (kiln/_frontend_opcodes.py) has one row per CPython opcode the
frontend translates: the translation of one instruction on the abstract
stack, and CPython's stack effect on each edge as a function of the oparg.
The tests check every row's effect against `dis.stack_effect`, and `_step`
checks each translation against its row (under the tests, or
KILN_FRONTEND_CHECKS=1: `CHECK_ROWS`), so adding an opcode is adding a
row (the `_row` decorator).

Exceptions
----------
KBC shares CPython 3.11's exception model, so try/except/else/finally and
with translate one to one: PUSH_EXC_INFO, POP_EXCEPT, CHECK_EXC_MATCH,
RERAISE, BEFORE_WITH, WITH_EXCEPT_START and RAISE_VARARGS (0, 1 or 2
operands) keep their names, and `co_exceptiontable` (read as dis reads it)
becomes `.except` rows: one per run of emitted instructions with the same
handler, bounded by labels `X<offset>_exc`, the depth recounted without
virtual NULLs. The flow pass follows the exception edges too: a handler's
stack is the protected instruction's, cut to the row's depth, then lasti
(if the row says so) and the exception. CPython 3.10 has a block stack
instead of the table: the flow pass follows it (`_follow_blocks`), each
block on top becomes a row (`_row_key`), and a handler's six exception
slots are KBC's two (kiln/_frontend_opcodes.py, `_EXCEPTION_SLOTS`;
docs/architecture.md "CPython versions"). `except*` (exception groups) and
`async with` are refused.

Lines: `.firstline` is `co_firstlineno`, `.line N` precedes the first KBC
instruction of every change of source line, and programs assembled with
`Translation.filename` give tracebacks pointing at the user's file and line.

What is left to CPython
-----------------------
except* (exception groups), async with, `yield from` and values sent into
a generator, async functions, `match` with sequence, mapping or
class patterns, imports, class bodies, `del` of globals and cells,
constants KBC cannot spell (ints beyond 64 bits, bytes, complex,
and tuples or frozensets holding them), non-ASCII names, entry
defaults that are not constants, and any opcode without a row in `_ROWS`: `translate` raises Untranslatable naming the
construct and the user's line, and logs it on the `kiln.frontend` logger.
"""
from __future__ import annotations

import bisect
import dis
import functools
import inspect
import logging
import math
import os
import re
import sys
import types
import weakref
from dataclasses import dataclass

# The opcode table: one row per opcode, and the kinds of abstract-stack slots.
from . import _bytecode_tables as T
from ._instructions import instructions, nested_qualnames
from ._frontend_opcodes import _NULL_PAIR, _ROWS, _VALUE, _is_virtual, require as _opcodes_require, saved_local
from . import _frontend_opcodes_v310  # noqa: F401,E402  (registers 3.10's rows into _ROWS)

__all__ = ["Translation", "Untranslatable", "translate"]

_log = logging.getLogger("kiln.frontend")

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# (dis's lists as a set: _emit asks of every instruction)
_JUMP_OPCODES = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
# The characters a KBC string literal escapes, and those it cannot hold (a
# lone surrogate has no UTF-8 form): _string_literal's slow path.
_STRING_SPECIAL = re.compile(r'[\x00-\x1f\x7f"\\\ud800-\udfff]')
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

_CO_GENERATOR = inspect.CO_GENERATOR
_CO_ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
_CO_VARARGS = inspect.CO_VARARGS
_CO_VARKEYWORDS = inspect.CO_VARKEYWORDS

# Whether _step checks every translation against its row's declared stack
# effect. Off by default: it is a check of kiln's own table, which every
# translation in the test suite makes (tests/python/conftest.py turns it
# on), not of the program; KILN_FRONTEND_CHECKS=1 turns it on elsewhere.
CHECK_ROWS = os.environ.get("KILN_FRONTEND_CHECKS") == "1"

# Opcodes KBC cannot express, with the construct a user would recognise.
_UNSUPPORTED = {
    "GET_LEN": "match statement",
    "MATCH_MAPPING": "match statement",
    "MATCH_SEQUENCE": "match statement",
    "MATCH_KEYS": "match statement",
    "MATCH_CLASS": "match statement",
    "IMPORT_STAR": "import statement (from x import *)",
    "LOAD_BUILD_CLASS": "class definition",
    "LOAD_CLASSDEREF": "class body",
    "LOAD_NAME": "module or class body",
    "STORE_NAME": "module or class body",
    "DELETE_NAME": "module or class body",
    "SETUP_ANNOTATIONS": "module or class body",
    "PRINT_EXPR": "interactive statement",
    "DELETE_GLOBAL": "del of a global (KBC has no DELETE_GLOBAL)",
    "DELETE_DEREF": "del of a closure variable (KBC has no DELETE_DEREF)",
    "GET_YIELD_FROM_ITER": "yield from (a generator delegating to another)",
    "SEND": "yield from or await (a value sent into a generator)",
    "END_SEND": "yield from or await (a value sent into a generator)",
    "CLEANUP_THROW": "yield from or await (a value sent into a generator)",
    "GET_AWAITABLE": "await (a coroutine)",
    "GET_AITER": "async for loop",
    "GET_ANEXT": "async for loop",
    "END_ASYNC_FOR": "async for loop",
    "BEFORE_ASYNC_WITH": "async with statement",
    "ASYNC_GEN_WRAP": "async generator",
    "CHECK_EG_MATCH": "except* (exception groups)",
    "PREP_RERAISE_STAR": "except* (exception groups)",
    "LOAD_LOCALS": "class body",
    "LOAD_FROM_DICT_OR_DEREF": "class body",
    "LOAD_FROM_DICT_OR_GLOBALS": "class body or type parameter scope",
}

# 3.10's own opcodes KBC cannot express (its try and with blocks are rows:
# kiln/_frontend_opcodes.py).
_UNSUPPORTED_310 = {
    "SETUP_ASYNC_WITH": "async with statement",
    "YIELD_FROM": "yield from or await (a value sent into a generator)",
    "COPY_DICT_WITHOUT_KEYS": "match statement",
}
if sys.version_info[:2] == (3, 10):
    _UNSUPPORTED.update(_UNSUPPORTED_310)

# Opcodes a code object's co_code never holds: dis drops CACHE units, and
# the rest are the interpreter's own (sys.monitoring's INSTRUMENTED_*
# copies, which co_code shows as the originals; the entry frame's
# INTERPRETER_EXIT; the placeholder RESERVED; 3.13's EXIT_INIT_CHECK, of
# the shim frame that runs a specialized class call's __init__; the
# JIT's ENTER_EXECUTOR). The tests check that every opcode of the running
# CPython is a row, a refusal above, or one of these.
NEVER_IN_CO_CODE = ("CACHE", "INSTRUMENTED_", "INTERPRETER_EXIT", "RESERVED", "ENTER_EXECUTOR", "EXIT_INIT_CHECK")


class Untranslatable(Exception):
    """A function uses a construct KBC cannot express; CPython runs it."""

    def __init__(self, reason: str, filename: str, lineno: int):
        super().__init__(f"{filename}:{lineno}: {reason}")
        self.reason = reason
        self.filename = filename
        self.lineno = lineno


@dataclass(frozen=True, eq=False)
class Translation:
    """The KBC of one Python function and what a caller needs to run it."""

    name: str  # KBC name of the entry function
    text: str  # its .func, then the .func of every nested code object
    filename: str  # co_filename: assemble the text under this name
    firstlineno: int  # co_firstlineno of the entry function
    lines: tuple  # the source lines the entry function's instructions carry
    functions: tuple  # KBC names of every .func of `text`, entry first
    globals_used: tuple  # names read by LOAD_GLOBAL, in first-use order
    globals_stored: tuple  # names written by STORE_GLOBAL
    builtins_required: tuple  # builtins the translator's own sequences call
    freevars: tuple  # the entry function's free variables (KBC names)
    cellvars: tuple  # its cell variables (KBC names)
    # Where CPython can take over the entry function at a KBC instruction:
    # {KBC index: (CPython byte offset, abstract stack kinds there)} for the
    # first KBC instruction of each CPython instruction's translation
    # (kiln/_frames.py continues a frame after a graph break from it).
    kbc_starts: dict
    # {KBC name: CPython code} of the nested functions whose MAKE_FUNCTION
    # carries no annotations: a residual that makes one of them again (a
    # closure alive across a break) makes it from this code on CPython.
    nested_codes: dict = None


def translate(fn_or_code, *, own_defaults=False) -> Translation:
    """The cached KBC translation of a function, method or code object.

    A function's literal defaults go into the entry `.func` header (a code
    object has none); defaults a header cannot spell are Untranslatable,
    unless `own_defaults`: the caller makes the KBC function with the
    function's own default objects (kiln/_functions.py, through
    make_kbc_function, which replaces every default the header gives), so
    the header only marks such a parameter as having one (`=None`).
    """
    _opcodes_require()
    if inspect.ismethod(fn_or_code):
        fn_or_code = fn_or_code.__func__
    if isinstance(fn_or_code, types.FunctionType):
        code, fn = fn_or_code.__code__, fn_or_code
    elif isinstance(fn_or_code, types.CodeType):
        code, fn = fn_or_code, None
    else:
        raise TypeError(f"translate() expects a function or a code object, not {type(fn_or_code).__name__}")

    entry = _cache.get(id(code))
    if entry is None or entry[0]() is not code:
        try:
            result = _Program(code).finish()
        except Untranslatable as exc:
            # Kept as plain data: a cached exception's traceback would keep
            # the code object (and the translator) alive.
            result = (exc.reason, exc.filename, exc.lineno)
            _log.info("leaving %s to CPython: %s", fn.__qualname__ if fn is not None else T.qualname(code), exc)
        entry = (weakref.ref(code, lambda _, key=id(code): _cache.pop(key, None)), result, {})
        _cache[id(code)] = entry
    _, compiled, by_header = entry
    if isinstance(compiled, tuple):
        raise Untranslatable(*compiled)

    try:
        header = compiled.header(fn, own_defaults)
    except Untranslatable as exc:
        _log.info("leaving %s to CPython: %s", fn.__qualname__ if fn is not None else T.qualname(code), exc)
        raise
    translation = by_header.get(header)
    if translation is None:
        translation = compiled.translation(header)
        by_header[header] = translation
    return translation


# id(code) -> (weakref to code, _Compiled or the Untranslatable's arguments,
#              {entry header: Translation})
_cache: dict = {}


@functools.lru_cache(maxsize=4096)
def _kbc_depth(kinds: tuple) -> int:
    """How many KBC slots CPython's slots `kinds` are (the virtual ones have none).
    (Cached: _emit asks it of the stack under every protected instruction.)"""
    return sum(1 for kind in kinds if not _is_virtual(kind))


def _kinds(state) -> str:
    """An abstract stack as kiln/_frames.py reads it: one letter a slot
    (a comprehension's saved local, "C" + name, is "C")."""
    text = "".join(state)
    if len(text) == len(state):  # every kind is one letter (all but 3.12+ comprehensions)
        return text
    return "".join(kind[0] for kind in state)


def _instruction_count(lines) -> int:
    """How many of the KBC `lines` are instructions (not labels or directives)."""
    n = 0
    for text in lines:
        if not (text.endswith(":") or text.startswith("  .")):
            n += 1
    return n


def _ident(name: str) -> str:
    """A function name as a KBC identifier: `<lambda>` -> `_lambda_`."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "_" + out if not out or out[0].isdigit() else out


def _string_literal(s: str) -> str | None:
    if not _STRING_SPECIAL.search(s):
        return '"' + s + '"'  # nothing to escape (most strings)
    out = []
    for ch in s:
        o = ord(ch)
        if 0xD800 <= o <= 0xDFFF:
            return None  # a lone surrogate has no UTF-8 form
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _literal(value) -> str | None:
    """The KBC literal for a constant, or None when KBC cannot spell it."""
    if value is None or isinstance(value, bool) or value is Ellipsis:
        return repr(value)
    if type(value) is int:
        return str(value) if _INT64_MIN <= value <= _INT64_MAX else None
    if type(value) is float:
        if math.isnan(value):
            return "-nan" if math.copysign(1.0, value) < 0 else "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if type(value) is str:
        return _string_literal(value)
    if type(value) is tuple:
        items = [_literal(v) for v in value]
        if any(i is None for i in items):
            return None
        return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    if type(value) is frozenset:
        items = [_literal(v) for v in value]
        if any(i is None for i in items):
            return None
        # The items in table order, when adding them in that order rebuilds
        # this table (CPython's frozenset() adds as KBC's assembler does);
        # else the table itself: the order of every set made from it
        # depends on where each item sits (kiln/runtime/value/value.h SetObj).
        from . import _C
        size, active, dummies = _C._set_slots(value)
        rsize, ractive, rdummies = _C._set_slots(frozenset(list(value)))
        if (rsize, rdummies) == (size, dummies) and len(ractive) == len(active) and all(
                i == j and a is b for (i, a), (j, b) in zip(active, ractive)):
            return "frozenset({" + ", ".join(items) + "})" if items else "frozenset()"
        entries = [(i, _literal(v)) for i, v in active] + [(j, "dummy") for j in dummies]
        return f"frozenset[{size}]({{" + ", ".join(f"{i}: {text}" for i, text in sorted(entries)) + "})"
    return None


def _describe_constant(value) -> str:
    if type(value) is int:
        return f"integer constant {value} outside KBC's 64-bit range"
    if type(value) is str:
        return "string constant with a lone surrogate"
    if type(value) in (tuple, frozenset):
        bad = next(v for v in value if _literal(v) is None)
        return f"{type(value).__name__} constant holding a {_describe_constant(bad)}"
    return f"constant of type {type(value).__name__} (KBC cannot spell it)"


class _Compiled:
    """A translated code object, before the entry header's defaults.

    It holds no reference to the code object, so the cache entry goes when
    the code does.
    """

    def __init__(self, program: "_Program"):
        code, f = program.code, program.entry
        self.filename, self.firstlineno, self.argcount = code.co_filename, code.co_firstlineno, code.co_argcount
        self.name, self.body, self.lines = f.name, f.body, tuple(sorted(f.lines))
        self.positional, self.kwonly, self.varargs, self.varkw = f.positional, f.kwonly, f.varargs, f.varkw
        self.posonly = code.co_posonlyargcount
        self.code_name = code.co_name
        self.freevars, self.cellvars = f.freevars, f.cellvars
        self.nested_text = "".join(g.text for g in program.funcs[1:])
        self.functions = tuple(g.name for g in program.funcs)
        self.globals_used = tuple(program.globals_used)
        self.globals_stored = tuple(program.globals_stored)
        self.builtins_required = tuple(program.builtins_required)
        self.kbc_starts = f.kbc_starts
        self.nested_codes = {g.name: g.code for g in program.funcs[1:] if id(g.code) not in program.annotated}

    def header(self, fn, own_defaults=False) -> str:
        """The entry's `.func NAME(PARAMS)` line with fn's literal defaults."""
        defaults = (fn.__defaults__ or ()) if fn is not None else ()
        kwdefaults = (fn.__kwdefaults__ or {}) if fn is not None else {}
        first_default = self.argcount - len(defaults)
        params = []
        for i, name in enumerate(self.positional):
            value = defaults[i - first_default] if i >= first_default else _NO_DEFAULT
            params.append(self._param(name, value, own_defaults))
            if i + 1 == self.posonly:
                params.append("/")
        if self.varargs is not None:
            params.append("*" + self.varargs)
        elif self.kwonly:
            params.append("*")
        params += [self._param(n, kwdefaults.get(n, _NO_DEFAULT), own_defaults) for n in self.kwonly]
        if self.varkw is not None:
            params.append("**" + self.varkw)
        head = f".func {self.name}({', '.join(params)})\n"
        if _QUALNAME_IN_HEADER:  # 3.10: the function's, which its code does not have
            qualname = fn.__qualname__ if fn is not None else self.code_name
            if qualname != self.name:
                head += f"  .qualname {qualname}\n"
        return head

    def _param(self, name, value, own_defaults) -> str:
        if value is _NO_DEFAULT:
            return name
        lit = _literal(value)
        if lit is None and own_defaults:
            lit = "None"  # a mark only: the KBC function gets the function's own object
        if lit is None:
            raise Untranslatable(
                f"default of parameter '{name}' is a {type(value).__name__}, which a KBC .func header cannot hold",
                self.filename, self.firstlineno)
        return f"{name}={lit}"

    def translation(self, header: str) -> Translation:
        return Translation(
            name=self.name, text=header + self.body + self.nested_text, filename=self.filename,
            firstlineno=self.firstlineno, lines=self.lines, functions=self.functions,
            globals_used=self.globals_used, globals_stored=self.globals_stored,
            builtins_required=self.builtins_required, freevars=self.freevars, cellvars=self.cellvars,
            kbc_starts=self.kbc_starts, nested_codes=self.nested_codes)


_NO_DEFAULT = object()
# 3.10's code objects have no qualified name: the entry's comes from the
# function the translation is for, in the per-function header.
_QUALNAME_IN_HEADER = T.VERSION == (3, 10)


class _Program:
    """The entry code object and every nested code object it makes."""

    def __init__(self, code: types.CodeType):
        self.code = code
        self.funcs: list[_Function] = []
        self.by_code: dict[int, _Function] = {}
        self.taken: set[str] = set()
        self.globals_used: list[str] = []
        self.globals_stored: list[str] = []
        self.builtins_required: list[str] = []
        self.annotated: set[int] = set()  # id() of nested codes a MAKE_FUNCTION gives annotations
        self.qualnames: dict[int, str] = {}  # id() of a nested code -> the name 3.10's MAKE_FUNCTION gives it
        self.entry = self.function(code, _ident(code.co_name))

    def function(self, code: types.CodeType, name: str) -> "_Function":
        """The translated function of `code` (translated on first request)."""
        done = self.by_code.get(id(code))
        if done is not None:
            return done
        unique, n = name, 1
        while unique in self.taken:
            n += 1
            unique = f"{name}_{n}"
        self.taken.add(unique)
        f = _Function(self, code, unique)
        self.by_code[id(code)] = f
        self.funcs.append(f)  # before translating: nested ones follow their parent
        f.translate()
        return f

    def use_global(self, name: str, stored: bool = False):
        names = self.globals_stored if stored else self.globals_used
        if name not in names:
            names.append(name)

    def use_builtin(self, name: str):
        if name not in self.builtins_required:
            self.builtins_required.append(name)

    def finish(self) -> _Compiled:
        return _Compiled(self)


class _Function:
    """The translation of one code object into one `.func` block."""

    def __init__(self, program: _Program, code: types.CodeType, name: str):
        self.program = program
        self.code = code
        self.name = name
        self.genexpr = bool(code.co_flags & _CO_GENERATOR) and code.co_name == "<genexpr>"
        # A generator function (`yield` in a def): a `.generator` KBC
        # function whose YIELD_VALUE suspends it. Only the tracer runs it,
        # lazily, one item per step of its consumer (interpreter/
        # generator_frame.h); its `yield` always resumes with None.
        self.generator = bool(code.co_flags & _CO_GENERATOR) and not self.genexpr
        self.filename = code.co_filename
        self.line = code.co_firstlineno
        self.lines: set[int] = set()
        self.body = ""
        self.text = ""

    # -- errors --------------------------------------------------------------

    def fail(self, reason: str, lineno: int | None = None):
        raise Untranslatable(reason, self.filename, lineno or self.line)

    # -- names ---------------------------------------------------------------

    def _names(self):
        """KBC names for the locals and cells; parameters keep theirs."""
        code = self.code
        every = set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
        self.rename = {}
        for name in (*code.co_varnames, *code.co_cellvars, *code.co_freevars):
            if name in self.rename:
                continue
            if _IDENT.match(name):
                self.rename[name] = name
            elif re.fullmatch(r"\.\d+", name):
                # The hidden `.0` argument of a comprehension: positional only in practice.
                kbc = "_dot" + name[1:]
                while kbc in every:
                    kbc += "_"
                every.add(kbc)
                self.rename[name] = kbc
            else:
                self.fail(f"name '{name}' is not an ASCII identifier (KBC names are)", code.co_firstlineno)
        nargs = code.co_argcount + code.co_kwonlyargcount
        args = [self.rename[n] for n in code.co_varnames[:nargs]]
        self.positional = args[:code.co_argcount]
        self.kwonly = args[code.co_argcount:]
        i = nargs
        self.varargs = self.varkw = None
        if code.co_flags & _CO_VARARGS:
            self.varargs = self.rename[code.co_varnames[i]]
            i += 1
        if code.co_flags & _CO_VARKEYWORDS:
            self.varkw = self.rename[code.co_varnames[i]]
            i += 1
        self.locals = [self.rename[n] for n in code.co_varnames[i:]]
        self.cellvars = tuple(self.rename[n] for n in code.co_cellvars)
        self.freevars = tuple(self.rename[n] for n in code.co_freevars)
        self.temp = None  # a scratch local for UNPACK_EX, declared on first use
        self.shadows = {}  # (name, depth) -> the KBC local of a 3.12 inlined comprehension's variable
        self.shadowed_cells = set()      # cells a 3.12 inlined comprehension saves (LOAD_FAST_AND_CLEAR)
        self.cells_used_outside = set()  # cells read or written where no comprehension shadows them
        # A generator expression is translated as the list of what it yields,
        # made when it is called, and an iterator over it (RETURN_GENERATOR,
        # YIELD_VALUE and RETURN_VALUE's rows): the tracer inlines it only
        # when its body has no effect, so making the items at once is what
        # CPython's lazy generator gives (interpreter/translator_invoke.cpp).
        self.gen_items = None
        if self.genexpr:
            self.gen_items = "_genexpr_items"
            while self.gen_items in set(self.rename.values()):
                self.gen_items += "_"

    def local(self, name: str, st) -> str:
        """The KBC local for CPython local `name` with abstract stack `st`:
        inside a 3.12 inlined comprehension that binds the name (its saved
        slot, "C" + name, on the stack), a local of the comprehension's own,
        one per nesting depth; otherwise the local's own KBC name."""
        if not self.saves_locals:
            return self.rename[name]
        depth = sum(1 for kind in st if saved_local(kind) == name)
        if not depth:
            return self.rename[name]
        key = (name, depth)
        if key not in self.shadows:
            taken = set(self.rename.values()) | set(self.shadows.values())
            kbc = f"{self.rename[name]}_comp{depth}"
            while kbc in taken:
                kbc += "_"
            self.shadows[key] = kbc
        return self.shadows[key]

    def scratch(self) -> str:
        if self.temp is None:
            taken = set(self.rename.values())
            self.temp = "_unpack"
            while self.temp in taken:
                self.temp += "_"
        return self.temp

    def name_operand(self, name: str) -> str:
        if not _IDENT.match(name):
            self.fail(f"name '{name}' is not an ASCII identifier (KBC names are)")
        return name

    # -- refusals that concern the whole function ----------------------------

    def _check_function(self):
        code = self.code
        first = code.co_firstlineno
        if code.co_flags & _CO_ASYNC:
            self.fail("async function", first)
        ops = {i.opname for i in self.instrs}
        # Only LOAD_FAST_AND_CLEAR (3.12+) pushes a saved local ("C" + name):
        # without one, `local` need not look through the stack.
        self.saves_locals = "LOAD_FAST_AND_CLEAR" in ops
        if ops & {"CHECK_EG_MATCH", "PREP_RERAISE_STAR"}:
            line = next(i.positions.lineno for i in self.instrs if i.opname in ("CHECK_EG_MATCH", "PREP_RERAISE_STAR"))
            self.fail("except* (exception groups)", line)
        if ops & {"BEFORE_ASYNC_WITH", "SETUP_ASYNC_WITH"}:
            self.fail("async with statement", first)
        block = next((i for i in self.instrs if i.opname in _UNSUPPORTED_310 and sys.version_info[:2] == (3, 10)),
                     None)
        if block is not None:
            self.fail(_UNSUPPORTED_310[block.opname], block.positions.lineno)

    # -- the translation -----------------------------------------------------

    def translate(self):
        self.instrs = instructions(self.code)
        self._check_function()
        self._names()
        self.index = {ins.offset: k for k, ins in enumerate(self.instrs)}
        # CPython 3.11's exception table, as dis reads it: byte ranges
        # [start, end) -> handler, stack depth, lasti; they do not overlap.
        # (3.10 has none: its handlers are refused above, _UNSUPPORTED_310.)
        self.handlers = dis._parse_exception_table(self.code) if getattr(self.code, "co_exceptiontable", b"") else []
        if self.generator or self.genexpr:
            # 3.12 guards a generator's whole body with a handler that turns
            # a StopIteration into RuntimeError (PEP 479); 3.11 does that in
            # C, and so does the KBC generator's consumer: the row goes.
            by_offset = {ins.offset: ins for ins in self.instrs}
            self.handlers = [h for h in self.handlers if not (
                by_offset[h.target].opname == "CALL_INTRINSIC_1"
                and dis._intrinsic_1_descs[by_offset[h.target].arg] == "INTRINSIC_STOPITERATION_ERROR")]
        self.handler_at = self._handlers_by_instruction()
        self.kwnames = self._pair_kw_names()
        if T.VERSION == (3, 10):  # (its code objects have no qualified name)
            self.program.qualnames.update(nested_qualnames(self.instrs))
        # 3.10: where an exception enters a handler (a SETUP_*'s target),
        # and the handlers whose cleanup the translation needs.
        self.handler_starts = {ins.argval for ins in self.instrs if ins.opcode in T.BLOCK_SETUPS}
        self.cleanups = set()
        states = self._flow()
        self._emit(states)
        both = self.shadowed_cells & self.cells_used_outside
        if both:
            self.fail(f"a variable ({', '.join(sorted(both))}) that a closure inside a comprehension captures and "
                      "code outside it uses too (CPython 3.12 inlines the comprehension)")

    def _pair_kw_names(self) -> dict:
        """CALL index -> its KW_NAMES tuple (3.11 emits KW_NAMES, PRECALL,
        CALL; 3.12 KW_NAMES, CALL; 3.13 the tuple as a constant, CALL_KW)."""
        pairs = {}
        for k, ins in enumerate(self.instrs):
            if ins.opname in ("CALL_KW", "CALL_FUNCTION_KW"):
                prev = self.instrs[k - 1]
                if prev.opname != "LOAD_CONST" or not isinstance(prev.argval, tuple):
                    self.fail("CALL_KW without its keyword names constant", ins.positions.lineno)
                pairs[k] = prev.argval
            if ins.opname != "KW_NAMES":
                continue
            j = k + 1
            while j < len(self.instrs) and self.instrs[j].opname == "PRECALL":
                j += 1
            if j == len(self.instrs) or self.instrs[j].opname != "CALL":
                self.fail("KW_NAMES not followed by CALL", ins.positions.lineno)
            pairs[j] = self.code.co_consts[ins.arg]
        return pairs

    def _flow(self) -> dict:
        """The abstract stack at the entry of every reachable instruction."""
        # (3.10: a generator's frame starts with a value, which GEN_START pops)
        states = {0: ("X",) * len(T.entry_shape(self.code))}
        # 3.10: the frame's block stack before each instruction
        # (T.block_transfer: handlers by offset); {} on 3.11+.
        self.blocks = {0: ()} if self.handler_starts else {}
        # Each instruction is stepped once, here: a state, once set, never
        # changes (_join refuses any other), so the KBC a step emits is the
        # text _emit lays out, kept in self.steps[k].
        self.steps = {}
        work = [0]
        while work:
            k = work.pop()
            self.steps[k] = text = []
            fall, jump = self._step(k, list(states[k]), text)
            succs = []
            if fall is not None:
                succs.append((k + 1, fall))
            if jump is not None:
                succs.append((self.index[self.instrs[k].argval], jump))
            if self.blocks:
                self._follow_blocks(k, len(states[k]), fall, jump)
            h = self._handler(k)
            if h is not None:
                # Any instruction may raise: its handler gets the stack cut
                # to the row's depth, then lasti (if asked), then the exception.
                entry = states[k]
                if h.depth > len(entry):
                    self.fail("exception handler deeper than the stack", self.instrs[k].positions.lineno)
                succs.append((self.index[h.target], list(entry[:h.depth]) + ["v"] * (1 + h.lasti)))
            for s, st in succs:
                if s >= len(self.instrs):
                    self.fail("execution falls off the end of the code", self.instrs[k].positions.lineno)
                st = tuple(st)
                old = states.get(s)
                if old is not None:
                    st = self._join(old, st, self.instrs[s])
                    if st == old:
                        continue
                states[s] = st
                work.append(s)
        return states

    def _follow_blocks(self, k, depth, fall, jump):
        """3.10: carry the block stack before instruction k to its
        successors (the compiler pops every block a jump leaves, so paths
        meet with equal block stacks)."""
        ins = self.instrs[k]
        before = self.blocks[k]
        try:
            moved = T.block_transfer(ins.opcode, before, depth, ins.argval)
        except ValueError as e:
            self.fail(f"unexpected block stack ({e})", ins.positions.lineno)
        for s, stack, taken in ((k + 1, fall, False), (self.index.get(ins.argval), jump, True)):
            if stack is None:
                continue
            after = before if moved is None else moved[1] if taken else moved[0]
            old = self.blocks.setdefault(s, after)
            if old != after:
                self.fail(f"block stacks differ where two paths meet at {self.instrs[s].opname}",
                          self.instrs[s].positions.lineno)

    def _row_key(self, k, st):
        """The KBC exception-table row covering instruction k: (handler
        label, KBC depth, lasti) or None. 3.11+: CPython's own row. 3.10:
        the top block: a try's or with's handler (a with's row pushes a
        lasti, which fills the slot 3.10 gives the previous traceback, so
        that KBC's WITH_EXCEPT_START finds its operands as in 3.11), or,
        inside a handler, its cleanup (kiln's: _emit_cleanups), which puts
        back the exception the handler replaced, as 3.10 does when an
        exception leaves a handler's EXCEPT_HANDLER block."""
        if not T.BLOCK_SETUPS:
            h = self._handler(k)
            return None if h is None else (f"L{h.target}", _kbc_depth(st[:h.depth]), h.lasti)
        blocks = self.blocks.get(k)
        if blocks and self.instrs[k].opname == "POP_EXCEPT":
            # Nothing raises there, and its stack is below its handler's
            # cleanup row: under the row of the block below, as 3.11's
            # compiler ends the row before POP_EXCEPT.
            blocks = blocks[:-1]
        if not blocks:
            return None
        return self._block_row(blocks[-1])

    def _block_row(self, block):
        """3.10: the row of `block` (see _row_key). A handler's cleanup keeps
        the slots up to the exception it replaced, as they were on entering
        the handler (a `return` in the handler sinks its value under them
        just before POP_EXCEPT, where nothing can raise)."""
        kind, handler, level = block
        if kind == "E":
            self.cleanups.add(handler)
            return (f"X{handler}_cleanup", _kbc_depth(self.states[self.index[handler]][:level + 3]), True)
        return (f"L{handler}", _kbc_depth(self.states[self.index[handler]][:level]), kind == "W")

    def _handler(self, k: int):
        """The exception-table row covering instruction k, or None."""
        return self.handler_at[k]

    def _handlers_by_instruction(self) -> list:
        """The exception-table row covering each instruction, or None (the
        first row in table order, were rows to overlap), looked up once
        for all: _flow and _emit ask at every instruction."""
        offsets = [ins.offset for ins in self.instrs]
        at = [None] * len(offsets)
        for h in reversed(self.handlers):  # so that the first row covering an offset is the one kept
            first, end = bisect.bisect_left(offsets, h.start), bisect.bisect_left(offsets, h.end)
            at[first:end] = [h] * (end - first)
        return at

    def _join(self, a: tuple, b: tuple, ins) -> tuple:
        """The stack where two paths meet: both must bring the same one."""
        if len(a) != len(b):
            self.fail(f"stack depths {len(a)} and {len(b)} meet at {ins.opname}", ins.positions.lineno)
        if a != b:
            self.fail(f"stack layouts differ where two paths meet at {ins.opname}", ins.positions.lineno)
        return a

    def _emit(self, states: dict):
        self.states = states
        targets = {self.instrs[k].argval for k in states if self.instrs[k].opcode in _JUMP_OPCODES}
        targets |= {h.target for h in self.handlers}
        out: list[str] = []
        line = None
        # Exception-table rows over the emitted instructions: a row per run
        # of instructions with the same handler, bounded by labels of its own.
        rows: list[list] = []  # [start label, end label, handler label, KBC depth, lasti, instructions before]
        current = None
        emitted = 0

        def start_row(key, label):
            """From here on the row `key` (None: no row), bounded by `label`."""
            nonlocal current
            if key == current:
                return
            out.append(f"{label}:")
            if current is not None:
                rows[-1][1] = label
                if rows[-1][5] == emitted:
                    rows.pop()  # the run emitted no KBC instruction: an empty range
            if key is not None:
                rows.append([label, None, *key, emitted])
            current = key
        # KBC instruction indices (labels and directives are not
        # instructions) -> (where CPython resumes, the kinds there, the
        # instruction that emitted it): CPython resumes at the first of a
        # run of instructions that emit no KBC of their own (PUSH_NULL,
        # PRECALL, KW_NAMES, NOP; 3.13's keyword names constant and TO_BOOL
        # before a jump) before the one that does, so CPython re-runs the
        # run (a KW_NAMES must precede its CALL). The prologue (MAKE_CELL,
        # COPY_FREE_VARS, RESUME) is never re-run.
        self.kbc_starts = {}
        kbc_index = 0
        run_start = None
        past_prologue = T.RESUME is None  # (3.10's frame setup makes the cells: no prologue)
        for k, ins in enumerate(self.instrs):
            if k not in states:
                run_start = None
                continue  # unreachable: CPython never runs it
            key = self._row_key(k, states[k])
            if key != current:  # (the label's text only when a row starts)
                start_row(key, f"X{ins.offset}_exc")
            if ins.offset in targets:
                out.append(f"L{ins.offset}:")
            mark = len(out)
            if ins.offset in self.handler_starts:
                # 3.10: an exception enters here with the exception it
                # replaces and its own, three slots each, where KBC (3.11's
                # model) has the one exception: PUSH_EXC_INFO makes the
                # two real slots of the six ('P' and 'E'; _row_key).
                out.append("  PUSH_EXC_INFO")
            # The step's text from the flow pass (_flow), under the line
            # _step would have set here.
            if ins.positions and ins.positions.lineno:
                self.line = ins.positions.lineno
            out += self.steps[k]
            n_lines = len(out) - mark
            n_instrs = _instruction_count(out[mark:])
            if ins.opname == "RESUME":
                past_prologue = True
            elif past_prologue and n_instrs == 0:
                if "X" in states[k]:
                    # CPython's accounting of what KBC did already (3.13's
                    # SET_FUNCTION_ATTRIBUTE, END_FOR): never re-run.
                    run_start = None
                elif run_start is None or ins.offset in targets:
                    run_start = (ins.offset, _kinds(states[k]))
            elif past_prologue:
                self.kbc_starts[kbc_index] = (run_start or (ins.offset, _kinds(states[k]))) + (ins.offset,)
                run_start = None
            kbc_index += n_instrs
            if n_lines and self.line != line:
                line = self.line
                out.insert(mark, f"  .line {line}")
            if n_lines:
                self.lines.add(self.line)
            emitted += n_lines  # (labels too; a step emits no `.line`)
        # 3.10: the handlers' cleanups, each under the row of the blocks
        # below its handler's.
        for handler in sorted(self.cleanups):
            below = self.blocks[self.index[handler]][:-1]
            start_row(self._block_row(below[-1]) if below else None, f"X{handler}_cleanup_exc")
            # [.., prev exc, lasti, exc]: put the previous exception back, raise on
            out += [f"X{handler}_cleanup:", "  COPY 3", "  POP_EXCEPT", "  RERAISE 1"]
            emitted += 3
        start_row(None, "X_end_exc")
        code = self.code
        head = [f"  .firstline {code.co_firstlineno}"]
        if self.generator:
            head.append("  .generator")
        qualname = self.program.qualnames.get(id(code)) or T.qualname(code)
        if qualname != self.name and not (self is self.program.funcs[0] and _QUALNAME_IN_HEADER):
            # CPython's name in messages: f.<locals>.g, not the KBC name f__g
            head.append(f"  .qualname {qualname}")
        local_names = (self.locals + ([self.temp] if self.temp else []) + ([self.gen_items] if self.gen_items else [])
                       + list(self.shadows.values()))
        if local_names:
            head.append("  .locals " + " ".join(local_names))
        if self.cellvars:
            head.append("  .cellvars " + " ".join(self.cellvars))
        if self.freevars:
            head.append("  .freevars " + " ".join(self.freevars))
        for start, end, target, depth, lasti, _ in rows:
            head.append(f"  .except {start} {end} {target} {depth}" + (" lasti" if lasti else ""))
        self.body = "\n".join(head + out) + "\n.end\n\n"
        # As a nested function: defaults come from MAKE_FUNCTION at run
        # time, as in CPython. (The entry's header is made by _Compiled.)
        params = list(self.positional)
        if self.code.co_posonlyargcount:
            params.insert(self.code.co_posonlyargcount, "/")
        if self.varargs is not None:
            params.append("*" + self.varargs)
        elif self.kwonly:
            params.append("*")
        params += self.kwonly
        if self.varkw is not None:
            params.append("**" + self.varkw)
        self.text = f".func {self.name}({', '.join(params)})\n" + self.body

    # -- one instruction -----------------------------------------------------

    def _pop(self, st: list, n: int, ins, accept=_VALUE) -> list:
        if len(st) < n:
            self.fail(f"stack underflow at {ins.opname}")
        taken = st[len(st) - n:]
        for kind in taken:
            if kind not in accept:
                self.fail(f"unexpected stack layout at {ins.opname}")
        del st[len(st) - n:]
        return taken

    def _depth(self, st: list, n: int, ins) -> int:
        """KBC depth of the n-th CPython slot from the top (virtual NULLs removed)."""
        if n < 1 or n > len(st) or _is_virtual(st[-n]):
            self.fail(f"unexpected stack layout at {ins.opname}")
        return sum(1 for kind in st[len(st) - n:] if not _is_virtual(kind))

    def _step(self, k: int, st: list, out: list):
        """Translate instruction k on abstract stack st into `out`.

        Returns (fall-through stack or None, jump-target stack or None).
        One row of _ROWS per opcode does the work; the row's declared
        stack effect (CPython's, checked against dis.stack_effect by the
        tests) must be what it did to the abstract stack (checked when
        CHECK_ROWS).
        """
        ins = self.instrs[k]
        op = ins.opname
        if ins.positions and ins.positions.lineno:
            self.line = ins.positions.lineno
        row = _ROWS.get(op)
        if row is None:  # (a refused opcode has no row: the tests check)
            self.fail(_UNSUPPORTED.get(op) or f"unsupported opcode {op}")
        depth = len(st)
        fall, jump = row.translate(self, k, ins, st, out.append)
        if CHECK_ROWS and row.checked:
            for stack, effect in ((fall, row.effect), (jump, row.jump_effect)):
                if stack is not None and len(stack) - depth != effect(ins.arg):
                    raise AssertionError(f"frontend row {op}: stack effect {len(stack) - depth}, "
                                         f"declared {effect(ins.arg)}")
        return fall, jump

    # -- the longer translations ---------------------------------------------

    def _constant(self, value) -> str:
        if isinstance(value, types.CodeType):
            child = self.program.function(value, f"{self.name}__{_ident(value.co_name).strip('_')}")
            return "@" + child.name
        lit = _literal(value)
        if lit is None:
            self.fail(_describe_constant(value))
        return lit

    def _call(self, k: int, st: list, emit):
        ins = self.instrs[k]
        n = ins.arg
        names = self.kwnames.get(k)
        self._pop(st, n, ins)
        callee = self._pop(st, 2, ins, accept=("v", "N", "M", "S"))
        if callee == _NULL_PAIR:
            opname, count = "CALL", n
        elif callee == ["M", "S"]:
            opname, count = "CALL_METHOD", n
        elif callee[0] in _VALUE and callee[1] in _VALUE:
            # A callable and its first argument: 3.11 calls comprehensions so.
            opname, count = "CALL", n + 1
        else:
            self.fail("unexpected stack layout at CALL")
        st.append("v")
        if names:
            literal = _literal(names)
            emit(f"  {opname}_KW {count} {literal}")
        else:
            emit(f"  {opname} {count}")
        return st, None

    def _make_function(self, k: int, st: list, emit):
        ins = self.instrs[k]
        # 3.13 makes the function from its code alone and sets each
        # attribute after it (SET_FUNCTION_ATTRIBUTE, flag by flag, from
        # the same stack layout): KBC takes them all here, and what 3.13
        # still has on its stack until then is phantom ('X').
        later = ins.arg is None
        flags = self._function_attributes(k) if later else ins.arg
        code_at = k - 1
        if T.VERSION == (3, 10):  # the qualified name on top: a constant its .func spells ('K')
            self._pop(st, 1, ins, accept=("K",))
            code_at = k - 2
        prev = self.instrs[code_at] if code_at >= 0 else None
        if prev is None or prev.opname != "LOAD_CONST" or not isinstance(prev.argval, types.CodeType):
            self.fail("MAKE_FUNCTION without its code constant")
        attributes = bin(flags & 0xF).count("1")
        self._pop(st, 1 + attributes, ins)
        st += ["X"] * (attributes if later else 0) + ["v"]
        if flags & 4:
            self.program.annotated.add(id(prev.argval))
            # Annotations: evaluated (as in CPython) but kept nowhere, as a
            # KBC function has no __annotations__.
            if flags & 8:
                emit("  SWAP 3")       # code closure annotations
                emit("  POP_TOP")
                emit("  SWAP 2")       # closure code
            else:
                emit("  SWAP 2")
                emit("  POP_TOP")
        emit(f"  MAKE_FUNCTION {(flags & 3) | (4 if flags & 8 else 0)}")
        return st, None

    def _function_attributes(self, k: int) -> int:
        flags = 0
        for ins in self.instrs[k + 1:]:
            if ins.opname != "SET_FUNCTION_ATTRIBUTE":
                break
            flags |= ins.arg
        return flags

    def _build_const_key_map(self, k: int, st: list, emit):
        """values... keys -> dict, inserting in key order with STORE_SUBSCR."""
        ins = self.instrs[k]
        n = ins.arg
        prev = self.instrs[k - 1] if k else None
        if prev is None or prev.opname != "LOAD_CONST" or not isinstance(prev.argval, tuple):
            self.fail("BUILD_CONST_KEY_MAP without its constant keys")
        keys = prev.argval
        self._pop(st, n + 1, ins)
        st.append("v")
        emit("  POP_TOP")               # the keys: spelled as constants below
        emit("  BUILD_DICT 0")          # v1 ... vn dict
        for i, key in enumerate(keys):
            emit(f"  COPY {n - i + 1}")   # ... dict v_i
            emit("  COPY 2")            # ... dict v_i dict
            emit(f"  LOAD_CONST {self._constant(key)}")
            emit("  STORE_SUBSCR")
        for _ in range(n):
            emit("  SWAP 2")            # drop the values under the dict
            emit("  POP_TOP")
        return st, None

    def _unpack_ex(self, ins, st: list, emit):
        """a, *b, c = seq: CPython's length check, then items of a list copy."""
        before, after = ins.arg & 0xFF, ins.arg >> 8
        self._pop(st, 1, ins)
        st += ["v"] * (before + after + 1)
        tmp = self.scratch()
        need = before + after
        emit("  BUILD_LIST 0")
        emit("  SWAP 2")
        emit("  LIST_EXTEND 1")         # list(seq)
        emit(f"  STORE_FAST {tmp}")
        if need:
            ok = f"X{ins.offset}_unpack_ok"
            # len(list) >= need, without a global on the common path.
            emit(f"  LOAD_FAST {tmp}")
            emit(f"  LOAD_CONST {need - 1}")
            emit("  LOAD_CONST None")
            emit("  BUILD_SLICE 2")
            emit("  BINARY_SUBSCR")
            emit(f"  POP_JUMP_IF_TRUE {ok}")
            for b in ("ValueError", "len"):
                self.program.use_builtin(b)
            emit("  LOAD_GLOBAL ValueError")
            emit(f'  LOAD_CONST "not enough values to unpack (expected at least {need}, got "')
            emit("  LOAD_GLOBAL len")
            emit(f"  LOAD_FAST {tmp}")
            emit("  CALL 1")
            emit('  LOAD_CONST ")"')
            emit("  BUILD_STRING 3")
            emit("  CALL 1")
            emit("  RAISE 1")
            emit(f"{ok}:")
        # Pushed deepest first: the trailing items, the starred list, then
        # the leading ones, so item 0 ends on top as UNPACK_EX leaves it.
        for j in range(1, after + 1):
            emit(f"  LOAD_FAST {tmp}")
            emit(f"  LOAD_CONST {-j}")
            emit("  BINARY_SUBSCR")
        emit(f"  LOAD_FAST {tmp}")
        emit(f"  LOAD_CONST {before}")
        emit(f"  LOAD_CONST {-after if after else None}")
        emit("  BUILD_SLICE 2")
        emit("  BINARY_SUBSCR")
        for i in range(before - 1, -1, -1):
            emit(f"  LOAD_FAST {tmp}")
            emit(f"  LOAD_CONST {i}")
            emit("  BINARY_SUBSCR")
        emit(f"  DELETE_FAST {tmp}")   # hold no reference past the statement
        return st, None

    def _format_value(self, ins, st: list, emit):
        # CPython's operand as is: conversion (0 none, 1 !s, 2 !r, 3 !a) | 4 with a spec.
        self._pop(st, 2 if ins.arg & 4 else 1, ins)
        st.append("v")
        emit(f"  FORMAT_VALUE {ins.arg & 7}")
        return st, None

"""Random Python programs, run differentially against CPython.

`generate(seed)` makes the source of one small module: a few module-level
classes (some with __slots__), helpers taking keyword arguments, globals and
a function `f` over caller-owned containers, numbers, strings, plain
objects, closures, exceptions and kiln tensors; some of f's parameters are
passed by keyword (Program.kwargs). `run_program(program)` runs `f` through
differential.check (CPython is the oracle; kiln.compile with each backend
must agree on the result, the exception's type and message, the state of
the arguments, positional and keyword, and the globals; in exact mode, on
the frames path, also floats bit for bit, the printed output and slots).

A program is a pure function of (seed, features): a failure is reproduced
by `python tests/python/progen.py --show SEED` (prints the source) and
`python tests/python/progen.py --seed SEED --count 1 [--strict]` (runs it).

Every program terminates: loops run over small ranges or over containers
the loop body cannot grow; while loops step a counter the body cannot touch
before anything else. Some programs raise (IndexError, KeyError,
ZeroDivisionError, TypeError, ValueError, AttributeError, user exception
classes), unguarded or caught, so error paths are compared too.

Features (`--features +name,-name`) switch families of constructs; all are
on by default. `set_order` lets a set's iteration order show (repr of a
set, loops over a set, list(s), s.pop()): kiln's sets are CPython's hash
table (runtime/value/value.h SetObj), so they iterate in CPython's order.

The command line runs N programs on J worker processes, each worker a
separate interpreter restarted after a crash or a hang, and prints the
counts and the first failures:

    python tests/python/progen.py --count 100000 --seed 0 --jobs 2

They run with differential.py's exact comparisons (CPython runs everything
outside graphs): floats bit for bit, printed output, keyword arguments,
slots; `--strict` makes kiln's own failures raise (KILN_STRICT=1).
"""
import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import time
import warnings

FEATURES = {
    "containers": True,      # list/dict/set/tuple values and caller-owned mutation
    "closures": True,        # nested defs reading and writing nonlocal cells, lambdas
    "classes": True,         # plain module-level classes: attributes and methods
    "exceptions": True,      # raise/try/except/else/finally/with, user exception classes
    "errors": True,          # unguarded operations that raise (index, key, zero division, type)
    "strings": True,         # str values, methods, slicing, join
    "fstrings": True,        # f-strings with conversions and format specs
    "loops": True,           # for/while, break/continue
    "comprehensions": True,  # list/dict/set comprehensions
    "globals": True,         # module globals read, mutated and rebound (global)
    "tensors": True,         # kiln tensors: arithmetic, subscripts of every kind, item assignment
    "breaks": True,          # print(end="") in the body: a graph break with live state around it
    "pending_builtins": True,   # the builtins table: round/type/map/filter/divmod/ord/chr/hash/bin/slice,
                                #   key=, dict(pairs), str.format, str % (their words and errors too)
    "native_to_python": True,   # a list made in compiled code handed to Python code that mutates it
    "arity_errors": True,       # a nested function called with too few arguments (its qualname in the message)
    "bigints": True,            # int literals near and past 2**63 (past int64: Python's ints)
    "class_features": True,     # super(), classmethod, staticmethod, property, del attr, __class__
    "set_order": True,          # a set's iteration order seen: repr, loops, list(s), pop()
    # The constructs the exact comparisons need (differential exact mode).
    # With all four off, every seed gives the program it gave
    # before they existed: their random draws happen only when they are on.
    "kwargs": True,             # f's parameters passed by keyword (mutated); helpers and methods called
                                #   with keyword arguments that mutate what they are given
    "prints": True,             # print() with real output, around graph breaks, in loops and closures
    "slots": True,              # classes with __slots__ (a subclass too): instances made, passed, mutated
    "floats": True,             # float-heavy arithmetic: /, //, %, **, math, round, -0.0, inf/nan, formatting
}


def parse_features(spec):
    """FEATURES changed by "+name,-name"."""
    feats = dict(FEATURES)
    for item in filter(None, (spec or "").split(",")):
        on = not item.startswith("-")
        name = item.lstrip("+-")
        if name not in feats:
            raise SystemExit(f"progen: unknown feature {name!r} (known: {', '.join(FEATURES)})")
        feats[name] = on
    return feats


def features_spec(feats):
    """The shortest --features string that gives `feats`."""
    return ",".join(("+" if v else "-") + k for k, v in feats.items() if v != FEATURES[k])


# ------------------------------------------------------------------ values --

INT, FLOAT, BOOL, STR, LIST, DICT, SET, TUPLE, TENSOR, OBJ, SLOT = (
    "int", "float", "bool", "str", "list", "dict", "set", "tuple", "tensor", "obj", "slot")
CONTAINERS = (LIST, DICT, SET)
KEYS = ["a", "b", "c", "k", "zz"]
WORDS = ["", "a", "ab", "xyz", "a-b", "Hi", " pad ", "k"]

# Tensor arguments: (python source, shape). Float tensors over small values.
TENSOR_ARGS = [
    ("kiln.from_numpy(np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.0)", (2, 3, 4)),
    ("kiln.from_numpy(np.linspace(-3.0, 3.0, 20, dtype=np.float32).reshape(4, 5))", (4, 5)),
    ("kiln.from_numpy(np.arange(6, dtype=np.float32) * 0.5)", (6,)),
    ("kiln.from_numpy((np.arange(30, dtype=np.float32) % 7).reshape(5, 6))", (5, 6)),
]


class Var:
    __slots__ = ("name", "ty", "group", "shape", "readonly")

    def __init__(self, name, ty, group=None, shape=None, readonly=False):
        self.name, self.ty, self.group, self.shape, self.readonly = name, ty, group, shape, readonly


class Program:
    def __init__(self, seed, feats, source, args_src, global_names, kwargs=()):
        self.seed, self.feats, self.source = seed, feats, source
        self.args_src, self.global_names = args_src, global_names
        self.kwargs = list(kwargs)  # [(name, source)], passed by keyword; "<alias i>" is argument i

    @property
    def filename(self):
        return f"<progen {self.seed}>"

    def describe(self):
        """What reproduces the program: seed, features, arguments, source
        (with --strict when kiln's own failures raise here)."""
        spec = features_spec(self.feats)
        kiln = sys.modules.get("kiln")
        strict = bool(kiln.config.strict) if kiln is not None else os.environ.get("KILN_STRICT") == "1"
        kw = ("\nkwargs: " + ", ".join(f"{k}={v}" for k, v in self.kwargs)) if self.kwargs else ""
        return (f"seed {self.seed}" + (f" features {spec}" if spec else "") + f"\nargs: {self.args_src}{kw}\n"
                f"reproduce: python tests/python/progen.py --seed {self.seed} --count 1"
                + (f" --features={spec}" if spec else "") + (" --strict" if strict else "") + f"\n{self.source}")


# The module-level prelude: classes the function body may use.
PRELUDE_CLASSES = '''
class AppError(Exception):
    pass


class CodeError(ValueError):
    pass


class Box:
    def __init__(self, v, items):
        self.v = v
        self.items = items
        self.tag = "box"

    def bump(self, k):
        self.v += k
        return self.v

    def push(self, x):
        self.items.append(x)
        return len(self.items)

    def total(self):
        return self.v + sum(self.items)

    def describe(self, sep):
        return self.tag + sep + str(self.v)


class Ctx:
    def __init__(self, log, suppress):
        self.log = log
        self.suppress = suppress

    def __enter__(self):
        self.log.append("enter")
        return len(self.log)

    def __exit__(self, t, v, tb):
        self.log.append("exit " + ("-" if t is None else t.__name__) + " " + str(v))
        return self.suppress
'''

PRELUDE_CLASS_FEATURES = '''

class Coded(AppError):
    def __init__(self, code):
        super().__init__("code " + str(code))
        self.code = code


class Counter(Box):
    scale = 3

    def __init__(self, v):
        super().__init__(v, [])

    @property
    def double(self):
        return self.v * 2

    @classmethod
    def make(cls, v):
        return cls(v)

    @staticmethod
    def twice(x):
        return x * 2
'''


# kwargs: module-level functions with keyword(-only) parameters that mutate
# what they are given (the call sites pass lists, dicts and objects by
# keyword, sometimes through **{...}).
PRELUDE_KWARGS = '''

def stash(x, *, into, times=1):
    for _ in range(times):
        into.append(x)
    return len(into)


def tally(d, *, key, by=1):
    d[key] = d.get(key, 0) + by
    return d[key]


def retag(obj, tag="k", *, sink=None):
    obj.tag = tag
    if sink is not None:
        sink.append(tag)
    return obj
'''

# slots: instances without __dict__ (the harness compares their slots). Pt's
# coordinates are floats wherever the program assigns them.
PRELUDE_SLOTS = '''

class Pt:
    __slots__ = ("x", "y", "tags")

    def __init__(self, x, y):
        self.x = x
        self.y = y
        self.tags = []

    def move(self, dx, dy=0.0):
        self.x += dx
        self.y -= dy
        return self.x

    def mark(self, tag, *, times=1):
        self.tags.extend([tag] * times)
        return len(self.tags)

    def norm2(self):
        return self.x * self.x + self.y * self.y


class Pt3(Pt):
    __slots__ = ("z",)

    def __init__(self, x, y, z):
        Pt.__init__(self, x, y)
        self.z = z

    def norm2(self):
        return Pt.norm2(self) + self.z * self.z
'''


class Gen:
    """One program. Statements are generated against an environment of typed
    variables; a container being iterated is frozen (no statement may grow
    it), which, with counted while loops, makes every program terminate."""

    def __init__(self, seed, feats):
        self.seed = seed
        self.r = random.Random(seed)
        self.f = feats
        self.lines = []
        self.ind = 1
        self.scopes = [[]]
        self.counter = 0
        self.group_counter = 0
        self.frozen = set()      # alias groups being iterated
        self.loop_depth = 0
        self.closure_depth = 0
        self.funcs = []          # closures callable from here: (name, arity, groups it grows, scope depth, params)
        self.grown = None        # while generating a closure: the alias groups its body grows
        self.exc_vars = []       # names bound by `except ... as e` in scope
        self.budget = self.r.randint(8, 22)
        self.globals = {}        # name -> (type, initial source)

    # -- helpers ---------------------------------------------------------------
    def chance(self, p):
        return self.r.random() < p

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def fresh(self, prefix="v"):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, line):
        self.lines.append("    " * self.ind + line)

    def vars(self, ty=None, writable=False):
        out = []
        for scope in self.scopes:
            for v in scope:
                if (ty is None or v.ty == ty) and not (writable and v.readonly):
                    out.append(v)
        return out

    def var(self, ty, writable=False):
        vs = self.vars(ty, writable)
        return self.pick(vs) if vs else None

    def mutable(self, ty):
        """A container variable that may be grown (its group is not being iterated)."""
        vs = [v for v in self.vars(ty) if v.group not in self.frozen]
        v = self.pick(vs) if vs else None
        if v is not None and self.grown is not None:
            self.grown.add(v.group)
        return v

    @contextlib.contextmanager
    def iterating(self, src):
        """While a loop or comprehension iterates the variable `src` (when it
        is one), nothing may grow it."""
        v = next((v for v in self.vars() if v.name == src), None)
        g = v.group if v is not None and v.ty in CONTAINERS else None
        added = g is not None and g not in self.frozen
        if added:
            self.frozen.add(g)
        try:
            yield
        finally:
            if added:
                self.frozen.discard(g)

    def bind(self, name, ty, group=None, shape=None, readonly=False):
        if ty in CONTAINERS or ty == OBJ:
            if group is None:
                self.group_counter += 1
                group = self.group_counter
        v = Var(name, ty, group, shape, readonly)
        self.scopes[-1].append(v)
        return v

    def block(self, body, *args):
        """Runs `body` one indent deeper in a new scope (names bound there are
        not visible afterwards: they may be unbound on another path)."""
        self.ind += 1
        self.scopes.append([])
        n = len(self.lines)
        body(*args)
        if len(self.lines) == n:
            self.emit("pass")
        self.scopes.pop()
        # a function defined in the block may be unbound after it
        self.funcs = [fn for fn in self.funcs if fn[3] <= len(self.scopes)]
        self.ind -= 1

    # -- expressions -------------------------------------------------------------
    def expr(self, ty, d=0):
        return getattr(self, "e_" + ty)(d)

    def any_expr(self, d=0):
        tys = [INT, INT, FLOAT, BOOL]
        if self.f["floats"]:
            tys += [FLOAT]
        if self.f["strings"]:
            tys += [STR, STR]
        if self.f["containers"]:
            tys += [LIST, DICT, SET, TUPLE]
        if self.f["tensors"] and self.vars(TENSOR):
            tys += [TENSOR]
        return self.expr(self.pick(tys), d)

    def small_int(self):
        return str(self.r.choice([0, 1, 2, 3, -1, -2, 5, 7, 10, 4]))

    def set_int(self):
        """An int for a set display: with set_order, values that collide in
        a table of 8 or 32 (their order is the table's, not sorted)."""
        if not self.f["set_order"]:
            return self.small_int()
        return str(self.r.choice([0, 1, 2, 3, -1, -2, 5, 7, 10, 4, 8, 9, 16, 17, 33, 35, 40, 64]))

    def e_int(self, d):
        r = self.r
        if d > 2 or r.random() < 0.3:
            v = self.var(INT)
            if v and r.random() < 0.7:
                return v.name
            if self.f["bigints"] and r.random() < 0.05:
                return str(r.choice([2 ** 31, -(2 ** 33) + 1, 10 ** 12, 2 ** 70]))
            return self.small_int()
        opts = ["bin", "bin", "div", "len", "minmax", "abs", "cond", "bit", "pow", "index", "dict_get", "sum",
                "bool_arith", "int_of_float", "and_or"]
        if self.vars(OBJ) and self.f["classes"]:
            opts += ["obj_attr", "obj_method"]
        if self.funcs:
            opts += ["call_closure"]
        if self.f["tensors"] and self.vars(TENSOR):
            opts += ["tensor_meta"]
        if self.f["strings"]:
            opts += ["str_int"]
        if self.f["pending_builtins"]:
            opts += ["pending"]
        if self.f["floats"]:
            opts += ["of_float"]
        if self.f["kwargs"]:
            opts += ["kw_call"]
        if self.f["slots"] and self.vars(SLOT):
            opts += ["slot"]
        k = r.choice(opts)
        e = lambda: self.e_int(d + 1)  # noqa: E731
        if k == "of_float":
            f = self.e_float(d + 1)
            return r.choice([f"math.floor({f})", f"math.ceil({f})", f"round({f})", f"int({f} * 10)",
                             f"math.trunc({f})", f"({f}).as_integer_ratio()[1]"])
        if k == "kw_call":
            return self.kw_call(d) or e()
        if k == "slot":
            o = self.var(SLOT).name
            return r.choice([f"len({o}.tags)", f"{o}.mark({self.pick(WORDS)!r}, times={r.randint(0, 2)})",
                             f"int({o}.x)", f"len(type({o}).__slots__)"])
        if k == "bin":
            return f"({e()} {r.choice(['+', '-', '*', '+', '-'])} {e()})"
        if k == "div":
            op = r.choice(["//", "%"])
            if self.f["errors"] and r.random() < 0.15:
                return f"({e()} {op} {e()})"
            return f"({e()} {op} ({e()} or {r.choice([1, 3, -2, 7])}))"
        if k == "len":
            c = self.pick_sized()
            return f"len({c})" if c else f"len({self.e_str(d + 1) if self.f['strings'] else '[1, 2]'})"
        if k == "minmax":
            n = r.randint(2, 3)
            return f"{r.choice(['min', 'max'])}({', '.join(e() for _ in range(n))})"
        if k == "abs":
            return f"abs({e()})"
        if k == "cond":
            return f"({e()} if {self.e_bool(d + 1)} else {e()})"
        if k == "bit":
            op = r.choice(["&", "|", "^", "<<", ">>"])
            if op in ("<<", ">>"):
                return f"({e()} {op} ({e()} % {r.choice([3, 5, 8])}))"
            return f"({e()} {op} {e()})"
        if k == "pow":
            if self.loop_depth or self.closure_depth:  # x = x ** 3 per iteration would never end
                return f"(({e()} % 9) ** ({e()} % {r.choice([2, 3, 4])}))"
            return f"({e()} ** ({e()} % {r.choice([2, 3, 4])}))"
        if k == "index":
            lv = self.var(LIST) if self.f["containers"] else None
            if lv is None:
                return e()
            if self.f["errors"] and r.random() < 0.12:
                return f"{lv.name}[{e()}]"
            return f"({lv.name}[{e()} % len({lv.name})] if {lv.name} else {self.small_int()})"
        if k == "dict_get":
            dv = self.var(DICT) if self.f["containers"] else None
            if dv is None:
                return e()
            key = self.e_key()
            if self.f["errors"] and r.random() < 0.12:
                return f"{dv.name}[{key}]"
            if r.random() < 0.5:
                return f"{dv.name}.get({key}, {self.small_int()})"
            return f"({dv.name}[{key}] if {key} in {dv.name} else {e()})"
        if k == "sum":
            src = self.e_list(d + 1) if self.f["containers"] else f"[{e()}, {e()}]"
            return f"sum({src})" if r.random() < 0.7 else f"sum({src}, {e()})"
        if k == "bool_arith":
            return f"({self.e_bool(d + 1)} + {e()})"
        if k == "int_of_float":
            return f"int({self.e_float(d + 1)})"
        if k == "and_or":
            return f"({e()} {r.choice(['and', 'or'])} {e()})"
        if k == "obj_attr":
            return f"{self.var(OBJ).name}.v"
        if k == "obj_method":
            o = self.var(OBJ).name
            return r.choice([f"{o}.bump({e()})", f"{o}.push({e()})", f"{o}.total()"])
        if k == "call_closure":
            return self.call_closure(d)
        if k == "tensor_meta":
            t = self.var(TENSOR)
            return r.choice([f"{t.name}.shape[{r.randrange(len(t.shape))}]", f"{t.name}.ndim", f"len({t.name})",
                             f"{t.name}.numel()", f"int({t.name}.sum().item())"])
        if k == "str_int":
            s = self.e_str(d + 1)
            return r.choice([f"{s}.find({self.pick(WORDS[1:])!r})", f"{s}.count({self.pick(WORDS[1:])!r})",
                             f"len({s})", f"int({r.choice(['12', '-3', '007', ' 4 '])!r})"])
        if k == "pending":
            lst = lambda: self.e_list(d + 1)  # noqa: E731
            return r.choice([f"round({self.e_float(d + 1)})", f"ord({r.choice(WORDS[1:])[0]!r})",
                             f"divmod({e()}, {r.choice([3, 7])})[0]", f"divmod({e()}, {r.choice([-2, 5])})[1]",
                             f"hash({e()})", f"round({e()}, {r.choice([-1, -2, 0, 1])})",
                             f"len(list(map(abs, {lst()})))", f"sum(map(lambda q: q * 2, {lst()}))",
                             f"len(list(filter(None, {lst()})))",
                             f"sum(filter(lambda q: q > {self.small_int()}, {lst()}))",
                             f"max({lst()} or [0], key=abs)", f"min({lst()} or [1], key=lambda q: -q)",
                             f"len(sorted({lst()}, key=lambda q: (q % 3, q))[:2])",
                             f"len(bin({e()}))", f"int(hex({e()}), 16)", f"len(oct({e()}))",
                             f"([5, 6, 7, 8][slice({r.randint(-3, 3)}, {r.randint(-3, 4)})] or [0])[0]",
                             f"len(dict([({self.e_key()}, 1), ({self.e_key()}, 2)]))",
                             f"int(callable({r.choice(['abs', 'len', '1', repr('a')])}))",
                             f"int(issubclass({r.choice(['bool', 'int', 'str'])}, {r.choice(['int', 'object', '(str, int)'])}))",
                             f"(id({e()}) * 0)", f"len(str(type({self.any_expr(d + 1)})))"])
        raise AssertionError(k)

    def expr_is_set(self, src):
        v = next((v for v in self.vars() if v.name == src), None)
        return (v is not None and v.ty == SET) or src.startswith("{") and ":" not in src or src.startswith("set(") \
            or any(op in src for op in (" | ", " & ", " - ", " ^ ")) and "{" in src

    def growth(self):
        """What a list grows by: in a loop or a closure (called from loops) a
        short literal, so that no program doubles a list per iteration."""
        if self.loop_depth or self.closure_depth:
            return "[" + ", ".join(self.small_int() for _ in range(self.r.randint(0, 3))) + "]"
        return self.r.choice([self.e_list, self.e_tuple])(1)

    def pick_sized(self):
        tys = []
        if self.f["containers"]:
            tys += [LIST, DICT, SET, TUPLE]
        if self.f["strings"]:
            tys += [STR]
        vs = [v for t in tys for v in self.vars(t)]
        return self.pick(vs).name if vs else None

    def e_float(self, d):
        r = self.r
        if d > 2 or r.random() < 0.3:
            v = self.var(FLOAT)
            if v and r.random() < 0.7:
                return v.name
            if self.f["floats"] and r.random() < 0.5:
                return self.float_literal()
            return r.choice(["0.5", "-2.25", "3.0", "1e-3", "0.1", "-0.0", "7.75", "1e10"])
        kinds = ["bin", "div", "conv", "abs", "minmax", "mix", "cond", "pow"]
        if self.f["tensors"] and self.vars(TENSOR):
            kinds += ["tensor"]
        if self.f["floats"]:
            kinds += ["bin", "truediv", "floordiv", "math", "math", "round", "fsum", "fpow", "zero", "fromstr"]
        if self.f["slots"] and self.vars(SLOT):
            kinds += ["slot", "slot"]
        k = r.choice(kinds)
        e = lambda: self.e_float(d + 1)  # noqa: E731
        if k in ("truediv", "floordiv", "math", "round", "fsum", "fpow", "zero", "fromstr", "slot"):
            return self.float_heavy(k, d)
        if k == "bin":
            return f"({e()} {r.choice(['+', '-', '*'])} {e()})"
        if k == "div":
            num = r.choice([e, lambda: self.e_int(d + 1)])()
            if self.f["errors"] and r.random() < 0.12:
                return f"({num} / {self.e_int(d + 1)})"
            return f"({num} / ({e()} or 0.5))"
        if k == "conv":
            return f"float({self.e_int(d + 1)})"
        if k == "abs":
            return f"abs({e()})"
        if k == "minmax":
            return f"{r.choice(['min', 'max'])}({e()}, {e()})"
        if k == "mix":
            return f"({e()} {r.choice(['+', '-', '*'])} {self.e_int(d + 1)})"
        if k == "cond":
            return f"({e()} if {self.e_bool(d + 1)} else {e()})"
        if k == "pow":
            return f"({e()} ** 2)"
        if k == "tensor":
            t = self.var(TENSOR).name
            return r.choice([f"{t}.sum().item()", f"{t}.mean().item()", f"{t}.amax().item()",
                             f"float({t}.reshape(-1)[{r.randint(-3, 3)}])", f"({t} * 2).sum().item()"])
        raise AssertionError(k)

    def e_bool(self, d):
        r = self.r
        if d > 2 or r.random() < 0.2:
            v = self.var(BOOL)
            if v and r.random() < 0.6:
                return v.name
            return r.choice(["True", "False"])
        opts = ["cmp", "cmp", "fcmp", "not", "andor", "isinstance"]
        if self.f["containers"]:
            opts += ["in", "in", "truth", "anyall", "eqc"]
        if self.f["strings"]:
            opts += ["str"]
        if self.f["floats"]:
            opts += ["float", "fcmp"]
        if self.f["slots"] and self.vars(SLOT):
            opts += ["slot"]
        k = r.choice(opts)
        if k == "float":
            f = self.e_float(d + 1)
            return r.choice([f"({f}).is_integer()", f"math.isclose({f}, {self.e_float(d + 1)})",
                             f"math.isnan({f})", f"math.isfinite({f})", f"({f} == {self.e_float(d + 1)})",
                             f"({f} < {self.e_float(d + 1)})"])
        if k == "slot":
            o = self.var(SLOT).name
            return r.choice([f"isinstance({o}, Pt3)", f"hasattr({o}, 'z')", f"hasattr({o}, '__dict__')",
                             f"({o}.x > {o}.y)"])
        if k == "cmp":
            return f"({self.e_int(d + 1)} {r.choice(['<', '<=', '==', '!=', '>', '>='])} {self.e_int(d + 1)})"
        if k == "fcmp":
            return f"({self.e_float(d + 1)} {r.choice(['<', '>=', '=='])} {self.e_int(d + 1)})"
        if k == "not":
            return f"(not {self.e_bool(d + 1)})"
        if k == "andor":
            return f"({self.e_bool(d + 1)} {r.choice(['and', 'or'])} {self.e_bool(d + 1)})"
        if k == "isinstance":
            return f"isinstance({self.any_expr(d + 1)}, {r.choice(['int', 'float', 'str', 'list', '(int, float)', 'dict', 'bool'])})"
        if k == "in":
            c = r.choice([LIST, DICT, SET, TUPLE])
            item = self.e_key() if c == DICT else self.e_int(d + 1)
            neg = r.choice(["in", "not in"])
            return f"({item} {neg} {self.expr(c, d + 1)})"
        if k == "truth":
            return f"bool({self.expr(r.choice([LIST, DICT, SET]), d + 1)})"
        if k == "anyall":
            return f"{r.choice(['any', 'all'])}({self.e_list(d + 1)})"
        if k == "eqc":
            c = r.choice([LIST, DICT, SET, TUPLE])
            return f"({self.expr(c, d + 1)} {r.choice(['==', '!='])} {self.expr(c, d + 1)})"
        if k == "str":
            s = self.e_str(d + 1)
            return r.choice([f"{s}.startswith({self.pick(WORDS)!r})", f"({s} == {self.pick(WORDS)!r})",
                             f"({self.pick(WORDS[1:])!r} in {s})", f"({s} < {self.e_str(d + 1)})",
                             f"{s}.isdigit()"])
        raise AssertionError(k)

    def e_key(self):
        if self.f["strings"] and self.r.random() < 0.15:
            v = self.var(STR)
            if v:
                return v.name
        return repr(self.pick(KEYS))

    def e_str(self, d):
        r = self.r
        if d > 2 or r.random() < 0.25:
            v = self.var(STR)
            if v and r.random() < 0.7:
                return v.name
            return repr(self.pick(WORDS))
        opts = ["cat", "mul", "str", "method", "index", "slice", "join", "repr", "cond"]
        if self.f["fstrings"]:
            opts += ["fstring", "fstring"]
        if self.exc_vars:
            opts += ["exc"]
        if self.f["classes"] and self.vars(OBJ):
            opts += ["obj"]
        if self.f["pending_builtins"]:
            opts += ["pending"]
        if self.f["floats"]:
            opts += ["float", "float"]
        k = r.choice(opts)
        e = lambda: self.e_str(d + 1)  # noqa: E731
        if k == "float":  # CPython's float repr and formatting, digit for digit
            f = self.e_float(d + 1)
            spec = r.choice([".17g", ".3e", ".0f", "g", ".2%", "+.4f", "r"])
            # str % and str.format belong to pending_builtins (without it, as
            # many other choices: the same draws either way)
            pb = self.f["pending_builtins"]
            return r.choice([f"repr({f})", f"str({f})", f"format({f}, {spec if spec != 'r' else ''!r})",
                             f"('%.4f' % {f})" if pb else f"repr({f})",
                             f"('%g|%e' % ({f}, {f}))" if pb else f"str({f})", f"({f}).hex()",
                             f"str(round({f}, {r.randint(-1, 4)}))",
                             f"'{{!r}}'.format({f})" if pb else f"format({f}, '.6')"])
        if k == "cat":
            if self.f["errors"] and r.random() < 0.05:
                return f"({e()} + {self.e_int(d + 1)})"
            return f"({e()} + {e()})"
        if k == "mul":
            return f"({e()} * ({self.e_int(d + 1)} % 3))"
        if k == "str":
            return f"str({r.choice([self.e_int, self.e_float, self.e_bool])(d + 1)})"
        if k == "method":
            s = e()
            return r.choice([f"{s}.upper()", f"{s}.lower()", f"{s}.strip()", f"{s}.replace('a', 'A')",
                             f"{s}.title()", f"{s}.lstrip(' a')", f"{s}.zfill(4)", f"{s}.center(6, '*')"])
        if k == "index":
            s = e()
            if self.f["errors"] and r.random() < 0.1:
                return f"{s}[{self.e_int(d + 1)}]"
            return f"({s}[{self.e_int(d + 1)} % len({s})] if {s} else 'e')"
        if k == "slice":
            return f"{e()}[{self.slice_src()}]"
        if k == "join":
            if self.f["containers"] and self.f["comprehensions"] and r.random() < 0.6:
                return f"{self.pick([', ', '-', ''])!r}.join([str(x) for x in {self.e_list(d + 1)}])"
            if self.f["containers"]:
                return f"{self.pick(['/', ''])!r}.join(sorted({self.e_dict(d + 1)}))"
            return f"'-'.join([{e()}, {e()}])"
        if k == "repr":
            # not of a set without set_order (the order a set prints in)
            e = self.any_expr(d + 1)
            while not self.f["set_order"] and self.expr_is_set(e):
                e = self.any_expr(d + 1)
            return f"repr({e})"
        if k == "cond":
            return f"({e()} if {self.e_bool(d + 1)} else {e()})"
        if k == "fstring":
            return self.fstring(d)
        if k == "exc":
            ev = self.pick(self.exc_vars)
            return r.choice([f"str({ev})", f"repr({ev})", f"str({ev}.args)"])
        if k == "obj":
            o = self.var(OBJ).name
            return r.choice([f"{o}.tag", f"{o}.describe({self.pick(WORDS)!r})"])
        if k == "pending":
            i = lambda: self.e_int(d + 1)  # noqa: E731
            return r.choice([f"chr(65 + {i()} % 26)", f"'{{}}-{{}}'.format({e()}, {i()})",
                             f"'{{1}}{{0}}{{x!r}}'.format({e()}, {i()}, x={e()})",
                             f"'{{:>{r.randint(1, 6)}}}|{{:.2f}}'.format({e()}, {self.e_float(d + 1)})",
                             f"type({self.any_expr(d + 1)}).__name__",
                             f"({r.choice(['%s', '%d', '%5.1f', '%-4s|', '%x', '%r', '%03d', '%+d'])!r} % {i()})",
                             f"('%s-%s' % ({e()}, {i()}))", f"('%(a)s' % {{'a': {e()}}})",
                             f"bin({i()})", f"hex({i()})", f"oct({i()})", f"str(divmod({i()}, 4))",
                             f"'-'.join({e()}.split({r.choice(['None', repr('a'), repr(' ')])}))",
                             f"'|'.join(map(str, {self.e_list(d + 1)}))",
                             f"''.join(sorted({e()}, key=lambda c: c.lower()))",
                             f"str({e()}.endswith({self.pick(WORDS)!r}))"])
        raise AssertionError(k)

    def fstring(self, d):
        r = self.r
        parts = []
        for _ in range(r.randint(1, 3)):
            if r.random() < 0.4:
                parts.append(self.pick(["x=", " ", "-", "[", "]", "ab", ":", "{{", "}}"]))
            kind = r.choice([INT, FLOAT, STR, BOOL, LIST])
            if kind == LIST and not self.f["containers"]:
                kind = INT
            if kind == STR and not self.f["strings"]:
                kind = INT
            src = self.expr(kind, d + 1)
            conv = r.choice(["", "", "", "!r", "!s"])
            spec = ""
            if not conv and r.random() < 0.6:
                spec = {INT: [">4", "<3", "^5", "04d", "x", ",", "+d", "b", "_"],
                        FLOAT: [".2f", ".3e", "g", ">8.1f", ".0f", "%", "+.1f"],
                        STR: [">6", "<4", "^7", ".2"],
                        BOOL: [""], LIST: [""]}[kind]
                spec = ":" + self.pick(spec) if self.pick(spec) else ""
            parts.append("{" + src + conv + spec + "}")
        body = "".join(parts)
        q = '"' if "'" in body else "'"
        if q in body:
            return "'?'"
        return f"f{q}{body}{q}"

    def slice_src(self):
        r = self.r
        lo = r.choice(["", "", str(r.randint(-4, 4))])
        hi = r.choice(["", "", str(r.randint(-4, 5))])
        st = r.choice(["", "", "", ":2", ":-1", ":3", ":-2"])
        return f"{lo}:{hi}{st}"

    def e_list(self, d):
        r = self.r
        if d > 2 or r.random() < 0.25:
            v = self.var(LIST)
            if v and r.random() < 0.7:
                return v.name
            return "[" + ", ".join(self.small_int() for _ in range(r.randint(0, 4))) + "]"
        opts = ["lit", "copy", "slice", "cat", "mul", "sorted", "range", "dictvals", "fromset"]
        if self.f["comprehensions"]:
            opts += ["comp", "comp"]
        k = r.choice(opts)
        e = lambda: self.e_list(d + 1)  # noqa: E731
        if k == "lit":
            return "[" + ", ".join(self.e_int(d + 1) for _ in range(r.randint(0, 3))) + "]"
        if k == "copy":
            return r.choice([f"list({e()})", f"{e()}.copy()", f"{e()}[:]"])
        if k == "slice":
            return f"{e()}[{self.slice_src()}]"
        if k == "cat":
            return f"({e()} + {e()})"
        if k == "mul":
            return f"({e()} * {r.randint(0, 2)})"
        if k == "sorted":
            return r.choice([f"sorted({e()})", f"sorted({e()}, reverse=True)", f"list(reversed({e()}))"])
        if k == "range":
            return r.choice([f"list(range({self.e_int(d + 1)} % 6))",
                             f"list(range({r.randint(-2, 2)}, {r.randint(3, 7)}, {r.choice([1, 2, 3])}))"])
        if k == "dictvals":
            return f"list({self.e_dict(d + 1)}.values())"
        if k == "fromset":
            if self.f["set_order"] and r.random() < 0.5:
                return f"list({self.e_set(d + 1)})"
            return f"sorted({self.e_set(d + 1)})"
        if k == "comp":
            x = self.fresh("x")
            src = self.e_list(d + 1)
            with self.iterating(src):
                self.scopes.append([Var(x, INT, readonly=True)])
                body = self.e_int(d + 2)
                cond = f" if {self.e_bool(d + 2)}" if r.random() < 0.4 else ""
                self.scopes.pop()
            return f"[{body} for {x} in {src}{cond}]"
        raise AssertionError(k)

    def e_dict(self, d):
        r = self.r
        if d > 2 or r.random() < 0.3:
            v = self.var(DICT)
            if v and r.random() < 0.7:
                return v.name
            keys = r.sample(KEYS, r.randint(0, 3))
            return "{" + ", ".join(f"{k!r}: {self.small_int()}" for k in keys) + "}"
        k = r.choice(["lit", "copy", "comp", "zip", "merge"] if self.f["comprehensions"] else ["lit", "copy", "zip", "merge"])
        if k == "lit":
            keys = r.sample(KEYS, r.randint(0, 3))
            return "{" + ", ".join(f"{kk!r}: {self.e_int(d + 1)}" for kk in keys) + "}"
        if k == "copy":
            return r.choice([f"dict({self.e_dict(d + 1)})", f"{self.e_dict(d + 1)}.copy()"])
        if k == "comp":
            kk, vv = self.fresh("k"), self.fresh("w")
            src = self.e_dict(d + 1)
            with self.iterating(src):
                self.scopes.append([Var(kk, STR, readonly=True), Var(vv, INT, readonly=True)])
                val = self.e_int(d + 2)
                cond = f" if {self.e_bool(d + 2)}" if r.random() < 0.4 else ""
                self.scopes.pop()
            return f"{{{kk}: {val} for {kk}, {vv} in {src}.items(){cond}}}"
        if k == "zip":
            return f"dict(zip({r.sample(KEYS, 3)!r}, {self.e_list(d + 1)}))"
        if k == "merge":
            return f"({self.e_dict(d + 1)} | {self.e_dict(d + 1)})"
        raise AssertionError(k)

    def e_set(self, d):
        r = self.r
        if d > 2 or r.random() < 0.3:
            v = self.var(SET)
            if v and r.random() < 0.7:
                return v.name
            n = r.randint(0, 3)
            return "{" + ", ".join(self.set_int() for _ in range(n)) + "}" if n else "set()"
        k = r.choice(["lit", "fromlist", "op", "comp"] if self.f["comprehensions"] else ["lit", "fromlist", "op"])
        if k == "lit":
            return "{" + ", ".join(self.e_int(d + 1) if r.random() < 0.6 else self.set_int()
                                   for _ in range(r.randint(1, 4))) + "}"
        if k == "fromlist":
            return f"set({self.e_list(d + 1)})"
        if k == "op":
            return f"({self.e_set(d + 1)} {r.choice(['|', '&', '-', '^'])} {self.e_set(d + 1)})"
        if k == "comp":
            x = self.fresh("x")
            src = self.e_list(d + 1)
            with self.iterating(src):
                self.scopes.append([Var(x, INT, readonly=True)])
                body = self.e_int(d + 2)
                self.scopes.pop()
            return f"{{{body} for {x} in {src}}}"
        raise AssertionError(k)

    def e_tuple(self, d):
        r = self.r
        v = self.var(TUPLE)
        if v and r.random() < 0.4:
            return v.name if r.random() < 0.6 else f"{v.name}[{self.slice_src()}]"
        if r.random() < 0.5:
            n = r.randint(0, 3)
            return "(" + "".join(self.e_int(d + 1) + ", " for _ in range(n)) + ")"
        return f"tuple({self.e_list(d + 1)})"

    def e_obj(self, d):
        # a copy: a Box's items grow through push(), which must not reach a
        # list being iterated
        return f"Box({self.e_int(d + 1)}, list({self.e_list(d + 1)}))"

    # -- floats, keyword calls, slots -----------------------------------------------
    def float_literal(self):
        """Values whose arithmetic rounds (0.1, 1/3's neighbours), signed
        zeros, the edges of the range; inf and nan rarely (they end many
        programs early through int() and math.floor)."""
        r = self.r
        if r.random() < 0.03:
            return r.choice(["float('inf')", "float('-inf')", "float('nan')", "(1e308 * 10)"])
        return r.choice(["0.1", "0.2", "0.3", "-0.0", "1e-300", "1e16", "2.5e-5", "123.456", "-7.0",
                         "0.7", "1.1", "(1 / 3)", "2.0", "-1.5", "1e22", "5e-324"])

    def float_heavy(self, k, d):
        r = self.r
        e = lambda: self.e_float(d + 1)  # noqa: E731
        i = lambda: self.e_int(d + 1)  # noqa: E731
        if k == "truediv":  # int / int is correctly rounded in CPython, big ints too
            num = r.choice([i, i, lambda: r.choice(["(10 ** 17 + 1)", "(2 ** 70)", "(-(3 ** 40))"])])()
            return f"({num} / ({i()} or {r.choice([3, 7, -9, 10])}))"
        if k == "floordiv":  # Python's float // and % take the divisor's sign
            op = r.choice(["//", "%"])
            if self.f["errors"] and r.random() < 0.1:
                return f"({e()} {op} {e()})"
            return f"({e()} {op} ({e()} or {r.choice(['1.5', '-0.25', '3.0'])}))"
        if k == "math":
            a, b = e(), e()
            return r.choice([f"math.sqrt(abs({a}))", f"math.fmod({a}, ({b} or 2.5))", f"math.copysign({a}, {b})",
                             f"math.hypot({a}, {b})", f"math.exp(min({a}, 30.0))", f"math.log1p(abs({a}))",
                             f"math.atan2({a}, {b})", f"math.sin({a})", f"math.ldexp({a}, {r.randint(-3, 60)})",
                             f"math.fabs({a})", f"(math.pi * {a})", f"math.remainder({a}, ({b} or 1.0))",
                             f"math.log(abs({a}) + 1e-9)"])
        if k == "round":
            return f"round({e()}, {r.randint(-1, 4)})"
        if k == "fsum":  # sum() adds left to right; math.fsum rounds once
            items = ", ".join(e() for _ in range(r.randint(2, 4)))
            return r.choice([f"sum([{items}])", f"math.fsum([{items}])", f"sum([{items}], 0.1)"])
        if k == "fpow":
            exp = r.choice(["0.5", "1.5", "3", "0.25", "-2"] + (["-1"] if self.f["errors"] else []))
            if exp in ("-2", "-1"):  # 0.0 ** -n raises ZeroDivisionError: only as an error
                return f"((abs({e()}) or 0.5) ** {exp})" if not self.f["errors"] else f"(abs({e()}) ** {exp})"
            if self.loop_depth or self.closure_depth:
                return f"(min(abs({e()}), 1e6) ** {exp})"
            return f"(abs({e()}) ** {exp})"
        if k == "zero":
            return r.choice(["-0.0", "(0.0 * -1)", "min(0.0, -0.0)", "max(-0.0, 0.0)", f"(-{e()} * 0.0)",
                             f"math.copysign(0.0, {e()})", "(-0.0 + 0.0)", "(-0.0 - 0.0)"])
        if k == "fromstr":
            return r.choice(["float('1e-7')", "float('-0.0')", "float(' 2.5 ')", "float('1_000.5')",
                             "float.fromhex('0x1.8p1')", "float('0.30000000000000004')", f"float({i()})"])
        if k == "slot":
            o = self.var(SLOT)
            a = o.name
            opts = [f"{a}.x", f"{a}.y", f"{a}.norm2()", f"{a}.move({e()})", f"getattr({a}, 'y')"]
            if self.f["kwargs"]:
                opts += [f"{a}.move(dx={e()}, dy={e()})", f"{a}.move({e()}, dy={e()})"]
            if o.shape == 3:
                opts += [f"{a}.z"]
            return r.choice(opts)
        raise AssertionError(k)

    def kw_call(self, d):
        """A call passing what it mutates by keyword (None: nothing to pass)."""
        r = self.r
        kinds = []
        if self.f["containers"]:
            kinds += ["stash", "tally", "splat"]
        if self.f["classes"] and self.vars(OBJ):
            kinds += ["retag", "box"]
        if self.f["slots"] and self.vars(SLOT):
            kinds += ["pt"]
        if not kinds:
            return None
        k = r.choice(kinds)
        if k == "stash":
            lv = self.mutable(LIST)
            if lv is None:
                return None
            times = r.choice(["", "", f", times={r.randint(0, 2)}"])
            return r.choice([f"stash({self.e_int(d + 1)}, into={lv.name}{times})",
                             f"stash({self.e_int(d + 1)}{times}, into={lv.name})"])
        if k in ("tally", "splat"):
            dv = self.mutable(DICT)
            if dv is None:
                return None
            key, by = self.e_key(), (self.e_int(d + 1) if r.random() < 0.5 else None)
            if k == "splat":
                items = [f"'key': {key}"] + ([f"'by': {by}"] if by is not None else [])
                return f"tally({dv.name}, **{{{', '.join(items)}}})"
            return f"tally({dv.name}, key={key}" + (f", by={by}" if by is not None else "") + ")"
        if k == "retag":
            o = self.var(OBJ).name
            lv = self.mutable(LIST) if r.random() < 0.5 else None
            sink = f", sink={lv.name}" if lv is not None else ""
            return f"retag({o}, {self.pick(WORDS)!r}{sink}).v"
        if k == "box":
            o = self.var(OBJ).name
            return r.choice([f"{o}.bump(k={self.e_int(d + 1)})", f"{o}.push(x={self.e_int(d + 1)})"])
        o = self.var(SLOT).name
        return f"{o}.mark(tag={self.pick(WORDS)!r}, times={r.randint(0, 2)})"

    def e_slot(self, d):
        """A new Pt or Pt3 (Pt3's shape is 3: it has z)."""
        if self.r.random() < 0.6:
            return f"Pt({self.e_float(d + 1)}, {self.e_float(d + 1)})", 2
        return f"Pt3({self.e_float(d + 1)}, {self.e_float(d + 1)}, {self.e_float(d + 1)})", 3

    def printable(self, d=1):
        """An expression whose str() is the same in every run: no objects
        (their repr holds an address), no tensors (their values may differ
        within the tolerance), sets only with set_order."""
        tys = [INT, FLOAT, FLOAT, BOOL]
        if self.f["strings"]:
            tys += [STR, STR]
        if self.f["containers"]:
            tys += [LIST, DICT, TUPLE] + ([SET] if self.f["set_order"] else [])
        ty = self.pick(tys)
        if ty == FLOAT and self.f["slots"] and self.vars(SLOT) and self.chance(0.3):
            return f"{self.var(SLOT).name}.{self.r.choice(['x', 'y'])}"
        return self.expr(ty, d)

    # -- tensors ----------------------------------------------------------------
    def tensor_key(self, shape):
        """A subscript over `shape` as source: ints (negative too), slices with
        steps, None, one Ellipsis, index lists and int64 tensors, bool masks;
        sometimes out of range (the IndexError is compared)."""
        r = self.r
        parts, dim, ellipsis = [], 0, False
        for _ in range(r.randint(1, min(4, len(shape) + 1))):
            kind = r.choice(["int", "int", "slice", "slice", "none", "ellipsis", "list", "itensor", "mask"])
            if kind == "none":
                parts.append("None")
                continue
            if kind == "ellipsis":
                if not ellipsis:
                    parts.append("...")
                    ellipsis = True
                continue
            if dim >= len(shape):
                break
            n = shape[dim]
            bad = self.f["errors"] and r.random() < 0.04
            if kind == "int":
                parts.append(str(n if bad else r.randint(-n, n - 1)))
            elif kind == "slice":
                lo = r.choice(["", str(r.randint(-n - 1, n))])
                hi = r.choice(["", str(r.randint(-n, n + 1))])
                st = r.choice(["", "", ":2", ":3"])
                parts.append(f"{lo}:{hi}{st}")
            elif kind == "list":
                parts.append(str([r.randint(-n, n - 1) for _ in range(r.randint(1, 3))]))
            elif kind == "itensor":
                vals = [r.randint(-n, n - 1) for _ in range(r.randint(1, 3))]
                if bad:
                    vals[0] = n + 1
                parts.append(f"kiln.tensor({vals})")
            else:
                vals = [r.random() < 0.5 for _ in range(n + (1 if bad else 0))]
                parts.append(str(vals) if r.random() < 0.5 else f"kiln.tensor({vals})")
            dim += 1
        if not parts:
            parts = ["0"]
        return ", ".join(parts)

    def e_tensor(self, d):
        r = self.r
        t = self.var(TENSOR)
        k = r.choice(["arith", "arith", "scalar", "index", "unary", "reduce"])
        if k == "arith":
            o = self.var(TENSOR)
            other = o.name if o.shape == t.shape else r.choice(["2.0", "0.5", "1"])
            return f"({t.name} {r.choice(['+', '-', '*'])} {other})"
        if k == "scalar":
            return f"({t.name} * {self.e_float(d + 1)} + {self.e_int(d + 1)})"
        if k == "index":
            return f"{t.name}[{self.tensor_key(t.shape)}]"
        if k == "unary":
            return r.choice([f"kiln.relu({t.name})", f"({t.name} > 0.5)", f"{t.name}.abs()", f"(-{t.name})",
                             f"{t.name}.reshape(-1)", f"{t.name}.clone()", f"kiln.exp({t.name} * 0.1)"])
        return r.choice([f"{t.name}.sum(0)", f"{t.name}.sum(-1, keepdim=True)", f"{t.name}.amax(0)",
                         f"{t.name}.mean()"])

    # -- statements ------------------------------------------------------------------
    def statements(self, n):
        for _ in range(n):
            if self.budget <= 0:
                break
            self.statement()

    def statement(self):
        r = self.r
        self.budget -= 1
        opts = [("assign", 6), ("reassign", 3), ("aug", 3), ("log", 4), ("if", 3)]
        f = self.f
        if f["containers"]:
            opts += [("list_mut", 6), ("dict_mut", 4), ("set_mut", 5 if f["set_order"] else 3), ("unpack", 1)]
        if f["loops"]:
            opts += [("for", 3), ("while", 1)]
            if self.loop_depth:
                opts += [("break", 1)]
        if f["exceptions"]:
            opts += [("try", 3), ("raise", 1), ("with", 1), ("assert", 0.4)]
        if f["closures"] and self.closure_depth == 0:
            opts += [("closure", 2), ("lambda", 1)]
        if self.funcs:
            opts += [("call", 2)]
        if f["classes"]:
            opts += [("obj", 3 if self.vars(OBJ) else 1)]
        if f["globals"] and set(self.globals) - {"EVENTS"} and self.closure_depth == 0:
            opts += [("global", 2)]
        if f["tensors"] and self.vars(TENSOR):
            opts += [("tensor", 4), ("setitem", 2)]
        if f["breaks"]:
            opts += [("break_graph", 1)]
        if f["errors"]:
            opts += [("error_probe", 1)]
        if f["class_features"] and f["classes"]:
            opts += [("class_feature", 2)]
        if f["prints"]:
            opts += [("print", 2)]
        if f["floats"]:
            opts += [("float", 3)]
        if f["kwargs"]:
            opts += [("kwcall", 2)]
        if f["slots"]:
            opts += [("slot", 3 if self.vars(SLOT) else 1)]
        names, weights = zip(*opts)
        k = r.choices(names, weights)[0]
        getattr(self, "s_" + k)()

    def s_assign(self):
        tys = [INT, INT, FLOAT, BOOL]
        if self.f["strings"]:
            tys += [STR, STR]
        if self.f["containers"]:
            tys += [LIST, LIST, DICT, SET, TUPLE]
        ty = self.pick(tys)
        name = self.fresh()
        if ty in CONTAINERS and self.r.random() < 0.15:
            src = self.var(ty)
            if src:  # an alias: mutations through either name are one object's
                self.emit(f"{name} = {src.name}")
                self.bind(name, ty, group=src.group)
                return
        src = self.expr(ty)
        self.emit(f"{name} = {src}")
        same = next((v for v in self.vars(ty) if v.name == src), None)  # a plain name is an alias too
        self.bind(name, ty, group=same.group if same is not None else None)

    def s_reassign(self):
        vs = [v for v in self.vars(writable=True) if v.ty in (INT, FLOAT, BOOL, STR, TUPLE)]
        if not vs:
            return self.s_assign()
        v = self.pick(vs)
        if v.ty == STR and (self.loop_depth or self.closure_depth):  # s = s + s per iteration doubles it
            self.emit(f"{v.name} = ({self.expr(v.ty)})[:40]")
            return
        self.emit(f"{v.name} = {self.expr(v.ty)}")

    def s_aug(self):
        vs = [v for v in self.vars(writable=True) if v.ty in (INT, FLOAT, STR)]
        vs += [v for v in self.vars(LIST, writable=True) + self.vars(SET, writable=True) if v.group not in self.frozen]
        if not vs:
            return self.s_assign()
        v = self.pick(vs)
        r = self.r
        if v.ty == INT:
            op = r.choice(["+=", "-=", "*=", "|=", "^="])
            if r.random() < 0.2:
                op = r.choice(["//=", "%="])
                self.emit(f"{v.name} {op} ({self.e_int(1)} or 3)")
                return
            if op == "*=" and (self.loop_depth or self.closure_depth):  # v *= v per iteration never ends
                self.emit(f"{v.name} *= ({self.e_int(1)} % 5)")
                return
            self.emit(f"{v.name} {op} {self.e_int(1)}")
        elif v.ty == FLOAT:
            self.emit(f"{v.name} {r.choice(['+=', '-=', '*='])} {self.e_float(1)}")
        elif v.ty == STR:
            if self.loop_depth or self.closure_depth:  # s += s-based text per iteration doubles it
                self.emit(f"{v.name} = ({v.name} + {self.e_str(1)})[:{r.choice([8, 20, 40])}]")
                return
            self.emit(f"{v.name} += {self.e_str(1)}")
        elif v.ty == LIST:
            if self.loop_depth or self.closure_depth or r.random() < 0.8:
                self.emit(f"{v.name} += {self.growth()}")
            else:
                self.emit(f"{v.name} *= {r.randint(0, 2)}")
        else:
            self.emit(f"{v.name} {r.choice(['|=', '-=', '&=', '^='])} {self.e_set(1)}")

    def s_log(self):
        self.emit(f"log.append({self.any_expr()})")

    def s_if(self):
        self.emit(f"if {self.e_bool(0)}:")
        self.block(self.statements, self.r.randint(1, 3))
        if self.r.random() < 0.3:
            self.emit(f"elif {self.e_bool(0)}:")
            self.block(self.statements, self.r.randint(1, 2))
        if self.r.random() < 0.5:
            self.emit("else:")
            self.block(self.statements, self.r.randint(1, 2))

    def s_list_mut(self):
        v = self.mutable(LIST)
        if v is None:
            return self.s_assign()
        n, r = v.name, self.r
        err = self.f["errors"] and r.random() < 0.1
        k = r.choice(["append", "append", "extend", "insert", "pop", "popi", "setitem", "delitem", "remove",
                      "sort", "reverse", "clear", "slice_set", "slice_del", "index", "count"])
        if k == "append":
            self.emit(f"{n}.append({self.e_int(1)})")
        elif k == "extend":
            if self.f["set_order"] and r.random() < 0.2:
                self.emit(f"{n}.extend({self.e_set(1)})")
            else:
                self.emit(f"{n}.extend({self.growth()})")
        elif k == "insert":
            self.emit(f"{n}.insert({self.e_int(1)}, {self.e_int(1)})")
        elif k == "pop":
            self.emit(f"log.append({n}.pop())" if err else f"if {n}:\n{'    ' * (self.ind + 1)}log.append({n}.pop())")
        elif k == "popi":
            i = self.e_int(1)
            self.emit(f"log.append({n}.pop({i}))" if err else f"log.append({n}.pop({i} % len({n})) if {n} else None)")
        elif k == "setitem":
            i = self.e_int(1)
            self.emit(f"{n}[{i}] = {self.e_int(1)}" if err else f"if {n}:\n{'    ' * (self.ind + 1)}{n}[{i} % len({n})] = {self.e_int(1)}")
        elif k == "delitem":
            i = self.e_int(1)
            self.emit(f"del {n}[{i}]" if err else f"if {n}:\n{'    ' * (self.ind + 1)}del {n}[{i} % len({n})]")
        elif k == "remove":
            x = self.e_int(1)
            self.emit(f"{n}.remove({x})" if err else f"if {x} in {n}:\n{'    ' * (self.ind + 1)}{n}.remove({x})")
        elif k == "sort":
            self.emit(f"{n}.sort()" if r.random() < 0.6 else f"{n}.sort(reverse=True)")
        elif k == "reverse":
            self.emit(f"{n}.reverse()")
        elif k == "clear":
            self.emit(f"{n}.clear()")
        elif k == "slice_set":
            self.emit(f"{n}[{r.randint(-2, 2)}:{r.choice(['', str(r.randint(-2, 4))])}] = {self.growth()}")
        elif k == "slice_del":
            self.emit(f"del {n}[{self.slice_src()}]")
        elif k == "index":
            x = self.e_int(1)
            self.emit(f"log.append({n}.index({x}))" if err else f"log.append({n}.index({x}) if {x} in {n} else -1)")
        else:
            self.emit(f"log.append({n}.count({self.e_int(1)}))")

    def s_dict_mut(self):
        v = self.mutable(DICT)
        if v is None:
            return self.s_assign()
        n, r = v.name, self.r
        err = self.f["errors"] and r.random() < 0.1
        key = self.e_key()
        k = r.choice(["set", "set", "del", "pop", "pop_default", "update", "update_kw", "setdefault", "clear",
                      "ior", "popitem", "get"])
        if k == "set":
            self.emit(f"{n}[{key}] = {self.e_int(1)}")
        elif k == "del":
            self.emit(f"del {n}[{key}]" if err else f"if {key} in {n}:\n{'    ' * (self.ind + 1)}del {n}[{key}]")
        elif k == "pop":
            self.emit(f"log.append({n}.pop({key}))" if err else f"log.append({n}.pop({key}, None))")
        elif k == "pop_default":
            self.emit(f"log.append({n}.pop({key}, {self.e_int(1)}))")
        elif k == "update":
            self.emit(f"{n}.update({self.e_dict(1)})")
        elif k == "update_kw":
            self.emit(f"{n}.update({self.pick(KEYS)}={self.e_int(1)})")
        elif k == "setdefault":
            self.emit(f"log.append({n}.setdefault({key}, {self.e_int(1)}))")
        elif k == "clear":
            self.emit(f"{n}.clear()")
        elif k == "ior":  # rebinds: not for a global's or an enclosing function's name
            self.emit(f"{n}.update({self.e_dict(1)})" if v.readonly else f"{n} |= {self.e_dict(1)}")
        elif k == "popitem":
            self.emit(f"log.append({n}.popitem())" if err else f"if {n}:\n{'    ' * (self.ind + 1)}log.append({n}.popitem())")
        else:
            self.emit(f"log.append({n}.get({key}))")

    def s_set_mut(self):
        v = self.mutable(SET)
        if v is None:
            return self.s_assign()
        n, r = v.name, self.r
        err = self.f["errors"] and r.random() < 0.1
        x = self.e_int(1)
        kinds = ["add", "add", "discard", "remove", "update", "ior", "isub", "clear", "pop"]
        if self.f["set_order"]:
            kinds += ["show", "show", "pop", "add_wide"]
        k = r.choice(kinds)
        if k == "add":
            self.emit(f"{n}.add({x})")
        elif k == "add_wide":
            self.emit(f"{n}.add({self.set_int()})")
        elif k == "show":  # the set's order itself
            self.emit(f"log.append({r.choice([f'list({n})', f'str({n})', f'[x for x in {n}]', f'tuple({n})'])})")
        elif k == "discard":
            self.emit(f"{n}.discard({x})")
        elif k == "remove":
            self.emit(f"{n}.remove({x})" if err else f"if {x} in {n}:\n{'    ' * (self.ind + 1)}{n}.remove({x})")
        elif k == "update":
            self.emit(f"{n}.update({self.e_list(1)})")
        elif k == "ior":
            self.emit(f"{n}.update({self.e_set(1)})" if v.readonly else f"{n} |= {self.e_set(1)}")
        elif k == "isub":
            self.emit(f"{n}.difference_update({self.e_set(1)})" if v.readonly else f"{n} -= {self.e_set(1)}")
        elif k == "clear":
            self.emit(f"{n}.clear()")
        elif self.f["set_order"]:
            # set.pop's choice is CPython's hash order (and its finger)
            self.emit(f"log.append({n}.pop())" if err else f"if {n}:\n{'    ' * (self.ind + 1)}log.append({n}.pop())")
        else:
            self.emit(f"log.append(sorted({n}))")

    def s_unpack(self):
        r = self.r
        a, b = self.fresh(), self.fresh()
        if r.random() < 0.5:
            self.emit(f"{a}, {b} = {self.e_int(1)}, {self.e_int(1)}")
            self.bind(a, INT)
            self.bind(b, INT)
        else:
            lv = self.var(LIST)
            if lv is None:
                return self.s_assign()
            rest = self.fresh()
            if self.f["errors"] and r.random() < 0.2:
                self.emit(f"{a}, {b} = {lv.name}")
            else:
                self.emit(f"{a}, *{rest} = {lv.name} or [0]")
                self.emit(f"{b} = len({rest})")
                self.bind(rest, LIST)
            self.bind(a, INT)
            self.bind(b, INT)

    def s_for(self):
        r = self.r
        x = self.fresh("i")
        k = r.choice(["range", "range", "list", "enumerate", "dict", "zip", "set", "str"])
        frozen = None
        if k == "range":
            head = f"for {x} in range({r.choice([str(r.randint(0, 5)), f'{self.e_int(1)} % 5'])}):"
            binds = [(x, INT)]
        elif k in ("list", "enumerate", "zip"):
            lv = self.var(LIST)
            if lv is None:
                return self.s_assign()
            frozen = lv.group
            if k == "list":
                head, binds = f"for {x} in {lv.name}:", [(x, INT)]
            elif k == "enumerate":
                j = self.fresh("j")
                head, binds = f"for {j}, {x} in enumerate({lv.name}):", [(j, INT), (x, INT)]
            else:
                j = self.fresh("j")
                head, binds = f"for {x}, {j} in zip({lv.name}, {self.e_list(1)}):", [(x, INT), (j, INT)]
        elif k == "dict":
            dv = self.var(DICT)
            if dv is None:
                return self.s_assign()
            frozen = dv.group
            j = self.fresh("j")
            head, binds = f"for {j}, {x} in {dv.name}.items():", [(j, STR), (x, INT)]
        elif k == "set":
            sv = self.var(SET)
            if sv is None:
                return self.s_assign()
            order = self.f["set_order"] and self.r.random() < 0.6
            if order:  # over the set itself: the body must not change it
                frozen = sv.group
            head, binds = f"for {x} in {sv.name if order else f'sorted({sv.name})'}:", [(x, INT)]
        else:
            if not self.f["strings"]:
                return self.s_assign()
            head, binds = f"for {x} in {self.e_str(1)}:", [(x, STR)]
        self.emit(head)
        added = frozen is not None and frozen not in self.frozen
        if added:
            self.frozen.add(frozen)
        self.loop_depth += 1

        def body():
            for name, ty in binds:
                self.bind(name, ty, readonly=True)
            self.statements(r.randint(1, 3))
        self.block(body)
        self.loop_depth -= 1
        if added:
            self.frozen.discard(frozen)
        if r.random() < 0.2:
            self.emit("else:")
            self.block(self.statements, 1)

    def s_while(self):
        c = self.fresh("c")
        self.emit(f"{c} = 0")
        self.emit(f"while {c} < {self.r.randint(0, 4)}:")
        self.loop_depth += 1

        def body():
            self.emit(f"{c} += 1")
            self.bind(c, INT, readonly=True)
            self.statements(self.r.randint(1, 3))
        self.block(body)
        self.loop_depth -= 1

    def s_break(self):
        self.emit(f"if {self.e_bool(1)}:")
        self.block(lambda: self.emit(self.r.choice(["break", "continue"])))

    def exc_class(self):
        r = self.r
        names = ["ValueError", "KeyError", "IndexError", "TypeError", "ZeroDivisionError", "RuntimeError",
                 "LookupError", "ArithmeticError", "AttributeError"]
        if self.f["classes"]:
            names += ["AppError", "CodeError", "AppError"]
        return self.pick(names)

    def raise_stmt(self):
        r = self.r
        cls = self.exc_class()
        arg = r.choice([repr(self.pick(WORDS)), self.e_int(1), "", self.e_str(1) if self.f["strings"] else "'m'"])
        if r.random() < 0.15:
            return f"raise {cls}"
        if r.random() < 0.15 and arg:
            return f"raise {cls}({arg}, {self.e_int(1)})"
        return f"raise {cls}({arg})"

    def s_raise(self):
        self.emit(f"if {self.e_bool(1)}:")
        self.block(lambda: self.emit(self.raise_stmt()))

    def s_assert(self):
        self.emit(f"assert {self.e_bool(1)}" + (f", {self.e_str(1) if self.f['strings'] else repr('no')}"
                                                  if self.r.random() < 0.6 else ""))

    def s_try(self):
        r = self.r
        self.emit("try:")
        self.block(self.statements, r.randint(1, 4))
        n_handlers = r.choice([0, 1, 1, 1, 2]) if r.random() < 0.8 else 0
        finally_ = n_handlers == 0 or r.random() < 0.3
        for _ in range(n_handlers):
            kinds = r.choice([self.exc_class(), f"({self.exc_class()}, {self.exc_class()})", "Exception"])
            if r.random() < 0.7:
                e = self.fresh("e")
                self.emit(f"except {kinds} as {e}:")

                def handler(e=e):
                    self.exc_vars.append(e)
                    self.emit(f"log.append(('caught', str({e}), repr({e})))" if r.random() < 0.6
                              else f"log.append({e}.args)")
                    self.statements(r.randint(0, 2))
                    if r.random() < 0.1:
                        self.emit(r.choice(["raise", f"raise AppError('again') from {e}" if self.f["classes"]
                                            else "raise"]))
                    self.exc_vars.remove(e)
                self.block(handler)
            else:
                self.emit(f"except {kinds}:")
                self.block(lambda: (self.emit("log.append('handled')"), self.statements(r.randint(0, 2))))
        if n_handlers and r.random() < 0.25:
            self.emit("else:")
            self.block(self.statements, r.randint(1, 2))
        if finally_:
            self.emit("finally:")
            self.block(lambda: (self.emit(f"log.append('finally')"), self.statements(r.randint(0, 2))))

    def s_with(self):
        if not self.f["classes"]:
            return self.s_try()
        w = self.fresh("w")
        # Ctx records into the list it is given: `log` (made in f) only with
        # native_to_python, else a module global (the caller's Python list)
        sink = "log" if self.f["native_to_python"] else "EVENTS"
        if sink == "EVENTS":
            self.globals.setdefault("EVENTS", (LIST, "[]"))
        self.emit(f"with Ctx({sink}, {self.r.choice(['True', 'False', 'False'])}) as {w}:")

        def body():
            self.bind(w, INT, readonly=True)
            self.statements(self.r.randint(1, 3))
            if self.r.random() < 0.3:
                self.s_raise()
        self.block(body)

    def s_closure(self):
        """A nested def over the enclosing scope: reads its variables, mutates
        its containers, and rebinds an int cell through nonlocal."""
        r = self.r
        cell = self.fresh("n")
        self.emit(f"{cell} = {self.e_int(1)}")
        self.bind(cell, INT)
        name = self.fresh("g")
        p = self.fresh("p")
        nparams = r.choice([1, 1, 2])
        params = [p] + ([self.fresh("q")] if nparams == 2 else [])
        default = f"={self.small_int()}" if nparams == 2 and r.random() < 0.5 else ""
        self.emit(f"def {name}({params[0]}" + (f", {params[1]}{default}" if nparams == 2 else "") + "):")
        self.closure_depth += 1
        saved = (self.loop_depth, self.frozen, self.funcs, self.grown)
        grown = self.grown = set()
        # Inside the nested def: no loop to break; the enclosing loops'
        # containers may not be grown either (it may be called from them).
        self.loop_depth = 0
        self.funcs = []

        def body():
            self.emit(f"nonlocal {cell}")
            for q in params:
                self.bind(q, INT)
            # The cell is writable here; outer ints are read-only (assigning
            # one would make it local to the nested def).
            outer_vars = [v for s in self.scopes[:-1] for v in s]
            restore = [(v, v.readonly) for v in outer_vars]
            for v, _ in restore:
                v.readonly = v.name != cell
            self.statements(r.randint(1, 3))
            self.emit(f"{cell} += {params[0]}")
            self.emit(f"return {self.e_int(1)}")
            for v, ro in restore:
                v.readonly = ro
        self.block(body)
        self.loop_depth, self.frozen, self.funcs, self.grown = saved
        self.closure_depth -= 1
        self.funcs.append((name, nparams, grown, len(self.scopes), params))

    def s_lambda(self):
        name = self.fresh("h")
        x = self.fresh("x")
        self.scopes.append([Var(x, INT, readonly=True)])
        # What the body grows through the closures it calls, the lambda
        # grows: a loop over that container must not call it (found by
        # fuzz_frontend: a lambda calling a def that appends to the list
        # being enumerated never ended, in CPython too).
        saved, self.grown = self.grown, set()
        body = self.e_int(1)
        grown, self.grown = self.grown, saved
        if saved is not None:
            saved |= grown
        self.scopes.pop()
        self.emit(f"{name} = lambda {x}: {body}")
        self.funcs.append((name, 1, grown, len(self.scopes), [x]))

    def call_closure(self, d):
        # never one that grows a container being iterated (it would not end)
        ok = [fn for fn in self.funcs if not (fn[2] & self.frozen)]
        if not ok:
            return self.small_int()
        name, n, grows, _, params = self.pick(ok)
        if self.grown is not None:
            self.grown |= grows
        # too few arguments only with arity_errors: kiln names a nested
        # function f__g in the TypeError where CPython says f.<locals>.g
        few = self.f["arity_errors"] and self.r.random() < 0.3
        args = [self.e_int(d + 1) for _ in range(1 if few else n)]
        if self.f["kwargs"] and len(args) == 2 and self.r.random() < 0.5:
            args[1] = f"{params[1]}={args[1]}"
        return f"{name}({', '.join(args)})"

    def s_call(self):
        self.emit(f"log.append({self.call_closure(1)})")

    def s_obj(self):
        r = self.r
        o = self.var(OBJ)
        if o is None or r.random() < 0.2:
            name = self.fresh("o")
            self.emit(f"{name} = {self.e_obj(1)}")
            self.bind(name, OBJ)
            return
        k = r.choice(["set", "aug", "push", "bump", "items", "missing", "new_attr", "getattr"])
        if k == "set":
            self.emit(f"{o.name}.v = {self.e_int(1)}")
        elif k == "aug":
            self.emit(f"{o.name}.v {r.choice(['+=', '-=', '*='])} {self.e_int(1)}")
        elif k == "push":
            self.emit(f"log.append({o.name}.push({self.e_int(1)}))")
        elif k == "bump":
            self.emit(f"log.append({o.name}.bump({self.e_int(1)}))")
        elif k == "items":
            self.emit(f"log.append(len({o.name}.items))")
        elif k == "missing":
            if self.f["errors"]:
                self.emit(f"log.append({o.name}.missing)")
            else:
                self.emit(f"log.append(hasattr({o.name}, 'missing'))")
        elif k == "new_attr":
            self.emit(f"{o.name}.extra = {self.any_expr(1)}")
        else:
            self.emit(f"log.append(getattr({o.name}, {r.choice(['v', 'tag', 'nope'])!r}, None))")

    def s_global(self):
        r = self.r
        name = self.pick(sorted(n for n in self.globals if n != "EVENTS"))
        ty = self.globals[name][0]
        if ty == INT:  # declared global at the top of f
            self.emit(f"{name} {r.choice(['+=', '-=', '='])} {self.e_int(1)}")
        elif ty == LIST:
            g = next(v for v in self.vars(LIST) if v.name == name)
            grows = [f"{name}.append({self.e_int(1)})", f"{name}.extend({self.growth()})"]
            self.emit(r.choice([f"log.append(len({name}))", f"log.append(sum({name}))"] +
                               (grows if g.group not in self.frozen else [])))
        else:
            self.emit(r.choice([f"{name}[{self.e_key()}] = {self.e_int(1)}", f"log.append({name}.get({self.e_key()}))",
                                f"{name}.pop({self.e_key()}, None)"]))

    def s_tensor(self):
        r = self.r
        t = self.var(TENSOR)
        if r.random() < 0.3:
            name = self.fresh("t")
            src = self.e_tensor(1)
            self.emit(f"{name} = {src}")
            # only elementwise results keep the shape we know
            if src.startswith("(") and "[" not in src and ">" not in src and "sum" not in src:
                self.bind(name, TENSOR, shape=t.shape)
            return
        k = r.choice(["log", "index", "index", "item", "len"])
        if k == "log":
            self.emit(f"log.append({self.e_tensor(1)})")
        elif k == "index":
            self.emit(f"log.append({t.name}[{self.tensor_key(t.shape)}])")
        elif k == "item":
            self.emit(f"log.append({self.e_float(1)})")
        else:
            self.emit(f"log.append({t.name}.shape)")

    def s_setitem(self):
        r = self.r
        t = self.var(TENSOR)
        y = self.fresh("y")
        self.emit(f"{y} = {t.name}{r.choice(['.clone()', ' * 1.0', ' + 0'])}")
        if r.random() < 0.3:
            # A write through a view of y (or through a copy, for an
            # advanced key): y and the view both see it, or only the copy.
            v = self.fresh("v")
            self.emit(f"{v} = {y}[{self.tensor_key(t.shape)}]")
            self.emit(r.choice([f"{v} += {self.small_int()}", f"{v}[...] = {self.e_float(1)}", f"{v}.mul_(2)",
                                f"{y} -= 1"]))
            self.emit(f"log.append({v})")
        for _ in range(r.randint(1, 2)):
            key = self.tensor_key(t.shape)
            val = r.choice([self.e_float(1), self.small_int(), f"{y}[{key}] * 2", "-1.5"])
            if r.random() < 0.2:
                self.emit(f"{y}[{key}] += {self.small_int()}")
            else:
                self.emit(f"{y}[{key}] = {val}")
        self.emit(f"log.append({y})")
        self.bind(y, TENSOR, shape=t.shape)

    def s_break_graph(self):
        self.emit('print(end="")')

    def s_print(self):
        """Real output, compared exactly in exact mode; a print is also a
        graph break, so prints land on both sides of breaks."""
        r = self.r
        p = self.printable
        k = r.choice(["one", "many", "sep", "fstring", "star", "float", "empty"])
        if k == "one":
            self.emit(f"print({p()})")
        elif k == "many":
            self.emit(f"print({', '.join(p() for _ in range(r.randint(2, 3)))})")
        elif k == "sep":
            self.emit(f"print({p()}, {p()}, sep={r.choice([', ', '', '|'])!r}, end={r.choice(['', ' ', '!', '.'])!r})")
        elif k == "fstring" and self.f["fstrings"]:
            self.emit(f"print({self.fstring(1)})")
        elif k == "star" and self.f["containers"]:
            self.emit(f"print(*{self.e_list(1)}, sep={r.choice([' ', ','])!r})")
        elif k == "float":
            f = self.e_float(1)
            self.emit(r.choice([f"print({f})", f"print(repr({f}), {self.e_float(1)}, flush=True)"]))
        else:
            self.emit("print()")

    def s_float(self):
        r = self.r
        k = r.choice(["new", "new", "aug", "acc" if self.f["loops"] else "new", "log"])
        vs = [v for v in self.vars(FLOAT, writable=True)]
        if k == "aug" and vs:
            v = self.pick(vs)
            if r.random() < 0.3:
                self.emit(f"{v.name} /= ({self.e_float(1)} or 0.5)")
            else:
                self.emit(f"{v.name} {r.choice(['+=', '-=', '*='])} {self.e_float(1)}")
        elif k == "acc":  # a sum that rounds at every step: its order matters
            acc, i = self.fresh("f"), self.fresh("i")
            self.emit(f"{acc} = {r.choice(['0.0', '-0.0', '1.0', self.float_literal()])}")
            self.emit(f"for {i} in range({r.randint(1, 6)}):")
            step = r.choice([f"{acc} += {i} * {self.float_literal()}", f"{acc} = {acc} * 1.1 + {self.float_literal()}",
                             f"{acc} -= {acc} / 3", f"{acc} += 0.1"])
            self.block(lambda: self.emit(step))
            self.emit(f"log.append({acc})")
            self.bind(acc, FLOAT)
        elif k == "log":
            self.emit(f"log.append({self.e_float(1)})")
        else:
            name = self.fresh("f")
            self.emit(f"{name} = {self.e_float(0)}")
            self.bind(name, FLOAT)

    def s_kwcall(self):
        call = self.kw_call(1)
        if call is None:
            return self.s_assign()
        self.emit(f"log.append({call})")

    def s_slot(self):
        r = self.r
        o = self.var(SLOT)
        if o is None or r.random() < 0.2:
            name = self.fresh("p")
            src, shape = self.e_slot(1)
            self.emit(f"{name} = {src}")
            self.bind(name, SLOT, shape=shape)
            return
        n = o.name
        k = r.choice(["set", "set", "aug", "move", "mark", "pair", "norm", "setattr", "tags", "tags", "alias",
                      "del", "bad_attr"])
        attr = r.choice(["x", "y"] + (["z"] if o.shape == 3 else []))
        if k == "set":
            self.emit(f"{n}.{attr} = {self.e_float(1)}")
        elif k == "aug":
            self.emit(f"{n}.{attr} {r.choice(['+=', '-=', '*='])} {self.e_float(1)}")
        elif k == "move":
            dy = f", {'dy=' if self.f['kwargs'] else ''}{self.e_float(1)}" if r.random() < 0.5 else ""
            self.emit(f"log.append({n}.move({self.e_float(1)}{dy}))")
        elif k == "mark":
            self.emit(f"log.append({n}.mark({self.pick(WORDS)!r}"
                      + (f", times={r.randint(0, 3)}" if self.f["kwargs"] else "") + "))")
        elif k == "pair":
            self.emit(f"log.append(({n}.x, {n}.y))")
        elif k == "norm":
            self.emit(f"log.append({n}.norm2())")
        elif k == "setattr":
            self.emit(f"setattr({n}, {attr!r}, {self.e_float(1)})")
        elif k == "tags":
            self.emit(r.choice([f"{n}.tags.append({self.e_int(1)})", f"log.append(len({n}.tags))",
                                f"{n}.tags = {n}.tags[{self.slice_src()}]", f"log.append({n}.tags[:])"]))
        elif k == "alias":  # one object through two names
            name = self.fresh("p")
            self.emit(f"{name} = {n}")
            self.bind(name, SLOT, group=o.group, shape=o.shape)
        elif k == "del":
            # a deleted slot reads as AttributeError; put back unless errors
            # may end the program there
            self.emit(f"del {n}.{attr}")
            self.emit(f"log.append(hasattr({n}, {attr!r}))")
            if not (self.f["errors"] and r.random() < 0.3):
                self.emit(f"{n}.{attr} = {self.e_float(1)}")
        elif self.f["errors"]:
            probe = r.choice([f"{n}.w", f"vars({n})", f"{n}.__dict__"])
            store = r.choice([f"{n}.w = 1", f"setattr({n}, 'w', 2)"]
                             + ([f"retag({n}, 'q')"] if self.f["kwargs"] else []))
            if self.f["exceptions"] and r.random() < 0.6:
                e = self.fresh("e")
                self.emit("try:")
                self.block(lambda: self.emit(r.choice([f"log.append({probe})", store])))
                self.emit(f"except (AttributeError, TypeError) as {e}:")
                self.block(lambda: self.emit(f"log.append(str({e}))"))
            else:
                self.emit(r.choice([f"log.append({probe})", store]))
        else:
            self.emit(f"log.append(hasattr({n}, 'w'))")

    def s_error_probe(self):
        """An operation CPython rejects: the message is compared."""
        r = self.r
        i = self.e_int(1)
        probes = [f"({i} + 'a')", f"('a' + {i})", f"len({i})", f"{i}[0]",
                  f"{{}}[{r.choice(['1', repr('q'), '(1, 2)'])}]", f"({i} / 0)", f"({i} // 0)", f"({i} % 0)",
                  f"(1.5 // 0.0)", f"int({r.choice(['x', '1.5', ''])!r})", f"abs({i})()", f"[].pop()",
                  f"{{}}.popitem()", f"(None + {i})", f"[1][{i} + 5]", f"({i} < 'a')", f"float('z')",
                  f"[1, 2].index(9)", f"{{1}}.remove(2)", f"'ab'[9]",
                  f"(1, 2)[5]", f"({i}).nope", f"'x'.nope()", f"[0] * 'a'", f"sum(['a', 'b'])",
                  f"max([])", f"min(1)", f"list(5)", f"(2 ** -1) + ''", f"abs('a')", f"sorted([1, 'a'])",
                  f"[1, 2, 3][::0]"]
        if self.f["pending_builtins"]:  # builtins' words, str % and str.format's errors
            probes += [f"dict([1])", f"{{}}.fromkeys()", f"('%d' % 'x')", f"range(1.5)",
                       f"[1, 2][{r.choice(['1.0', repr('a'), 'None'])}]", f"('%s %s' % ({i},))",
                       f"('x' % {i})", f"'{{}}{{}}'.format({i})", f"'{{0}}{{}}'.format(1, 2)", f"chr(-1)",
                       f"ord('ab')", f"divmod({i}, 0)", f"round('a')", f"slice(1, 2, 3, 4)",
                       f"max([], key=abs)", f"sorted([1, 'a'], key=str)[{i}]", f"bin(1.5)",
                       f"dict([(1, 2, 3)])", f"issubclass(1, int)", f"'{{z}}'.format(a={i})"]
        if self.f["classes"]:
            probes += ["Box(1)", "Box(1, [], 3)", "Box(1, []).nope()", "Ctx([], False).__enter__(1)"]
        if self.f["tensors"] and self.vars(TENSOR):
            t = self.var(TENSOR)
            probes += [f"{t.name}[{t.shape[0]}]", f"{t.name}[0, 0, 0, 0, 0]", f"{t.name}[::-1]",
                       f"{t.name}.reshape(7, 11)", f"({t.name} + kiln.ones(13))", f"{t.name}['a']",
                       f"{t.name}[1.5]"]
        probe = self.pick(probes)
        if r.random() < 0.6 and self.f["exceptions"]:
            e = self.fresh("e")
            self.emit("try:")
            self.block(lambda: self.emit(f"log.append({probe})"))
            self.emit(f"except Exception as {e}:")
            self.block(lambda: self.emit(f"log.append(str({e}))"))
        else:
            self.emit(f"log.append({probe})")

    def s_class_feature(self):
        r = self.r
        k = r.choice(["coded", "counter", "classmethod", "static", "delattr", "class"])
        if k == "coded":
            self.emit(f"if {self.e_bool(1)}:")
            self.block(lambda: self.emit(f"raise Coded({self.e_int(1)})"))
        elif k == "counter":
            self.emit(f"log.append(Counter({self.e_int(1)}).double)")
        elif k == "classmethod":
            self.emit(f"log.append(Counter.make({self.e_int(1)}).v + Counter.scale)")
        elif k == "static":
            self.emit(f"log.append(Counter.twice({self.e_int(1)}))")
        elif k == "delattr":
            o = self.var(OBJ)
            if o:
                self.emit(f"{o.name}.extra = 1")
                self.emit(f"del {o.name}.extra")
                self.emit(f"log.append(hasattr({o.name}, 'extra'))")
        else:
            o = self.var(OBJ)
            if o:
                self.emit(f"log.append({o.name}.__class__.__name__)")

    # -- the module -------------------------------------------------------------------
    def arg_value(self, ty, shape=None):
        r = self.r
        if ty == INT:
            return str(r.choice([0, 1, 2, 3, -4, 7, 12]))
        if ty == FLOAT:
            if self.f["floats"] and r.random() < 0.5:
                return r.choice(["0.1", "-0.0", "1e-300", "1.1", "2.5e-5", "1e16", "0.30000000000000004", "-7.0"])
            return r.choice(["0.5", "-1.25", "2.0", "3.5"])
        if ty == STR:
            return repr(self.pick(WORDS))
        if ty == BOOL:
            return r.choice(["True", "False"])
        if ty == LIST:
            return str([r.randint(-3, 9) for _ in range(r.randint(0, 5))])
        if ty == DICT:
            keys = r.sample(KEYS, r.randint(0, 4))
            return "{" + ", ".join(f"{k!r}: {r.randint(-2, 9)}" for k in keys) + "}"
        if ty == SET:
            # With set_order, wider values: colliding entries show the order.
            hi = 40 if self.f["set_order"] else 9
            vals = sorted({r.randint(-2, hi) for _ in range(r.randint(0, 4 if hi == 9 else 7))})
            return "{" + ", ".join(map(str, vals)) + "}" if vals else "set()"
        if ty == TUPLE:
            vals = [r.randint(-3, 9) for _ in range(r.randint(0, 3))]
            return "(" + "".join(f"{v}, " for v in vals) + ")"
        if ty == OBJ:
            return f"Box({r.randint(0, 5)}, {[r.randint(0, 5) for _ in range(r.randint(0, 3))]})"
        if ty == SLOT:
            xs = ", ".join(self.arg_value(FLOAT) for _ in range(3 if shape == 3 else 2))
            return f"Pt{'3' if shape == 3 else ''}({xs})"
        raise AssertionError(ty)

    def program(self):
        r, f = self.r, self.f
        tys = [INT, INT, FLOAT, BOOL]
        if f["strings"]:
            tys += [STR]
        if f["containers"]:
            tys += [LIST, LIST, LIST, DICT, DICT, SET, TUPLE]
        if f["classes"]:
            tys += [OBJ]
        params, args = [], []
        tensor = f["tensors"] and r.random() < 0.35
        if tensor:
            src, shape = self.pick(TENSOR_ARGS)
            params.append("t")
            args.append(src)
            self.bind("t", TENSOR, shape=shape)
        for _ in range(r.randint(1, 4)):
            ty = self.pick(tys)
            name = self.fresh("a")
            params.append(name)
            args.append(self.arg_value(ty))
            self.bind(name, ty)
        if f["containers"] and len(self.vars(LIST)) == 1 and r.random() < 0.1:
            # the caller passes one list twice: aliasing between arguments
            lv = self.vars(LIST)[0]
            name = self.fresh("a")
            params.append(name)
            args.append(f"<alias {params.index(lv.name)}>")
            self.bind(name, LIST, group=lv.group)
        if f["slots"] and r.random() < 0.3:
            name, shape = self.fresh("a"), r.choice([2, 3])
            params.append(name)
            args.append(self.arg_value(SLOT, shape))
            self.bind(name, SLOT, shape=shape)
        kwargs = []
        if f["kwargs"] and r.random() < 0.6:
            # Parameters passed by keyword, in another order than declared:
            # mostly what the body mutates, so their state after the call
            # is compared (keyword-only after `*` or plain parameters).
            kw_tys = [INT, FLOAT]
            if f["containers"]:
                kw_tys += [LIST, LIST, DICT, DICT]
            if f["classes"]:
                kw_tys += [OBJ]
            if f["slots"]:
                kw_tys += [SLOT]
            for _ in range(r.randint(1, 3)):
                ty = self.pick(kw_tys)
                name = self.fresh("k")
                shape = r.choice([2, 3]) if ty == SLOT else None
                positional = [v for v in self.vars(LIST) if v.name in params]
                if ty == LIST and positional and r.random() < 0.2:  # the caller's list, by position and by keyword
                    src = self.pick(positional)
                    kwargs.append((name, f"<alias {params.index(src.name)}>"))
                    self.bind(name, LIST, group=src.group)
                    continue
                kwargs.append((name, self.arg_value(ty, shape)))
                self.bind(name, ty, shape=shape)
            kw_params = [k for k, _ in kwargs]
            params += ["*"] + kw_params if r.random() < 0.6 else kw_params
            r.shuffle(kwargs)
        if f["globals"]:
            for ty in r.sample([INT, LIST, DICT], r.randint(0, 2)):
                name = f"G_{ty.upper()}"
                self.globals[name] = (ty, self.arg_value(ty))
                self.bind(name, ty, readonly=True)  # rebinding needs `global`
        if "G_INT" in self.globals:
            self.emit("global G_INT")
        self.emit("log = []")
        self.statements(self.budget)
        rets = ["log"] + [v.name for v in self.r.sample(self.scopes[0], min(len(self.scopes[0]), r.randint(0, 3)))
                          if not v.name.startswith("G_")]
        if r.random() < 0.1 and self.vars(LIST):
            rets = [self.var(LIST).name]  # returns a caller's list: identity is compared
        self.emit("return " + (", ".join(rets) if len(rets) > 1 else rets[0]))
        head = []
        if f["classes"] or f["exceptions"]:
            head.append(PRELUDE_CLASSES.strip("\n"))
        if f["class_features"] and f["classes"]:
            head.append(PRELUDE_CLASS_FEATURES.strip("\n"))
        if f["kwargs"]:
            head.append(PRELUDE_KWARGS.strip("\n"))
        if f["slots"]:
            head.append(PRELUDE_SLOTS.strip("\n"))
        if f["floats"]:
            head.insert(0, "import math")
        for name, (ty, init) in sorted(self.globals.items()):
            head.append(f"{name} = {init}")
        head.append(f"def f({', '.join(params)}):")
        source = "\n\n\n".join(head) + "\n" + "\n".join(self.lines) + "\n"
        return Program(self.seed, self.f, source, "[" + ", ".join(args) + "]", sorted(self.globals), kwargs)


def generate(seed, feats=None):
    return Gen(seed, feats or dict(FEATURES)).program()


# ------------------------------------------------------------------ running --

def build_args(program, ns):
    """The argument list: `<alias i>` entries are argument i itself."""
    parts = _split_args(program.args_src)
    out = []
    for p in parts:
        if p.startswith("<alias "):
            out.append(out[int(p[7:-1])])
        else:
            out.append(eval(p, ns))
    return out


def build_call(program, ns):
    """(args, kwargs): a keyword argument `<alias i>` is positional argument
    i itself (one object passed both ways)."""
    args = build_args(program, ns)
    kwargs = {name: args[int(src[7:-1])] if src.startswith("<alias ") else eval(src, ns)
              for name, src in program.kwargs}
    return args, kwargs


def _split_args(src):
    """Top-level comma split of "[a, b, ...]" (the argument sources)."""
    body, parts, depth, cur, quote = src[1:-1], [], 0, "", None
    for ch in body:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def load(program):
    """Executes the program's module; returns (f, args, kwargs, globals_)."""
    import linecache

    import numpy as np

    import kiln
    ns = {"__name__": f"progen_{program.seed}", "kiln": kiln, "np": np}
    linecache.cache[program.filename] = (len(program.source), None, program.source.splitlines(True),
                                         program.filename)
    with warnings.catch_warnings():  # "perhaps you missed a comma?": meant
        warnings.simplefilter("ignore")
        code = compile(program.source, program.filename, "exec")
    exec(code, ns)
    globals_ = {name: ns[name] for name in program.global_names}
    args, kwargs = build_call(program, ns)
    return ns["f"], args, kwargs, globals_


def run_program(program, backends=None, exact=None):
    """differential.check on the program: raises AssertionError naming the
    seed and the full source when kiln differs from CPython. `exact` is
    check's (None: on). Returns CPython's outcome."""
    from differential import BACKENDS, UnsupportedVersion, check
    fn, args, kwargs, globals_ = load(program)
    try:
        return check(fn, *args, kwargs=kwargs, globals_=globals_, backends=backends or BACKENDS, exact=exact)
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- program {program.describe()}") from None
    except UnsupportedVersion:
        raise  # kiln does not read this CPython yet (conftest.py skips the test)
    except Exception as e:  # the harness itself must not fail: kiln broke it
        raise AssertionError(f"harness error {type(e).__name__}: {e}\n--- program {program.describe()}") from e


def translated(program):
    """Whether kiln translates `f` (False: it runs on CPython as a whole)."""
    from kiln._frontend import Untranslatable, translate
    fn = load(program)[0]
    try:
        translate(fn)
        return True
    except Untranslatable:
        return False


def _failure_kind(program, backends=None):
    """The first line of the program's difference report with numbers blanked
    (None: no difference), to keep a reduction on the same defect."""
    import re
    try:
        run_program(program, backends)
        return None
    except AssertionError as e:
        first = str(e).split("\n")[0]
        return re.sub(r"0x[0-9a-f]+|-?\d+", "N", first.split(": ", 1)[-1])


class _TooLong(Exception):
    pass


def _terminates(program, lines=200_000):
    """Whether the program ends on CPython within `lines` line events: a
    reduction that drops a loop's `i += 1` must not hang kiln's run."""
    fn, args, kwargs, _ = load(program)
    left = [lines]

    def tracer(frame, event, arg):
        if event == "line":
            left[0] -= 1
            if left[0] < 0:
                raise _TooLong()
        return tracer

    sys.settrace(tracer)
    try:
        with contextlib.redirect_stdout(None):  # the program's prints
            fn(*args, **kwargs)
    except _TooLong:
        return False
    except Exception:  # the program's own exception: it ended
        pass
    finally:
        sys.settrace(None)
    return True


def reduce(program):
    """A smaller program with the same difference: lines of `f` (with the
    block a line opens) are dropped while the program still compiles and
    still fails the same way."""
    kind = _failure_kind(program)
    if kind is None:
        return program
    # A difference the eager backend shows is reduced on eager alone (no
    # LLVM compile per attempt: several times faster).
    backends = ("eager",) if _failure_kind(program, ("eager",)) == kind else None
    head, body = program.source.split("\ndef f(", 1)
    sig, *lines = ("def f(" + body).rstrip("\n").split("\n")

    def indent(line):
        return len(line) - len(line.lstrip())

    def attempt(candidate):
        src = head + "\n" + "\n".join([sig] + candidate) + "\n"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(src, "<reduce>", "exec")
        except SyntaxError:
            return False
        trial = Program(program.seed, program.feats, src, program.args_src, program.global_names, program.kwargs)
        return _terminates(trial) and _failure_kind(trial, backends) == kind

    changed = True
    while changed:
        changed = False
        i = len(lines) - 1
        while i >= 0:
            if lines[i].strip().startswith("return ") and indent(lines[i]) == 4:
                i -= 1
                continue
            j = i + 1  # the line and the block it opens
            while j < len(lines) and indent(lines[j]) > indent(lines[i]):
                j += 1
            for cand in (lines[:i] + lines[j:], lines[:i] + [" " * indent(lines[i]) + "pass"] + lines[j:]):
                if cand != lines and attempt(cand):
                    lines = cand
                    changed = True
                    break
            i = min(i, len(lines)) - 1
    # the prelude's classes that the reduced body never names
    src = head + "\n" + "\n".join([sig] + lines) + "\n"
    return Program(program.seed, program.feats, src, program.args_src, program.global_names, program.kwargs)


# ------------------------------------------------------------------ command --

RECYCLE = 1000


def _worker(start, stop, step, feats):
    """Runs seeds start, start+step, ... < stop; reports on a private fd
    (the programs' own prints and kiln's logs go to /dev/null)."""
    # A program that grows without bound (a string doubled per iteration)
    # fails here as MemoryError or a crash, not by taking the machine's memory.
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    out = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = open(os.devnull, "w")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kiln  # noqa: F401  (the import cost is not a program's)
    # A worker ends after RECYCLE programs and a fresh one goes on from the
    # next seed: a process that has compiled tens of thousands of programs
    # holds their caches and slows down several times over.
    for seed in list(range(start, stop, step))[:RECYCLE]:
        out.write(f"S {seed}\n")
        prog = generate(seed, feats)
        try:
            outcome = run_program(prog)
            out.write(f"K {seed} {'ok' if outcome[0] == 'ok' else 'raise'} {int(translated(prog))}\n")
        except AssertionError as e:
            out.write("F " + json.dumps({"seed": seed, "report": str(e)}) + "\n")
    out.write("D\n")


def run_many(count, seed, jobs, feats, timeout, show, quiet=False):
    """Runs `count` programs (seeds seed..seed+count-1) on `jobs` worker
    processes; a worker that crashes or hangs is reported against the seed
    it was running and restarted after it."""
    import selectors
    t0 = time.time()
    stats = {"programs": 0, "ok": 0, "raise": 0, "translated": 0, "differences": 0, "crashes": 0, "hangs": 0}
    failures = []
    spec = features_spec(feats)
    here = os.path.abspath(__file__)

    def spawn(start, step):
        cmd = [sys.executable, here, "--worker", str(start), str(seed + count), str(step)]
        if spec:
            cmd.append(f"--features={spec}")
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        return {"p": p, "step": step, "current": None, "since": time.time(), "buf": b""}

    def lines(w):
        """The worker's complete lines so far ("" at its end). Read from the
        raw pipe: a buffered reader would keep lines select() cannot see."""
        chunk = os.read(w["p"].stdout.fileno(), 1 << 16)
        if not chunk:
            return [w["buf"].decode()] if w["buf"] else [""]
        w["buf"] += chunk
        *done, w["buf"] = w["buf"].split(b"\n")
        return [d.decode() + "\n" for d in done]

    def handle(w, line):
        if line.startswith("S "):
            w["current"], w["since"] = int(line.split()[1]), time.time()
        elif line.startswith("K "):
            _, s, kind, tr = line.split()
            w["last"] = int(s)
            stats["programs"] += 1
            stats[kind] += 1
            stats["translated"] += int(tr)
            w["current"] = None
        elif line.startswith("F "):
            rec = json.loads(line[2:])
            w["last"] = rec["seed"]
            if not quiet:
                print(f"FAILED seed {rec['seed']}: {rec['report'].splitlines()[0][:200]}", file=sys.stderr, flush=True)
            stats["programs"] += 1
            stats["differences"] += 1
            failures.append(rec)
            w["current"] = None
        elif line.startswith("D") or line == "":
            sel.unregister(w["p"].stdout)
            w["p"].wait()
            workers.remove(w)
            if line.startswith("D") and w.get("last") is not None and w["last"] + w["step"] < seed + count:
                nw = spawn(w["last"] + w["step"], w["step"])  # recycled (RECYCLE): a fresh worker goes on
                workers.append(nw)
                sel.register(nw["p"].stdout, selectors.EVENT_READ, nw)
            if line == "" and w["current"] is not None:  # crashed mid-program
                s = w["current"]
                stats["programs"] += 1
                stats["crashes"] += 1
                if not quiet:
                    print(f"FAILED seed {s}: worker died (exit {w['p'].returncode})", file=sys.stderr, flush=True)
                failures.append({"seed": s, "report": f"worker died (exit {w['p'].returncode}) running it\n"
                                                      f"--- program {generate(s, feats).describe()}"})
                if s + w["step"] < seed + count:
                    nw = spawn(s + w["step"], w["step"])
                    workers.append(nw)
                    sel.register(nw["p"].stdout, selectors.EVENT_READ, nw)

    sel = selectors.DefaultSelector()
    workers = []
    for j in range(jobs):
        if seed + j < seed + count:
            w = spawn(seed + j, jobs)
            workers.append(w)
            sel.register(w["p"].stdout, selectors.EVENT_READ, w)
    last_print = t0
    while workers:
        for key, _ in sel.select(timeout=1.0):
            w = key.data
            for line in lines(w):
                handle(w, line)
        now = time.time()
        for w in list(workers):
            if w["current"] is not None and now - w["since"] > timeout:
                s = w["current"]
                w["current"] = None
                w["p"].kill()  # reported as a hang; the EOF path then skips it
                stats["programs"] += 1
                stats["hangs"] += 1
                if not quiet:
                    print(f"FAILED seed {s}: no result after {timeout:.0f}s (hang)", file=sys.stderr, flush=True)
                failures.append({"seed": s, "report": f"no result after {timeout:.0f}s (hang)\n"
                                                      f"--- program {generate(s, feats).describe()}"})
                sel.unregister(w["p"].stdout)
                w["p"].wait()
                workers.remove(w)
                if s + w["step"] < seed + count:
                    nw = spawn(s + w["step"], w["step"])
                    workers.append(nw)
                    sel.register(nw["p"].stdout, selectors.EVENT_READ, nw)
        if not quiet and now - last_print > 30:
            last_print = now
            rate = stats["programs"] / (now - t0)
            print(f"... {stats['programs']}/{count} programs, {stats['differences'] + stats['crashes'] + stats['hangs']}"
                  f" failures, {rate:.0f}/s", file=sys.stderr, flush=True)
    stats["seconds"] = round(time.time() - t0, 1)
    failures.sort(key=lambda rec: rec["seed"])
    print(f"programs: {stats['programs']}  ok: {stats['ok']}  raised (same as CPython): {stats['raise']}  "
          f"translated by the frontend: {stats['translated']}")
    print(f"differences: {stats['differences']}  crashes: {stats['crashes']}  hangs: {stats['hangs']}  "
          f"time: {stats['seconds']}s ({stats['programs'] / max(stats['seconds'], 1e-9):.1f} programs/s)")
    for rec in failures[:show]:
        print(f"\n=== FAILED seed {rec['seed']}\n{rec['report']}")
    if len(failures) > show:
        print(f"\n... and {len(failures) - show} more failing seeds: "
              + " ".join(str(rec["seed"]) for rec in failures[show:show + 200]))
    return stats, failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000, help="how many programs")
    ap.add_argument("--seed", type=int, default=0, help="the first seed (programs use seed..seed+count-1)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--features", default="", help="+name,-name: switch constructs on or off "
                                                   f"({', '.join(FEATURES)})")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds one program may take before it counts as a hang")
    ap.add_argument("--first", type=int, default=5, help="how many failing programs to print in full")
    ap.add_argument("--json", metavar="FILE", help="write every failure (seed, report) to FILE")
    ap.add_argument("--show", type=int, metavar="SEED", help="print the program of SEED and exit")
    ap.add_argument("--reduce", type=int, metavar="SEED",
                    help="print a smaller program failing like SEED's (its function body reduced line by line)")
    ap.add_argument("--strict", action="store_true",
                    help="kiln's own failures raise (KILN_STRICT=1, also for the workers) instead of leaving the "
                         "frame to CPython")
    ap.add_argument("--worker", nargs=3, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.strict:  # before kiln is imported: its config reads it once
        os.environ["KILN_STRICT"] = "1"
    feats = parse_features(a.features)
    if a.worker:
        return _worker(*a.worker, feats)
    if a.reduce is not None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        small = reduce(generate(a.reduce, feats))
        print(small.describe())
        print(_failure_kind(small) or "(no difference)")
        return 0
    if a.show is not None:
        print(generate(a.show, feats).describe())
        return 0
    stats, failures = run_many(a.count, a.seed, max(1, a.jobs), feats, a.timeout, a.first)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"stats": stats, "failures": failures}, fh, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

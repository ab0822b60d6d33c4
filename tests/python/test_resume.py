"""kiln._resume: resume functions continue the original bytecode exactly.

The main proof is the split test: for a function f and every instruction
offset k where a split is allowed, `split_at(f, k)` is f changed so that on
first reaching k it does what kiln's residual does at a graph break (pack
the stack's non-NULL slots and the live bound locals, make the resume
function with f's globals and the frame's cells as its closure, return its
result). f_k(*args) must equal f(*args): return value, exception type and
message, innermost traceback frame (name and line), printed output, the
arguments' state afterwards (and the module's globals, for generated
programs). Run over hand-written functions and over programs from
tests/python/progen.py.
"""
import contextlib
import dis
import io
import os
import re
import sys
import types
import warnings

import pytest

import kiln

if not kiln._compile.VERSION_SUPPORTED:
    pytest.skip(f"kiln cannot read CPython {sys.version_info[0]}.{sys.version_info[1]}'s bytecode yet",
                allow_module_level=True)

from kiln import _bytecode as B  # noqa: E402
from kiln import _resume as R  # noqa: E402
from kiln import _bytecode_tables as T  # noqa: E402
from kiln._instructions import instructions  # noqa: E402  (dis's fields, positions on 3.10 too)

# ------------------------------------------------------------------ outcomes --

_ADDR = re.compile(r"0x[0-9a-fA-F]+")


def _noaddr(s):
    return _ADDR.sub("0x?", s)


def canon(x, path=None):
    """A structural, comparable picture of a value (objects by class and
    attributes, functions by qualname, sets in iteration order)."""
    path = set() if path is None else path
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
        return (type(x).__name__, repr(x))
    if id(x) in path:
        return ("<cycle>",)
    path.add(id(x))
    try:
        if isinstance(x, (list, tuple)):
            return (type(x).__name__, [canon(i, path) for i in x])
        if isinstance(x, dict):
            return ("dict", [(canon(k, path), canon(v, path)) for k, v in x.items()])
        if isinstance(x, (set, frozenset)):
            return (type(x).__name__, [canon(i, path) for i in x])
        if isinstance(x, BaseException):
            return ("exc", type(x).__qualname__, _noaddr(str(x)))
        if isinstance(x, type):
            return ("type", x.__qualname__)
        if isinstance(x, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
            return ("fn", getattr(x, "__qualname__", "?"))
        if hasattr(x, "__dict__"):
            return ("obj", type(x).__qualname__, canon(vars(x), path))
        slots = [n for k in type(x).__mro__ for n in ((lambda s: [s] if isinstance(s, str) else s)(
            k.__dict__.get("__slots__", ()))) if n not in ("__dict__", "__weakref__")]
        if slots:  # no __dict__: the state is in the slots (an unset one reads as AttributeError)
            return ("slots", type(x).__qualname__, [(n, canon(getattr(x, n, "<unset>"), path)) for n in slots])
        return ("other", type(x).__name__, _noaddr(repr(x)))
    finally:
        path.discard(id(x))


def outcome(fn, args, kwargs=None, reached=None):
    """(result or exception with its innermost frame, stdout, args after,
    kwargs after). With `reached` (a list), appends True when a resume
    function ran during the call (the split point was reached)."""
    buf = io.StringIO()
    ran = []

    def profile(frame, event, arg):
        if event == "call" and not ran and R.is_resume(frame.f_code):
            ran.append(True)
    if reached is not None:
        sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(buf):
            try:
                res = ("return", canon(fn(*args, **(kwargs or {}))))
            except Exception as e:  # noqa: BLE001  the exception is the outcome
                tb = e.__traceback__
                while tb.tb_next is not None:
                    tb = tb.tb_next
                res = ("raise", type(e).__qualname__, _noaddr(str(e)), tb.tb_frame.f_code.co_name, tb.tb_lineno)
    finally:
        if reached is not None:
            sys.setprofile(None)
            reached.extend(ran)
    return res, _noaddr(buf.getvalue()), canon(args), canon(kwargs)


def split_points(fn):
    """{offset: f_k or the reason the split is not allowed}."""
    out = {}
    for ins in dis.get_instructions(fn):
        if ins.opname in ("CACHE", "EXTENDED_ARG"):
            continue
        try:
            out[ins.offset] = R.split_at(fn, ins.offset)
        except R.ResumeError as e:
            out[ins.offset] = e
    return out


def check_splits(fn, calls, min_splits=1):
    """Every allowed split of fn agrees with fn on every call; `calls` are
    zero-argument functions returning (args, kwargs) afresh. Returns the
    number of splits run."""
    points = split_points(fn)
    done = 0
    reached = []
    for args_of in calls:
        args, kwargs = args_of()
        want = outcome(fn, args, kwargs)
        for k, fk in points.items():
            if isinstance(fk, Exception):
                continue
            args, kwargs = args_of()
            got = outcome(fk, args, kwargs, reached)
            assert got == want, f"{fn.__qualname__} split at {k} ({_op_at(fn, k)}) with {args_of()}:\n" \
                                f"  f:   {want}\n  f_k: {got}"
            done += 1
    assert done >= min_splits, (fn.__qualname__, {k: v for k, v in points.items() if isinstance(v, Exception)})
    assert len(reached) >= done // 4, f"only {len(reached)} of {done} splits were reached"
    return done


def _op_at(fn, k):
    return next(i.opname for i in dis.get_instructions(fn) if i.offset == k)


# --------------------------------------------------------- hand-written cases --

class Recorder:
    def __init__(self, log, swallow=False, name="cm"):
        self.log, self.swallow, self.name = log, swallow, name

    def __enter__(self):
        self.log.append(f"enter {self.name}")
        return self

    def __exit__(self, t, v, tb):
        self.log.append(f"exit {self.name} {None if t is None else t.__name__}")
        return self.swallow


def loops(xs, d, n):
    total = 0
    for x in xs:
        if x < 0:
            continue
        if x > 100:
            break
        total += x
    for i in range(n):
        for j in range(i):
            if (i * j) % 4 == 3:
                break
            total += i - j
        else:
            total += 1000
    for k, v in d.items():
        total += len(k) * v
        d[k] = v + 1
    i = 0
    while i < n:
        i += 1
        if i == 2:
            continue
        total -= i
        if total < -50:
            return ("early", total, i)
    xs.append(total)
    return total


def exceptions(x, log):
    try:
        log.append("try")
        r = 10 // x
        if r == 5:
            raise KeyError("five")
        log.append(r)
    except ZeroDivisionError as e:
        log.append(f"zde {e}")
        r = -1
    except KeyError:
        try:
            raise ValueError("from handler")
        except ValueError as e2:
            log.append(str(e2))
            if x == 2:
                raise TypeError(f"reraised {x}") from e2
        r = -2
    else:
        log.append("else")
    finally:
        log.append("finally")
    try:
        if x == 3:
            return "returned in try"
    finally:
        log.append("finally 2")
    for i in range(3):
        try:
            if i == x:
                return f"loop return {i}"
        finally:
            log.append(f"loop finally {i}")
    return r


def with_blocks(log, fail):
    with Recorder(log, name="a") as a:
        log.append(a.name)
        with Recorder(log, swallow=True, name="b"):
            if fail == 1:
                raise RuntimeError("swallowed")
            log.append("in b")
        log.append("after b")
    try:
        with Recorder(log, name="c"):
            if fail == 2:
                raise ValueError("escapes c")
            log.append("in c")
    except ValueError as e:
        log.append(f"caught {e}")
    with Recorder(log, name="d"):
        if fail == 3:
            raise LookupError("unhandled")
    return len(log)


def closures(n, log):
    a = n
    b = []

    def early():
        return a + len(b)
    log.append(early())
    a = n * 2           # a cell written after `early` was made
    b.append(a)
    late = lambda k: a * k + len(b)  # noqa: E731
    log.append(late(3))
    c = 0

    def bump():
        nonlocal c
        c += 1
        return c
    for _ in range(n):
        bump()
    a = a + c
    log.append((early(), late(1), c))
    return early() + late(2)


def comprehensions(xs, n):
    sq = [x * x for x in xs if x % 2]
    d = {x: [y for y in range(x)] for x in range(n)}
    s = {x % 3 for x in xs}
    g = sum(x for x in xs if x > n)
    return sq, d, sorted(s), g, [(i, j) for i in range(n) for j in range(i) if (i + j) % 2]


def varargs(a, *args, k=3, key="x", **kw):
    out = [a, k, key]
    for x in args:
        out.append(x * k)
    for name in sorted(kw):
        out.append((name, kw[name]))
    kw["added"] = len(args)
    print("varargs", a, *args, sep=",", end=";\n")
    return out, kw


def unbound(flag):
    if flag:
        x = 1
    y = 2
    if flag > 1:
        del y
    try:
        return x + y
    except UnboundLocalError as e:
        return str(e)


def raises_unhandled(xs):
    total = 0
    for x in xs:
        total += 10 / x
    return total


def calls_and_nulls(xs, obj):
    print("sum", sum(xs), max(xs, key=lambda v: -v), sep="|")
    r = obj.bump(len(xs)) + obj.bump(k=2)
    return [str(x).rjust(3, "*") for x in xs], r, f"{r!r:>6}|{xs[0]:+.2f}"


class Bumper:
    def __init__(self):
        self.v = 0

    def bump(self, n=1, k=1):
        self.v += n * k
        return self.v


def lasti_reraise(log):
    # A `with` cleanup that re-raises (RERAISE with the lasti on the stack)
    # must unwind to the outer handler: splits inside the cleanup pass lasti.
    try:
        with Recorder(log, name="r"):
            log.append("body")
            raise KeyError("k")
    except KeyError as e:
        log.append(f"outer caught {e}")
    try:
        try:
            raise ValueError("v")
        finally:
            log.append("finally runs")
    except ValueError:
        log.append("outer 2")
    return log


class Base:
    def describe(self, x):
        return f"base {x}"


class Child(Base):
    def describe(self, x):
        y = x * 2
        print("child", y)
        return super().describe(y) + "!"


def outer_with_cells(n):
    cell = [n]

    def inner(k):  # a function with free variables; leaves them as it found them
        saved = cell[0]
        total = 0
        for i in range(k):
            cell[0] += i
            total += cell[0] + n
        result = total, list(cell)
        cell[0] = saved
        return result
    return inner


def cell_arg(x, log):
    def get():
        return x
    log.append(get())
    x += 1              # an argument that is a cell, written after `get` was made

    def both(k):        # a function with its own cell and a free variable
        y = k + x
        return (lambda: y * 2)()
    log.append(both(3))
    return get(), both(x)


COUNTER = 0


def expressions(a, b, xs, kw):
    global COUNTER
    COUNTER += 1
    chained = a < b <= len(xs) < 10
    either = (a and b) or (xs and xs[0]) or "none"
    first, *rest = xs or [0]
    xs[1:2] = [b, a]
    d = {"k": a}
    d["k"] += b
    o = Bumper()
    o.v += a * 2
    assert a != 99, f"a is {a!r:>5}"
    s = f"{a}-{b!s}-{first:03d}-{rest}-{either}-{chained}-{d}-{o.v:.1f}"
    print(s, *xs, sep="|", **kw)
    return sorted([*xs, *rest], key=abs), {**d, "n": COUNTER - COUNTER}, max(*xs, a)


def control(xs):
    out = []
    for x in xs:
        try:
            if x == 0:
                continue
            if x < 0:
                break
            with Recorder(out, name=str(x)):
                if x == 3:
                    return out, "returned in with"
                out.append(x)
        finally:
            out.append(f"f{x}")
    else:
        out.append("else")
    del xs[:1]
    return out


def match_stmt(v):
    match v:
        case 0 | 1:
            return "small"
        case [x, y, *zs] if x < y:
            return f"seq {x} {y} {zs}"
        case {"k": int(k), **rest}:
            return f"map {k} {sorted(rest)}"
        case Bumper(v=n) if n > 1:
            return f"bumper {n}"
        case str() as s:
            return s.upper()
        case _:
            return "other"


# except* is 3.11 syntax: compiled from text so that this module imports
# on 3.10 too.
if sys.version_info >= (3, 11):
    exec(compile('''
def except_star(n):
    log = []
    try:
        try:
            raise ExceptionGroup("g", [ValueError(n), KeyError(n), TypeError(n)][:n])
        except* ValueError as eg:
            log.append(("value", len(eg.exceptions)))
        except* KeyError:
            log.append("key")
    except ExceptionGroup as rest:
        log.append(("rest", [type(e).__name__ for e in rest.exceptions]))
    return log
''', __file__, "exec"))


def make_class(n):
    class Local(Bumper):
        scale = n

        def bump(self, m=1, k=1):
            return super().bump(m * self.scale, k)
    b = Local()
    b.bump(2)
    return b.v, Local.__qualname__


def _bumped(v):
    b = Bumper()
    b.v = v
    return b


HAND_WRITTEN = [
    (loops, [lambda: (([1, -2, 3, 500, 4], {"a": 1, "bb": 2}, 5), {}),
             lambda: (([], {}, 0), {}), lambda: (([7] * 3, {"x": -9}, 12), {})]),
    (exceptions, [lambda x=x: ((x, []), {}) for x in (0, 1, 2, 3, 4)]),
    (with_blocks, [lambda fail=fail: (([], fail), {}) for fail in (0, 1, 2, 3)]),
    (closures, [lambda n=n: ((n, []), {}) for n in (0, 3)]),
    (comprehensions, [lambda: (([1, 2, 3, 5, 8], 4), {})]),
    (varargs, [lambda: ((1, 2, 3), {"k": 5, "z": 9}), lambda: ((0,), {})]),
    (unbound, [lambda f=f: ((f,), {}) for f in (0, 1, 2)]),
    (raises_unhandled, [lambda: (([1, 2, 0, 4],), {}), lambda: (([4],), {})]),
    (calls_and_nulls, [lambda: (([3, 1, 2], Bumper()), {})]),
    (lasti_reraise, [lambda: (([],), {})]),
    (Child.describe, [lambda: ((Child(), 4), {})]),
    (outer_with_cells(5), [lambda: ((4,), {})]),
    (cell_arg, [lambda: ((5, []), {})]),
    (expressions, [lambda: ((1, 2, [5, -3, 4], {"end": "!\n"}), {}), lambda: ((0, 0, [], {}), {}),
                   lambda: ((99, 1, [1, 2], {}), {})]),
    (control, [lambda xs=xs: ((list(xs),), {}) for xs in ([1, 2, 0, 4], [1, 3, 5], [2, -1, 5], [])]),
    (match_stmt, [lambda v=v: ((v,), {}) for v in (1, [1, 2, 3], [2, 1], {"k": 4, "z": 1}, "s", 7.5)]
     + [lambda: ((_bumped(5),), {})]),
    (make_class, [lambda: ((3,), {})]),
] + ([(except_star, [lambda n=n: ((n,), {}) for n in (1, 2, 3)])] if sys.version_info >= (3, 11) else [])


@pytest.mark.parametrize("fn,calls", HAND_WRITTEN, ids=[f.__qualname__ for f, _ in HAND_WRITTEN])
def test_split_hand_written(fn, calls):
    check_splits(fn, calls, min_splits=5)


def test_split_covers_the_interesting_places():
    # Splits are allowed (and were run above) inside handlers with a lasti
    # on the stack, with NULLs on the stack, inside `with` bodies (__exit__
    # on the stack, under the handler's depth: the rebuilt stack must be
    # exactly the original's for the kept exception table to be right) and
    # `for` bodies (the iterator on the stack).
    seen = set()
    for fn, _ in HAND_WRITTEN:
        bc = B.decode(fn.__code__)
        shapes = B.stack_analysis(bc, mark_lasti=True)
        handlers = bc.handlers_of()
        for k, fk in split_points(fn).items():
            if isinstance(fk, Exception):
                continue
            ins = bc.at_offset(k)
            shape = shapes[ins]
            seen.update(shape)
            covering = handlers.get(ins, [])
            # (3.10: a with's block has no lasti; every handler row's is None)
            if covering and (covering[0].lasti or covering[0].lasti is None) and covering[0].depth >= 1:
                seen.add("inside a with body or handler, values under the handler depth")
            if ins.opname == "FOR_ITER" or (covering and len(shape) > covering[0].depth):
                seen.add("loop or expression state above a handler's depth")
            if any(e.handler is ins for e in bc.exc_table):
                seen.add("at a handler's first instruction")
    want = {"v", "inside a with body or handler, values under the handler depth",
            "loop or expression state above a handler's depth"}
    if T.CALL_TAKES_NULL:
        # 3.11+: NULLs and lasti slots on the stack, and handlers that can be
        # entered by a jump (3.10's are inside the EXCEPT_HANDLER block only
        # an exception pushes: refused, test_310_handlers_are_refused)
        want |= {"N", "L", "at a handler's first instruction"}
    assert want <= seen, seen


# ------------------------------------------------------------- the API itself --

def _sample(a, b):
    x = a + b
    y = [x, a]
    print("x", x)
    return y[0] * b


def test_make_resume_is_cached_and_keeps_the_users_names():
    code = _sample.__code__
    k = next(i.offset for i in dis.get_instructions(_sample) if i.opname == "BUILD_LIST")
    kinds = R.stack_kinds_at(code, k)
    assert kinds == ("v", "v")
    live = R.live_locals_at(code, k)
    assert live == ["b", "x"]  # the stack holds [x, a]; y is written before any read
    r1 = R.make_resume(code, k, kinds, live)
    r2 = R.make_resume(code, k, kinds, live)
    assert r1 is r2
    assert (r1.co_name, T.qualname(r1), r1.co_filename, r1.co_firstlineno) == \
        (code.co_name, T.qualname(code), code.co_filename, code.co_firstlineno)
    assert R.is_resume(r1) and not R.is_resume(code)
    info = R.resume_info(r1)
    assert info.original is code and info.offset == k and info.params == ("___stack0", "___stack1", "b", "x")
    assert r1.co_argcount == 4
    fn = types.FunctionType(r1, _sample.__globals__)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert fn(7, 3, 4, 7) == 28  # stack [x=7, a=3]; locals b=4, x=7
    assert buf.getvalue() == "x 7\n"
    assert R.make_resume(code, k, kinds, live, name="resumed").co_name == "resumed"
    # Every instruction kept has its original positions at its new offset.
    old_pos = {i.offset: i.positions for i in instructions(code)}
    new_pos = {i.offset: i.positions for i in instructions(r1)}
    assert info.offset_map and all(new_pos[info.offset_map[o]] == p for o, p in old_pos.items()
                                   if o in info.offset_map)


def test_cache_is_by_identity_not_code_equality():
    src = "def f(a):\n    b = a + 1\n    return b * 2\n"
    f1, f2 = ({}, {})
    exec(compile(src, "one.py", "exec"), f1)
    exec(compile(src, "two.py", "exec"), f2)
    c1, c2 = f1["f"].__code__, f2["f"].__code__
    assert c1 == c2 and c1.co_filename != c2.co_filename  # 3.11's __eq__ ignores the file
    k = next(i.offset for i in dis.get_instructions(c1) if i.opname in ("BINARY_OP", "BINARY_ADD"))
    r1 = R.make_resume(c1, k, ("v", "v"), [])
    r2 = R.make_resume(c2, k, ("v", "v"), [])
    assert (r1.co_filename, r2.co_filename) == ("one.py", "two.py")
    assert R.resume_info(r2).original is c2


def _corpus():
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import test_bytecode
    return test_bytecode.corpus()


# What make_resume may refuse on real code: the prologue, a split between
# KW_NAMES and its call, zero-argument super, (3.12) an END_FOR or a
# point inside an inlined comprehension, and (3.10) a point inside a
# handler (test_310_blocks).
ALLOWED_REFUSALS = "prologue|KW_NAMES|super|FOR_ITER skips|inlined comprehension|handler, whose block CPython 3.10"


def test_make_resume_on_real_code():
    # Resume code for offsets all over the stdlib and torch.nn: it
    # assembles, its stack at the target is the one given (so a break in
    # a resumed frame can be resumed again), and the same holds for a
    # resume of the resume code.
    import random
    rng = random.Random(0)
    codes = [c for c in _corpus() if not c.co_flags & 0x3a0]
    made = again = 0
    for code in rng.sample(codes, 1000):
        offsets = [i.offset for i in dis.get_instructions(code)]
        for k in rng.sample(offsets, min(4, len(offsets))):
            kinds = R.stack_kinds_at(code, k)
            if kinds is None:
                continue
            given = _passed(kinds)
            try:
                r = R.make_resume(code, k, given, R.live_locals_at(code, k))
            except R.ResumeError as e:
                assert re.search(ALLOWED_REFUSALS, str(e)), e
                continue
            made += 1
            info = R.resume_info(r)
            # (a loop's back edge may also reach the target with the method
            # pair itself: 'N'/'v' join it as 'M'/'S')
            back = R.stack_kinds_at(r, info.offset_map[k])
            assert _passed(back) == given
            k2 = rng.choice(list(info.offset_map.values()))
            kinds2 = R.stack_kinds_at(r, k2)
            if kinds2 is not None:
                try:
                    R.make_resume(r, k2, _passed(kinds2),
                                  R.live_locals_at(r, k2))
                    again += 1
                except R.ResumeError as e:
                    assert re.search(ALLOWED_REFUSALS, str(e)), e
    assert made > 2000 and again > 700, (made, again)


def test_resume_tracebacks_point_at_the_users_line():
    def f(xs, i):
        n = len(xs)
        return xs[i] + n
    k = next(i.offset for i in dis.get_instructions(f) if i.opname == "BINARY_SUBSCR")
    r = R.make_resume(f.__code__, k, ("v", "v"), ["n"])
    fn = types.FunctionType(r, f.__globals__)
    with pytest.raises(IndexError) as info:
        fn([1], 5, 1)
    tb = info.tb
    while tb.tb_next:
        tb = tb.tb_next
    assert tb.tb_frame.f_code is r and tb.tb_lineno == f.__code__.co_firstlineno + 2


def test_cells_cross_through_the_closure():
    def f(n):
        c = n

        def get():
            return c
        c += 1
        return get() + c
    code = f.__code__
    k = next(i.offset for i in dis.get_instructions(f) if i.opname == "LOAD_DEREF" and i.argval == "c")
    assert R.live_locals_at(code, k) == ["get"]
    r = R.make_resume(code, k, (), ["get"])
    assert r.co_freevars == ("c",) and R.resume_info(r).freevars == ("c",)
    cell = types.CellType(10)
    get_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    get = types.FunctionType(get_code, f.__globals__, closure=(cell,))
    fn = types.FunctionType(r, f.__globals__, closure=(cell,))
    # `get` was made before the break and sees the write made after it.
    assert fn(get) == 22 and cell.cell_contents == 11
    with pytest.raises(R.ResumeError, match="cells cross through the closure"):
        R.make_resume(code, k, (), ["c"])


def _passed(kinds):
    """What a caller passes for stack kinds: a method pair as a plain call's pair."""
    return tuple(x for k in kinds for x in (T.CALL_PAIR if k == "M" else () if k == "S" else (k,)))


def test_refusals_are_clear():
    def gen(n):
        yield n

    with pytest.raises(R.ResumeError, match="generator"):
        R.make_resume(gen.__code__, 4, (), [])
    with pytest.raises(R.ResumeError, match="not an instruction"):
        R.make_resume(_sample.__code__, 3, (), [])
    with pytest.raises(R.ResumeError, match="do not match"):
        R.make_resume(_sample.__code__, next(i.offset for i in dis.get_instructions(_sample)
                                              if i.opname == "BUILD_LIST"), ("v",), [])

    def kw(f):
        return f(1, k=2)
    if sys.version_info[:2] == (3, 11):  # KW_NAMES, PRECALL, CALL: the PRECALL too
        pre = next(i.offset for i in dis.get_instructions(kw) if i.opname == "PRECALL")
        with pytest.raises(R.ResumeError, match="KW_NAMES"):
            R.make_resume(kw.__code__, pre, ("N", "v", "v", "v"), [])
    if T.KW_NAMES is not None:  # (3.13: the names are a constant on the stack)
        call = next(i.offset for i in dis.get_instructions(kw) if i.opname == "CALL")
        with pytest.raises(R.ResumeError, match="KW_NAMES"):
            R.make_resume(kw.__code__, call, ("N", "v", "v", "v"), [])

    def meth(o):
        return o.append(1)
    for op in ("LOAD_CONST", "PRECALL", "CALL"):  # the pair passed as (NULL, bound method)
        if op not in dis.opmap:
            continue  # (no PRECALL after 3.11)
        lst = []
        assert R.split_at(meth, next(i.offset for i in dis.get_instructions(meth) if i.opname == op))(lst) is None
        assert lst == [1]


def _try_twice(x, out):
    try:
        out.append(x)
        with _Enters(out):
            y = 10 // x
        return y
    except ZeroDivisionError as e:
        out.append(type(e).__name__)
        return -1


class _Enters:
    def __init__(self, out):
        self.out = out

    def __enter__(self):
        self.out.append("enter")

    def __exit__(self, *exc):
        self.out.append(("exit", exc[0] and exc[0].__name__))


@pytest.mark.skipif(not T.BLOCK_SETUPS, reason="CPython 3.10's block stack")
def test_310_blocks():
    # A resume function inside try and with blocks pushes them again (an
    # exception after the split reaches both handlers); inside a handler,
    # whose EXCEPT_HANDLER block only entering it pushes, it is refused.
    ins = list(dis.get_instructions(_try_twice))
    bc = B.decode(_try_twice.__code__)
    inside = next(i.offset for i in ins if i.opname == "BINARY_FLOOR_DIVIDE")
    assert [kind for kind, _, _ in B.block_stacks(bc)[bc.at_offset(inside)]] == ["F", "W"]
    for x in (0, 5):
        want, got = [], []
        assert R.split_at(_try_twice, inside)(x, got) == _try_twice(x, want) and got == want, (x, got, want)
    assert want[-1] == ("exit", None) and len(got) == 3
    handler = next(i.offset for i in ins if i.opname == "JUMP_IF_NOT_EXC_MATCH")
    with pytest.raises(R.ResumeError, match="inside an except, finally or with handler"):
        R.split_at(_try_twice, handler)


def test_method_pair_is_passed_as_null_and_bound_callable():
    def meth(o, x):
        return o.append(x * 2)
    k = next(i.offset for i in dis.get_instructions(meth) if i.opname in ("BINARY_OP", "BINARY_MULTIPLY"))
    kinds = R.stack_kinds_at(meth.__code__, k)
    assert kinds == ("M", "S", "v", "v")
    r = R.make_resume(meth.__code__, k, T.CALL_PAIR + ("v", "v"), [])
    lst = []
    assert types.FunctionType(r, {})(lst.append, 3, 2) is None and lst == [6]
    # At the CALL, after PRECALL: the pair is dynamic ('M','S'); the caller
    # still passes (NULL, bound callable) (3.13: (bound callable, NULL)).
    k = next(i.offset for i in dis.get_instructions(meth) if i.opname in ("CALL", "CALL_METHOD"))
    assert R.stack_kinds_at(meth.__code__, k) == ("M", "S", "v")
    r = R.make_resume(meth.__code__, k, T.CALL_PAIR + ("v",), [])
    assert types.FunctionType(r, {})(lst.append, 5) is None and lst == [6, 5]
    with pytest.raises(R.ResumeError, match=f"pass a method pair 'MS' as '{''.join(T.CALL_PAIR)}'"):
        R.make_resume(meth.__code__, k, ("v", "v", "v"), [])


def test_live_and_bound_locals():
    def f(a, b, flag):
        c = a
        if flag:
            d = 1
        del a
        try:
            e = b / c
        except ZeroDivisionError:
            return d
        return e
    ins = list(dis.get_instructions(f))
    at_if = next(i.offset for i in ins if i.opname.startswith("POP_JUMP"))
    assert R.live_locals_at(f.__code__, at_if) == ["a", "b", "c", "d"]
    definitely, maybe = R.bound_locals_at(f.__code__, at_if)
    assert definitely == ["a", "b", "flag", "c"] and maybe == definitely
    at_del = next(i.offset for i in ins if i.opname == "DELETE_FAST")
    definitely, maybe = R.bound_locals_at(f.__code__, at_del)
    assert "d" in maybe and "d" not in definitely
    with pytest.raises(R.SplitNotAllowed, match="may or may not be bound"):
        R.split_at(f, at_del)


def test_zero_argument_super_gets_self_first():
    code = Child.describe.__code__
    k = next(i.offset for i in dis.get_instructions(Child.describe) if i.opname == "LOAD_GLOBAL"
             and i.argval == "print")
    live = R.live_locals_at(code, k)
    assert "self" in live
    r = R.make_resume(code, k, (), ["y", "self"])
    assert R.resume_info(r).params == ("self", "y")
    with pytest.raises(R.ResumeError, match="pass its first argument"):
        R.make_resume(code, k, (), ["y"])

    class CellSelf(Base):
        def describe(self, x):
            get = lambda: self  # noqa: E731  `self` is a cell
            return super().describe(x), get()
    code = CellSelf.describe.__code__
    k = next(i.offset for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL")
    with pytest.raises(R.ResumeError, match="is a cell"):
        R.make_resume(code, k, (), ["get"])


def test_split_a_resume_function():
    # kiln's hook compiles the frames resume functions run, and may break in
    # them again: a resume function of a resume function.
    code = loops.__code__
    k1 = next(i.offset for i in dis.get_instructions(loops) if i.opname == "FOR_ITER")
    kinds = R.stack_kinds_at(code, k1)
    assert kinds == ("v",)
    live = R.live_locals_at(code, k1)
    r1 = R.make_resume(code, k1, kinds, live)
    fn1 = types.FunctionType(r1, loops.__globals__)

    def args():
        xs, d, n = [1, -2, 3, 500, 4], {"a": 1, "bb": 2}, 5
        local = {"xs": xs, "d": d, "n": n, "total": 0}
        return (iter(xs),) + tuple(local[n] for n in live), xs, d
    want = outcome(loops, ([1, -2, 3, 500, 4], {"a": 1, "bb": 2}, 5))
    a, xs, d = args()
    assert outcome(fn1, a)[:2] == want[:2]
    done = 0
    for k2, fk in split_points(fn1).items():
        if isinstance(fk, Exception):
            continue
        a, xs, d = args()
        assert outcome(fk, a)[:2] == want[:2], k2
        assert [canon(xs), canon(d)] == want[2][1][:2], k2
        done += 1
    assert done > 50


# -------------------------------------------------------- generated programs --

def _progen():
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import progen
    return progen


N_PROGRAMS = int(os.environ.get("KILN_SPLIT_PROGRAMS", "300"))  # seeds 0..N-1, in chunks
CHUNK = 50


def _program_runner(progen, program):
    """fresh() -> (f, (args, kwargs), globals dict): a new module namespace
    each time (programs mutate their globals, arguments and classes)."""
    import linecache
    linecache.cache[program.filename] = (len(program.source), None, program.source.splitlines(True),
                                         program.filename)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = compile(program.source, program.filename, "exec")

    def fresh():
        ns = {"__name__": f"progen_{program.seed}"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(code, ns)
        return ns["f"], progen.build_call(program, ns), ns
    return fresh


def _program_outcome(fn, call, ns, global_names, reached=None):
    res = outcome(fn, call[0], call[1], reached=reached)
    return res + (canon({n: ns[n] for n in global_names}),)


@pytest.mark.parametrize("first", range(0, N_PROGRAMS, CHUNK))
def test_split_generated_programs(first):
    """Programs from progen (every feature but kiln tensors), each split at
    every offset where a split is allowed."""
    progen = _progen()
    feats = dict(progen.FEATURES, tensors=False)
    programs = splits = skipped = 0
    reached = []
    seeds = range(first, min(first + CHUNK, N_PROGRAMS))
    for seed in seeds:
        program = progen.generate(seed, feats)
        if "kiln" in program.source or "np." in program.source:
            continue
        fresh = _program_runner(progen, program)
        f, args, ns = fresh()
        points = split_points(f)
        want = _program_outcome(f, args, ns, program.global_names)
        programs += 1
        for k, fk in points.items():
            if isinstance(fk, Exception):
                skipped += 1
                continue
            f2, args2, ns2 = fresh()
            g = types.FunctionType(fk.__code__, ns2, f2.__name__, f2.__defaults__, f2.__closure__)
            g.__kwdefaults__ = f2.__kwdefaults__
            got = _program_outcome(g, args2, ns2, program.global_names, reached)
            if got != want:
                pytest.fail(f"progen seed {seed} split at {k} ({_op_at(f, k)}):\n  f:   {want}\n  f_k: {got}\n"
                            f"{program.describe()}")
            splits += 1
    assert programs >= len(seeds) * 0.9
    assert splits >= programs * 100, (programs, splits, skipped)
    assert len(reached) >= splits // 3, (splits, len(reached))
    print(f"\nseeds {seeds.start}..{seeds.stop - 1}: {programs} programs, {splits} splits run "
          f"({len(reached)} reached), {skipped} offsets not splittable")

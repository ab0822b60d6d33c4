"""kiln._bytecode: decode/assemble round trips byte for byte on real compiler
output; edited bytecode (jumps moved across their targets, EXTENDED_ARG
growth, inserted instructions inside try blocks) still runs; stack_analysis
agrees with the compiler's stack accounting. On every CPython kiln has
tables for (3.10 to 3.13): the tests say where the versions differ (3.10:
absolute jumps, the block stack instead of an exception table, lines
without columns, no NULL slots; 3.11: PRECALL, conditional jumps both
ways; 3.12+: conditional jumps only forward, LOAD_ATTR's method form;
3.13: the NULL above the callable, two locals in one instruction)."""
import dis
import functools
import glob
import importlib
import importlib.util
import os
import sys
import sysconfig
import types
import warnings

import pytest

from kiln import _bytecode_tables as T

if not T.SUPPORTED:
    pytest.skip(T.REASON, allow_module_level=True)

from kiln import _bytecode as B  # noqa: E402

VERSION = sys.version_info[:2]
# 3.10: absolute jumps, handlers on the block stack (SETUP_* ... POP_BLOCK,
# no exception table), a line table without columns, no NULL slots.
PY310 = VERSION == (3, 10)
NO_EXC_TABLE = "3.10 has no exception table: a handler is a SETUP_* instruction's target"
NO_BLOCK_STACK = "3.11+ has no block stack: handlers are exception-table rows"
CALLS_3_12 = "3.12 and 3.13 call without PRECALL or LOAD_METHOD (test_stack_analysis_call_kinds)"
CALLS_BEFORE_3_12 = "3.10 and 3.11 load methods with LOAD_METHOD (test_stack_analysis_nulls_and_method_pairs)"
NO_LOCAL_PAIRS = "only 3.13 names two locals in one instruction"

STDLIB_PACKAGES = ["json", "email", "asyncio", "concurrent", "importlib", "unittest", "xml", "http",
                   "logging", "collections", "urllib", "multiprocessing", "sqlite3", "tomllib",
                   "zoneinfo", "re", "dataclasses", "html", "wsgiref", "ctypes",
                   # enough without torch.nn (3.10 has no torch here) for the counts below
                   "idlelib", "tkinter", "lib2to3", "distutils"]


def _walk(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _walk(c)


def _sources():
    std = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(std, "*.py")))
    for pkg in STDLIB_PACKAGES:
        files += sorted(f for f in glob.glob(os.path.join(std, pkg, "**", "*.py"), recursive=True)
                        if "/test" not in f)
    spec = importlib.util.find_spec("torch")  # torch's sources, compiled, not imported
    if spec is not None and spec.submodule_search_locations:
        root = spec.submodule_search_locations[0]
        files += sorted(glob.glob(os.path.join(root, "nn", "**", "*.py"), recursive=True))
    return files


@functools.lru_cache(maxsize=None)
def corpus():
    """Every code object (nested ones included) of the stdlib's top-level
    modules, a set of stdlib packages and torch.nn (where torch is
    installed), as the compiler makes them (compile() of the source: what
    import would load from the .pyc)."""
    codes = []
    for f in _sources():
        try:
            with open(f, encoding="utf-8") as fh:
                src = fh.read()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                top = compile(src, f, "exec")
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        codes.extend(_walk(top))
    return codes


def _qualname(code):
    return code.co_name if PY310 else code.co_qualname  # 3.10 code has no co_qualname


def _unit_locations(code):
    """One location per code unit as CPython reports it: co_positions()
    (3.11+), or the line from co_lines() (3.10 has no columns)."""
    if not PY310:
        return list(code.co_positions())
    out = [None] * (len(code.co_code) // 2)
    for start, end, line in code.co_lines():
        out[start // 2:end // 2] = [line] * ((end - start) // 2)
    return out


NO_LOCATION = None if PY310 else (None, None, None, None)


def _instr_locations(code):
    """(opname, location) of every instruction but EXTENDED_ARG, location
    per dis (3.11+: positions) or co_lines() (3.10)."""
    units = _unit_locations(code)
    return [(i.opname, units[i.offset // 2] if PY310 else i.positions)
            for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"]


def _location(ins):
    return ins.lineno if PY310 else ins.positions


# ---------------------------------------------------------------- round trip --

# What a round trip must give back (3.10 has no co_exceptiontable).
TABLES = ("co_code", "co_linetable", "co_stacksize") + (() if PY310 else ("co_exceptiontable",))


def test_round_trip_is_byte_identical_on_real_code():
    codes = corpus()
    assert len(codes) >= 15000, len(codes)
    bad = []
    for code in codes:
        out = B.assemble(B.decode(code))
        for attr in TABLES:
            if getattr(out, attr) != getattr(code, attr):
                bad.append((code.co_filename, code.co_firstlineno, _qualname(code), attr))
    assert not bad, f"{len(bad)} of {len(codes)} differ, e.g. {bad[:5]}"


def test_round_trip_keeps_positions_and_equality():
    for code in corpus()[:3000]:
        out = B.assemble(B.decode(code))
        assert _unit_locations(out) == _unit_locations(code)
        assert list(out.co_lines()) == list(code.co_lines())
        assert out == code


def test_decode_folds_extended_arg_and_drops_caches():
    src = "def f():\n" + "".join(f"    v{i} = 'c{i}'\n" for i in range(300)) + "    return v299\n"
    ns = {}
    exec(compile(src, "<ext>", "exec"), ns)
    code = ns["f"].__code__
    bc = B.decode(code)
    assert all(i.opname not in ("EXTENDED_ARG", "CACHE") for i in bc.instrs)
    assert max(i.arg for i in bc.instrs if i.opname == "LOAD_CONST") == 300
    assert max(i.arg for i in bc.instrs if i.opname == "LOAD_FAST") == 299
    ops = [i for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"]
    assert [i.offset for i in bc.instrs] == [i.offset for i in ops]
    assert [(i.opname, _location(i)) for i in bc.instrs] == _instr_locations(code)
    assert B.assemble(bc).co_code == code.co_code


def test_stale_arg_of_a_no_arg_opcode_round_trips():
    # 3.10's optimizer turns `BUILD_TUPLE 2; UNPACK_SEQUENCE 2` into
    # ROT_TWO and leaves the 2 in its arg byte; 3.11 zeroes such bytes.
    def f(a, b):
        a, b = b, a
        return a - b
    bc = B.decode(f.__code__)
    no_arg = [i for i in bc.instrs if i.opcode < dis.HAVE_ARGUMENT]
    assert no_arg
    if PY310:
        assert any(i.opname == "ROT_TWO" and i.arg == 2 for i in no_arg)
    else:
        assert all(i.arg is None for i in no_arg)
    assert B.assemble(bc).co_code == f.__code__.co_code


@pytest.mark.skipif(PY310, reason=NO_EXC_TABLE + " (test_block_setup_targets_are_handlers)")
def test_exception_table_entries_are_instruction_ranges():
    def f(x):
        try:
            return 1 / x
        except ZeroDivisionError:
            return None
    bc = B.decode(f.__code__)
    raw = dis._parse_exception_table(f.__code__)
    assert len(raw) == len(bc.exc_table)
    for e, r in zip(bc.exc_table, raw):
        assert e.start._start == r.start and e.end._end == r.end  # end inclusive as an Instr
        assert e.handler._start == r.target and (e.depth, e.lasti) == (r.depth, r.lasti)


@pytest.mark.skipif(not PY310, reason=NO_BLOCK_STACK + " (test_exception_table_entries_are_instruction_ranges)")
def test_block_setup_targets_are_handlers():
    def f(x, cm):
        try:
            return 1 / x
        except ZeroDivisionError:
            with cm:
                return None
    bc = B.decode(f.__code__)
    assert bc.exc_table == []
    setups = [i for i in bc.instrs if i.opname.startswith("SETUP_")]
    raw = [i for i in dis.get_instructions(f) if i.opname.startswith("SETUP_")]
    assert [i.opname for i in setups] == ["SETUP_FINALLY", "SETUP_WITH"]
    assert [i.target._start for i in setups] == [i.argval for i in raw]
    succ = B.successors(bc)
    shapes = B.stack_analysis(bc)
    for s in setups:
        assert (s.target, True) in succ[s][0]
        # The handler runs on the block's level plus the 6 exception slots.
        assert len(shapes[s.target]) == len(shapes[s]) + dis.stack_effect(s.opcode, s.arg, jump=True)


# ---------------------------------------------------------------- editing --

def _with_nops(fn, where, count):
    """fn with `count` NOPs inserted before every instruction `where` accepts
    (NOPs take the positions of the instruction after them)."""
    bc = B.decode(fn.__code__)
    out = []
    for ins in bc.instrs:
        if where(ins):
            out += [B.Instr("NOP", positions=ins.positions) for _ in range(count)]
        out.append(ins)
    bc.instrs = out
    return types.FunctionType(B.assemble(bc), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _loops(n):
    total = 0
    for i in range(n):
        j = 0
        while j < i:
            if (i + j) % 3 == 0:
                total += j
            else:
                total -= 1
            j += 1
        try:
            if i == 4:
                raise KeyError(i)
            total += 10
        except KeyError as e:
            total += e.args[0] * 100
        finally:
            total += 1
    return total


def test_inserted_instructions_grow_jumps_to_extended_arg():
    # 40 NOPs before every store and constant: the loops' jumps, both ways,
    # need EXTENDED_ARG.
    g = _with_nops(_loops, lambda i: i.opname in ("STORE_FAST", "LOAD_CONST"), 40)
    assert any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(g))
    assert g(7) == _loops(7)
    assert g.__code__.co_stacksize == _loops.__code__.co_stacksize
    # Every original instruction keeps its location.
    old = [x for x in _instr_locations(_loops.__code__) if x[0] != "NOP"]
    new = [x for x in _instr_locations(g.__code__) if x[0] != "NOP"]
    assert new == old


def test_new_instructions_without_positions():
    def f(x):
        y = x + 1
        return y * 2
    bc = B.decode(f.__code__)
    k = next(i for i, ins in enumerate(bc.instrs) if ins.opname == "STORE_FAST")
    bc.instrs.insert(k, B.Instr("NOP"))  # no positions: "no location" in the table
    code = B.assemble(bc)
    got = _unit_locations(code)
    want = _unit_locations(f.__code__)
    at = bc.instrs[k]._start // 2
    assert got[at] == NO_LOCATION
    assert got[:at] + got[at + 1:] == want
    assert types.FunctionType(code, {})(3) == 8


def test_line_table_long_runs_and_far_lines():
    # Runs longer than one entry allows (with and without a line) and line
    # jumps beyond a signed byte, both ways; CPython's own co_lines /
    # co_positions read them back.
    def f(x):
        return x + 1
    bc = B.decode(f.__code__)
    k = _body_start(bc.instrs)
    first = bc.instrs[k]
    far = first.positions._replace(lineno=first.lineno + 300, end_lineno=first.lineno + 300)
    at = first._start // 2
    bc.instrs[k:k] = [B.Instr("NOP") for _ in range(300)] + [B.Instr("NOP", positions=far) for _ in range(200)]
    code = B.assemble(bc)
    old = _unit_locations(f.__code__)
    far_location = far.lineno if PY310 else tuple(far)
    assert _unit_locations(code) == old[:at] + [NO_LOCATION] * 300 + [far_location] * 200 + old[at:]
    assert types.FunctionType(code, {})(1) == 2


def _body_start(instrs):
    """Index of the first instruction of the function's body (after 3.11's
    RESUME; 3.10 code has no prologue)."""
    return next((k + 1 for k, i in enumerate(instrs) if i.opname == "RESUME"), 0)


def test_jump_direction_flips_when_a_block_moves():
    def f(x):
        if x:
            r = "yes"
        else:
            r = "no"
        return r
    bc = B.decode(f.__code__)
    ins = bc.instrs
    # Move the `else` block ([LOAD_CONST 'no', STORE_FAST r]) before the
    # function's body, behind a JUMP_FORWARD over it: the forward
    # conditional jump into it becomes a backward one, and the block's
    # fall-through into `return r` (3.10: its own copy of it) becomes a
    # jump forward.
    cond = next(i for i in ins if i.opname.startswith("POP_JUMP"))
    else_start = cond.target
    k = ins.index(else_start)
    block = ins[k:k + 2]
    ret = ins[k + 2]
    assert [i.opname for i in block + [ret]] == ["LOAD_CONST", "STORE_FAST", "LOAD_FAST"]
    del ins[k:k + 2]
    body = _body_start(ins)
    skip = B.Instr("JUMP_FORWARD", target=ins[body], positions=ins[body].positions)
    back = B.Instr("JUMP_FORWARD", target=ret, positions=block[-1].positions)
    ins[body:body] = [skip] + block + [back]
    if VERSION >= (3, 12):  # a conditional jump only goes forward
        with pytest.raises(ValueError, match=f"{cond.opname} cannot jump backward"):
            B.assemble(bc)
        return
    code = B.assemble(bc)
    g = types.FunctionType(code, f.__globals__)
    assert (g(1), g(0)) == ("yes", "no")
    assert cond.target._start < cond._start
    if PY310:  # absolute: same opcode, the arg is the target's index
        assert cond.opname == "POP_JUMP_IF_FALSE" and cond.arg == cond.target._start // 2
    else:
        assert cond.opname in ("POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE")
    assert back.opname == "JUMP_FORWARD" and skip.opname == "JUMP_FORWARD"


# The loop's back edge in _loops, and what it is once its target is moved
# after it: 3.11 flips the opcode, 3.10's absolute jump keeps it.
BACK_EDGE = "JUMP_ABSOLUTE" if PY310 else "JUMP_BACKWARD"
BACK_EDGE_FORWARD = "JUMP_ABSOLUTE" if PY310 else "JUMP_FORWARD"


def test_jump_backward_becomes_forward_and_back():
    bc = B.decode(_loops.__code__)
    jb = [i for i in bc.instrs if i.opname == BACK_EDGE and i.target.offset < i.offset]
    assert jb
    # A backward jump whose target is moved after it is re-emitted forward.
    j = jb[0]
    loop_head = j.target
    tgt = B.Instr("NOP", positions=j.positions)
    bc.instrs.insert(bc.instrs.index(j) + 1, tgt)
    j.target = tgt
    B.assemble(bc)
    assert j.opname == BACK_EDGE_FORWARD
    assert j.arg == (tgt._start // 2 if PY310 else 0)
    # ... and backward again once its target is behind it.
    j.target = loop_head
    del bc.instrs[bc.instrs.index(tgt)]
    code = B.assemble(bc)
    assert j.opname == BACK_EDGE and code.co_code == _loops.__code__.co_code


def test_jump_forward_pointed_backward_takes_the_backward_opcode():
    # JUMP_FORWARD has a backward form: JUMP_BACKWARD (3.11), JUMP_ABSOLUTE
    # (3.10). Put one in place of the loop's back edge: the original comes out.
    bc = B.decode(_loops.__code__)
    k = next(k for k, i in enumerate(bc.instrs) if i.opname == BACK_EDGE and i.target.offset < i.offset)
    j = bc.instrs[k]
    bc.instrs[k] = B.Instr("JUMP_FORWARD", target=j.target, positions=j.positions)
    code = B.assemble(bc)
    assert bc.instrs[k].opname == BACK_EDGE
    assert code.co_code == _loops.__code__.co_code
    assert types.FunctionType(code, _loops.__globals__)(7) == _loops(7)


# Jumps with no backward form; a reason: why this CPython's is not one.
FORWARD_ONLY = {"FOR_ITER": None, "SETUP_FINALLY": None if PY310 else NO_BLOCK_STACK,
                "POP_JUMP_IF_FALSE": None if VERSION >= (3, 12) else
                "a conditional jump goes both ways before 3.12 (3.10: absolute; 3.11: a backward opcode)"}


@pytest.mark.parametrize("name", list(FORWARD_ONLY))
def test_forward_only_jump_refuses_backward_layout(name):
    if FORWARD_ONLY[name]:
        pytest.skip(FORWARD_ONLY[name])
    bc = B.decode(_loops.__code__)
    fi = next(i for i in bc.instrs if i.opname == name)
    fi.target = bc.instrs[0]
    with pytest.raises(ValueError, match=f"{name} cannot jump backward"):
        B.assemble(bc)


def _binop(name, positions):
    """`name` ("SUBTRACT", "FLOOR_DIVIDE") as an Instr: 3.11's BINARY_OP
    with its NB_ arg, 3.10's BINARY_<name>."""
    if PY310:
        return B.Instr("BINARY_" + name, positions=positions)
    return B.Instr("BINARY_OP", [n for n, _ in dis._nb_ops].index("NB_" + name), positions=positions)


def _raising(code, positions):
    """Instructions computing 10 // (x - x): ZeroDivisionError for any x."""
    return [B.Instr("LOAD_CONST", code.co_consts.index(10), positions=positions),
            B.Instr("LOAD_FAST", 0, positions=positions),
            B.Instr("LOAD_FAST", 0, positions=positions),
            _binop("SUBTRACT", positions), _binop("FLOOR_DIVIDE", positions),
            B.Instr("POP_TOP", positions=positions)]


def _try_function():
    def f(x):
        try:
            y = 10 // x
        except ZeroDivisionError:
            y = -1
        return y
    return f


def _try_start(bc):
    """The first instruction of the try block: 3.11, where the exception
    table's row starts; 3.10, the SETUP_FINALLY (the block begins after it)."""
    if PY310:
        return next(i for i in bc.instrs if i.opname == "SETUP_FINALLY")
    return bc.exc_table[0].start


@pytest.mark.parametrize("inside", [True, False])
def test_instructions_inserted_in_try_stay_covered(inside):
    # Code that always raises, inserted after the division (inside the try:
    # 3.11, within the row; 3.10, before the POP_BLOCK) is handled; before
    # the try it is not: the test sees the difference.
    f = _try_function()
    bc = B.decode(f.__code__)
    div = next(i for i in bc.instrs if i.opname in ("BINARY_OP", "BINARY_FLOOR_DIVIDE"))
    k = bc.instrs.index(div) + 1 if inside else bc.instrs.index(_try_start(bc))
    bc.instrs[k:k] = _raising(f.__code__, div.positions)
    g = types.FunctionType(B.assemble(bc), f.__globals__)
    if inside:
        assert g(0) == -1 and g(5) == -1
    else:
        with pytest.raises(ZeroDivisionError):
            g(5)


@pytest.mark.skipif(PY310, reason=NO_EXC_TABLE)
def test_exception_table_out_of_order_is_refused():
    bc = B.decode(_loops.__code__)
    assert len(bc.exc_table) >= 2
    bc.exc_table[0], bc.exc_table[-1] = bc.exc_table[-1], bc.exc_table[0]
    with pytest.raises(ValueError, match="out of order or overlapping"):
        B.assemble(bc)


@pytest.mark.skipif(not PY310, reason="3.11+ has an exception table")
def test_exception_table_rows_are_refused_on_310():
    f = _try_function()
    bc = B.decode(f.__code__)
    setup = _try_start(bc)
    k = bc.instrs.index(setup)
    bc.exc_table = [B.ExcEntry(bc.instrs[k + 1], bc.instrs[k + 2], setup.target, 0, False)]
    with pytest.raises(ValueError, match="3.10 has no exception table"):
        B.assemble(bc)


# ---------------------------------------------------------------- slot layout --

def _closures(a):
    def inner(b, k):
        c = a + b
        def g():
            return c + b
        return g() * k
    return inner


def test_relayout_locals_keeps_each_index_space():
    # A cell argument (b), a cell local (c), a free variable (a); a new
    # local goes in after the arguments. 3.10 indexes locals and cells/frees
    # apart, 3.11 in one array: both come out running.
    fn = _closures(3)
    code = fn.__code__
    bc = B.decode(code)
    varnames = list(code.co_varnames)
    varnames.insert(code.co_argcount, "___extra")
    old = B.localsplus_names(code)
    new = B.new_localsplus(varnames, code.co_cellvars, code.co_freevars)
    B.relayout_locals(bc.instrs, old, new)
    out = B.assemble(bc, co_varnames=tuple(varnames), co_nlocals=len(varnames))
    assert B.localsplus_names(out) == new
    # dis names each slot arg by its own reading of the layout.
    named = lambda c: [(i.opname, i.argval) for i in dis.get_instructions(c)]  # noqa: E731
    assert named(out) == named(code)
    g = types.FunctionType(out, fn.__globals__, "inner", None, fn.__closure__)
    assert g(4, 2) == fn(4, 2) == 22
    if PY310:  # the same names, split elsewhere into locals and cells, index differently
        assert B.new_localsplus(["x", "y"], [], []) != B.new_localsplus(["x"], ["y"], [])


# ---------------------------------------------------------------- stack shapes --

def _compiler_effect(ins, jump):
    arg = (ins.arg or 0) if ins.opcode >= dis.HAVE_ARGUMENT else None
    if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:  # 3.10 SETUP_*: jump = to the handler
        return dis.stack_effect(ins.opcode, arg, jump=jump)
    if ins.opname == "RETURN_GENERATOR":
        return 1
    return dis.stack_effect(ins.opcode, arg)


# 3.13's code constructor gives every code object a stack slot (`return
# None` alone needs none): co_stacksize 0 comes back as 1.
MIN_STACKSIZE = 1 if VERSION >= (3, 13) else 0


def test_stack_analysis_agrees_with_stack_effect_and_stacksize():
    checked = 0
    for code in corpus():
        bc = B.decode(code)
        shapes = B.stack_analysis(bc)
        succ = B.successors(bc)
        for ins, shape in shapes.items():
            nxt, excs = succ[ins]
            for n, jump in nxt:
                delta = len(shapes[n]) - len(shape)
                want = _compiler_effect(ins, jump)
                # Run time vs 3.11's accounting: PRECALL pops nothing,
                # CALL pops the arguments (dis charges them to PRECALL).
                if ins.opname == "PRECALL":
                    want += ins.arg
                elif ins.opname == "CALL" and "PRECALL" in dis.opmap:
                    want -= ins.arg
                assert delta == want, (_qualname(code), ins, shape, shapes[n])
                checked += 1
            for e in excs:
                # (3.10: a block's handler, entered with six slots on its level)
                assert len(shapes[e.handler]) == e.depth + (6 if e.lasti is None else e.lasti + 1)
                assert len(shape) >= e.depth
        depth = max(map(len, shapes.values()), default=0)
        assert max(depth, MIN_STACKSIZE) == code.co_stacksize, _qualname(code)
    assert checked > 500000


@pytest.mark.skipif(VERSION >= (3, 12), reason=CALLS_3_12)
def test_stack_analysis_nulls_and_method_pairs():
    def f(x, o):
        print(x + 1)
        return o.m(x)
    bc = B.decode(f.__code__)
    shapes = B.stack_analysis(bc)
    lm = next(i for i in bc.instrs if i.opname == "LOAD_METHOD")
    after = bc.instrs[bc.instrs.index(lm) + 1]
    assert shapes[after] == ("M", "S")
    if PY310:  # no NULL under `print`; CALL_METHOD takes the method pair
        add = next(i for i in bc.instrs if i.opname == "BINARY_ADD")
        assert shapes[add] == ("v", "v", "v")
        call = next(i for i in bc.instrs if i.opname == "CALL_FUNCTION")
        assert shapes[call] == ("v", "v")
        cm = next(i for i in bc.instrs if i.opname == "CALL_METHOD")
        assert shapes[cm] == ("M", "S", "v")
        assert shapes[bc.instrs[bc.instrs.index(cm) + 1]] == ("v",)
        return
    add = next(i for i in bc.instrs if i.opname == "BINARY_OP")
    assert shapes[add] == ("N", "v", "v", "v")
    pre = [i for i in bc.instrs if i.opname == "PRECALL"]
    call = [i for i in bc.instrs if i.opname == "CALL"]
    assert shapes[pre[0]] == ("N", "v", "v") and shapes[call[0]] == ("M", "S", "v")
    assert shapes[call[1]] == ("M", "S", "v")


def _method_load(bc):
    """The first method load: LOAD_METHOD (3.10, 3.11), LOAD_ATTR with bit 0
    (3.12+)."""
    return next(i for i in bc.instrs if i.opname == "LOAD_METHOD"
                or (VERSION >= (3, 12) and i.opname == "LOAD_ATTR" and i.arg & 1))


def _after(bc, ins):
    return bc.instrs[bc.instrs.index(ins) + 1]


def test_stack_analysis_follows_moved_slots():
    # A method pair swapped and swapped back (3.10 ROT_TWO, 3.11+ SWAP 2):
    # its kinds move with the slots.
    def f(o):
        return o.m()
    bc = B.decode(f.__code__)
    lm = _method_load(bc)
    swap = ("ROT_TWO", None) if PY310 else ("SWAP", 2)
    first, second = (B.Instr(*swap, positions=lm.positions) for _ in range(2))
    k = bc.instrs.index(lm) + 1
    bc.instrs[k:k] = [first, second]
    shapes = B.stack_analysis(bc)
    assert shapes[first] == ("M", "S") and shapes[second] == ("S", "M")
    assert shapes[bc.instrs[k + 2]] == ("M", "S")

    class O:
        def m(self):
            return 5
    assert types.FunctionType(B.assemble(bc), {})(O()) == 5


def test_stack_analysis_handlers_and_iterators():
    def f(items, cm):
        for x in items:
            with cm:
                try:
                    x.go()
                except OSError:
                    pass
    bc = B.decode(f.__code__)
    shapes = B.stack_analysis(bc, mark_lasti=True)
    go = _method_load(bc)
    assert shapes[go] == ("v", "v", "v")  # iterator, __exit__, x
    if PY310:
        # No lasti on 3.10: a handler gets the block's level plus 6 values.
        setups = [i for i in bc.instrs if i.opname in ("SETUP_WITH", "SETUP_FINALLY")]
        assert len(setups) == 2
        for s in setups:
            # SETUP_WITH swaps the context manager for its __exit__, which
            # stays under the block: the level is the depth at the SETUP_*.
            assert shapes[s.target] == ("v",) * (len(shapes[s]) + 6)
        assert B.stack_analysis(bc) == shapes
        return
    handlers = {e.handler for e in bc.exc_table if e.lasti}
    assert all("L" in shapes[h] for h in handlers)
    plain = B.stack_analysis(bc)
    assert all("L" not in plain[h] for h in handlers)


def test_stack_analysis_merge_error_is_clear():
    def f(x):
        if x:
            y = 1
        else:
            y = 2
        z = y + 1  # long enough that 3.10 does not copy the tail into both branches
        return z
    bc = B.decode(f.__code__)
    # Make one branch leave an extra value on the stack.
    store = [i for i in bc.instrs if i.opname == "STORE_FAST"][0]
    bc.instrs.insert(bc.instrs.index(store), B.Instr("LOAD_CONST", 0, positions=store.positions))
    with pytest.raises(B.StackMergeError, match="stack shapes differ"):
        B.stack_analysis(bc)


@pytest.mark.skipif(VERSION < (3, 12), reason=CALLS_BEFORE_3_12)
def test_stack_analysis_call_kinds():
    # A plain call's NULL: below the callable on 3.12, above it on 3.13. A
    # method load is the pair ('M', 'S') on both, lower slot first. 3.13's
    # CALL_KW takes the names' tuple above the arguments (3.12: KW_NAMES,
    # then CALL).
    def f(x, o):
        print(x + 1)
        o.m(x, k=2)
        return print(x, sep="")
    bc = B.decode(f.__code__)
    shapes = B.stack_analysis(bc)
    callable_and_null = ("v", "N") if VERSION >= (3, 13) else ("N", "v")
    names = ("v",) if VERSION >= (3, 13) else ()
    add = next(i for i in bc.instrs if i.opname == "BINARY_OP")
    assert shapes[add] == callable_and_null + ("v", "v")
    assert shapes[_after(bc, _method_load(bc))] == ("M", "S")
    calls = [i for i in bc.instrs if i.opname in ("CALL", "CALL_KW")]
    assert [c.opname for c in calls] == ["CALL"] + ["CALL_KW" if names else "CALL"] * 2
    assert shapes[calls[0]] == callable_and_null + ("v",)
    assert shapes[calls[1]] == ("M", "S", "v", "v") + names
    assert shapes[calls[2]] == callable_and_null + ("v", "v") + names
    assert all(shapes[_after(bc, c)] == ("v",) for c in calls)


@pytest.mark.skipif(VERSION < (3, 12), reason=CALLS_BEFORE_3_12)
def test_a_bound_method_and_its_null_join_a_method_pair():
    # What a resume function does: its prologue pushes a bound method and
    # a NULL (in the version's order: 3.13 ('v', 'N'), 3.12 ('N', 'v')) and
    # jumps to a call that the original method load also reaches as
    # ('M', 'S'): the shapes join as the pair, and both paths run. The
    # other order does not join.
    class O:
        def m(self):
            return 5

    def f(o, c):
        return o.m()

    def build(order):
        bc = B.decode(f.__code__)
        lm = _method_load(bc)
        load_o, call = bc.instrs[bc.instrs.index(lm) - 1], _after(bc, lm)
        pos = lm.positions
        I = lambda op, arg=None, **kw: B.Instr(op, arg, positions=pos, **kw)  # noqa: E731
        bound = [I("LOAD_FAST", 0), I("LOAD_ATTR", lm.arg & ~1)]
        pair = bound + [I("PUSH_NULL")] if order == ("v", "N") else [I("PUSH_NULL")] + bound
        test = [I("LOAD_FAST", 1)] + ([I("TO_BOOL")] if "TO_BOOL" in dis.opmap else [])
        k = _body_start(bc.instrs)
        bc.instrs[k:k] = test + [I("POP_JUMP_IF_TRUE", target=load_o)] + pair + [I("JUMP_FORWARD", target=call)]
        return bc, call

    ours = ("v", "N") if VERSION >= (3, 13) else ("N", "v")
    bc, call = build(ours)
    assert B.stack_analysis(bc)[call] == ("M", "S")
    g = types.FunctionType(B.assemble(bc), {})
    assert g(O(), True) == g(O(), False) == 5
    bc, call = build(ours[::-1])
    with pytest.raises(B.StackMergeError, match="stack shapes differ"):
        B.stack_analysis(bc)


def _pairs(a, b, items, n):
    # 3.13 makes every kind of local pair here, at jump targets (the while
    # body, the else of the conditional) and inside a try row.
    total = sum([v * v for v in items])
    while n:
        total, n = total + n, n - 1
    a, b = b, a
    try:
        c = a - b
        total = total // (c - c) if c == 99 else total + c
    except ZeroDivisionError:
        total = -total
    return total, a, b


def _local_names(code):
    """(opname, slot name) of every instruction naming locals, pairs as
    their two halves."""
    out = []
    for i in dis.get_instructions(code):
        if i.opcode in T.LOCAL_PAIRS:
            first, second = (dis.opname[op] for op in T.LOCAL_PAIRS[i.opcode])
            out += [(first, i.argval[0]), (second, i.argval[1])]
        elif i.opcode in T.LOCAL_OPS:
            out.append((i.opname, i.argval))
    return out


@pytest.mark.skipif(VERSION < (3, 13), reason=NO_LOCAL_PAIRS)
@pytest.mark.parametrize("pad", [2, 20])
def test_relayout_repacks_local_pairs_or_lays_them_out_as_halves(pad):
    # `pad` new locals after the arguments: 2 keep every slot below 16 (a
    # pair is packed again); 20 push the locals past 15, and a pair naming
    # one is laid out as its two plain instructions: in place, so jumps to
    # it, its exception-table row and its positions hold for both halves.
    # A pair of arguments stays a pair.
    code = _pairs.__code__
    stores = [B.local_slots(i) for i in B.decode(code).instrs if i.opname == "STORE_FAST_STORE_FAST"]
    assert (1, 0) in stores  # a, b = b, a: the top (b's new value) goes first
    bc = B.decode(code)
    pairs = [i for i in bc.instrs if i.opcode in T.LOCAL_PAIRS]
    varnames = list(code.co_varnames)
    varnames[code.co_argcount:code.co_argcount] = [f"___pad{i}" for i in range(pad)]
    B.relayout_locals(bc.instrs, B.localsplus_names(code), B.new_localsplus(varnames, (), ()))
    replace = dict(co_varnames=tuple(varnames), co_nlocals=len(varnames))
    out = B.assemble(bc, **replace)
    assert B.assemble(bc, **replace).co_code == out.co_code  # kiln/_resume.py assembles twice
    g = types.FunctionType(out, _pairs.__globals__)
    for args in [(1, 100, [1, 2, 3], 4), (1, 2, [1, 2, 3], 4), (5, 5, [], 0)]:
        assert g(*args) == _pairs(*args)
    assert _local_names(out) == _local_names(code)
    halves = [i for i in pairs if type(i.arg) is tuple]
    if pad == 2:
        assert not halves and all(max(B.local_slots(i)) < 16 for i in pairs)
        return
    assert {i.opname for i in halves} == {dis.opname[op] for op in T.LOCAL_PAIRS}
    assert all(max(B.local_slots(i)) < 16 for i in pairs if i not in halves)
    args = set(code.co_varnames[:code.co_argcount])
    assert all(set(i.argval) <= args for i in dis.get_instructions(out) if i.opcode in T.LOCAL_PAIRS)
    targets = {i.target for i in bc.instrs if i.target is not None}
    assert any(i in targets for i in halves)
    positions = list(out.co_positions())
    for i in halves:
        assert positions[i._start // 2:i._end // 2] == [tuple(i.positions)] * 2
    rows = [(r.start, r.end) for r in dis._parse_exception_table(out)]
    covered = [i for i in halves if i in bc.handlers_of()]
    assert covered
    assert all(any(s <= i._start and i._end <= e for s, e in rows) for i in covered)

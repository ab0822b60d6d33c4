"""kiln._bytecode: decode/assemble round trips byte for byte on real compiler
output; edited bytecode (jumps moved across their targets, EXTENDED_ARG
growth, inserted instructions inside try blocks) still runs; stack_analysis
agrees with the compiler's stack accounting."""
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


from kiln import _bytecode as B

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="kiln._bytecode targets CPython 3.11")

STDLIB_PACKAGES = ["json", "email", "asyncio", "concurrent", "importlib", "unittest", "xml", "http",
                   "logging", "collections", "urllib", "multiprocessing", "sqlite3", "tomllib",
                   "zoneinfo", "re", "dataclasses", "html", "wsgiref", "ctypes"]


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
    modules, a set of stdlib packages and torch.nn, as the compiler makes
    them (compile() of the source: what import would load from the .pyc)."""
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


# ---------------------------------------------------------------- round trip --

def test_round_trip_is_byte_identical_on_real_code():
    codes = corpus()
    assert len(codes) >= 15000, len(codes)
    bad = []
    for code in codes:
        out = B.assemble(B.decode(code))
        for attr in ("co_code", "co_exceptiontable", "co_linetable", "co_stacksize"):
            if getattr(out, attr) != getattr(code, attr):
                bad.append((code.co_filename, code.co_firstlineno, code.co_qualname, attr))
    assert not bad, f"{len(bad)} of {len(codes)} differ, e.g. {bad[:5]}"


def test_round_trip_keeps_positions_and_equality():
    for code in corpus()[:3000]:
        out = B.assemble(B.decode(code))
        assert list(out.co_positions()) == list(code.co_positions())
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
    assert [i.positions for i in bc.instrs] == [i.positions for i in ops]
    assert B.assemble(bc).co_code == code.co_code


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
    # Every original instruction keeps its line.
    old = [i.positions for i in dis.get_instructions(_loops) if i.opname not in ("NOP", "EXTENDED_ARG")]
    new = [i.positions for i in dis.get_instructions(g) if i.opname not in ("NOP", "EXTENDED_ARG")]
    assert new == old


def test_new_instructions_without_positions():
    def f(x):
        y = x + 1
        return y * 2
    bc = B.decode(f.__code__)
    k = next(i for i, ins in enumerate(bc.instrs) if ins.opname == "STORE_FAST")
    bc.instrs.insert(k, B.Instr("NOP"))  # no positions: "no location" in the table
    code = B.assemble(bc)
    got = list(code.co_positions())
    want = list(f.__code__.co_positions())
    at = bc.instrs[k]._start // 2
    assert got[at] == (None, None, None, None)
    assert got[:at] + got[at + 1:] == want
    assert types.FunctionType(code, {})(3) == 8


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
    # fall-through into `return r` becomes a jump forward.
    cond = next(i for i in ins if i.opname.startswith("POP_JUMP"))
    else_start = cond.target
    k = ins.index(else_start)
    block = ins[k:k + 2]
    ret = ins[k + 2]
    del ins[k:k + 2]
    resume = ins.index(next(i for i in ins if i.opname == "RESUME"))
    skip = B.Instr("JUMP_FORWARD", target=ins[resume + 1], positions=ins[resume + 1].positions)
    back = B.Instr("JUMP_FORWARD", target=ret, positions=block[-1].positions)
    ins[resume + 1:resume + 1] = [skip] + block + [back]
    code = B.assemble(bc)
    g = types.FunctionType(code, f.__globals__)
    assert (g(1), g(0)) == ("yes", "no")
    names = [i.opname for i in dis.get_instructions(g)]
    assert "POP_JUMP_BACKWARD_IF_TRUE" in names or "POP_JUMP_BACKWARD_IF_FALSE" in names
    assert back.opname == "JUMP_FORWARD" and skip.opname == "JUMP_FORWARD"


def test_jump_backward_becomes_forward_and_back():
    bc = B.decode(_loops.__code__)
    jb = [i for i in bc.instrs if i.opname == "JUMP_BACKWARD"]
    assert jb
    # A JUMP_BACKWARD whose target is moved after it is re-emitted forward.
    j = jb[0]
    loop_head = j.target
    tgt = B.Instr("NOP", positions=j.positions)
    bc.instrs.insert(bc.instrs.index(j) + 1, tgt)
    j.target = tgt
    B.assemble(bc)
    assert j.opname == "JUMP_FORWARD" and j.arg == 0
    # ... and backward again once its target is behind it.
    j.target = loop_head
    del bc.instrs[bc.instrs.index(tgt)]
    code = B.assemble(bc)
    assert j.opname == "JUMP_BACKWARD" and code.co_code == _loops.__code__.co_code


def test_forward_only_jump_refuses_backward_layout():
    bc = B.decode(_loops.__code__)
    fi = next(i for i in bc.instrs if i.opname == "FOR_ITER")
    fi.target = bc.instrs[0]
    with pytest.raises(ValueError, match="FOR_ITER cannot jump backward"):
        B.assemble(bc)


def test_instructions_inserted_in_try_stay_covered():
    def f(x):
        try:
            y = 10 // x
        except ZeroDivisionError:
            y = -1
        return y
    # Insert a raising call (via inserted LOAD_FAST/BINARY_OP) inside the try.
    bc = B.decode(f.__code__)
    div = next(i for i in bc.instrs if i.opname == "BINARY_OP")
    k = bc.instrs.index(div)
    extra = [B.Instr("LOAD_CONST", f.__code__.co_consts.index(10), positions=div.positions),
             B.Instr("LOAD_FAST", 0, positions=div.positions),
             B.Instr("BINARY_OP", div.arg, positions=div.positions),
             B.Instr("POP_TOP", positions=div.positions)]
    bc.instrs[k + 1:k + 1] = extra
    g = types.FunctionType(B.assemble(bc), f.__globals__)
    assert g(0) == -1 and g(5) == 2


def test_exception_table_out_of_order_is_refused():
    bc = B.decode(_loops.__code__)
    assert len(bc.exc_table) >= 2
    bc.exc_table[0], bc.exc_table[-1] = bc.exc_table[-1], bc.exc_table[0]
    with pytest.raises(ValueError, match="out of order or overlapping"):
        B.assemble(bc)


# ---------------------------------------------------------------- stack shapes --

def _compiler_effect(ins, jump):
    arg = (ins.arg or 0) if ins.opcode >= dis.HAVE_ARGUMENT else None
    if ins.opcode in dis.hasjrel:
        return dis.stack_effect(ins.opcode, arg, jump=jump)
    if ins.opname == "RETURN_GENERATOR":
        return 1
    return dis.stack_effect(ins.opcode, arg)


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
                # Run time vs the compiler's accounting: PRECALL pops
                # nothing, CALL pops the arguments (dis charges them to PRECALL).
                if ins.opname == "PRECALL":
                    want += ins.arg
                elif ins.opname == "CALL":
                    want -= ins.arg
                assert delta == want, (code.co_qualname, ins, shape, shapes[n])
                checked += 1
            for e in excs:
                assert len(shapes[e.handler]) == e.depth + e.lasti + 1
                assert len(shape) >= e.depth
        assert max(map(len, shapes.values()), default=0) == code.co_stacksize, code.co_qualname
    assert checked > 500000


def test_stack_analysis_nulls_and_method_pairs():
    def f(x, o):
        print(x + 1)
        return o.m(x)
    bc = B.decode(f.__code__)
    shapes = B.stack_analysis(bc)
    add = next(i for i in bc.instrs if i.opname == "BINARY_OP")
    assert shapes[add] == ("N", "v", "v", "v")
    lm = next(i for i in bc.instrs if i.opname == "LOAD_METHOD")
    after = bc.instrs[bc.instrs.index(lm) + 1]
    assert shapes[after] == ("M", "S")
    pre = [i for i in bc.instrs if i.opname == "PRECALL"]
    call = [i for i in bc.instrs if i.opname == "CALL"]
    assert shapes[pre[0]] == ("N", "v", "v") and shapes[call[0]] == ("M", "S", "v")
    assert shapes[call[1]] == ("M", "S", "v")


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
    go = next(i for i in bc.instrs if i.opname == "LOAD_METHOD")
    assert shapes[go] == ("v", "v", "v")  # iterator, __exit__, x
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
        return y
    bc = B.decode(f.__code__)
    # Make one branch leave an extra value on the stack.
    store = [i for i in bc.instrs if i.opname == "STORE_FAST"][0]
    bc.instrs.insert(bc.instrs.index(store), B.Instr("LOAD_CONST", 0, positions=store.positions))
    with pytest.raises(B.StackMergeError, match="stack shapes differ"):
        B.stack_analysis(bc)

"""CPython 3.10's rows of the frontend's opcode table (kiln/_frontend_opcodes.py;
kiln/_frontend imports this module, which registers them into _ROWS): the
call, operator and stack forms 3.11 replaced, and the try and with blocks
that 3.10 keeps on the frame's block stack."""
from ._frontend_opcodes import _VALUE, _const, _held_pair_at, _is_virtual, _row

# -- CPython 3.10's own forms ---------------------------------------------------
#
# 3.10 has no NULL beside a callable: CALL_FUNCTION n calls the callable
# under n arguments, CALL_FUNCTION_KW n takes the keyword names as a
# constant tuple on top ('K'), CALL_METHOD n takes LOAD_METHOD's pair
# ('M', 'S'). An operator is an opcode of its own (BINARY_ADD,
# INPLACE_ADD, ...), the stack is rearranged with ROT_* and DUP_TOP*, and
# a generator's frame starts with the value GEN_START pops.

@_row("CALL_FUNCTION", effect=lambda n: -n, versions={(3, 10)})
@_row("CALL_FUNCTION_KW", effect=lambda n: -n - 1, versions={(3, 10)})
@_row("CALL_METHOD", effect=lambda n: -n - 1, versions={(3, 10)})
def _call_310(f, k, ins, st, emit):
    if ins.opname == "CALL_FUNCTION" and ins.arg == 1 and k >= 2 and _held_pair_at(f, k - 2):
        f._pop(st, 1, ins)
        f._pop(st, 1, ins, accept=("K",))
        st.append("H")  # the callable, held: the next LOAD_METHOD makes the pair
        return st, None
    names = f.kwnames.get(k)
    if names is not None:
        f._pop(st, 1, ins, accept=("K",))
    f._pop(st, ins.arg, ins)
    method = ins.opname == "CALL_METHOD"
    if method:
        f._pop(st, 2, ins, accept=("M", "S"))
    else:
        f._pop(st, 1, ins)
    st.append("v")
    opname = "CALL_METHOD" if method else "CALL"
    emit(f"  {opname}_KW {ins.arg} {f._constant(names)}" if names else f"  {opname} {ins.arg}")
    return st, None


_BINARY_310 = {"ADD": "+", "AND": "&", "FLOOR_DIVIDE": "//", "LSHIFT": "<<", "MATRIX_MULTIPLY": "@",
               "MULTIPLY": "*", "MODULO": "%", "OR": "|", "POWER": "**", "RSHIFT": ">>", "SUBTRACT": "-",
               "TRUE_DIVIDE": "/", "XOR": "^"}


@_row(*(f"BINARY_{n}" for n in _BINARY_310), *(f"INPLACE_{n}" for n in _BINARY_310), effect=_const(-1),
      versions={(3, 10)})
def _binary_310(f, k, ins, st, emit):
    f._pop(st, 2, ins)
    st.append("v")
    kind, _, name = ins.opname.partition("_")
    emit(f"  BINARY_OP {_BINARY_310[name]}{'=' if kind == 'INPLACE' else ''}")
    return st, None


_ROT = {"ROT_TWO": 2, "ROT_THREE": 3, "ROT_FOUR": 4}


@_row("ROT_TWO", "ROT_THREE", "ROT_FOUR", "ROT_N", effect=_const(0), versions={(3, 10)})
def _rotate(f, k, ins, st, emit):
    # The top value sinks n - 1 places: KBC's SWAP m, SWAP m-1, ..., SWAP 2
    # over the m KBC slots among them (a return in a handler sinks its
    # value under the exception's three slots, two of them virtual).
    n = _ROT.get(ins.opname, ins.arg)
    if n > len(st) or st[-1] in ("N", "X", "K"):
        f.fail(f"unexpected stack layout at {ins.opname}")
    if not _is_virtual(st[-1]):
        for j in range(sum(1 for kind in st[len(st) - n:] if not _is_virtual(kind)), 1, -1):
            emit(f"  SWAP {j}")
    st[len(st) - n:] = st[-1:] + st[len(st) - n:-1]
    return st, None


@_row("DUP_TOP", effect=_const(1), versions={(3, 10)})
@_row("DUP_TOP_TWO", effect=_const(2), versions={(3, 10)})
def _dup_top(f, k, ins, st, emit):
    n = 2 if ins.opname == "DUP_TOP_TWO" else 1
    if n == 1 and st and st[-1] == "y":  # an exception's type, for JUMP_IF_NOT_EXC_MATCH
        st.append("y")
        return st, None
    if n > len(st) or any(kind not in _VALUE for kind in st[len(st) - n:]):
        f.fail(f"unexpected stack layout at {ins.opname}")
    for _ in range(n):
        emit(f"  COPY {n}")
    st += ["v"] * n
    return st, None


@_row("GEN_START", effect=_const(-1), versions={(3, 10)})
def _gen_start(f, k, ins, st, emit):
    # Pops the value the generator was first resumed with (kiln/_frontend.py
    # starts the frame with it, 'X'): what 3.11's RETURN_GENERATOR and the
    # POP_TOP after it do, less the value.
    f._pop(st, 1, ins, accept=("X",))
    if not f.generator:  # a generator expression: the list of what it yields
        emit("  BUILD_LIST 0")
        emit(f"  STORE_FAST {f.gen_items}")
    return st, None


# 3.10's try and with blocks. An exception enters a handler with the stack
# cut to its block's level and six slots on it, the exception it replaces
# then its own, each as (traceback, value, type), type on top. KBC (3.11's
# model) has two: the previous exception and the exception, which
# PUSH_EXC_INFO makes at the handler's start (kiln/_frontend.py). So two of
# the six slots are KBC's ('P' the previous exception, 'E' the exception)
# and the others are virtual ('b', 'y'); in a with's handler the first is
# KBC's lasti ('l', kiln/_frontend.py's _row_key).
_EXCEPTION_SLOTS = ["b", "P", "y", "b", "E", "y"]
_WITH_EXCEPTION_SLOTS = ["l"] + _EXCEPTION_SLOTS[1:]


@_row("SETUP_FINALLY", effect=_const(0), jump_effect=_const(6), versions={(3, 10)})
def _setup_finally(f, k, ins, st, emit):
    # No KBC: the handler is a row of KBC's exception table (_row_key).
    return st, st + _EXCEPTION_SLOTS


@_row("SETUP_WITH", effect=_const(1), jump_effect=_const(6), versions={(3, 10)})
def _setup_with(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    emit("  BEFORE_WITH")  # manager -> __exit__, __enter__()
    return st + ["v", "v"], st + ["v"] + _WITH_EXCEPTION_SLOTS


@_row("POP_BLOCK", effect=_const(0), versions={(3, 10)})
def _pop_block(f, k, ins, st, emit):
    return st, None  # (the next instruction is under the next row)


@_row("POP_EXCEPT", effect=_const(-3), versions={(3, 10)})
def _pop_except_310(f, k, ins, st, emit):
    # The exception the handler replaced is current again; in a with's
    # handler the lasti under it goes too.
    first, _, _ = _pop_exception(f, st, ins, ("b", "l"), ("P",))
    emit("  POP_EXCEPT")
    if first == "l":
        emit("  POP_TOP")
    return st, None


@_row("RERAISE", effect=_const(-3), versions={(3, 10)})
def _reraise_310(f, k, ins, st, emit):
    _pop_exception(f, st, ins, ("b",), ("E",))
    emit("  RERAISE 0")
    return None, None


@_row("JUMP_IF_NOT_EXC_MATCH", effect=_const(-2), jump_effect=_const(-2), versions={(3, 10)})
def _jump_if_not_exc_match(f, k, ins, st, emit):
    # exception, its type, a copy of the type, the class -> KBC's
    # exception, class: CHECK_EXC_MATCH reads the two.
    if st[-4:-1] != ["E", "y", "y"]:
        f.fail("unexpected stack layout at JUMP_IF_NOT_EXC_MATCH")
    f._pop(st, 1, ins)
    st.pop()
    emit("  CHECK_EXC_MATCH")
    emit(f"  POP_JUMP_IF_FALSE L{ins.argval}")
    return st, list(st)


@_row("WITH_EXCEPT_START", effect=_const(1), versions={(3, 10)})
def _with_except_start_310(f, k, ins, st, emit):
    # __exit__ and a with handler's six slots -> __exit__(type, exc, tb)
    # pushed: KBC's [__exit__, lasti, previous, exception], as in 3.11.
    if len(st) < 7 or st[-7] != "v" or st[-6:] != _WITH_EXCEPTION_SLOTS:
        f.fail("unexpected stack layout at WITH_EXCEPT_START")
    st.append("v")
    emit("  WITH_EXCEPT_START")
    return st, None


def _pop_exception(f, st, ins, first, middle):
    """Pop an exception's three slots (traceback, value, type), checking
    their kinds (`first` and `middle` allowed for the lower two)."""
    if len(st) < 3 or st[-3] not in first or st[-2] not in middle or st[-1] != "y":
        f.fail(f"unexpected stack layout at {ins.opname}")
    taken = st[-3:]
    del st[-3:]
    return taken

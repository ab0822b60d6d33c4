"""The frontend's opcode table: one row per CPython opcode it translates, for
each version in VERSIONS (kiln/_frontend.py walks a function's
instructions and asks this table)."""
from __future__ import annotations

import dis
import sys
from dataclasses import dataclass

from . import _bytecode_tables

# The CPython versions whose opcodes this table translates. kiln reads a
# version's bytecode when both this table and kiln/_bytecode_tables.py
# (the resume side) have it: SUPPORTED, and require() for the entry points.
VERSIONS = {(3, 10), (3, 11), (3, 12), (3, 13)}
_V = sys.version_info[:2]
SUPPORTED = _bytecode_tables.SUPPORTED and sys.version_info[:2] in VERSIONS
assert not SUPPORTED or _bytecode_tables.CAN_EMIT, "a version kiln compiles on needs the emitted spellings"


def require():
    """Raise UnsupportedVersion when kiln cannot read this CPython's
    bytecode: what kiln.compile, kiln.explain, symbolic_trace and the
    translation of a kiln.nn module's methods say on such a version, once,
    before anything is traced."""
    _bytecode_tables.require()
    if sys.version_info[:2] not in VERSIONS:
        v = sys.version_info
        raise _bytecode_tables.UnsupportedVersion(
            f"kiln.compile does not support CPython {v[0]}.{v[1]} yet: kiln/_frontend_opcodes.py translates "
            f"the bytecode of {', '.join(f'{a}.{b}' for a, b in sorted(VERSIONS))}")

# BINARY_OP's oparg in 3.11 (Include/opcode.h NB_*); 13 and up are the
# in-place forms, which KBC spells with a trailing `=`.
_NB_SYMBOLS = ("+", "&", "//", "<<", "@", "*", "%", "|", "**", ">>", "-", "/", "^")

_UNARY = {"UNARY_POSITIVE": "+", "UNARY_NEGATIVE": "-", "UNARY_NOT": "not", "UNARY_INVERT": "~"}

_CONDITIONAL = {
    "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_FORWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    # 3.12: one direction-free form, KBC's names.
    "POP_JUMP_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
}
_JUMPS = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE"}

_VALUE = ("v",)  # abstract-stack kinds an ordinary consumer accepts (kiln/_frontend.py)
# A callable and the NULL that marks it as a plain call, as CPython stacks
# them (bottom first): 3.13 put the NULL above the callable.
_NULL_PAIR = list(_bytecode_tables.CALL_PAIR) if SUPPORTED else None


def saved_local(kind):
    """The local whose value a 3.12+ inlined comprehension saved in this
    abstract-stack slot ("C" + name; "C*" + name when the comprehension's
    own variable of that name is a cell too), or None."""
    if kind[0] != "C":
        return None
    return kind[2:] if kind[1] == "*" else kind[1:]


def _is_virtual(kind):
    """A CPython stack slot with no KBC slot under it: a NULL ('N'), a
    constant the next instruction's KBC spells itself ('K': 3.13's keyword
    names before CALL_KW, 3.10's before CALL_FUNCTION_KW and its qualified
    name before MAKE_FUNCTION), a
    phantom that is CPython's accounting only ('X': the pair a 3.12+
    FOR_ITER leaves for END_FOR (and 3.13's POP_TOP after it), and the
    attributes 3.13's SET_FUNCTION_ATTRIBUTE consumes, which KBC's
    MAKE_FUNCTION took already), or the value a 3.12+ inlined comprehension
    saved of a local it shadows ('C' + the local's name: the
    comprehension's own uses of the name are renamed while it is on the
    stack, so KBC never clears or restores the outer variable), the
    value 3.10's generator frame starts with, which GEN_START pops ('X'),
    and the traceback and type 3.10 keeps beside each exception a handler
    holds ('b', 'y': _EXCEPTION_SLOTS)."""
    return kind in _PHANTOMS or kind[0] == "C"


_PHANTOMS = ("N", "X", "K", "b", "y")

# -- the opcode table -----------------------------------------------------------
#
# One row per opcode of the running CPython that the frontend translates
# (a row names the versions it is for when its meaning or stack effect
# differs between them; names the running version does not have are not
# registered): its translation
# (f, k, ins, st, emit) -> (fall-through stack, jump stack), and CPython's
# stack effect as a function of the oparg on each edge (tests check every
# row against dis.stack_effect). _step checks (kiln/_frontend.CHECK_ROWS:
# under the tests) after each translation that
# the abstract stack moved by exactly the declared effect, except for the
# two rows that split one call between them (PRECALL's effect is its
# CALL's in the abstract stack). Adding an opcode is adding a row.


@dataclass(frozen=True)
class _Row:
    translate: object
    effect: object  # oparg -> CPython's stack effect on the fall-through edge
    jump_effect: object = None  # oparg -> the effect on the taken edge (jumps only)
    checked: bool = True


_ROWS: dict = {}


def _row(*names, effect, jump_effect=None, checked=True, versions=None):
    def add(translate):
        if versions is not None and _V not in versions:
            return translate
        for name in names:
            if name not in dis.opmap or dis.opmap[name] >= 256:
                continue  # not an opcode of this CPython (or a compiler pseudo-op)
            assert name not in _ROWS, name
            _ROWS[name] = _Row(translate, effect, jump_effect, checked)
        return translate
    return add


def _const(n):
    return lambda arg: n


@_row("RESUME", "NOP", "EXTENDED_ARG", "MAKE_CELL", "COPY_FREE_VARS", "KW_NAMES", effect=_const(0))
def _silent(f, k, ins, st, emit):
    # Bookkeeping only in CPython: frame setup, cells made at entry,
    # EXTENDED_ARG (dis folds it into the next oparg), KW_NAMES (paired
    # with its CALL by _pair_kw_names).
    return st, None


@_row("PRECALL", effect=lambda n: -n, checked=False)
def _precall(f, k, ins, st, emit):
    return st, None  # the call's whole effect is CALL's in the abstract stack


def _same(pops, pushes, operand=None):
    """An opcode with the same meaning and name in KBC."""
    def translate(f, k, ins, st, emit):
        f._pop(st, pops, ins)
        st += ["v"] * pushes
        if operand == "global":
            f.program.use_global(ins.argval, stored=True)
            emit(f"  {ins.opname} {f.name_operand(ins.argval)}")
        elif operand == "local":
            emit(f"  {ins.opname} {f.rename[ins.argval]}")
        elif operand == "name":
            emit(f"  {ins.opname} {f.name_operand(ins.argval)}")
        else:
            emit(f"  {ins.opname}")
        return st, None
    return translate


for _name, _pops, _pushes, _operand in [
        ("BINARY_SUBSCR", 2, 1, None), ("STORE_SUBSCR", 3, 0, None),
        ("DELETE_SUBSCR", 2, 0, None), ("GET_ITER", 1, 1, None),
        ("STORE_ATTR", 2, 0, "name"), ("DELETE_ATTR", 1, 0, "name"), ("STORE_GLOBAL", 1, 0, "global"),

        # Exception handling: KBC shares CPython 3.11's model (3.10's
        # block stack is translated to it: kiln/_frontend_opcodes_v310.py).
        ("PUSH_EXC_INFO", 1, 2, None), ("POP_EXCEPT", 1, 0, None), ("CHECK_EXC_MATCH", 2, 2, None),
        ("BEFORE_WITH", 1, 2, None),
        # from module import name: module -> module module.name
        ("IMPORT_FROM", 1, 2, "name")]:
    _row(_name, effect=_const(_pushes - _pops),
         versions=None if _name != "POP_EXCEPT" else {(3, 11), (3, 12), (3, 13)})(_same(_pops, _pushes, _operand))


@_row(*_UNARY, effect=_const(0))
def _unary(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    st.append("v")
    emit(f"  UNARY_OP {_UNARY[ins.opname]}")
    return st, None


@_row("POP_TOP", effect=_const(-1))
def _pop_top(f, k, ins, st, emit):
    # 3.13 ends a loop with END_FOR, POP_TOP, which FOR_ITER skips: the
    # second of its phantom pair. 3.10's handlers pop an exception's three
    # slots one by one: the exception is KBC's, the others are not.
    if f._pop(st, 1, ins, accept=("v", "X", "E", "b", "y")) in (["v"], ["E"]):
        emit("  POP_TOP")
    return st, None


@_row("RETURN_VALUE", effect=_const(-1))
def _return(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    _emit_return(f, emit)
    return None, None


@_row("RETURN_CONST", effect=_const(0))  # 3.12: LOAD_CONST + RETURN_VALUE in one
def _return_const(f, k, ins, st, emit):
    emit(f"  LOAD_CONST {f._constant(ins.argval)}")
    _emit_return(f, emit)
    return None, None


def _emit_return(f, emit):
    if f.genexpr:
        # The end of a generator expression (its None): what it yielded.
        f.program.use_builtin("iter")
        emit("  POP_TOP")
        emit("  LOAD_GLOBAL iter")
        emit(f"  LOAD_FAST {f.gen_items}")
        emit("  CALL 1")
    emit("  RETURN_VALUE")


# A generator expression's own opcodes (kiln/_frontend.py, _Function.
# gen_items): the items into a list as they are yielded. A generator
# function (`yield` in a def) keeps them: KBC's YIELD_VALUE in a
# `.generator` function, which the tracer suspends.
@_row("RETURN_GENERATOR", effect=_const(0), checked=False, versions={(3, 11), (3, 12)})
@_row("RETURN_GENERATOR", effect=_const(1), versions={(3, 13)})  # 3.13's dis counts the value
def _return_generator(f, k, ins, st, emit):
    if f.generator:
        # A `.generator` function's body starts where CPython's generator
        # first resumes: with the None its POP_TOP pops.
        emit("  LOAD_CONST None")
        st.append("v")
        return st, None
    # CPython pushes the value the generator is first resumed with (None)
    # once it runs: dis counts 0, the POP_TOP after it pops that.
    emit("  BUILD_LIST 0")
    emit(f"  STORE_FAST {f.gen_items}")
    emit("  LOAD_CONST None")
    st.append("v")
    return st, None


@_row("YIELD_VALUE", effect=_const(0))
def _yield_value(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    if f.generator:
        emit("  YIELD_VALUE")
        st.append("v")
        return st, None
    emit(f"  LOAD_FAST {f.gen_items}")
    emit("  SWAP 2")
    emit("  LIST_APPEND 1")
    emit("  POP_TOP")
    emit("  LOAD_CONST None")  # the value sent in: None when iterated
    st.append("v")
    return st, None


@_row("LOAD_FAST", "LOAD_FAST_CHECK", effect=_const(1))
def _load_fast(f, k, ins, st, emit):
    # LOAD_FAST_CHECK (3.12): a local that may be unbound; KBC's LOAD_FAST
    # raises the same UnboundLocalError.
    if _V >= (3, 13) and _holds_cell(f, ins.argval, st):
        # 3.13 spells LOAD_CLOSURE (a closure's cell, for MAKE_FUNCTION) so;
        # a cell's value is read with LOAD_DEREF on every version.
        return _load_cell(f, k, ins._replace(opname="LOAD_CLOSURE"), st, emit)
    emit(f"  LOAD_FAST {f.local(ins.argval, st)}")
    st.append("v")
    return st, None


def _holds_cell(f, name, st):
    """Whether local `name`'s slot holds a cell here: a cell or free
    variable of the function, unless an inlined comprehension binds the
    name as a plain local of its own (the same slot, saved and cleared)."""
    if name not in f.code.co_cellvars and name not in f.code.co_freevars:
        return False
    inner = [kind for kind in st if saved_local(kind) == name]
    return not inner or inner[-1].startswith("C*")


@_row("LOAD_DEREF", "LOAD_CLOSURE", effect=_const(1))
def _load_cell(f, k, ins, st, emit):
    _note_cell_use(f, ins.argval, st)
    st.append("v")
    emit(f"  {ins.opname} {f.rename[ins.argval]}")
    return st, None


@_row("STORE_DEREF", effect=_const(-1))
def _store_cell(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    _note_cell_use(f, ins.argval, st)
    emit(f"  STORE_DEREF {f.rename[ins.argval]}")
    return st, None


def _note_cell_use(f, name, st):
    if not any(saved_local(kind) == name for kind in st):
        f.cells_used_outside.add(name)


@_row("STORE_FAST", effect=_const(-1))
def _store_fast(f, k, ins, st, emit):
    if st and saved_local(st[-1]) == ins.argval:
        # The end of a 3.12 inlined comprehension: CPython puts back the
        # local it shadowed; in KBC the outer variable was never touched.
        st.pop()
        return st, None
    f._pop(st, 1, ins, accept=("v", "E"))  # (3.10: `except ... as name` stores the exception)
    emit(f"  STORE_FAST {f.local(ins.argval, st)}")
    return st, None


# 3.13's pairs of local loads and stores: the two instructions they stand
# for, in order (dis gives the two names as argval).
@_row("LOAD_FAST_LOAD_FAST", effect=_const(2))
@_row("STORE_FAST_LOAD_FAST", effect=_const(0))
@_row("STORE_FAST_STORE_FAST", effect=_const(-2))
def _fast_pair(f, k, ins, st, emit):
    first, second = ins.opname.split("_FAST_")
    for op, name in ((first + "_FAST", ins.argval[0]), (second, ins.argval[1])):
        one = ins._replace(opname=op, argval=name)
        st, _ = (_load_fast if op == "LOAD_FAST" else _store_fast)(f, k, one, st, emit)
    return st, None


@_row("DELETE_FAST", effect=_const(0))
def _delete_fast(f, k, ins, st, emit):
    emit(f"  DELETE_FAST {f.local(ins.argval, st)}")
    return st, None


@_row("LOAD_FAST_AND_CLEAR", effect=_const(1))
def _load_fast_and_clear(f, k, ins, st, emit):
    # 3.12 inlines list/set/dict comprehensions (PEP 709): it saves each
    # local the comprehension binds (or NULL), clears it, and restores it
    # after. KBC renames the comprehension's uses instead (f.local), so
    # there is nothing to save: a virtual slot marks the region.
    # A variable a closure inside the comprehension captures is a cell of
    # the function: CPython saves the cell and makes a fresh one (MAKE_CELL,
    # silent here). KBC keeps the function's one cell, which is the same
    # as long as nothing outside the comprehension uses it (checked when the
    # function is done: _Function.translate).
    cell = ""
    if ins.argval in f.code.co_cellvars:
        f.shadowed_cells.add(ins.argval)
        if k + 1 < len(f.instrs) and f.instrs[k + 1].opname == "MAKE_CELL":
            cell = "*"  # the comprehension's variable is a cell too (else a plain local in the cell's slot)
    st.append("C" + cell + ins.argval)
    return st, None


@_row("LOAD_CONST", effect=_const(1))
def _load_const(f, k, ins, st, emit):
    nxt = f.instrs[k + 1].opname if k + 1 < len(f.instrs) else None
    if _held_pair_at(f, k):
        # 3.10: a resume function's method pair (kiln/_resume.push_slots):
        # KBC pushes the callable and a NULL (_call_310, _load_method).
        st.append("K")
        return st, None
    if nxt in ("CALL_KW", "CALL_FUNCTION_KW") or (nxt == "MAKE_FUNCTION" and _V == (3, 10)):
        # 3.13's and 3.10's keyword names: KBC spells them in its call
        # (_pair_kw_names); 3.10's qualified name of the function made
        # next: its KBC .func says it (_Function.translate's qualnames).
        st.append("K")
        return st, None
    st.append("v")
    emit(f"  LOAD_CONST {f._constant(ins.argval)}")
    return st, None


@_row("LOAD_GLOBAL", effect=_const(1), versions={(3, 10)})
@_row("LOAD_GLOBAL", effect=lambda arg: 1 + (arg & 1), versions={(3, 11), (3, 12), (3, 13)})
def _load_global(f, k, ins, st, emit):
    # 3.11+ bit 0: a NULL for the call, below the global until 3.12, above it on 3.13
    st.extend(_NULL_PAIR if _V >= (3, 11) and ins.arg & 1 else ["v"])
    f.program.use_global(ins.argval)
    emit(f"  LOAD_GLOBAL {f.name_operand(ins.argval)}")
    return st, None


@_row("PUSH_NULL", effect=_const(1))
def _push_null(f, k, ins, st, emit):
    st.append("N")
    return st, None


@_row("LOAD_METHOD", effect=_const(1))
def _load_method(f, k, ins, st, emit):
    if f._pop(st, 1, ins, accept=("v", "H")) == ["H"]:
        emit("  PUSH_NULL")  # 3.10's pair of a callable: KBC's (attribute, NULL)
    else:
        emit(f"  LOAD_METHOD {f.name_operand(ins.argval)}")
    st += ["M", "S"]
    return st, None


@_row("LOAD_ATTR", effect=_const(0), versions={(3, 10), (3, 11)})
@_row("LOAD_ATTR", effect=lambda arg: arg & 1, versions={(3, 12), (3, 13)})  # 3.12: bit 0 is LOAD_METHOD
def _load_attr(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    _attribute(f, ins.argval, _V >= (3, 12) and ins.arg & 1, st, emit)
    return st, None


def _attribute(f, name, method, st, emit):
    if method:
        st += ["M", "S"]
        emit(f"  LOAD_METHOD {f.name_operand(name)}")
    else:
        st.append("v")
        emit(f"  LOAD_ATTR {f.name_operand(name)}")


@_row("LOAD_SUPER_ATTR", effect=lambda arg: -1 if arg & 1 else -2)
def _load_super_attr(f, k, ins, st, emit):
    # 3.12: super, its class and self on the stack (the zero-argument form
    # loads __class__ and the first argument itself): super(class, self),
    # then the attribute or method (bit 0).
    f._pop(st, 3, ins)
    emit("  CALL 2")
    _attribute(f, ins.argval, ins.arg & 1, st, emit)
    return st, None


@_row("BINARY_OP", effect=_const(-1))
def _binary_op(f, k, ins, st, emit):
    f._pop(st, 2, ins)
    st.append("v")
    arg = ins.arg
    emit(f"  BINARY_OP {_NB_SYMBOLS[arg] if arg < 13 else _NB_SYMBOLS[arg - 13] + '='}")
    return st, None


@_row("COMPARE_OP", "IS_OP", "CONTAINS_OP", effect=_const(-1))
def _compare(f, k, ins, st, emit):
    f._pop(st, 2, ins)
    st.append("v")
    op = ins.opname
    if op == "COMPARE_OP":
        symbol = ins.argval  # dis's symbol, without 3.13's bool() bit (arg & 16)
        if _V >= (3, 13) and ins.arg & 16:
            _emit_compare_then_bool(f, k, symbol, emit)
            return st, None
    elif op == "IS_OP":
        symbol = "is not" if ins.arg else "is"
    else:
        symbol = "not in" if ins.arg else "in"
    emit(f"  COMPARE_OP {symbol}")
    return st, None


def _emit_compare_then_bool(f, k, symbol, emit):
    emit(f"  COMPARE_OP {symbol}")
    _emit_to_bool(f, k, emit)


def _emit_to_bool(f, k, emit):
    """3.13's TO_BOOL (and COMPARE_OP's bool bit): bool() of the top. The
    compiler puts it only before a conditional jump or `not`, which take
    the truth of their operand themselves in KBC at the same point; any
    other consumer gets the call."""
    nxt = f.instrs[k + 1].opname if k + 1 < len(f.instrs) else None
    if nxt in _CONDITIONAL or nxt == "UNARY_NOT":
        return
    f.program.use_builtin("bool")
    emit("  LOAD_GLOBAL bool")
    emit("  SWAP 2")
    emit("  CALL 1")


@_row("TO_BOOL", effect=_const(0))
def _to_bool(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    st.append("v")
    _emit_to_bool(f, k, emit)
    return st, None


@_row("BUILD_TUPLE", "BUILD_LIST", "BUILD_STRING", "BUILD_SET", effect=lambda n: 1 - n)
@_row("BUILD_SLICE", effect=lambda n: -2 if n == 3 else -1)  # 2 or 3 items
@_row("BUILD_MAP", effect=lambda n: 1 - 2 * n)
def _build(f, k, ins, st, emit):
    op, n = ins.opname, ins.arg
    f._pop(st, 2 * n if op == "BUILD_MAP" else n, ins)
    st.append("v")
    emit(f"  {'BUILD_DICT' if op == 'BUILD_MAP' else op} {n}")
    return st, None


@_row("BUILD_CONST_KEY_MAP", effect=lambda n: -n)
def _build_const_key_map(f, k, ins, st, emit):
    return f._build_const_key_map(k, st, emit)


@_row("LIST_APPEND", "LIST_EXTEND", "SET_ADD", "SET_UPDATE", effect=_const(-1))
def _container_add(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    emit(f"  {ins.opname} {f._depth(st, ins.arg, ins)}")
    return st, None


@_row("LIST_TO_TUPLE", effect=_const(0))
def _list_to_tuple(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    st.append("v")
    _emit_list_to_tuple(f, emit)
    return st, None


def _emit_list_to_tuple(f, emit):
    f.program.use_builtin("tuple")
    emit("  LOAD_GLOBAL tuple")
    emit("  SWAP 2")
    emit("  CALL 1")


# 3.12's CALL_INTRINSIC_1 (by dis's names): what 3.11 had opcodes for.
# Others (typing's TypeVar and friends, print in the REPL, import *) are
# refused with the construct's name.
_INTRINSIC_REFUSED = {
    "INTRINSIC_PRINT": "interactive statement",
    "INTRINSIC_IMPORT_STAR": "import statement (from x import *)",
    "INTRINSIC_ASYNC_GEN_WRAP": "async generator",
    "INTRINSIC_STOPITERATION_ERROR": "a StopIteration handler outside a generator's own guard",
}


@_row("CALL_INTRINSIC_1", effect=_const(0))
def _call_intrinsic_1(f, k, ins, st, emit):
    what = dis._intrinsic_1_descs[ins.arg]
    f._pop(st, 1, ins)
    st.append("v")
    if what == "INTRINSIC_UNARY_POSITIVE":
        emit("  UNARY_OP +")
    elif what == "INTRINSIC_LIST_TO_TUPLE":
        _emit_list_to_tuple(f, emit)
    else:
        f.fail(_INTRINSIC_REFUSED.get(what, f"type parameter syntax ({what})"))
    return st, None


@_row("CALL_INTRINSIC_2", effect=_const(-1))
def _call_intrinsic_2(f, k, ins, st, emit):
    what = dis._intrinsic_2_descs[ins.arg]
    f.fail("except* (exception groups)" if what == "INTRINSIC_PREP_RERAISE_STAR"
           else f"type parameter syntax ({what})")


@_row("BINARY_SLICE", effect=_const(-2))  # 3.12: container start end -> container[start:end]
@_row("STORE_SLICE", effect=_const(-4))   # 3.12: value container start end -> container[start:end] = value
def _slice(f, k, ins, st, emit):
    load = ins.opname == "BINARY_SLICE"
    f._pop(st, 3 if load else 4, ins)
    st += ["v"] if load else []
    emit("  BUILD_SLICE 2")
    emit("  BINARY_SUBSCR" if load else "  STORE_SUBSCR")
    return st, None


@_row("MAP_ADD", effect=_const(-2))
def _map_add(f, k, ins, st, emit):
    # dict[key] = value, the dict fetched from under the pair.
    f._pop(st, 2, ins)
    d = f._depth(st, ins.arg, ins)
    emit(f"  COPY {d + 2}")      # key value dict
    emit("  SWAP 2")            # key dict value
    emit("  SWAP 3")            # value dict key
    emit("  STORE_SUBSCR")
    return st, None


@_row("DICT_UPDATE", effect=_const(-1))
def _dict_update(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    d = f._depth(st, ins.arg, ins)
    emit(f"  COPY {d + 1}")      # mapping dict
    emit("  LOAD_METHOD update")  # mapping method self
    emit("  SWAP 2")
    emit("  SWAP 3")            # method self mapping
    emit("  CALL_METHOD 1")
    emit("  POP_TOP")
    return st, None


@_row("DICT_MERGE", effect=_const(-1))
def _dict_merge(f, k, ins, st, emit):
    # f(**m), f(k=1, **m), f(**a, **b): CPython's own instruction (the
    # callable sits two slots under the dict, for its errors).
    f._pop(st, 1, ins)
    emit(f"  DICT_MERGE {f._depth(st, ins.arg, ins)}")
    return st, None


@_row("IMPORT_NAME", effect=_const(-1))
def _import_name(f, k, ins, st, emit):
    # level fromlist -> module; the dotted name as a str constant (the
    # tracer folds a module already loaded, runtime/value/opcodes.def).
    f._pop(st, 2, ins)
    st.append("v")
    emit(f"  IMPORT_NAME {f._constant(ins.argval)}")
    return st, None


@_row("LOAD_ASSERTION_ERROR", effect=_const(1))
def _load_assertion_error(f, k, ins, st, emit):
    st.append("v")
    emit("  LOAD_ASSERTION_ERROR")
    return st, None


@_row("UNPACK_SEQUENCE", effect=lambda n: n - 1)
def _unpack_sequence(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    st += ["v"] * ins.arg
    emit(f"  UNPACK_SEQUENCE {ins.arg}")
    return st, None


@_row("UNPACK_EX", effect=lambda arg: (arg & 0xFF) + (arg >> 8))
def _unpack_ex(f, k, ins, st, emit):
    return f._unpack_ex(ins, st, emit)


@_row("FORMAT_VALUE", effect=lambda arg: -1 if arg & 4 else 0)
def _format_value(f, k, ins, st, emit):
    return f._format_value(ins, st, emit)


# 3.13 splits FORMAT_VALUE: CONVERT_VALUE (1 !s, 2 !r, 3 !a) gives a str,
# which formats as itself; FORMAT_SIMPLE / FORMAT_WITH_SPEC format it.
@_row("CONVERT_VALUE", effect=_const(0))
@_row("FORMAT_SIMPLE", effect=_const(0))
@_row("FORMAT_WITH_SPEC", effect=_const(-1))
def _format_313(f, k, ins, st, emit):
    spec = ins.opname == "FORMAT_WITH_SPEC"
    f._pop(st, 2 if spec else 1, ins)
    st.append("v")
    emit(f"  FORMAT_VALUE {ins.arg if ins.opname == 'CONVERT_VALUE' else 4 * spec}")
    return st, None


@_row("COPY", effect=_const(1))
def _copy(f, k, ins, st, emit):
    src = st[-ins.arg] if 0 < ins.arg <= len(st) else None
    if src not in _VALUE:
        f.fail("unexpected stack layout at COPY")
    emit(f"  COPY {f._depth(st, ins.arg, ins)}")
    st.append("v")
    return st, None


@_row("SWAP", effect=_const(0))
def _swap(f, k, ins, st, emit):
    n = ins.arg
    if n > len(st):
        f.fail("unexpected stack layout at SWAP")
    a, b = st[-1], st[-n]
    if (_is_virtual(a) or _is_virtual(b)) and "N" not in (a, b):
        # 3.12's comprehensions move the locals they saved past values: in
        # KBC, which has no slots for them, the values must keep their order.
        before = [x for x in st[-n:] if not _is_virtual(x)]
        st[-1], st[-n] = b, a
        if [x for x in st[-n:] if not _is_virtual(x)] != before or (not _is_virtual(a) and not _is_virtual(b)):
            f.fail("unexpected stack layout at SWAP")
        return st, None
    if a not in _VALUE or b not in _VALUE:
        f.fail("unexpected stack layout at SWAP")
    emit(f"  SWAP {f._depth(st, n, ins)}")
    st[-1], st[-n] = st[-n], st[-1]
    return st, None


@_row("CALL", effect=_const(-1), checked=False, versions={(3, 11)})  # with its PRECALL: -(n + 1)
@_row("CALL", effect=lambda n: -1 - n, versions={(3, 12), (3, 13)})
def _call(f, k, ins, st, emit):
    return f._call(k, st, emit)


@_row("CALL_KW", effect=lambda n: -2 - n)
def _call_kw(f, k, ins, st, emit):
    # 3.13: the keyword names, a constant tuple on top, are virtual ('K').
    f._pop(st, 1, ins, accept=("K",))
    return f._call(k, st, emit)


@_row("CALL_FUNCTION_EX", effect=lambda flags: -1 - (flags & 1), versions={(3, 10)})  # no NULL
@_row("CALL_FUNCTION_EX", effect=lambda flags: -2 - (flags & 1), versions={(3, 11), (3, 12), (3, 13)})
def _call_ex(f, k, ins, st, emit):
    has_kw = ins.arg & 1
    if has_kw:
        f._pop(st, 1, ins)
    f._pop(st, 1, ins)
    if _V == (3, 10):
        f._pop(st, 1, ins)
    elif f._pop(st, 2, ins, accept=("v", "N")) != _NULL_PAIR:
        f.fail("unexpected stack layout at CALL_FUNCTION_EX")
    st.append("v")
    emit(f"  CALL_EX {has_kw}")
    return st, None


@_row("MAKE_FUNCTION", effect=lambda flags: -1 - bin(flags & 0xF).count("1"), versions={(3, 10)})  # and the name
@_row("MAKE_FUNCTION", effect=lambda flags: -bin(flags & 0xF).count("1"), versions={(3, 11), (3, 12)})
@_row("MAKE_FUNCTION", effect=_const(0), versions={(3, 13)})  # the attributes: SET_FUNCTION_ATTRIBUTE
def _make_function(f, k, ins, st, emit):
    return f._make_function(k, st, emit)


@_row("SET_FUNCTION_ATTRIBUTE", effect=_const(-1))
def _set_function_attribute(f, k, ins, st, emit):
    # 3.13: KBC's MAKE_FUNCTION took the attribute already (_make_function
    # reads the run of these after it); its phantom goes.
    function = f._pop(st, 1, ins)
    f._pop(st, 1, ins, accept=("X",))
    st += function
    return st, None


@_row("RAISE_VARARGS", effect=lambda n: -n)
def _raise(f, k, ins, st, emit):
    f._pop(st, ins.arg, ins)
    emit(f"  RAISE {ins.arg}")
    return None, None


@_row("RERAISE", effect=_const(-1), versions={(3, 11), (3, 12), (3, 13)})
def _reraise(f, k, ins, st, emit):
    # oparg: how deep the handler's lasti sits under the exception (no
    # NULL can be between them: both come from the handler).
    f._pop(st, 1, ins)
    emit(f"  RERAISE {ins.arg}")
    return None, None


@_row("WITH_EXCEPT_START", effect=_const(1), versions={(3, 11), (3, 12), (3, 13)})
def _with_except_start(f, k, ins, st, emit):
    # exit lasti prev exc -> ... res (CPython reads the four in place)
    f._pop(st, 4, ins)
    st += ["v"] * 5
    emit("  WITH_EXCEPT_START")
    return st, None


@_row(*_JUMPS, effect=_const(0), jump_effect=_const(0))
def _jump(f, k, ins, st, emit):
    emit(f"  JUMP L{ins.argval}")
    return None, st


@_row(*_CONDITIONAL, effect=_const(-1), jump_effect=_const(-1))
def _conditional(f, k, ins, st, emit):
    f._pop(st, 1, ins)
    emit(f"  {_CONDITIONAL[ins.opname]} L{ins.argval}")
    return st, list(st)


@_row("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP", effect=_const(-1), jump_effect=_const(0))
def _jump_or_pop(f, k, ins, st, emit):
    kept = list(st)
    f._pop(st, 1, ins)
    emit(f"  {ins.opname} L{ins.argval}")
    return st, kept


@_row("FOR_ITER", effect=_const(1), jump_effect=_const(-1), versions={(3, 10), (3, 11)})
@_row("FOR_ITER", effect=_const(1), jump_effect=_const(1), versions={(3, 12), (3, 13)})
def _for_iter(f, k, ins, st, emit):
    # 3.12 jumps to an END_FOR that it skips at run time, having popped the
    # iterator; dis counts the jump as pushing a value for END_FOR's two
    # pops (3.13: END_FOR and the POP_TOP after it pop one each, and both
    # are skipped). KBC's FOR_ITER pops the iterator and lands where END_FOR
    # is: two virtual slots carry CPython's accounting to it.
    f._pop(st, 1, ins)
    exhausted = list(st) + (["X", "X"] if _V >= (3, 12) else [])
    st += ["v", "v"]
    emit(f"  FOR_ITER L{ins.argval}")
    return st, exhausted


@_row("END_FOR", effect=_const(-2), versions={(3, 12)})
@_row("END_FOR", effect=_const(-1), versions={(3, 13)})
def _end_for(f, k, ins, st, emit):
    f._pop(st, 2 if _V < (3, 13) else 1, ins, accept=("X",))
    return st, None


def _held_pair_at(f, k):
    """Whether instruction k starts 3.10's pushing of a NULL and a
    callable, which only kiln's resume functions contain (kiln/_bytecode_v310
    null_pair: LOAD_CONST its holder class, the callable, CALL_FUNCTION 1,
    LOAD_METHOD value)."""
    holder = getattr(_bytecode_tables, "NULL_PAIR_HOLDER", None)
    if holder is None or k + 3 >= len(f.instrs) or f.instrs[k].argval is not holder:
        return False
    load, call, method = f.instrs[k + 1:k + 4]
    return (load.opname == "LOAD_FAST" and call.opname == "CALL_FUNCTION" and call.arg == 1
            and method.opname == "LOAD_METHOD" and method.argval == "value")

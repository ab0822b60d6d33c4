"""A code object's instructions as kiln's frontend reads them.

dis.get_instructions gives what the frontend needs (opname, opcode, arg,
argval, offset, positions) and much it never reads: an argument repr, a
jump label and the cache contents of every instruction, which on 3.13 made
dis 1.8x slower than 3.11's and the frontend's first call 1.3x 3.11's
(benchmarks/RESULTS.md, issue 30). This decodes the same fields from the
running version's tables (kiln/_bytecode_tables.py), and nothing else;
tests/python/test_frontend.py checks it equals dis field by field on every
instruction of a corpus of real code.

Like dis: EXTENDED_ARG is an instruction of its own (its arg the prefix so
far), CACHE units are skipped, a jump's argval is its target's byte offset,
a name's or a local's is the name (a 3.13 pair's, both names), a
constant's the constant, a compare's the operator's symbol.
"""
from __future__ import annotations

import dis
import functools
from typing import NamedTuple

from . import _bytecode_tables as T

__all__ = ["Instruction", "instructions"]


class Instruction(NamedTuple):
    opname: str
    opcode: int
    arg: int | None
    argval: object
    offset: int
    positions: tuple  # dis.Positions (3.10: kiln/_bytecode_v310.Positions, the line only)


# The opcodes with an arg: dis.hasarg from 3.12 (3.13's WITH_EXCEPT_START
# sits at HAVE_ARGUMENT and has none).
_HAS_ARG = frozenset(dis.hasarg) if hasattr(dis, "hasarg") else frozenset(range(dis.HAVE_ARGUMENT, 256))
_CONST = frozenset(op for op in dis.hasconst if op < 256)
_NAME = frozenset(op for op in dis.hasname if op < 256)
_COMPARE = frozenset(op for op in dis.hascompare if op < 256)
_CONVERSIONS = (None, str, repr, ascii)
_new_tuple = tuple.__new__
_FORMAT_VALUE = dis.opmap.get("FORMAT_VALUE")    # (until 3.12)
_CONVERT_VALUE = dis.opmap.get("CONVERT_VALUE")  # (3.13)


@functools.cache
def _version_tables():
    """What the running version's module says (read on first use: on a
    CPython kiln has no tables for, the package still imports)."""
    T.require()
    return (frozenset(T.JUMP_OPS), frozenset(T.LOCAL_OPS), frozenset(T.FREE_OPS),
            # how far a name's index is shifted up in the arg (the low bits are flags)
            {dis.opmap[name]: shift for name, shift in T.NAME_ARG_SHIFTS.items()})


def instructions(code) -> list:
    """`code`'s instructions, as dis.get_instructions(code) gives them on
    the fields of Instruction."""
    jumps, local_ops, free_ops, name_shift = _version_tables()
    raw = code.co_code
    consts, names = code.co_consts, code.co_names
    local_names = T.localsplus_names(code)
    # (3.10 indexes cells and free variables apart from the locals)
    free_names = T.slot_names(local_names, next(iter(free_ops))) if free_ops else local_names
    positions = T.code_positions(code)
    compare_shift = T.COMPARE_ARG_SHIFT
    ext_op, has_arg, caches = T.EXTENDED_ARG, _HAS_ARG, T.CACHES
    pairs = T.LOCAL_PAIRS
    opnames = dis.opname
    out = []
    ext = 0
    i, n = 0, len(raw)
    while i < n:
        op = raw[i]
        if op in has_arg:
            arg = raw[i + 1] | ext
            ext = arg << 8 if op == ext_op else 0
        else:
            arg = None
            ext = 0
        argval = arg
        if arg is not None:
            if op in _CONST:
                argval = consts[arg]
            elif op in _NAME:
                argval = names[arg >> name_shift.get(op, 0)]
            elif op in jumps:
                argval = T.jump_target_offset(i, op, arg)
            elif op in pairs:
                argval = (local_names[arg >> 4], local_names[arg & 15])
            elif op in local_ops:
                argval = local_names[arg]
            elif op in free_ops:
                argval = free_names[arg]
            elif op in _COMPARE:
                argval = dis.cmp_op[arg >> compare_shift]
            elif op == _FORMAT_VALUE:
                argval = (_CONVERSIONS[arg & 3], bool(arg & 4))
            elif op == _CONVERT_VALUE:
                argval = _CONVERSIONS[arg]
        # (tuple.__new__ as Instruction's own __new__ does, without its Python frame)
        out.append(_new_tuple(Instruction, (opnames[op], op, arg, argval, i, positions[i // 2])))
        i += 2 * (1 + caches[op])
    return out


def nested_qualnames(ins) -> dict:
    """{id(nested code): its __qualname__} for the functions made by the
    code whose `instructions` are `ins`: 3.10's code objects have no
    qualified name, and its MAKE_FUNCTION takes it from the constant pushed
    just before it (after the code's)."""
    return {id(c.argval): q.argval for c, q, m in zip(ins, ins[1:], ins[2:])
            if m.opname == "MAKE_FUNCTION" and c.opname == q.opname == "LOAD_CONST"
            and hasattr(c.argval, "co_code") and isinstance(q.argval, str)}

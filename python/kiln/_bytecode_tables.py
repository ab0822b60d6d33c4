"""Per-CPython-version facts about bytecode, for kiln/_bytecode.py.

Everything that differs between CPython versions lives here, behind small
functions keyed on `sys.version_info`, so that 3.10/3.12/3.13 are added as
data rather than as branches scattered through the assembler. Only 3.11 is
filled in; other versions raise `UnsupportedVersion` at import of
_bytecode (not silently mis-assemble).

A version provides: CACHES (inline cache units per opcode), the jump
families (_JUMP_PAIRS_*, JUMP_OPS, BACKWARD_JUMPS, UNCONDITIONAL_JUMPS,
TERMINATORS) with jump_variant / jump_target_offset / jump_arg /
is_backward_target, parse/encode_exception_table, encode_location_table,
runtime_transfer (stack kinds through NULL-aware instructions), and the
opcode and flag constants kiln/_resume.py uses (LOCAL_OPS / FREE_OPS: what
a local-slot arg indexes; GENERATOR_FLAGS; KW_NAMES ...).

Traps this module encodes (3.11):
- Code units are 2 bytes (opcode, arg). An instruction is its EXTENDED_ARG
  prefixes, the opcode unit, then `dis._inline_cache_entries[op]` CACHE
  units. Jump offsets, exception-table ranges and location-table lengths
  all count the whole thing (prefixes and caches included).
- All jumps are relative (no absolute jumps), counted in code units from
  the unit after the jump's caches; direction is in the opcode
  (JUMP_FORWARD/JUMP_BACKWARD, POP_JUMP_FORWARD_IF_*/POP_JUMP_BACKWARD_IF_*),
  so moving an instruction across its target changes its opcode.
- The exception table is a sequence of entries of 6-bit big-endian varints
  (bit 6 = continuation, bit 7 marks an entry's first byte): start, length
  (code units, end exclusive), handler, depth<<1|lasti.
- The location table (Objects/locations.md) has one entry per instruction
  (split into pieces of at most 8 code units), with the line as a delta
  from the previous entry's and little-endian 6-bit varints. The short
  and one-line forms are chosen exactly as compile.c chooses them, or the
  round trip is not byte-identical (though still correct).
- NULL stack slots and the PRECALL/CALL accounting: see runtime_transfer.
- LOAD_FAST/STORE_FAST/DELETE_FAST and MAKE_CELL/LOAD_CLOSURE/LOAD_DEREF/
  STORE_DEREF all index one array, "localsplus" = varnames, then cells
  that are not arguments, then free variables (3.10 indexed cells/frees
  apart).
"""
import dis
import sys

VERSION = sys.version_info[:2]


class UnsupportedVersion(RuntimeError):
    pass


def _check():
    if VERSION != (3, 11):
        raise UnsupportedVersion(
            f"kiln._bytecode supports CPython 3.11 only (running {VERSION[0]}.{VERSION[1]}); "
            "add this version's tables to kiln/_bytecode_tables.py")


_check()

OP = dis.opmap
EXTENDED_ARG = OP["EXTENDED_ARG"]
CACHE = OP["CACHE"]
HAVE_ARGUMENT = dis.HAVE_ARGUMENT
CACHES = tuple(dis._inline_cache_entries)  # per opcode; co_code shows them zeroed


def cache_entries(opcode):
    """Inline CACHE code units following `opcode` (3.11: dis's table)."""
    return CACHES[opcode]


# ---------------------------------------------------------------- jumps --

# Each relative jump family: (forward name or None, backward name or None),
# searched in order (so JUMP_FORWARD turned backward is JUMP_BACKWARD).
# None: that direction does not exist (FOR_ITER only jumps forward; the
# assembler refuses a layout that needs it).
_JUMP_PAIRS_311 = [
    ("JUMP_FORWARD", "JUMP_BACKWARD"),
    ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE"),
    ("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE"),
    ("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE"),
    ("POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE"),
    # Forward, JUMP_BACKWARD_NO_INTERRUPT is a JUMP_FORWARD (forward jumps
    # never check the eval breaker in 3.11); back again it is itself.
    ("JUMP_FORWARD", "JUMP_BACKWARD_NO_INTERRUPT"),
    ("FOR_ITER", None),
    ("JUMP_IF_FALSE_OR_POP", None),
    ("JUMP_IF_TRUE_OR_POP", None),
    ("SEND", None),
]

JUMP_OPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
BACKWARD_JUMPS = frozenset(OP[b] for _, b in _JUMP_PAIRS_311 if b)
# Jumps that never fall through.
UNCONDITIONAL_JUMPS = frozenset(OP[n] for n in ("JUMP_FORWARD", "JUMP_BACKWARD",
                                                "JUMP_BACKWARD_NO_INTERRUPT"))
# Instructions after which control never reaches the next instruction.
TERMINATORS = frozenset(OP[n] for n in ("RETURN_VALUE", "RAISE_VARARGS", "RERAISE"))


def jump_variant(opcode, backward):
    """The opcode of `opcode`'s family that jumps in the given direction
    (ValueError when the family has no such variant)."""
    name = dis.opname[opcode]
    for fwd, bwd in _JUMP_PAIRS_311:
        if name in (fwd, bwd):
            want = bwd if backward else fwd
            if want is None:
                raise ValueError(f"{name} cannot jump {'backward' if backward else 'forward'}")
            return OP[want]
    raise ValueError(f"{name} is not a relative jump")


def jump_target_offset(opcode_offset, opcode, arg):
    """Byte offset a jump at `opcode_offset` (the opcode unit, after any
    EXTENDED_ARG) goes to. 3.11: relative to the unit after the jump's
    caches (jumps have none in 3.11, but keep the formula honest)."""
    nxt = opcode_offset + 2 + 2 * cache_entries(opcode)
    return nxt - 2 * arg if opcode in BACKWARD_JUMPS else nxt + 2 * arg


def jump_arg(opcode_offset, opcode, target_offset):
    """Inverse of jump_target_offset: the arg (None if the direction of
    `opcode` does not match the target's position)."""
    nxt = opcode_offset + 2 + 2 * cache_entries(opcode)
    delta = (nxt - target_offset) if opcode in BACKWARD_JUMPS else (target_offset - nxt)
    return None if delta < 0 else delta // 2


def is_backward_target(opcode_offset, opcode, target_offset):
    return target_offset < opcode_offset + 2 + 2 * cache_entries(opcode)


# ------------------------------------------------- exception table --

def parse_exception_table(raw):
    """[(start, end, handler, depth, lasti)] in bytes, end exclusive."""
    out = []
    it = iter(raw)

    def varint(first=None):
        b = next(it) if first is None else first
        val = b & 63
        while b & 64:
            val <<= 6
            b = next(it)
            val |= b & 63
        return val

    for b in it:
        start = varint(b) * 2
        length = varint() * 2
        handler = varint() * 2
        dl = varint()
        out.append((start, start + length, handler, dl >> 1, bool(dl & 1)))
    return out


def _except_varint(out, value, msb):
    shift = 24
    while shift:
        if value >= 1 << shift:
            out.append(((value >> shift) & 63) | 64 | msb)
            msb = 0
        shift -= 6
    out.append((value & 63) | msb)


def encode_exception_table(entries):
    """`entries`: (start, end, handler, depth, lasti) in bytes, end exclusive."""
    out = bytearray()
    for start, end, handler, depth, lasti in entries:
        _except_varint(out, start // 2, 128)
        _except_varint(out, (end - start) // 2, 0)
        _except_varint(out, handler // 2, 0)
        _except_varint(out, (depth << 1) | int(lasti), 0)
    return bytes(out)


# ------------------------------------------------- location table --

def _loc_varint(out, val):
    while val >= 64:
        out.append((val & 63) | 64)
        val >>= 6
    out.append(val)


def _loc_svarint(out, val):
    _loc_varint(out, ((-val) << 1) | 1 if val < 0 else val << 1)


def encode_location_table(items, firstlineno):
    """`items`: (size in code units, dis.Positions or None) per instruction,
    in order. Mirrors 3.11 compile.c write_location_info_entry exactly so
    unmodified compiler output round-trips byte for byte: one entry per
    instruction, split into pieces of <= 8 units; short and one-line forms
    do not move the running line, so they are chosen by the same tests."""
    out = bytearray()
    prev = firstlineno
    for size, pos in items:
        if size <= 8 and pos is not None:
            # fast path for the commonest entry: the short form (same line)
            line, end_line, col, end_col = pos
            if line == prev and end_line == line and col is not None and end_col is not None \
                    and col < 80 and 0 <= end_col - col < 16:
                out.append(0x80 | ((col >> 3) << 3) | (size - 1))
                out.append(((col & 7) << 4) | (end_col - col))
                continue
        while size > 8:
            prev = _loc_entry(out, 8, pos, prev)
            size -= 8
        prev = _loc_entry(out, size, pos, prev)
    return bytes(out)


def _loc_entry(out, n, pos, prev):
    n -= 1  # the first byte holds length - 1
    if pos is None or pos[0] is None:
        out.append(0xF8 | n)  # 15: no location
        return prev
    line, end_line, col, end_col = pos
    if end_line is None:
        end_line = -1
    if col is None:
        col = -1
    if end_col is None:
        end_col = -1
    delta = line - prev
    if col < 0 or end_col < 0:
        if end_line == line or end_line == -1:
            out.append(0xE8 | n)  # 13: line only
            _loc_svarint(out, delta)
            return line
    elif end_line == line:
        if delta == 0 and col < 80 and 0 <= end_col - col < 16:
            out.append(0x80 | ((col >> 3) << 3) | n)  # 0-9: short form, same line
            out.append(((col & 7) << 4) | (end_col - col))
            return prev
        if 0 <= delta < 3 and col < 128 and end_col < 128:
            out.append(0x80 | ((10 + delta) << 3) | n)  # 10-12: one line
            out.append(col)
            out.append(end_col)
            return line
    out.append(0xF0 | n)  # 14: long form
    _loc_svarint(out, delta)
    _loc_varint(out, end_line - line)
    _loc_varint(out, col + 1)
    _loc_varint(out, end_col + 1)
    return line


# ------------------------------------------------- 3.11 NULLs and calls --
#
# 3.11 has "virtual" NULL stack slots: PUSH_NULL, LOAD_GLOBAL with the low
# arg bit (NULL below the global), LOAD_METHOD (NULL-or-method, self-or-
# attribute), consumed by PRECALL/CALL or CALL_FUNCTION_EX. A NULL cannot be
# popped by POP_TOP (Py_DECREF(NULL)), put in a tuple or stored: code that
# rebuilds or empties a stack must treat those slots apart. PRECALL may
# rewrite (NULL, bound method) into (function, self) at run time, so after
# PRECALL the pair's kinds are only known dynamically ('M', 'S').
#
# The compiler's stack accounting (dis.stack_effect) charges PRECALL with
# -argc and CALL with -1; at run time PRECALL leaves the stack alone and
# CALL pops argc + 2. stack_analysis models the run time.

PUSH_NULL = OP["PUSH_NULL"]
LOAD_GLOBAL = OP["LOAD_GLOBAL"]
LOAD_METHOD = OP["LOAD_METHOD"]
PRECALL = OP["PRECALL"]
CALL = OP["CALL"]
CALL_FUNCTION_EX = OP["CALL_FUNCTION_EX"]
COPY = OP["COPY"]
SWAP = OP["SWAP"]
RESUME = OP["RESUME"]
KW_NAMES = OP["KW_NAMES"]
RETURN_GENERATOR = OP["RETURN_GENERATOR"]
MAKE_CELL = OP["MAKE_CELL"]
COPY_FREE_VARS = OP["COPY_FREE_VARS"]
LOAD_FAST = OP["LOAD_FAST"]
STORE_FAST = OP["STORE_FAST"]
DELETE_FAST = OP["DELETE_FAST"]
LOCAL_OPS = frozenset(dis.haslocal)     # arg indexes localsplus (varnames part)
FREE_OPS = frozenset(dis.hasfree)       # 3.11: arg indexes localsplus too (not cell/free lists)
GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR
CO_VARARGS, CO_VARKEYWORDS, CO_NOFREE = 0x04, 0x08, 0x40


def runtime_transfer(opcode, arg, jump, shape):
    """The stack shape (tuple of kinds, bottom first) after `opcode` at run
    time, for the instructions whose slots are not plain values or that
    move slots around; None: a plain instruction (net effect per
    dis.stack_effect, pushing values)."""
    if opcode == PUSH_NULL:
        return shape + ("N",)
    if opcode == RETURN_GENERATOR:
        # the frame comes back with the first send()'s None pushed (POP_TOP'd next)
        return shape + ("v",)
    if opcode == LOAD_GLOBAL:
        return shape + (("N", "v") if arg & 1 else ("v",))
    if opcode == LOAD_METHOD:
        return _pop(shape, 1, opcode) + ("M", "S")
    if opcode == PRECALL:
        # (NULL, bound method) may become (function, self): dynamic from here
        base = len(shape) - arg - 2
        if base < 0:
            raise ValueError(f"PRECALL {arg} on a stack of {len(shape)}")
        return shape[:base] + ("M", "S") + shape[base + 2:]
    if opcode == CALL:
        return _pop(shape, arg + 2, opcode) + ("v",)
    if opcode == CALL_FUNCTION_EX:
        return _pop(shape, 3 + (arg & 1), opcode) + ("v",)
    if opcode == COPY:
        return shape + (shape[-arg],)
    if opcode == SWAP:
        s = list(shape)
        s[-1], s[-arg] = s[-arg], s[-1]
        return tuple(s)
    return None


def _pop(shape, n, opcode):
    if n > len(shape):
        raise ValueError(f"{dis.opname[opcode]} pops {n} from a stack of {len(shape)}")
    return shape[:len(shape) - n]


# How many stack slots a CPython 3.11 instruction takes off the stack (its
# operands, a call's NULL included): what a break leaves under them is
# passed to the resume function untouched. None: not resumed after (it
# reaches deeper slots, ends the frame, or is rare): kiln/_frames.py then
# jumps into the original instead. (dis.stack_effect gives only the net
# effect; a break needs to know which slots an instruction leaves alone.)
_INPUTS_311 = {
    "CALL": lambda a: a + 2, "CALL_FUNCTION_EX": lambda a: 3 + (a & 1),
    "BINARY_OP": 2, "BINARY_SUBSCR": 2, "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2, "COMPARE_OP": 2,
    "IS_OP": 2, "CONTAINS_OP": 2, "LOAD_ATTR": 1, "STORE_ATTR": 2, "DELETE_ATTR": 1,
    "UNARY_NEGATIVE": 1, "UNARY_NOT": 1, "UNARY_INVERT": 1, "UNARY_POSITIVE": 1, "GET_ITER": 1,
    "FOR_ITER": 1, "UNPACK_SEQUENCE": 1, "UNPACK_EX": 1, "BUILD_LIST": lambda a: a,
    "BUILD_TUPLE": lambda a: a, "BUILD_SET": lambda a: a, "BUILD_MAP": lambda a: 2 * a,
    "BUILD_STRING": lambda a: a, "BUILD_SLICE": lambda a: a, "BUILD_CONST_KEY_MAP": lambda a: a + 1,
    "FORMAT_VALUE": lambda a: 2 if a & 4 else 1, "LOAD_GLOBAL": 0, "LOAD_FAST": 0, "LOAD_CONST": 0,
    "LOAD_DEREF": 0, "STORE_FAST": 1, "STORE_GLOBAL": 1, "POP_TOP": 1, "LIST_TO_TUPLE": 1,
    # IMPORT_FROM reads the module under it and pushes it back with the
    # name: it takes the module, and the module is one of its results.
    "BEFORE_WITH": 1, "IMPORT_NAME": 2, "IMPORT_FROM": 1, "LOAD_ASSERTION_ERROR": 0,
    "POP_JUMP_FORWARD_IF_FALSE": 1, "POP_JUMP_FORWARD_IF_TRUE": 1, "POP_JUMP_BACKWARD_IF_FALSE": 1,
    "POP_JUMP_BACKWARD_IF_TRUE": 1, "POP_JUMP_FORWARD_IF_NONE": 1, "POP_JUMP_FORWARD_IF_NOT_NONE": 1,
    "POP_JUMP_BACKWARD_IF_NONE": 1, "POP_JUMP_BACKWARD_IF_NOT_NONE": 1, "JUMP_IF_TRUE_OR_POP": 1,
    "JUMP_IF_FALSE_OR_POP": 1,
}
_INPUTS = _INPUTS_311 if VERSION == (3, 11) else {}


def inputs(opname, arg):
    """The slots `opname` takes off the stack, or None (not in the table)."""
    n = _INPUTS.get(opname)
    return n(arg) if callable(n) else n

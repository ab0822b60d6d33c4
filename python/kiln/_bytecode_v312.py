"""CPython 3.12's bytecode facts, for kiln/_bytecode.py (through
kiln/_bytecode_tables.py, which names what every version module provides).

What changed from 3.11 (kiln/_bytecode_v311.py has the rest, which holds
here too: 2-byte code units, inline CACHE units after an instruction,
relative jumps counted from the unit after the caches, one localsplus
array; the exception and location tables are kiln/_code_tables.py's):
- Conditional jumps have one form, POP_JUMP_IF_{TRUE,FALSE,NONE,NOT_NONE},
  and jump only forward: a layout that would need one backward is refused
  (jump_variant raises), as a loop's own back edge is JUMP_BACKWARD.
- No PRECALL and no LOAD_METHOD: CALL pops argc + 2 itself, and LOAD_ATTR
  with bit 0 of its arg set is the method load (NULL-or-method, self-or-
  attribute); LOAD_SUPER_ATTR takes super, the class and self off the
  stack (bit 0: the method form).
- FOR_ITER's jump names the END_FOR after the loop, and skips it at run
  time having popped the iterator; the compiler counts the jump as +1 and
  END_FOR as -2, which is what co_stacksize is computed from.
- RETURN_CONST ends a frame like RETURN_VALUE.
- LOAD_FAST_AND_CLEAR (inlined comprehensions) pushes a local's value or
  NULL: kind 'Z', which STORE_FAST and SWAP move like a value and nothing
  else consumes. kiln never resumes with one on the stack (kiln/_resume.py
  refuses it; kiln/_frames.py refuses a break inside such a comprehension).
"""
import dis
import functools
import sys

from . import _code_tables
from ._code_tables import (  # noqa: F401 - the interface, shared with 3.11 and 3.13
    RelativeJumps, call_transfer, code_positions, compiler_effect_with, encode_exception_table,
    entry_shape, exception_rows, inputs_with, localsplus_names, new_localsplus,
    parse_exception_table, pop_kinds, slot_names, JUMP_PAIRS_312_ON,
    CALL_PAIR_NULL_FIRST, attribute_312_on, binary_op_311_on, call_312_on, compare_args, copy_311_on,
    load_closure, make_function_with_flags, method_call_as_plain_311_on, method_load_as_attr_312_on,
    null_pair_with, swap_311_on)

assert sys.version_info[:2] == (3, 12), "kiln/_bytecode_tables.py imports the running version's module"

# The compiler writes a location entry per run of instructions at one
# location since 3.12 (3.11: per instruction).
encode_location_table = functools.partial(_code_tables.encode_location_table, runs=True)
table_fields = functools.partial(_code_tables.table_fields, runs=True)

OP = {name: op for name, op in dis.opmap.items() if op < 256}  # without the compiler's pseudo-ops
EXTENDED_ARG = OP["EXTENDED_ARG"]
CACHE = OP["CACHE"]
HAVE_ARGUMENT = dis.HAVE_ARGUMENT
Positions = dis.Positions
CACHES = tuple(dis._inline_cache_entries)  # per opcode; co_code shows them zeroed


def cache_entries(opcode):
    """Inline CACHE code units following `opcode` (dis's table)."""
    return CACHES[opcode]


# ---------------------------------------------------------------- jumps --


JUMP_OPS = frozenset(op for op in dis.hasjrel if op < 256)
UNCONDITIONAL_JUMPS = frozenset(OP[n] for n in ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"))
TERMINATORS = frozenset(OP[n] for n in ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"))
BLOCK_SETUPS = frozenset()  # (3.10's block stack: handlers are in the exception table)
block_transfer = None  # (3.10's)
assert JUMP_OPS == {OP[n] for pair in JUMP_PAIRS_312_ON for n in pair if n}, "a 3.12 jump without a family"


_JUMPS = RelativeJumps(cache_entries, JUMP_PAIRS_312_ON, OP)
BACKWARD_JUMPS = _JUMPS.backward_jumps
jump_variant, jump_target_offset, jump_arg = _JUMPS.variant, _JUMPS.target_offset, _JUMPS.arg
is_backward_target = _JUMPS.is_backward


# ------------------------------------------------- NULLs and calls --
#
# 3.12's virtual NULL slots are 3.11's without PRECALL: PUSH_NULL,
# LOAD_GLOBAL with bit 0 (NULL below the global), LOAD_ATTR and
# LOAD_SUPER_ATTR with bit 0 (NULL-or-method, self-or-attribute), consumed
# by CALL (argc + 2) or CALL_FUNCTION_EX. CALL itself turns (NULL, bound
# method) into (function, self), so after a method load the pair's kinds
# are dynamic ('M', 'S') as in 3.11.

LOAD_ATTR = OP["LOAD_ATTR"]
LOAD_SUPER_ATTR = OP["LOAD_SUPER_ATTR"]
CALL = OP["CALL"]
RESUME = OP["RESUME"]
KW_NAMES = OP["KW_NAMES"]
RETURN_GENERATOR = OP["RETURN_GENERATOR"]
MAKE_CELL = OP["MAKE_CELL"]
COPY_FREE_VARS = OP["COPY_FREE_VARS"]
LOAD_FAST = OP["LOAD_FAST"]
LOAD_FAST_AND_CLEAR = OP["LOAD_FAST_AND_CLEAR"]
STORE_FAST = OP["STORE_FAST"]
DELETE_FAST = OP["DELETE_FAST"]
LOCAL_OPS = frozenset(op for op in dis.haslocal if op < 256)  # arg indexes localsplus
FREE_OPS = frozenset(op for op in dis.hasfree if op < 256)    # so does this one
LOCAL_PAIRS = {}  # instructions naming two locals in one arg: 3.13's
# For kiln/_resume.py's liveness: the instructions that read a local
# (DELETE_FAST raises on an unbound one) and those that end its value.
LOCAL_READS = frozenset((LOAD_FAST, OP["LOAD_FAST_CHECK"], LOAD_FAST_AND_CLEAR, DELETE_FAST))
LOCAL_KILLS = frozenset((STORE_FAST, DELETE_FAST, LOAD_FAST_AND_CLEAR))
GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR
CO_VARARGS, CO_VARKEYWORDS, CO_NOFREE = 0x04, 0x08, 0x40
# How an arg names what dis shows (kiln/_instructions.py): a name's index
# shifted up past flag bits, by opname, and the compare operator's index
# shifted past the bits the specialized compares read.
NAME_ARG_SHIFTS = {"LOAD_GLOBAL": 1, "LOAD_ATTR": 1, "LOAD_SUPER_ATTR": 2}
COMPARE_ARG_SHIFT = 4


compiler_effect = compiler_effect_with(JUMP_OPS, RETURN_GENERATOR)


def runtime_transfer(opcode, arg, jump, shape):
    """The stack shape (tuple of kinds, bottom first) after `opcode` at run
    time, for the instructions whose slots are not plain values or that
    move slots around; None: a plain instruction (net effect per
    dis.stack_effect, pushing values)."""
    if opcode == LOAD_FAST_AND_CLEAR:
        return shape + ("Z",)
    if opcode == LOAD_ATTR:
        return pop_kinds(shape, 1, opcode) + (("M", "S") if arg & 1 else ("v",))
    if opcode == LOAD_SUPER_ATTR:
        return pop_kinds(shape, 3, opcode) + (("M", "S") if arg & 1 else ("v",))
    return call_transfer(OP, opcode, arg, shape)


# The method-pair kinds that meet at a merge point (kiln/_bytecode.py's
# stack_analysis joins them; compiler output never needs it): a resume
# function's prologue pushes (NULL, bound method) where a loop's back edge
# brings the original pair, ('M', 'S').
METHOD_PAIR_JOIN = {frozenset("NM"): "M", frozenset("vS"): "S"}


# How many stack slots an instruction takes off the stack: the rows 3.11
# and later share (kiln/_code_tables.py's INPUTS_311_ON, which says what
# they are for) and 3.12's own.
inputs = inputs_with({
    "BINARY_SLICE": 3, "STORE_SLICE": 4, "LOAD_SUPER_ATTR": 3, "CALL_INTRINSIC_1": 1,
    "FORMAT_VALUE": lambda a: 2 if a & 4 else 1, "LOAD_FAST_CHECK": 0,
    "POP_JUMP_IF_FALSE": 1, "POP_JUMP_IF_TRUE": 1, "POP_JUMP_IF_NONE": 1, "POP_JUMP_IF_NOT_NONE": 1,
}, OP)


# ------------------------------------------------ emitting calls --
# (kiln/_code_tables.py has the spellings 3.12 shares)

call = call_312_on
attribute = attribute_312_on
method_load_as_attr = method_load_as_attr_312_on(OP)
compare = compare_args()
CALL_PAIR = CALL_PAIR_NULL_FIRST
make_function = make_function_with_flags
closure_load = load_closure


def call_kw(n, names_const):
    """The same, the last len(names) arguments by keyword (names_const: the
    co_consts index of the names' tuple)."""
    return [("KW_NAMES", names_const), ("CALL", n)]


JUMP_IF_FALSE = "POP_JUMP_IF_FALSE"
BOOL_OPERAND = frozenset()  # (3.13: instructions that read a bool only)
# FOR_ITER's jump names an END_FOR that it skips: code kiln writes puts
# one there and the real target after it.
FOR_ITER_SKIPS = ("END_FOR",)

CALL_TAKES_NULL = True  # a plain call's callable has a NULL beside it (CALL_PAIR)
call_method = call  # one CALL takes (method, self) and (NULL, callable) alike
method_call_as_plain = method_call_as_plain_311_on
binary_op, copy, swap = binary_op_311_on, copy_311_on, swap_311_on
null_pair = null_pair_with(CALL_PAIR)

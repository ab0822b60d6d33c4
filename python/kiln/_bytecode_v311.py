"""CPython 3.11's bytecode facts, for kiln/_bytecode.py (through
kiln/_bytecode_tables.py, which names what every version module provides).

Traps this module encodes (3.11):
- Code units are 2 bytes (opcode, arg). An instruction is its EXTENDED_ARG
  prefixes, the opcode unit, then `dis._inline_cache_entries[op]` CACHE
  units. Jump offsets, exception-table ranges and location-table lengths
  all count the whole thing (prefixes and caches included).
- All jumps are relative (no absolute jumps), counted in code units from
  the unit after the jump's caches; direction is in the opcode
  (JUMP_FORWARD/JUMP_BACKWARD, POP_JUMP_FORWARD_IF_*/POP_JUMP_BACKWARD_IF_*),
  so moving an instruction across its target changes its opcode.
- The exception and location tables: kiln/_code_tables.py.
- NULL stack slots and the PRECALL/CALL accounting: see runtime_transfer.
- LOAD_FAST/STORE_FAST/DELETE_FAST and MAKE_CELL/LOAD_CLOSURE/LOAD_DEREF/
  STORE_DEREF all index one array, "localsplus" = varnames, then cells
  that are not arguments, then free variables (3.10 indexed cells/frees
  apart).
"""
import dis
import sys

from ._code_tables import (  # noqa: F401 - the interface, shared with 3.12 and 3.13
    RelativeJumps, call_transfer, code_positions, compiler_effect_with, encode_exception_table,
    encode_location_table, entry_shape, exception_rows, inputs_with, localsplus_names, new_localsplus,
    parse_exception_table, pop_kinds, slot_names, table_fields,
    CALL_PAIR_NULL_FIRST, binary_op_311_on, compare_args, copy_311_on, load_closure, make_function_with_flags,
    method_call_as_plain_311_on, null_pair_with, swap_311_on)

assert sys.version_info[:2] == (3, 11), "kiln/_bytecode_tables.py imports the running version's module"

OP = dis.opmap
EXTENDED_ARG = OP["EXTENDED_ARG"]
CACHE = OP["CACHE"]
HAVE_ARGUMENT = dis.HAVE_ARGUMENT
Positions = dis.Positions
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
# Jumps that never fall through.
UNCONDITIONAL_JUMPS = frozenset(OP[n] for n in ("JUMP_FORWARD", "JUMP_BACKWARD",
                                                "JUMP_BACKWARD_NO_INTERRUPT"))
# Instructions after which control never reaches the next instruction.
TERMINATORS = frozenset(OP[n] for n in ("RETURN_VALUE", "RAISE_VARARGS", "RERAISE"))
BLOCK_SETUPS = frozenset()  # (3.10's block stack: handlers are in the exception table)
block_transfer = None  # (3.10's)


_JUMPS = RelativeJumps(cache_entries, _JUMP_PAIRS_311, OP)
BACKWARD_JUMPS = _JUMPS.backward_jumps
jump_variant, jump_target_offset, jump_arg = _JUMPS.variant, _JUMPS.target_offset, _JUMPS.arg
is_backward_target = _JUMPS.is_backward


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

LOAD_METHOD = OP["LOAD_METHOD"]
PRECALL = OP["PRECALL"]
CALL = OP["CALL"]
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
LOCAL_PAIRS = {}  # instructions naming two locals in one arg: 3.13's
# For kiln/_resume.py's liveness: the instructions that read a local
# (DELETE_FAST raises on an unbound one) and those that end its value.
LOCAL_READS = frozenset((LOAD_FAST, DELETE_FAST))
LOCAL_KILLS = frozenset((STORE_FAST, DELETE_FAST))
GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR
CO_VARARGS, CO_VARKEYWORDS, CO_NOFREE = 0x04, 0x08, 0x40
# How an arg names what dis shows (kiln/_instructions.py): a name's index
# shifted up past flag bits, by opname, and the compare operator's index
# shifted past the bits the specialized compares read.
NAME_ARG_SHIFTS = {"LOAD_GLOBAL": 1}
COMPARE_ARG_SHIFT = 0


compiler_effect = compiler_effect_with(JUMP_OPS, RETURN_GENERATOR)


def runtime_transfer(opcode, arg, jump, shape):
    """The stack shape (tuple of kinds, bottom first) after `opcode` at run
    time, for the instructions whose slots are not plain values or that
    move slots around; None: a plain instruction (net effect per
    dis.stack_effect, pushing values)."""
    if opcode == LOAD_METHOD:
        return pop_kinds(shape, 1, opcode) + ("M", "S")
    if opcode == PRECALL:
        # (NULL, bound method) may become (function, self): dynamic from here
        base = len(shape) - arg - 2
        if base < 0:
            raise ValueError(f"PRECALL {arg} on a stack of {len(shape)}")
        return shape[:base] + ("M", "S") + shape[base + 2:]
    return call_transfer(OP, opcode, arg, shape)


# The method-pair kinds that meet at a merge point (kiln/_bytecode.py's
# stack_analysis joins them; compiler output never needs it): a resume
# function's prologue pushes (NULL, bound method) where a loop's back edge
# brings the original pair, ('M', 'S').
METHOD_PAIR_JOIN = {frozenset("NM"): "M", frozenset("vS"): "S"}


# How many stack slots an instruction takes off the stack: the rows 3.11
# and later share (kiln/_code_tables.py's INPUTS_311_ON, which says what
# they are for) and 3.11's own.
inputs = inputs_with({
    "UNARY_POSITIVE": 1, "FORMAT_VALUE": lambda a: 2 if a & 4 else 1, "LIST_TO_TUPLE": 1,
    "POP_JUMP_FORWARD_IF_FALSE": 1, "POP_JUMP_FORWARD_IF_TRUE": 1, "POP_JUMP_BACKWARD_IF_FALSE": 1,
    "POP_JUMP_BACKWARD_IF_TRUE": 1, "POP_JUMP_FORWARD_IF_NONE": 1, "POP_JUMP_FORWARD_IF_NOT_NONE": 1,
    "POP_JUMP_BACKWARD_IF_NONE": 1, "POP_JUMP_BACKWARD_IF_NOT_NONE": 1, "JUMP_IF_TRUE_OR_POP": 1,
    "JUMP_IF_FALSE_OR_POP": 1,
}, OP)


# ------------------------------------------------ emitting calls --
#
# What kiln/_frames.py and kiln/_resume.py write when they make bytecode
# of their own (a residual's calls, a resume function's call), as
# (opname, arg) lists: the spellings that differ between versions.

def call(n):
    """Call the callable under n arguments, (NULL, callable) or (method, self) below."""
    return [("PRECALL", n), ("CALL", n)]


def call_kw(n, names_const):
    """The same, the last len(names) arguments by keyword (names_const: the
    co_consts index of the names' tuple)."""
    return [("KW_NAMES", names_const), ("PRECALL", n), ("CALL", n)]


def attribute(name, method):
    """Load attribute co_names[name] off the top (method: as LOAD_METHOD's pair)."""
    return [("LOAD_METHOD" if method else "LOAD_ATTR", name)]


compare = compare_args()


def method_load_as_attr(opcode, arg):
    """For a method load: the plain attribute load of the same name, as
    (opname, arg); None for any other instruction."""
    return ("LOAD_ATTR", arg) if opcode == LOAD_METHOD else None


# The conditional jump kiln emits (the forward form of its family).
JUMP_IF_FALSE = "POP_JUMP_FORWARD_IF_FALSE"
BOOL_OPERAND = frozenset()  # (3.13: instructions that read a bool only)
# What FOR_ITER's exit jump skips at run time (kiln's code puts them
# there): nothing before 3.12.
FOR_ITER_SKIPS = ()
CALL_PAIR = CALL_PAIR_NULL_FIRST
make_function = make_function_with_flags
closure_load = load_closure

CALL_TAKES_NULL = True  # a plain call's callable has a NULL beside it (CALL_PAIR)
call_method = call  # one CALL takes (method, self) and (NULL, callable) alike
method_call_as_plain = method_call_as_plain_311_on
binary_op, copy, swap = binary_op_311_on, copy_311_on, swap_311_on
null_pair = null_pair_with(CALL_PAIR)

"""CPython 3.13's bytecode facts, for kiln/_bytecode.py (through
kiln/_bytecode_tables.py, which names what every version module provides).

What changed from 3.12 (kiln/_bytecode_v312.py; what holds from 3.11 on:
2-byte code units, inline CACHE units after an instruction, relative jumps
counted from the unit after the caches, one localsplus array, and the
exception and location tables of kiln/_code_tables.py, with 3.12's
location entries, one per run of instructions at one location):
- New opcode numbers; dis._inline_cache_entries is a dict by name.
  JUMP_BACKWARD and POP_JUMP_IF_* have a cache unit now and JUMP_FORWARD
  none, so turning a jump around changes its size (kiln/_bytecode.py's
  _layout lays out again when it does).
- The callable is below its NULL now. LOAD_GLOBAL with bit 0 pushes
  (global, NULL); PUSH_NULL follows the callable; LOAD_ATTR and
  LOAD_SUPER_ATTR with bit 0 push (method, self) or (attribute, NULL);
  CALL pops [callable, self_or_NULL, args...], CALL_KW (KW_NAMES is gone)
  those and the names' tuple on top, CALL_FUNCTION_EX [func, NULL, args,
  kwargs?]. The two kinds of a pair only known at run time: 'M' the lower
  slot (method or attribute: never NULL), 'S' the upper (self or NULL):
  the order of 3.11's pair, its NULL at the other end.
- LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST and STORE_FAST_STORE_FAST
  (LOCAL_PAIRS) name two locals in one arg: the first in arg >> 4, the
  second in arg & 15, done in that order. The compiler fuses two plain
  instructions only when both indices are below 16, so a new layout can
  push one out of reach: see kiln/_bytecode.relayout_locals. LOCAL_OPS are
  the instructions whose arg is one local (dis.haslocal less the pairs);
  a closure's cell is pushed by LOAD_FAST (LOAD_CLOSURE is a pseudo-op).
- FOR_ITER's jump names the END_FOR after the loop; exhausted, it pops the
  iterator and skips that END_FOR AND the POP_TOP after it (3.12's END_FOR
  popped two and was skipped alone). The compiler counts the jump +1,
  END_FOR -1, POP_TOP -1 (dis.stack_effect), which co_stacksize is
  computed from: the depth at END_FOR is the loop's plus the next value.
- Also new, all plain values to stack_analysis: TO_BOOL before a
  conditional jump; COMPARE_OP's arg holds the comparison in arg >> 5 and
  a to-bool flag in bit 4 (the low bits are a mask the specialized forms
  read); FORMAT_SIMPLE / FORMAT_WITH_SPEC / CONVERT_VALUE for f-strings;
  MAKE_FUNCTION takes only the code, SET_FUNCTION_ATTRIBUTE adds defaults,
  a closure and the rest one by one.
- As in 3.12: RETURN_CONST ends a frame; LOAD_FAST_AND_CLEAR pushes kind
  'Z' (a local's value or NULL). STORE_FAST_MAYBE_NULL is a pseudo-op.
- co_code never holds a pseudo-op (>= 256 in dis.opmap), a specialized or
  INSTRUMENTED_* form or ENTER_EXECUTOR: CPython hands out co_code
  deoptimized. WITH_EXCEPT_START's number is HAVE_ARGUMENT yet it takes no
  arg (dis.hasarg): decode gives it arg 0, which round-trips.
"""
import dis
import functools
import sys

from . import _code_tables
from ._code_tables import (  # noqa: F401 - the interface, shared with 3.11 and 3.12
    RelativeJumps, call_transfer, code_positions, compiler_effect_with, encode_exception_table,
    entry_shape, exception_rows, inputs_with, localsplus_names, new_localsplus,
    parse_exception_table, pop_kinds, slot_names, JUMP_PAIRS_312_ON,
    attribute_312_on, binary_op_311_on, call_312_on, compare_args, copy_311_on, method_call_as_plain_311_on,
    method_load_as_attr_312_on, null_pair_with, swap_311_on)

assert sys.version_info[:2] == (3, 13), "kiln/_bytecode_tables.py imports the running version's module"

# The compiler writes a location entry per run of instructions at one
# location since 3.12 (3.11: per instruction).
encode_location_table = functools.partial(_code_tables.encode_location_table, runs=True)
table_fields = functools.partial(_code_tables.table_fields, runs=True)

OP = {name: op for name, op in dis.opmap.items() if op < 256}  # without the compiler's pseudo-ops
EXTENDED_ARG = OP["EXTENDED_ARG"]
CACHE = OP["CACHE"]
HAVE_ARGUMENT = dis.HAVE_ARGUMENT
Positions = dis.Positions
# Per opcode; co_code shows them zeroed. 3.13's dis keys them by name.
CACHES = tuple(dis._inline_cache_entries.get(dis.opname[op], 0) for op in range(256))


def cache_entries(opcode):
    """Inline CACHE code units following `opcode` (dis's table)."""
    return CACHES[opcode]


# ---------------------------------------------------------------- jumps --


JUMP_OPS = frozenset(op for op in dis.hasjrel if op < 256)
UNCONDITIONAL_JUMPS = frozenset(OP[n] for n in ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"))
TERMINATORS = frozenset(OP[n] for n in ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"))
BLOCK_SETUPS = frozenset()  # (3.10's block stack: handlers are in the exception table)
block_transfer = None  # (3.10's)
assert not dis.hasjabs, "3.13 has an absolute jump"
assert JUMP_OPS == {OP[n] for pair in JUMP_PAIRS_312_ON for n in pair if n}, "a 3.13 jump without a family"


_JUMPS = RelativeJumps(cache_entries, JUMP_PAIRS_312_ON, OP)
BACKWARD_JUMPS = _JUMPS.backward_jumps
jump_variant, jump_target_offset, jump_arg = _JUMPS.variant, _JUMPS.target_offset, _JUMPS.arg
is_backward_target = _JUMPS.is_backward


# ------------------------------------------------------ locals and cells --

RESUME = OP["RESUME"]
RETURN_GENERATOR = OP["RETURN_GENERATOR"]
MAKE_CELL = OP["MAKE_CELL"]
COPY_FREE_VARS = OP["COPY_FREE_VARS"]
LOAD_FAST = OP["LOAD_FAST"]
LOAD_FAST_AND_CLEAR = OP["LOAD_FAST_AND_CLEAR"]
STORE_FAST = OP["STORE_FAST"]
DELETE_FAST = OP["DELETE_FAST"]

_LOCAL_NAMES = {dis.opname[op] for op in dis.haslocal if op < 256}
# {pair opcode: (first opcode, second opcode)}, each pair named
# <first>_<second>; kiln/_bytecode.py reads and writes their args.
LOCAL_PAIRS = {OP[n]: (OP[a], OP[n[len(a) + 1:]])
               for n in _LOCAL_NAMES for a in _LOCAL_NAMES
               if n.startswith(a + "_") and n[len(a) + 1:] in _LOCAL_NAMES}
assert sorted(dis.opname[op] for op in LOCAL_PAIRS) == \
    ["LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"], LOCAL_PAIRS
# kiln/_bytecode.py lays a pair out as its two halves without caches.
assert not any(CACHES[op] for pair in LOCAL_PAIRS.items() for op in (pair[0], *pair[1]))
LOCAL_OPS = frozenset(op for op in dis.haslocal if op < 256) - set(LOCAL_PAIRS)  # arg: one localsplus index
FREE_OPS = frozenset(op for op in dis.hasfree if op < 256)                      # so is this one
GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR
CO_VARARGS, CO_VARKEYWORDS, CO_NOFREE = 0x04, 0x08, 0x40
# How an arg names what dis shows (kiln/_instructions.py): a name's index
# shifted up past flag bits, by opname, and the compare operator's index
# shifted past the bits the specialized compares read.
NAME_ARG_SHIFTS = {"LOAD_GLOBAL": 1, "LOAD_ATTR": 1, "LOAD_SUPER_ATTR": 2}
COMPARE_ARG_SHIFT = 5
# For kiln/_resume.py's liveness: the instructions that read a local
# (DELETE_FAST raises on an unbound one) and those that end its value; a
# pair (LOCAL_PAIRS) is read as its two halves.
LOCAL_READS = frozenset((LOAD_FAST, OP["LOAD_FAST_CHECK"], LOAD_FAST_AND_CLEAR, DELETE_FAST))
LOCAL_KILLS = frozenset((STORE_FAST, DELETE_FAST, LOAD_FAST_AND_CLEAR))


# ------------------------------------------------- NULLs and calls --
#
# 3.13's NULL slots (see the module docstring for the order): PUSH_NULL,
# LOAD_GLOBAL with bit 0 (NULL above the global), LOAD_ATTR and
# LOAD_SUPER_ATTR with bit 0 (a pair: 'M' below, 'S' above), consumed by
# CALL (argc + 2), CALL_KW (argc + 3) or CALL_FUNCTION_EX. The compiler's
# accounting is the run time's (no PRECALL).

LOAD_ATTR = OP["LOAD_ATTR"]
LOAD_SUPER_ATTR = OP["LOAD_SUPER_ATTR"]

# RETURN_GENERATOR counts +1 in 3.13's dis already; compiler_effect_with
# says so for every version.
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
    return call_transfer(OP, opcode, arg, shape, global_pair=("v", "N"))


# The method-pair kinds that meet at a merge point (kiln/_bytecode.py's
# stack_analysis joins them): a resume function's prologue pushes (bound
# attribute, NULL) where a loop's back edge brings the original pair,
# ('M', 'S'): the NULL joins the upper slot here (3.11's joined the lower).
METHOD_PAIR_JOIN = {frozenset("vM"): "M", frozenset("NS"): "S"}


# How many stack slots an instruction takes off the stack: the rows 3.11
# and later share (kiln/_code_tables.py's INPUTS_311_ON, which says what
# they are for) and 3.13's own.
inputs = inputs_with({
    "CALL_KW": lambda a: a + 3, "BINARY_SLICE": 3, "STORE_SLICE": 4, "LOAD_SUPER_ATTR": 3,
    "CALL_INTRINSIC_1": 1, "TO_BOOL": 1, "FORMAT_SIMPLE": 1, "FORMAT_WITH_SPEC": 2, "CONVERT_VALUE": 1,
    "LOAD_FAST_CHECK": 0, "LOAD_FAST_LOAD_FAST": 0, "STORE_FAST_LOAD_FAST": 1, "STORE_FAST_STORE_FAST": 2,
    "POP_JUMP_IF_FALSE": 1, "POP_JUMP_IF_TRUE": 1, "POP_JUMP_IF_NONE": 1, "POP_JUMP_IF_NOT_NONE": 1,
}, OP)


# ------------------------------------------------ emitting calls --
# (kiln/_code_tables.py has the spellings 3.13 shares)

# 3.13 stacks the NULL of a plain call above the callable.
CALL_PAIR = ("v", "N")
CALL = OP["CALL"]
KW_NAMES = None  # the keyword names are a constant on the stack (CALL_KW)


call = call_312_on
attribute = attribute_312_on
method_load_as_attr = method_load_as_attr_312_on(OP)
compare = compare_args()


def call_kw(n, names_const):
    """Call the callable under n arguments, the last len(names) of them by
    keyword (names_const: the co_consts index of the names' tuple)."""
    return [("LOAD_CONST", names_const), ("CALL_KW", n)]


def make_function(flags, qualname=None):
    """A function from the code on top and, below it, the attributes
    `flags` names (1 defaults, 2 keyword defaults, 4 annotations, 8 the
    closure, in that order from the bottom): 3.13 makes it from the code
    alone and sets each attribute after, the top one (the highest bit)
    first."""
    return [("MAKE_FUNCTION", None)] + [("SET_FUNCTION_ATTRIBUTE", bit) for bit in (8, 4, 2, 1) if flags & bit]


def closure_load(slot):
    """Push the cell in localsplus `slot`, for a closure tuple (3.13's
    LOAD_CLOSURE is the compiler's name for this LOAD_FAST)."""
    return [("LOAD_FAST", slot)]


JUMP_IF_FALSE = "POP_JUMP_IF_FALSE"
# The instructions that read a bool only: the compiler puts TO_BOOL (or
# COMPARE_OP's bool bit) before them; so does kiln, which resumes at one
# with the operand the trace had (a tensor, say).
BOOL_OPERAND = frozenset(("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "UNARY_NOT"))
# FOR_ITER's exit skips the END_FOR its jump names and the POP_TOP after it.
FOR_ITER_SKIPS = ("END_FOR", "POP_TOP")

CALL_TAKES_NULL = True  # a plain call's callable has a NULL beside it (CALL_PAIR)
call_method = call  # one CALL takes (method, self) and (NULL, callable) alike
method_call_as_plain = method_call_as_plain_311_on
binary_op, copy, swap = binary_op_311_on, copy_311_on, swap_311_on
null_pair = null_pair_with(CALL_PAIR)

"""CPython 3.10's bytecode facts, for kiln/_bytecode.py (through
kiln/_bytecode_tables.py, which names what every version module provides).

Traps this module encodes (3.10):
- Code units are 2 bytes (opcode, arg) with no inline caches. Jump args
  count code units (3.9's counted bytes); the line table still counts
  bytes. A no-arg opcode may carry a stale arg byte (see decode).
- Two jump models side by side. Absolute jumps (JUMP_ABSOLUTE,
  POP_JUMP_IF_*, JUMP_IF_*_OR_POP, JUMP_IF_NOT_EXC_MATCH) hold the target's
  code-unit index and go either way, forward included (the compiler's
  `break` is a forward JUMP_ABSOLUTE). Relative ones (JUMP_FORWARD,
  FOR_ITER, SETUP_*) count from the next unit and only go forward: the
  opcode never says the direction, and only JUMP_FORWARD has a way back
  (JUMP_ABSOLUTE). An absolute jump's arg depends on where its target
  lands, so a prefix grown anywhere before the target changes it.
- No exception table: handlers live on the frame's block stack.
  SETUP_FINALLY/SETUP_WITH/SETUP_ASYNC_WITH push a block whose handler is
  their jump target, POP_BLOCK pops it, and a raise enters the handler with
  the stack cut to the block's level plus 6 values (tb, value, type of the
  exception and of the one it replaces). The compiler's depth pass follows
  a SETUP_*'s target as a jump with dis.stack_effect(op, jump=True), which
  is exactly that shape; decode therefore gives no ExcEntry rows and the
  handler edges come from the SETUP_* instructions themselves.
- co_linetable is (bytecode delta in bytes, signed line delta) pairs, one
  per run of instructions on one line, -128 = no line (which does not move
  the running line); see encode_location_table for the splitting rules.
  Lines only: no columns, no co_positions().
- Locals and cells are two index spaces: LOAD_FAST & co. index co_varnames,
  LOAD_DEREF & co. index cellvars + freevars. The frame's array is
  varnames, ALL cellvars (a cell argument has its own cell slot; the
  frame copies the argument in) then freevars: see Localsplus.
- Generators have no RETURN_GENERATOR: the frame starts with the first
  send()'s value on the stack, which GEN_START pops (entry_shape).
- No NULL slots except LOAD_METHOD's: it pushes (NULL, attribute) or
  (method, self), consumed by CALL_METHOD (argc + 2 slots).
"""
import collections
import dis
import sys

assert sys.version_info[:2] == (3, 10), "kiln/_bytecode_tables.py imports the running version's module"

OP = dis.opmap
EXTENDED_ARG = OP["EXTENDED_ARG"]
CACHE = None  # no CACHE opcode: compares unequal to every opcode
HAVE_ARGUMENT = dis.HAVE_ARGUMENT
CACHES = (0,) * 256


def cache_entries(opcode):
    """Inline CACHE code units following `opcode`: none before 3.11."""
    return 0


# ---------------------------------------------------------------- jumps --

ABSOLUTE_JUMPS = frozenset(dis.hasjabs)
JUMP_OPS = frozenset(dis.hasjrel) | ABSOLUTE_JUMPS
# Opcodes whose arg counts backward: none (see the module docstring), so
# _bytecode._layout asks jump_variant only about targets behind a jump.
BACKWARD_JUMPS = frozenset()
UNCONDITIONAL_JUMPS = frozenset(OP[n] for n in ("JUMP_FORWARD", "JUMP_ABSOLUTE"))
TERMINATORS = frozenset(OP[n] for n in ("RETURN_VALUE", "RAISE_VARARGS", "RERAISE"))
JUMP_FORWARD = OP["JUMP_FORWARD"]
# The instructions that push a handler on the frame's block stack.
BLOCK_SETUPS = frozenset(OP[n] for n in ("SETUP_FINALLY", "SETUP_WITH", "SETUP_ASYNC_WITH"))


# ------------------------------------------------------------ block stack --
#
# A frame's block stack, as kiln/_bytecode.block_stacks and the frontend
# follow it: a tuple of blocks, bottom first, each (kind, handler, level):
#   'F'  a try's handler (SETUP_FINALLY): an exception cuts the stack to
#        `level` and enters `handler` (the SETUP's jump target);
#   'W'  the same for a with (SETUP_WITH; its __exit__ is the slot under
#        `level`); CPython pushes it as an 'F' block;
#   'E'  the handler running (CPython's EXCEPT_HANDLER, pushed on entering
#        `handler`, popped by POP_EXCEPT): an exception leaving it first
#        restores the exception it replaced, from the three slots above
#        `level`, then goes to the next block down.
# `handler` is whatever the caller names a jump target by.

def block_transfer(opcode, blocks, depth, handler):
    """The block stack after `opcode` (`depth`: the stack depth before it;
    `handler`: its jump target) on (fall-through, jump); None: the
    instruction leaves the block stack as it is. ValueError where the
    compiler's pairing does not hold."""
    if opcode in BLOCK_SETUPS:
        # SETUP_WITH replaces the manager with its __exit__ (the level counts
        # it); SETUP_ASYNC_WITH sets up after popping the awaited __aenter__.
        level = depth - 1 if opcode == _SETUP_ASYNC_WITH else depth
        kind = "F" if opcode == _SETUP_FINALLY else "W"
        return blocks + ((kind, handler, level),), blocks + (("E", handler, level),)
    if opcode == _POP_BLOCK or opcode == _POP_EXCEPT:
        want = ("E",) if opcode == _POP_EXCEPT else ("F", "W")
        if not blocks or blocks[-1][0] not in want:
            raise ValueError(f"{dis.opname[opcode]} with no {' or '.join(want)} block on top ({blocks})")
        return blocks[:-1], None
    return None


_SETUP_FINALLY, _SETUP_ASYNC_WITH = OP["SETUP_FINALLY"], OP["SETUP_ASYNC_WITH"]
_POP_BLOCK, _POP_EXCEPT = OP["POP_BLOCK"], OP["POP_EXCEPT"]
JUMP_ABSOLUTE = OP["JUMP_ABSOLUTE"]


def jump_variant(opcode, backward):
    """The opcode that reaches a target in the given direction: `opcode`
    itself when it can (every absolute jump; relative ones forward),
    JUMP_ABSOLUTE for a JUMP_FORWARD whose target is behind it; ValueError
    for the other relative jumps, which only go forward."""
    if opcode in ABSOLUTE_JUMPS or not backward:
        return opcode
    if opcode == JUMP_FORWARD:
        return JUMP_ABSOLUTE
    raise ValueError(f"{dis.opname[opcode]} cannot jump backward")


def jump_target_offset(opcode_offset, opcode, arg):
    """Byte offset a jump at `opcode_offset` (the opcode unit, after any
    EXTENDED_ARG) goes to."""
    return 2 * arg if opcode in ABSOLUTE_JUMPS else opcode_offset + 2 + 2 * arg


def jump_arg(opcode_offset, opcode, target_offset):
    """Inverse of jump_target_offset (None: a relative jump to a target
    behind it)."""
    if opcode in ABSOLUTE_JUMPS:
        return target_offset // 2
    delta = target_offset - (opcode_offset + 2)
    return None if delta < 0 else delta // 2


def is_backward_target(opcode_offset, opcode, target_offset):
    return target_offset < opcode_offset + 2


# ------------------------------------------------------- tables --

Positions = collections.namedtuple("Positions", "lineno end_lineno col_offset end_col_offset",
                                   defaults=(None, None, None))
_NO_LINE = Positions(None)


def code_positions(code):
    """One Positions per code unit (lineno only: 3.10 has no columns)."""
    out = [_NO_LINE] * (len(code.co_code) // 2)
    for start, end, line in code.co_lines():
        if line is not None:
            out[start // 2:end // 2] = [Positions(line)] * ((end - start) // 2)
    return out


def parse_exception_table(raw):
    """3.10 has no exception table (handlers are SETUP_* jump targets)."""
    if raw:
        raise ValueError("CPython 3.10 code has no exception table")
    return []


def encode_exception_table(entries):
    if entries:
        raise ValueError("CPython 3.10 has no exception table: a handler is the target of a "
                         "SETUP_FINALLY/SETUP_WITH/SETUP_ASYNC_WITH, covering up to its POP_BLOCK")
    return b""


def exception_rows(code):
    return []


def table_fields(exc_rows, location_items, firstlineno):
    """The code.replace fields for the tables: co_linetable only (there is
    no co_exceptiontable; encode_exception_table refuses any row)."""
    encode_exception_table(exc_rows)
    return {"co_linetable": encode_location_table(location_items, firstlineno)}


def encode_location_table(items, firstlineno):
    """`items`: (size in code units, Positions or None) per instruction.
    Mirrors 3.10 compile.c (assemble_lnotab / assemble_line_range) so that
    compiler output round-trips byte for byte: one pair per run of
    instructions on one line, written when the line changes; a line delta
    beyond +-127 first goes out in (0, +-127) pairs, a run longer than 254
    bytes in (254, ldelta) then (254, 0) pairs (-128 throughout for a run
    with no line)."""
    out = bytearray()
    prev = firstlineno  # the running line: a run with no line leaves it
    run_line, run_start, offset = firstlineno, 0, 0
    for size, pos in items:
        line = -1 if pos is None or pos.lineno is None else pos.lineno
        if line != run_line:
            prev = _line_run(out, 2 * (offset - run_start), run_line, prev)
            run_line, run_start = line, offset
        offset += size
    _line_run(out, 2 * (offset - run_start), run_line, prev)
    return bytes(out)


def _line_run(out, bdelta, line, prev):
    """Write the pairs of a run of `bdelta` bytes on `line` (-1: none);
    return the running line after it."""
    if bdelta == 0:  # before the first instruction: nothing to write, nothing moves
        return prev
    if line < 0:
        ldelta = -128
    else:
        ldelta, prev = line - prev, line
        while ldelta > 127:
            out += b"\x00\x7f"
            ldelta -= 127
        while ldelta < -127:
            out += b"\x00\x81"
            ldelta += 127
    while bdelta > 254:
        out += bytes((254, ldelta & 0xFF))
        ldelta = -128 if line < 0 else 0
        bdelta -= 254
    out += bytes((bdelta, ldelta & 0xFF))
    return prev


# ---------------------------------------------------- stack accounting --

GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR
CO_VARARGS, CO_VARKEYWORDS, CO_NOFREE = 0x04, 0x08, 0x40
# How an arg names what dis shows (kiln/_instructions.py): a name's index
# shifted up past flag bits, by opname, and the compare operator's index
# shifted past the bits the specialized compares read.
NAME_ARG_SHIFTS = {}
COMPARE_ARG_SHIFT = 0


def compiler_effect(opcode, arg, jump):
    """The compiler's stack effect (dis.stack_effect; a jump's depends on
    whether it is taken, a SETUP_*'s taken edge is its handler)."""
    if opcode in JUMP_OPS:
        return dis.stack_effect(opcode, arg, jump=jump)
    return dis.stack_effect(opcode, arg)


def entry_shape(code):
    """The stack at the first instruction: a generator's frame starts with
    the value of the first send() (None) pushed, which GEN_START pops; the
    compiler's depth pass starts such code at depth 1."""
    return ("v",) if code.co_flags & GENERATOR_FLAGS else ()


GEN_START = OP["GEN_START"]
LOAD_METHOD = OP["LOAD_METHOD"]
CALL_METHOD = OP["CALL_METHOD"]
CALL_FUNCTION = OP["CALL_FUNCTION"]
CALL_FUNCTION_KW = OP["CALL_FUNCTION_KW"]
CALL_FUNCTION_EX = OP["CALL_FUNCTION_EX"]
DUP_TOP, DUP_TOP_TWO = OP["DUP_TOP"], OP["DUP_TOP_TWO"]
ROT_TWO, ROT_THREE, ROT_FOUR, ROT_N = OP["ROT_TWO"], OP["ROT_THREE"], OP["ROT_FOUR"], OP["ROT_N"]
_ROT_DEPTH = {ROT_TWO: 2, ROT_THREE: 3, ROT_FOUR: 4}


def runtime_transfer(opcode, arg, jump, shape):
    """The stack shape after `opcode` for the instructions that make or
    consume a method pair or move slots around; None: a plain instruction
    (net effect per dis.stack_effect, pushing values). The compiler's
    accounting is the run time's on 3.10 (CALL_METHOD argc: -argc-1)."""
    if opcode == LOAD_METHOD:
        return _pop(shape, 1, opcode) + ("M", "S")
    if opcode == CALL_METHOD:
        return _pop(shape, arg + 2, opcode) + ("v",)
    if opcode == DUP_TOP:
        return shape + shape[-1:]
    if opcode == DUP_TOP_TWO:
        return shape + shape[-2:]
    n = arg if opcode == ROT_N else _ROT_DEPTH.get(opcode)
    if n:  # the top slot moves down n - 1 places
        if n > len(shape):
            raise ValueError(f"{dis.opname[opcode]} {n} on a stack of {len(shape)}")
        k = len(shape) - n
        return shape[:k] + shape[-1:] + shape[k:-1]
    return None


# The method-pair kinds that meet at a merge point (kiln/_bytecode.py's
# stack_analysis joins them): 3.11's. A 3.10 resume prologue pushes its
# pairs with LOAD_METHOD itself (null_pair), so they are 'M', 'S' already.
METHOD_PAIR_JOIN = {frozenset("NM"): "M", frozenset("vS"): "S"}


def _pop(shape, n, opcode):
    if n > len(shape):
        raise ValueError(f"{dis.opname[opcode]} pops {n} from a stack of {len(shape)}")
    return shape[:len(shape) - n]


# ------------------------------------------------------ locals and cells --

LOAD_FAST = OP["LOAD_FAST"]
STORE_FAST = OP["STORE_FAST"]
DELETE_FAST = OP["DELETE_FAST"]
LOCAL_OPS = frozenset(dis.haslocal)  # arg indexes co_varnames
FREE_OPS = frozenset(dis.hasfree)    # arg indexes co_cellvars + co_freevars
LOCAL_PAIRS = {}  # instructions naming two locals in one arg: 3.13's
# 3.10 has no such instructions: cells are made and free variables copied
# by the frame's setup in C, so code has no prologue before its first line.
RESUME = MAKE_CELL = COPY_FREE_VARS = None


class Localsplus(list):
    """The frame's slot names: varnames, then every cellvar, then the
    freevars. `nlocals` is where the cell/free index space starts (what
    FREE_OPS' arg 0 names); two layouts are equal only with the same
    boundary (the names alone do not say where it is)."""
    __slots__ = ("nlocals",)

    def __init__(self, names, nlocals):
        super().__init__(names)
        self.nlocals = nlocals

    def __eq__(self, other):
        return list.__eq__(self, other) and self.nlocals == getattr(other, "nlocals", None)

    def __ne__(self, other):
        return not self == other

    __hash__ = None

    def __repr__(self):
        return f"Localsplus({list(self)!r}, nlocals={self.nlocals})"


def localsplus_names(code):
    return new_localsplus(code.co_varnames, code.co_cellvars, code.co_freevars)


def new_localsplus(varnames, cellvars, freevars):
    return Localsplus(list(varnames) + list(cellvars) + list(freevars), len(varnames))


def slot_names(layout, opcode):
    """The names a LOCAL_OPS or FREE_OPS `opcode`'s arg indexes, in order."""
    return layout[:layout.nlocals] if opcode in LOCAL_OPS else layout[layout.nlocals:]


# How many stack slots an instruction takes off the stack (see
# _code_tables.INPUTS_311_ON). SETUP_WITH is left out: resuming after it
# needs its block on the block stack, which only the instruction makes.
_BINARY = [n for n in OP if n.startswith(("BINARY_", "INPLACE_"))]
_UNARY = [n for n in OP if n.startswith("UNARY_")]
_INPUTS_310 = {
    "CALL_FUNCTION": lambda a: a + 1, "CALL_FUNCTION_KW": lambda a: a + 2,
    "CALL_FUNCTION_EX": lambda a: 2 + (a & 1), "CALL_METHOD": lambda a: a + 2,
    **{n: 2 for n in _BINARY}, **{n: 1 for n in _UNARY},
    "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2, "COMPARE_OP": 2, "IS_OP": 2, "CONTAINS_OP": 2,
    "LOAD_ATTR": 1, "STORE_ATTR": 2, "DELETE_ATTR": 1, "GET_ITER": 1, "FOR_ITER": 1,
    "UNPACK_SEQUENCE": 1, "UNPACK_EX": 1, "BUILD_LIST": lambda a: a, "BUILD_TUPLE": lambda a: a,
    "BUILD_SET": lambda a: a, "BUILD_MAP": lambda a: 2 * a, "BUILD_STRING": lambda a: a,
    "BUILD_SLICE": lambda a: a, "BUILD_CONST_KEY_MAP": lambda a: a + 1,
    "FORMAT_VALUE": lambda a: 2 if a & 4 else 1, "LOAD_GLOBAL": 0, "LOAD_FAST": 0, "LOAD_CONST": 0,
    "LOAD_DEREF": 0, "STORE_FAST": 1, "STORE_GLOBAL": 1, "POP_TOP": 1, "LIST_TO_TUPLE": 1,
    # IMPORT_FROM reads the module under it and pushes it back with the name.
    "IMPORT_NAME": 2, "IMPORT_FROM": 1, "LOAD_ASSERTION_ERROR": 0,
    "POP_JUMP_IF_FALSE": 1, "POP_JUMP_IF_TRUE": 1, "JUMP_IF_TRUE_OR_POP": 1, "JUMP_IF_FALSE_OR_POP": 1,
}
assert set(_INPUTS_310) <= set(OP), sorted(set(_INPUTS_310) - set(OP))


def inputs(opname, arg):
    """The slots `opname` takes off the stack, or None (not in the table)."""
    n = _INPUTS_310.get(opname)
    return n(arg) if callable(n) else n


# ------------------------------------------------ emitting calls --
#
# What kiln/_frames.py and kiln/_resume.py write when they make bytecode
# of their own, as (opname, arg) lists: 3.10 has no NULL beside a plain
# call's callable (CALL_FUNCTION, CALL_FUNCTION_KW with the names' tuple on
# top, CALL_FUNCTION_EX), no PUSH_NULL, COPY or SWAP, and a BINARY_* or
# INPLACE_* opcode per operator.

CALL = CALL_FUNCTION
KW_NAMES = None  # the keyword names are a constant on the stack (CALL_FUNCTION_KW)
CALL_TAKES_NULL = False  # a plain call has the callable alone under its arguments
# How the resume convention passes a method pair ('M', 'S'): as a NULL and
# the callable (3.11's order), which a 3.10 prologue turns back into
# LOAD_METHOD's own pair (null_pair).
CALL_PAIR = ("N", "v")
JUMP_IF_FALSE = "POP_JUMP_IF_FALSE"
BOOL_OPERAND = frozenset()
FOR_ITER_SKIPS = ()
LOCAL_READS = frozenset((LOAD_FAST, DELETE_FAST))
LOCAL_KILLS = frozenset((STORE_FAST, DELETE_FAST))


def call(n):
    """Call the callable under n arguments."""
    return [("CALL_FUNCTION", n)]


def call_method(n):
    """Call LOAD_METHOD's pair under n arguments."""
    return [("CALL_METHOD", n)]


def call_kw(n, names_const):
    """The same, the last len(names) arguments by keyword (names_const: the
    co_consts index of the names' tuple)."""
    return [("LOAD_CONST", names_const), ("CALL_FUNCTION_KW", n)]


def attribute(name, method):
    """Load attribute co_names[name] off the top (method: as LOAD_METHOD's pair)."""
    return [("LOAD_METHOD" if method else "LOAD_ATTR", name)]


def compare(index):
    """COMPARE_OP's arg for dis.cmp_op[index]: the index itself on 3.10."""
    return index


def method_load_as_attr(opcode, arg):
    """For a method load: the plain attribute load of the same name, as
    (opname, arg); None for any other instruction."""
    return ("LOAD_ATTR", arg) if opcode == LOAD_METHOD else None


def method_call_as_plain(opcode, arg):
    """CALL_METHOD once its pair is one callable (method_load_as_attr):
    CALL_FUNCTION; None for any other instruction."""
    return ("CALL_FUNCTION", arg) if opcode == CALL_METHOD else None


def make_function(flags, qualname):
    """A function from the code on top and, below it, the attributes
    `flags` names (1 defaults, 2 keyword defaults, 4 annotations, 8 the
    closure, in that order from the bottom); `qualname`: the co_consts
    index of its __qualname__, which 3.10's MAKE_FUNCTION takes from the
    stack (its code object has none)."""
    return [("LOAD_CONST", qualname), ("MAKE_FUNCTION", flags)]


def closure_load(slot):
    """Push the cell that FREE_OPS' arg `slot` names (cells, then free
    variables: kiln/_bytecode.free_slot), for a closure tuple."""
    return [("LOAD_CLOSURE", slot)]


_NB_NAMES = ("ADD", "AND", "FLOOR_DIVIDE", "LSHIFT", "MATRIX_MULTIPLY", "MULTIPLY", "MODULO", "OR", "POWER",
             "RSHIFT", "SUBTRACT", "TRUE_DIVIDE", "XOR")  # by 3.11's NB_* index (BINARY_OP's arg)


def binary_op(nb, inplace):
    """The operator 3.11's BINARY_OP `nb` names (`inplace`: its augmented
    assignment)."""
    return [(("INPLACE_" if inplace else "BINARY_") + _NB_NAMES[nb], None)]


def copy(n):
    """Push a copy of the n-th value from the top (3.11's COPY n): bring it
    to the top by turning the n top values round (n - 1 ROT_Ns), copy it,
    and sink the copy it came from back in place."""
    if n == 1:
        return [("DUP_TOP", None)]
    if n == 2:
        return [("DUP_TOP_TWO", None), ("POP_TOP", None)]
    return [("ROT_N", n)] * (n - 1) + [("DUP_TOP", None), ("ROT_N", n + 1)]


def swap(n):
    """Exchange the top value and the n-th (3.11's SWAP n): the top sinks
    n - 1 places, then the value it passed rises to the top (the n - 1 top
    values turned round n - 2 times)."""
    if n == 2:
        return [("ROT_TWO", None)]
    return [("ROT_N", n)] + [("ROT_N", n - 1)] * (n - 2)


class Held:
    """One value held in a slot, for null_pair: LOAD_METHOD of `value` on
    it finds a data descriptor on the type (no method), so it pushes NULL
    and the value, as LOAD_METHOD of a plain attribute does."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


# (an upper-case name: kiln/_bytecode_tables.py passes those on; the
# frontend reads the pair back as KBC's, kiln/_frontend_opcodes.py)
NULL_PAIR_HOLDER = Held


def null_pair(load, const, name):
    """Push the pair LOAD_METHOD leaves for a plain attribute (NULL, then
    the callable that `load` pushes): 3.10 has no PUSH_NULL, and only
    LOAD_METHOD makes a NULL. `const(value)` and `name(str)` give the
    co_consts and co_names index of what it needs."""
    return [("LOAD_CONST", const(Held))] + load + [("CALL_FUNCTION", 1), ("LOAD_METHOD", name("value"))]

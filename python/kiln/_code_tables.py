"""The exception table (co_exceptiontable) and the location table
(co_linetable) of CPython 3.11 and later, which 3.12 and 3.13 keep in the
same formats: the codecs kiln/_bytecode.py lays code out with (through the
version modules, kiln/_bytecode_v3NN.py).

Traps:
- The exception table is a sequence of entries of 6-bit big-endian varints
  (bit 6 = continuation, bit 7 marks an entry's first byte): start, length
  (code units, end exclusive), handler, depth<<1|lasti.
- The location table (Objects/locations.md) has one entry per instruction
  on 3.11 and one per run of instructions at the same location from 3.12
  on (split into pieces of at most 8 code units), with the line as a delta
  from the previous entry's and little-endian 6-bit varints. The runs and
  the short and one-line forms are chosen exactly as the compiler chooses
  them, or the round trip is not byte-identical (though still correct).

The fast-locals layout (one localsplus array: varnames, cells that are
not arguments, free variables) is also 3.11's and later's; its functions
are here too.
"""
import dis
import functools


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


def encode_location_table(items, firstlineno, runs=False):
    """`items`: (size in code units, dis.Positions or None) per instruction,
    in order. Mirrors 3.11 compile.c write_location_info_entry exactly so
    unmodified compiler output round-trips byte for byte: one entry per
    instruction (`runs`: per run of instructions at the same location, as
    3.12's assemble.c assemble_location_info writes), split into pieces of
    <= 8 units; short and one-line forms do not move the running line, so
    they are chosen by the same tests."""
    if runs:
        items = _location_runs(items)
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


def _location_runs(items):
    merged = []
    for size, pos in items:
        pos = pos or _NO_POSITIONS  # a new instruction's None: no location, as the table reads it back
        if merged and merged[-1][1] == pos:
            merged[-1][0] += size
        else:
            merged.append([size, pos])
    return merged


_NO_POSITIONS = dis.Positions(None, None, None, None)


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


# ------------------------------------------------- code objects --

def code_positions(code):
    """One dis.Positions per code unit (caches and prefixes included)."""
    # tuple.__new__ is what Positions._make calls, without _make's Python
    # frame per code unit (the frontend reads every code object it translates).
    return list(map(functools.partial(tuple.__new__, dis.Positions), code.co_positions()))


def exception_rows(code):
    """[(start, end, handler, depth, lasti)] in bytes, end exclusive."""
    return parse_exception_table(code.co_exceptiontable)


def table_fields(exc_rows, location_items, firstlineno, runs=False):
    """The code.replace fields for the tables (see encode_location_table
    for `location_items` and `runs`)."""
    return {"co_exceptiontable": encode_exception_table(exc_rows),
            "co_linetable": encode_location_table(location_items, firstlineno, runs)}


def entry_shape(code):
    """The stack at the first instruction: empty (a generator's first
    send() value comes after RETURN_GENERATOR, see compiler_effect)."""
    return ()


def localsplus_names(code):
    """Names of the fast-locals slots in index order (LOAD_FAST,
    LOAD_DEREF, MAKE_CELL, LOAD_CLOSURE ... all index this one array)."""
    n = len(code.co_varnames) + len(set(code.co_cellvars) - set(code.co_varnames)) + len(code.co_freevars)
    return [code._varname_from_oparg(i) for i in range(n)]


def new_localsplus(varnames, cellvars, freevars):
    # What the code constructor builds: varnames, cells that are not also
    # varnames (a cell argument shares its varname's slot), then frees.
    return list(varnames) + [c for c in cellvars if c not in varnames] + list(freevars)


def slot_names(layout, opcode):
    """The names a LOCAL_OPS or FREE_OPS `opcode`'s arg indexes: the whole
    localsplus for both."""
    return layout


# ------------------------------------------------ 3.11+ jumps and calls --
#
# Shared by the version modules, which pass their own opcode numbers.

class RelativeJumps:
    """3.11 and later: a jump counts code units from the unit after its
    caches, and its direction is in the opcode. `families`: each relative
    jump family as (forward name or None, backward name or None), searched
    in order (so JUMP_FORWARD turned backward is JUMP_BACKWARD); `op`: the
    version's opcode numbers by name."""

    def __init__(self, cache_entries, families, op):
        self._caches, self._families, self._op = cache_entries, families, op
        self.backward_jumps = frozenset(op[b] for _, b in families if b)

    def variant(self, opcode, backward):
        """The opcode of `opcode`'s family that jumps in the given direction
        (ValueError when the family has no such variant)."""
        name = dis.opname[opcode]
        for fwd, bwd in self._families:
            if name in (fwd, bwd):
                want = bwd if backward else fwd
                if want is None:
                    raise ValueError(f"{name} cannot jump {'backward' if backward else 'forward'}")
                return self._op[want]
        raise ValueError(f"{name} is not a relative jump")

    def _next(self, opcode_offset, opcode):
        return opcode_offset + 2 + 2 * self._caches(opcode)

    def target_offset(self, opcode_offset, opcode, arg):
        """Byte offset a jump at `opcode_offset` (the opcode unit, after any
        EXTENDED_ARG) goes to, as dis names it."""
        nxt = self._next(opcode_offset, opcode)
        return nxt - 2 * arg if opcode in self.backward_jumps else nxt + 2 * arg

    def arg(self, opcode_offset, opcode, target_offset):
        """Inverse of target_offset: the arg (None if the direction of
        `opcode` does not match the target's position)."""
        nxt = self._next(opcode_offset, opcode)
        delta = (nxt - target_offset) if opcode in self.backward_jumps else (target_offset - nxt)
        return None if delta < 0 else delta // 2

    def is_backward(self, opcode_offset, opcode, target_offset):
        return target_offset < self._next(opcode_offset, opcode)


def compiler_effect_with(jump_ops, return_generator):
    """The compiler's stack effect: dis.stack_effect, except that
    RETURN_GENERATOR counts +1: the frame resumes with the first send()'s
    value pushed, and the compiler adds that prefix after its depth pass,
    so counting it gives its numbers."""
    def compiler_effect(opcode, arg, jump):
        if opcode in jump_ops:
            return dis.stack_effect(opcode, arg, jump=jump)
        if opcode == return_generator:
            return 1
        return dis.stack_effect(opcode, arg)
    return compiler_effect


def call_transfer(op, opcode, arg, shape, global_pair=("N", "v")):
    """runtime_transfer for what 3.11 and later share (`op`: the version's
    opcode numbers by name): NULLs pushed, a generator's first value, calls,
    COPY and SWAP. None for any other instruction. `global_pair`: what
    LOAD_GLOBAL with bit 0 pushes, bottom first (3.13 puts the NULL above
    the global, 3.11 and 3.12 below it)."""
    if opcode == op["PUSH_NULL"]:
        return shape + ("N",)
    if opcode == op["RETURN_GENERATOR"]:
        # the frame comes back with the first send()'s None pushed (POP_TOP'd next)
        return shape + ("v",)
    if opcode == op["LOAD_GLOBAL"]:
        return shape + (global_pair if arg & 1 else ("v",))
    if opcode == op["CALL"]:
        return pop_kinds(shape, arg + 2, opcode) + ("v",)
    if opcode == op.get("CALL_KW"):  # 3.13 (no KW_NAMES): the names' tuple above the arguments
        return pop_kinds(shape, arg + 3, opcode) + ("v",)
    if opcode == op["CALL_FUNCTION_EX"]:
        return pop_kinds(shape, 3 + (arg & 1), opcode) + ("v",)
    if opcode == op["COPY"]:
        return shape + (shape[-arg],)
    if opcode == op["SWAP"]:
        s = list(shape)
        s[-1], s[-arg] = s[-arg], s[-1]
        return tuple(s)
    return None


def pop_kinds(shape, n, opcode):
    if n > len(shape):
        raise ValueError(f"{dis.opname[opcode]} pops {n} from a stack of {len(shape)}")
    return shape[:len(shape) - n]


# ------------------------------------------------ what an instruction pops --

# How many stack slots an instruction takes off the stack at run time (its
# operands, a call's NULL included): what a break leaves under them is
# passed to the resume function untouched. An instruction with no row is
# not resumed after (it reaches deeper slots, ends the frame, or is rare):
# kiln/_frames.py then jumps into the original instead. (dis.stack_effect
# gives only the net effect; a break needs to know which slots an
# instruction leaves alone.) These rows hold on 3.11 and later; each
# version module adds its own (inputs_with).
INPUTS_311_ON = {
    "CALL": lambda a: a + 2, "CALL_FUNCTION_EX": lambda a: 3 + (a & 1),
    "BINARY_OP": 2, "BINARY_SUBSCR": 2, "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2, "COMPARE_OP": 2,
    "IS_OP": 2, "CONTAINS_OP": 2, "LOAD_ATTR": 1, "STORE_ATTR": 2, "DELETE_ATTR": 1,
    "UNARY_NEGATIVE": 1, "UNARY_NOT": 1, "UNARY_INVERT": 1, "GET_ITER": 1,
    "FOR_ITER": 1, "UNPACK_SEQUENCE": 1, "UNPACK_EX": 1, "BUILD_LIST": lambda a: a,
    "BUILD_TUPLE": lambda a: a, "BUILD_SET": lambda a: a, "BUILD_MAP": lambda a: 2 * a,
    "BUILD_STRING": lambda a: a, "BUILD_SLICE": lambda a: a, "BUILD_CONST_KEY_MAP": lambda a: a + 1,
    "LOAD_GLOBAL": 0, "LOAD_FAST": 0, "LOAD_CONST": 0, "LOAD_DEREF": 0, "STORE_FAST": 1,
    "STORE_GLOBAL": 1, "POP_TOP": 1,
    # IMPORT_FROM reads the module under it and pushes it back with the
    # name: it takes the module, and the module is one of its results.
    "BEFORE_WITH": 1, "IMPORT_NAME": 2, "IMPORT_FROM": 1, "LOAD_ASSERTION_ERROR": 0,
}


def inputs_with(rows, op):
    """The version's `inputs(opname, arg)` over INPUTS_311_ON and its own
    `rows` (`op`: its opcodes by name, which every row must name)."""
    table = {**INPUTS_311_ON, **rows}
    unknown = set(table) - set(op)
    assert not unknown, f"input rows for opcodes this CPython lacks: {sorted(unknown)}"

    def inputs(opname, arg):
        """The slots `opname` takes off the stack, or None (no row)."""
        n = table.get(opname)
        return n(arg) if callable(n) else n
    return inputs



# The relative jump families of 3.12 and 3.13, (forward name or None,
# backward name or None): conditional jumps go forward only, a loop's back
# edge is JUMP_BACKWARD. Each version module asserts every jump it has is in one.
JUMP_PAIRS_312_ON = (
    ("JUMP_FORWARD", "JUMP_BACKWARD"),
    ("POP_JUMP_IF_FALSE", None),
    ("POP_JUMP_IF_TRUE", None),
    ("POP_JUMP_IF_NONE", None),
    ("POP_JUMP_IF_NOT_NONE", None),
    ("JUMP_FORWARD", "JUMP_BACKWARD_NO_INTERRUPT"),
    ("FOR_ITER", None),
    ("SEND", None),
)


# ------------------------------------------------- emitting, shared --
#
# What kiln/_frames.py and kiln/_resume.py write when they make bytecode
# of their own (a residual's calls, a resume function's call), as
# (opname, arg) lists: where versions agree, the spelling is here and each
# version module names it in its own EMIT section.

# A callable and the NULL that makes its call a plain one, as the stack
# holds them (bottom first), until 3.12: 3.13 turned the pair around.
CALL_PAIR_NULL_FIRST = ("N", "v")


def make_function_with_flags(flags, qualname=None):
    """Until 3.12: MAKE_FUNCTION from the code on top and, below it, the
    attributes `flags` names (1 defaults, 2 keyword defaults, 4
    annotations, 8 the closure, in that order from the bottom). (3.11+
    takes the __qualname__ from the code: `qualname` is 3.10's.)"""
    return [("MAKE_FUNCTION", flags)]


def binary_op_311_on(nb, inplace):
    """3.11+: BINARY_OP with the NB_* index `nb` (its in-place form 13 up)."""
    return [("BINARY_OP", nb + 13 * bool(inplace))]


def copy_311_on(n):
    return [("COPY", n)]


def swap_311_on(n):
    return [("SWAP", n)]


def method_call_as_plain_311_on(opcode, arg):
    """3.11+: one call instruction takes a method pair and a plain pair alike."""
    return None


def null_pair_with(pair):
    """null_pair (a NULL and the callable `load` pushes, in the version's
    order `pair`): PUSH_NULL beside it; `const` and `name` (3.10's) unused."""
    def null_pair(load, const=None, name=None):
        null = [("PUSH_NULL", None)]
        return null + load if pair[0] == "N" else load + null
    return null_pair


def load_closure(slot):
    """Until 3.12: push the cell in localsplus `slot`, for a closure tuple."""
    return [("LOAD_CLOSURE", slot)]


def call_312_on(n):
    """3.12+: call the callable under n arguments (with its NULL, or a method pair)."""
    return [("CALL", n)]


def attribute_312_on(name, method):
    """3.12+: load attribute co_names[name] off the top (method: bit 0, the pair)."""
    return [("LOAD_ATTR", (name << 1) | int(bool(method)))]


def method_load_as_attr_312_on(op):
    """3.12+: for a method load (LOAD_ATTR or LOAD_SUPER_ATTR with bit 0),
    the plain attribute load of the same name as (opname, arg); None for
    any other instruction."""
    forms = {op["LOAD_ATTR"]: "LOAD_ATTR", op["LOAD_SUPER_ATTR"]: "LOAD_SUPER_ATTR"}

    def method_load_as_attr(opcode, arg):
        name = forms.get(opcode)
        return (name, arg & ~1) if name is not None and arg & 1 else None
    return method_load_as_attr


def compare_args():
    """compare(index): COMPARE_OP's arg for dis.cmp_op[index] as the running
    CPython's compiler writes it where the result is a value. 3.12 keeps a
    mask of the results that count as true in the low bits, which the
    specialized forms read (an arg without it compares wrongly once the
    instruction is specialized); 3.13 moves the comparison to bits 5 up and
    uses bit 4 for a result made a bool."""
    args = {i: next(ins.arg for ins in dis.get_instructions(compile(f"a {sym} b", "<compare>", "eval"))
                    if ins.opname == "COMPARE_OP")
            for i, sym in enumerate(dis.cmp_op)}
    return args.__getitem__

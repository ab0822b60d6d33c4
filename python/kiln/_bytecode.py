"""CPython bytecode as editable instructions: decode, assemble, stack shapes.

`decode(code)` turns a code object into a `Bytecode`: a list of `Instr`
(jumps hold their target Instr, EXTENDED_ARG folded into the arg, CACHE
units dropped), the exception table as `ExcEntry` rows over Instrs (none on
3.10: there a handler is the target of its SETUP_* instruction, a jump like
any other for successors and the stack analyses), and the code object
itself as the template. `assemble(bc, **replace)` lays the
instructions out again and returns a code object; unmodified compiler
output comes back byte-identical (co_code, co_exceptiontable, co_linetable,
co_stacksize), which tests/python/test_bytecode.py checks over thousands of
real code objects. `stack_analysis(bc)` gives the run-time shape of the
value stack before every reachable instruction, NULL slots included.

Used by kiln/_resume.py to build resume functions (continue a frame's
original bytecode after a graph break). Imports nothing from kiln but
kiln/_bytecode_tables.py, which holds the per-version facts.
"""
import dis

from . import _bytecode_tables as T

T.require()  # a CPython with no tables fails here, saying so

__all__ = ["Instr", "ExcEntry", "Bytecode", "decode", "assemble", "stack_analysis", "block_stacks",
           "StackMergeError", "successors", "max_stack_depth", "localsplus_names", "new_localsplus",
           "relayout_locals", "local_slots", "free_slot"]


class Instr:
    """One instruction. `target` is the Instr a jump goes to (its `arg` is
    recomputed by assemble). A 3.13 pair of locals (T.LOCAL_PAIRS) may have
    a tuple for its `arg`: see relayout_locals and local_slots. `positions`
    is the original location, a T.code_positions item (dis.Positions; 3.10:
    lineno only), or the positions of the instruction a new one stands for
    (None: no location). `offset` is the byte offset of the opcode unit in
    the code it was decoded from (after any EXTENDED_ARG), None for new
    ones. Identity is the instruction: Instrs hash by id, so dicts keyed by
    Instr survive edits of the list."""
    __slots__ = ("opname", "opcode", "arg", "target", "positions", "offset",
                 "_start", "_end", "_ext")

    def __init__(self, opname, arg=None, *, target=None, positions=None, offset=None):
        self.opname = opname
        self.opcode = dis.opmap[opname]
        self.arg = arg
        self.target = target
        self.positions = positions
        self.offset = offset
        self._start = self._end = None  # byte range in the last layout, prefixes and caches included
        self._ext = 0                   # EXTENDED_ARG prefixes in the last layout

    def set_op(self, opname):
        self.opname, self.opcode = opname, dis.opmap[opname]

    @property
    def lineno(self):
        return None if self.positions is None else self.positions.lineno

    def __repr__(self):
        tgt = f" -> @{self.target.offset}" if self.target is not None else ""
        arg = "" if self.arg is None else f" {self.arg}"
        at = "" if self.offset is None else f"@{self.offset} "
        return f"<{at}{self.opname}{arg}{tgt}>"


class ExcEntry:
    """An exception-table row: instructions from `start` to `end` INCLUSIVE
    (in list order) raise to `handler` with the stack cut to `depth`, plus
    the raising instruction's offset (lasti) pushed when `lasti`."""
    __slots__ = ("start", "end", "handler", "depth", "lasti")

    def __init__(self, start, end, handler, depth, lasti):
        self.start, self.end, self.handler, self.depth, self.lasti = start, end, handler, depth, lasti

    def __repr__(self):
        return (f"<ExcEntry {self.start!r}..{self.end!r} -> {self.handler!r} "
                f"depth {self.depth}{' lasti' if self.lasti else ''}>")


class Bytecode:
    """`instrs` (list[Instr]), `exc_table` (list[ExcEntry], the order of
    the encoded table; always empty on 3.10, whose handlers are the targets
    of SETUP_* jumps), `code` (the template for assemble's replace).

    Keep `exc_table` ordered by position with rows not overlapping: 3.11's
    lookup (get_exception_handler) scans rows in order and gives up at the
    first row that starts past the raising offset. To insert instructions
    inside a row that must not be covered, split the row in two."""

    def __init__(self, instrs, exc_table, code):
        self.instrs, self.exc_table, self.code = instrs, exc_table, code

    def copy(self):
        """A deep copy: new Instrs (targets and table rows pointing at the
        copies), the same template code."""
        new = {}
        for ins in self.instrs:
            c = Instr.__new__(Instr)
            c.opname, c.opcode, c.arg, c.target, c.positions, c.offset = \
                ins.opname, ins.opcode, ins.arg, ins.target, ins.positions, ins.offset
            c._start, c._end, c._ext = ins._start, ins._end, ins._ext
            new[ins] = c
        for c in new.values():
            if c.target is not None:
                c.target = new[c.target]
        table = [ExcEntry(new[e.start], new[e.end], new[e.handler], e.depth, e.lasti) for e in self.exc_table]
        return Bytecode([new[i] for i in self.instrs], table, self.code)

    def at_offset(self, offset):
        """The instruction decoded from byte `offset`, or whose EXTENDED_ARG
        prefix starts there (a jump's target, as the frontend names a loop's
        head: the folded FOR_ITER sits two bytes later). KeyError if none."""
        for ins in self.instrs:
            if ins.offset == offset or getattr(ins, "_start", None) == offset:
                return ins
        raise KeyError(f"no instruction at offset {offset} in {self.code.co_name}")

    def handlers_of(self):
        """{Instr: [the ExcEntry CPython uses for it]}: the first row that
        covers it (rows do not overlap in compiler output; assemble
        refuses tables that are out of order). 3.10: the innermost try or
        with block of its block stack (block_stacks), as a row of its own
        whose lasti is None: the handler's stack is its SETUP's jump edge's,
        which stack_analysis follows instead."""
        if T.BLOCK_SETUPS:
            out = {}
            for ins, blocks in block_stacks(self).items():
                block = next((b for b in reversed(blocks) if b[0] != "E"), None)
                if block is not None:
                    out[ins] = [ExcEntry(ins, ins, block[1], block[2], None)]
            return out
        index = {ins: i for i, ins in enumerate(self.instrs)}
        out = {}
        for e in self.exc_table:
            for ins in self.instrs[index[e.start]:index[e.end] + 1]:
                out.setdefault(ins, [e])
        return out


# --------------------------------------------------------- slot layout --

# The slot layout is the version's (T.localsplus_names / T.new_localsplus:
# one array on 3.11+; varnames + cellvars + freevars on 3.10, where
# LOAD_FAST & co. and LOAD_DEREF & co. index two parts of it apart).
localsplus_names = T.localsplus_names
new_localsplus = T.new_localsplus


def relayout_locals(instrs, old_names, new_names):
    """Rewrite local/cell/free slot args from the old slot layout to the new,
    by name (within the part of the layout the instruction's arg indexes).

    A 3.13 pair (T.LOCAL_PAIRS: two locals, 4 bits each) whose new indices
    do not both fit gets the tuple (first, second) for its arg, and
    assemble lays it out as its two plain instructions. It is not split
    into two Instrs here because the list given is not always the one
    assembled (kiln/_frames.py passes a concatenation): as one Instr it
    keeps its place, jumps to it, its exception-table row and positions,
    and every analysis sees the same instruction (stack effect, locals
    read and written: local_slots)."""
    spaces = {}

    def remap(opcode, i):
        key = opcode in T.FREE_OPS
        if key not in spaces:
            index = {}
            for k, n in enumerate(T.slot_names(new_names, opcode)):
                index.setdefault(n, k)
            spaces[key] = (T.slot_names(old_names, opcode), index)
        old, index = spaces[key]
        return index[old[i]]

    for ins in instrs:
        if ins.opcode in T.LOCAL_PAIRS:
            first, second = (remap(op, i) for op, i in zip(T.LOCAL_PAIRS[ins.opcode], local_slots(ins)))
            ins.arg = (first << 4) | second if first < 16 and second < 16 else (first, second)
        elif ins.opcode in T.LOCAL_OPS or ins.opcode in T.FREE_OPS:
            ins.arg = remap(ins.opcode, ins.arg)


def free_slot(layout, name):
    """The arg by which a T.FREE_OPS instruction names cell or free variable
    `name` in `layout` (3.10 counts from the first cell)."""
    return T.slot_names(layout, next(iter(T.FREE_OPS))).index(name)


def local_slots(ins):
    """The slot indices `ins` names, in the order it uses them: one for
    T.LOCAL_OPS and T.FREE_OPS, two for a 3.13 pair (its packed arg, or the
    tuple relayout_locals leaves), none for any other instruction."""
    if ins.opcode in T.LOCAL_PAIRS:
        return ins.arg if type(ins.arg) is tuple else (ins.arg >> 4, ins.arg & 15)
    if ins.opcode in T.LOCAL_OPS or ins.opcode in T.FREE_OPS:
        return (ins.arg,)
    return ()


# ------------------------------------------------------------- decode --

def decode(code):
    """`code` as a Bytecode (see the module docstring). Instr.offset is the
    opcode unit's byte offset, as dis reports it."""
    raw = code.co_code
    positions = T.code_positions(code)  # one per code unit
    instrs = []
    by_start = {}
    i, ext, start, nprefix = 0, 0, None, 0
    while i < len(raw):
        op, a = raw[i], raw[i + 1]
        if start is None:
            start = i
        if op == T.EXTENDED_ARG:
            ext = (ext | a) << 8
            nprefix += 1
            i += 2
            continue
        if op == T.CACHE:  # only after an instruction; skipped below
            raise ValueError(f"stray CACHE at offset {i} in {code.co_name}")
        # A no-arg opcode keeps a nonzero arg byte: CPython ignores it, but
        # 3.10's optimizer leaves stale ones (`a, b = b, a`: BUILD_TUPLE 2
        # turned ROT_TWO 2) and the round trip must give them back.
        arg = ext | a
        ins = Instr(dis.opname[op], arg if op >= T.HAVE_ARGUMENT or arg else None,
                    positions=positions[start // 2], offset=i)
        ins._start, ins._ext = start, nprefix
        i += 2 + 2 * T.cache_entries(op)
        ins._end = i
        instrs.append(ins)
        by_start[start] = ins
        ext, start, nprefix = 0, None, 0
    by_end = {ins._end: ins for ins in instrs}
    for ins in instrs:
        if ins.opcode in T.JUMP_OPS:
            ins.target = by_start[T.jump_target_offset(ins.offset, ins.opcode, ins.arg)]
    table = [ExcEntry(by_start[s], by_end[e], by_start[h], d, l)
             for s, e, h, d, l in T.exception_rows(code)]
    return Bytecode(instrs, table, code)


# ----------------------------------------------------------- assemble --

def _nprefix(arg):
    n = 0
    while arg is not None and arg > 0xFF:
        arg >>= 8
        n += 1
    return n


def _layout(instrs):
    """Fix offsets and jump args/opcodes. A jump's direction follows the
    list order, so it is settled in the first round (where a turned jump
    may change size: 3.13's JUMP_BACKWARD has a cache unit, JUMP_FORWARD
    none); after that sizes only grow, so the loop ends. Starting from the
    fewest prefixes gives the compiler's own (smallest) layout."""
    caches = T.CACHES
    halves = {}  # a pair laid out as its halves (relayout_locals): its second's units
    for ins in instrs:
        if type(ins.arg) is tuple:
            ins._ext = _nprefix(ins.arg[0])
            halves[ins] = 1 + _nprefix(ins.arg[1])
        else:
            ins._ext = _nprefix(ins.arg) if ins.target is None else 0
    while True:
        pos = 0
        for ins in instrs:
            ins._start = pos
            pos += 2 * (ins._ext + 1 + caches[ins.opcode] + (halves.get(ins, 0) if halves else 0))
            ins._end = pos
        changed = False
        for ins in instrs:
            if ins.target is None:
                continue
            op_off = ins._start + 2 * ins._ext
            backward = T.is_backward_target(op_off, ins.opcode, ins.target._start)
            if (ins.opcode in T.BACKWARD_JUMPS) != backward:
                size = caches[ins.opcode]
                ins.set_op(dis.opname[T.jump_variant(ins.opcode, backward)])
                changed |= caches[ins.opcode] != size
            ins.arg = T.jump_arg(op_off, ins.opcode, ins.target._start)
            need = _nprefix(ins.arg)
            if need > ins._ext:
                ins._ext = need
                changed = True
        if not changed:
            return pos


_ZEROS = [bytes(2 * n) for n in range(max(T.CACHES) + 1)]


def _emit(out, opcode, arg, nprefix):
    for k in range(nprefix, 0, -1):
        out.append(T.EXTENDED_ARG)
        out.append((arg >> (8 * k)) & 0xFF)
    out.append(opcode)
    out.append(arg & 0xFF)
    n = T.CACHES[opcode]
    if n:
        out += _ZEROS[n]  # CACHE units, zeroed as co_code shows them


def assemble(bc, **replace):
    """A code object for `bc` (co_code, co_exceptiontable, co_linetable and
    co_stacksize computed; `replace` goes to code.replace and wins)."""
    instrs = bc.instrs
    for ins in instrs:
        if ins.opcode in T.JUMP_OPS and ins.target is None:
            raise ValueError(f"jump without target: {ins!r}")
    _layout(instrs)
    out = bytearray()
    for ins in instrs:
        if type(ins.arg) is tuple:  # a pair whose slots outgrew its arg (relayout_locals)
            (first, second), (a, b) = T.LOCAL_PAIRS[ins.opcode], ins.arg
            _emit(out, first, a, ins._ext)
            _emit(out, second, b, _nprefix(b))
        else:
            _emit(out, ins.opcode, ins.arg or 0, ins._ext)
    rows = [(e.start._start, e.end._end, e.handler._start, e.depth, e.lasti) for e in bc.exc_table]
    for (s0, e0, *_), (s1, *_) in zip(rows, rows[1:]):
        if s1 < e0:
            raise ValueError(f"exception table rows out of order or overlapping: "
                             f"[{s0}, {e0}) then one starting at {s1}")
    if any(s >= e for s, e, *_ in rows):
        raise ValueError("an exception table row ends before it starts (start after end in instrs)")
    firstlineno = replace.get("co_firstlineno", bc.code.co_firstlineno)
    kw = T.table_fields(rows, [((ins._end - ins._start) // 2, ins.positions) for ins in instrs], firstlineno)
    kw.update(co_code=bytes(out), co_stacksize=max_stack_depth(bc))
    kw.update(replace)
    return bc.code.replace(**kw)


# ------------------------------------------------------- control flow --

def successors(bc, handlers=None):
    """{Instr: ([(successor Instr, taken as the jump?)], [ExcEntry covering it])}."""
    handlers = bc.handlers_of() if handlers is None else handlers
    out = {}
    instrs = bc.instrs
    for i, ins in enumerate(instrs):
        nxt = []
        if ins.target is not None:
            nxt.append((ins.target, True))
        if ins.opcode not in T.UNCONDITIONAL_JUMPS and ins.opcode not in T.TERMINATORS \
                and i + 1 < len(instrs):
            nxt.append((instrs[i + 1], False))
        out[ins] = (nxt, handlers.get(ins, ()))
    return out


def _arg(ins):
    """The arg dis.stack_effect takes (a pair's tuple: any, the effect does
    not depend on which locals)."""
    if ins.opcode < T.HAVE_ARGUMENT:
        return None
    return 0 if type(ins.arg) is tuple else (ins.arg or 0)


_EFFECTS = {}


def _compiler_effect(opcode, arg, jump):
    """T.compiler_effect (the compiler's accounting), memoised."""
    key = (opcode, arg, jump)
    e = _EFFECTS.get(key)
    if e is None:
        e = _EFFECTS[key] = T.compiler_effect(opcode, arg, jump)
    return e


def max_stack_depth(bc):
    """co_stacksize as the compiler computes it: the largest depth before
    or after any reachable instruction, from the entry depth
    (T.entry_shape), following jumps with their jump effect (3.10: a
    SETUP_*'s target, its handler, is one), and exception-table handlers at
    depth + lasti + 1 (the exception). Uses the compiler's accounting
    (T.compiler_effect; 3.11: PRECALL -argc, CALL -1), which is what
    co_stacksize must match; the run-time depth between PRECALL and CALL is
    never larger than before PRECALL."""
    instrs = bc.instrs
    n = len(instrs)
    if not n:
        return 0
    pos = {ins: i for i, ins in enumerate(instrs)}
    exc = [()] * n
    for e in bc.exc_table:
        row = ((pos[e.handler], e.depth + e.lasti + 1),)
        for i in range(pos[e.start], pos[e.end] + 1):
            exc[i] += row
    depth = [None] * n
    depth[0] = best = len(T.entry_shape(bc.code))
    work = [0]
    no_fall = T.UNCONDITIONAL_JUMPS | T.TERMINATORS
    while work:
        i = work.pop()
        ins = instrs[i]
        d = depth[i]
        op = ins.opcode
        arg = _arg(ins)
        after = d + _compiler_effect(op, arg, False)
        if after > best:
            best = after
        if op not in no_fall and i + 1 < n and depth[i + 1] is None:
            depth[i + 1] = after
            work.append(i + 1)
        if ins.target is not None:
            j, nd = pos[ins.target], d + _compiler_effect(op, arg, True)
            if nd > best:
                best = nd
            if depth[j] is None:
                depth[j] = nd
                work.append(j)
        for j, nd in exc[i]:
            if nd > best:
                best = nd
            if depth[j] is None:
                depth[j] = nd
                work.append(j)
    return best


# ------------------------------------------------------ stack shapes --

class StackMergeError(ValueError):
    pass


def stack_analysis(bc, *, mark_lasti=False):
    """{Instr: tuple of slot kinds} before each reachable instruction,
    bottom first: 'v' a value, 'N' a NULL, 'Z' a local's value or NULL
    (3.12+ LOAD_FAST_AND_CLEAR), 'M'/'S' the lower and upper slots of a
    method pair whose NULL-ness is only known at run time: up to 3.12 'M'
    is the NULL or method and 'S' the attribute or self (LOAD_METHOD,
    3.12's LOAD_ATTR with bit 0, any NULL/callable pair once 3.11's PRECALL
    has run); on 3.13 'M' is the method or attribute and 'S' the self or
    NULL (LOAD_ATTR with bit 0). Run-time accounting: 3.11's PRECALL pops
    nothing and its CALL pops argc + 2 (dis.stack_effect charges the args
    to PRECALL). With `mark_lasti`, slots holding the lasti an exception
    handler pushed are 'L' (kiln/_resume.py remaps them: they are offsets
    into the code that raised). Where paths meet, a NULL or value joins
    the method pair's slot of the same place and 'v'+'L' -> 'L' (_JOIN);
    any other difference raises StackMergeError."""
    if not bc.instrs:
        return {}
    # (3.10: no handler rows; a handler's stack is its SETUP's jump edge's)
    succ = successors(bc, {} if T.BLOCK_SETUPS else None)
    shapes = {bc.instrs[0]: T.entry_shape(bc.code)}
    work = [bc.instrs[0]]
    lasti_kind = "L" if mark_lasti else "v"

    def merge(ins, shape, src, exc=False):
        old = shapes.get(ins)
        if old is None:
            shapes[ins] = shape
            work.append(ins)
        elif old != shape:
            joined = _join(old, shape)
            if joined is not None:
                if joined != old:
                    shapes[ins] = joined
                    work.append(ins)
                return
            via = f"an exception at {src!r}" if exc else repr(src)
            raise StackMergeError(
                f"{bc.code.co_name} ({bc.code.co_filename}:{bc.code.co_firstlineno}): stack shapes "
                f"differ at {ins!r}: {''.join(old) or '-'} vs {''.join(shape) or '-'} (via {via})")

    while work:
        ins = work.pop()
        shape = shapes[ins]
        nxt, excs = succ[ins]
        for e in excs:
            if len(shape) < e.depth:
                raise StackMergeError(f"{ins!r}: stack {len(shape)} below handler depth {e.depth}")
            merge(e.handler, shape[:e.depth] + (lasti_kind,) * e.lasti + ("v",), ins, True)
        for n, jump in nxt:
            merge(n, _apply(ins, shape, jump), ins)
    return shapes


def block_stacks(bc):
    """3.10: {Instr: the frame's block stack before it} for every reachable
    instruction (T.block_transfer's tuples, handlers named by their Instr);
    {} on 3.11+, whose handlers are in the exception table. The compiler
    pops every block a jump leaves (POP_BLOCK, POP_EXCEPT), so paths meet
    with equal stacks; StackMergeError where they do not."""
    if not any(ins.opcode in T.BLOCK_SETUPS for ins in bc.instrs):
        return {}  # (3.11+, and code with no try or with: no block is ever pushed)
    shapes = stack_analysis(bc)
    succ = successors(bc, {})
    blocks = {bc.instrs[0]: ()}
    work = [bc.instrs[0]]
    while work:
        ins = work.pop()
        before = blocks[ins]
        try:
            moved = T.block_transfer(ins.opcode, before, len(shapes[ins]), ins.target)
        except ValueError as e:
            raise StackMergeError(f"{bc.code.co_name}: {ins!r}: {e}") from None
        for n, jump in succ[ins][0]:
            after = before if moved is None else moved[1] if jump else moved[0]
            old = blocks.get(n)
            if old is None:
                blocks[n] = after
                work.append(n)
            elif old != after:
                raise StackMergeError(f"{bc.code.co_name}: block stacks differ at {n!r}: {old} vs {after}")
    return blocks


# Kinds that meet at a merge point. Compiler output never needs these; a
# resume function does: its prologue pushes a bound method with its NULL
# (in the version's order: T.METHOD_PAIR_JOIN) and a remapped lasti as a
# value, then jumps to an instruction that a loop's back edge also reaches
# with the original (method pair, lasti) slots.
_JOIN = {**T.METHOD_PAIR_JOIN, frozenset("vL"): "L"}


def _join(a, b):
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        if x != y:
            x = _JOIN.get(frozenset((x, y)))
            if x is None:
                return None
        out.append(x)
    return tuple(out)


def _apply(ins, shape, jump):
    op, arg = ins.opcode, ins.arg
    try:
        special = T.runtime_transfer(op, arg, jump, shape)
    except (ValueError, IndexError) as e:
        raise StackMergeError(f"{ins!r} on stack {''.join(shape) or '-'}: {e}") from None
    if special is not None:
        return special
    # A plain instruction: only its net effect matters for kinds, as long
    # as it pops no NULL or method slot (checked below): the slots it reads
    # and leaves, or replaces, are values before and after.
    e = _compiler_effect(op, _arg(ins), jump)
    pops, pushed = (-e, ()) if e < 0 else (0, ("v",) * e)
    if pops > len(shape):
        raise StackMergeError(f"{ins!r}: pops {pops} from a stack of {len(shape)}")
    for k in shape[len(shape) - pops:]:
        if k in "NMS":
            raise StackMergeError(f"{ins!r} pops a NULL/method slot ({''.join(shape)})")
    return shape[:len(shape) - pops] + pushed

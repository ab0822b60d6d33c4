"""Resume functions: code objects that continue a frame's original bytecode.

At a graph break kiln's residual calls the compiled graph, then hands the
rest of the frame to CPython by calling a *resume function*: a code object
made by `make_resume(code, offset, stack_kinds, live_locals)` that rebuilds
the value stack and the locals the original frame had at `offset` and then
runs the original bytecode from there, unchanged (Dynamo's resume
functions, written for kiln). CPython runs every instruction after the
break.

Layout of a resume code object R for original code C at instruction K:

    COPY_FREE_VARS n          (n = len(C.co_cellvars) + len(C.co_freevars); 3.10: none)
    RESUME 0                  (3.10: none; its frame's setup does both)
    PUSH_NULL | LOAD_FAST ___stack<i>    (per stack slot, bottom first; 3.10: a
                                          SETUP_FINALLY per try or with block K is
                                          in, at its level: push_frame)
    DELETE_FAST ___stack<i>...           (the frame keeps no extra reference)
    JUMP_FORWARD K'
    <C's bytecode, all of it, minus its MAKE_CELL/COPY_FREE_VARS prologue>

Why all of C is kept: a loop around K jumps back to code before K, and a
handler of a row covering K may start before K. With every instruction
kept, every jump and exception-table row means what it meant in C, and
because the prologue rebuilds exactly the stack C had at K, every row's
depth is still right: a `with` body's __exit__ and a `for` loop's iterator
are ordinary stack values below K's slots, restored where C had them. The
prologue itself is outside every row (an exception there is a bug).

Conventions (the contract with the caller, i.e. kiln's residual):

- Parameters, all positional: one per stack slot that is not a NULL
  (bottom first), then one per name in `live_locals`, in the given order
  (`resume_info(R).params` lists them). Exception: when C uses zero-argument
  super(), its first argument must be in `live_locals` (live_locals_at
  always lists it) and becomes the FIRST parameter (super() reads slot 0
  of the frame); a C whose first argument is also a cell is refused.
- Stack kinds are 'v' (a value) and 'N' (a NULL, pushed by the prologue;
  the caller passes nothing for it). A LOAD_METHOD pair ('M','S' in
  stack_analysis) is passed as a plain call's pair, T.CALL_PAIR (('N','v')
  until 3.12, ('v','N') on 3.13): the caller passes the callable the pair
  stands for (the bound method when the pair is a method and its self, else
  the attribute); CALL calls (NULL, bound method) exactly like (function,
  self).
- Cells cross through the closure, never as values: R's co_freevars are
  C.co_cellvars + C.co_freevars and the caller makes the function with the
  closure tuple (C's frame's own cell objects, then C's closure cells), so
  a nested function made before the break and one made after share their
  cells. Names in `live_locals` are plain locals only (not cells).
- A local not passed is unbound in R (as it would be after `del`); pass a
  local when it is live and bound; `live_locals_at` gives the live ones,
  the tracer knows which are bound (`bound_locals_at` computes it
  statically for the split test).
- R keeps C's co_name, co_qualname, co_filename, co_firstlineno and every
  instruction's positions, so tracebacks and line numbers are the user's.
  That R is a resume function is recorded in a side table (`is_resume`,
  `resume_info`), not in the name: a renamed co_name would show in
  tracebacks, `__qualname__` errors ("f() missing 1 required positional
  argument") and profiles.
- A lasti slot (the offset an exception handler pushed under the
  exception, used by RERAISE to pick the next handler) is passed as the int
  the original frame holds; the prologue maps it to R's offsets through a
  constant table (otherwise a `with` cleanup re-raising in R would unwind
  to the wrong handler).
- Refused with ResumeError: generators and coroutines (their frames cannot
  be rebuilt by a call), offsets in C's MAKE_CELL/COPY_FREE_VARS prologue,
  offsets between KW_NAMES and its CALL (3.11 and 3.12: the keyword names
  are interpreter state, not stack), unreachable offsets, kinds that do not match C's
  stack there.

`make_resume` is cached on its arguments: the same arguments return the
identical code object (the frame hook's caches can key on it).
"""
import types

from . import _bytecode as B
from . import _bytecode_tables as T

__all__ = ["make_resume", "stack_kinds_at", "live_locals_at", "bound_locals_at", "is_resume", "resume_info",
           "ResumeInfo", "ResumeError", "SplitNotAllowed", "split_at"]


class ResumeError(ValueError):
    pass


class ResumeInfo:
    """What a resume code object continues: `original` (code), `offset`,
    `stack_kinds`, `live_locals`, `params` (parameter names in order),
    `freevars` (the closure the caller must pass, by name), `offset_map`
    ({original byte offset of an instruction: its offset in the resume code})."""
    __slots__ = ("code", "original", "offset", "stack_kinds", "live_locals", "params",
                 "freevars", "offset_map")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)

    def __repr__(self):
        return (f"<resume of {T.qualname(self.original)} at {self.offset}: stack "
                f"{''.join(self.stack_kinds) or '-'}, locals {list(self.live_locals)}>")


# Keyed by identity, not by code equality: 3.11's code __eq__ ignores
# co_filename, so two files with the same function would share a resume
# code naming the wrong file. Entries hold their code objects, so an id is
# not reused while its entry lives (entries live for the process, as the
# frame hook's compiled entries that point at them do).
_CACHE = {}  # (id(code), offset, kinds, live_locals, name) -> (code, resume code)
_INFO = {}   # id(resume code) -> ResumeInfo (holding the resume code)


def is_resume(code):
    info = _INFO.get(id(code))
    return info is not None and info.code is code


def resume_info(code):
    """The ResumeInfo of a code object made by make_resume, else None."""
    info = _INFO.get(id(code))
    return info if info is not None and info.code is code else None


def _uses_zero_arg_super(code):
    return "__class__" in code.co_freevars and "super" in code.co_names and code.co_argcount > 0


def _prologue_end(bc):
    if T.RESUME is None:
        return -1  # 3.10: the frame's setup makes the cells; the code starts with the user's
    for i, ins in enumerate(bc.instrs):
        if ins.opcode == T.RESUME:
            return i
    raise ResumeError(f"{bc.code.co_name}: no RESUME instruction")


def _check_target(code, offset):
    """The index of the instruction at `offset` in _analysis(code).bc, after
    refusing what cannot be resumed there."""
    if code.co_flags & T.GENERATOR_FLAGS:
        raise ResumeError(f"{T.qualname(code)} is a generator or coroutine: its frame cannot be resumed by a call")
    a = _analysis(code)
    index = a.index.get(offset)
    if index is None:
        raise ResumeError(f"offset {offset} is not an instruction of {T.qualname(code)}")
    if index < a.prologue_end:
        raise ResumeError(f"offset {offset} is in {T.qualname(code)}'s prologue (before RESUME)")
    instrs = a.bc.instrs
    skipped = T.FOR_ITER_SKIPS
    if any(instrs[index - j].opname == skipped[0] and [i.opname for i in instrs[index - j:index + 1]] == list(skipped[:j + 1])
           for j in range(len(skipped)) if index >= j):
        # 3.12: only FOR_ITER's jump names an END_FOR, and skips it (3.13:
        # and the POP_TOP after it): CPython never runs them, and their
        # stacks (what dis counts for them) never exist.
        raise ResumeError(f"offset {offset} in {T.qualname(code)}: a FOR_ITER skips this {instrs[index].opname}, "
                          "which CPython never runs")
    if T.KW_NAMES is None:  # 3.13: the names are a constant on the stack
        return index
    if (index >= 1 and instrs[index - 1].opcode == T.KW_NAMES) or \
            (index >= 2 and instrs[index].opcode == T.CALL and instrs[index - 2].opcode == T.KW_NAMES):
        # KW_NAMES sets interpreter state (the call's keyword names) that
        # the CALL after the next PRECALL reads; it does not survive into
        # another frame.
        raise ResumeError(f"offset {offset} in {T.qualname(code)} splits KW_NAMES from its call")
    return index


def make_resume(code, offset, stack_kinds, live_locals, *, name=None):
    """The resume code object continuing `code` at the instruction at byte
    `offset`, given the stack kinds there ('v'/'N', bottom first; a method
    pair as T.CALL_PAIR) and the bound live locals passed (see the module
    docstring for the calling convention). `name` replaces co_name only
    (default: the user's). Cached: same arguments, same code object."""
    stack_kinds, live_locals = tuple(stack_kinds), tuple(live_locals)
    key = (id(code), offset, stack_kinds, live_locals, name)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is code:
        return hit[1]
    index = _check_target(code, offset)
    bc = _analysis(code).bc.copy()
    target = bc.instrs[index]
    expected = _analysis(code).lasti_shapes.get(offset)
    if expected is None:
        raise ResumeError(f"offset {offset} is unreachable in {T.qualname(code)}")
    _check_kinds(code, offset, stack_kinds, expected)

    varnames, cellvars, freevars = code.co_varnames, code.co_cellvars, code.co_freevars
    for n in live_locals:
        if n in cellvars or n in freevars:
            raise ResumeError(f"{n!r} is a cell of {T.qualname(code)}: cells cross through the closure")
        if n not in varnames:
            raise ResumeError(f"{n!r} is not a local of {T.qualname(code)}")
    if len(set(live_locals)) != len(live_locals):
        raise ResumeError(f"live_locals repeats a name: {live_locals}")
    if _uses_zero_arg_super(code):
        # super() reads the frame's slot 0 (unwrapping it only when slot 0
        # is a CELL, never a free variable) as its second argument.
        if varnames[0] in cellvars:
            raise ResumeError(f"{T.qualname(code)} uses super() and its first argument {varnames[0]!r} "
                              "is a cell: a resume function cannot give super() that cell")
        if varnames[0] not in live_locals:
            raise ResumeError(f"{T.qualname(code)} uses super(): pass its first argument "
                              f"{varnames[0]!r} in live_locals")
    taken = set(B.localsplus_names(code))
    stack_names = []
    for i, k in enumerate(stack_kinds):
        if k == "N":
            continue
        n = f"___stack{i}"
        while n in taken:
            n = "_" + n
        stack_names.append(n)
    locals_order = list(live_locals)
    if _uses_zero_arg_super(code) and varnames[0] in locals_order and varnames[0] not in cellvars:
        locals_order.remove(varnames[0])
        params = [varnames[0]] + stack_names + locals_order
    else:
        params = stack_names + locals_order
    new_varnames = params + [v for v in varnames if v not in live_locals and v not in cellvars]
    new_freevars = list(cellvars) + list(freevars)

    old_names = B.localsplus_names(code)
    pro_end = _prologue_end(bc)
    body = [ins for i, ins in enumerate(bc.instrs)
            if not (i < pro_end and ins.opcode in (T.MAKE_CELL, T.COPY_FREE_VARS))]
    B.relayout_locals(body, old_names, B.new_localsplus(new_varnames, (), new_freevars))
    slot = {n: i for i, n in enumerate(new_varnames)}

    pos = target.positions
    consts = list(code.co_consts)
    co_names = list(code.co_names)
    pro = []
    if new_freevars and T.COPY_FREE_VARS is not None:
        pro.append(B.Instr("COPY_FREE_VARS", len(new_freevars), positions=pos))
    if T.RESUME is not None:
        pro.append(B.Instr("RESUME", 0, positions=pos))
    lasti_const = None
    names = iter(stack_names)
    loads = []  # per slot, what pushes it (None: a NULL)
    for k, want in zip(stack_kinds, expected):
        if k == "N":
            loads.append(None)
            continue
        p = next(names)
        if want == "L":
            if lasti_const is None:
                lasti_const = len(consts)
                consts.append(None)  # the offset table, filled in once the layout is known
            loads.append([B.Instr("LOAD_CONST", lasti_const, positions=pos),
                          B.Instr("LOAD_FAST", slot[p], positions=pos), B.Instr("BINARY_SUBSCR", positions=pos)])
        else:
            loads.append([B.Instr("LOAD_FAST", slot[p], positions=pos)])
    blocks = [(kind, bc.instrs[_analysis(code).index[h]], level)
              for kind, h, level in _analysis(code).blocks.get(offset, ())]
    try:
        pro += push_frame(loads, blocks, pos, _table_index(consts), _table_index(co_names))
    except ResumeError as e:
        raise ResumeError(f"offset {offset} in {T.qualname(code)} is {e}") from None
    for p in stack_names:
        pro.append(B.Instr("DELETE_FAST", slot[p], positions=pos))
    pro.append(B.Instr("JUMP_FORWARD", target=target, positions=pos))
    bc.instrs = pro + body

    flags = code.co_flags & ~(T.CO_VARARGS | T.CO_VARKEYWORDS)
    flags = flags & ~T.CO_NOFREE if new_freevars else flags | T.CO_NOFREE
    replace = dict(co_argcount=len(params), co_posonlyargcount=0, co_kwonlyargcount=0,
                   co_nlocals=len(new_varnames), co_varnames=tuple(new_varnames),
                   co_cellvars=(), co_freevars=tuple(new_freevars), co_flags=flags,
                   co_consts=tuple(consts), co_names=tuple(co_names))
    if name is not None:
        replace["co_name"] = name
    new = B.assemble(bc, **replace)
    offset_map = {ins.offset: ins._start + 2 * ins._ext for ins in body}
    if lasti_const is not None:
        # lasti counts code units of the opcode (after EXTENDED_ARG).
        table = [-1] * (len(code.co_code) // 2)
        for old, now in offset_map.items():
            table[old // 2] = now // 2
        consts[lasti_const] = tuple(table)
        new = B.assemble(bc, **dict(replace, co_consts=tuple(consts)))
    if B.localsplus_names(new) != B.new_localsplus(new_varnames, (), new_freevars):
        raise AssertionError(f"slot layout of the resume code of {T.qualname(code)} is not as built")
    info = ResumeInfo(code=new, original=code, offset=offset, stack_kinds=stack_kinds,
                      live_locals=live_locals, params=tuple(params), freevars=tuple(new_freevars),
                      offset_map=offset_map)
    _CACHE[key] = (code, new)
    _INFO[id(new)] = info
    return new


_MAYBE_NULL_REFUSED = ("a local that a CPython 3.12 inlined comprehension saved is on the stack (its value or "
                       "NULL: a call cannot pass it)")


def _check_kinds(code, offset, given, expected):
    if "Z" in expected:
        raise ResumeError(f"offset {offset} in {T.qualname(code)}: {_MAYBE_NULL_REFUSED}")
    # What each expected kind is passed as: a method pair as a plain call's
    # pair, a lasti as the value it is.
    want = "".join("".join(T.CALL_PAIR) if e == "M" else "" if e == "S" else "N" if e == "N" else "v"
                   for e in expected)
    if "".join(given) != want:
        raise ResumeError(
            f"stack kinds {''.join(given) or '-'} do not match {T.qualname(code)}'s stack at offset "
            f"{offset} ({''.join(expected) or '-'}; pass a method pair 'MS' as '{''.join(T.CALL_PAIR)}', "
            "lasti 'L' as 'v')")


# ------------------------------------------------------------ liveness --

class _Analysis:
    """Per-offset facts about one code object, computed once (the split
    test and a frame hook ask about many offsets of the same code)."""

    def __init__(self, code):
        self.bc = bc = B.decode(code)  # the template: copy before editing
        self.index = {ins.offset: i for i, ins in enumerate(bc.instrs)}
        self.prologue_end = _prologue_end(bc)
        # 3.10: the frame's block stack before each instruction, handlers by offset
        self.blocks = {i.offset: tuple((kind, h.offset, level) for kind, h, level in b)
                       for i, b in B.block_stacks(bc).items()}
        self._unpaired = None
        self.shapes = {i.offset: s for i, s in B.stack_analysis(bc).items()}
        self.lasti_shapes = {i.offset: s for i, s in B.stack_analysis(bc, mark_lasti=True).items()}
        succ = B.successors(bc)
        plain = _plain_locals(code)
        names = lambda bits: [n for i, n in sorted(plain.items()) if bits >> i & 1]  # noqa: E731
        self.live = {i.offset: names(b) for i, b in _liveness(code, bc, succ, plain).items()}
        self.bound = {i.offset: (names(d), names(m))
                      for i, (d, m) in _bound(code, bc, succ, plain, _restores(bc, self.shapes)).items()}

    def unpaired(self):
        """split_at's variant of the code (LOAD_METHOD pairs made (NULL,
        bound method)): (template Bytecode, {offset: shape}, {offset: index})."""
        if self._unpaired is None:
            bc = self.bc.copy()
            _unpair_methods(bc)
            shapes = {i.offset: s for i, s in B.stack_analysis(bc).items() if i.offset is not None}
            where = {ins.offset: i for i, ins in enumerate(bc.instrs) if ins.offset is not None}
            self._unpaired = bc, shapes, where
        return self._unpaired


_ANALYSES = {}  # id(code) -> (code, _Analysis), the most recent 128, by identity as _CACHE


def _analysis(code):
    hit = _ANALYSES.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    a = _Analysis(code)
    if len(_ANALYSES) >= 128:
        del _ANALYSES[next(iter(_ANALYSES))]
    _ANALYSES[id(code)] = (code, a)
    return a


def stack_kinds_at(code, offset):
    """kiln._bytecode.stack_analysis's shape before the instruction at
    `offset` ('v', 'N', 'M', 'S'); None when unreachable."""
    return _analysis(code).shapes.get(offset)


def _plain_locals(code):
    """{slot index: name} of the locals that are not cells."""
    cells = set(code.co_cellvars)
    return {i: n for i, n in enumerate(code.co_varnames) if n not in cells}


def live_locals_at(code, offset):
    """Plain locals (not cells) that some path from `offset` may read before
    writing, exception edges included (an exception can leave before the
    instruction's own store). DELETE_FAST counts as a read: it raises on an
    unbound local. Names in co_varnames order."""
    a = _analysis(code)
    if offset not in a.live:
        raise ResumeError(f"offset {offset} is not an instruction of {T.qualname(code)}")
    live = list(a.live[offset])
    plain = _plain_locals(code)
    if _uses_zero_arg_super(code) and 0 in plain and plain[0] not in live:
        live.insert(0, plain[0])  # super() reads the first argument's slot
    return live


def local_uses(ins):
    """[(effect, local index)] of what `ins` does to locals, in order:
    'read', 'store', or 'clear' (read, then unbound: DELETE_FAST raises on
    an unbound local, LOAD_FAST_AND_CLEAR saves the value it clears). A
    3.13 pair (T.LOCAL_PAIRS) is its two instructions'."""
    ops = T.LOCAL_PAIRS.get(ins.opcode, (ins.opcode,))
    if len(ops) == 1 and ops[0] not in T.LOCAL_READS and ops[0] not in T.LOCAL_KILLS:
        return []
    out = []
    for op, i in zip(ops, B.local_slots(ins)):
        read, kill = op in T.LOCAL_READS, op in T.LOCAL_KILLS
        out.append(("clear" if read and kill else "read" if read else "store" if kill else None, i))
    return [u for u in out if u[0]]


def _restores(bc, shapes):
    """(instruction, local index) of the stores that put back what 3.12+'s
    LOAD_FAST_AND_CLEAR saved (kind 'Z': maybe NULL); a store pops the slot
    its place among the instruction's stores names (3.13 pairs them)."""
    out = set()
    for ins in bc.instrs:
        shape = shapes.get(ins.offset) or ""
        stores = [i for effect, i in local_uses(ins) if effect == "store"]
        out |= {(ins, i) for j, i in enumerate(stores) if j < len(shape) and shape[-1 - j] == "Z"}
    return out


def _liveness(code, bc, succ, plain):
    use, kill = {}, {}
    for ins in bc.instrs:
        u = k = 0
        # (use, kill) of the instruction's local uses in order, composed from the last
        for effect, i in reversed(local_uses(ins)):
            if i not in plain:
                continue
            if effect == "store":
                u, k = u & ~(1 << i), k | 1 << i
            else:  # a read; a clear (DELETE_FAST raises on an unbound local) also ends the value
                u, k = u | 1 << i, k | (1 << i if effect == "clear" else 0)
        use[ins], kill[ins] = u, k
    live = {ins: 0 for ins in bc.instrs}
    changed = True
    while changed:
        changed = False
        for ins in reversed(bc.instrs):
            nxt, excs = succ[ins]
            out = 0
            for n, _ in nxt:
                out |= live[n]
            exc = 0
            for e in excs:
                exc |= live[e.handler]
            new = use[ins] | (out & ~kill[ins]) | exc
            if new != live[ins]:
                live[ins] = new
                changed = True
    return live


def bound_locals_at(code, offset):
    """(definitely bound, maybe bound) plain locals at `offset`, by a forward
    pass from the entry (arguments bound; STORE_FAST binds, DELETE_FAST
    and 3.12's LOAD_FAST_AND_CLEAR unbind, and the STORE_FAST that puts
    back what LOAD_FAST_AND_CLEAR saved binds only maybe; exception edges
    carry the state before the instruction).
    Names in co_varnames order; None for an unreachable offset."""
    return _analysis(code).bound.get(offset)


def _bound(code, bc, succ, plain, restores=()):
    nargs = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & T.CO_VARARGS) \
        + bool(code.co_flags & T.CO_VARKEYWORDS)
    entry = sum(1 << i for i in plain if i < nargs)
    state = {bc.instrs[0]: (entry, entry)}
    work = [bc.instrs[0]]
    while work:
        ins = work.pop()
        d, m = state[ins]
        nd, nm = d, m
        for effect, i in local_uses(ins):
            if i not in plain:
                continue
            if (ins, i) in restores:
                nd, nm = nd & ~(1 << i), nm | 1 << i
            elif effect == "store":
                nd, nm = nd | 1 << i, nm | 1 << i
            elif effect == "clear":
                nd, nm = nd & ~(1 << i), nm & ~(1 << i)
        nxt, excs = succ[ins]
        for n, s in [(n, (nd, nm)) for n, _ in nxt] + [(e.handler, (d, m)) for e in excs]:
            old = state.get(n)
            merged = s if old is None else (old[0] & s[0], old[1] | s[1])
            if merged != old:
                state[n] = merged
                work.append(n)
    return state


# --------------------------------------------------------------- split --

class SplitNotAllowed(ResumeError):
    pass


def null_beside(depth, pos):
    """Instructions that put the NULL a plain call needs beside the
    callable under the `depth` top values (the callable the deepest): below
    it until 3.12, above it on 3.13 (T.CALL_PAIR); nothing on 3.10, whose
    plain calls have none."""
    if not T.CALL_TAKES_NULL:
        return []
    out = [B.Instr("PUSH_NULL", positions=pos)]
    for k in range(depth + (T.CALL_PAIR[0] == "N"), 1, -1):
        out.append(B.Instr("SWAP", k, positions=pos))
    return out


def emit(pairs, pos):
    """A version module's (opname, arg) spelling as instructions (an Instr
    in it, one the caller gave the spelling, as it is)."""
    return [x if isinstance(x, B.Instr) else B.Instr(x[0], x[1], positions=pos) for x in pairs]


def push_slots(loads, pos, const, name):
    """The instructions pushing a stack, bottom first, from `loads`: per
    slot the instructions that push it, None for a NULL. A NULL beside its
    callable, in T.CALL_PAIR's order, is pushed with it (T.null_pair: 3.10
    has no PUSH_NULL, and makes the pair with LOAD_METHOD); 3.11+ may
    also have one whose callable is not loaded yet. `const(value)` / `name(str)` give an index in the code's
    co_consts / co_names (3.10's pair needs one of each)."""
    out = []
    null_at = T.CALL_PAIR.index("N")
    i = 0
    while i < len(loads):
        pair = loads[i:i + 2]
        if len(pair) == 2 and pair[null_at] is None and pair[1 - null_at] is not None:
            out += emit(T.null_pair(pair[1 - null_at], const, name), pos)
            i += 2
        elif loads[i] is None:
            if not T.CALL_TAKES_NULL:
                raise ResumeError("a NULL on the stack that is not beside its callable (CPython 3.10 has no PUSH_NULL)")
            out.append(B.Instr("PUSH_NULL", positions=pos))  # (its callable is not loaded yet)
            i += 1
        else:
            out += loads[i]
            i += 1
    return out


def push_frame(loads, blocks, pos, const, name):
    """push_slots, with 3.10's try and with blocks (kind, handler Instr,
    level) pushed again where their SETUPs pushed them, each above the
    slots under it (SETUP_WITH's block is CPython's SETUP_FINALLY block,
    its __exit__ a slot below). ResumeError inside a handler, whose
    EXCEPT_HANDLER block only an exception entering it makes."""
    out, at = [], 0
    for kind, handler, level in blocks:
        if kind == "E":
            raise ResumeError("inside an except, finally or with handler, whose block CPython 3.10 pushes only "
                              "when it enters the handler")
        out += push_slots(loads[at:level], pos, const, name)
        out.append(B.Instr("SETUP_FINALLY", target=handler, positions=pos))
        at = level
    return out + push_slots(loads[at:], pos, const, name)


def _table_index(table):
    """index(value): where `value` is in the list `table` (a code's
    co_consts or co_names being built), appended if it is not there."""
    def index(value):
        for i, x in enumerate(table):
            if x is value or (type(x) is type(value) and type(value) is str and x == value):
                return i
        table.append(value)
        return len(table) - 1
    return index


def _unpair_methods(bc):
    """A method load -> the attribute load and a NULL beside it (a plain
    call of the bound method; 3.10: the attribute alone, and CALL_METHOD
    -> CALL_FUNCTION) and PRECALL -> NOP (which would turn (NULL,
    bound method) back into a dynamic pair; 3.11's CALL does PRECALL's
    unpacking itself): every call's two slots are then T.CALL_PAIR at every
    instruction."""
    out = []
    precall = getattr(T, "PRECALL", None)  # 3.11 only
    for ins in bc.instrs:
        plain = T.method_load_as_attr(ins.opcode, ins.arg)
        call = T.method_call_as_plain(ins.opcode, ins.arg)
        if plain is not None:
            ins.set_op(plain[0])
            ins.arg = plain[1]
            out += [ins] + null_beside(1, ins.positions)
        elif call is not None:  # 3.10: CALL_METHOD of what is now one callable
            ins.set_op(call[0])
            ins.arg = call[1]
            out.append(ins)
        else:
            if ins.opcode == precall:
                ins.set_op("NOP")
                ins.arg = None
            out.append(ins)
    bc.instrs = out


def split_at(fn, offset):
    """A copy of function `fn` that, when its execution first reaches the
    instruction at `offset`, does what kiln's residual does at a graph
    break: packs the stack (its non-NULL slots) and the live bound locals,
    makes the resume function (fn's globals, closure = fn's frame cells then
    fn's closure cells) and returns what it returns. The reference for the
    shape of the residual; the split tests run it against `fn`.

    SplitNotAllowed when a live local may or may not be bound there (the
    residual must know statically)."""
    code = fn.__code__
    index = _check_target(code, offset)
    a = _analysis(code)
    kinds = a.shapes.get(offset)
    if kinds is None:
        raise SplitNotAllowed(f"offset {offset} is unreachable")
    if "Z" in kinds:
        raise SplitNotAllowed(f"offset {offset}: {_MAYBE_NULL_REFUSED}")
    if "M" in kinds:
        # The residual passes a method pair as (NULL, bound callable). Here
        # the stack holds the pair itself and bytecode cannot test a slot
        # for NULL, so this copy of fn makes its calls with (NULL, bound
        # method) throughout (_unpair_methods): the same calls. The resume
        # function still continues fn's original bytecode.
        template, shapes, where = a.unpaired()
        bc = template.copy()
        index = where[offset]
        target = bc.instrs[index]
        kinds = shapes[offset]
        if "M" in kinds:
            raise SplitNotAllowed(f"offset {offset}: a method pair after PRECALL on the stack "
                                  f"({''.join(kinds)}): which slot is NULL is only known at run time")
    else:
        bc = a.bc.copy()
        target = bc.instrs[index]
    live = live_locals_at(code, offset)
    definitely, maybe = bound_locals_at(code, offset)
    unsure = [n for n in live if n in maybe and n not in definitely]
    if unsure:
        raise SplitNotAllowed(f"offset {offset}: live locals {unsure} may or may not be bound")
    passed = [n for n in live if n in definitely]
    # The pairs are passed as a plain call's (T.CALL_PAIR); 3.10's copy has
    # one slot for each (no PUSH_NULL beside its attribute), which the
    # resume function makes a pair again.
    given = kinds if T.CALL_TAKES_NULL else \
        "".join(a.shapes[offset]).replace("MS", "".join(T.CALL_PAIR))
    resume = make_resume(code, offset, tuple(given), passed)
    info = resume_info(resume)

    temps = []
    taken = set(B.localsplus_names(code))
    for i in range(len(kinds)):
        n = f"___tmp{i}"
        while n in taken:
            n = "_" + n
        temps.append(n)
    new_varnames = list(code.co_varnames) + temps
    old_names = B.localsplus_names(code)
    new_names = B.new_localsplus(new_varnames, code.co_cellvars, code.co_freevars)
    B.relayout_locals(bc.instrs, old_names, new_names)
    slot = {n: i for i, n in reversed(list(enumerate(new_names)))}

    pos = target.positions
    consts = list(code.co_consts)
    noop_const, resume_const = len(consts), len(consts) + 1
    consts += [int, resume]
    I = lambda op, arg=None: B.Instr(op, arg, positions=pos)  # noqa: E731
    # 3.10: leave the try and with blocks first (the resume function pushes
    # them again), so that nothing the residual raises reaches a handler.
    res = [I("POP_BLOCK") for _ in a.blocks.get(offset, ())]
    for i in reversed(range(len(kinds))):
        if kinds[i] == "N":  # a NULL can only leave the stack through a call (of int(), here)
            res += [I("LOAD_CONST", noop_const)] + (emit(T.swap(2), pos) if T.CALL_PAIR[0] == "v" else [])
            res += emit(T.call(0), pos) + [I("POP_TOP")]
        else:
            res.append(I("STORE_FAST", slot[temps[i]]))
    make = []
    for n in info.freevars:
        make += emit(T.closure_load(B.free_slot(new_names, n)), pos)
    if info.freevars:
        make.append(I("BUILD_TUPLE", len(info.freevars)))
    qualname = _table_index(consts)(T.qualname(code))
    make += [I("LOAD_CONST", resume_const)] + emit(T.make_function(8 if info.freevars else 0, qualname), pos)
    res += make + null_beside(1, pos)
    by_param = {}
    names = iter(temps[i] for i, k in enumerate(kinds) if k != "N")
    for p in info.params:
        by_param[p] = p if p in passed else next(names)
    for p in info.params:
        res.append(I("LOAD_FAST", slot[by_param[p]]))
    res += emit(T.call(len(info.params)), pos) + [I("RETURN_VALUE")]

    # Everything that reached the target now reaches the residual; the
    # residual itself is outside every handler (the resume function ran the
    # handlers; what escapes it escapes fn).
    for ins in bc.instrs:
        if ins.target is target:
            ins.target = res[0]
    table = []
    pos_of = {ins: i for i, ins in enumerate(bc.instrs)}
    for e in bc.exc_table:
        if e.handler is target:
            e.handler = res[0]
        if pos_of[e.start] < index <= pos_of[e.end]:
            table.append(B.ExcEntry(e.start, bc.instrs[index - 1], e.handler, e.depth, e.lasti))
            table.append(B.ExcEntry(target, e.end, e.handler, e.depth, e.lasti))
        else:
            table.append(e)
    bc.exc_table = table
    bc.instrs[index:index] = res
    new = B.assemble(bc, co_varnames=tuple(new_varnames), co_nlocals=len(new_varnames),
                     co_consts=tuple(consts))
    out = types.FunctionType(new, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__qualname__ = fn.__qualname__
    return out

"""torch.compile(model, backend="kiln"): kiln's compiler behind Dynamo's
capture (issue 29).

Dynamo captures the program (its bytecode analysis, guards, graph breaks)
and hands each captured graph to a backend as an FX GraphModule of
torch-level calls plus example inputs. This backend compiles that graph
with kiln and returns a callable over torch tensors.

How a GraphModule becomes kiln code
-----------------------------------
Each FX node is classified against kiln's one torch-API table
(kiln/_torch_api.py, read here, never copied):

  * call_function on a torch object that is a row of FUNCTIONS
    (torch.relu, torch.nn.functional.layer_norm, torch._C._nn.linear, which
    is F.linear's own object, ...), on `operator.*` (a + b, x[i]), and an
    aten overload (aot_autograd's graphs) whose torch.<name> is a row or
    whose name is a tensor method kiln has (the table's own rule:
    TENSOR_METHODS, else the registry op of that name);
  * call_method on a tensor method kiln has (TENSOR_METHODS or a registry
    op);
  * get_attr (a tensor read once, at compile time), placeholders (tensors,
    and SymInt sizes of dynamic graphs), output.

Consecutive kiln nodes form a segment. A segment is emitted as a
straight-line Python function calling the very torch objects the graph
calls, and compiled by kiln.compile(fullgraph=True, backend="llvm"): kiln's
translator maps each torch object through the table (python/src/
convert.h's `op_function`), so `torch.relu` records kiln's relu, an adapter row is
inlined, and the LLVM backend compiles the graph. Tensors go in and out
zero-copy (python/src/torch_interop: kiln tensors over torch's memory,
results handed to torch through DLPack).

Why a Python function and not a hand-built kiln Graph: a third of the
table's rows are adapters or kiln.nn.functional functions written in
Python over kiln's ops (torch.add's alpha=, F.scaled_dot_product_attention,
...). Only kiln's translator can turn them into graph nodes, and it does
so exactly as for kiln.compile, so this backend and kiln.compile agree on
every row by construction.

Nodes kiln cannot lower never fail the compile: a node without a row is
split out and runs as torch eager (the FX node's own target), the reason
logged on the `kiln.dynamo` logger. A segment kiln's translator refuses
after all (an argument a row cannot take) is split in halves until the
refusing node runs eagerly on its own, its reason (kiln's error) logged.

Training: with grad mode on and an input that requires grad, the graph
goes through torch._dynamo.backends.common.aot_autograd, which hands kiln
a forward and a backward graph of aten ops (each compiled as above) and
wires them into torch's autograd, so loss.backward() fills the same .grad.

Dynamic shapes: a graph with symbolic sizes (Dynamo's automatic dynamic
shapes, or dynamic=True) is compiled with kiln's automatic dynamic shapes
(its first size traced as it is, the second marks the dims that changed
and gives the symbolic graph every later size runs), and each
SymInt placeholder whose symbol is a dimension of a tensor input is read
inside the kiln segment as that size (x.shape[d]) rather than passed as a
Python int: kiln makes it a symbol, so one kiln graph serves every size
Dynamo's guards admit.
"""
import builtins
import logging
import operator
import os
import sys

from . import _C, _torch_api

log = logging.getLogger("kiln.dynamo")

# ------------------------------------------------------------- options --

_OPTIONS = {"threads", "cache", "fullgraph"}
_applied = {}


def _apply_options(options):
    """inductor-style options. threads / cache are process-wide and read by
    kiln's C++ core when it first needs them (the thread pool at the first
    parallel kernel, the compile cache at the first LLVM compile), so they
    are set through the variables the core reads (KILN_NUM_THREADS,
    KILN_CACHE_DIR); a later, different value cannot move them and says so."""
    options = dict(options or {})
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(f"kiln backend: unknown options {sorted(unknown)}; known: {sorted(_OPTIONS)}")
    for key, var in (("threads", "KILN_NUM_THREADS"), ("cache", "KILN_CACHE_DIR")):
        if key not in options:
            continue
        value = options[key]
        if key == "threads":
            value = str(int(value))
        elif value is False or value is None:
            value = "off"
        elif value is True:
            value = os.environ.get(var, "") if os.environ.get(var, "") not in ("off", "0") else ""
        else:
            value = str(value)
        if key in _applied and _applied[key] != value:
            log.warning("kiln backend: option %s=%r ignored: kiln's core already runs with %r (it is read once "
                        "per process, before kiln's first compile)", key, options[key], _applied[key])
            continue
        _applied[key] = value
        if value:
            os.environ[var] = value
        else:
            os.environ.pop(var, None)
    return options


# ----------------------------------------------------- the table, derived --

_INFIX = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
    operator.mod: "%", operator.pow: "**", operator.matmul: "@", operator.and_: "&", operator.or_: "|",
    operator.xor: "^", operator.lshift: "<<", operator.rshift: ">>", operator.eq: "==", operator.ne: "!=",
    operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=",
}
_INPLACE = {
    operator.iadd: "+=", operator.isub: "-=", operator.imul: "*=", operator.itruediv: "/=",
    operator.ifloordiv: "//=", operator.imod: "%=", operator.ipow: "**=", operator.imatmul: "@=",
    operator.iand: "&=", operator.ior: "|=", operator.ixor: "^=",
}
# Methods whose result is data, not a tensor: a graph cannot carry them (in
# a kiln trace they are a break). Dynamo's dynamic graphs read module floats
# this way (`p.item()` of an unspecialised dropout p); they run first, on
# torch (_Plan.order).
_DATA_DEPENDENT = {"item", "tolist", "numpy"}
# Tensor methods that are a cast to a dtype kiln has: x.float() is
# x.to(torch.float32), which kiln's `to` row takes (rotary embeddings'
# inv_freq.float(), timm's efficientvit). x.int() (int32), x.half() stay
# torch's: kiln has no such dtype.
_CASTS = {"float": "float32", "double": "float64", "long": "int64", "bool": "bool"}
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~", operator.not_: "not "}


class _Table:
    """The torch objects kiln lowers, read off kiln/_torch_api.py once torch
    is imported (kiln never imports torch itself)."""

    def __init__(self, torch):
        self.torch = torch
        self.functions = {}  # torch object -> its row's path
        # TRACE_TIME rows too (torch._C._log_api_usage_once, torch._assert,
        # torch.jit.is_scripting, ...): Dynamo keeps a library's usage log
        # in its graph (torchvision's stochastic_depth), and kiln's
        # translator folds such a call when it traces the segment, as
        # kiln.compile does; as an eager node between segments it would cut
        # the graph at every block.
        for path in (*_torch_api.FUNCTIONS, *_torch_api.TRACE_TIME):
            obj = _torch_api._resolve(torch, path)
            if obj is not None:
                try:
                    self.functions.setdefault(obj, path)
                except TypeError:  # unhashable: never a call target
                    pass
        # torch.<name> for an ATEN row's name (torch.addmm: GPT-2's Conv1D,
        # torch.convolution, torch.rsub, ...): torch's function of that name
        # is aten's operator under aten's schema, so the row's adapter takes
        # its arguments as they are. Used by this backend only: kiln's
        # translator (kiln.compile) keeps to FUNCTIONS.
        self.aten_functions = {}
        for name, row in _torch_api.ATEN.items():
            obj = _torch_api._resolve(torch, f"torch.{name}")
            if obj is not None and obj not in self.functions and \
                    obj is getattr(torch._C._VariableFunctions, name, None):
                self.aten_functions[obj] = _torch_api._target(row)
        # C functions Dynamo calls where the user called a Python wrapper of
        # the same signature that is a row: F.pad is a Python function that
        # hands its arguments to torch._C._nn.pad, and Dynamo inlines it
        # (swin's window padding). Only those checked to share the
        # signature: torch._C._nn's mse_loss, say, takes reduction as an int
        # where F.mse_loss has size_average.
        self.aliases = {}
        for c_path, py_path in (("torch._C._nn.pad", "torch.nn.functional.pad"),):
            c_obj, py_obj = _torch_api._resolve(torch, c_path), _torch_api._resolve(torch, py_path)
            if c_obj is not None and py_obj in self.functions and c_obj not in self.functions:
                self.aliases[c_obj] = py_obj
        self.op_names = set(_C.op_names)
        self._aten = {}

    def method(self, name):
        """kiln has torch.Tensor.<name>: a TENSOR_METHODS row, or (the
        table's rule) a registry op of that name, or a method kiln tensors
        have (size, dim, contiguous, view, ...)."""
        return (name in _torch_api.TENSOR_METHODS or name in self.op_names
                or callable(getattr(_C.Tensor, name, None)))

    def aten(self, op):
        """An aten overload as the torch-level call kiln lowers: its ATEN
        row (aten's schema over kiln's ops), ("function", torch.<name>) when
        that is a row, ("method", name) when torch.Tensor
        has the method and kiln does (aten's schema is the method's, self
        first), else None."""
        hit = self._aten.get(op, False)
        if hit is not False:
            return hit
        name = op._schema.name.split("::")[-1]
        hit = None
        row = _torch_api.ATEN.get(name)
        obj = _torch_api._resolve(self.torch, f"torch.{name}")
        if row is not None:
            hit = ("function", _torch_api._target(row))
        elif obj is not None and obj in self.functions:
            hit = ("function", obj)
        elif getattr(self.torch.Tensor, name, None) is not None and (
                name in _torch_api.TENSOR_METHODS or name in self.op_names):
            hit = ("method", name)
        self._aten[op] = hit
        return hit


_TABLE = None


def _table():
    global _TABLE
    if _TABLE is None:
        _TABLE = _Table(sys.modules["torch"])
    return _TABLE


def _target_name(target):
    """A node target as the user spells it: torch.cumsum, not
    torch._VariableFunctionsClass.cumsum."""
    if isinstance(target, str):
        return target
    torch = sys.modules.get("torch")
    name = getattr(target, "__name__", None)
    if torch is not None and name:
        for prefix, namespace in (("torch", torch), ("torch.nn.functional", torch.nn.functional),
                                  ("torch.Tensor", torch.Tensor)):
            if getattr(namespace, name, None) is target:
                return f"{prefix}.{name}"
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    return f"{mod}.{name}" if mod else name


def _classify(node, table):
    """(how kiln runs the node, or None; why not). `how`: ("function", obj),
    ("method", name), ("cast", dtype), ("infix", sym), ("inplace", sym),
    ("unary", sym), ("getitem",), ("setitem",), ("getattr", name)."""
    torch = table.torch
    if node.op == "call_method":
        if node.target in _CASTS and len(node.args) == 1 and not node.kwargs:
            return ("cast", getattr(torch, _CASTS[node.target])), None
        if node.target in _DATA_DEPENDENT:
            return None, f"Tensor.{node.target} reads data out of a tensor: kiln keeps it out of its graphs"
        if table.method(node.target):
            return ("method", node.target), None
        return None, f"Tensor.{node.target} has no kiln lowering (no row in kiln/_torch_api.py, no registry op)"
    if node.op != "call_function":
        return None, f"{node.op} nodes run on torch"
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        hit = table.aten(t)
        if hit is not None:
            return hit, None
        return None, f"{t} has no kiln lowering (no ATEN or torch.{t._schema.name.split('::')[-1]} row in " \
                     f"kiln/_torch_api.py, no kiln tensor method of that name)"
    try:
        if t in table.functions:
            return ("function", t), None
        if t in table.aten_functions:
            return ("function", table.aten_functions[t]), None
        if t in table.aliases:
            return ("function", table.aliases[t]), None
    except TypeError:
        pass
    if t is operator.getitem:
        return ("getitem",), None
    if t is operator.setitem and len(node.args) == 3 and not node.kwargs:
        # x[i] = v as Python spells it: kiln's translator writes into a
        # tensor the segment made, and refuses one the caller owns (then
        # the node runs as torch eager, in its place).
        return ("setitem",), None
    if t is builtins.getattr and len(node.args) == 2 and isinstance(node.args[1], str):
        return ("getattr", node.args[1]), None
    for kinds, form in ((_INFIX, "infix"), (_INPLACE, "inplace"), (_UNARY, "unary")):
        if t in kinds:
            return (form, kinds[t]), None
    return None, f"{_target_name(t)} has no kiln lowering (no row in kiln/_torch_api.py)"


# ------------------------------------------------------------- codegen --

class _Emitter:
    """Straight-line Python source over FX nodes. Values that are not
    literals (torch objects, dtypes, floats like inf) become globals of the
    generated function: kiln reads a global torch object through the table
    by identity, exactly as in user code."""

    def __init__(self, torch, modules=None):
        self.torch = torch
        self.modules = modules or {}  # call_module node -> the submodule it calls
        self.globals = {"__builtins__": builtins}
        self.lines = []
        self._consts = {}

    def const(self, value):
        key = id(value)
        name = self._consts.get(key)
        if name is None:
            name = f"_k{len(self._consts)}"
            self._consts[key] = name
            self.globals[name] = value
        return name

    def arg(self, a, names):
        torch = self.torch
        fx = torch.fx
        if isinstance(a, fx.Node):
            return names[a]
        if isinstance(a, tuple):
            inner = ", ".join(self.arg(x, names) for x in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if isinstance(a, list):
            return "[" + ", ".join(self.arg(x, names) for x in a) + "]"
        if isinstance(a, slice):
            return f"slice({self.arg(a.start, names)}, {self.arg(a.stop, names)}, {self.arg(a.step, names)})"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{self.arg(k, names)}: {self.arg(v, names)}" for k, v in a.items()) + "}"
        if a is None or a is Ellipsis or isinstance(a, (bool, str)):
            return repr(a)
        if type(a) is int:
            return repr(a)
        if type(a) is float and a == a and a not in (float("inf"), float("-inf")):
            return repr(a)
        return self.const(a)

    def index(self, a, names):
        """A subscript in Python's syntax (x[:, :t]): kiln's translator
        reads BUILD_SLICE's bounds as sizes, symbols included, while a call
        of the builtin slice(None, t) would use t as a Python number and
        specialise the graph to it."""
        def part(x):
            if isinstance(x, slice):
                text = ":".join("" if b is None else self.arg(b, names) for b in (x.start, x.stop))
                return text if x.step is None else f"{text}:{self.arg(x.step, names)}"
            return "..." if x is Ellipsis else self.arg(x, names)
        if isinstance(a, tuple):
            return ", ".join(part(x) for x in a) + ("," if len(a) == 1 else "")
        return part(a)

    def call(self, node, how, names):
        """One line computing `node` the kiln way (`how` from _classify), or
        the eager way (how=None: the node's own target, as FX runs it)."""
        out = names[node]
        args = [self.arg(a, names) for a in node.args]
        kwargs = [f"{k}={self.arg(v, names)}" for k, v in node.kwargs.items()]
        if how is None:
            if node.op == "call_module":  # a leaf module Dynamo kept (not inlined): torch runs it
                self.lines.append(f"{out} = {self.const(self.modules[node])}({', '.join(args + kwargs)})")
            elif node.op == "call_method":
                self.lines.append(f"{out} = {args[0]}.{node.target}({', '.join(args[1:] + kwargs)})")
            else:
                self.lines.append(f"{out} = {self.const(node.target)}({', '.join(args + kwargs)})")
            return
        kind = how[0]
        if kind == "function":
            self.lines.append(f"{out} = {self.const(how[1])}({', '.join(args + kwargs)})")
        elif kind == "method":
            self.lines.append(f"{out} = {args[0]}.{how[1]}({', '.join(args[1:] + kwargs)})")
        elif kind == "infix":
            self.lines.append(f"{out} = ({args[0]}) {how[1]} ({args[1]})")
        elif kind == "inplace":
            self.lines.append(f"{out} = {args[0]}")
            self.lines.append(f"{out} {how[1]} {args[1]}")
        elif kind == "unary":
            self.lines.append(f"{out} = {how[1]}({args[0]})")
        elif kind == "getitem":
            self.lines.append(f"{out} = {args[0]}[{self.index(node.args[1], names)}]")
        elif kind == "cast":
            self.lines.append(f"{out} = {args[0]}.to({self.const(how[1])})")
        elif kind == "setitem":
            self.lines.append(f"{args[0]}[{self.index(node.args[1], names)}] = {args[2]}")
            self.lines.append(f"{out} = None")
        elif kind == "getattr":
            self.lines.append(f"{out} = {args[0]}.{how[1]}")

    def function(self, name, params, returns):
        src = [f"def {name}({', '.join(params)}):"]
        src += ["    " + line for line in self.lines]
        if returns is not None:  # None: the body returns itself
            src.append(f"    return ({', '.join(returns)}{',' if len(returns) == 1 else ''})")
        text = "\n".join(src) + "\n"
        code = compile(text, f"<kiln.dynamo {name}>", "exec")
        exec(code, self.globals)  # noqa: S102 - our own generated source
        fn = self.globals[name]
        fn.__kiln_source__ = text
        return fn


def _var(node):
    return f"v_{node.name}"


# -------------------------------------------------------------- segments --

class _Plan:
    """A GraphModule cut into steps: kiln segments and eager nodes."""

    def __init__(self, gm, example_inputs, name):
        import torch
        self.torch = torch
        self.gm = gm
        self.name = name
        table = _table()
        graph = gm.graph
        self.placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self.dynamic = _is_dynamic(self.placeholders)
        # A SymInt placeholder read as x.shape[d] inside kiln (a symbol, not a
        # guarded int), when its symbol is a dimension of a tensor input.
        self.sym_source = _symbol_sources(self.placeholders) if self.dynamic else {}
        self.attrs = {}
        self.modules = {}
        self.how = {}
        self.reasons = {}
        for n in graph.nodes:
            if n.op == "get_attr":
                self.attrs[n] = _fetch_attr(gm, n.target)  # read once
            elif n.op in ("call_function", "call_method", "call_module"):
                if n.op == "call_module":
                    self.modules[n] = gm.get_submodule(n.target)
                how, why = _classify(n, table)
                self.how[n] = how
                if how is None:
                    self.reasons[n] = why
        self.output = next(n for n in graph.nodes if n.op == "output")
        self.compute = [n for n in graph.nodes if n in self.how]
        self.eager_nodes = [n for n in self.compute if self.how[n] is None]
        for n in self.eager_nodes:
            log.info("kiln.dynamo: %s: node %s (%s) runs as torch eager: %s", name, n.name,
                     _target_name(n.target), self.reasons[n])
        self.segments = []
        self.refused = False  # kiln refused a node during the last call: _Driver re-plans

    def order(self):
        """The compute nodes as steps, in an order FX's allows: an eager
        node that reads only inputs (Dynamo's `.item()` of an unspecialized
        module float) moves first, so it does not cut a kiln segment in
        two; everything else keeps its place. Returns [(kind, [nodes])]."""
        before, rest = [], []
        mutated = False  # an in-place node ran: an input may hold new values from here on
        for n in self.compute:
            # A node that reads no node at all (torch.tensor([]) of a
            # constant) cannot see a write, so it moves first in any case.
            if (self.how[n] is None and _pure(n) and (not mutated or not n.all_input_nodes)
                    and all(a.op in ("placeholder", "get_attr") for a in n.all_input_nodes)):
                before.append(n)
            else:
                rest.append(n)
            mutated = mutated or not _pure(n) or (self.how[n] or ("",))[0] == "inplace"
        steps = [("eager", [n]) for n in before]
        run = []
        for n in rest:
            if self.how[n] is None:
                if run:
                    steps.append(("kiln", run))
                    run = []
                steps.append(("eager", [n]))
            else:
                run.append(n)
        if run:
            steps.append(("kiln", run))
        return steps

    def build(self):
        """The driver: a Python function over the graph's inputs that runs
        each step, kiln segments as compiled kiln functions."""
        torch = self.torch
        steps = self.order()
        position = {n: i for i, n in enumerate(self.gm.graph.nodes)}
        em = _Emitter(torch, self.modules)
        names = {n: _var(n) for n in self.gm.graph.nodes}
        params = [names[p] for p in self.placeholders]
        for n, value in self.attrs.items():
            em.lines.append(f"{names[n]} = {em.const(value)}")
        for kind, nodes in steps:
            if kind == "eager":
                em.call(nodes[0], None, names)
                continue
            seg = _Segment(self, nodes, position)
            self.segments.append(seg)
            slot = em.const(seg)
            ins = ", ".join(names[i] for i in seg.inputs)
            outs = [names[o] for o in seg.outputs]
            if outs:
                em.lines.append(f"({', '.join(outs)},) = {slot}({ins})")
            else:
                em.lines.append(f"{slot}({ins})")
            seg.slot = (em.globals, slot)
        # The output keeps FX's structure (a tuple, a list, a single value).
        em.lines.append(f"return {em.arg(self.output.args[0], names)}")
        fn = em.function("run", params, None)
        return fn


# Writes spelled as operator calls: Dynamo's graph of `x[i] = v` calls
# operator.setitem (no "_" to tell it by).
_WRITES = {operator.setitem, operator.delitem}


def _takes_inplace(target):
    import inspect
    try:
        return "inplace" in inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False


def _pure(node):
    """No in-place effect: torch's in-place methods and aten ops end in "_"
    (add_, aten.copy_), operator's in-place forms are iadd, imul, ..."""
    target = node.target
    if node.op == "call_module":
        return False  # a module may update its own state (BatchNorm's statistics)
    if target in _INPLACE or target in _WRITES:
        return False
    if node.kwargs.get("inplace") is True or node.kwargs.get("out") is not None:
        return False  # F.relu(x, inplace=True), torch.add(a, b, out=c)
    if node.op == "call_function" and _takes_inplace(target) and any(a is True for a in node.args[1:]):
        return False  # F.relu(x, True): a True in a function with an inplace flag may be it
    if not isinstance(target, str):
        target = getattr(target, "__name__", "")
    return not str(target).split(".")[0].endswith("_")


class _Segment:
    """Consecutive kiln nodes as one kiln-compiled function. Compiled on its
    first call (kiln traces with the call's real tensors, and a trace of
    the inputs Dynamo passed as examples would run the model once more: a
    BatchNorm in training would move its statistics twice)."""

    def __init__(self, plan, nodes, position):
        self.plan = plan
        self.nodes = nodes
        inside = set(nodes)
        ins, seen = [], set()
        for n in nodes:
            for a in n.all_input_nodes:
                if a not in inside and a not in seen:
                    seen.add(a)
                    ins.append(a)
        last = position[nodes[-1]]
        outs = []
        for n in nodes:
            if any(u not in inside and (position.get(u, last + 1) > last) for u in n.users):
                outs.append(n)
        # A SymInt input read as a size inside kiln: its tensor comes in instead.
        self.sym_reads = {}
        for a in list(ins):
            src = plan.sym_source.get(a)
            if src is not None:
                ins.remove(a)
                self.sym_reads[a] = src
                if src[0] not in ins:
                    ins.append(src[0])
        self.inputs, self.outputs = ins, outs
        self.slot = None
        self.compiled = None  # the kiln-compiled function, once it traced
        self.fn = self._function()

    def _function(self):
        em = _Emitter(self.plan.torch)
        names = {n: _var(n) for n in self.plan.gm.graph.nodes}
        for sym, (tensor, dim) in self.sym_reads.items():
            em.lines.append(f"{names[sym]} = {names[tensor]}.shape[{dim}]")
        for n in self.nodes:
            em.call(n, self.plan.how[n], names)
        return em.function(f"segment_{self.nodes[0].name}", [names[i] for i in self.inputs],
                           [names[o] for o in self.outputs])

    def __call__(self, *args):
        from . import _compile
        try:
            # A dynamic graph: kiln's automatic dynamic shapes (dynamic=None),
            # not dynamic=True, which would make every dim of every input a
            # symbol (the weights' too) and trace on guessed sizes; kiln
            # marks the dims that change, so its second size compiles the
            # graph every later size runs. A static graph: Dynamo guards its
            # sizes, kiln never needs a second entry (dynamic=False).
            compiled = _compile.compile(self.fn, backend="llvm", fullgraph=True,
                                        dynamic=None if self.plan.dynamic else False)
            out = compiled(*args)
        except Exception as e:  # noqa: BLE001 - any refusal: split, never fail the compile
            return self._split(args, e)
        self.compiled = compiled
        self._install(compiled)
        return out

    def _install(self, fn):
        g, slot = self.slot
        g[slot] = fn

    def _split(self, args, error):
        """kiln refused this segment: halves, down to the node that refuses,
        which runs as torch eager with kiln's error as its reason."""
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        plan = self.plan
        if len(self.nodes) == 1:
            n = self.nodes[0]
            plan.how[n] = None
            plan.reasons[n] = f"kiln refused it: {reason}"
            plan.refused = True
            log.info("kiln.dynamo: %s: node %s (%s) runs as torch eager: %s", plan.name, n.name,
                     _target_name(n.target), plan.reasons[n])
        else:
            log.debug("kiln.dynamo: %s: segment %s..%s split (%s)", plan.name, self.nodes[0].name,
                      self.nodes[-1].name, reason)
        position = {n: i for i, n in enumerate(plan.gm.graph.nodes)}
        em = _Emitter(plan.torch, plan.modules)
        names = {n: _var(n) for n in plan.gm.graph.nodes}
        for sym, (tensor, dim) in self.sym_reads.items():
            em.lines.append(f"{names[sym]} = {names[tensor]}.shape[{dim}]")
        if len(self.nodes) == 1:
            em.call(self.nodes[0], None, names)
        else:
            half = len(self.nodes) // 2
            for part in (self.nodes[:half], self.nodes[half:]):
                seg = _Segment(plan, part, position)
                plan.segments.append(seg)
                slot = em.const(seg)
                seg.slot = (em.globals, slot)
                outs = [names[o] for o in seg.outputs]
                call = f"{slot}({', '.join(names[i] for i in seg.inputs)})"
                em.lines.append(f"({', '.join(outs)},) = {call}" if outs else call)
        fn = em.function(f"split_{self.nodes[0].name}", [names[i] for i in self.inputs],
                         [names[o] for o in self.outputs])
        self._install(fn)
        return fn(*args)


def _fetch_attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _example(node):
    return node.meta.get("example_value", node.meta.get("val"))


def _is_symbolic(x, torch):
    if isinstance(x, torch.SymInt):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in x.shape)
    return False


def _is_dynamic(placeholders):
    import torch
    return any(_is_symbolic(_example(p), torch) for p in placeholders)


def _symbol_sources(placeholders):
    """SymInt placeholder -> (tensor placeholder, dim) whose size is exactly
    that symbol."""
    import torch
    dims = {}
    for p in placeholders:
        v = _example(p)
        if isinstance(v, torch.Tensor):
            for d, s in enumerate(v.shape):
                if isinstance(s, torch.SymInt):
                    dims.setdefault(str(s.node.expr), (p, d))
    out = {}
    for p in placeholders:
        v = _example(p)
        if isinstance(v, torch.SymInt) and str(v.node.expr) in dims:
            out[p] = dims[str(v.node.expr)]
    return out


# --------------------------------------------------------------- backend --

_plans = []  # the last compiled plans, newest last (tests and explain read them)
PLANS_KEPT = 64  # how many: a plan holds its GraphModule (the model zoo raises it to see every graph)


class _Driver:
    """What Dynamo calls: the plan's driver. A segment kiln refuses is
    halved down to the refusing node during the call (_Segment._split),
    which leaves the nodes around it in up to 2·log2(n) pieces; after such
    a call the plan is built again with the refused nodes as eager nodes, so
    the rest forms the longest segments again (compiled at the next call).
    It ends: each rebuild follows a call that found a new refused node."""

    def __init__(self, plan):
        self.plan = plan
        self.run = plan.build()

    def __call__(self, *args):
        out = self.run(*args)
        if self.plan.refused:
            self.plan.refused = False
            self.plan.segments = []
            self.run = self.plan.build()
            log.debug("kiln.dynamo: %s: re-planned around the refused nodes\n%s", self.plan.name,
                      self.run.__kiln_source__)
        return out


def _compile_graph(gm, example_inputs, name="graph"):
    plan = _Plan(gm, example_inputs, name)
    fn = _Driver(plan)
    _plans.append(plan)
    del _plans[:-PLANS_KEPT]
    log.debug("kiln.dynamo: %s: %d nodes, %d run as torch eager, dynamic=%s\n%s", name, len(plan.compute),
              len(plan.eager_nodes), plan.dynamic, fn.run.__kiln_source__)
    return fn


def _boxed(fn):
    """aot_autograd's calling convention: one list of inputs, which the
    callee may clear (so a backward frees activations early)."""
    def run(args):
        a = list(args)
        args.clear()
        return fn(*a)
    run._boxed_call = True
    return run


def kiln_backend(gm, example_inputs, **kwargs):
    """The `kiln` backend of torch.compile. kwargs: options= (a dict:
    threads, cache, fullgraph) and mode= (accepted, ignored), as
    torch.compile passes them."""
    options = _apply_options(kwargs.get("options"))
    import torch
    from . import _threads
    _threads.follow_torch()
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)
    if needs_grad:
        from torch._dynamo.backends.common import aot_autograd

        def fw(g, ex):
            return _boxed(_compile_graph(g, ex, "forward"))

        def bw(g, ex):
            return _boxed(_compile_graph(g, ex, "backward"))

        return aot_autograd(fw_compiler=fw, bw_compiler=bw)(gm, example_inputs)
    fn = _compile_graph(gm, example_inputs, "inference")
    if options.get("fullgraph") and _plans[-1].eager_nodes:
        n = _plans[-1].eager_nodes[0]
        raise RuntimeError(f"kiln backend (fullgraph): node {n.name} has no kiln lowering: {_plans[-1].reasons[n]}")
    return fn


def last_plans():
    """What the backend did for the graphs it compiled last: a list of dicts
    (name, nodes, eager: [(node, target, reason)], segments, dynamic).
    After a call in which kiln refused a node, the plan is rebuilt around
    it (_Driver): its segments are those of the next call, not compiled
    yet (compiled 0) until that call."""
    return [{
        "name": p.name,
        "nodes": len(p.compute),
        "eager": [(n.name, _target_name(n.target), p.reasons[n]) for n in p.compute if p.how.get(n) is None],
        "segments": len(p.segments),
        # segments kiln compiled (the rest were split or not called yet)
        "compiled": sum(s.compiled is not None for s in p.segments),
        "kiln_nodes": sum(len(s.nodes) for s in p.segments if s.compiled is not None),
        "dynamic": p.dynamic,
    } for p in _plans]

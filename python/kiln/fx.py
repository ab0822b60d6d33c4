"""kiln.fx: torch.fx's symbolic_trace, Tracer, Graph and GraphModule on
kiln's translator (interpreter/symbolic_trace.h).

    gm = kiln.fx.symbolic_trace(model, kiln.randn(2, 8))
    gm.graph.print_tabular()
    print(gm.code)
    y = gm(x)

    class MyTracer(kiln.fx.Tracer):
        def is_leaf_module(self, m, module_qualified_name):
            return isinstance(m, Block) or super().is_leaf_module(m, module_qualified_name)
    graph = MyTracer().trace(model, x)
    gm = kiln.fx.GraphModule(model, graph)

Differences from torch.fx:
- kiln runs its ordinary translator over the module call, so every node
  has a shape and dtype. With example inputs (one per forward argument)
  the graph is typed with their shapes and dtypes (their values are not
  read). Without them (`symbolic_trace(model)`), forward's arguments
  without defaults are tensors of symbolic size: the smallest rank that
  traces, sizes the model's ops require learned (a Linear's in_features
  becomes a static 8, a batch stays s0), int64 where the model indexes
  with them; `gm.graph.shape_guards` lists what the trace assumed.
  Python control flow on shapes and constants is evaluated; a branch on a
  tensor's value, print, or any other graph break is an error naming it.
- A GraphModule checks its inputs against what its graph was traced for
  (dtypes, ranks, static sizes, the relations of shape_guards); inputs
  that differ are traced again, with symbolic sizes, and that graph is
  kept for the next such call (a GraphModule over another root raises
  instead, naming the difference).
- `node.target` is the qualified path (get_attr, call_module), the kiln op
  function (call_function, e.g. `kiln.linear`), the method name
  (call_method) or the input name (placeholder); `node.target_str` is the
  text in every case.
- The root is never a leaf and is_leaf_module is never asked about it (its
  forward is what is traced, a built-in's too), as in torch.fx.
"""
import inspect
import keyword

from . import _C, _frontend_opcodes
from . import nn as _nn
from ._functions import _as_kbc

__all__ = ["symbolic_trace", "Tracer", "Graph", "GraphModule", "Node"]

Node = _C.FxNode
Node.__doc__ = """A node of a kiln graph: .op (placeholder, get_attr, call_function,
call_module, call_method, output), .name, .target, .args, .kwargs, .users, .meta."""


def _node_target(self):
    t = self.target_str
    if self.op == "call_function" and t in _OP_NAMES:
        return getattr(_C, t)  # the same object as kiln.<op>
    return t


_OP_NAMES = frozenset(_C.op_names)
Node.target = property(_node_target, doc="get_attr / call_module: the qualified path; call_function: the "
                                         "kiln op (kiln.linear); call_method: the method name; placeholder: "
                                         "the input name; output: 'output'.")


class Graph:
    """The nodes a trace recorded, in topological order (placeholders first,
    output last)."""

    def __init__(self, _graph, owning_module=None, _tensor_positions=None, _num_examples=None, _constants=None,
                 _retrace=None):
        self._c = _graph
        self.owning_module = owning_module
        self._tensor_positions = _tensor_positions  # which trace arguments became placeholders
        self._num_examples = _num_examples
        self._constants = _constants or {}  # the other trace arguments: baked into the graph
        self._retrace = _retrace  # (tracer, root): traces owning_module again for other inputs
        self._nodes = None

    @property
    def nodes(self):
        # Kept, so that a node reached through another's args is the same object.
        if self._nodes is None:
            self._nodes = self._c.nodes
        return list(self._nodes)

    def print_tabular(self):
        """Prints FX's table (opcode | name | target | args | kwargs | meta), as torch.fx does."""
        print(self._c.print_tabular(), end="")

    def tabular(self):
        """The table print_tabular prints, as a string."""
        return self._c.print_tabular()

    def python_code(self):
        """The Python-like view of the graph (what GraphModule.code shows)."""
        return self._c.code()

    def op_count(self):
        """The number of call_* nodes."""
        return self._c.op_count()

    @property
    def shape_guards(self):
        """What the trace assumed of its symbolic sizes (["s0 <= 128"]): the graph computes what the root
        does for inputs where these hold (a GraphModule checks them)."""
        return self._c.shape_guards

    def __str__(self):
        return self._c.code()

    def __repr__(self):
        return f"<kiln.fx.Graph: {len(self.nodes)} nodes, {self.op_count()} ops>"


def _input_names(root):
    """forward's positional parameter names after self, whether it takes
    *args, and how many of them have no default."""
    try:
        sig = inspect.signature(type(root).forward)
    except (TypeError, ValueError):
        return [], True, 0
    names, var, required = [], False, 0
    for i, p in enumerate(sig.parameters.values()):
        if i == 0 and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            continue  # self
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
            if p.default is p.empty:
                required += 1
        elif p.kind == p.VAR_POSITIONAL:
            var = True
            break
    return names, var, required


def _usable_name(n):
    return n.isidentifier() and not keyword.iskeyword(n) and n not in ("self", "kiln")


class Tracer:
    """The policy of a trace, overridable as in torch.fx:

    is_leaf_module(m, module_qualified_name) -> bool: a leaf is one
        call_module node; anything else is traced through. Default: kiln's
        built-in modules (Linear, ReLU, ...) are leaves, the containers
        (Sequential, ModuleList, ModuleDict) and user modules are not.
    path_of_module(m) -> str: a call_module node's target. Default: the
        qualified name from the root ("blocks.1.fc"); a module that is not a
        descendant of the root is a ValueError.

    A method a subclass does not override costs no Python call per module.
    """

    def __init__(self):
        self.root = None
        self._state = None        # the C++ policy while trace() runs
        self._path_state = None   # path_of_module's walk of self.root after it

    def is_leaf_module(self, m, module_qualified_name):
        if self._state is not None:
            return self._state.default_is_leaf_module(m, module_qualified_name)
        return _C.fx_default_is_leaf_module(m, module_qualified_name)

    def path_of_module(self, mod):
        state = self._state
        if state is None:
            if self.root is None:
                raise RuntimeError("Tracer.path_of_module needs a root: call trace(root, *example_inputs) first")
            if self._path_state is None or self._path_state[0] is not self.root:
                self._path_state = (self.root, _C.FxTracer(self.root, None, False, False))
            state = self._path_state[1]
        return state.default_path_of_module(mod)

    def trace(self, root, *example_inputs):
        """Traces root(*example_inputs) into a Graph (the examples' shapes and
        dtypes type it; their values are not used). Without examples, forward's
        arguments without defaults are tensors of symbolic size (see the module
        docstring)."""
        _frontend_opcodes.require()
        return self._trace(root, example_inputs, dynamic=False)

    def _trace(self, root, example_inputs, dynamic):
        if not isinstance(root, _nn.Module):
            raise TypeError(f"kiln.fx: trace expects a kiln.nn.Module, got {type(root).__name__}")
        names, var, required = _input_names(root)
        free = not example_inputs
        if free and var:
            raise TypeError(f"kiln.fx: {type(root).__name__}.forward takes *args: how many inputs it has is not "
                            f"known without example inputs; pass them: kiln.fx.symbolic_trace(model, x, ...)")
        if free:
            names = names[:required]
        self.root = root
        self._path_state = None
        cls = type(self)
        leaf = cls.is_leaf_module is not Tracer.is_leaf_module
        path = cls.path_of_module is not Tracer.path_of_module
        count = len(names) if free else len(example_inputs)
        input_names = [n if _usable_name(n) else "" for n in names[:count]]
        input_names += [""] * (count - len(input_names))
        # The methods were translated when their classes were made; their
        # modules' globals may have changed since (a function defined after
        # a class): one check per module, not a walk over the tree.
        _C.sync_python_state()
        # The default policy is C++'s own (no per-module cost) unless the
        # root is a built-in leaf: torch.fx traces the root's forward anyway.
        custom = leaf or path or _C.fx_default_is_leaf_module(root, "")
        state = _C.FxTracer(root, self, leaf, path) if custom else None
        self._state = state
        try:
            if free:
                c = _C.fx_trace_without_examples(root, count, state, input_names)
            else:
                c = _C.fx_trace(root, tuple(example_inputs), state, input_names, dynamic)
        finally:
            self._state = None
            if state is not None:
                state.release()
        if free:
            return Graph(c, owning_module=root, _tensor_positions=list(range(count)), _num_examples=count,
                         _retrace=(self, root))
        positions = [i for i, x in enumerate(example_inputs) if _is_tensor(x)]
        constants = {i: x for i, x in enumerate(example_inputs) if not _is_tensor(x)}
        return Graph(c, owning_module=root, _tensor_positions=positions, _num_examples=len(example_inputs),
                     _constants=constants, _retrace=(self, root))


def _is_tensor(x):
    if isinstance(x, _C.Tensor):
        return True
    try:
        import numpy as np
        return isinstance(x, np.ndarray)
    except ImportError:
        return False


def _resolve(root, target):
    if isinstance(root, dict):
        if target not in root:
            raise AttributeError(f"GraphModule: the graph reads '{target}', which the root dict does not have")
        return root[target]
    obj = root
    for part in target.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(f"GraphModule: the graph reads '{target}', but {type(root).__name__} has no "
                                 f"attribute '{part}' there") from None
    return obj


class GraphModule:
    """A graph with the module it reads attributes from: `.graph`, `.code`,
    and callable (runs the graph on kiln's eager backend).

    GraphModule(root, graph): root is the traced module (its tensors and
    submodules are used as they are), another module with the same paths,
    or a dict mapping each get_attr / call_module target to its value."""

    def __init__(self, root, graph, class_name="GraphModule"):
        if not isinstance(graph, Graph):
            raise TypeError(f"GraphModule expects a kiln.fx.Graph, got {type(graph).__name__}")
        if not (isinstance(root, (_nn.Module, dict))):
            raise TypeError(f"GraphModule: root must be a kiln.nn.Module or a dict, got {type(root).__name__}")
        if root is not graph.owning_module:
            attrs = {}
            for n in graph.nodes:
                if n.op in ("get_attr", "call_module"):
                    attrs[n.target_str] = _resolve(root, n.target_str)
            graph = Graph(_C.fx_rebind(graph._c, attrs), owning_module=root if isinstance(root, _nn.Module) else None,
                          _tensor_positions=graph._tensor_positions, _num_examples=graph._num_examples,
                          _constants=graph._constants)
        d = self.__dict__
        d["graph"] = graph
        d["root"] = root
        d["_run"] = _C.fx_runner(graph._c)
        d["_class_name"] = class_name
        d["_retraced"] = []  # (graph, runner) traced for inputs the graph was not, newest last

    @property
    def code(self):
        """The Python-like code of the graph: def forward(self, ...): ..."""
        return self.graph.python_code()

    def forward(self, *args):
        run = self._run
        positions = self.graph._tensor_positions
        if (positions is not None and len(args) == self.graph._num_examples
                and len(positions) != len(args)):
            # Called like the root: the tensors are the graph's inputs; the
            # other arguments were constants of the trace and must match.
            for i, want in self.graph._constants.items():
                got = args[i]
                if not (got is want or (type(got) is type(want) and got == want)):
                    raise ValueError(f"{self._class_name}: argument {i} was traced as the constant {want!r}, "
                                     f"got {got!r} (trace again with this value)")
            args = tuple(args[i] for i in positions)
        why = _C.fx_input_mismatch(self.graph._c, args)
        if why:
            run = self._run_for(args, why)
        outs = run(*args)
        return outs[0] if len(outs) == 1 else tuple(outs)

    _MAX_RETRACED = 8

    def _run_for(self, args, why):
        """The runner of a graph traced for these inputs: one traced before, or
        a new trace of the root with symbolic sizes (the graph's own inputs
        differ: `why`)."""
        retraced = self._retraced
        for k, (g, r) in enumerate(retraced):
            if not _C.fx_input_mismatch(g, args):
                retraced.append(retraced.pop(k))
                return r
        retrace = self.graph._retrace
        if retrace is None:
            raise ValueError(f"{self._class_name}: the graph was traced for other inputs: {why}; trace the module "
                             f"again with these inputs")
        tracer, root = retrace
        try:
            g = tracer._trace(root, args, dynamic=True)._c
        except RuntimeError:
            # The model may raise for these inputs (a size check): then that
            # error, exactly, is the call's. Otherwise the trace's.
            root(*args)
            raise
        r = _C.fx_runner(g)
        retraced.append((g, r))
        if len(retraced) > self._MAX_RETRACED:
            retraced.pop(0)
        return r

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(f"{self._class_name} takes positional inputs only, got keywords {sorted(kwargs)}")
        return self.forward(*args)

    def print_readable(self):
        print(self.code, end="")

    def __getattr__(self, name):  # the root's attributes, as torch's GraphModule has copies of them
        if name.startswith("__"):
            raise AttributeError(name)
        root = self.__dict__.get("root")
        if isinstance(root, _nn.Module):
            return getattr(root, name)
        raise AttributeError(f"'{self._class_name}' object has no attribute '{name}'")

    def __repr__(self):
        body = "\n".join("  " + line for line in self.code.rstrip("\n").split("\n"))
        return f"{self._class_name}(\n{body}\n)"

    def __str__(self):
        return self.code


def _captured(graph_c):
    """A GraphModule for a graph kiln.explain captured: its get_attr targets
    are the graph's own attributes (the tensors the trace registered), and
    its inputs are the graph's placeholders, in order."""
    gm = GraphModule.__new__(GraphModule)
    d = gm.__dict__
    d["graph"] = Graph(graph_c)
    d["root"] = None
    d["_run"] = _C.fx_runner(graph_c)
    d["_class_name"] = "GraphModule"
    d["_retraced"] = []
    return gm


def symbolic_trace(root, *example_inputs, tracer=None):
    """torch.fx.symbolic_trace for kiln.nn modules: traces root(*example_inputs)
    and returns a GraphModule. Without example inputs, forward's arguments
    are tensors of symbolic size (see the module docstring). tracer: a
    kiln.fx.Tracer (default Tracer())."""
    tracer = Tracer() if tracer is None else tracer
    graph = tracer.trace(root, *example_inputs)
    return GraphModule(root, graph, type(root).__name__)

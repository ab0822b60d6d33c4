"""kiln.fx: symbolic_trace, Tracer overrides (leaves and paths), Graph,
Node and GraphModule, as torch.fx has them."""
import numpy as np
import pytest

import kiln
from kiln_testing import close
from kiln import fx, nn

OPS = {"placeholder", "get_attr", "call_function", "call_module", "call_method", "output"}


# (Fx-prefixed names: readable in failures beside test_nn's Block/Net.)
class FxBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.act = nn.ReLU()
        self.gain = nn.Parameter(kiln.ones(d))

    def forward(self, x):
        return self.act(self.fc(x)) * self.gain + x


class FxNet(nn.Module):
    def __init__(self, d=8, depth=2):
        super().__init__()
        self.blocks = nn.Sequential(*[FxBlock(d) for _ in range(depth)])
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        return self.head(self.blocks(x))


def targets(graph, op):
    return [n.target for n in graph.nodes if n.op == op]


def test_symbolic_trace_records_paths_attrs_placeholders_and_output():
    net = FxNet()
    x = kiln.randn(3, 8)
    gm = fx.symbolic_trace(net, x)
    assert isinstance(gm, fx.GraphModule) and isinstance(gm.graph, fx.Graph)
    nodes = gm.graph.nodes
    assert all(isinstance(n, fx.Node) and n.op in OPS for n in nodes)
    assert nodes[0].op == "placeholder" and nodes[0].name == "x" and nodes[0].target == "x"
    assert nodes[-1].op == "output"
    assert targets(gm.graph, "call_module") == ["blocks.0.fc", "blocks.0.act", "blocks.1.fc", "blocks.1.act", "head"]
    assert targets(gm.graph, "get_attr") == ["blocks.0.gain", "blocks.1.gain"]
    # call_function targets are kiln's op functions; target_str is their name.
    funcs = [n for n in nodes if n.op == "call_function"]
    assert [n.target_str for n in funcs] == ["mul", "add", "mul", "add"]
    assert funcs[0].target is kiln.mul
    # args: other nodes as the same Node objects, constants as Python values.
    first_fc = next(n for n in nodes if n.op == "call_module")
    assert first_fc.args == (nodes[0],) and first_fc.args[0] is nodes[0]
    assert first_fc.kwargs == {}
    assert first_fc in nodes[0].users
    head = next(n for n in nodes if n.target == "head")
    assert nodes[-1].args == (head,)
    assert head.meta["shape"] == (3, 4) and head.meta["dtype"] == "float32"
    assert nodes[-1].meta == {}


def test_graph_module_equals_the_model():
    net = FxNet()
    x = kiln.randn(3, 8)
    gm = fx.symbolic_trace(net, x)
    assert close(gm(x), net(x))
    x2 = kiln.randn(3, 8)
    assert close(gm(x2), net(x2))  # the graph, not a recording of x
    assert close(gm.forward(x2), net(x2))
    assert gm.blocks is net.blocks  # the root's attributes, as torch's GraphModule


def test_graph_module_wraps_a_tracer_graph_and_rebinds_to_another_root():
    net, other = FxNet(), FxNet()
    x = kiln.randn(2, 8)
    tracer = fx.Tracer()
    graph = tracer.trace(net, x)
    assert tracer.root is net
    gm = fx.GraphModule(net, graph)
    assert gm.graph is graph
    assert close(gm(x), net(x))
    # A different root with the same paths: its own parameters are used.
    gm2 = fx.GraphModule(other, graph)
    assert close(gm2(x), other(x)) and not close(gm2(x), net(x))
    assert [n.name for n in gm2.graph.nodes] == [n.name for n in graph.nodes]
    with pytest.raises(AttributeError, match="blocks"):
        fx.GraphModule(FxBlock(8), graph)


def test_no_leaves_traces_linear_into_get_attr_and_call_function():
    class NoLeaves(fx.Tracer):
        def __init__(self):
            super().__init__()
            self.asked = []

        def is_leaf_module(self, m, module_qualified_name):
            self.asked.append((type(m).__name__, module_qualified_name))
            return False

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x)

    model = Wrap()
    x = kiln.randn(2, 8)
    tracer = NoLeaves()
    graph = tracer.trace(model, x)
    assert [(n.op, n.target_str) for n in graph.nodes] == [
        ("placeholder", "x"), ("get_attr", "fc.weight"), ("get_attr", "fc.bias"), ("call_function", "linear"),
        ("output", "output")]
    lin = graph.nodes[3]
    assert lin.target is kiln.linear
    assert lin.args[:3] == (graph.nodes[0], graph.nodes[1], graph.nodes[2])
    assert ("Linear", "fc") in tracer.asked
    assert all(name != "" for _, name in tracer.asked)  # the root is never asked
    assert close(fx.GraphModule(model, graph)(x), model(x))

    # The whole model: every Linear and ReLU becomes ops.
    net = FxNet()
    g = NoLeaves().trace(net, x)
    assert targets(g, "call_module") == []
    assert "blocks.1.fc.weight" in targets(g, "get_attr")
    assert [n.target_str for n in g.nodes if n.op == "call_function"].count("linear") == 3
    assert close(fx.GraphModule(net, g)(x), net(x))


def test_a_user_module_made_a_leaf_is_one_call_module_node():
    class BlocksAreLeaves(fx.Tracer):
        def is_leaf_module(self, m, module_qualified_name):
            return isinstance(m, FxBlock) or super().is_leaf_module(m, module_qualified_name)

    net = FxNet(depth=3)
    x = kiln.randn(2, 8)
    graph = BlocksAreLeaves().trace(net, x)
    assert targets(graph, "call_module") == ["blocks.0", "blocks.1", "blocks.2", "head"]
    assert targets(graph, "get_attr") == []
    leaf = graph.nodes[1]
    assert leaf.meta["shape"] == (2, 8)
    assert close(fx.GraphModule(net, graph)(x), net(x))


def test_path_of_module_override_changes_call_module_targets():
    class Prefixed(fx.Tracer):
        def path_of_module(self, mod):
            return "model." + super().path_of_module(mod)

    net = FxNet()
    x = kiln.randn(2, 8)
    tracer = Prefixed()
    graph = tracer.trace(net, x)
    assert targets(graph, "call_module") == ["model.blocks.0.fc", "model.blocks.0.act", "model.blocks.1.fc",
                                             "model.blocks.1.act", "model.head"]
    # Leaves are still the default's, and get_attr paths are the attributes'.
    assert targets(graph, "get_attr") == ["blocks.0.gain", "blocks.1.gain"]
    gm = fx.GraphModule(net, graph)
    assert "self.model.head(" in gm.code
    assert close(gm(x), net(x))
    # After the trace, the default answers from the root's tree.
    assert tracer.path_of_module(getattr(net.blocks, "1").fc) == "model.blocks.1.fc"
    assert fx.Tracer.path_of_module(tracer, getattr(net.blocks, "1").fc) == "blocks.1.fc"


def test_a_path_that_is_not_a_str_is_a_type_error():
    class Bad(fx.Tracer):
        def path_of_module(self, mod):
            return 3

    with pytest.raises(TypeError, match="path_of_module must return a str"):
        Bad().trace(FxNet(), kiln.randn(2, 8))


def test_an_exception_in_an_override_comes_back_as_itself():
    class Boom(Exception):
        pass

    class Raising(fx.Tracer):
        def is_leaf_module(self, m, module_qualified_name):
            if module_qualified_name == "blocks.1.fc":
                raise Boom("no")
            return super().is_leaf_module(m, module_qualified_name)

    with pytest.raises(Boom, match="no"):
        Raising().trace(FxNet(), kiln.randn(2, 8))


def test_print_tabular_prints_the_nodes(capsys):
    gm = fx.symbolic_trace(FxNet(), kiln.randn(2, 8))
    assert gm.graph.print_tabular() is None
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split(" | ")[:5] == ["opcode", "name", "target", "args", "kwargs"] or \
        [c.strip() for c in lines[0].split("|")][:5] == ["opcode", "name", "target", "args", "kwargs"]
    for text in ("placeholder", "get_attr", "call_module", "call_function", "output", "blocks.1.fc",
                 "blocks.0.gain", "head"):
        assert text in out
    assert len(lines) == 2 + len(gm.graph.nodes)


def test_code_is_a_python_like_forward():
    gm = fx.symbolic_trace(FxNet(), kiln.randn(2, 8))
    code = gm.code
    assert "def forward(self, x)" in code
    assert "self.blocks.0.fc(x)" in code
    assert "return " in code
    assert "def forward" in str(gm.graph) and "GraphModule" not in repr(gm.graph)
    assert repr(gm).startswith("FxNet(")


class VarArgs(nn.Module):
    def forward(self, *xs):
        return xs[0]


def test_without_examples_forward_must_say_how_many_inputs():
    with pytest.raises(TypeError, match=r"takes \*args.*pass them: kiln.fx.symbolic_trace\(model, x"):
        fx.symbolic_trace(VarArgs())
    with pytest.raises(TypeError, match="kiln.nn.Module"):
        fx.symbolic_trace(lambda x: x, kiln.randn(2))


def test_a_graph_called_with_other_sizes_than_its_examples_is_traced_again():
    # The graph is typed with the examples' sizes; other inputs are not
    # run through it as they are (a view would bake the wrong size in).
    m = ShapeGate()
    gm = fx.symbolic_trace(m, kiln.randn(3, 4))
    for n in (5, 2, 7):
        x = kiln.randn(n, 4)
        assert close(gm(x), m(x))
    assert len(gm._retraced) == 2  # dynamic for n > 2, and the branch n == 2 takes


def test_a_graph_rebound_to_another_root_names_the_difference_of_its_inputs():
    gm = fx.symbolic_trace(FxNet(), kiln.randn(2, 8))
    other = fx.GraphModule(FxNet(), gm.graph)
    assert other(kiln.randn(2, 8)).shape == (2, 4)
    with pytest.raises(ValueError, match=r"traced for other inputs: input 0 \(x\) has size 3 at dim 0, traced as 2"):
        other(kiln.randn(3, 8))


_stranger = nn.ReLU()


class UsesStranger(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return _stranger(self.fc(x))


def test_a_module_outside_the_root_is_a_clear_error():
    with pytest.raises(ValueError, match="not a submodule of the root UsesStranger"):
        fx.symbolic_trace(UsesStranger(), kiln.randn(2, 4))
    tracer = fx.Tracer()
    net = FxNet()
    tracer.trace(net, kiln.randn(2, 8))
    with pytest.raises(ValueError, match="not a submodule of the root FxNet"):
        tracer.path_of_module(nn.ReLU())


class FxGate(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x
        return -x


class ShapeGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[0] > 2:
            return self.fc(x)
        return x * 2


def test_data_dependent_control_flow_is_a_clear_error():
    with pytest.raises(RuntimeError, match="symbolic_trace of FxGate cannot continue.*value of a tensor"):
        fx.symbolic_trace(FxGate(), kiln.randn(3, 4))


def test_control_flow_on_shapes_is_evaluated_on_the_examples():
    m = ShapeGate()
    big = fx.symbolic_trace(m, kiln.randn(3, 4))
    small = fx.symbolic_trace(m, kiln.randn(2, 4))
    assert targets(big.graph, "call_module") == ["fc"]
    assert targets(small.graph, "call_module") == [] and "mul" in [n.target_str for n in small.graph.nodes]
    x = kiln.randn(2, 4)
    assert close(small(x), m(x))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, y, scale):
        return self.fc(x) * scale + y, y


def test_several_inputs_constants_and_tuple_outputs():
    m = TwoInputs()
    x, y = kiln.randn(2, 4), np.ones((2, 4), dtype=np.float32)
    gm = fx.symbolic_trace(m, x, y, 0.5)
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert [n.name for n in ph] == ["x", "y"]
    assert "def forward(self, x, y)" in gm.code
    mul = next(n for n in gm.graph.nodes if n.target_str == "mul")
    assert 0.5 in mul.args
    out, same = gm(x, y, 0.5)
    want, _ = m(x, y, 0.5)
    assert close(out, want) and close(same, y)
    out2, _ = gm(x, y)  # the tensor inputs alone work too
    assert close(out2, want)
    with pytest.raises(ValueError, match="argument 2 was traced as the constant 0.5"):
        gm(x, y, 0.75)


def test_a_built_in_root_is_traced_through_as_in_torch_fx():
    lin = nn.Linear(8, 3)
    x = kiln.randn(2, 8)
    gm = fx.symbolic_trace(lin, x)
    assert [(n.op, n.target_str) for n in gm.graph.nodes] == [
        ("placeholder", "input"), ("get_attr", "weight"), ("get_attr", "bias"), ("call_function", "linear"),
        ("output", "output")]
    assert close(gm(x), lin(x))


def test_traced_modules_graphs_and_tracers_are_freed():
    import gc
    import weakref

    class Prefixed(fx.Tracer):
        def path_of_module(self, mod):
            return "p." + super().path_of_module(mod)

    net, x, tracer = FxNet(), kiln.randn(2, 8), Prefixed()
    gm = fx.GraphModule(net, tracer.trace(net, x))
    gm(x)
    args = gm.graph.nodes[2].args
    refs = [weakref.ref(o) for o in (net, tracer, gm, gm.graph)]
    del net, tracer, gm, args
    gc.collect()
    assert [r() for r in refs] == [None] * 4


def _pick(xs, i):
    try:
        return xs[i]
    except IndexError:
        return 0.5


class PicksWithAHandler(nn.Module):
    """A helper whose handler catches what it raises: traced through, as
    CPython runs it (symbolic_trace has no CPython to leave it to)."""

    def forward(self, x):
        return x * _pick([2.0, 3.0], 1) + _pick([2.0], 4)


def test_symbolic_trace_goes_through_a_handler_of_an_inlined_function():
    net = PicksWithAHandler()
    x = kiln.randn(3, 4)
    gm = fx.symbolic_trace(net, x)
    close(gm(x), net(x))
    assert [n.target_str for n in gm.graph.nodes if n.op == "call_function"] == ["mul", "add"]

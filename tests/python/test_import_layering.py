"""The import graph of python/kiln is a DAG, in the documented order.

Read from the sources with `ast`, without importing anything: every import
statement counts, at module level or inside a function (a function-local
import is still an edge), and so do `__import__("kiln...")` and
`importlib.import_module("kiln...")` with a literal name. `from . import x`
is an edge to kiln.x when x is a module (else to the package it names),
and the `kiln` package itself is kiln/__init__.py, which imports everything.
Importing a submodule implicitly runs its parents' __init__; that is
Python's package mechanism, not an edge of the module, and is not counted.

The order is the numbered list under "python/kiln import order" in
docs/architecture.md: a module may import only modules on lines above its
own.
"""
import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "kiln"
DOC = REPO / "docs" / "architecture.md"
EXTENSIONS = ("kiln._C",)  # compiled modules: nodes without Python sources


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def read_package(root: Path = PACKAGE) -> dict:
    """{module name: (source, is a package)} for every .py under root."""
    return {module_name(p, root): (p.read_text(), p.name == "__init__.py")
            for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


def import_graph(sources: dict, top: str = "kiln", extensions=EXTENSIONS) -> dict:
    """{importer: {imported: [line, ...]}} over the modules of `sources`
    ({name: (text, is_package)}) and the extension modules."""
    known = set(sources) | set(extensions)

    graph = {m: {} for m in known}

    def add(src, name, line):
        if name != top and not name.startswith(top + "."):
            return
        assert name in known, f"{src}:{line}: import of {name}, which is not a module of {top}"
        graph[src].setdefault(name, []).append(line)

    for mod, (text, is_package) in sources.items():
        package = mod if is_package else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(text, filename=mod)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(mod, alias.name, node.lineno)
                    if alias.asname is None and "." in alias.name:
                        add(mod, alias.name.split(".")[0], node.lineno)  # `import kiln.x` binds kiln
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    add(mod, sub if sub in known else base, node.lineno)
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in ("__import__", "import_module"):
                    add(mod, node.args[0].value, node.lineno)
    return graph


def cycles(graph: dict) -> list:
    """One cycle (a list of modules, first == last) per strongly connected
    component that has one (Tarjan's algorithm, then a path inside it)."""
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []

    def strongconnect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            sccs.append(set(scc))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    found = []
    for scc in sccs:
        start = min(scc)
        if len(scc) == 1 and start not in graph[start]:
            continue
        # Breadth-first from start back to start, inside the component.
        paths, seen = {start: [start]}, set()
        queue = [start]
        while queue:
            v = queue.pop(0)
            for w in sorted(graph[v]):
                if w == start:
                    found.append(paths[v] + [start])
                    queue = []
                    break
                if w in scc and w not in seen:
                    seen.add(w)
                    paths[w] = paths[v] + [w]
                    queue.append(w)
    return found


def describe(cycle: list, graph: dict) -> str:
    return " -> ".join(cycle) + "  (" + ", ".join(
        f"{a} line {graph[a][b][0]}" for a, b in zip(cycle, cycle[1:])) + ")"


def documented_order(doc: Path = DOC) -> list:
    """The "python/kiln import order" list: [[module, ...] per line], lowest first."""
    text = doc.read_text()
    m = re.search(r"^#+ .*python/kiln import order.*$", text, re.M)
    assert m, f"{doc.name} has no 'python/kiln import order' section"
    rows = []
    for line in text[m.end():].splitlines():
        if line.startswith("#"):
            break
        item = re.match(r"\s*\d+\.\s+((?:`[^`]+`(?:,\s*)?)+)", line)
        if item:
            rows.append(["kiln" if n == "kiln" else f"kiln.{n}" for n in re.findall(r"`([^`]+)`", item.group(1))])
    return rows


def test_python_kiln_has_no_import_cycles():
    graph = import_graph(read_package())
    found = cycles(graph)
    assert not found, "import cycles in python/kiln:\n  " + "\n  ".join(describe(c, graph) for c in found)


def order_violations(graph: dict, rows: list) -> list:
    """The imports that do not go to a line above the importer's."""
    rank = {}
    for i, row in enumerate(rows):
        for mod in row:
            assert mod not in rank, f"{mod} is listed twice in the documented import order"
            rank[mod] = i
    assert set(rank) == set(graph), (
        "the documented import order and python/kiln disagree: "
        f"not listed {sorted(set(graph) - set(rank))}, listed but absent {sorted(set(rank) - set(graph))}")
    return [f"{a} (line {rank[a] + 1} of the list) imports {b} (line {rank[b] + 1}) at line {lines[0]}"
            for a, targets in sorted(graph.items()) for b, lines in sorted(targets.items())
            if rank[b] >= rank[a]]


def test_imports_follow_the_documented_order():
    wrong = order_violations(import_graph(read_package()), documented_order())
    assert not wrong, "imports against docs/architecture.md's python/kiln import order:\n  " + "\n  ".join(wrong)


def test_the_graph_counts_every_kind_of_import():
    """The checks above are only as good as the graph: a function-local
    import, `from . import x`, `import kiln` and `__import__` are edges."""
    sources = {
        "kiln": ("from . import a\nfrom .b import thing\n", True),
        "kiln.a": ("def f():\n    from . import b\n    return b\n", False),
        "kiln.b": ("import kiln\n", False),
        "kiln.c": ("def g():\n    return __import__('kiln').a\n", False),
        "kiln.sub": ("from .. import _C\nfrom . import leaf\n", True),
        "kiln.sub.leaf": ("from ..a import f\nimport importlib\nimportlib.import_module('kiln.c')\n", False),
    }
    graph = import_graph(sources)
    assert {m: sorted(t) for m, t in graph.items() if t} == {
        "kiln": ["kiln.a", "kiln.b"],
        "kiln.a": ["kiln.b"],
        "kiln.b": ["kiln"],
        "kiln.c": ["kiln"],
        "kiln.sub": ["kiln._C", "kiln.sub.leaf"],
        "kiln.sub.leaf": ["kiln.a", "kiln.c"],
    }
    found = cycles(graph)
    assert found == [["kiln", "kiln.b", "kiln"]]
    assert describe(found[0], graph) == "kiln -> kiln.b -> kiln  (kiln line 2, kiln.b line 1)"


def test_an_unknown_kiln_module_is_an_error():
    with pytest.raises(AssertionError, match="not a module of kiln"):
        import_graph({"kiln": ("from .missing import x\n", True)})

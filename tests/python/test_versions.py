"""Issue 30: every CPython torch supports. The package builds and imports
on 3.10 to 3.13 (make test runs this suite under each: tests/run_versions.sh);
each has its bytecode tables (kiln/_bytecode_v3NN.py); on a version whose
bytecode kiln cannot translate yet, kiln.compile, kiln.explain and
symbolic_trace raise UnsupportedVersion once, saying so (never a silent
no-op, never a frame quietly left to CPython), while tensors, kiln.nn's
built-in modules and the KBC API work."""
import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import _bytecode_tables, _frontend_opcodes

VERSION = sys.version_info[:2]
REPO = Path(__file__).resolve().parents[2]


def add_one(x):
    return x + 1


def test_the_running_version_is_one_the_package_declares():
    text = (REPO / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.10,<3.14"' in text
    assert (3, 10) <= VERSION < (3, 14)


def test_tensors_and_builtin_modules_work_on_every_version():
    x = kiln.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_allclose(np.asarray(kiln.softmax(x, 1).sum(1)), [1.0, 1.0], rtol=1e-6)
    lin = kiln.nn.Linear(3, 2)
    assert tuple(lin(x).shape) == (2, 2)


@pytest.mark.parametrize("entry", ["compile", "explain", "symbolic_trace"])
def test_an_unread_version_says_so_at_each_entry(entry, monkeypatch):
    if kiln._compile.VERSION_SUPPORTED:
        # Every version the package builds for is read now: this one as one
        # whose bytecode the frontend's table does not have.
        monkeypatch.setattr(_frontend_opcodes, "VERSIONS", set())
    with pytest.raises(_bytecode_tables.UnsupportedVersion, match=f"CPython {VERSION[0]}.{VERSION[1]}"):
        if entry == "compile":
            kiln.compile(add_one)
        elif entry == "explain":
            kiln.explain(add_one)
        else:
            kiln.fx.symbolic_trace(kiln.nn.Linear(2, 2), kiln.ones(1, 2))


@pytest.mark.skipif(not kiln._compile.VERSION_SUPPORTED, reason="kiln cannot read this CPython's bytecode yet")
def test_a_read_version_compiles():
    f = kiln.compile(add_one)
    x = kiln.ones(3)
    np.testing.assert_allclose(np.asarray(f(x)), [2.0, 2.0, 2.0])
    _frontend_opcodes.require()  # does not raise


def test_the_version_tables_name_the_same_versions():
    # A version the frontend translates needs the resume side's tables too;
    # every version the package builds for has its bytecode tables.
    assert _frontend_opcodes.VERSIONS == set(_bytecode_tables.VERSIONS)  # (3.10 too since issue 30)
    assert set(_bytecode_tables.VERSIONS) == {(3, 10), (3, 11), (3, 12), (3, 13)}


def _bound_names(module):
    """The names a kiln module binds at its top level (read, not imported:
    a version module imports only on its own CPython)."""
    tree = ast.parse((Path(kiln.__file__).parent / f"{module}.py").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in getattr(node, "targets", [getattr(node, "target", None)]):
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


@pytest.mark.parametrize("version", sorted(_bytecode_tables.VERSIONS), ids=lambda v: "%d.%d" % v)
def test_each_version_module_provides_the_interface(version):
    # Every version's module, from any CPython: INTERFACE always (decode,
    # assemble and stack_analysis); EMIT_INTERFACE where kiln compiles (a
    # version may have it before the frontend does).
    names = _bound_names(_bytecode_tables.VERSIONS[version])
    assert not set(_bytecode_tables.INTERFACE) - names
    if version in _frontend_opcodes.VERSIONS:
        assert not set(_bytecode_tables.EMIT_INTERFACE) - names
    if version == VERSION:
        assert _bytecode_tables.SUPPORTED
        assert _bytecode_tables.CAN_EMIT == (not set(_bytecode_tables.EMIT_INTERFACE) - names)


def test_an_unknown_version_is_refused_with_the_versions_kiln_has():
    code = ("import sys; sys.version_info = (3, 99, 0, 'final', 0)\n"
            "import kiln._bytecode_tables as T\n"
            "print(T.SUPPORTED, '|', T.REASON)\n")
    env_path = str(Path(kiln.__file__).parents[1])  # (not resolved: a version's _C sits beside links)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    supported, reason = r.stdout.split("|")
    assert supported.strip() == "False"
    assert "3.99" in reason and "3.11" in reason


def sums(a, b):
    return sum(a), sum(b, 0.5), sum([7.75, -7.0], 0.1), sum([1, 2.5, 1e100, 1.0, -1e100])


def test_sum_adds_floats_as_this_cpython_does():
    # 3.12 compensates a run of floats (Neumaier); 3.11 adds them one by
    # one: ten 0.1s make 1.0 on one and 0.9999999999999999 on the other.
    args = ([0.1] * 10, [1, 0.1, 0.2, 0.3])
    assert kiln.compile(sums)(*args) == sums(*args)
    assert (sums(*args)[0] == 1.0) == (VERSION >= (3, 12))


def test_repr_escapes_what_this_cpythons_unicode_calls_non_printable():
    # U+0CF3 is new in Unicode 15 (CPython 3.12): printable there, escaped by 3.11.
    s = "\u0cf3"
    assert kiln.compile(lambda x: repr(x))(s) == repr(s)

"""The program generator itself (progen.py): its programs are deterministic
and valid Python, a difference is reported with what reproduces it, and
its features switch. The generated programs are run against CPython by
test_generated_frames.py (4,000 seeds on the frames path, the default).

PYTEST_DONT_REWRITE: the programs are translated as generated."""
import sys
import warnings

import pytest

import progen



def test_generated_programs_are_deterministic_and_valid():
    """The same seed gives the same source; every program compiles."""
    for seed in range(50):
        a, b = progen.generate(seed), progen.generate(seed)
        assert a.source == b.source and a.args_src == b.args_src
        with warnings.catch_warnings():  # [1, 2][1.0] is a deliberate TypeError
            warnings.simplefilter("ignore", SyntaxWarning)
            compile(a.source, a.filename, "exec")


def test_a_difference_is_reported_with_seed_and_source(monkeypatch):
    """The harness is not vacuous: a program whose compiled run differs
    fails, and the report carries what reproduces it."""
    import kiln
    prog = progen.generate(3)
    real = kiln.compile

    def wrong(fn, **kw):
        c = real(fn, **kw)
        return lambda *a, **k: ("not", "the", "result")
    monkeypatch.setattr(kiln, "compile", wrong)
    with pytest.raises(AssertionError) as e:
        progen.run_program(prog)
    report = str(e.value)
    assert "seed 3" in report and prog.source in report and "--seed 3 --count 1" in report


def test_switchable_features():
    """Features off leave their constructs out (class features and the
    builtins table's functions are on by default)."""
    src = "".join(progen.generate(s).source for s in range(200))
    assert "super()" in src and "@classmethod" in src and "round(" in src and ".format(" in src
    off = progen.parse_features("-pending_builtins,-class_features")
    src_off = "".join(progen.generate(s, off).source for s in range(200))
    assert "super()" not in src_off and "@property" not in src_off and ".format(" not in src_off
    off = progen.parse_features("-tensors,-strings")
    src_off = "".join(progen.generate(s, off).source for s in range(200))
    assert "kiln." not in src_off and ".upper()" not in src_off

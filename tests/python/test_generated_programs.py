"""Generated programs (progen.py) run differentially: CPython against
kiln.compile on both backends, 2,400 fixed seeds in batches, from seed 1600
on: test_generated_frames.py runs the 1,600 before them, strict, so the two
cover 4,000 programs on the frames path (the default) with all features and
exact comparisons. With KILN_PYTHON_FRAMES=0 (the older VM path) progen's
VM_PATH_OFF features are off.

A failing batch lists every failing seed with its full source; reproduce
one with `python tests/python/progen.py --seed SEED --count 1`.
KILN_PROGEN_PROGRAMS changes the number of programs (a longer run), and
KILN_PROGEN_SEED the first seed.

PYTEST_DONT_REWRITE: the programs are translated as generated."""
import os
import sys
import warnings

import pytest

import progen

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the frontend reads CPython 3.11 bytecode")

PROGRAMS = int(os.environ.get("KILN_PROGEN_PROGRAMS", "2400"))
FIRST = int(os.environ.get("KILN_PROGEN_SEED", "1600"))
BATCH = 100

# Seeds that still differ from CPython, each for a kiln defect reported with
# a minimal repro (the first line of each seed's difference is kept as its
# reason). They must keep failing: once a defect is fixed its seeds pass
# and this test says to remove them. None at the moment.
KNOWN = {
}


def run_batch(seeds, feats=None):
    """(reports of unexpected differences, known seeds that now pass)"""
    import kiln
    if feats is None:
        feats = progen.parse_features("", frames=kiln.config.python_frames)
    failures, fixed = [], []
    for seed in seeds:
        try:
            progen.run_program(progen.generate(seed, feats))
            if seed in KNOWN:
                fixed.append(seed)
        except AssertionError as e:
            if seed not in KNOWN:
                failures.append(str(e))
    return failures, fixed


@pytest.mark.parametrize("start", range(FIRST, FIRST + PROGRAMS, BATCH), ids=lambda s: f"seeds{s}")
def test_generated_programs_match_cpython(start, capsys):
    failures, fixed = run_batch(range(start, min(start + BATCH, FIRST + PROGRAMS)))
    assert not failures, f"{len(failures)} of {BATCH} programs differ from CPython:\n\n" + "\n\n".join(failures)
    assert not fixed, f"known-failing seeds {fixed} now match CPython: remove them from KNOWN"


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

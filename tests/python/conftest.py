"""Shared by the Python tests: every test starts with no compiled entries and
the same random seed, and kiln is strict (a failure of kiln's own raises
instead of leaving the frame to CPython, which would make a comparison
with eager pass without testing kiln; KILN_STRICT=0 turns it off). Tests of
the fallback itself turn strict off for their own compiles."""
import importlib.util
import os
import sys

import pytest

import kiln
from kiln import _frontend

kiln.config.strict = os.environ.get("KILN_STRICT", "1") != "0"
# Every translation the tests make checks each instruction's translation
# against its opcode row's declared stack effect (off outside the tests:
# kiln/_frontend.py, CHECK_ROWS).
_frontend.CHECK_ROWS = True

# The zoo needs torch, and torch's CPU build here is for CPython 3.11 only.
collect_ignore = [] if importlib.util.find_spec("torch") else ["zoo"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a CPython whose bytecode kiln cannot read yet (issue 30 adds them
    one by one), a test that reaches kiln.compile, kiln.explain or a
    translation gets kiln's UnsupportedVersion: reported as a skip naming
    the version, not a failure. Only there: on a supported version the
    error cannot arise, and test_versions.py checks that it is raised
    where it must be."""
    outcome = yield
    _unsupported_as_skip(outcome.get_result(), call.excinfo, str(item.path))


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_compile: the test's child process calls kiln.compile "
                                       "(skipped where kiln cannot read this CPython's bytecode)")


def pytest_collection_modifyitems(config, items):
    if kiln._compile.VERSION_SUPPORTED:
        return
    skip = pytest.mark.skip(reason=f"kiln cannot read CPython {sys.version_info[0]}.{sys.version_info[1]}'s "
                                   "bytecode yet (its child process calls kiln.compile)")
    for item in items:
        if item.get_closest_marker("needs_compile"):
            item.add_marker(skip)


def _unsupported_as_skip(report, excinfo, path):
    if excinfo is None or kiln._compile.VERSION_SUPPORTED:
        return
    if excinfo.errisinstance(kiln._bytecode_tables.UnsupportedVersion):
        report.outcome = "skipped"
        report.longrepr = (path, 0, f"Skipped: {excinfo.value}")


@pytest.fixture(autouse=True)
def fresh_kiln():
    kiln.reset()
    kiln.manual_seed(0)
    yield
    kiln.reset()

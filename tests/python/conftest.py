"""Shared by the Python tests: every test starts with no compiled entries and
the same random seed, and kiln is strict (a failure of kiln's own raises
instead of leaving the frame to CPython, which would make a comparison
with eager pass without testing kiln; KILN_STRICT=0 turns it off). Tests of
the fallback itself turn strict off for their own compiles."""
import os

import pytest

import kiln

kiln.config.strict = os.environ.get("KILN_STRICT", "1") != "0"


@pytest.fixture(autouse=True)
def fresh_kiln():
    kiln.reset()
    kiln.manual_seed(0)
    yield
    kiln.reset()

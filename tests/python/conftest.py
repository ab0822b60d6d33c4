"""Shared by the Python tests: every test starts with no compiled entries and
the same random seed."""
import pytest

import kiln


@pytest.fixture(autouse=True)
def fresh_kiln():
    kiln.reset()
    kiln.manual_seed(0)
    yield
    kiln.reset()

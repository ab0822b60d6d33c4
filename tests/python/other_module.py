"""Globals and helpers of another module, for test_compile's cross-module
tests (a compiled function inlines these, reading this module's globals)."""
import kiln

SHIFT = 1.0


def shifted(x):
    return kiln.relu(x) + SHIFT

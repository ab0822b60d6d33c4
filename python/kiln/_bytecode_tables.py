"""Per-CPython-version facts about bytecode, for kiln/_bytecode.py,
kiln/_resume.py and kiln/_frames.py.

Everything that differs between CPython versions lives in one module per
version (kiln/_bytecode_v3NN.py), so that a version is added as data rather
than as branches scattered through the assembler. This module imports the
running version's module and checks that it provides every name in
`INTERFACE`; on a version with no module, `SUPPORTED` is False and `REASON`
says why (kiln.compile raises it; `import kiln` still works, for the KBC
API).

A version module provides INTERFACE (decode/assemble/stack_analysis's
facts: caches, jump families, the code object's tables, the compiler's
stack accounting, run-time stack kinds, what an instruction pops, the
fast-locals layout) and, once kiln compiles on that version,
EMIT_INTERFACE (how kiln/_frames.py and kiln/_resume.py spell a call, an
attribute load or a compare, and which instructions read or end a local).
"""
import importlib
import sys

VERSION = sys.version_info[:2]

# What kiln/_bytecode.py, kiln/_resume.py and kiln/_frames.py read off a
# version module. A version module missing one fails here, at import, not
# in the middle of a resume function.
INTERFACE = (
    "OP", "EXTENDED_ARG", "CACHE", "HAVE_ARGUMENT", "CACHES", "cache_entries",
    "JUMP_OPS", "BACKWARD_JUMPS", "UNCONDITIONAL_JUMPS", "TERMINATORS", "BLOCK_SETUPS", "block_transfer",
    "jump_variant", "jump_target_offset", "jump_arg", "is_backward_target",
    "parse_exception_table", "encode_exception_table", "encode_location_table",
    "runtime_transfer", "METHOD_PAIR_JOIN", "inputs",
    "LOCAL_OPS", "LOCAL_PAIRS", "FREE_OPS", "GENERATOR_FLAGS", "CO_VARARGS", "CO_VARKEYWORDS", "CO_NOFREE",
    "RESUME", "MAKE_CELL", "COPY_FREE_VARS", "LOAD_FAST", "STORE_FAST", "DELETE_FAST",
    # decode/assemble's view of the code's tables, the compiler's stack
    # accounting and the fast-locals layout (3.10 differs in all three).
    "code_positions", "exception_rows", "table_fields", "compiler_effect", "entry_shape",
    "localsplus_names", "new_localsplus", "slot_names",
    # how an arg names what dis shows (kiln/_instructions.py)
    "NAME_ARG_SHIFTS", "COMPARE_ARG_SHIFT",
    # an instruction's source location (dis.Positions; 3.10's dis has none)
    "Positions",
)

# The spellings of what kiln/_frames.py and kiln/_resume.py emit (calls,
# attribute loads, compares): a version has them once kiln compiles on it
# (kiln/_frontend_opcodes.VERSIONS; tests/python/test_versions.py checks).
EMIT_INTERFACE = (
    "call", "call_kw", "attribute", "compare", "method_load_as_attr", "JUMP_IF_FALSE", "CALL_PAIR",
    "make_function", "closure_load", "BOOL_OPERAND", "FOR_ITER_SKIPS", "KW_NAMES", "CALL", "LOCAL_READS",
    "LOCAL_KILLS", "CALL_TAKES_NULL", "call_method", "method_call_as_plain", "binary_op", "copy", "swap",
    "null_pair",
)

# The versions whose module exists. pyproject.toml's requires-python and
# the per-version frontend tables (kiln/_frontend_opcodes.py) follow this.
VERSIONS = {(3, 10): "_bytecode_v310", (3, 11): "_bytecode_v311", (3, 12): "_bytecode_v312",
            (3, 13): "_bytecode_v313"}


class UnsupportedVersion(Exception):
    """This CPython's bytecode has no tables in kiln. Not a RuntimeError:
    kiln reports a program's failures as those, and this is no failure of
    the program."""


SUPPORTED = VERSION in VERSIONS
REASON = None if SUPPORTED else (
    f"kiln.compile does not support CPython {VERSION[0]}.{VERSION[1]} yet: kiln/_bytecode_tables.py has "
    f"the bytecode of {', '.join(f'{v[0]}.{v[1]}' for v in sorted(VERSIONS))} (kiln's tensors and the KBC API "
    "work on every version the package builds for)")

if SUPPORTED:
    _module = importlib.import_module(f"{__package__}.{VERSIONS[VERSION]}")
    _missing = [n for n in INTERFACE if not hasattr(_module, n)]
    assert not _missing, f"{_module.__name__} lacks {_missing}"
    globals().update({n: getattr(_module, n) for n in INTERFACE + EMIT_INTERFACE if hasattr(_module, n)})
    # Version-specific constants beyond the interface (PRECALL, LOAD_METHOD
    # on 3.11) are read as T.<name> where a version has them.
    globals().update({n: v for n, v in vars(_module).items() if n.isupper() and n not in globals()})
    CAN_EMIT = all(hasattr(_module, n) for n in EMIT_INTERFACE)
    del _module, _missing
else:
    CAN_EMIT = False


def qualname(code):
    """A code object's qualified name (3.10's code has only the plain name:
    the qualified one is its function's, given by MAKE_FUNCTION)."""
    return getattr(code, "co_qualname", code.co_name)


def require():
    """Raise UnsupportedVersion when this CPython's bytecode has no tables."""
    if not SUPPORTED:
        raise UnsupportedVersion(REASON)

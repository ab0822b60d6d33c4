"""Exceptions of every class, and try/except/else/finally and with, translated
to KBC: each case runs on CPython, on kiln's VM (the translated KBC,
uncompiled) and through kiln.compile with the eager and llvm backends, and
all four must agree on the result, or on the exception's type, str() and
cause, and on the state the arguments are left in.

PYTEST_DONT_REWRITE: the functions under test are translated as written."""
import builtins
import copy
import sys
import traceback

import pytest

import kiln
from kiln import _C
from kiln._compile import _as_kbc
from kiln._frontend import Untranslatable, translate


# -- the harness -------------------------------------------------------------


def outcome(call, args):
    args = copy.deepcopy(args)
    try:
        result = ("ok", call(*args))
    except BaseException as e:  # noqa: B036 (SystemExit and friends are cases too)
        cause = type(e.__cause__) if e.__cause__ is not None else None
        result = ("raise", type(e), str(e), cause)
    return result, args


def run_vm(fn):
    kbc = _as_kbc(fn)
    assert kbc is not None, f"{fn.__name__} was not translated: {translate(fn)}"

    def call(*args):
        _C.sync_python_state()
        return _C.call(kbc, *args)
    return call


def check(fn, *args):
    """CPython's outcome; the VM's, eager's and llvm's must equal it."""
    expected = outcome(fn, args)
    got = {"vm": outcome(run_vm(fn), args)}
    for backend in ("eager", "llvm"):
        compiled = kiln.compile(fn, backend=backend)
        got[backend] = outcome(compiled, args)
        got[backend + " (cached)"] = outcome(compiled, args)
    for mode, g in got.items():
        assert g == expected, f"{mode}: {g!r}, CPython: {expected!r}\n{translate(fn).text}"
    return expected[0]


# -- every built-in exception class ---------------------------------------

# Every class a user can name from builtins, except those whose constructor
# needs more than a message (UnicodeDecodeError & co.) and the exception
# groups (except* stays on CPython).
EXCEPTIONS = sorted(
    name for name, cls in vars(builtins).items()
    if isinstance(cls, type) and issubclass(cls, BaseException)
    and name not in ("UnicodeDecodeError", "UnicodeEncodeError", "UnicodeTranslateError",
                     "BaseExceptionGroup", "ExceptionGroup", "EnvironmentError", "IOError"))

_made = {}


def made(src: str, name: str):
    """A function defined by `src` in this module's globals (translatable
    like any other: the frontend reads its bytecode)."""
    key = (src, name)
    if key not in _made:
        exec(compile(src, __file__, "exec"), globals())
        _made[key] = globals()[name]
    return _made[key]


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_raise_and_catch_every_builtin_exception(name):
    fn = made(f"""
def catch_{name}(x):
    try:
        raise {name}("message", x) if x > 1 else {name}("message")
    except {name} as e:
        return ("caught", str(e), repr(e), e.args)
""", f"catch_{name}")
    assert check(fn, 1)[1][0] == "caught"
    # Two args: str() is the args tuple (OSError: "[Errno message] 2").
    # Not modelled: SyntaxError's (msg, details) constructor.
    if not issubclass(getattr(builtins, name), SyntaxError):
        check(fn, 2)


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_every_builtin_exception_surfaces_with_its_type(name):
    fn = made(f"""
def escape_{name}(x):
    y = x + 1
    raise {name}("boom " + str(y))
""", f"escape_{name}")
    result = check(fn, 1)
    assert result[:3] == ("raise", getattr(builtins, name), str(getattr(builtins, name)("boom 2")))


@pytest.mark.parametrize("name", [n for n in EXCEPTIONS if n != "BaseException"])
def test_every_builtin_exception_is_caught_by_its_base(name):
    base = getattr(builtins, name).__base__.__name__
    fn = made(f"""
def by_base_{name}(x):
    try:
        raise {name}(x)
    except {base} as e:
        return ("by {base}", str(e))
""", f"by_base_{name}")
    assert check(fn, "v") == ("ok", ("by " + base, str(getattr(builtins, name)("v"))))


# -- hierarchy, tuples, as, args, str, repr ----------------------------------

def arith(x):
    try:
        return 10 // x
    except ArithmeticError as e:
        return ("arith", str(e))


def lookup(d, k):
    try:
        return d[k]
    except LookupError as e:
        return ("lookup", str(e), e.args)


def index(xs, i):
    try:
        return xs[i]
    except (KeyError, IndexError) as e:
        return ("tuple", str(e))


def not_matching(x):
    try:
        return 1 / x
    except (KeyError, TypeError):
        return "wrong"


def runtime_family(x):
    try:
        if x == 0:
            raise NotImplementedError("later")
        if x == 1:
            raise RecursionError("deep")
        raise RuntimeError("plain")
    except RuntimeError as e:
        return repr(e)


def catch_all(x):
    try:
        return int(x)
    except Exception as e:
        return ("any", str(e))


def catch_base(x):
    try:
        raise KeyboardInterrupt(x)
    except Exception:
        return "not here"
    except BaseException as e:
        return ("base", repr(e))


def exc_attrs(x):
    try:
        raise ValueError(x, "second")
    except ValueError as e:
        return (e.args, str(e), repr(e), e.args[0])


def no_args():
    try:
        raise TypeError
    except TypeError as e:
        return (e.args, str(e), repr(e))


def empty_message():
    try:
        raise ValueError()
    except ValueError as e:
        return (str(e), repr(e))


def stop_iteration_value(x):
    try:
        raise StopIteration(x)
    except StopIteration as e:
        return e.value


def isinstance_checks(x):
    try:
        raise ZeroDivisionError(x)
    except Exception as e:
        return (isinstance(e, ArithmeticError), isinstance(e, LookupError), isinstance(e, (KeyError, Exception)))


def exception_in_variable(x):
    e = ValueError(x)
    try:
        raise e
    except ValueError as got:
        return got is e


def raise_class_not_instance(x):
    try:
        raise IndexError
    except IndexError as e:
        return e.args


def os_errors(n, name):
    try:
        raise OSError(n, "no luck", name)
    except FileNotFoundError as e:
        return ("not found", str(e), e.args, e.errno, e.filename)
    except PermissionError as e:
        return ("permission", repr(e), e.strerror)
    except OSError as e:
        return ("other", str(e), e.args)


def os_error_surfaces(n):
    raise OSError(n, "gone", "a.txt", None, "b.txt")


def catching_a_non_class(x):
    try:
        raise ValueError(x)
    except 42:
        return "never"


def raising_a_non_exception(x):
    raise x


def exception_classes_in_a_tuple_variable(x):
    kinds = (KeyError, ZeroDivisionError)
    try:
        return 1 // x
    except kinds as e:
        return str(e)


@pytest.mark.parametrize("fn,args", [
    (arith, (0,)), (arith, (3,)),
    (lookup, ({"a": 1}, "a")), (lookup, ({"a": 1}, "b")), (lookup, ([1, 2], 5)),
    (index, ([1, 2], 1)), (index, ([1, 2], 7)),
    (not_matching, (0,)), (not_matching, (4,)),
    (runtime_family, (0,)), (runtime_family, (1,)), (runtime_family, (2,)),
    (catch_all, ("12",)), (catch_all, ("x",)),
    (catch_base, ("ctrl-c",)),
    (exc_attrs, ("first",)), (no_args, ()), (empty_message, ()),
    (stop_iteration_value, (7,)), (isinstance_checks, (1,)), (exception_in_variable, (3,)),
    (raise_class_not_instance, (0,)),
    (os_errors, (2, "f.txt")), (os_errors, (13, None)), (os_errors, (1, "x")), (os_errors, (99, "y")),
    (os_error_surfaces, (2,)), (os_error_surfaces, (17,)),
    (catching_a_non_class, (1,)),
    (raising_a_non_exception, ("a string",)), (raising_a_non_exception, (3,)),
    (exception_classes_in_a_tuple_variable, (0,)), (exception_classes_in_a_tuple_variable, (2,)),
])
def test_matching_and_exception_objects(fn, args):
    check(fn, *args)


# -- user-defined exception classes -------------------------------------------

class AppError(Exception):
    pass


class Coded(ValueError):
    def __init__(self, code):
        super().__init__(f"code {code}")
        self.code = code


class Pretty(Exception):
    def __str__(self):
        return "pretty: " + ",".join(map(str, self.args))


class Leaf(Coded):
    pass


def helper_raises(x):
    if x < 0:
        raise Coded(x)
    if x == 0:
        raise Leaf(0)
    return x * 2


def catch_user(x):
    try:
        return helper_raises(x)
    except Coded as e:
        return ("coded", e.code, str(e))


def catch_user_as_value_error(x):
    try:
        return helper_raises(x)
    except ValueError as e:
        return ("value", str(e))


def user_escapes(x):
    return helper_raises(x) + 1


def raise_user_here(x):
    raise AppError("app", x)


def raise_pretty(x):
    try:
        raise Pretty(x, x + 1)
    except Exception as e:
        return str(e)


def user_not_matching(x):
    try:
        raise AppError(x)
    except ValueError:
        return "wrong"


def user_reraised(x):
    try:
        helper_raises(x)
    except Coded:
        raise


def user_class_raised_bare(x):
    raise AppError


@pytest.mark.parametrize("fn,args", [
    (catch_user, (-3,)), (catch_user, (0,)), (catch_user, (4,)),
    (catch_user_as_value_error, (-1,)), (catch_user_as_value_error, (0,)),
    (user_escapes, (-5,)), (user_escapes, (0,)), (user_escapes, (5,)),
    (raise_user_here, (1,)), (raise_pretty, (1,)), (user_not_matching, (1,)),
    (user_reraised, (-2,)), (user_reraised, (2,)), (user_class_raised_bare, (0,)),
])
def test_user_exception_classes(fn, args):
    check(fn, *args)


def test_a_user_exception_surfaces_as_the_very_object():
    seen = []

    def keep(e):
        seen.append(e)
        return 0

    def f(x):
        try:
            raise Coded(x)
        except Coded as e:
            keep(e)
            raise

    for backend in ("eager", "llvm"):
        seen.clear()
        with pytest.raises(Coded) as info:
            kiln.compile(f, backend=backend)(9)
        assert seen and info.value is seen[0] and info.value.code == 9


# -- try/except/else/finally orderings ----------------------------------------

def else_runs(x):
    out = []
    try:
        out.append("try")
        y = 10 // x
    except ZeroDivisionError:
        out.append("except")
        y = -1
    else:
        out.append("else")
    finally:
        out.append("finally")
    return out, y


def finally_on_raise(x):
    out = []
    try:
        try:
            out.append(1 // x)
        finally:
            out.append("finally")
    except ZeroDivisionError:
        out.append("outer")
    return out


def return_in_finally(x):
    try:
        return 1 // x
    finally:
        return "finally wins"


def return_in_try_then_finally(x):
    log = [x]
    try:
        return log
    finally:
        log.append("done")


def raise_in_handler(x):
    try:
        return 1 // x
    except ZeroDivisionError:
        raise KeyError("in handler")


def raise_in_handler_caught(x):
    try:
        try:
            return 1 // x
        except ZeroDivisionError:
            raise KeyError("in handler")
    except KeyError as e:
        return "outer " + str(e)


def raise_from(x):
    try:
        return 1 // x
    except ZeroDivisionError as e:
        raise ValueError("wrapped") from e


def raise_from_none(x):
    try:
        return {}[x]
    except KeyError:
        raise AttributeError("quiet") from None


def bare_reraise(x):
    try:
        return [1][x]
    except IndexError:
        raise


def bare_raise_outside():
    raise


def nested_try(x):
    out = []
    try:
        try:
            if x == 0:
                raise KeyError("k")
            if x == 1:
                raise ValueError("v")
            out.append("none")
        except KeyError:
            out.append("inner key")
        finally:
            out.append("inner finally")
    except ValueError:
        out.append("outer value")
    finally:
        out.append("outer finally")
    return out


def loop_with_try(n):
    out = []
    for i in range(n):
        try:
            if i % 3 == 0:
                continue
            out.append(10 // (i - 2))
        except ZeroDivisionError:
            out.append("zero")
            break
        finally:
            out.append(-i)
    return out


def handler_variable_is_deleted(x):
    try:
        raise ValueError(x)
    except ValueError as e:
        pass
    return e  # noqa: F821 (UnboundLocalError in CPython)


def exception_in_finally_replaces(x):
    try:
        raise ValueError(x)
    finally:
        raise KeyError("finally")


def error_from_builtin_in_try(x):
    try:
        return int(x)
    except ValueError as e:
        return str(e)


def assert_caught(x):
    try:
        assert x > 0, "x must be positive"
        return "fine"
    except AssertionError as e:
        return "assert: " + str(e)


def unbound_local_caught(flag):
    if flag:
        y = 1
    try:
        return y
    except NameError as e:
        return str(e)


def attribute_error_caught(x):
    try:
        return x.missing
    except AttributeError:
        return "no attribute"


def while_retry(n):
    tries = 0
    while True:
        try:
            tries += 1
            if tries < n:
                raise RuntimeError("again")
            return tries
        except RuntimeError:
            continue


@pytest.mark.parametrize("fn,args", [
    (else_runs, (2,)), (else_runs, (0,)),
    (finally_on_raise, (0,)), (finally_on_raise, (1,)),
    (return_in_finally, (0,)), (return_in_finally, (1,)),
    (return_in_try_then_finally, (3,)),
    (raise_in_handler, (0,)), (raise_in_handler, (1,)),
    (raise_in_handler_caught, (0,)),
    (raise_from, (0,)), (raise_from_none, ("k",)),
    (bare_reraise, (3,)), (bare_raise_outside, ()),
    (nested_try, (0,)), (nested_try, (1,)), (nested_try, (2,)),
    (loop_with_try, (7,)), (loop_with_try, (2,)),
    (handler_variable_is_deleted, (1,)),
    (exception_in_finally_replaces, (1,)),
    (error_from_builtin_in_try, ("12",)), (error_from_builtin_in_try, ("z",)),
    (assert_caught, (1,)), (assert_caught, (-1,)),
    (unbound_local_caught, (True,)), (unbound_local_caught, (False,)),
    (attribute_error_caught, (3,)),
    (while_retry, (3,)),
])
def test_try_except_else_finally(fn, args):
    check(fn, *args)


# -- with ------------------------------------------------------------------------

EVENTS = []


class Manager:
    def __init__(self, name, suppress=False):
        self.name, self.suppress = name, suppress

    def __enter__(self):
        EVENTS.append(("enter", self.name))
        return self.name

    def __exit__(self, t, v, tb):
        EVENTS.append(("exit", self.name, t.__name__ if t else None, str(v) if v else None))
        return self.suppress


class BrokenEnter:
    def __enter__(self):
        raise OSError("cannot enter")

    def __exit__(self, *a):
        EVENTS.append("never")


def with_ok(x):
    with Manager("a") as n:
        y = n + str(x)
    return y


def with_raises(x):
    with Manager("b"):
        return 1 // x


def with_suppresses(x):
    with Manager("c", suppress=True):
        y = 1 // x
        return y
    return "suppressed"


def nested_with(x):
    with Manager("outer"):
        with Manager("inner", suppress=x == 0):
            if x < 2:
                raise KeyError(x)
        return "after inner"


def with_in_try(x):
    try:
        with Manager("t"):
            raise ValueError(x)
    except ValueError as e:
        return "caught " + str(e)


def with_two_managers(x):
    with Manager("p") as p, Manager("q") as q:
        return p + q + str(1 // x)


def with_broken_enter(x):
    with BrokenEnter():
        return x


def with_not_a_manager(x):
    with x:
        return 1


@pytest.mark.parametrize("fn,args", [
    (with_ok, (1,)), (with_raises, (0,)), (with_raises, (1,)), (with_suppresses, (0,)), (with_suppresses, (1,)),
    (nested_with, (0,)), (nested_with, (1,)), (nested_with, (5,)), (with_in_try, (3,)),
    (with_two_managers, (1,)), (with_two_managers, (0,)), (with_broken_enter, (1,)), (with_not_a_manager, (3,)),
])
def test_with(fn, args):
    expected = recorded_with(fn, args)
    vm = run_vm(fn)
    got = [("vm", recorded_with(vm, args))]
    for backend in ("eager", "llvm"):
        c = kiln.compile(fn, backend=backend)
        got += [(backend, recorded_with(c, args)), (backend + " cached", recorded_with(c, args))]
    for mode, g in got:
        assert g == expected, f"{mode}: {g!r}, CPython: {expected!r}"


def recorded_with(call, args):
    EVENTS.clear()
    try:
        return ("ok", call(*args), list(EVENTS))
    except BaseException as e:
        return ("raise", type(e), str(e), list(EVENTS))


# -- graph breaks inside try and with -------------------------------------------

LOG = []


def note(x):
    LOG.append(x)  # traced: the caller's list, mutated after the graph
    print(end="")  # a builtin with side effects: the tracer breaks the graph here
    return x


def tensor_in_try(t, fail):
    y = t * 2
    try:
        note("in try")
        if fail:
            raise ValueError("failed")
        y = y + 1
    except ValueError as e:
        note(str(e))
        y = y - 1
    finally:
        note("finally")
    return (y * 3).sum().item()


def break_before_try(t, fail):
    y = t + 1
    note("before")
    try:
        y = y * 2
        if fail:
            y = y / 0 if isinstance(fail, int) else y
            raise KeyError("k")
    except KeyError:
        y = y - 5
    return y.sum().item()


def with_over_tensor(t, fail):
    with Manager("tensors"):
        y = t * 4
        note("inside")
        if fail:
            raise RuntimeError("inside with")
    return y.sum().item()


@pytest.mark.parametrize("fn", [tensor_in_try, break_before_try, with_over_tensor])
@pytest.mark.parametrize("fail", [False, True])
def test_graph_breaks_inside_try_and_with(fn, fail):
    t = kiln.tensor([1.0, 2.0, 3.0])

    def run(call):
        LOG.clear()
        EVENTS.clear()
        try:
            return ("ok", call(t, fail), list(LOG), list(EVENTS))
        except BaseException as e:
            return ("raise", type(e), str(e), list(LOG), list(EVENTS))

    expected = run(fn)
    assert run(run_vm(fn)) == expected
    for backend in ("eager", "llvm"):
        c = kiln.compile(fn, backend=backend)
        assert run(c) == expected
        assert run(c) == expected  # cached


@pytest.mark.parametrize("fail", [False, True])
def test_a_break_inside_a_try_compiles_the_code_before_it(fail):
    # `t * 2` before the try is a graph; the break at note() inside the try
    # resumes there, and explain says who runs the rest: CPython, in a copy
    # of the original bytecode, while note()'s own frames are compiled (and
    # break at their print()).
    e = kiln.explain(tensor_in_try)(kiln.tensor([1.0]), fail)
    assert e.graph_count == 1 and e.ops_per_graph == [1]
    ids = [b["id"] for b in e.break_reasons]
    assert ids[0] == "inlined_break" and set(ids[1:]) == {"side_effect_builtin"}, ids
    [rest] = e.left_to_cpython_reasons
    assert rest["function"] == "tensor_in_try" and not rest["whole_frame"]
    assert "try or with block" in rest["reason"] and f"from line {tensor_in_try.__code__.co_firstlineno + 3}" in rest["reason"]


# -- tracebacks --------------------------------------------------------------------

def raises_deep(x):
    return 1 // x  # the raising line


def calls_deep(x):
    try:
        return raises_deep(x)
    finally:
        x = 0


@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_traceback_names_the_users_lines(backend):
    with pytest.raises(ZeroDivisionError) as info:
        kiln.compile(calls_deep, backend=backend)(0)
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(info.value.__traceback__)]
    raising = raises_deep.__code__.co_firstlineno + 1
    calling = calls_deep.__code__.co_firstlineno + 2
    assert (__file__, raising) in frames and (__file__, calling) in frames, frames
    assert frames.index((__file__, calling)) < frames.index((__file__, raising))


def test_traceback_of_a_user_exception_raised_in_translated_code():
    with pytest.raises(AppError) as info:
        kiln.compile(raise_user_here, backend="eager")(1)
    lines = [f.lineno for f in traceback.extract_tb(info.value.__traceback__) if f.filename == __file__]
    assert raise_user_here.__code__.co_firstlineno + 1 in lines


# -- what stays on CPython ------------------------------------------------------------

# except* is 3.11 syntax: compiled from text, so that this module imports
# on 3.10 too.
if sys.version_info >= (3, 11):
    exec(compile('''
def uses_except_star(x):
    out = "none"
    try:
        raise ExceptionGroup("g", [ValueError(x)])  # noqa: F821
    except* ValueError:
        out = "group"
    return out
''', __file__, "exec"))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="except* is CPython 3.11's syntax")
def test_except_star_stays_untranslatable():
    with pytest.raises(Untranslatable, match="except"):
        translate(uses_except_star)
    assert kiln.compile(uses_except_star, backend="eager")(1) == "group"


# -- messages found by generated programs (tests/python/progen.py) ---------------

def int_modulo_by_zero(x):
    return x % 0

def float_modulo_by_zero(x):
    return float(x) % 0.0

def float_floordiv_by_zero(x):
    return float(x) // 0.0

def str_plus_int(x):
    return "a" + x

def list_plus_int(x):
    return [1] + x

def tuple_plus_int(x):
    return (1,) + x

def sequence_times_str(x):
    return [x] * "a"

def str_times_float(x):
    return "ab" * 1.5

def max_of_nothing(x):
    return max([v for v in range(x) if v > x])  # the words differ from 3.12 on


@pytest.mark.parametrize("fn", [int_modulo_by_zero, float_modulo_by_zero, float_floordiv_by_zero, str_plus_int,
                                list_plus_int, tuple_plus_int, sequence_times_str, str_times_float,
                                max_of_nothing])
def test_operator_error_messages(fn):
    check(fn, 3)


# -- a failing method lookup split from its call by a break ----------------------

class Suppress:
    def __enter__(self):
        return 1

    def __exit__(self, t, v, tb):
        return True  # swallows what the block raises


def missing_method_in_suppressing_with(a):
    with Suppress():
        "x".nope()  # LOAD_METHOD raises: the with statement must see it
    return a


def missing_method_after_break_in_try(a):
    note("before")
    try:
        a.nope()
    except AttributeError as e:
        return str(e)
    return a


@pytest.mark.parametrize("fn", [missing_method_in_suppressing_with, missing_method_after_break_in_try])
def test_a_failing_method_lookup_is_caught_by_its_handler(fn):
    from differential import check
    check(fn, 3)


# -- an error the tracer meets while folding constants ------------------------

def folded_error_caught(a):
    log = []
    try:
        log.append([1, 2, 3][::0])  # raises at trace time too: a break, raised by the VM
    except Exception as e:
        log.append(str(e))
    try:
        log.append(a)
    finally:
        log.append("finally")
    return log


def folded_error_in_nested_try(a):
    log = []
    try:
        try:
            log.append((1, 2)[a:a:0])
        except ValueError as e:
            log.append(str(e))
            raise KeyError(a) from e
    except KeyError:
        log.append("outer")
    return log


@pytest.mark.parametrize("fn", [folded_error_caught, folded_error_in_nested_try])
def test_an_error_folding_constants_reaches_the_handler(fn):
    check(fn, 1)


# -- handlers inside the trace ---------------------------------------------------

def _cases(test):
    return [p for m in test.pytestmark if m.name == "parametrize" for p in m.args[1]]


INLINED = (_cases(test_try_except_else_finally) + _cases(test_matching_and_exception_objects)
           + _cases(test_user_exception_classes))


@pytest.mark.parametrize("fn,args", INLINED, ids=[f"{f.__name__}{a!r}" for f, a in INLINED])
def test_every_case_agrees_when_its_function_is_inlined(fn, args):
    # Called from a compiled frame, `fn` is inlined: its raises and its
    # handlers are traced (the compiled frame's own handlers are entered
    # only by CPython, after a break), and an exception no inlined handler
    # takes breaks the graph at the call, where CPython raises it.
    def caller(*a):
        return fn(*a)

    expected = outcome(fn, args)
    for backend in ("eager", "llvm"):
        compiled = kiln.compile(caller, backend=backend)
        assert outcome(compiled, args) == expected, backend
        assert outcome(compiled, args) == expected, backend + " (cached)"


def _lookup(table, key):
    try:
        return table[key]
    except KeyError:
        return -1
    finally:
        table["seen"] = True


def _first(xs):
    try:
        return xs[0]
    except IndexError as e:
        return str(e)


def _through_two_frames(d):
    try:
        return _lookup_raising(d)
    except LookupError as e:
        return type(e).__name__


def _lookup_raising(d):
    return d["missing"]


def traced_handlers(x):
    t = {"a": 1}
    return (_lookup(t, "a"), _lookup(t, "b"), t, _first([]), _first((x,)), _through_two_frames({}))


def test_handlers_of_inlined_frames_stay_in_the_graph():
    import numpy as np
    x = kiln.from_numpy(np.arange(3, dtype=np.float32))
    e = kiln.explain(kiln.compile(traced_handlers))(x)
    assert (e.graph_count, e.graph_break_count) == (0, 0) or e.graph_break_count == 0, str(e)
    got = kiln.compile(traced_handlers)(x)
    want = traced_handlers(x)
    assert got[:4] == want[:4] and got[5] == want[5]
    assert got[4] is x


class _Holder:
    def __init__(self):
        self.a = 1

    @property
    def broken(self):
        return self.missing


def _attr_direct(obj):
    try:
        return obj.nope
    except AttributeError:
        return "none"


def _attr_message(obj, name):
    try:
        return getattr(obj, name)
    except AttributeError as e:
        return str(e)


def traced_attribute_errors(x, obj):
    return (_attr_direct(obj), getattr(obj, "broken", 7), hasattr(obj, "broken"), _attr_message(obj, "zzz"),
            _attr_message(obj, "a"), x)


def test_attribute_errors_reach_inlined_handlers_and_getattr():
    import numpy as np
    x = kiln.from_numpy(np.arange(3, dtype=np.float32))
    obj = _Holder()
    want = traced_attribute_errors(x, obj)
    got = kiln.compile(traced_attribute_errors)(x, obj)
    assert got[:5] == want[:5]
    e = kiln.explain(kiln.compile(traced_attribute_errors))(x, obj)
    assert e.graph_break_count == 0, str(e)

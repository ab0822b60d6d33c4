"""copy.deepcopy / copy.copy, id() and the class checks they make, traced as
Dynamo traces them: by inlining copy's own Python code. transformers'
legacy encoder-decoders (T5, BART, Marian) deep-copy their config in
every forward (PreTrainedConfig.get_text_config, through DynamicCache),
then rename its fields with delattr / setattr; that was 23 to 46 breaks
per model.

What it takes (interpreter/translator_builtins.cpp trace_id,
translator_user_defined.cpp reduce_ex / copyreg_newobj_call /
made_delattr): id() of an object the guards pin is its own id (under an
identity guard), of one the trace made a made-up id that may not leave
the trace; object.__reduce_ex__ of a plain object is answered as CPython's
reduce_newobj answers it; copyreg.__newobj__ makes the copy in the trace;
copy's dispatch tables are read at type keys under guards.

CPython is the oracle (differential.check: results, the arguments after
the call, exceptions); explain says what stayed in one graph.
"""
import copy
import typing

import numpy as np

import kiln
from differential import check


def x0():
    return kiln.from_numpy(np.arange(4, dtype=np.float32))


def counts(fn, *args):
    e = kiln.explain(kiln.compile(fn))(*args)
    return e.graph_count, e.graph_break_count, [r["reason"] for r in e.break_reasons]


def one_graph(fn, *args):
    g, b, why = counts(fn, *args)
    assert (g, b) == (1, 0), why


class Cfg:
    def __init__(self):
        shared = [1, 2]
        self.a = 1
        self.name = "cfg"
        self.shared = shared
        self.twin = shared  # one list twice: the copy keeps them one list
        self.labels = {0: "LABEL_0", 1: "LABEL_1"}
        self.sizes = (3, (4, 5))
        self.nothing = None


def deep_copied(x, cfg):
    y = copy.deepcopy(cfg)
    y.a = 5
    y.shared.append(3)
    y.labels[2] = "LABEL_2"
    return x + y.a + len(y.twin), y, y.shared is y.twin, y.shared is cfg.shared, y.sizes == cfg.sizes


def test_deepcopy_of_a_plain_object_copies_as_cpython_does_in_one_graph():
    check(deep_copied, x0(), Cfg())
    one_graph(deep_copied, x0(), Cfg())


def deep_copied_containers(x, cfg):
    labels = copy.deepcopy(cfg.labels)
    labels[5] = "five"
    pair = copy.deepcopy([cfg.shared, cfg.shared])
    pair[0].append(9)
    return x + len(labels), labels, pair, pair[0] is pair[1], cfg.labels


def test_deepcopy_of_containers_keeps_their_aliasing():
    check(deep_copied_containers, x0(), Cfg())
    one_graph(deep_copied_containers, x0(), Cfg())


class Aliased(Cfg):
    """A transformers config's shape: its own __getattribute__ over an alias
    table, which deepcopy's getattr(x, "__deepcopy__") goes through."""
    attribute_map = {"hidden_size": "a"}

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def renamed_copy(x, cfg):
    y = copy.deepcopy(cfg)
    value = getattr(y, "name")
    delattr(y, "name")
    setattr(y, "title", value)
    del y.nothing
    return x + y.hidden_size, y, hasattr(y, "name"), cfg


def test_a_config_copied_then_renamed_with_delattr_and_setattr():
    check(renamed_copy, x0(), Aliased())
    one_graph(renamed_copy, x0(), Aliased())


def deleting_a_missing_field(x, cfg):
    y = copy.deepcopy(cfg)
    del y.missing
    return x + 1


def test_deleting_a_missing_field_of_a_copy_raises_cpythons_error():
    check(deleting_a_missing_field, x0(), Cfg())


def shallow_copied(x, cfg):
    y = copy.copy(cfg)
    y.a = 7
    y.shared.append(4)  # the same list as cfg's: the caller sees it
    return x + y.a, y, y.shared is cfg.shared


def test_copy_copy_shares_what_a_shallow_copy_shares():
    check(shallow_copied, x0(), Cfg())


class OwnDeepcopy(Cfg):
    def __deepcopy__(self, memo):
        out = OwnDeepcopy()
        out.a = self.a + 100
        return out


class OwnReduce(Cfg):
    def __reduce__(self):
        return (OwnReduce, ())


def copied_anyhow(x, cfg):
    y = copy.deepcopy(cfg)
    return x + y.a, y


def test_a_class_s_own_deepcopy_is_inlined_and_its_own_reduce_is_cpythons():
    check(copied_anyhow, x0(), OwnDeepcopy())
    one_graph(copied_anyhow, x0(), OwnDeepcopy())
    check(copied_anyhow, x0(), OwnReduce())
    _, breaks, why = counts(copied_anyhow, x0(), OwnReduce())
    assert breaks >= 1 and any("defines __reduce__" in r for r in why), why


# ---------------------------------------------------------------- id() --

def identities(x, a, b):
    return x + 1, id(a) == id(b), id(a) == id(a), a is b


def test_id_of_arguments_is_their_own_id_under_a_guard():
    lst = [1]
    check(identities, x0(), lst, [2])
    one_graph(identities, x0(), lst, [2])
    compiled = kiln.compile(identities)
    # the guards see which objects came in: each call answers for its own
    assert compiled(x0(), lst, lst)[1:] == (True, True, True)
    assert compiled(x0(), lst, [2])[1:] == (False, True, False)
    assert compiled(x0(), lst, lst)[1:] == (True, True, True)


def made_and_its_id(x):
    y = [1, 2]
    return x + 1, y, id(y)


def test_a_made_up_id_never_reaches_the_program():
    # id() of a list the trace made has no Python object to be the id of;
    # returned, the trace stops before it and CPython answers.
    _, y, i = kiln.compile(made_and_its_id)(x0())
    assert id(y) == i
    _, _, why = counts(made_and_its_id, x0())
    assert any("id() of an object the trace made" in r for r in why), why


def made_ids_compared(x):
    a, b = [1], [1]
    memo = {id(a): "a"}
    return x + 1, id(a) == id(b), memo.get(id(a)), memo.get(id(b))


def test_made_up_ids_compare_as_real_ones_inside_the_trace():
    check(made_ids_compared, x0())
    one_graph(made_ids_compared, x0())


# ----------------------------------------------------- class checks --

class DictSub(dict):
    pass


class Meta(type):
    pass


def class_checks(x, cfg):
    return (x + 1, isinstance(Cfg, type), isinstance(cfg, type), isinstance(Meta, type), issubclass(DictSub, dict),
            issubclass(Cfg, dict), issubclass(Meta, type), issubclass(type(cfg), type), issubclass(int, type))


def test_isinstance_and_issubclass_against_type_and_builtin_types():
    check(class_checks, x0(), Cfg())
    one_graph(class_checks, x0(), Cfg())


# Annotations as a dataclass validator holds them (huggingface_hub's strict
# dataclasses check every config store against its field's type).
OPTIONAL_INT = int | None
LIST_INT = list[int]
DICT_STR_INT = dict[str, int]


def annotation_parts(x):
    return (x + 1, typing.get_args(OPTIONAL_INT), typing.get_origin(OPTIONAL_INT), typing.get_origin(LIST_INT),
            typing.get_args(DICT_STR_INT), isinstance(3, OPTIONAL_INT))


def test_typing_get_args_of_pep604_and_builtin_generic_annotations():
    check(annotation_parts, x0())
    one_graph(annotation_parts, x0())

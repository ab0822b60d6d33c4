"""The model zoo (tests/python/zoo/README.md): every model of models.py
compiled with kiln as its library's users build it, compared with eager and
with the state pinned in expected.json.

A test fails when what is observed differs from the pin in either
direction: a model that starts to work, breaks less or breaks more all
change a pin, so an improvement is committed with its pin change
(`python3 -m tests.python.zoo.record NAME`, then `git diff`). Where kiln
raises today, the pin holds the exception's type and first line.

test_zoo (in `make test`): status, kiln's error, kiln's graphs and breaks;
torch.compile's counts are shown from the pins. test_zoo_full (`make zoo`,
`-m zoo_full`): the same with torch._dynamo.explain re-run and its counts
compared too.

The backend mode, torch.compile(model, backend="kiln") (issue 29), pinned
in expected_backend.json: status and error, Dynamo's graphs and breaks,
and the backend's plan (nodes, nodes run in kiln segments, segments, the
ops run as torch eager). test_zoo_backend (`make zoo`) runs every model;
test_zoo_backend_quick (in `make test`) the handful of models.BACKEND_QUICK.
"""
import pytest

from . import models
from .harness import PINNED, PINNED_BACKEND, PINNED_DYNAMO
from .record import EXPECTED_BACKEND, load

PINS = load()["models"]
BACKEND_PINS = load(EXPECTED_BACKEND)["models"]
NAMES = list(models.SPECS)


def _run(worker, name, **how):
    rec = worker.run(name, **how)
    if rec["status"] == "harness-error":
        pytest.fail(f"{name}: the harness failed (eager or the model's build, not kiln):\n"
                    f"{rec['error']}\n{rec.get('traceback', '')}")
    return rec


def _differs(rec, pin, fields):
    """One line per pinned field the record does not match."""
    return [f"  {k}: pinned {pin.get(k)!r}, now {rec.get(k)!r}" for k in fields if rec.get(k) != pin.get(k)]


def _check(worker, name, dynamo):
    pin = PINS.get(name)
    assert pin is not None, f"{name} has no pin: python3 -m tests.python.zoo.record {name}"
    rec = _run(worker, name, dynamo=dynamo)
    differs = _differs(rec, pin, PINNED + (PINNED_DYNAMO if dynamo else ()))
    if differs:
        lines = [f"{name} differs from its pin (tests/python/zoo/expected.json):"] + differs
        lines.append(f"  torch.compile: {pin.get('dynamo_graphs')} graphs, {pin.get('dynamo_breaks')} breaks"
                     f"{' (pinned)' if not dynamo else ''}")
        if rec.get("kiln_reasons"):
            lines.append("  kiln's breaks: " + "; ".join(rec["kiln_reasons"]))
        if rec.get("kiln_explain_error"):
            lines.append("  kiln.explain: " + rec["kiln_explain_error"])
        lines.append("If this is progress, re-pin it with the change: "
                     f"python3 -m tests.python.zoo.record {name}")
        if rec.get("traceback"):
            lines.append(rec["traceback"])
        pytest.fail("\n".join(lines), pytrace=False)


@pytest.mark.parametrize("name", NAMES)
def test_zoo(name, zoo_worker):
    _check(zoo_worker, name, dynamo=False)


@pytest.mark.zoo_full
@pytest.mark.parametrize("name", NAMES)
def test_zoo_full(name, zoo_worker):
    _check(zoo_worker, name, dynamo=True)


def _check_backend(worker, name):
    pin = BACKEND_PINS.get(name)
    assert pin is not None, f"{name} has no backend pin: python3 -m tests.python.zoo.record --backend {name}"
    rec = _run(worker, name, dynamo=False, mode="backend")
    differs = _differs(rec, pin, PINNED_BACKEND)
    if differs:
        lines = [f'{name} through torch.compile(backend="kiln") differs from its pin '
                 f"(tests/python/zoo/expected_backend.json):"] + differs
        if rec.get("eager_reasons"):
            lines.append("  run as torch eager: " + "; ".join(f"{t}: {r}" for t, r in rec["eager_reasons"].items()))
        if rec.get("dynamo_reason"):
            lines.append("  Dynamo's first break: " + rec["dynamo_reason"])
        lines.append("If this is progress, re-pin it with the change: "
                     f"python3 -m tests.python.zoo.record --backend {name}")
        if rec.get("traceback"):
            lines.append(rec["traceback"])
        pytest.fail("\n".join(lines), pytrace=False)


@pytest.mark.parametrize("name", models.BACKEND_QUICK)
def test_zoo_backend_quick(name, zoo_worker):
    _check_backend(zoo_worker, name)


@pytest.mark.zoo_full
@pytest.mark.parametrize("name", NAMES)
def test_zoo_backend(name, zoo_worker):
    _check_backend(zoo_worker, name)


def test_backend_pins():
    """Every model has a backend pin, recorded with the libraries installed
    here; the quick subset spans the three libraries."""
    missing = [n for n in models.SPECS if n not in BACKEND_PINS]
    stale = [n for n in BACKEND_PINS if n not in models.SPECS]
    assert not missing and not stale, \
        f"backend pins and models.py disagree (python3 -m tests.python.zoo.record --backend NAME...): " \
        f"not pinned {missing[:10]}{'...' if len(missing) > 10 else ''}, pinned but gone {stale}"
    assert {models.SPECS[n].library for n in models.BACKEND_QUICK} == {"torchvision", "timm", "transformers"}
    import torch
    import torchvision
    import timm
    import transformers
    installed = {"torch": torch.__version__, "torchvision": torchvision.__version__, "timm": timm.__version__,
                 "transformers": transformers.__version__}
    meta = load(EXPECTED_BACKEND)["meta"]
    assert installed == {k: meta.get(k) for k in installed}, \
        "the backend pins were recorded with other library versions (scripts/install.sh pins them)"


def test_catalogue():
    """Every torchvision classification constructor, at least 40 timm and
    20 transformers architectures, each pinned, and the pins recorded with
    the libraries installed here."""
    import torchvision
    import timm
    import transformers
    assert sorted(models.TORCHVISION) == sorted(torchvision.models.list_models(module=torchvision.models))
    assert len(models.TIMM) >= 40
    assert len(models.TRANSFORMERS) >= 20
    missing = [n for n in models.SPECS if n not in PINS]
    stale = [n for n in PINS if n not in models.SPECS]
    assert not missing and not stale, \
        f"pins and models.py disagree (python3 -m tests.python.zoo.record NAME...): " \
        f"not pinned {missing[:10]}{'...' if len(missing) > 10 else ''}, pinned but gone {stale}"
    meta = load()["meta"]
    import torch
    installed = {"torch": torch.__version__, "torchvision": torchvision.__version__, "timm": timm.__version__,
                 "transformers": transformers.__version__}
    pinned = {k: meta.get(k) for k in installed}
    assert installed == pinned, "the pins were recorded with other library versions (scripts/install.sh pins them)"

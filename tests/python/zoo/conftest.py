"""The zoo's pytest wiring: torchvision importable beside a CPU torch (before
anything imports torchvision, timm or transformers), the worker process
shared by the session, and the full tier behind `-m zoo_full` (`make zoo`)."""
from . import torchvision_cpu  # noqa: F401 - first: see its docstring

import pytest

from .harness import Worker


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "zoo_full: the zoo's full tier (torch._dynamo.explain re-measured); "
                   "run only when selected: -m zoo_full (make zoo)")


def pytest_collection_modifyitems(config, items):
    """The full tier runs only when asked for by name (-m zoo_full);
    otherwise its tests are deselected, not skipped."""
    if "zoo_full" in (config.option.markexpr or ""):
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("zoo_full") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def zoo_worker():
    worker = Worker()
    yield worker
    worker.close()

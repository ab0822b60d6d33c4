"""kiln's threads follow torch's (issue 28): with torch in the process the
pool runs on torch.get_num_threads() threads, a later torch.set_num_threads
applies to the next kernel, and KILN_NUM_THREADS overrides both. Each case
runs in a fresh interpreter: the pool and its source are per process."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")


def run(code, **env):
    e = {k: v for k, v in os.environ.items() if k != "KILN_NUM_THREADS"}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


FOLLOW = """
    import torch
    import kiln
    torch.set_num_threads(1)

    @kiln.compile
    def f(x):
        return torch.relu(x) * 2

    x = torch.randn(256, 256)
    assert torch.equal(f(x), torch.relu(x) * 2)
    print(kiln._C.num_threads())
    torch.set_num_threads(3)   # later changes are followed, beyond the cores too
    f(x)
    print(kiln._C.num_threads())
"""


def test_pool_follows_torch_threads():
    assert run(FOLLOW) == ["1", "3"]


def test_kiln_imported_before_torch():
    code = "import kiln\n" + textwrap.dedent(FOLLOW).replace("import kiln\n", "")
    assert run(code) == ["1", "3"]


def test_kiln_num_threads_overrides_torch():
    assert run(FOLLOW, KILN_NUM_THREADS="2") == ["2", "2"]

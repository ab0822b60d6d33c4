"""KILN_LLVM_PIPELINE (issue 17): the LLVM pipeline the llvm backend runs,
for measuring (default "kiln": 8 clean-up passes, code generation at Less).
Each value gives the same results; a value it does not know is an error
naming the variable. Run in child processes: the choice is read once."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.needs_compile

CHILD = r"""
import numpy as np, kiln
x = np.random.default_rng(0).standard_normal((3, 37)).astype(np.float32)
f = kiln.compile(lambda t: kiln.softmax(t * 2 + 1, -1), backend="llvm")
got = f(kiln.from_numpy(x)).numpy()
want = kiln.softmax(kiln.from_numpy(x) * 2 + 1, -1).numpy()
print(float(np.abs(got - want).max()))
"""


def run(pipeline):
    env = dict(os.environ, KILN_CACHE_DIR="off", KILN_LLVM_PIPELINE=pipeline, KILN_LOGS="output_code")
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("pipeline", ["kiln", "O1", "O2", "O3"])
def test_every_pipeline_gives_eager_results(pipeline):
    r = run(pipeline)
    assert r.returncode == 0, r.stderr
    out = r.stderr + r.stdout
    assert "llvm backend: 1 kernels," in out and "(compiled;" in out and "1 distinct kernels" in out
    assert float(r.stdout.strip().split()[-1]) <= 1e-6


def test_an_unknown_pipeline_is_an_error_naming_the_variable():
    r = run("O4")
    message = "KILN_LLVM_PIPELINE: expected kiln, O1, O2 or O3, got 'O4'"
    if os.environ.get("KILN_STRICT") != "1":
        # A frame kiln fails to compile runs on CPython (eager's answer),
        # and the log says why.
        assert r.returncode == 0 and float(r.stdout.strip().split()[-1]) <= 1e-6, r.stderr
        r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, KILN_CACHE_DIR="off", KILN_LLVM_PIPELINE="O4", KILN_STRICT="1"))
    assert r.returncode != 0
    assert message in r.stderr

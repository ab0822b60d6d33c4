"""A Python program under mpirun: every rank compiles the same function on
inputs of a different size (rank r: 4 + r rows). With the compiler
collective on, all ranks must end with the same guards (the row count
dynamic on all), and each rank's result must equal the eager one.

    mpirun -np N python3 ranks.py DIR          each rank writes DIR/rank<r>.txt
    python3 ranks.py --check DIR N             the N files must agree
"""
import os
import sys

import numpy as np

import kiln


def f(x, w):
    return kiln.softmax(kiln.relu(x @ w) + 1, 1)


def run(out_dir):
    rank, size = kiln.distributed.init()
    assert size >= 2, "run under mpirun with at least 2 ranks"
    kiln.config.enable_compiler_collectives = True
    kiln.config.enable_guard_collectives = True
    kiln.config.collective_timeout_s = 60
    kiln.manual_seed(rank)
    x, w = kiln.randn(4 + rank, 8), kiln.randn(8, 3)
    report = kiln.explain(f)(x, w)
    assert report.error == "", report.error
    assert np.allclose(np.asarray(report.result), np.asarray(f(x, w)), atol=1e-5)
    g = kiln.compile(f)
    for n in (4 + rank, 9):  # a size no rank has seen: one shared recompile at most
        xn = kiln.randn(n, 8)
        assert np.allclose(np.asarray(g(xn, w)), np.asarray(f(xn, w)), atol=1e-5)
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as fh:
        fh.write("\n".join(report.guards) + "\n---\n" + "\n".join(g.code for g in report.graphs))


def check(out_dir, n):
    texts = [open(os.path.join(out_dir, f"rank{r}.txt")).read() for r in range(n)]
    for r in range(1, n):
        if texts[r] != texts[0]:
            sys.exit(f"rank {r}'s guards/graphs differ from rank 0's:\n{texts[r]}\n--- vs ---\n{texts[0]}")
    if "s0" not in texts[0]:
        sys.exit("the row count should be dynamic on every rank:\n" + texts[0])
    print(f"{n} ranks: identical guards and graphs")


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(sys.argv[2], int(sys.argv[3]))
    else:
        run(sys.argv[1])

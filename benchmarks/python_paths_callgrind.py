"""Instructions per call of kiln's Python fast paths, two builds side by side.

Wall clock on this shared 2-core machine drifts by 2x from day to day (see
RESULTS.md), so a change to the fast paths is judged in instructions:
callgrind counts the same for the same binary and inputs. Each workload runs
in a fresh process with N calls and with 0 calls; the per-call figure is the
difference over N. Each build is a package directory holding kiln/ (the .py
files and _C*.so); `--base` and `--new` name them, e.g.

  python3 benchmarks/python_paths_callgrind.py --base /tmp/pkg_base --new /tmp/pkg_new

`--make-package DIR --source TREE --build BUILD` copies a tree's python/kiln
and its built extension into DIR first.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

WORKLOADS = {
    # name: (calls, setup, one call)
    "cached kiln.compile call, 4 tensor args, llvm (a + b)": (20000, """
import kiln
def f(a, b, c, d):
    return a + b
g = kiln.compile(f, backend="llvm")
xs = [kiln.randn(8) for _ in range(4)]
g(*xs)
""", "g(*xs)"),
    "cached call using builtins (len, range, isinstance, min), eager": (20000, """
import kiln
def f(a, n):
    k = min(len(a.shape), n)
    for i in range(k):
        if isinstance(i, int):
            a = a + i
    return a
g = kiln.compile(f, backend="eager")
x = kiln.randn(4, 4)
g(x, 2)
""", "g(x, 2)"),
    "kiln.reset() + compile(chain of 100 blocks, eager) + first call": (5, """
import kiln, kiln.nn as nn
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        return kiln.relu(self.fc(x)) + x
class Chain(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(n)])
    def forward(self, x):
        return self.blocks(x)
m = Chain(100)
x = kiln.randn(2, 8)
""", "kiln.reset(); kiln.compile(m, backend='eager')(x)"),
}


def instructions(package, setup, call, n):
    script = setup + f"\nfor _ in range({n}):\n    {call}\n"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.py")
        out = os.path.join(d, "cg.out")
        with open(path, "w") as f:
            f.write(script)
        # One BLAS thread: numpy's OpenBLAS worker threads spin, and callgrind
        # counts their instructions too (millions, differing run to run).
        # `-S`: no .pth files, so an editable install's import hook cannot
        # take `kiln` from another tree; site-packages (numpy) comes after
        # the package on the path.
        env = dict(os.environ, PYTHONPATH=package + os.pathsep + sysconfig.get_paths()["purelib"],
                   PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-S", path],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            for line in f:
                m = re.match(r"(summary|totals): (\d+)", line)
                if m:
                    return int(m.group(2))
    raise RuntimeError("no totals in callgrind output")


def check_package(package):
    env = dict(os.environ, PYTHONPATH=package + os.pathsep + sysconfig.get_paths()["purelib"])
    where = subprocess.run([sys.executable, "-S", "-c", "import kiln._C as c; print(c.__file__)"], env=env,
                           check=True, capture_output=True, text=True).stdout.strip()
    if not where.startswith(os.path.abspath(package)):
        raise SystemExit(f"{package}: kiln._C came from {where}, not from the package")


def per_call(package, setup, call, n):
    return (instructions(package, setup, call, n) - instructions(package, setup, call, 0)) / n


def make_package(dest, source, build):
    os.makedirs(dest, exist_ok=True)
    shutil.rmtree(os.path.join(dest, "kiln"), ignore_errors=True)
    shutil.copytree(os.path.join(source, "python", "kiln"), os.path.join(dest, "kiln"))
    for name in os.listdir(os.path.join(build, "python")):
        if name.startswith("_C") and name.endswith(".so"):
            shutil.copy(os.path.join(build, "python", name), os.path.join(dest, "kiln"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base")
    ap.add_argument("--new", required=True)
    ap.add_argument("--make-package", nargs=3, metavar=("DIR", "SOURCE", "BUILD"), action="append", default=[])
    args = ap.parse_args()
    for dest, source, build in args.make_package:
        make_package(dest, source, build)
    builds = [("base", args.base)] if args.base else []
    builds.append(("new", args.new))
    for _, pkg in builds:
        check_package(pkg)
    print(f"{'workload':66s} " + " ".join(f"{name:>14s}" for name, _ in builds) + ("    change" if args.base else ""))
    for label, (n, setup, call) in WORKLOADS.items():
        figures = [per_call(pkg, setup, call, n) for _, pkg in builds]
        row = f"{label:66s} " + " ".join(f"{v:14,.0f}" for v in figures)
        if args.base:
            row += f"  {100 * (figures[1] - figures[0]) / figures[0]:+7.1f}%"
        print(row, flush=True)


if __name__ == "__main__":
    main()

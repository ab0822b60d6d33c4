"""Run by tests/install/test_install.sh in a fresh virtual environment that
has only the kiln wheel (and its dependency numpy) installed, from a
directory outside the source tree: the installed package compiles and runs
a model with both backends, and the results match the uncompiled model.
Exit status 0 only if every check holds."""
import os
import sys

import kiln

venv = sys.prefix
for what, path in (("kiln", kiln.__file__), ("kiln._C", kiln._C.__file__)):
    if not os.path.realpath(path).startswith(os.path.realpath(venv) + os.sep):
        sys.exit(f"FAILED: {what} imported from {path}, not from the fresh venv {venv}")
    print(f"ok:     {what} from {path}")


class Block(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = kiln.nn.Linear(8, 16)
        self.fc2 = kiln.nn.Linear(16, 4)

    def forward(self, x):
        return kiln.softmax(self.fc2(kiln.relu(self.fc1(x))) * 2, 1)


kiln.manual_seed(0)
model = Block()
x = kiln.randn(5, 8)
expected = model(x).numpy()  # uncompiled: the reference

failures = 0
for backend in ("llvm", "eager"):
    compiled = kiln.compile(model, backend=backend, fullgraph=True)
    first, second = compiled(x).numpy(), compiled(x).numpy()
    ok = first.shape == expected.shape and abs(first - expected).max() < 1e-5 and (first == second).all()
    print(f"{'ok:    ' if ok else 'FAILED:'} kiln.compile(model, backend={backend!r}) matches the model")
    failures += not ok

report = kiln.explain(model)(x)
ok = report.graph_count == 1 and report.graph_break_count == 0
print(f"{'ok:    ' if ok else 'FAILED:'} explain: one graph, no break")
failures += not ok
sys.exit(1 if failures else 0)

"""One torchvision classifier, kiln against torch eager in one process
(issue 28's before/after check of the convolution epilogue): the first
call (kiln.compile + one run, KILN_CACHE_DIR=off so it compiles from
scratch) and the median of 21 alternating rounds of two calls each, one
thread for both. Run it once per build to compare, alternating builds:

    PYTHONPATH=<build>/python311 python3 benchmarks/torchvision_ab.py mobilenet_v2 [batch] [size]

torchvision is imported through the zoo's shim (tests/python/zoo/torchvision_cpu.py)."""
import os
import sys
import time

os.environ.setdefault("KILN_CACHE_DIR", "off")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "python"))
from zoo import torchvision_cpu  # noqa: E402,F401 - before torchvision
import torch  # noqa: E402
import torchvision  # noqa: E402

import kiln  # noqa: E402

torch.set_num_threads(1)
name = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1
S = int(sys.argv[3]) if len(sys.argv) > 3 else 224
torch.manual_seed(0)
m = getattr(torchvision.models, name)().eval()
x = torch.randn(N, 3, S, S)
with torch.no_grad():
    want = m(x)
    t = time.perf_counter()
    c = kiln.compile(m)
    got = c(x)
    first = (time.perf_counter() - t) * 1e3
    err = (got - want).abs().max().item()
    ks, es = [], []
    for _ in range(21):
        t = time.perf_counter(); c(x); c(x); ks.append((time.perf_counter() - t) / 2 * 1e3)
        t = time.perf_counter(); m(x); m(x); es.append((time.perf_counter() - t) / 2 * 1e3)
ks.sort()
es.sort()
print(f"{name} N={N} {S}x{S}: first {first:.0f} ms  kiln {ks[10]:.2f} ms  eager {es[10]:.2f} ms  "
      f"kiln/eager {ks[10] / es[10]:.2f}  max err {err:.1e}")

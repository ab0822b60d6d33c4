"""kiln's threads as the user set torch's (issue 28).

With torch in the process, the user's thread count is torch's
(`torch.set_num_threads`, OMP_NUM_THREADS): kiln's pool follows
`torch.get_num_threads()` on every parallel kernel, so a later
`torch.set_num_threads` applies to the next kernel, unless
KILN_NUM_THREADS says otherwise (the C++ core prefers it). Without this the
pool took every core while torch ran on the ones the user asked for.

Decided at kiln's entry points (import, kiln.compile, the torch.compile
backend), never importing torch: a program that imports torch only after
its last kiln.compile keeps every core (the documented limit).
"""
import sys

from . import _C

_following = False


def follow_torch():
    """Make torch's thread count kiln's source, once torch is imported."""
    global _following
    if _following:
        return
    torch = sys.modules.get("torch")
    torch_c = getattr(torch, "_C", None) if torch is not None else None
    path = getattr(torch_c, "__file__", None)
    if path is None:  # not imported (or only partly, during its own import)
        return
    _following = True
    if not _C._follow_torch_threads(path):
        # at::get_num_threads not found in torch's library (an unusual build):
        # torch's count now, without following later changes.
        _C._set_fixed_threads(int(torch.get_num_threads()))

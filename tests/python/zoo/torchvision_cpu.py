"""Makes `import torchvision` work beside torch 2.13.0+cpu. Import this module
before torchvision, timm or transformers (the zoo's conftest.py and worker
do); it changes nothing where torchvision's C extension loads.

Why: the registry's torchvision wheels are CUDA builds. torchvision 0.28.0
(the release paired with torch 2.13.0, installed --no-deps by
scripts/install.sh) ships a `_C.so` linked against libtorch_cuda.so, which a
CPU torch does not have, so the extension does not load. torchvision
handles that (`extension._has_ops()` is False, the ops raise a clear error
when called), except in `torchvision/_meta_registrations.py`, which
registers fake kernels for `torchvision::nms` and `torchvision::qnms`
unconditionally: with no such operators, `import torchvision` raises
`RuntimeError: operator torchvision::nms does not exist`, and so do
`import timm` and transformers' model classes (both import torchvision when
it is installed).

What this does: when the extension cannot be loaded, it defines the schemas
of those two operators (and nothing else) with torch.library, so the
registrations succeed. No kernel is registered: `torchvision.ops.nms` still
raises torchvision's own "Couldn't load custom C++ ops" error. The
classification models, timm and transformers are pure Python and use none
of torchvision's C ops. Nothing under site-packages is edited, no import
hook is installed, and a CPU torchvision whose extension loads is left
alone. docs/zoo.md has the decision and the alternatives.
"""
import glob
import importlib.util
import os

import torch

# The schemas torchvision 0.28's _meta_registrations.py registers fake
# kernels for without checking _has_ops() (from torchvision/csrc/ops/nms.cpp).
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

_library = None  # the torch.library.Library holding the definitions, kept alive
state = None     # "absent" | "extension" | "schemas": what ensure() found and did


def _extension_loads(package_dir):
    """Whether torchvision's _C extension loads into this torch (as
    torchvision.extension would load it: torch.ops.load_library)."""
    for lib in sorted(glob.glob(os.path.join(package_dir, "_C*.so"))):
        try:
            torch.ops.load_library(lib)
            return True
        except (OSError, RuntimeError):
            return False
    return False


def _has_schema(name):
    try:
        torch._C._get_schema(name, "")
        return True
    except RuntimeError:
        return False


def ensure():
    """Idempotent: returns what it found ("absent": torchvision is not
    installed; "extension": its C ops load; "schemas": they do not, and the
    two schemas were defined)."""
    global _library, state
    if state is not None:
        return state
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        state = "absent"
    elif _has_schema("torchvision::nms") or _extension_loads(os.path.dirname(spec.origin)):
        state = "extension"
    else:
        _library = torch.library.Library("torchvision", "DEF")
        for schema in _SCHEMAS:
            _library.define(schema)
        state = "schemas"
    return state


ensure()

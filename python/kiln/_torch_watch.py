"""Change signals for the torch modules kiln mirrors (issue 13).

kiln mirrors a torch.nn.Module as a C++ module read from torch's own dicts
(python/src/torch_modules.h). Python 3.11 has no dict watchers, and torch
changes a tensor's metadata under the same object without touching any
dict (`p.data = ...`, `m.double()`, `requires_grad_()`), so without a
signal every compiled call would have to compare each mirrored module's
dicts and each held tensor's metadata: O(modules + tensors) per call.

`install(bump)` routes every way Python code changes what a mirror reads
through `bump()`, which advances kiln's torch epoch; a compiled call whose
epoch (and torch's global hook dicts' version tags) are unchanged skips
the walk: O(1) however many layers the tree has. The ways, each with a
test in tests/python/test_torch_modules.py ("every change recompiles"):

- attribute stores and deletions on any module (`m.fc = ...`, `del m.x`,
  `m.train()`/`eval()`, which store `training`): nn.Module.__setattr__ /
  __delattr__;
- the methods that write a module's dicts directly (register_parameter,
  register_buffer, register_module/add_module, the forward (pre-)hook
  registrations, _apply behind to()/double()/cuda()), and a hook handle's
  remove();
- writes into a mirrored module's `_parameters`, `_buffers`, `_modules`
  themselves (`m._modules["fc"] = ...`, as model-surgery code does): the
  mirror replaces those dicts with `WatchedDict`s (a dict that bumps on
  every write, and pickles as a plain dict);
- a tensor's metadata changed in place: the `data` and `requires_grad`
  setters, requires_grad_(), detach_(), the in-place view and resize ops
  (t_, transpose_, squeeze_, unsqueeze_, as_strided_, resize_, set_, ...)
  and torch.utils.swap_tensors.

Not seen (documented limits): stores that bypass these Python entry points
(`object.__setattr__(m, ...)`, `m.__dict__[...] = ...`, C++ extensions that
resize a parameter, an `out=` argument that resizes a parameter). Values
changed in place (an optimizer step, `copy_`) need no signal: kiln reads
the tensors' memory itself.
"""
import functools

_installed = False

# Module methods that write a module's dicts without __setattr__.
_MODULE_WRITERS = (
    "register_parameter", "register_buffer", "register_module", "add_module", "_apply",
    "register_forward_hook", "register_forward_pre_hook", "__setstate__",
)
# Tensor methods that change a tensor's sizes, strides, storage, dtype or
# requires_grad in place.
_TENSOR_WRITERS = (
    "requires_grad_", "detach_", "resize_", "resize_as_", "set_", "as_strided_", "t_", "transpose_",
    "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_", "__setstate__",
)


class WatchedDict(dict):
    """A module's _parameters / _buffers / _modules once kiln mirrors it:
    every write tells kiln (the dict API's writers all go through here)."""

    _bump = None  # set by install()

    def __setitem__(self, key, value):
        WatchedDict._bump()
        dict.__setitem__(self, key, value)

    def __delitem__(self, key):
        WatchedDict._bump()
        dict.__delitem__(self, key)

    def pop(self, *args):
        WatchedDict._bump()
        return dict.pop(self, *args)

    def popitem(self):
        WatchedDict._bump()
        return dict.popitem(self)

    def clear(self):
        WatchedDict._bump()
        dict.clear(self)

    def update(self, *args, **kwargs):
        WatchedDict._bump()
        dict.update(self, *args, **kwargs)

    def setdefault(self, key, default=None):
        WatchedDict._bump()
        return dict.setdefault(self, key, default)

    def __ior__(self, other):
        WatchedDict._bump()
        return dict.__ior__(self, other)

    def __reduce__(self):  # torch.save(model) stays loadable without kiln
        return (dict, (dict(self),))

    def __copy__(self):
        return dict(self)


def _bumping(fn, bump):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bump()
        return fn(*args, **kwargs)

    wrapper._kiln_watch = True
    return wrapper


def _wrap(owner, name, bump):
    fn = owner.__dict__.get(name)
    if fn is None:
        fn = getattr(owner, name, None)
    if fn is None or getattr(fn, "_kiln_watch", False):
        return
    setattr(owner, name, _bumping(fn, bump))


def _watched_setter(owner, name, bump):
    """Overrides a C getset descriptor (Tensor.data) with a property whose
    setter bumps; reads go to the original descriptor."""
    base = None
    for klass in owner.__mro__:
        if name in klass.__dict__:
            base = klass.__dict__[name]
            break
    if base is None or isinstance(base, property) and getattr(base.fset, "_kiln_watch", False):
        return

    def fset(self, value):
        bump()
        base.__set__(self, value)

    fset._kiln_watch = True
    setattr(owner, name, property(base.__get__, fset, None, getattr(base, "__doc__", None)))


def install(bump):
    """Routes torch's module and tensor writers through bump (once)."""
    global _installed
    if _installed:
        return
    import torch
    import torch.utils.hooks

    WatchedDict._bump = staticmethod(bump)
    module = torch.nn.Module
    for name in ("__setattr__", "__delattr__", *_MODULE_WRITERS):
        _wrap(module, name, bump)
    _wrap(torch.utils.hooks.RemovableHandle, "remove", bump)
    tensor = torch.Tensor
    for name in _TENSOR_WRITERS:
        _wrap(tensor, name, bump)
    for name in ("data", "requires_grad"):
        _watched_setter(tensor, name, bump)
    _wrap(torch.utils, "swap_tensors", bump)
    _installed = True

"""kiln.nn: torch.nn-style modules backed by kiln's C++ Module model.

    class Block(kiln.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc = kiln.nn.Linear(d, d)
        def forward(self, x):
            return kiln.relu(self.fc(x))

Every instance owns a C++ module (its `_parameters`, `_modules`, `_buffers`
and plain attributes live there), so the tracer reads them directly, as
for KBC modules. Each subclass gets a C++ class whose methods are the
KBC translations of its functions (kiln._frontend); a method kiln cannot
translate stays a Python callable (calls to it are graph breaks).

Calling a module (`m(x)`) runs what a compiled call would run, on kiln's
reference VM: pre-hooks, forward, hooks. kiln.compile(m) traces that call.
"""
import weakref

from . import _C
from ._compile import _as_kbc

__all__ = ["Module", "Parameter", "Linear", "ReLU", "GELU", "LayerNorm", "Embedding", "Dropout",
           "Sequential", "ModuleList", "ModuleDict", "LazyLinear"]

_MODULE = _C.module_class("Module")


_PARAMETER = _C.builtin("Parameter")


def Parameter(t):
    """A tensor marked as a parameter: assigning it to a module attribute
    registers it in `_parameters` (shares t's memory)."""
    return _C.call(_PARAMETER, t)


def _methods_of(cls):
    """The C++ class's method table: each function of the Python class as
    KBC (or a Python callable), properties as properties."""
    methods = {}
    for name, attr in vars(cls).items():
        if name in ("__init__", "__new__", "__init_subclass__", "__module__", "__qualname__", "__doc__",
                    "__dict__", "__weakref__", "__setattr__", "__call__"):
            continue
        if isinstance(attr, property):
            if attr.fget is not None:
                methods[name] = _C.make_property(_C.as_value(attr.fget))
        elif callable(attr) and hasattr(attr, "__code__"):
            methods[name] = _C.as_value(attr)
    return methods


class Module:
    """Subclass it like torch.nn.Module: assign parameters, buffers and
    submodules in __init__, write forward in Python."""

    _kiln_class = _MODULE

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "_kiln_class" in vars(cls):  # a wrapper of a built-in class
            return
        base = next(b._kiln_class for b in cls.__mro__[1:] if "_kiln_class" in vars(b))
        cls._kiln_class = _C.make_class(cls.__qualname__, base, _methods_of(cls))
        _CLASSES[_C.class_id(cls._kiln_class)] = cls

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        if getattr(cls, "_kiln_builtin", False):
            value = _C.module_instantiate(cls._kiln_class, self, *args, **kwargs)
        else:
            value = _C.module_new(cls._kiln_class, self)
        object.__setattr__(self, "_kiln_value", value)
        return self

    def __init__(self, *args, **kwargs):
        pass  # the C++ module exists already (__new__); subclasses fill it

    def __del__(self):
        value = self.__dict__.get("_kiln_value")
        if value is not None:
            _C.module_release(value, self)

    # Attributes live in the C++ module: the tracer reads them there.
    def __setattr__(self, name, value):
        _C.module_setattr(self._kiln_value, name, value)

    def __getattr__(self, name):  # only for names Python's lookup did not find
        if name.startswith("__") or name == "_kiln_value":
            raise AttributeError(name)
        return _C.module_getattr(self._kiln_value, name)

    def __call__(self, *args, **kwargs):
        return _C.module_call(self._kiln_value, *args, **kwargs)

    # Container modules (Sequential, ModuleList, ModuleDict) index, measure
    # and iterate as in torch; other modules raise TypeError, as there.
    def __getitem__(self, key):
        return _C.module_getitem(self._kiln_value, key)

    def __len__(self):
        return _C.module_len(self._kiln_value)

    def __iter__(self):
        return iter(_C.module_items(self._kiln_value))

    def forward(self, *args):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    # --- the Module API, answered by the C++ model ------------------------
    def _method(self, name):
        return _C.module_getattr(self._kiln_value, name)

    def parameters(self, recurse=True):
        return iter(_C.call(self._method("parameters"), recurse))

    def named_parameters(self, prefix="", recurse=True):
        pre = prefix + "." if prefix else ""
        return iter([(pre + n, p) for n, p in _C.call(self._method("named_parameters"), recurse)])

    def buffers(self, recurse=True):
        return iter(_C.call(self._method("buffers"), recurse))

    def named_buffers(self, prefix="", recurse=True):
        pre = prefix + "." if prefix else ""
        return iter([(pre + n, b) for n, b in _C.call(self._method("named_buffers"), recurse)])

    def children(self):
        return iter(_C.call(self._method("children")))

    def named_children(self):
        return iter(_C.call(self._method("named_children")))

    def modules(self):
        return iter(_C.call(self._method("modules")))

    def named_modules(self):
        return iter(_C.call(self._method("named_modules")))

    def state_dict(self):
        return _C.call(self._method("state_dict"))

    def load_state_dict(self, state):
        return _C.call(self._method("load_state_dict"), state)

    def train(self, mode=True):
        _C.call(self._method("train"), mode)
        return self

    def eval(self):
        return self.train(False)

    @property
    def training(self):
        return _C.module_getattr(self._kiln_value, "training")

    def register_buffer(self, name, tensor):
        _C.call(self._method("register_buffer"), name, tensor)

    def register_parameter(self, name, param):
        _C.call(self._method("register_parameter"), name, param)

    def add_module(self, name, module):
        _C.call(self._method("add_module"), name, module)

    def register_forward_pre_hook(self, hook):
        """hook(module, args) -> None or new args, before forward."""
        return _C.call(self._method("register_forward_pre_hook"), hook)  # a handle with .remove()

    def register_forward_hook(self, hook):
        """hook(module, args, output) -> None or new output, after forward."""
        return _C.call(self._method("register_forward_hook"), hook)

    def __repr__(self):
        return _C.repr(self)

    # copy.deepcopy: an independent module (tensors cloned, shared ones
    # stay shared in the copy, hooks kept); pickle: the class by reference
    # (it must be importable, as for any pickled object) and the state.
    def __deepcopy__(self, memo):
        return _C.module_deepcopy(self._kiln_value, memo)

    def __reduce_ex__(self, protocol):
        return (_rebuild_module, (type(self), _C.module_state(self._kiln_value)))


# Python class by its C++ class's identity (not its name: two local classes
# may both be called Block).
_CLASSES = weakref.WeakValueDictionary({_C.class_id(_MODULE): Module})


def _builtin(name):
    cls = type(name, (Module,), {"_kiln_class": _C.module_class(name), "_kiln_builtin": True,
                                 "__doc__": f"kiln's built-in {name} (same arguments as torch.nn.{name})."})
    _CLASSES[_C.class_id(cls._kiln_class)] = cls
    return cls


Linear = _builtin("Linear")
ReLU = _builtin("ReLU")
GELU = _builtin("GELU")
LayerNorm = _builtin("LayerNorm")
Embedding = _builtin("Embedding")
Dropout = _builtin("Dropout")
Sequential = _builtin("Sequential")
ModuleList = _builtin("ModuleList")
ModuleDict = _builtin("ModuleDict")
LazyLinear = _builtin("LazyLinear")


def _rebuild_module(cls, state):
    self = object.__new__(cls)
    value = _C.module_new(cls._kiln_class, self)
    object.__setattr__(self, "_kiln_value", value)
    _C.module_set_state(value, state)
    return self


def _wrap(value):
    """A C++ module with no Python owner yet (a built-in's own children):
    an instance of the matching kiln.nn class around it."""
    cls = _CLASSES.get(_C.class_id(_C.module_class_of(value)), Module)
    self = object.__new__(cls)
    object.__setattr__(self, "_kiln_value", value)
    _C.module_adopt(value, self)
    return self


_C._set_module_wrapper_factory(_wrap)
_C._set_module_base(Module)

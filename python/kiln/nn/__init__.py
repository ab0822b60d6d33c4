"""kiln.nn: torch.nn-style modules backed by kiln's C++ Module model.

    class Block(kiln.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc = kiln.nn.Linear(d, d)
        def forward(self, x):
            return kiln.relu(self.fc(x))

Every instance owns a C++ module (its `_parameters`, `_modules`, `_buffers`
and plain attributes live there), so the tracer reads them directly, as
for KBC modules. Each subclass gets a C++ class holding what the class
body defines: its functions as their KBC translations (kiln._frontend; a
method kiln cannot translate stays a Python callable, and calls to it are
graph breaks), properties (getter, setter, deleter), staticmethods,
classmethods and class constants. The Python class and the C++ class are
one class seen from either side: KBC code that reads `Child` (or
`m.__class__`, or a classmethod's `cls`) gets the C++ class, and handing it
back to Python gives `Child` again; calling it constructs in Python.
Zero-argument super() works in translated methods as in Python (the
method's `__class__` cell holds the class).

Calling a module (`m(x)`) runs what a compiled call would run, on kiln's
reference VM: pre-hooks, forward, hooks. kiln.compile(m) traces that call.
"""
import abc

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


# Class-body names that are Python's machinery, or kiln.nn's, not the
# class's behaviour as kiln code sees it.
_NOT_ATTRIBUTES = frozenset({
    "__new__", "__init_subclass__", "__class_getitem__", "__module__", "__qualname__", "__doc__", "__dict__",
    "__weakref__", "__annotations__", "__slots__", "__classcell__", "__orig_bases__", "__parameters__",
    "__setattr__", "__delattr__", "__getattribute__", "__call__", "_kiln_class"})


def _function(f):
    return None if f is None else _C.as_value(f)


def _class_attr(name, attr):
    """What the C++ class holds for one class attribute: a function as KBC
    (or a Python callable), a property, staticmethod or classmethod as
    such, a class constant as itself (a list or dict stays the class's own
    object); None for Python's own machinery."""
    if name in _NOT_ATTRIBUTES:
        return None
    if isinstance(attr, property):
        return _C.make_property(_function(attr.fget), _function(attr.fset), _function(attr.fdel))
    if isinstance(attr, staticmethod):
        return _C.make_staticmethod(_C.as_value(attr.__func__))
    if isinstance(attr, classmethod):
        return _C.make_classmethod(_C.as_value(attr.__func__))
    if callable(attr) and hasattr(attr, "__code__"):
        return _C.as_method(attr)
    if name.startswith("__") and name.endswith("__"):
        return None
    return _C.as_value_shared(attr)


def _kiln_base(cls):
    """The class whose C++ class is cls's C++ base: the first in its MRO
    with a C++ class of its own."""
    return next((b for b in cls.__mro__[1:] if "_kiln_class" in vars(b)), None)


def _class_attrs(cls):
    """cls's attributes as Python resolves them (the first class of the MRO
    that defines a name wins), less those the C++ base chain answers itself:
    a mixin's methods (class M(Mixin, nn.Module)) land in M's C++ class,
    while a name that a class of the chain defines first stays there."""
    chain = set()
    base = _kiln_base(cls)
    while base is not None:
        chain.add(base)
        base = _kiln_base(base)
    first = {}
    for klass in cls.__mro__:
        if klass is not object:
            for name, attr in vars(klass).items():
                first.setdefault(name, (klass, attr))
    attrs = {}
    for name, (klass, attr) in first.items():
        if klass in chain:
            continue
        value = _class_attr(name, attr)
        if value is not None:
            attrs[name] = value
    return attrs


class _ModuleType(abc.ABCMeta):
    """The class of kiln.nn.Module classes: a class attribute set or deleted
    after the class is made (`Child.K = 5`, a patched method) changes the
    C++ class too, as Python's lookup would see it. An ABCMeta, so that
    `class Base(nn.Module, ABC)` (a common torch idiom) has one metaclass."""

    def __setattr__(cls, name, value):
        super().__setattr__(name, value)
        kiln_class = cls.__dict__.get("_kiln_class")
        if kiln_class is not None:
            converted = _class_attr(name, value)
            if converted is not None:
                _C.set_class_attr(kiln_class, name, converted)

    def __delattr__(cls, name):
        super().__delattr__(name)
        kiln_class = cls.__dict__.get("_kiln_class")
        if kiln_class is not None and name not in _NOT_ATTRIBUTES:
            _C.del_class_attr(kiln_class, name)


class Module(metaclass=_ModuleType):
    """Subclass it like torch.nn.Module: assign parameters, buffers and
    submodules in __init__, write forward in Python."""

    _kiln_class = _MODULE

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "_kiln_class" in vars(cls):  # a wrapper of a built-in class
            return
        kiln_class = _C.make_class(cls.__name__, cls.__qualname__, _kiln_base(cls)._kiln_class)
        _C.register_class(kiln_class, cls, True)
        cls._kiln_class = kiln_class
        # After the class is a kiln class: the methods' `__class__` cells
        # (zero-argument super) then hold it as kiln code sees classes.
        _C.set_class_attrs(kiln_class, _class_attrs(cls))

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        object.__setattr__(self, "_kiln_value", _C.module_new(cls._kiln_class, self))
        return self

    def __init__(self, *args, **kwargs):
        pass  # the C++ module exists already (__new__); subclasses fill it

    def __del__(self):
        value = self.__dict__.get("_kiln_value")
        if value is not None:
            _C.module_release(value, self)

    # Attributes live in the C++ module: the tracer reads them there. A
    # property of the class (a data descriptor) is Python's, as in torch:
    # its setter or deleter runs, or Python's AttributeError.
    def __setattr__(self, name, value):
        if _is_data_descriptor(type(self), name):
            object.__setattr__(self, name, value)
        else:
            _C.module_setattr(self._kiln_value, name, value)

    def __delattr__(self, name):
        if _is_data_descriptor(type(self), name):
            object.__delattr__(self, name)
        else:
            _C.module_delattr(self._kiln_value, name)

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


def _is_data_descriptor(cls, name):
    """`name` is a property (or another data descriptor) of cls below
    kiln.nn.Module, found as Python's attribute lookup would."""
    for c in cls.__mro__:
        if c is Module:
            return False
        attr = c.__dict__.get(name)
        if attr is not None:
            return hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")
    return False


_C.register_class(_MODULE, Module, False)


def _builtin_init(self, *args, **kwargs):
    # The built-in class's own (native) __init__: reached as torch reaches
    # nn.Linear.__init__, also from a subclass's super().__init__(...).
    _C.module_init_builtin(self._kiln_value, *args, **kwargs)


def _builtin(name):
    # __module__ given: the metaclass (an ABCMeta) would otherwise name abc,
    # and pickle finds a class by its module.
    cls = type(name, (Module,), {"_kiln_class": _C.module_class(name), "__init__": _builtin_init,
                                 "__module__": __name__,
                                 "__doc__": f"kiln's built-in {name} (same arguments as torch.nn.{name})."})
    _C.register_class(cls._kiln_class, cls, False)
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
    cls = _C.python_class(_C.module_class_of(value)) or Module
    self = object.__new__(cls)
    object.__setattr__(self, "_kiln_value", value)
    _C.module_adopt(value, self)
    return self


_C._set_module_wrapper_factory(_wrap)
_C._set_module_base(Module)

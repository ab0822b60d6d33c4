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

Calling a module (`m(x)`) is CPython's call, as torch's is: pre-hooks,
forward, hooks, each the program's own callable (a built-in's forward is
its native kernel). The KBC forms of a class's functions are only the
tracer's view of them; no Python program runs on the KBC VM. kiln.compile(m)
traces the whole call (kiln/_frames.py: Module.__call__ of the compiled
module is traced as kiln's module call; the forward frames of kiln.nn's own
classes are too, wherever CPython reaches them).
"""
import abc

from .. import _C
from .._functions import _as_kbc

__all__ = ["Module", "Parameter", "Linear", "ReLU", "GELU", "LayerNorm", "Embedding", "Dropout",
           "Sequential", "ModuleList", "ModuleDict", "LazyLinear", "Identity", "Flatten", "Tanh", "Sigmoid",
           "SiLU", "Softmax", "Conv1d", "Conv2d", "BatchNorm1d", "BatchNorm2d", "MaxPool1d", "MaxPool2d",
           "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "GRU", "MultiheadAttention",
           "functional", "init"]

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


def class_attr(name, attr):
    """What the C++ class holds for one class attribute: a function as KBC
    (or a Python callable) once first looked up, a property, staticmethod or classmethod as
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
        # Translated when the tracer first looks it up (most of a library
        # class's methods never are): python/src/nn.cpp pending_method.
        return _C.pending_method(attr)
    if name.startswith("__") and name.endswith("__"):
        return None
    return _C.as_value_shared(attr)


def _kiln_base(cls):
    """The class whose C++ class is cls's C++ base: the first in its MRO
    with a C++ class of its own."""
    return next((b for b in cls.__mro__[1:] if "_kiln_class" in vars(b)), None)


def first_definition(cls, name, chain):
    """(klass, attr): the first class of cls's MRO that defines `name`, and
    what it defines; (None, None) when none does, or when that class is one
    of `chain` (the base classes whose C++ class answers for themselves).
    Python's own lookup order: a mixin's method (class M(Mixin, nn.Module))
    is M's, a name the chain defines first is the chain's."""
    for klass in cls.__mro__:
        if klass is object:
            break
        attrs = vars(klass)
        if name in attrs:
            return (None, None) if klass in chain else (klass, attrs[name])
    return None, None


def _read_class_attr(cls, name):
    """One attribute of a kiln.nn.Module subclass's C++ class, read from the
    Python class the first time the tracer looks it up (python/src/
    host_classes.cpp: read_class_attrs_from), or None."""
    chain = set()
    base = _kiln_base(cls)
    while base is not None:
        chain.add(base)
        base = _kiln_base(base)
    klass, attr = first_definition(cls, name, chain)
    return None if klass is None else class_attr(name, attr)


class _ModuleType(abc.ABCMeta):
    """The class of kiln.nn.Module classes: an ABCMeta, so that `class
    Base(nn.Module, ABC)` (a common torch idiom) has one metaclass. A class
    attribute set later (`Child.K = 5`, a patched method, on the class, a
    base or a mixin) needs no hook: the C++ class compares the Python
    class's type version before every lookup (python/src/host_classes.h)."""


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
        # Nothing copied: the tracer reads an attribute the first time it
        # looks one up (a method is translated then, after the class is a
        # kiln class, so its `__class__` cell reads as one).
        _C.read_class_attrs_from(kiln_class, cls, _read_class_attr)

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
    # A plain attribute is also in the instance's __dict__ (torch keeps it
    # there): Python finds it before a class attribute of the same name.
    def __setattr__(self, name, value):
        if _is_data_descriptor(type(self), name):
            object.__setattr__(self, name, value)
        elif _C.module_setattr(self._kiln_value, name, value):
            self.__dict__[name] = value
        else:
            self.__dict__.pop(name, None)

    def __delattr__(self, name):
        if _is_data_descriptor(type(self), name):
            object.__delattr__(self, name)
        else:
            _C.module_delattr(self._kiln_value, name)
            self.__dict__.pop(name, None)

    def __getattr__(self, name):  # only for names Python's lookup did not find
        if name.startswith("__") or name == "_kiln_value":
            raise AttributeError(name)
        return _C.module_getattr(self._kiln_value, name)

    def __call__(self, *args, **kwargs):
        # torch's order, run by CPython on the program's own callables:
        # pre-hooks (which may replace the positional arguments), forward,
        # hooks (which may replace the output); keywords pass straight to
        # forward. Inside a compiled call the frame hook compiles the frames
        # this reaches (kiln/_frames.py traces kiln.nn's own forwards as
        # module calls).
        value = self._kiln_value
        _C.module_materialize(value, *args, **kwargs)
        pre_hooks, hooks = _C.module_hooks(value)
        if pre_hooks or hooks:
            kept = self.__dict__.get("_kiln_hook_objects", {})
            pre_hooks = [kept.get(i, h) for i, h in pre_hooks]
            hooks = [kept.get(i, h) for i, h in hooks]
        for hook in pre_hooks:
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        output = self.forward(*args, **kwargs)
        for hook in hooks:
            result = hook(self, args, output)
            if result is not None:
                output = result
        return output

    # Container modules (Sequential, ModuleList, ModuleDict) index, measure
    # and iterate as in torch; other modules raise TypeError, as there.
    def __getitem__(self, key):
        return _C.module_getitem(self._kiln_value, key)

    def __len__(self):
        return _C.module_len(self._kiln_value)

    def __iter__(self):
        return iter(_C.module_items(self._kiln_value))

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # --- the Module API, answered by the C++ model ------------------------
    def _method(self, name):
        return _C.module_getattr(self._kiln_value, name)

    def parameters(self, recurse=True):
        return iter(_C.call(self._method("parameters"), recurse))

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return iter(_C.call(self._method("named_parameters"), prefix, recurse, remove_duplicate))

    def buffers(self, recurse=True):
        return iter(_C.call(self._method("buffers"), recurse))

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return iter(_C.call(self._method("named_buffers"), prefix, recurse, remove_duplicate))

    def children(self):
        return iter(_C.call(self._method("children")))

    def named_children(self):
        return iter(_C.call(self._method("named_children")))

    def modules(self):
        return iter(_C.call(self._method("modules")))

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        return iter(_C.call(self._method("named_modules"), memo, prefix, remove_duplicate))

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
        return self._keep_hook(hook, _C.call(self._method("register_forward_pre_hook"), hook))

    def register_forward_hook(self, hook):
        """hook(module, args, output) -> None or new output, after forward."""
        return self._keep_hook(hook, _C.call(self._method("register_forward_hook"), hook))

    def _keep_hook(self, hook, handle):
        # The C++ module holds the tracer's (KBC) view of the hook, which
        # refers to the Python callable only weakly; the module keeps the
        # program's own object, which its eager calls run (a lambda
        # registered and forgotten included). Removed hooks' entries go here.
        live = {i for hooks in _C.module_hooks(self._kiln_value) for i, _ in hooks}
        kept = {i: h for i, h in self.__dict__.get("_kiln_hook_objects", {}).items() if i in live}
        kept[handle.id] = hook
        object.__setattr__(self, "_kiln_hook_objects", kept)
        return handle  # .remove() unregisters it

    def apply(self, fn):
        """fn(m) for every submodule, children first, then this one (torch's
        order; the way models run their weight initialization)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs):
        """Module.to(device): kiln's only device is the cpu, where the module
        is already; other devices and dtype conversions are refused."""
        for a in list(args) + list(kwargs.values()):
            if a is None or str(a) in ("cpu", "cpu:0"):
                continue
            if isinstance(a, str) and a in ("float32", "float64", "int64", "bool"):
                raise NotImplementedError("Module.to(dtype) is not supported by kiln: convert the tensors "
                                          "before building the module")
            raise RuntimeError(f"kiln has only the cpu device, not '{a}'")
        return self

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


def _native_forward(kiln_class, name):
    """The Python forward of a built-in class: its native forward, called
    by CPython (Module.__call__, a subclass's super().forward). A function
    of its own per class (its code is the frame hook's key: kiln/_frames.py
    traces it as kiln's module call, with a cache per class)."""
    source = ("def forward(self, input):\n"
              "    return _C.module_forward(_CLASS, self._kiln_value, input)\n")
    scope = {"_C": _C, "_CLASS": kiln_class}
    exec(compile(source, __file__, "exec"), scope)
    forward = scope["forward"]
    forward.__qualname__ = f"{name}.forward"
    return forward


def _sequential_forward(self, input):
    # torch's: each child called (hooks and all) on the previous result.
    for module in self:
        input = module(input)
    return input


def _builtin(name):
    # __module__ given: the metaclass (an ABCMeta) would otherwise name abc,
    # and pickle finds a class by its module.
    kiln_class = _C.module_class(name)
    attrs = {"_kiln_class": kiln_class, "__init__": _builtin_init, "__module__": __name__,
             "__doc__": f"kiln's built-in {name} (same arguments as torch.nn.{name})."}
    if name == "Sequential":
        attrs["forward"] = _sequential_forward
    elif _C.class_has_native_forward(kiln_class):
        attrs["forward"] = _native_forward(kiln_class, name)
    cls = type(name, (Module,), attrs)
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

# ---- modules written in Python over kiln.nn.functional: one forward serves
# eager calls (CPython) and compiled ones (the tracer inlines it) ------------

import math  # noqa: E402

from . import functional as F  # noqa: E402
from . import init  # noqa: E402


def _ntuple(x, n):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,) * n


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return _C.flatten(input, self.start_dim, self.end_dim)


class Tanh(Module):
    def forward(self, input):
        return _C.tanh(input)


class Sigmoid(Module):
    def forward(self, input):
        return _C.sigmoid(input)


class SiLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.silu(input, self.inplace)


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)


class _ConvNd(Module):
    _rank = 0  # spatial dims

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        n = self._rank
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be one of ('zeros', 'reflect', 'replicate', 'circular'), "
                             f"but got padding_mode='{padding_mode}'")
        kernel_size, stride, dilation = _ntuple(kernel_size, n), _ntuple(stride, n), _ntuple(dilation, n)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of ('valid', 'same')")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = _ntuple(padding, n)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.groups, self.padding_mode = groups, padding_mode
        # What F.pad takes for padding_mode != 'zeros': (left, right) per dim, last dim first.
        pads = []
        for d, k, p in zip(reversed(dilation), reversed(kernel_size),
                           reversed(padding if not isinstance(padding, str) else (None,) * n)):
            if padding == "same":
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]
            elif padding == "valid":
                pads += [0, 0]
            else:
                pads += [p, p]
        self._reversed_padding_repeated_twice = tuple(pads)
        self.weight = Parameter(_C.empty(out_channels, in_channels // groups, *kernel_size, dtype=dtype,
                                         device=device))
        if bias:
            self.bias = Parameter(_C.empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        # torch's: kaiming_uniform_(a=sqrt(5)), bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        conv = _C.conv1d if self._rank == 1 else _C.conv2d
        if self.padding_mode != "zeros":
            return conv(F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode),
                        self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv1d(_ConvNd):
    _rank = 1


class Conv2d(_ConvNd):
    _rank = 2


class _BatchNorm(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(_C.ones(num_features, dtype=dtype, device=device))
            self.bias = Parameter(_C.zeros(num_features, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", _C.ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", _C.zeros((), dtype="int64"))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, input):
        self._check_input_dim(input)
        # torch's rules: batch statistics in training, and in evaluation too
        # when there are no running statistics; the running ones (and the
        # counter, which momentum=None averages by) move only in training.
        tracking = self.training and self.track_running_stats
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        use_running = not self.training or self.track_running_stats
        return _C.batch_norm(input, self.running_mean if use_running else None,
                             self.running_var if use_running else None, self.weight, self.bias, bn_training,
                             self.momentum, self.eps,
                             num_batches_tracked=self.num_batches_tracked if tracking else None)


class BatchNorm1d(_BatchNorm):
    def _check_input_dim(self, input):
        if input.dim() != 2 and input.dim() != 3:
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class BatchNorm2d(_BatchNorm):
    def _check_input_dim(self, input):
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")


class _MaxPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode


class MaxPool1d(_MaxPoolNd):
    def forward(self, input):
        return _C.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                             ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class MaxPool2d(_MaxPoolNd):
    def forward(self, input):
        return _C.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                             ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad

    def forward(self, input):
        return _C.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        return _C.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad, self.divisor_override)


class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return _C.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return _C.adaptive_avg_pool2d(input, self.output_size)


class GRU(Module):
    """torch.nn.GRU: the same parameters (weight_ih_l{k}[_reverse], gate rows
    r, z, n) and the same arithmetic, written over kiln ops. A torch GRU is
    traced as this class (kiln/_torch_api.py MODULES): each step's gates are
    a few graph ops, the input projections of all steps one GEMM per layer
    and direction, and the time loop unrolls in the trace (its length is a
    number: a symbolic sequence length is specialized, with a guard)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None):
        super().__init__()
        if not (isinstance(dropout, (int, float)) and 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional = bidirectional
        directions = 2 if bidirectional else 1
        for layer in range(num_layers):
            for d in range(directions):
                sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
                width = input_size if layer == 0 else hidden_size * directions
                setattr(self, "weight_ih" + sfx, Parameter(_C.empty(3 * hidden_size, width, dtype=dtype)))
                setattr(self, "weight_hh" + sfx, Parameter(_C.empty(3 * hidden_size, hidden_size, dtype=dtype)))
                if bias:
                    setattr(self, "bias_ih" + sfx, Parameter(_C.empty(3 * hidden_size, dtype=dtype)))
                    setattr(self, "bias_hh" + sfx, Parameter(_C.empty(3 * hidden_size, dtype=dtype)))
        self.reset_parameters()

    def reset_parameters(self):
        # torch's: every weight and bias U(-1/sqrt(hidden), 1/sqrt(hidden)).
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def forward(self, input, hx=None):
        batched = input.dim() == 3
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)  # [T, B, features]
        steps, batch = x.shape[0], x.shape[1]
        directions = 2 if self.bidirectional else 1
        if hx is None:
            hx = _C.zeros(self.num_layers * directions, batch, self.hidden_size, dtype=x.dtype)
        elif not batched:
            hx = hx.unsqueeze(1)
        last = []
        layer_in = x
        for layer in range(self.num_layers):
            outputs = []
            for d in range(directions):
                sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
                w_hh = getattr(self, "weight_hh" + sfx)
                b_hh = getattr(self, "bias_hh" + sfx) if self.bias else None
                # The input's share of every step's gates at once.
                gi = F.linear(layer_in, getattr(self, "weight_ih" + sfx),
                              getattr(self, "bias_ih" + sfx) if self.bias else None)
                h = hx[layer * directions + d]
                hs = [None] * steps
                order = range(steps - 1, -1, -1) if d == 1 else range(steps)
                for t in order:
                    gh = F.linear(h, w_hh, b_hh)
                    i_r, i_z, i_n = gi[t].chunk(3, 1)
                    h_r, h_z, h_n = gh.chunk(3, 1)
                    r = _C.sigmoid(i_r + h_r)
                    z = _C.sigmoid(i_z + h_z)
                    n = _C.tanh(i_n + r * h_n)
                    h = (1 - z) * n + z * h
                    hs[t] = h
                outputs.append(_C.stack(hs, 0))
                last.append(h)
            layer_in = outputs[0] if directions == 1 else _C.cat(outputs, 2)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, True)
        out = layer_in
        h_n = _C.stack(last, 0)
        if not batched:
            return out.squeeze(1), h_n.squeeze(1)
        if self.batch_first:
            out = out.transpose(0, 1)
        return out, h_n



# ----------------------------------------------------- MultiheadAttention --
# torch.nn.MultiheadAttention over kiln ops (kiln.nn.MultiheadAttention).
#
# A torch MultiheadAttention is traced as this class (kiln/_torch_api.py
# MODULES), so a torchvision ViT's encoder is one graph: torch's own forward
# reads the MHA fast-path switches (torch.backends.mha, has_torch_function,
# autocast, make_fx tracing) and calls F.multi_head_attention_forward, whose
# helpers kiln has no lowering for, a break per layer.
#
# The arithmetic is F.multi_head_attention_forward's, step for step, over the
# module's own parameters (in_proj_weight or q/k/v_proj_weight, in_proj_bias,
# bias_k/bias_v, out_proj): the input projection, masks made additive
# (_canonical_mask), the key padding mask merged into the attention mask,
# then torch's two ways: with need_weights, softmax(q k^T / sqrt(d) + mask) v
# with the weights returned (averaged over heads by default); without, one
# scaled_dot_product_attention (kiln's tiled kernel). torch's inference fast
# path (_native_multi_head_attention) computes the same within rounding.


def _canonical_mask(mask, dtype):
    """torch's F._canonical_mask: a bool mask (True: masked out) as an
    additive float mask (-inf where True); a float mask as it is."""
    if mask is None or mask.dtype != "bool":
        return mask
    return _C.masked_fill(_C.zeros_like(mask, dtype=dtype), mask, float("-inf"))


class MultiheadAttention(Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(_C.empty(3 * embed_dim, embed_dim, dtype=dtype))
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.q_proj_weight = Parameter(_C.empty(embed_dim, embed_dim, dtype=dtype))
            self.k_proj_weight = Parameter(_C.empty(embed_dim, self.kdim, dtype=dtype))
            self.v_proj_weight = Parameter(_C.empty(embed_dim, self.vdim, dtype=dtype))
            self.in_proj_weight = None
        self.in_proj_bias = Parameter(_C.empty(3 * embed_dim, dtype=dtype)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(_C.empty(1, 1, embed_dim, dtype=dtype))
            self.bias_v = Parameter(_C.empty(1, 1, embed_dim, dtype=dtype))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        # torch's: xavier-uniform projections, zero biases, normal bias_k/v.
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def _in_projection(self, query, key, value):
        # Three projections, also for self-attention (torch makes one GEMM
        # when `query is key is value`): `is` between two traced tensors is
        # no question a trace can answer, and the sums are the same.
        w, b = self.in_proj_weight, self.in_proj_bias
        ws = w.chunk(3) if self._qkv_same_embed_dim else (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        bs = (None, None, None) if b is None else b.chunk(3)
        return F.linear(query, ws[0], bs[0]), F.linear(key, ws[1], bs[1]), F.linear(value, ws[2], bs[2])

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        batched = query.dim() == 3
        if self.batch_first and batched:  # torch's layout inside: [L, N, E]
            query, key, value = query.transpose(1, 0), key.transpose(1, 0), value.transpose(1, 0)
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        tgt_len, bsz, embed_dim = query.shape
        heads, head_dim = self.num_heads, self.head_dim
        key_padding_mask = _canonical_mask(key_padding_mask, query.dtype)
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                               "module method `generate_square_subsequent_mask` to create this mask.")
        if is_causal and key_padding_mask is None and not need_weights:
            attn_mask = None  # scaled_dot_product_attention's own causal mask
        else:
            attn_mask = _canonical_mask(attn_mask, query.dtype)
            if key_padding_mask is not None:
                is_causal = False
        q, k, v = self._in_projection(query, key, value)
        if attn_mask is not None and attn_mask.dim() == 2:
            attn_mask = attn_mask.unsqueeze(0)
        if self.bias_k is not None and self.bias_v is not None:
            k = _C.cat([k, self.bias_k.repeat(1, bsz, 1)])
            v = _C.cat([v, self.bias_v.repeat(1, bsz, 1)])
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        q = q.reshape(tgt_len, bsz * heads, head_dim).transpose(0, 1)
        k = k.reshape(k.shape[0], bsz * heads, head_dim).transpose(0, 1)
        v = v.reshape(v.shape[0], bsz * heads, head_dim).transpose(0, 1)
        if self.add_zero_attn:
            zeros = _C.zeros(bsz * heads, 1, head_dim, dtype=k.dtype)
            k, v = _C.cat([k, zeros], 1), _C.cat([v, zeros], 1)
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        src_len = k.shape[1]
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.reshape(bsz, 1, 1, src_len).expand(-1, heads, -1, -1) \
                .reshape(bsz * heads, 1, src_len)
            attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            q_scaled = q * math.sqrt(1.0 / float(head_dim))
            weights = _C.matmul(q_scaled, k.transpose(-2, -1))
            if attn_mask is not None:
                weights = weights + attn_mask
            weights = F.softmax(weights, dim=-1)
            if dropout_p > 0.0:
                weights = F.dropout(weights, dropout_p)
            out = _C.matmul(weights, v).transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
            out = F.linear(out, self.out_proj.weight, self.out_proj.bias).reshape(tgt_len, bsz, -1)
            weights = weights.reshape(bsz, heads, tgt_len, src_len)
            if average_attn_weights:
                weights = weights.mean(dim=1)
            if not batched:
                out, weights = out.squeeze(1), weights.squeeze(0)
        else:
            if attn_mask is not None:
                attn_mask = attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1 \
                    else attn_mask.reshape(bsz, heads, -1, src_len)
            q = q.reshape(bsz, heads, tgt_len, head_dim)
            k = k.reshape(bsz, heads, src_len, head_dim)
            v = v.reshape(bsz, heads, src_len, head_dim)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
            out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
            out = F.linear(out, self.out_proj.weight, self.out_proj.bias).reshape(tgt_len, bsz, -1)
            weights = None
            if not batched:
                out = out.squeeze(1)
        if self.batch_first and batched:
            out = out.transpose(1, 0)
        return out, weights

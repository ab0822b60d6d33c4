"""kiln.nn.init: torch.nn.init's initializers, filling a tensor in place
from kiln's seeded generator (kiln.manual_seed makes them reproducible).

    kiln.nn.init.normal_(module.weight, mean=0.0, std=0.02)

Each returns its tensor, as torch's do. The distributions are torch's; the
numbers are kiln's (a different generator).
"""
import math

from .. import _C

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"]


def _fill(tensor, values):
    tensor[...] = values
    return tensor


def _floating(tensor, name):
    if tensor.dtype not in ("float32", "float64"):
        raise TypeError(f"{name}(): expected a floating point tensor, got {tensor.dtype}")


def calculate_gain(nonlinearity, param=None):
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    _floating(tensor, "uniform_")
    return _fill(tensor, _C.rand(*tensor.shape, dtype=tensor.dtype) * (b - a) + a)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    _floating(tensor, "normal_")
    return _fill(tensor, _C.randn(*tensor.shape, dtype=tensor.dtype) * std + mean)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std) restricted to [a, b]: draws outside are drawn again."""
    _floating(tensor, "trunc_normal_")
    if not a < b:
        raise ValueError(f"trunc_normal_(): a ({a}) must be less than b ({b})")
    values = _C.randn(*tensor.shape, dtype=tensor.dtype) * std + mean
    for _ in range(1000):
        outside = (values < a) | (values > b)
        if not outside.numpy().any():
            return _fill(tensor, values)
        values = _C.where(outside, _C.randn(*tensor.shape, dtype=tensor.dtype) * std + mean, values)
    raise ValueError(f"trunc_normal_(): [{a}, {b}] holds too little of N({mean}, {std}^2) to sample from")


def constant_(tensor, val):
    return _fill(tensor, val)


def ones_(tensor):
    return _fill(tensor, 1)


def zeros_(tensor):
    return _fill(tensor, 0)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if 0 in tensor.shape:
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if 0 in tensor.shape:
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std)

"""kiln.nn.functional: torch.nn.functional's names and signatures over
kiln's ops.

    import kiln.nn.functional as F
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)

Where kiln's registry op already has torch's signature the function *is*
the op (kiln.conv2d, kiln.cross_entropy, ...), so compiled code calls it
directly; the rest are small Python functions that compiled code inlines.
Arguments that only matter to autograd (padding_idx, _stacklevel) are
accepted and ignored; `inplace=True` really updates the tensor.
"""
from .. import _C

__all__ = [
    "relu", "gelu", "silu", "tanh", "sigmoid", "softmax", "log_softmax", "layer_norm", "linear", "embedding",
    "dropout", "scaled_dot_product_attention", "cross_entropy", "binary_cross_entropy", "mse_loss", "conv1d",
    "conv2d", "batch_norm", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d",
    "adaptive_avg_pool2d", "pad", "hardtanh", "relu6", "hardswish", "hardsigmoid", "leaky_relu", "elu",
    "softplus", "mish", "group_norm", "normalize"]

# The ops whose signatures are torch's own.
gelu = _C.gelu
tanh = _C.tanh
sigmoid = _C.sigmoid
layer_norm = _C.layer_norm
linear = _C.linear
dropout = _C.dropout
scaled_dot_product_attention = _C.scaled_dot_product_attention
cross_entropy = _C.cross_entropy
binary_cross_entropy = _C.binary_cross_entropy
mse_loss = _C.mse_loss
conv1d = _C.conv1d
conv2d = _C.conv2d
batch_norm = _C.batch_norm
max_pool1d = _C.max_pool1d
max_pool2d = _C.max_pool2d
avg_pool1d = _C.avg_pool1d
avg_pool2d = _C.avg_pool2d
adaptive_avg_pool1d = _C.adaptive_avg_pool1d
adaptive_avg_pool2d = _C.adaptive_avg_pool2d
pad = _C.pad


def _in_place(input, out, inplace):
    if inplace:
        input[...] = out
        return input
    return out


def relu(input, inplace=False):
    return _in_place(input, _C.relu(input), inplace)


def silu(input, inplace=False):
    return _in_place(input, input * _C.sigmoid(input), inplace)


def _softmax_dim(ndim):
    # torch's implicit dim (deprecated there, kept for old code).
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return _C.softmax(input, _softmax_dim(input.dim()) if dim is None else dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return _C.log_softmax(input, _softmax_dim(input.dim()) if dim is None else dim)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    # padding_idx only keeps that row's gradient at zero: kiln's kernels
    # ignore it, torch's autograd lowering passes it on.
    if max_norm is not None:
        raise NotImplementedError("embedding(): max_norm (renormalizing rows in place) is not supported by kiln")
    if padding_idx is not None:
        return _C.embedding(input, weight, padding_idx)
    return _C.embedding(input, weight)


# The activations below are written in torch's CPU kernels' order of
# operations (aten/src/ATen/native/cpu/Activation.cpp), so float32 results
# round as torch's do.

def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _in_place(input, _C.clamp(input, min_val, max_val), inplace)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def hardswish(input, inplace=False):
    return _in_place(input, input * _C.clamp(input + 3.0, 0.0, 6.0) / 6.0, inplace)


def hardsigmoid(input, inplace=False):
    return _in_place(input, _C.clamp(input + 3.0, 0.0, 6.0) / 6.0, inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _in_place(input, _C.where(input > 0, input, input * negative_slope), inplace)


def elu(input, alpha=1.0, inplace=False):
    # torch: expm1(x) * alpha; exp(x) - 1 differs from it by rounding
    # only (at most ~1e-7 absolute for float32, where x is near 0).
    return _in_place(input, _C.where(input > 0, input, (_C.exp(input) - 1.0) * alpha), inplace)


def softplus(input, beta=1.0, threshold=20.0):
    # torch: log1p(exp(x * beta)) / beta below the threshold, x above it.
    scaled = input * beta
    return _C.where(scaled > threshold, input, _C.log(_C.exp(scaled) + 1.0) / beta)


def mish(input, inplace=False):
    return _in_place(input, input * _C.tanh(softplus(input)), inplace)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05):
    # Statistics over each group's channels and positions, biased variance,
    # as torch's (N, G, C/G * HW) view computes them.
    shape = input.shape
    x = _C.reshape(input, (shape[0], num_groups, -1))
    mean = _C.mean(x, -1, True)
    centered = x - mean
    var = _C.mean(centered * centered, -1, True)
    out = _C.reshape(centered * _C.rsqrt(var + eps), shape)
    affine = (shape[1],) + (1,) * (len(shape) - 2)
    if weight is not None:
        out = out * _C.reshape(weight, affine)
    if bias is not None:
        out = out + _C.reshape(bias, affine)
    return out


def vector_norm(input, p=2.0, dim=None, keepdim=False):
    """The p-norm over `dim` (every element when None), as
    torch.linalg.vector_norm computes it: sum(|x|**p) ** (1/p), with the
    max / min of |x| for p = inf / -inf and the count of nonzeros for 0."""
    if p == 2:
        return _C.sqrt(_C.sum(input * input, dim, keepdim))
    if p == 1:
        return _C.sum(_C.abs(input), dim, keepdim)
    if p == float("inf"):
        return _C.amax(_C.abs(input), dim, keepdim)
    if p == float("-inf"):
        return -_C.amax(-_C.abs(input), dim, keepdim)
    if p == 0:
        return _C.sum((input != 0).to(input.dtype), dim, keepdim)
    return _C.sum(_C.abs(input) ** p, dim, keepdim) ** (1.0 / p)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    # torch's: input / max(||input||_p over dim, eps), the norm kept as a
    # size-1 dim (XCiT's and Swin V2's cosine attention, EdgeNeXt).
    if out is not None:
        raise TypeError("kiln.nn.functional.normalize: out= is not supported")
    return input / _C.clamp_min(vector_norm(input, p, dim, True), eps)

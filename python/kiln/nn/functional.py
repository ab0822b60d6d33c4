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
    "adaptive_avg_pool2d", "pad"]

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


def relu(input, inplace=False):
    if inplace:
        input[...] = _C.relu(input)
        return input
    return _C.relu(input)


def silu(input, inplace=False):
    out = input * _C.sigmoid(input)
    if inplace:
        input[...] = out
        return input
    return out


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

"""The torch API as kiln sees it: one table (issue 13).

Each row names a torch object by its path and what kiln runs for it:

  "op"          kiln's registry op of that name (runtime/tensor/ops.def), whose
                signature is torch's: the traced call records that op
  "F.name"      kiln.nn.functional.<name> (torch.nn.functional's signature)
  a function    an adapter below: torch's signature (argument names,
                defaults, keyword-only arguments) over kiln's ops, inlined
                by the tracer like any Python function
  a str value   for a dtype: kiln's dtype name

kiln never imports torch: `install` runs once torch has been imported by
the program and one of its objects reaches kiln
(python/src/torch_interop.h). Then python/src/torch_values.cpp maps each
row's torch object to its kiln value, so `torch.relu(x)` in compiled code
is kiln's relu. A torch function without a row stays torch's own: called,
on the VM, with kiln's tensors passed as torch tensors over the same
memory, and a traced call breaks there with "torch.nn.functional.unfold has
no kiln lowering" (graph_breaks.def: library_fallback). An adapter meets an
argument kiln has no lowering for (`out=`, a rounding mode, a device) by
calling torch's own function the same way (`_torch(...)`).

Tensor methods: a torch tensor is a kiln tensor in kiln code, so its
methods are kiln's (every registry op is one). TENSOR_METHODS adds torch's
methods kiln lacks or spells otherwise; they become methods of kiln
tensors too (in compiled code, the VM and Python).
"""
import math
import sys
import types

from . import _C
from . import nn as _nn
from .nn import functional as _F


# torch's own functions by name, as kiln values that bypass this table
# (filled by install): calling one in compiled code breaks to torch,
# naming it. An adapter calls them for arguments kiln has no lowering for.
_TORCH = {}


# ------------------------------------------------------------ adapters --
# Each is torch's signature; the body uses kiln's ops (kiln._C.<op>).
#
# @_over("op"): the adapter only adds arguments torch has and kiln's op
# lacks (alpha=, dtype=, out=); with those at their defaults it is the op,
# with the same arguments in the same order. Read backwards, the row's
# torch object is then torch's form of the op (autograd_lowerings below).

def _over(op):
    def mark(fn):
        fn.__kiln_op__ = op
        return fn
    return mark


@_over("add")
def add(input, other, *, alpha=1, out=None):
    if out is not None:
        return _TORCH["add"](input, other, alpha=alpha, out=out)
    return _C.add(input, other if alpha == 1 else other * alpha)


@_over("sub")
def sub(input, other, *, alpha=1, out=None):
    if out is not None:
        return _TORCH["sub"](input, other, alpha=alpha, out=out)
    return _C.sub(input, other if alpha == 1 else other * alpha)


@_over("div")
def div(input, other, *, rounding_mode=None, out=None):
    if out is not None or rounding_mode == "trunc":
        return _TORCH["div"](input, other, rounding_mode=rounding_mode, out=out)
    if rounding_mode == "floor":
        return _C.floor_divide(input, other)
    return _C.div(input, other)


def _reduce(op, input, dim, keepdim, dtype):
    if dtype is not None:
        input = input.to(dtype)
    return op(input, dim, keepdim)


@_over("sum")
def sum(input, dim=None, keepdim=False, *, dtype=None):
    return _reduce(_C.sum, input, dim, keepdim, dtype)


@_over("mean")
def mean(input, dim=None, keepdim=False, *, dtype=None):
    return _reduce(_C.mean, input, dim, keepdim, dtype)


@_over("softmax")
def softmax(input, dim, dtype=None):
    return _F.softmax(input, dim, dtype=dtype)


@_over("log_softmax")
def log_softmax(input, dim, dtype=None):
    return _F.log_softmax(input, dim, dtype=dtype)


def embedding(weight, input, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # torch.embedding (aten's order: weight first), not F.embedding.
    return _C.embedding(input, weight)


@_over("dropout")
def dropout(input, p, train):
    return _C.dropout(input, p, train)


@_over("clone")
def clone(input, *, memory_format=None):
    return _C.clone(input)


@_over("transpose")
def transpose(input, dim0, dim1):
    return _C.transpose(input, dim0, dim1)


def t(input):
    if input.dim() < 2:
        return input
    return _C.transpose(input, 0, 1)


def addcmul(input, tensor1, tensor2, *, value=1, out=None):
    # torch's order: input + value * tensor1 * tensor2 (timm's ResMLP affine).
    if out is not None:
        return _TORCH["addcmul"](input, tensor1, tensor2, value=value, out=out)
    return input + value * tensor1 * tensor2


def norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    # torch.norm / Tensor.norm: a vector norm over dim (all elements when
    # None); "fro" is the 2-norm over those dims. Matrix norms ("nuc", an
    # int p over two dims of torch.linalg.norm), out=, integer tensors (torch
    # raises) and keepdim over every dim stay torch's own.
    if (out is not None or not input.is_floating_point() or isinstance(p, str) and p != "fro"
            or (dim is None and keepdim)):
        return _TORCH["norm"](input, p, dim, keepdim, out=out, dtype=dtype)
    if dtype is not None:
        input = input.to(dtype)
    return _F.vector_norm(input, 2.0 if p == "fro" else p, dim, keepdim)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    if out is not None or not x.is_floating_point() or (dim is None and keepdim):
        return _TORCH["vector_norm"](x, ord, dim, keepdim, dtype=dtype, out=out)
    if dtype is not None:
        x = x.to(dtype)
    return _F.vector_norm(x, ord, dim, keepdim)


def _scaled_product_plus(input, product, beta, alpha):
    # beta * input + alpha * product, addmm's and baddbmm's arithmetic; with
    # beta 0 the input is not read (its NaNs do not reach the result), as
    # torch documents.
    r = product if alpha == 1 else product * alpha
    if beta == 0:
        return r
    return r + (input if beta == 1 else input * beta)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    if out is not None:
        return _TORCH["baddbmm"](input, batch1, batch2, beta=beta, alpha=alpha, out=out)
    return _scaled_product_plus(input, _C.matmul(batch1, batch2), beta, alpha)


def einsum(equation, *operands):
    # One or two operands with explicit output labels, each label once per
    # operand, sizes equal where labels meet: a permute, a sum over the
    # labels only one side has, and one batched matmul over the shared ones
    # (MaxViT's and ConViT's attention). Ellipses, repeated labels, implicit
    # outputs and three or more operands stay torch's own.
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    spec = _einsum_spec(eq, operands)
    if spec is None:
        return _TORCH["einsum"](equation, *operands)
    ins, out = spec
    if len(operands) == 1:
        a, la = _einsum_sum_out(operands[0], ins[0], out)
        return _C.permute(a, [la.index(c) for c in out])
    (a, b), (la, lb) = operands, ins
    # Labels one operand has alone and the output lacks: summed out first.
    a, la = _einsum_sum_out(a, la, out + lb)
    b, lb = _einsum_sum_out(b, lb, out + la)
    batch = [c for c in out if c in la and c in lb]
    left = [c for c in out if c in la and c not in lb]
    right = [c for c in out if c in lb and c not in la]
    contract = [c for c in la if c in lb and c not in out]
    size = {c: a.shape[i] for i, c in enumerate(la)}
    size.update({c: b.shape[i] for i, c in enumerate(lb)})

    def prod(labels):
        n = 1
        for c in labels:
            n = n * size[c]
        return n

    a = _C.reshape(_C.permute(a, [la.index(c) for c in batch + left + contract]),
                   (prod(batch), prod(left), prod(contract)))
    b = _C.reshape(_C.permute(b, [lb.index(c) for c in batch + contract + right]),
                   (prod(batch), prod(contract), prod(right)))
    r = _C.reshape(_C.matmul(a, b), tuple(size[c] for c in batch + left + right))
    order = batch + left + right
    return _C.permute(r, [order.index(c) for c in out])


def diff(input, n=1, dim=-1, prepend=None, append=None, *, out=None):
    # n first differences along dim, after prepend / append are joined on:
    # transformers' packed-sequence mask (masking_utils). A bool tensor's
    # difference is its xor (torch's rule); n < 0 and out= are torch's own.
    if out is not None or n < 0 or input.dim() == 0:
        return _TORCH["diff"](input, n, dim, prepend, append, out=out)
    parts = [t for t in (prepend, input, append) if t is not None]
    if len(parts) > 1:
        input = _C.cat(parts, dim)
    for _ in range(n):
        length = input.shape[dim]
        later, earlier = _slice(input, dim, 1, length), _slice(input, dim, 0, length - 1)
        input = later != earlier if input.dtype == "bool" else later - earlier
    return input


@_over("cumsum")
def cumsum(input, dim, *, dtype=None, out=None):
    if out is not None:
        return _TORCH["cumsum"](input, dim, dtype=dtype, out=out)
    return _C.cumsum(input, dim, dtype=dtype)


def _f32(v):
    # v rounded to float32 (to nearest, ties to even: 24 significant bits),
    # with math's frexp/ldexp, which a trace folds (struct it cannot).
    m, e = math.frexp(v)
    return math.ldexp(round(m * 16777216.0) / 16777216.0, e)


def _nearest_rows(n_in, n_out, factor):
    """The source rows of nearest-neighbour resampling n_in -> n_out, as
    torch's kernel picks them (UpSample.h nearest_idx: its scale a float32,
    1 / factor when given, else n_in / n_out, times the output position in
    float32)."""
    if n_out == n_in:
        return list(range(n_out))
    if n_out == 2 * n_in:
        return [o >> 1 for o in range(n_out)]
    scale = _f32(1.0 / float(factor)) if factor is not None and factor > 0 else _f32(_f32(float(n_in)) / _f32(float(n_out)))
    rows = [int(math.floor(_f32(_f32(float(o)) * scale))) for o in range(n_out)]
    return [r if r < n_in else n_in - 1 for r in rows]  # (this module's min is torch.min's adapter)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    # mode="nearest" (hrnet's, FPNs' and UNets' nn.Upsample): a gather of
    # source rows per spatial dim, the rows torch's kernel reads. Other
    # modes, and sizes known only when the graph runs, stay torch's own.
    spatial = input.dim() - 2
    ins = [input.shape[2 + d] for d in range(spatial)]  # (empty for spatial <= 0)
    if (mode != "nearest" or antialias or not 1 <= spatial <= 3 or (size is None) == (scale_factor is None)
            or not all(type(n) is int for n in ins)):
        return _TORCH["interpolate"](input, size, scale_factor, mode, align_corners, recompute_scale_factor,
                                     antialias)
    if size is not None:
        outs = list(size) if isinstance(size, (list, tuple)) else [size] * spatial
        factors = [None] * spatial
    else:
        factors = list(scale_factor) if isinstance(scale_factor, (list, tuple)) else [scale_factor] * spatial
        outs = [int(math.floor(float(n) * float(f))) for n, f in zip(ins, factors)]
        if recompute_scale_factor:
            factors = [None] * spatial
    if len(outs) != spatial or not all(type(o) is int and o > 0 for o in outs):
        return _TORCH["interpolate"](input, size, scale_factor, mode, align_corners, recompute_scale_factor,
                                     antialias)
    x = input
    for d in range(spatial):
        n_in, n_out, f = ins[d], outs[d], factors[d]
        if n_in == n_out:
            continue
        rows = _C.tensor(_nearest_rows(n_in, n_out, f), dtype="int64")
        x = x[(slice(None),) * (2 + d) + (rows,)]
    return x


def _einsum_sum_out(x, labels, keep):
    """x summed over its labels that `keep` lacks, and the labels left."""
    drop = [i for i, c in enumerate(labels) if c not in keep]
    if not drop:
        return x, labels
    return _C.sum(x, drop, False), "".join([c for c in labels if c in keep])


def _einsum_spec(eq, operands):
    """(input label strings, output labels) when einsum() can take `eq`
    over `operands`, else None."""
    if "->" not in eq or "." in eq or len(operands) not in (1, 2):
        return None
    lhs, out = eq.split("->")
    ins = lhs.split(",")
    if len(ins) != len(operands) or not all(hasattr(t, "shape") for t in operands):
        return None
    labels = "".join(ins) + out
    if not all(c.isalpha() for c in labels) or len(set(out)) != len(out):
        return None
    size = {}
    for lx, t in zip(ins, operands):
        if len(set(lx)) != len(lx) or len(lx) != len(t.shape):
            return None
        for c, n in zip(lx, t.shape):
            if size.setdefault(c, n) != n:
                return None  # a size-1 label broadcast against another size
    if any(c not in size for c in out):
        return None
    return ins, out


def mm(input, mat2):
    return _C.matmul(input, mat2)


def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    # GPT-2's Conv1D (transformers' pytorch_utils) and aten's addmm.
    if out is not None:
        return _TORCH["addmm"](input, mat1, mat2, beta=beta, alpha=alpha, out=out)
    return _scaled_product_plus(input, _C.matmul(mat1, mat2), beta, alpha)


def numel(input):
    return input.numel()


def max(input, dim=None, keepdim=False):
    # torch.max(x) is the largest element; torch.max(x, dim) its values and
    # indices (a tuple here: unpacking works, .values does not).
    if dim is None:
        return _C.amax(input)
    if not isinstance(dim, int):
        return _C.maximum(input, dim)
    return _C.amax(input, dim, keepdim), _C.argmax(input, dim, keepdim)


def min(input, dim=None, keepdim=False):
    if dim is None:
        return -_C.amax(-input)
    if not isinstance(dim, int):
        return _C.minimum(input, dim)
    return -_C.amax(-input, dim, keepdim), _C.argmin(input, dim, keepdim)


def zeros(*size, out=None, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False):
    return _C.zeros(*size, dtype=dtype)


def ones(*size, out=None, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False):
    return _C.ones(*size, dtype=dtype)


def full(size, fill_value, *, out=None, dtype=None, layout=None, device=None, pin_memory=False,
         requires_grad=False):
    return _C.full(size, fill_value, dtype=dtype)


def arange(start, end=None, step=1, *, out=None, dtype=None, layout=None, device=None, pin_memory=False,
           requires_grad=False):
    return _C.arange(start, end, step, dtype=dtype)


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    # torch.tensor of Python data (a KV cache's torch.tensor([])): a
    # constant the trace folds. A tensor to record gradients for, pinned
    # memory, a torch dtype kiln lacks or another device named by a str is
    # torch's own; a torch.device object is the CPU's (torch's CPU build,
    # as the other factories here take it: transformers passes
    # device=self.device).
    if (requires_grad or pin_memory or not (dtype is None or isinstance(dtype, str))
            or (isinstance(device, str) and device not in ("cpu", "cpu:0"))):
        return _TORCH["tensor"](data, dtype=dtype, device=device, requires_grad=requires_grad, pin_memory=pin_memory)
    return _C.tensor(data, dtype)


def _like(op):
    def like(input, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
        return op(input, dtype=dtype)
    return _over(op.__name__)(like)


zeros_like = _like(_C.zeros_like)
ones_like = _like(_C.ones_like)
randn_like = _like(_C.randn_like)
rand_like = _like(_C.rand_like)
empty_like = _like(_C.empty_like)


@_over("full_like")
def full_like(input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    return _C.full_like(input, fill_value, dtype=dtype)


# torch.finfo(dtype) / torch.iinfo(dtype): plain objects with torch's
# fields (read in traces as constants), made by install() from torch's own.
_FINFO = {}


def finfo(type=None):
    return _FINFO["float32" if type is None else type]


def iinfo(type):
    return _FINFO[type]


# Tensor methods (self first).

@_over("to")
def to(self, *args, **kwargs):
    # torch's forms: to(dtype), to(device), to(device, dtype), to(other),
    # to(dtype=..., device=...), plus non_blocking/copy. The device is
    # always the CPU here (a CUDA tensor never becomes a kiln tensor).
    dtype = kwargs.get("dtype", None)
    for a in args:
        if isinstance(a, str) and a in ("float32", "float64", "int32", "int64", "bool"):
            dtype = a
        elif isinstance(a, _C.Tensor):
            dtype = a.dtype
    if kwargs.get("copy", False):
        return _C.clone(self) if dtype is None or dtype == self.dtype else _C.to(self, dtype)
    if dtype is None or dtype == self.dtype:
        return self
    return _C.to(self, dtype)


def type_as(self, other):
    return to(self, other.dtype)


def view_as(self, other):
    return _C.view(self, other.shape)


def reshape_as(self, other):
    return _C.reshape(self, other.shape)


def expand_as(self, other):
    return _C.expand(self, other.shape)


def detach(self):
    return _C.view(self, self.shape)


def cpu(self):
    return self


def ndimension(self):
    return self.dim()


def nelement(self):
    return self.numel()


def is_floating_point(self):
    return self.dtype == "float32" or self.dtype == "float64"


def repeat(self, *sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    x = self
    for _ in range(len(sizes) - x.dim()):
        x = _C.unsqueeze(x, 0)
    parts = x
    for d in range(len(sizes)):
        if sizes[d] != 1:
            parts = _C.cat([parts] * sizes[d], d)
    return parts


def new_zeros(self, *size, dtype=None, layout=None, device=None, pin_memory=False,
              requires_grad=False):
    return _C.zeros(*size, dtype=self.dtype if dtype is None else dtype)


def new_ones(self, *size, dtype=None, layout=None, device=None, pin_memory=False,
             requires_grad=False):
    return _C.ones(*size, dtype=self.dtype if dtype is None else dtype)


def new_full(self, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False,
             requires_grad=False):
    return _C.full(size, fill_value, dtype=self.dtype if dtype is None else dtype)


def new_empty(self, *size, dtype=None, layout=None, device=None, pin_memory=False,
              requires_grad=False):
    return _C.empty(*size, dtype=self.dtype if dtype is None else dtype)


# x.add_(y): the result written into x's memory (a caller's tensor sees it;
# in a trace this is an item assignment, whose rules apply). Plain functions,
# not closures over the op: a tensor method is reached through no source
# the tracer could read a closure cell from.

def add_(self, other, *, alpha=1):
    self[...] = add(self, other, alpha=alpha)
    return self


def sub_(self, other, *, alpha=1):
    self[...] = sub(self, other, alpha=alpha)
    return self


def mul_(self, other):
    self[...] = _C.mul(self, other)
    return self


def div_(self, other, *, rounding_mode=None):
    self[...] = div(self, other, rounding_mode=rounding_mode)
    return self


def clamp_(self, min=None, max=None):
    self[...] = _C.clamp(self, min, max)
    return self


def relu_(self):
    self[...] = _C.relu(self)
    return self


def tanh_(self):
    self[...] = _C.tanh(self)
    return self


def exp_(self):
    self[...] = _C.exp(self)
    return self


def masked_fill_(self, mask, value):
    self[...] = _C.masked_fill(self, mask, value)
    return self


def zero_(self):
    self[...] = 0
    return self


def fill_(self, value):
    self[...] = value
    return self


def copy_(self, src, non_blocking=False):
    self[...] = src
    return self


def requires_grad_(self, requires_grad=True):
    return self


# ---------------------------------------------- kiln's ops in torch's words --
# Registry ops with no torch function of their own (kiln spells them: a
# subscript's parts, the functional form of an assignment) or whose
# arguments differ from torch's function (batch_norm's counter, which
# torch's module advances itself). Each takes the op's arguments and does
# what torch does for it. The rest of the reverse mapping is read off the
# table below (autograd_lowerings).

def _torch_mod():
    return sys.modules["torch"]


def lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first=False):
    """torch.lstm (_VF.lstm, what nn.LSTM runs) over kiln's ops: the input
    projection of every step as one linear, then the recurrence unrolled
    step by step (torch's own cell: gates i, f, g, o), so a graph holds
    about a dozen nodes per step and is one per sequence length. The packed-sequence
    overload (a batch_sizes tensor second), projections (proj_size) and
    dropout between layers in training run torch's own."""
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if (not isinstance(hx, (tuple, list)) or len(params) != num_layers * dirs * per
            or (train and dropout > 0 and num_layers > 1)):
        return _TORCH["lstm"](input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    x = _C.transpose(input, 0, 1) if batch_first else input  # [T, B, in]
    h0, c0 = hx
    steps = x.shape[0]
    h_n, c_n = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            w_ih, w_hh = params[k * per], params[k * per + 1]
            b_ih, b_hh = (params[k * per + 2], params[k * per + 3]) if has_biases else (None, None)
            xw = _C.linear(x, w_ih, b_ih)  # every step's input projection at once
            h, c = h0[k], c0[k]
            hs = [None] * steps
            for t in (range(steps - 1, -1, -1) if d else range(steps)):
                i, f, g, o = _C.chunk(xw[t] + _C.linear(h, w_hh, b_hh), 4, 1)
                c = _C.sigmoid(f) * c + _C.sigmoid(i) * _C.tanh(g)
                h = _C.sigmoid(o) * _C.tanh(c)
                hs[t] = h
            outs.append(_C.stack(hs, 0))
            h_n.append(h)
            c_n.append(c)
        x = outs[0] if dirs == 1 else _C.cat(outs, 2)
    out = _C.transpose(x, 0, 1) if batch_first else x
    return out, _C.stack(h_n, 0), _C.stack(c_n, 0)


# torch.autograd.Function's parts (install fills it): its own apply, the
# setup_context a Function without one inherits, and the ctx class below.
_AUTOGRAD = {}


class _FunctionCtxMethods:
    """What a traced forward's ctx does (install makes the ctx class: these
    over torch's FunctionCtx, so isinstance(ctx, FunctionCtx) holds). torch's
    own methods are torch's code, which kiln leaves to torch; these keep
    their attribute stores on the object made in the trace, as torch's do on
    its ctx, and nothing reads them: no backward is recorded."""

    def save_for_backward(self, *tensors):
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        self.saved_for_forward = tensors

    def mark_dirty(self, *args):
        self.dirty_tensors = args

    def mark_non_differentiable(self, *args):
        self.non_differentiable = args

    def set_materialize_grads(self, value):
        self.materialize_grads = value


def _function_apply(cls, *args, **kwargs):
    """torch.autograd.Function.apply (a library's custom op: BLOOM's GELU)
    in traced code, as Dynamo traces it. While no tensor argument requires
    grad (no_grad, inference), torch runs forward and records nothing: the
    trace inlines forward with a FunctionCtx made in it (save_for_backward
    and the other marks are attribute stores on it; a Function with its
    own setup_context gets the ctx after forward). An argument that
    requires grad records the class's own backward: torch's apply, and the
    call breaks."""
    for a in args + tuple(kwargs.values()):
        if isinstance(a, _C.Tensor) and a.requires_grad:
            return _AUTOGRAD["apply"](cls, *args, **kwargs)
    ctx = _AUTOGRAD["ctx"]()
    ctx.needs_input_grad = (False,) * len(args)
    if cls.setup_context is not _AUTOGRAD["setup_context"]:
        out = cls.forward(*args, **kwargs)
        cls.setup_context(ctx, args, out)
        return out
    return cls.forward(ctx, *args, **kwargs)


def _index(input, indices):
    return input[tuple(slice(None) if i is None else i for i in indices)]


def _setitem(input, key, value):
    out = input.clone()
    out[key] = value
    return out


def _slice(input, dim=0, start=None, end=None, step=1):
    return input[(slice(None),) * (dim % input.dim()) + (slice(start, end, step),)]


def _gelu_tanh(input):
    return _torch_mod().nn.functional.gelu(input, approximate="tanh")


def _topk_indices(input, k, dim=-1, largest=True, sorted=True):
    return _torch_mod().topk(input, k, dim, largest, sorted).indices


def _batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-05,
                *, num_batches_tracked=None):
    # torch's _BatchNorm.forward: the counter moves first, and momentum=None
    # averages by it.
    if num_batches_tracked is not None:
        num_batches_tracked.add_(1)
        if momentum is None:
            momentum = 1.0 / float(num_batches_tracked)
    return _torch_mod().nn.functional.batch_norm(input, running_mean, running_var, weight, bias, training,
                                                 0.0 if momentum is None else momentum, eps)


def _gelu(input, approximate="none"):
    # torch's approximate is keyword-only; kiln's op also takes it by position.
    return _torch_mod().nn.functional.gelu(input, approximate=approximate)


def _embedding(input, weight, padding_idx=None):
    return _torch_mod().nn.functional.embedding(input, weight, padding_idx)


def _flash_attention(query, key, value, attn_mask=None, is_causal=False, scale=1.0, mask_drops=False,
                     empty_rows_nan=False):
    # kiln's attention kernel (runtime/kernels/attention.h) in torch's ops, which
    # record gradients: softmax(q @ k^T * scale + mask) @ v; a bool mask
    # keeps where True (drops, with mask_drops); a row with every score
    # masked is zeros, or NaN (empty_rows_nan: a hand-written softmax's).
    torch = _torch_mod()
    s = torch.matmul(query, key.transpose(-2, -1)) * scale
    keep = None
    if is_causal:
        keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            m = ~attn_mask if mask_drops else attn_mask
            keep = m if keep is None else keep & m
        else:
            s = s + attn_mask
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if not empty_rows_nan:
        p = p.masked_fill((s == float("-inf")).all(dim=-1, keepdim=True), 0.0)
    return torch.matmul(p, value)


OP_FORMS = {"index": _index, "setitem": _setitem, "slice": _slice, "_gelu_tanh": _gelu_tanh,
            "_topk_indices": _topk_indices, "batch_norm": _batch_norm, "embedding": _embedding, "gelu": _gelu,
            "_flash_attention": _flash_attention}


# --------------------------------------------------------------- the table --

FUNCTIONS = {
    # torch.* with kiln's op as it is: the ops whose TORCH column in
    # runtime/tensor/ops.def says Same
    **{f"torch.{n}": n for n, how in _C.op_torch_functions.items() if how == "Same"},
    # torch's other names that take an op's arguments
    "torch.concat": "cat",
    "torch.concatenate": "cat",
    "torch.negative": "neg",
    "torch.multiply": "mul",
    "torch.true_divide": "div",
    "torch.swapaxes": "transpose",
    "torch.bmm": "matmul",
    # torch.* through an adapter (torch's signature differs from kiln's op;
    # a row named like an op: its TORCH column says Adapted)
    "torch.add": add, "torch.sub": sub, "torch.subtract": sub, "torch.div": div, "torch.divide": div,
    "torch.sum": sum, "torch.mean": mean, "torch.softmax": softmax, "torch.log_softmax": log_softmax,
    "torch.embedding": embedding, "torch.dropout": dropout, "torch.clone": clone, "torch.transpose": transpose, "torch.t": t,
    "torch.mm": mm, "torch.addmm": addmm, "torch.numel": numel, "torch.max": max, "torch.min": min,
    "torch.finfo": finfo, "torch.iinfo": iinfo,
    "torch.zeros": zeros, "torch.ones": ones, "torch.full": full, "torch.arange": arange, "torch.tensor": tensor,
    "torch.addcmul": addcmul, "torch.norm": norm, "torch.linalg.vector_norm": vector_norm,
    "torch.baddbmm": baddbmm, "torch.einsum": einsum, "torch.lstm": lstm, "torch.cumsum": cumsum, "torch.diff": diff,
    "torch.zeros_like": zeros_like, "torch.ones_like": ones_like, "torch.randn_like": randn_like,
    "torch.rand_like": rand_like, "torch.empty_like": empty_like, "torch.full_like": full_like,
    # torch.nn.functional.*: kiln.nn.functional has torch's signatures
    **{f"torch.nn.functional.{n}": f"F.{n}" for n in _F.__all__},
    "torch.nn.functional.interpolate": interpolate,
}

# torch._VF's functions with a row above (install says why they are listed).
VF_FUNCTIONS = ("lstm",)

# torch functions that report how the program is being run, and torch's
# once-per-process usage logging: the tracer calls torch's own function at
# trace time on known arguments and folds its answer, so library code
# guarded by `if not torch.jit.is_scripting():` (torchvision's
# stochastic_depth) traces without a break. They are read when the graph
# is traced, not guarded: a compiled function later run under
# torch.jit.trace keeps the answer it was traced with (Dynamo folds these
# the same way). torch._assert on a known condition (a shape check: kiln
# guards the sizes it compares) folds to None; a false one raises there,
# so the call breaks and CPython raises torch's AssertionError.
TRACE_TIME = (
    "torch.jit.is_scripting", "torch.jit.is_tracing", "torch._C._get_tracing_state",
    "torch.fx._symbolic_trace.is_fx_tracing", "torch.fx._symbolic_trace.is_fx_symbolic_tracing",
    "torch.onnx.is_in_onnx_export", "torch.compiler.is_exporting", "torch._assert",
    # logs a key once per process: at trace time is when eager would first log it
    "torch._C._log_api_usage_once",
)


def _compiling():
    return True


# "Am I being compiled?": True in traced code, as under torch.compile
# (transformers and timm take their compile-friendly paths on it: no
# data-dependent checks, no Python-side caches). Code CPython runs around
# the graphs calls torch's own and gets False, as it does under Dynamo.
# torch._dynamo is one of torch's lazy modules: its row is installed only
# when the program imported it before kiln first saw torch (reading the
# attribute would import it, a second's work).
COMPILING = (
    "torch.compiler.is_compiling", "torch.compiler.is_dynamo_compiling", "torch._utils.is_compiling",
    "torch._dynamo.is_compiling", "torch._dynamo.external_utils.is_compiling",
)

TENSOR_METHODS = {
    "t": t, "mm": mm, "bmm": mm, "to": to, "type_as": type_as, "view_as": view_as, "reshape_as": reshape_as,
    "expand_as": expand_as, "detach": detach, "cpu": cpu, "ndimension": ndimension, "nelement": nelement,
    "is_floating_point": is_floating_point, "repeat": repeat, "new_zeros": new_zeros, "new_ones": new_ones,
    "new_full": new_full, "new_empty": new_empty, "masked_fill_": masked_fill_, "zero_": zero_, "fill_": fill_,
    "copy_": copy_, "requires_grad_": requires_grad_, "max": max, "min": min, "sum": sum, "mean": mean,
    "softmax": softmax, "log_softmax": log_softmax, "swapaxes": transpose,
    "add_": add_, "sub_": sub_, "mul_": mul_, "div_": div_, "clamp_": clamp_, "relu_": relu_, "tanh_": tanh_,
    "exp_": exp_, "addcmul": addcmul, "norm": norm, "baddbmm": baddbmm, "cumsum": cumsum,
}

# aten's operators (torch.ops.aten.<name>.<overload>), as aot_autograd's
# graphs call them (the torch.compile backend, kiln/_dynamo_backend.py):
# only those torch.* does not already spell, since an aten op whose
# torch.<name> is a FUNCTIONS row, or whose name is a tensor method kiln
# has, is read off those rows. Each value takes aten's schema (every
# overload of the name: the backend passes the arguments as the graph
# has them) over kiln's ops; tests/python/test_dynamo_backend.py checks
# each against aten.

def _aten_unsafe_view(input, size):
    return _C.reshape(input, size)


def _aten_softmax(input, dim, half_to_float):
    return _C.softmax(input, dim)


def _aten_log_softmax(input, dim, half_to_float):
    return _C.log_softmax(input, dim)


def _aten_rsub(input, other, alpha=1):
    return other - (input if alpha == 1 else input * alpha)


def _aten_threshold_backward(grad_output, input, threshold):
    return _C.masked_fill(grad_output, input <= threshold, 0.0)


def _aten_sigmoid_backward(grad_output, output):
    return grad_output * output * (1 - output)


def _aten_tanh_backward(grad_output, output):
    return grad_output * (1 - output * output)


def _aten_native_layer_norm(input, normalized_shape, weight, bias, eps):
    # (out, mean, rstd); mean and rstd keep the normalized dims as 1s.
    dims = [d - len(normalized_shape) for d in range(len(normalized_shape))]
    mean = _C.mean(input, dims, True)
    centered = input - mean
    rstd = _C.rsqrt(_C.mean(centered * centered, dims, True) + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def _aten_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise NotImplementedError("kiln has no transposed convolution")
    conv = _C.conv2d if input.dim() == 4 else _C.conv1d
    return conv(input, weight, bias, stride, padding, dilation, groups)


def _aten_softmax_backward_data(grad_output, output, dim, input_dtype):
    return output * (grad_output - _C.sum(grad_output * output, dim, True))


def _aten_to_copy(input, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
                  memory_format=None):
    if dtype is None or dtype == input.dtype:
        return _C.clone(input)
    return _C.to(input, dtype)


def _aten_native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    # (grad_input, grad_weight, grad_bias), each None where output_mask says
    # it is not wanted; mean and rstd as native_layer_norm returned them.
    k = len(normalized_shape)
    dims = [d - k for d in range(k)]
    lead = list(range(input.dim() - k))
    x_hat = (input - mean) * rstd
    g = grad_out if weight is None else grad_out * weight
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = rstd * (g - _C.mean(g, dims, True) - x_hat * _C.mean(g * x_hat, dims, True))
    if output_mask[1] and weight is not None:
        grad_weight = _C.sum(grad_out * x_hat, lead) if lead else grad_out * x_hat
    if output_mask[2] and bias is not None:
        grad_bias = _C.sum(grad_out, lead) if lead else _C.clone(grad_out)
    return grad_input, grad_weight, grad_bias


ATEN = {
    "addmm": addmm, "_unsafe_view": _aten_unsafe_view, "slice": "slice", "gelu": "gelu",
    "_softmax": _aten_softmax, "_log_softmax": _aten_log_softmax, "rsub": _aten_rsub,
    "threshold_backward": _aten_threshold_backward, "sigmoid_backward": _aten_sigmoid_backward,
    "tanh_backward": _aten_tanh_backward, "native_layer_norm": _aten_native_layer_norm,
    "convolution": _aten_convolution, "_softmax_backward_data": _aten_softmax_backward_data,
    "_to_copy": _aten_to_copy, "native_layer_norm_backward": _aten_native_layer_norm_backward,
}

DTYPES = {
    "torch.float32": "float32", "torch.float": "float32", "torch.float64": "float64", "torch.double": "float64",
    "torch.int32": "int32", "torch.int": "int32", "torch.int64": "int64", "torch.long": "int64", "torch.bool": "bool",
}


# torch's classes kiln spells with its own: x.shape and x.size() are tuples
# in kiln code, so torch.Size(...) makes one (and isinstance(s, torch.Size)
# holds for any tuple there).
TYPES = {"torch.Size": tuple}


# torch.nn's modules that are kiln's own classes: same attribute and
# parameter names, so a torch module of such a class is traced as kiln's
# (kiln's built-in Linear, LayerNorm, ... as their ops; the rest as their
# kiln.nn forward). Any other torch class is translated from its Python.
MODULES = {f"torch.nn.{n}": n for n in (
    "Linear", "ReLU", "GELU", "LayerNorm", "Embedding", "Dropout", "Sequential", "ModuleList", "ModuleDict",
    "Identity", "Flatten", "Tanh", "Sigmoid", "SiLU", "Softmax", "Conv1d", "Conv2d", "BatchNorm1d",
    "BatchNorm2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "GRU", "MultiheadAttention")}

_KILN_CLASSES = {}  # torch class -> kiln class


def kiln_class_for(cls):
    """The kiln class a torch.nn.Module subclass is traced as (python/src/
    torch_modules.h): torch.nn.Module is kiln's Module (its methods are
    kiln's Module model: attribute lookup, __call__ with hooks, parameters(),
    ...), a MODULES row kiln's class of that name, any other class a new
    kiln class under the kiln class of its torch base. Nothing is copied
    into it: the tracer reads an attribute from cls the first time it looks
    one up (read_class_attr), and reads it again when cls or a base changes
    (its type version moves: python/src/host_classes.h)."""
    kc = _KILN_CLASSES.get(cls)
    if kc is not None:
        return kc
    torch = sys.modules["torch"]
    if cls is torch.nn.Module:
        kc = _nn.Module._kiln_class
    elif cls in _mapped_classes(torch):
        kc = getattr(_nn, _mapped_classes(torch)[cls])._kiln_class
    else:
        base_kc = kiln_class_for(_torch_base(cls, torch))
        kc = _C.make_class(cls.__name__, cls.__qualname__, base_kc)
        _C.register_class(kc, cls, True)
        _C.read_class_attrs_from(kc, cls, read_class_attr)
    _KILN_CLASSES[cls] = kc
    return kc


def _torch_base(cls, torch):
    return next(b for b in cls.__mro__[1:] if isinstance(b, type) and issubclass(b, torch.nn.Module))


def read_class_attr(cls, name):
    """One attribute of a torch class's kiln class: what cls's MRO defines
    for `name` before its torch base's chain (whose kiln class answers the
    rest), or None. torch's own module classes without a MODULES row
    (nn.Hardswish, nn.LSTM) are read as the program's are: their forwards
    are traced, as Dynamo inlines torch.nn, and what they call that kiln
    has no lowering for breaks there with its name."""
    torch = sys.modules["torch"]
    klass, attr = _nn.first_definition(cls, name, set(_torch_base(cls, torch).__mro__))
    if klass is None:
        return None
    return _nn.class_attr(name, attr)


_MAPPED = {}


def class_value(cls):
    """What kiln code sees for a torch.nn.Module subclass itself (a global
    `Block`, a method's `__class__` cell for zero-argument super()): the
    kiln class kiln made for it, so super() and isinstance follow kiln's
    chain; None for torch.nn.Module and torch's classes kiln spells with its
    own (MODULES), which stay Python's: calling them makes torch modules."""
    torch = sys.modules["torch"]
    if cls is torch.nn.Module or cls in _mapped_classes(torch):
        return None
    return kiln_class_for(cls)


def _mapped_classes(torch):
    if not _MAPPED:
        for path, name in MODULES.items():
            cls = _resolve(torch, path)
            if cls is not None:
                _MAPPED[cls] = name
    return _MAPPED


def _target(value):
    if isinstance(value, str) and value.startswith("F."):
        return getattr(_F, value[2:])
    if isinstance(value, str):
        return getattr(_C, value)
    return value


def _resolve(torch, path):
    obj = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def autograd_lowerings(torch, op_names, varargs=()):
    """Registry op name -> torch's callable for it, read backwards off the
    one table, first found wins:
      1. OP_FORMS (ops torch spells otherwise);
      2. for an op that collects positionals (`varargs`: permute(input,
         *dims)), torch.Tensor's method (torch.permute takes one tuple);
      3. a torch.nn.functional row whose kiln.nn.functional function is the
         op itself or @_over it (F's full signature: torch.max_pool2d lacks
         return_indices);
      4. a torch.* row whose value is the op ("torch.relu": "relu"), the row
         spelled like the op preferred (torch.cat over torch.concat);
      5. a row whose adapter is @_over the op;
      6. torch.Tensor's method of the op's name when TENSOR_METHODS does not
         list it (the table's own rule: a torch tensor's unlisted methods
         are kiln's ops of that name).
    An op none of these gives has no lowering: a trace breaks before it
    takes a tensor that requires grad (python/src/torch_autograd.cpp)."""
    found = dict(OP_FORMS)
    for op in varargs:
        if op not in found and op not in TENSOR_METHODS and getattr(torch.Tensor, op, None) is not None:
            found[op] = getattr(torch.Tensor, op)
    for name in _F.__all__:
        fn = getattr(_F, name)
        op = name if fn is getattr(_C, name, None) else getattr(fn, "__kiln_op__", None)
        obj = _resolve(torch, f"torch.nn.functional.{name}")
        if op in op_names and op not in found and obj is not None:
            found[op] = obj
    rows = list(FUNCTIONS.items()) + [(f"torch.Tensor.{n}", fn) for n, fn in TENSOR_METHODS.items()]
    plain = {}
    for path, value in rows:
        if isinstance(value, str) and not value.startswith("F.") and value in op_names and value not in found:
            obj = _resolve(torch, path)
            if obj is not None and (value not in plain or path.rsplit(".", 1)[1] == value):
                plain[value] = obj
    found.update(plain)
    for path, value in rows:
        op = getattr(value, "__kiln_op__", None)
        obj = _resolve(torch, path)
        if op in op_names and op not in found and obj is not None:
            found[op] = obj
    for op in op_names:
        if op not in found and op not in TENSOR_METHODS and not op.startswith("_"):
            obj = getattr(torch.Tensor, op, None)
            if obj is not None:
                found[op] = obj
    return found


def install(torch):
    """Maps every row's torch object to its kiln value (called once, by
    _C, when torch is first seen)."""
    for path, value in FUNCTIONS.items():
        obj = _resolve(torch, path)
        if obj is not None:
            _C._map_torch(obj, _target(value))
    # torch._VF (what torch's RNNs call) forwards every attribute to
    # torch._C._VariableFunctions through its class's __getattr__, which
    # the tracer does not run. The functions kiln has rows for are put in
    # its dict: the very objects that __getattr__ returns (torch.lstm is
    # _VariableFunctions.lstm), so nothing torch or the program sees changes
    # but vars(torch._VF).
    function = torch.autograd.function
    _AUTOGRAD["apply"] = _C._raw_torch(function.Function.apply.__func__)
    _AUTOGRAD["setup_context"] = function._SingleLevelFunction.setup_context
    _AUTOGRAD["ctx"] = type("FunctionCtx", (function.FunctionCtx,),
                            {k: v for k, v in vars(_FunctionCtxMethods).items() if not k.startswith("__")}
                            | {"__module__": __name__})
    _C._map_torch(function.Function.apply.__func__, _target(_function_apply))
    vf = sys.modules.get("torch._VF")
    if vf is not None:
        for name in VF_FUNCTIONS:
            vars(vf).setdefault(name, getattr(torch._C._VariableFunctions, name))
    for path in TRACE_TIME:
        obj = _resolve(torch, path)
        if obj is not None:
            _C._fold_torch(obj)
    for path in COMPILING:
        if path.startswith("torch._dynamo") and "torch._dynamo" not in sys.modules:
            continue
        obj = _resolve(torch, path)
        if obj is not None:
            _C._map_torch(obj, _compiling)
    for path, cls in TYPES.items():
        _C._map_torch(_resolve(torch, path), cls)
    for path, name in DTYPES.items():
        _C._map_torch(_resolve(torch, path), name)
    for name in ("add", "sub", "div", "addmm", "tensor", "addcmul", "norm", "baddbmm", "einsum", "cumsum", "diff", "lstm"):
        _TORCH[name] = _C._raw_torch(getattr(torch, name))
    _TORCH["vector_norm"] = _C._raw_torch(torch.linalg.vector_norm)
    _TORCH["interpolate"] = _C._raw_torch(torch.nn.functional.interpolate)
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        f = torch.finfo(dtype)
        _FINFO[name] = types.SimpleNamespace(bits=f.bits, eps=f.eps, max=f.max, min=f.min, tiny=f.tiny,
                                             smallest_normal=f.smallest_normal, resolution=f.resolution,
                                             dtype=name)
    for name, dtype in (("int32", torch.int32), ("int64", torch.int64)):
        f = torch.iinfo(dtype)
        _FINFO[name] = types.SimpleNamespace(bits=f.bits, max=f.max, min=f.min, dtype=name)
    for name, fn in TENSOR_METHODS.items():
        _C._register_tensor_method(name, fn)
        if not hasattr(_C.Tensor, name):  # Python's view of kiln tensors too
            setattr(_C.Tensor, name, fn)

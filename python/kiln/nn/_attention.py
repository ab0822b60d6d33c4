"""torch.nn.MultiheadAttention over kiln ops (kiln.nn.MultiheadAttention).

A torch MultiheadAttention is traced as this class (kiln/_torch_api.py
MODULES), so a torchvision ViT's encoder is one graph: torch's own forward
reads the MHA fast-path switches (torch.backends.mha, has_torch_function,
autocast, make_fx tracing) and calls F.multi_head_attention_forward, whose
helpers kiln has no lowering for, a break per layer.

The arithmetic is F.multi_head_attention_forward's, step for step, over the
module's own parameters (in_proj_weight or q/k/v_proj_weight, in_proj_bias,
bias_k/bias_v, out_proj): the input projection, masks made additive
(_canonical_mask), the key padding mask merged into the attention mask,
then torch's two ways: with need_weights, softmax(q k^T / sqrt(d) + mask) v
with the weights returned (averaged over heads by default); without, one
scaled_dot_product_attention (kiln's tiled kernel). torch's inference fast
path (_native_multi_head_attention) computes the same within rounding.
"""
import math

from .. import _C
from . import Module, Parameter, Linear, functional as F, init


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

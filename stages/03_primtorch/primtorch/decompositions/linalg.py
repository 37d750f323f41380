"""Decompositions of matrix ops onto the extern matrix multiplies, and of CPU attention into
matrix multiplies plus prims.

Input: addmm/baddbmm/mv/dot arguments; CPU flash attention's (query, key, value, mask,
scale) and, for its backward, the forward's output and log-sum-exp.
Output: ``aten.mm``/``aten.bmm`` calls (extern ops, see [Note: three kinds of ops]) with
the bias, scaling, masking and softmax around them in prims, where inductor can fuse them.

Chapter: book/docs/primtorch.md ("Extern ops and fallbacks").
"""

from __future__ import annotations

import math
from numbers import Number

import torch

from primtorch import prims
from primtorch.prims_common import broadcast_to, computation_dtype, scalar_like, to_dtype
from primtorch.registry import register_decomposition

aten = torch.ops.aten


def _scale_and_add_bias(product: torch.Tensor, bias: torch.Tensor, beta: Number,
                        alpha: Number) -> torch.Tensor:
    """alpha * product + beta * bias; bias is ignored (even NaN) when beta is 0."""
    dtype = computation_dtype(product.dtype)
    out = to_dtype(product, dtype)
    if alpha != 1:
        out = prims.mul(out, scalar_like(out, alpha))
    if beta != 0:
        b = broadcast_to(to_dtype(bias, dtype), out.shape)
        out = prims.add(out, b if beta == 1 else prims.mul(b, scalar_like(b, beta)))
    return to_dtype(out, product.dtype)


@register_decomposition(aten.addmm.default)
def addmm(bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: Number = 1,
          alpha: Number = 1) -> torch.Tensor:
    """``nn.Linear``: the extern ``mm``, then the bias as a prims epilogue."""
    return _scale_and_add_bias(aten.mm.default(mat1, mat2), bias, beta, alpha)


@register_decomposition(aten.baddbmm.default)
def baddbmm(bias: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *,
            beta: Number = 1, alpha: Number = 1) -> torch.Tensor:
    return _scale_and_add_bias(aten.bmm.default(batch1, batch2), bias, beta, alpha)


@register_decomposition(aten.mv.default)
def mv(mat: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
    column = prims.reshape(vec, [vec.shape[0], 1])
    return prims.reshape(aten.mm.default(mat, column), [mat.shape[0]])


@register_decomposition(aten.dot.default)
def dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype != b.dtype:
        return NotImplemented  # eager raises; let it
    dtype = computation_dtype(a.dtype)
    return to_dtype(prims.sum(prims.mul(to_dtype(a, dtype), to_dtype(b, dtype)), [0]),
                    a.dtype)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(*batch, m, k) @ (*batch, k, n) through one 3-D extern ``bmm``."""
    batch = list(a.shape[:-2])
    count = math.prod(batch) if batch else 1
    a3 = prims.reshape(a, [count] + list(a.shape[-2:]))
    b3 = prims.reshape(b, [count] + list(b.shape[-2:]))
    out = aten.bmm.default(a3, b3)
    return prims.reshape(out, batch + [a.shape[-2], b.shape[-1]])


def _transpose_last(a: torch.Tensor) -> torch.Tensor:
    dims = list(range(a.dim()))
    dims[-2], dims[-1] = dims[-1], dims[-2]
    return prims.permute(a, dims)


def _scores(q, k, is_causal: bool, attn_mask, scale) -> torch.Tensor:
    """scale * q k^T in float32 (for bf16/fp16 inputs), masked: (B, H, L, S)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    wide = computation_dtype(q.dtype)  # eager's CPU kernel accumulates bf16 in float32
    s = _bmm(to_dtype(q, wide), _transpose_last(to_dtype(k, wide)))
    s = prims.mul(s, scalar_like(s, scale))
    minus_inf = scalar_like(s, -math.inf)
    if is_causal:  # query i sees keys j <= i (the top-left aligned lower triangle)
        shape = list(s.shape)
        row = prims.broadcast_in_dim(prims.iota(shape[-2], start=0, step=1, dtype=torch.int64,
                                                device=s.device), shape, [s.dim() - 2])
        col = prims.broadcast_in_dim(prims.iota(shape[-1], start=0, step=1, dtype=torch.int64,
                                                device=s.device), shape, [s.dim() - 1])
        s = prims.where(prims.le(col, row), s, minus_inf)
    if attn_mask is not None:
        mask = broadcast_to(attn_mask, s.shape)
        if mask.dtype == torch.bool:
            s = prims.where(mask, s, minus_inf)
        else:
            s = prims.add(s, to_dtype(mask, s.dtype))
    return s


# --8<-- [start:attention]
@register_decomposition(aten._scaled_dot_product_flash_attention_for_cpu.default)
def sdpa_flash_cpu(q, k, v, dropout_p: float = 0.0, is_causal: bool = False, *,
                   attn_mask=None, scale=None):
    """softmax(q k^T * scale + mask) v, returning also the float32 log-sum-exp of each row
    of scores (the backward recomputes the probabilities from it). Two extern ``bmm`` calls
    and prims between them. With dropout the op stays whole (an extern kernel), and so
    does grouped-query attention (``enable_gqa``: fewer key/value heads than query heads,
    which the CPU kernel takes as they are)."""
    if dropout_p > 0 or list(k.shape[:-2]) != list(q.shape[:-2]):
        return NotImplemented
    s = _scores(q, k, is_causal, attn_mask, scale)  # (B, H, L, S)
    last = [s.dim() - 1]
    row_max = prims.amax(s, last)
    row_max = prims.where(prims.isinf(row_max), scalar_like(row_max, 0), row_max)
    shifted = prims.sub(s, prims.broadcast_in_dim(row_max, list(s.shape), list(range(s.dim() - 1))))
    lse = prims.add(prims.log(prims.sum(prims.exp(shifted), last)), row_max)  # (B, H, L)
    p = prims.exp(prims.sub(s, prims.broadcast_in_dim(lse, list(s.shape),
                                                      list(range(s.dim() - 1)))))
    out = _bmm(p, to_dtype(v, p.dtype))
    return to_dtype(out, q.dtype), to_dtype(lse, torch.float32)
# --8<-- [end:attention]


@register_decomposition(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def sdpa_flash_cpu_backward(grad_out, q, k, v, out, logsumexp, dropout_p: float,
                            is_causal: bool, *, attn_mask=None, scale=None):
    """With P = exp(S - lse): dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)),
    dQ = dS K * scale, dK = dS^T Q * scale."""
    if dropout_p > 0 or list(k.shape[:-2]) != list(q.shape[:-2]):  # as the forward
        return NotImplemented
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = _scores(q, k, is_causal, attn_mask, scale)
    batch_dims = list(range(s.dim() - 1))
    p = prims.exp(prims.sub(s, prims.broadcast_in_dim(to_dtype(logsumexp, s.dtype),
                                                      list(s.shape), batch_dims)))
    grad_v = _bmm(_transpose_last(to_dtype(p, v.dtype)), grad_out)
    dp = to_dtype(_bmm(grad_out, _transpose_last(v)), s.dtype)
    wide = computation_dtype(out.dtype)
    row = prims.sum(prims.mul(to_dtype(grad_out, wide), to_dtype(out, wide)), [out.dim() - 1])
    ds = prims.mul(p, prims.sub(dp, prims.broadcast_in_dim(to_dtype(row, s.dtype),
                                                           list(s.shape), batch_dims)))
    ds = to_dtype(prims.mul(ds, scalar_like(ds, scale)), q.dtype)
    grad_q = _bmm(ds, k)
    grad_k = _bmm(_transpose_last(ds), q)
    return grad_q, grad_k, grad_v

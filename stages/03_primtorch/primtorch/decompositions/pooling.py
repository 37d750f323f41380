"""Decompositions of 2-D pooling (max pooling with indices, adaptive average pooling) and
their backward ops.

Input: (N, C, H, W) or (C, H, W) tensors and the pooling geometry.
Output: for max pooling, a running maximum over the kernel's k*k offsets, each offset one
strided ``slice`` of the padded input; the backward ``scatter_add``s each gradient to the
position its index names. Adaptive average pooling with an output size that divides the
input is a reshape and a mean; other sizes stay whole.

Chapter: book/docs/primtorch.md ("Indexing").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from primtorch import prims
from primtorch.decompositions.slicing import pad_in_dim, slice_in_dim
from primtorch.prims_common import computation_dtype, scalar_like, to_dtype
from primtorch.registry import register_decomposition

aten = torch.ops.aten


def _pair(v: Sequence[int] | int, default: Sequence[int] | None = None) -> list[int]:
    if isinstance(v, int):
        return [v, v]
    v = list(v) or list(default)
    return v * 2 if len(v) == 1 else v


def pool_output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's rule: windows that start in the input or its left padding."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _lowest(dtype: torch.dtype):
    return -math.inf if dtype.is_floating_point else torch.iinfo(dtype).min


@register_decomposition(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x: torch.Tensor, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode: bool = False):
    """(max over each window, flat H*W position of the first max); NaN wins, as in eager."""
    k, d = _pair(kernel_size), _pair(dilation)
    s, p = _pair(stride, k), _pair(padding)
    h_dim, w_dim = x.dim() - 2, x.dim() - 1
    size = [x.shape[h_dim], x.shape[w_dim]]
    out = [pool_output_size(size[i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2)]
    padded = x
    for i, dim in enumerate((h_dim, w_dim)):
        extent = (out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1
        padded = pad_in_dim(padded, dim, p[i], extent - size[i] - p[i], _lowest(x.dtype))
    best = index = None
    for i in range(k[0]):
        for j in range(k[1]):
            window = _window(padded, (h_dim, w_dim), (i * d[0], j * d[1]), out, s)
            position = _positions(window, (i * d[0] - p[0], j * d[1] - p[1]), out, s, size)
            if best is None:
                best, index = window, position
                continue
            better = prims.bitwise_or(prims.gt(window, best), prims.isnan(window))
            best = prims.where(better, window, best)
            index = prims.where(better, position, index)
    return best, index


def _window(padded: torch.Tensor, dims, offset, out, stride) -> torch.Tensor:
    """The elements at kernel offset (i, j) of every window: (.., Ho, Wo)."""
    for dim, o, n, st in zip(dims, offset, out, stride):
        padded = slice_in_dim(padded, dim, o, o + (n - 1) * st + 1, st)
    return padded


def _positions(window: torch.Tensor, first, out, stride, size) -> torch.Tensor:
    """Flat input position h * W + w of each element of one kernel offset's window."""
    shape = list(window.shape)
    h = prims.iota(out[0], start=first[0], step=stride[0], dtype=torch.int64,
                   device=window.device)
    w = prims.iota(out[1], start=first[1], step=stride[1], dtype=torch.int64,
                   device=window.device)
    h = prims.broadcast_in_dim(h, shape, [len(shape) - 2])
    w = prims.broadcast_in_dim(w, shape, [len(shape) - 1])
    return prims.add(prims.mul(h, scalar_like(h, size[1])), w)


@register_decomposition(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation,
                                     ceil_mode: bool, indices):
    """Each output gradient goes to the input position that won its window; overlapping
    windows that chose the same position add up (``scatter_add`` over flat H*W)."""
    lead = list(x.shape[:-2])
    flat_in = lead + [x.shape[-2] * x.shape[-1]]
    flat_out = lead + [grad.shape[-2] * grad.shape[-1]]
    dtype = computation_dtype(grad.dtype)
    zeros = prims.full(flat_in, 0, dtype=dtype, device=x.device)
    src = prims.reshape(to_dtype(grad, dtype), flat_out)
    out = prims.scatter_add(zeros, len(lead), prims.reshape(indices, flat_out), src)
    return to_dtype(prims.reshape(out, list(x.shape)), grad.dtype)


def _adaptive_blocks(x: torch.Tensor, output_size):
    """(the (.., oh, kh, ow, kw) shape, or None when the output does not divide the input)."""
    oh, ow = _pair(output_size)
    h, w = x.shape[-2], x.shape[-1]
    if oh == 0 or ow == 0 or h % oh or w % ow:
        return None
    return list(x.shape[:-2]) + [oh, h // oh, ow, w // ow]


@register_decomposition(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(x: torch.Tensor, output_size) -> torch.Tensor:
    blocks = _adaptive_blocks(x, output_size)
    if blocks is None or not x.dtype.is_floating_point:
        return NotImplemented
    n = len(blocks)
    acc = prims.reshape(to_dtype(x, computation_dtype(x.dtype)), blocks)
    total = prims.sum(acc, [n - 3, n - 1])
    count = blocks[-3] * blocks[-1]
    return to_dtype(prims.div(total, scalar_like(total, count)), x.dtype)


@register_decomposition(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool2d_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    blocks = _adaptive_blocks(x, list(grad.shape[-2:]))
    if blocks is None:
        return NotImplemented
    n = len(blocks)
    g = to_dtype(grad, computation_dtype(grad.dtype))
    g = prims.div(g, scalar_like(g, blocks[-3] * blocks[-1]))
    spread = prims.broadcast_in_dim(g, blocks, [d for d in range(n) if d not in (n - 3, n - 1)])
    return to_dtype(prims.reshape(spread, list(x.shape)), grad.dtype)

"""Decompositions of the normalization layers models use at inference: layer norm, and
batch norm with running statistics.

Input: the aten op's arguments (``native_layer_norm``, ``native_batch_norm`` with
``training=False``, ``_native_batch_norm_legit_no_training``).
Output: the op's tuple of results, built from prims; statistics are computed in float32 for
bf16/fp16 inputs and the normalized output is rounded once.

Chapter: book/docs/primtorch.md ("Reductions").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from primtorch import prims
from primtorch.decompositions.reductions import reduced_count, restore_dims
from primtorch.prims_common import (
    broadcast_to,
    computation_dtype,
    full,
    scalar_like,
    to_dtype,
)
from primtorch.registry import register_decomposition

aten = torch.ops.aten


def _affine(x: torch.Tensor, weight, bias, dims: Sequence[int]) -> torch.Tensor:
    """x * weight + bias, where weight and bias run along ``dims`` of x (either may be None)."""
    for param, prim in ((weight, prims.mul), (bias, prims.add)):
        if param is not None:
            param = to_dtype(param, x.dtype)
            x = prim(x, prims.broadcast_in_dim(param, list(x.shape), list(dims)))
    return x


@register_decomposition(aten.native_layer_norm.default)
def native_layer_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight, bias,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalize over the last ``len(normalized_shape)`` dims; also return the mean and
    1/std, with those dims kept as size 1 (what the backward needs)."""
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    acc = to_dtype(x, computation_dtype(x.dtype))
    count = reduced_count(x.shape, dims)
    total = prims.sum(acc, dims)
    mean = restore_dims(prims.div(total, scalar_like(total, count)), x.shape, dims)  # (.., 1)
    centered = prims.sub(acc, broadcast_to(mean, x.shape))
    var = prims.sum(prims.mul(centered, centered), dims)
    var = prims.div(var, scalar_like(var, count))  # biased, as layer norm defines it
    rstd = restore_dims(prims.rsqrt(prims.add(var, scalar_like(var, eps))), x.shape, dims)
    out = prims.mul(centered, broadcast_to(rstd, x.shape))
    out = _affine(out, weight, bias, dims)
    # On CPU eager returns the statistics in the input dtype (CUDA and meta: float32).
    return to_dtype(out, x.dtype), to_dtype(mean, x.dtype), to_dtype(rstd, x.dtype)


def _batch_norm_inference(x, weight, bias, running_mean, running_var, eps: float):
    """(x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel (dim 1)."""
    acc = to_dtype(x, computation_dtype(x.dtype))
    channel = [1] if x.dim() > 1 else [0]
    mean = prims.broadcast_in_dim(to_dtype(running_mean, acc.dtype), list(x.shape), channel)
    var = to_dtype(running_var, acc.dtype)
    inv_std = prims.rsqrt(prims.add(var, scalar_like(var, eps)))
    inv_std = prims.broadcast_in_dim(inv_std, list(x.shape), channel)
    out = _affine(prims.mul(prims.sub(acc, mean), inv_std), weight, bias, channel)
    # In inference the saved statistics are empty (nothing for a backward to use); CPU
    # eager gives them the running statistics' dtype.
    empty = full([0], 0, running_mean.dtype, x.device)
    return to_dtype(out, x.dtype), empty, empty


@register_decomposition(aten.native_batch_norm.default)
def native_batch_norm(x, weight, bias, running_mean, running_var, training: bool,
                      momentum: float, eps: float):
    if training or running_mean is None or running_var is None:
        return NotImplemented  # batch statistics, and updates of the running ones: kept whole
    return _batch_norm_inference(x, weight, bias, running_mean, running_var, eps)


@register_decomposition(aten._native_batch_norm_legit_no_training.default)
def _native_batch_norm_legit_no_training(x, weight, bias, running_mean, running_var,
                                         momentum: float, eps: float):
    return _batch_norm_inference(x, weight, bias, running_mean, running_var, eps)

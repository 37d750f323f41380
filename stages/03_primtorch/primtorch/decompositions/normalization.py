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
from primtorch.registry import DecompositionError, register_decomposition

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
    mean, m2 = prims.mean_m2(acc, dims)  # one pass in compiled kernels: Welford
    mean = restore_dims(mean, x.shape, dims)  # (.., 1)
    centered = prims.sub(acc, broadcast_to(mean, x.shape))
    var = prims.div(m2, scalar_like(m2, count))  # biased, as layer norm defines it
    rstd = restore_dims(prims.rsqrt(prims.add(var, scalar_like(var, eps))), x.shape, dims)
    out = prims.mul(centered, broadcast_to(rstd, x.shape))
    out = _affine(out, weight, bias, dims)
    # On CPU eager returns the statistics in the input dtype (CUDA and meta: float32).
    return to_dtype(out, x.dtype), to_dtype(mean, x.dtype), to_dtype(rstd, x.dtype)


def _batch_norm_inference(x, weight, bias, running_mean, running_var, eps: float):
    """(x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel (dim 1)."""
    if running_mean is None or running_var is None:
        raise DecompositionError("batch norm in evaluation needs running statistics")
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


def _channel_dims(x: torch.Tensor) -> tuple[list[int], list[int]]:
    """(the channel dim, the dims batch norm reduces over): dim 1 is the channel."""
    channel = [1] if x.dim() > 1 else [0]
    return channel, [d for d in range(x.dim()) if d not in channel]


def _batch_norm_training(x, weight, bias, running_mean, running_var, momentum: float,
                         eps: float):
    """Normalize with the batch's own statistics. Returns (out, mean, invstd, new running
    mean, new running var); the running statistics move ``momentum`` of the way towards the
    batch's mean and *unbiased* variance (None when there are none)."""
    acc = to_dtype(x, computation_dtype(x.dtype))
    channel, dims = _channel_dims(x)
    count = reduced_count(x.shape, dims)
    mean, m2 = prims.mean_m2(acc, dims)  # (C,) each; one pass in compiled kernels
    centered = prims.sub(acc, prims.broadcast_in_dim(mean, list(x.shape), channel))
    var = prims.div(m2, scalar_like(m2, count))  # biased: what normalizes
    invstd = prims.rsqrt(prims.add(var, scalar_like(var, eps)))
    out = prims.mul(centered, prims.broadcast_in_dim(invstd, list(x.shape), channel))
    out = _affine(out, weight, bias, channel)
    stats_dtype = running_mean.dtype if running_mean is not None else x.dtype
    new_mean = new_var = None
    if running_mean is not None:
        unbiased = prims.mul(var, scalar_like(var, count / max(count - 1, 1)))
        new_mean = _momentum(running_mean, mean, momentum)
        new_var = _momentum(running_var, unbiased, momentum)
    return (to_dtype(out, x.dtype), to_dtype(mean, stats_dtype), to_dtype(invstd, stats_dtype),
            new_mean, new_var)


def _momentum(running: torch.Tensor, batch: torch.Tensor, momentum: float) -> torch.Tensor:
    """(1 - momentum) * running + momentum * batch, in the running statistic's dtype."""
    old = to_dtype(running, batch.dtype)
    new = prims.add(prims.mul(old, scalar_like(old, 1 - momentum)),
                    prims.mul(batch, scalar_like(batch, momentum)))
    return to_dtype(new, running.dtype)


# [Note: batch norm mutates its inputs] In training, native_batch_norm writes the new
# running statistics into its running_mean/running_var arguments. A decomposition cannot
# hide that: it computes the new values functionally and writes them back with an
# explicit ``copy_`` on the inputs. The tracer (stage 2) turns those into graph outputs and
# copy-back epilogues (functionalization); ``_native_batch_norm_legit_functional`` is the
# same op with the mutation already turned into outputs.
@register_decomposition(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def native_batch_norm(x, weight, bias, running_mean, running_var, training: bool,
                      momentum: float, eps: float):
    if not training:
        return _batch_norm_inference(x, weight, bias, running_mean, running_var, eps)
    out, mean, invstd, new_mean, new_var = _batch_norm_training(
        x, weight, bias, running_mean, running_var, momentum, eps)
    if running_mean is not None:
        running_mean.copy_(new_mean)  # see [Note: batch norm mutates its inputs]
        running_var.copy_(new_var)
    return out, mean, invstd


# --8<-- [start:cudnn-batch-norm]
# [Note: cuDNN's batch norm] For float32 CUDA inputs (not bfloat16), aten's ``batch_norm``
# picks cuDNN's kernels, so the trace holds ``cudnn_batch_norm`` and, in the backward,
# ``cudnn_batch_norm_backward``, not the native ops above. Left as library calls they cost
# the benchmark convnet's float32 training step 0.46 ms of its 1.61 ms of GPU time on the
# H200 (five layers); torch.compile's fused kernels for the same statistics took about
# 0.1 ms. Both ops are the native ones with another calling convention: the forward also
# returns a "reserve" buffer (cuDNN's workspace, empty here) and its saved variance is the
# inverse standard deviation, as native_batch_norm's is; the backward takes the input
# before the gradient and always computes all three gradients.
@register_decomposition(aten.cudnn_batch_norm.default)
def cudnn_batch_norm(x, weight, bias, running_mean, running_var, training: bool,
                     momentum: float, eps: float):
    out, mean, invstd = native_batch_norm(x, weight, bias, running_mean, running_var,
                                          training, momentum, eps)
    return out, mean, invstd, full((0,), 0, dtype=torch.uint8, device=x.device)


@register_decomposition(aten.cudnn_batch_norm_backward.default)
def cudnn_batch_norm_backward(x, grad, weight, running_mean, running_var, save_mean,
                              save_invstd, eps: float, reserve):
    return native_batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean,
                                      save_invstd, True, eps, [True, True, True])
# --8<-- [end:cudnn-batch-norm]


@register_decomposition(aten._native_batch_norm_legit.no_stats)
def _native_batch_norm_legit_no_stats(x, weight, bias, training: bool, momentum: float,
                                      eps: float):
    return native_batch_norm(x, weight, bias, None, None, True, momentum, eps)


@register_decomposition(aten._native_batch_norm_legit_functional.default)
def _native_batch_norm_legit_functional(x, weight, bias, running_mean, running_var,
                                        training: bool, momentum: float, eps: float):
    if not training:
        out, mean, invstd = _batch_norm_inference(x, weight, bias, running_mean, running_var,
                                                  eps)
        return out, mean, invstd, running_mean, running_var
    return _batch_norm_training(x, weight, bias, running_mean, running_var, momentum, eps)


@register_decomposition(aten._native_batch_norm_legit_no_training.default)
def _native_batch_norm_legit_no_training(x, weight, bias, running_mean, running_var,
                                         momentum: float, eps: float):
    return _batch_norm_inference(x, weight, bias, running_mean, running_var, eps)


@register_decomposition(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean,
                               save_invstd, train: bool, eps: float, output_mask):
    """With x_hat = (x - mean) * invstd per channel and n elements per channel:
    d bias = sum(g), d weight = sum(g * x_hat), and d x = (g - d bias / n - x_hat * d weight
    / n) * invstd * weight in training (the statistics depend on x), g * invstd * weight in
    evaluation (they do not)."""
    dtype = computation_dtype(x.dtype)
    channel, dims = _channel_dims(x)
    if train:
        mean, invstd = to_dtype(save_mean, dtype), to_dtype(save_invstd, dtype)
    else:
        mean, var = to_dtype(running_mean, dtype), to_dtype(running_var, dtype)
        invstd = prims.rsqrt(prims.add(var, scalar_like(var, eps)))
    shape = list(x.shape)
    g, acc = to_dtype(grad, dtype), to_dtype(x, dtype)
    x_hat = prims.mul(prims.sub(acc, prims.broadcast_in_dim(mean, shape, channel)),
                      prims.broadcast_in_dim(invstd, shape, channel))
    grad_bias = prims.sum(g, dims)  # (C,)
    grad_weight = prims.sum(prims.mul(g, x_hat), dims)
    scale = invstd if weight is None else prims.mul(invstd, to_dtype(weight, dtype))
    dx = g
    if train:
        n = reduced_count(x.shape, dims)
        mean_g = prims.div(grad_bias, scalar_like(grad_bias, n))
        mean_gx = prims.div(grad_weight, scalar_like(grad_weight, n))
        dx = prims.sub(prims.sub(g, prims.broadcast_in_dim(mean_g, shape, channel)),
                       prims.mul(x_hat, prims.broadcast_in_dim(mean_gx, shape, channel)))
    dx = prims.mul(dx, prims.broadcast_in_dim(scale, shape, channel))
    param_dtype = weight.dtype if weight is not None else x.dtype
    return _masked(output_mask, to_dtype(dx, x.dtype), to_dtype(grad_weight, param_dtype),
                   to_dtype(grad_bias, param_dtype))


def _masked(output_mask, *grads):
    """Backward ops return None for the gradients ``output_mask`` did not ask for."""
    return tuple(g if wanted else None for g, wanted in zip(grads, output_mask))


@register_decomposition(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias,
                               output_mask):
    """With x_hat = (x - mean) * rstd and N normalized elements per row, and gh = g * weight:
    d x = rstd / N * (N gh - sum(gh) - x_hat sum(gh x_hat)) (sums over the row);
    d weight = sum(g x_hat), d bias = sum(g) over the other (leading) dims."""
    if x.numel() == 0:
        return NotImplemented
    dtype = computation_dtype(x.dtype)
    k = len(normalized_shape)
    inner = list(range(x.dim() - k, x.dim()))
    outer = list(range(x.dim() - k))
    n = reduced_count(x.shape, inner)
    g, acc = to_dtype(grad, dtype), to_dtype(x, dtype)
    x_hat = prims.mul(prims.sub(acc, broadcast_to(to_dtype(mean, dtype), x.shape)),
                      broadcast_to(to_dtype(rstd, dtype), x.shape))
    gh = g if weight is None else prims.mul(g, broadcast_to(to_dtype(weight, dtype), x.shape))

    def row_sum(t):  # (.., N) -> (.., 1), broadcast back
        return broadcast_to(restore_dims(prims.sum(t, inner), x.shape, inner), x.shape)

    def row_mean(t):
        return prims.div(row_sum(t), scalar_like(t, n))

    dx = prims.sub(prims.sub(gh, row_mean(gh)), prims.mul(x_hat, row_mean(prims.mul(gh, x_hat))))
    dx = prims.mul(broadcast_to(to_dtype(rstd, dtype), x.shape), dx)
    grad_weight = grad_bias = None
    if weight is not None:
        grad_weight = to_dtype(prims.sum(prims.mul(g, x_hat), outer), weight.dtype)
    if bias is not None:
        grad_bias = to_dtype(prims.sum(g, outer), bias.dtype)
    return _masked(output_mask, to_dtype(dx, x.dtype), grad_weight, grad_bias)


def _grouped(t: torch.Tensor, n, group: int) -> torch.Tensor:
    """(N, C, *) -> (N, G, C / G * HxW): the elements each group normalizes, as a row."""
    return prims.reshape(t, [n, group, t.numel() // n // group if n and group else 0])


@register_decomposition(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, N, C, HxW, group: int, eps: float):
    """Layer norm over each group of C / G channels (and all positions): returns the output
    and the (N, G) mean and rstd the backward needs."""
    if x.numel() == 0:
        return NotImplemented
    acc = _grouped(to_dtype(x, computation_dtype(x.dtype)), N, group)  # (N, G, D)
    count = acc.shape[2]
    mean = prims.div(prims.sum(acc, [2]), full([N, group], count, acc.dtype, x.device))
    centered = prims.sub(acc, prims.broadcast_in_dim(mean, list(acc.shape), [0, 1]))
    var = prims.div(prims.sum(prims.mul(centered, centered), [2]), scalar_like(mean, count))
    rstd = prims.rsqrt(prims.add(var, scalar_like(var, eps)))
    out = prims.mul(centered, prims.broadcast_in_dim(rstd, list(acc.shape), [0, 1]))
    out = _affine(prims.reshape(out, list(x.shape)), weight, bias, [1])
    return to_dtype(out, x.dtype), to_dtype(mean, x.dtype), to_dtype(rstd, x.dtype)


@register_decomposition(aten.native_group_norm_backward.default)
def native_group_norm_backward(grad, x, mean, rstd, weight, N, C, HxW, group: int,
                               output_mask):
    """Layer norm's backward on (N, G, D) rows; the affine gradients sum per channel."""
    if x.numel() == 0:
        return NotImplemented
    dtype = computation_dtype(x.dtype)
    g, acc = to_dtype(grad, dtype), to_dtype(x, dtype)
    rows = [N, group, x.numel() // N // group]
    x_hat = prims.mul(prims.sub(_grouped(acc, N, group), prims.broadcast_in_dim(
        to_dtype(mean, dtype), rows, [0, 1])), prims.broadcast_in_dim(to_dtype(rstd, dtype),
                                                                     rows, [0, 1]))
    gh = g if weight is None else _affine(g, weight, None, [1])
    gh = _grouped(gh, N, group)
    d = rows[2]

    def row_sum(t):
        return prims.broadcast_in_dim(prims.sum(t, [2]), rows, [0, 1])

    dx = prims.sub(prims.sub(prims.mul(gh, scalar_like(gh, d)), row_sum(gh)),
                   prims.mul(x_hat, row_sum(prims.mul(gh, x_hat))))
    dx = prims.mul(prims.div(prims.broadcast_in_dim(to_dtype(rstd, dtype), rows, [0, 1]),
                             scalar_like(dx, d)), dx)
    per_channel = [N, C, HxW]
    g3 = prims.reshape(g, per_channel)
    grad_weight = prims.sum(prims.mul(g3, prims.reshape(x_hat, per_channel)), [0, 2])
    grad_bias = prims.sum(g3, [0, 2])
    param_dtype = weight.dtype if weight is not None else x.dtype
    return _masked(output_mask, to_dtype(prims.reshape(dx, list(x.shape)), x.dtype),
                   to_dtype(grad_weight, param_dtype), to_dtype(grad_bias, param_dtype))

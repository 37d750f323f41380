"""Decompositions of loss functions and their backward ops.

Input: a loss op's arguments (predictions, targets, an optional class weight, the
``reduction`` code: 0 none, 1 mean, 2 sum); for backward ops also the incoming gradient.
Output: the loss (or the gradient with respect to the predictions), built from prims;
``gather`` picks the target class out of a row; the backward compares each class with it.

Chapter: book/docs/primtorch.md ("Backward ops").

``F.cross_entropy`` is not an aten op of its own: it is ``_log_softmax`` followed by
``nll_loss_forward``, and its backward ``nll_loss_backward`` followed by
``_log_softmax_backward_data``. Decomposing those four covers it.
"""

from __future__ import annotations

import torch

from primtorch import prims
from primtorch.prims_common import computation_dtype, full, scalar_like, to_dtype
from primtorch.registry import register_decomposition

aten = torch.ops.aten
NONE, MEAN, SUM = 0, 1, 2  # torch's reduction codes


def _reduce(loss: torch.Tensor, reduction: int) -> torch.Tensor:
    dims = list(range(loss.dim()))
    if reduction == SUM:
        return prims.sum(loss, dims)
    if reduction == MEAN:
        total = prims.sum(loss, dims)
        return prims.div(total, scalar_like(total, loss.numel()))
    return loss


def _class_index(target: torch.Tensor, ignore_index: int, class_dim: int):
    """(target with one size-1 dim inserted at the class dim, ignored positions as 0;
    the bool mask of positions that count)."""
    mask = prims.ne(target, scalar_like(target, ignore_index))
    safe = prims.where(mask, target, scalar_like(target, 0))
    shape = list(target.shape)
    shape.insert(class_dim, 1)
    return prims.reshape(safe, shape), mask


def _target_weight(weight, safe: torch.Tensor, mask: torch.Tensor, dtype) -> torch.Tensor:
    """Per position, the weight of its target class; 0 where the target is ignored."""
    flat = prims.reshape(safe, [safe.numel()])
    w = full(mask.shape, 1, dtype, mask.device) if weight is None else prims.reshape(
        prims.gather(to_dtype(weight, dtype), 0, flat), list(mask.shape))
    return prims.where(mask, w, scalar_like(w, 0))


@register_decomposition(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def nll_loss_forward(x: torch.Tensor, target: torch.Tensor, weight, reduction: int,
                     ignore_index: int):
    """-x[n, target[n]] * weight[target[n]], reduced; with mean, divided by the total
    weight of the positions that count (not by their number). Returns (loss, total weight).
    x is (C,), (N, C) or (N, C, d1, ...); the class dim is 1 (0 for a 1-D x)."""
    class_dim = 0 if x.dim() == 1 else 1
    dtype = computation_dtype(x.dtype)
    safe, mask = _class_index(target, ignore_index, class_dim)
    picked = prims.reshape(prims.gather(to_dtype(x, dtype), class_dim, safe), list(mask.shape))
    w = _target_weight(weight, safe, mask, dtype)
    loss = prims.neg(prims.mul(picked, w))
    total_weight = prims.sum(w, list(range(w.dim())))
    if reduction == NONE and x.dim() > 1:  # eager reports no total weight here
        total_weight = scalar_like(total_weight, 0)
    if reduction == MEAN:
        loss = prims.div(prims.sum(loss, list(range(loss.dim()))), total_weight)
    elif reduction == SUM:
        loss = prims.sum(loss, list(range(loss.dim())))
    return to_dtype(loss, x.dtype), to_dtype(total_weight, x.dtype)


# --8<-- [start:nll-backward]
@register_decomposition(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def nll_loss_backward(grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, weight,
                      reduction: int, ignore_index: int, total_weight: torch.Tensor):
    """Zero everywhere except -weight[target] * grad at each target class.

    [Note: a one-hot without a scatter]
    Written as a scatter of one value per position into zeros, the gradient is a tensor of
    zeros stored in full (for GPT-2's loss, 8192 rows of 50,304 classes in float32: 1.6 GB)
    and then written into, before ``_log_softmax_backward_data`` reads it back twice. As a
    comparison against the class index (``where(class == target, -weight[target] * grad,
    0)``) it is a pointwise function of the position: inductor computes it inside the
    kernel that reads it, and the one-hot is never stored. The same values either way."""
    class_dim = 0 if x.dim() == 1 else 1
    dtype = computation_dtype(x.dtype)
    safe, mask = _class_index(target, ignore_index, class_dim)
    w = _target_weight(weight, safe, mask, dtype)
    g = to_dtype(grad, dtype)
    if reduction == MEAN:
        g = prims.div(g, to_dtype(total_weight, dtype))
    if g.dim() == 0 or reduction != NONE:
        g = prims.broadcast_in_dim(prims.reshape(g, []), list(w.shape), [])
    value = prims.reshape(prims.neg(prims.mul(g, w)), list(safe.shape))  # size 1 at class_dim
    shape, dims = list(x.shape), list(range(x.dim()))
    classes = prims.broadcast_in_dim(
        prims.iota(shape[class_dim], start=0, step=1, dtype=safe.dtype, device=x.device),
        shape, [class_dim])
    hit = prims.eq(classes, prims.broadcast_in_dim(safe, shape, dims))
    value = prims.broadcast_in_dim(value, shape, dims)
    out = prims.where(hit, value, scalar_like(value, 0))
    return to_dtype(out, x.dtype)
# --8<-- [end:nll-backward]


def _pointwise_loss(fn, x: torch.Tensor, target: torch.Tensor, reduction: int):
    dtype = computation_dtype(x.dtype)
    loss = fn(to_dtype(x, dtype), to_dtype(target, dtype))
    return to_dtype(_reduce(loss, reduction), x.dtype)


def _pointwise_loss_backward(fn, grad, x: torch.Tensor, target: torch.Tensor, reduction: int):
    """fn(x, y) is d loss / d x per element; chain with grad (a scalar unless reduction
    is none), and divide by the element count for mean."""
    dtype = computation_dtype(x.dtype)
    g = to_dtype(grad, dtype)
    if reduction != NONE:
        g = prims.broadcast_in_dim(g, list(x.shape), [])
        if reduction == MEAN:
            g = prims.div(g, scalar_like(g, x.numel()))
    return to_dtype(prims.mul(g, fn(to_dtype(x, dtype), to_dtype(target, dtype))), x.dtype)


@register_decomposition(aten.mse_loss.default)
def mse_loss(x: torch.Tensor, target: torch.Tensor, reduction: int = MEAN):
    if x.shape != target.shape:
        return NotImplemented  # eager broadcasts (with a warning); keep it whole
    return _pointwise_loss(lambda a, b: prims.mul(prims.sub(a, b), prims.sub(a, b)),
                           x, target, reduction)


@register_decomposition(aten.mse_loss_backward.default)
def mse_loss_backward(grad, x: torch.Tensor, target: torch.Tensor, reduction: int):
    if x.shape != target.shape:
        return NotImplemented
    return _pointwise_loss_backward(
        lambda a, b: prims.mul(scalar_like(a, 2), prims.sub(a, b)), grad, x, target, reduction)


def _huber(d: torch.Tensor, delta: float) -> torch.Tensor:
    """0.5 d**2 for |d| < delta, else delta (|d| - 0.5 delta)."""
    ad = prims.abs(d)
    return prims.where(prims.lt(ad, scalar_like(ad, delta)),
                       prims.mul(scalar_like(d, 0.5), prims.mul(d, d)),
                       prims.mul(scalar_like(ad, delta),
                                 prims.sub(ad, scalar_like(ad, 0.5 * delta))))


@register_decomposition(aten.huber_loss.default)
def huber_loss(x: torch.Tensor, target: torch.Tensor, reduction: int = MEAN,
               delta: float = 1.0):
    if x.shape != target.shape:
        return NotImplemented
    return _pointwise_loss(lambda a, b: _huber(prims.sub(a, b), delta), x, target, reduction)


@register_decomposition(aten.smooth_l1_loss.default)
def smooth_l1_loss(x: torch.Tensor, target: torch.Tensor, reduction: int = MEAN,
                   beta: float = 1.0):
    """Huber loss divided by beta (and plain |d| when beta is 0)."""
    if x.shape != target.shape:
        return NotImplemented

    def fn(a, b):
        d = prims.sub(a, b)
        if beta == 0:
            return prims.abs(d)
        return prims.div(_huber(d, beta), scalar_like(d, beta))

    return _pointwise_loss(fn, x, target, reduction)


def _huber_grad(d: torch.Tensor, delta: float) -> torch.Tensor:
    """d for |d| < delta (in fact <=), else delta * sign(d)."""
    clipped = prims.minimum(prims.maximum(d, scalar_like(d, -delta)), scalar_like(d, delta))
    return clipped


@register_decomposition(aten.huber_loss_backward.default)
def huber_loss_backward(grad, x: torch.Tensor, target: torch.Tensor, reduction: int,
                        delta: float):
    if x.shape != target.shape:
        return NotImplemented
    return _pointwise_loss_backward(lambda a, b: _huber_grad(prims.sub(a, b), delta),
                                    grad, x, target, reduction)


@register_decomposition(aten.smooth_l1_loss_backward.default)
def smooth_l1_loss_backward(grad, x: torch.Tensor, target: torch.Tensor, reduction: int,
                            beta: float):
    if x.shape != target.shape:
        return NotImplemented

    def fn(a, b):
        d = prims.sub(a, b)
        if beta == 0:
            return prims.sign(d)
        return prims.div(_huber_grad(d, beta), scalar_like(d, beta))

    return _pointwise_loss_backward(fn, grad, x, target, reduction)


@register_decomposition(aten.binary_cross_entropy.default)
def binary_cross_entropy(x: torch.Tensor, target: torch.Tensor, weight=None,
                         reduction: int = MEAN):
    """-(y log x + (1 - y) log(1 - x)), each log clamped at -100 as eager does."""
    def fn(a, y):
        one, floor = scalar_like(a, 1), scalar_like(a, -100)
        log_x = prims.maximum(prims.log(a), floor)
        log_1mx = prims.maximum(prims.log(prims.sub(one, a)), floor)
        loss = prims.neg(prims.add(prims.mul(y, log_x), prims.mul(prims.sub(one, y), log_1mx)))
        if weight is not None:
            loss = prims.mul(loss, to_dtype(weight, a.dtype))
        return loss
    if x.shape != target.shape or (weight is not None and weight.shape != x.shape):
        return NotImplemented
    return _pointwise_loss(fn, x, target, reduction)


@register_decomposition(aten.binary_cross_entropy_backward.default)
def binary_cross_entropy_backward(grad, x: torch.Tensor, target: torch.Tensor, weight=None,
                                  reduction: int = MEAN):
    """(x - y) / max(x (1 - x), 1e-12), times the weight."""
    def fn(a, y):
        denominator = prims.maximum(prims.mul(prims.sub(scalar_like(a, 1), a), a),
                                    scalar_like(a, 1e-12))
        out = prims.div(prims.sub(a, y), denominator)
        return out if weight is None else prims.mul(out, to_dtype(weight, a.dtype))
    if x.shape != target.shape or (weight is not None and weight.shape != x.shape):
        return NotImplemented
    return _pointwise_loss_backward(fn, grad, x, target, reduction)

"""Decompositions of random ops (dropout, bernoulli, rand, randn, uniform) into the two
random prims, ``seed`` and ``rand``.

Input: the aten op's arguments; an explicit ``torch.Generator`` is not supported (the op
stays whole, a fallback).
Output: tensors built from ``prims.rand(shape, seed, offset)`` and elementwise prims.

Chapter: book/docs/primtorch.md ("Random numbers").

[Note: random prims] A compiler must be able to move, fuse and even recompute a random op
(the min-cut partitioner may recompute a dropout mask in the backward instead of saving it)
without changing its numbers. So randomness is split in two. ``prims.seed(device)`` is the
only stateful prim: it draws a fresh int64 from torch's default generator (so
``torch.manual_seed`` still makes a run repeatable). ``prims.rand(shape, seed, offset)``
is a pure function of its arguments: the same (seed, offset, shape) always gives the same
tensor, which is what PyTorch's Philox counter-based generator provides. ``offset`` lets
one seed feed several independent streams (``randn`` takes two). Forward and backward
agree because the backward either reuses the saved mask or recomputes it from the saved
seed. The numbers are not those eager would draw, so tests compare distributions and
consistency, never values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Number

import torch

from primtorch import prims
from primtorch.prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as KIND
from primtorch.prims_common import computation_dtype, elementwise_args, scalar_like, to_dtype
from primtorch.registry import register_decomposition

aten = torch.ops.aten


def uniform(shape: Sequence, dtype: torch.dtype, device: torch.device, offset: int = 0,
            seed: torch.Tensor | None = None) -> torch.Tensor:
    """Uniform [0, 1) numbers from a fresh seed (or the given one)."""
    seed = prims.seed(device) if seed is None else seed
    return prims.rand(list(shape), seed, offset, dtype=dtype, device=device)


def _factory(dtype, device, like: torch.Tensor | None = None):
    dtype = dtype or (like.dtype if like is not None else torch.get_default_dtype())
    if device is None:
        device = like.device if like is not None else torch.get_default_device()
    return dtype, torch.device(device)


@register_decomposition(aten.native_dropout.default)
def native_dropout(x: torch.Tensor, p: float, train: bool | None):
    """(x * mask / (1 - p), mask), mask true with probability 1 - p: rand + compare +
    where. Outside training the mask is all true and x passes unchanged."""
    if train is False:
        return x, prims.full(list(x.shape), True, dtype=torch.bool, device=x.device)
    if p >= 1:
        mask = prims.full(list(x.shape), False, dtype=torch.bool, device=x.device)
        return prims.mul(x, scalar_like(x, 0)), mask
    dtype = computation_dtype(x.dtype)
    noise = uniform(x.shape, dtype, x.device)
    mask = prims.ge(noise, scalar_like(noise, p))  # true with probability 1 - p
    scaled = prims.mul(to_dtype(x, dtype), scalar_like(noise, 1 / (1 - p)))
    out = prims.where(mask, scaled, scalar_like(scaled, 0))
    return to_dtype(out, x.dtype), mask


@register_decomposition(aten.native_dropout_backward.default)
def native_dropout_backward(grad: torch.Tensor, mask: torch.Tensor, scale: float):
    """The forward's own mask, so forward and backward drop the same elements."""
    (g, m, s), result_dtype = elementwise_args(grad, mask, scale, kind=KIND.DEFAULT)
    return to_dtype(prims.mul(prims.mul(g, m), s), result_dtype)


@register_decomposition(aten.bernoulli.p)
def bernoulli_p(x: torch.Tensor, p: float = 0.5, *, generator=None) -> torch.Tensor:
    """1 with probability p, in x's shape and dtype (what dropout's ``bernoulli_`` does)."""
    if generator is not None:
        return NotImplemented
    noise = uniform(x.shape, computation_dtype(x.dtype), x.device)
    return to_dtype(prims.lt(noise, scalar_like(noise, p)), x.dtype)


@register_decomposition(aten.bernoulli.default)
def bernoulli(x: torch.Tensor, *, generator=None) -> torch.Tensor:
    """1 with probability x (elementwise)."""
    if generator is not None:
        return NotImplemented
    p = to_dtype(x, computation_dtype(x.dtype))
    return to_dtype(prims.lt(uniform(x.shape, p.dtype, x.device), p), x.dtype)


@register_decomposition(aten.rand.default)
def rand(size: Sequence, *, generator=None, dtype=None, layout=None, device=None,
         pin_memory=None) -> torch.Tensor:
    if generator is not None or layout not in (None, torch.strided):
        return NotImplemented
    return uniform(size, *_factory(dtype, device))


@register_decomposition(aten.rand_like.default)
def rand_like(a: torch.Tensor, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None) -> torch.Tensor:
    return uniform(a.shape, *_factory(dtype, device, like=a))


def _normal(shape: Sequence, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Box-Muller: sqrt(-2 log(1 - u1)) cos(2 pi u2) is standard normal for independent
    uniforms u1, u2 (two offsets of one seed)."""
    wide = computation_dtype(dtype)
    seed = prims.seed(device)
    u1, u2 = uniform(shape, wide, device, 0, seed), uniform(shape, wide, device, 1, seed)
    radius = prims.sqrt(prims.mul(scalar_like(u1, -2), prims.log(
        prims.sub(scalar_like(u1, 1), u1))))
    angle = prims.mul(u2, scalar_like(u2, 2 * math.pi))
    return to_dtype(prims.mul(radius, prims.cos(angle)), dtype)


@register_decomposition(aten.randn.default)
def randn(size: Sequence, *, generator=None, dtype=None, layout=None, device=None,
          pin_memory=None) -> torch.Tensor:
    if generator is not None or layout not in (None, torch.strided):
        return NotImplemented
    return _normal(size, *_factory(dtype, device))


@register_decomposition(aten.randn_like.default)
def randn_like(a: torch.Tensor, *, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None) -> torch.Tensor:
    return _normal(a.shape, *_factory(dtype, device, like=a))


@register_decomposition(aten.normal_functional.default)
def normal_functional(a: torch.Tensor, mean: float = 0.0, std: float = 1.0, *,
                      generator=None) -> torch.Tensor:
    """The functional ``a.normal_(mean, std)``: what ``torch.distributions`` samples with
    (``torch.empty(shape).normal_()``)."""
    if generator is not None:
        return NotImplemented
    z = _normal(a.shape, computation_dtype(a.dtype), a.device)
    return to_dtype(prims.add(prims.mul(z, scalar_like(z, std)), scalar_like(z, mean)),
                    a.dtype)


@register_decomposition(aten.normal.Tensor_Tensor, aten.normal.Tensor_float,
                        aten.normal.float_Tensor)
def normal(mean, std, *, generator=None) -> torch.Tensor:
    """``torch.normal(mean, std)`` with a tensor among them: mean + std * N(0, 1), in the
    broadcast shape of the two."""
    if generator is not None:
        return NotImplemented
    (mean, std), dtype = elementwise_args(mean, std, kind=KIND.DEFAULT)
    z = _normal(mean.shape, mean.dtype, mean.device)
    return to_dtype(prims.add(prims.mul(z, std), mean), dtype)


@register_decomposition(aten.uniform.default)
def uniform_(a: torch.Tensor, from_: Number = 0, to: Number = 1, *, generator=None):
    """The functional ``a.uniform_(from, to)``: from + (to - from) * u."""
    if generator is not None:
        return NotImplemented
    u = uniform(a.shape, computation_dtype(a.dtype), a.device)
    out = prims.add(prims.mul(u, scalar_like(u, to - from_)), scalar_like(u, from_))
    return to_dtype(out, a.dtype)

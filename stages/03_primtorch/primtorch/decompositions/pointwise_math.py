"""Decompositions of elementwise math functions that are a few prims each: remainders and
floor division, lerp/addcmul/addcdiv, hypot, copysign, xlogy, logaddexp, fmax/fmin,
nan_to_num, log10, frac, erfc, logit.

Input: an aten op's arguments (tensors and Python numbers, broadcastable).
Output: the op's result from strict prims; promotion and broadcasting are done once by
``activations.pointwise`` ([Note: type promotion]), the formula runs in the computation
dtype.

Chapter: book/docs/primtorch.md ("Elementwise ops").
"""

from __future__ import annotations

import math
from numbers import Number

import torch

from primtorch import prims
from primtorch.decompositions.activations import c, pointwise
from primtorch.decompositions.elementwise import _floor_divide_float
from primtorch.prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as KIND
from primtorch.prims_common import result_type
from primtorch.registry import register_decomposition

aten = torch.ops.aten
TensorOrNumber = torch.Tensor | Number


def _remainder(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Python's a % b: fmod (sign of a), moved by b when the signs of b and fmod differ."""
    mod = prims.fmod(a, b)
    zero = c(mod, 0)
    fix = prims.bitwise_and(prims.ne(mod, zero), prims.ne(prims.lt(mod, zero), prims.lt(b, zero)))
    return prims.where(fix, prims.add(mod, b), mod)


@register_decomposition(aten.remainder.Tensor, aten.remainder.Scalar,
                        aten.remainder.Scalar_Tensor)
def remainder(a: TensorOrNumber, b: TensorOrNumber) -> torch.Tensor:
    return pointwise(_remainder, a, b, kind=KIND.DEFAULT)


@register_decomposition(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(a: TensorOrNumber, b: TensorOrNumber) -> torch.Tensor:
    if not result_type(a, b).is_floating_point:
        return NotImplemented  # exact integer division has no prim
    return pointwise(_floor_divide_float, a, b, kind=KIND.DEFAULT)


@register_decomposition(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(start: torch.Tensor, end: torch.Tensor, weight: TensorOrNumber) -> torch.Tensor:
    """start + w (end - start), computed from the nearer end as eager does (exact at w=1)."""
    def fn(s, e, w):
        diff = prims.sub(e, s)
        near_start = prims.add(s, prims.mul(w, diff))
        near_end = prims.sub(e, prims.mul(diff, prims.sub(c(w, 1), w)))
        return prims.where(prims.lt(prims.abs(w), c(w, 0.5)), near_start, near_end)
    return pointwise(fn, start, end, weight, kind=KIND.DEFAULT)


@register_decomposition(aten.addcmul.default)
def addcmul(a: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, *, value: Number = 1):
    return pointwise(lambda x, u, v: prims.add(x, prims.mul(c(u, value), prims.mul(u, v))),
                     a, t1, t2, kind=KIND.DEFAULT)


@register_decomposition(aten.addcdiv.default)
def addcdiv(a: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, *, value: Number = 1):
    return pointwise(lambda x, u, v: prims.add(x, prims.mul(c(u, value), prims.div(u, v))),
                     a, t1, t2, kind=KIND.INT_TO_FLOAT)


@register_decomposition(aten.hypot.default)
def hypot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return pointwise(lambda x, y: prims.sqrt(prims.add(prims.mul(x, x), prims.mul(y, y))),
                     a, b, kind=KIND.DEFAULT)


def _signbit(x: torch.Tensor) -> torch.Tensor:
    """x < 0, and also true for -0.0 (1 / -0.0 is -inf)."""
    if not x.dtype.is_floating_point:
        return prims.lt(x, c(x, 0))
    zero = c(x, 0)
    negative_zero = prims.bitwise_and(prims.eq(x, zero), prims.lt(prims.reciprocal(x), zero))
    return prims.bitwise_or(prims.lt(x, zero), negative_zero)


@register_decomposition(aten.signbit.default)
def signbit(a: torch.Tensor) -> torch.Tensor:
    if a.dtype == torch.bool:
        return prims.ne(a, a)  # all false
    return _signbit(a)


@register_decomposition(aten.copysign.Tensor, aten.copysign.Scalar)
def copysign(a: TensorOrNumber, b: TensorOrNumber) -> torch.Tensor:
    return pointwise(lambda x, y: prims.where(_signbit(y), prims.neg(prims.abs(x)),
                                              prims.abs(x)), a, b)


@register_decomposition(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)
def xlogy(a: TensorOrNumber, b: TensorOrNumber) -> torch.Tensor:
    """x log y, defined as 0 where x is 0 (unless y is NaN)."""
    def fn(x, y):
        zero = prims.bitwise_and(prims.eq(x, c(x, 0)), prims.logical_not(prims.isnan(y)))
        return prims.where(zero, c(x, 0), prims.mul(x, prims.log(y)))
    return pointwise(fn, a, b)


@register_decomposition(aten.logaddexp.default)
def logaddexp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """max + log1p(exp(-|a - b|)); equal infinities give that infinity."""
    def fn(x, y):
        big = prims.maximum(x, y)
        small = prims.minimum(x, y)
        out = prims.add(big, prims.log1p(prims.exp(prims.sub(small, big))))
        same_inf = prims.bitwise_and(prims.isinf(x), prims.eq(x, y))
        return prims.where(same_inf, x, out)
    return pointwise(fn, a, b)


def _fminmax(prim, a, b):
    """Like maximum/minimum, but a NaN loses to a number."""
    def fn(x, y):
        out = prim(x, y)
        out = prims.where(prims.isnan(x), y, out)
        return prims.where(prims.isnan(y), x, out)
    return pointwise(fn, a, b, kind=KIND.DEFAULT)


@register_decomposition(aten.fmax.default)
def fmax(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _fminmax(prims.maximum, a, b)


@register_decomposition(aten.fmin.default)
def fmin(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _fminmax(prims.minimum, a, b)


@register_decomposition(aten.nan_to_num.default)
def nan_to_num(a: torch.Tensor, nan: float | None = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> torch.Tensor:
    """NaN -> nan, +inf -> posinf, -inf -> neginf (defaults: 0 and the dtype's extremes)."""
    if not a.dtype.is_floating_point:
        return a
    info = torch.finfo(a.dtype)
    nan = 0.0 if nan is None else nan
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = prims.where(prims.isnan(a), c(a, nan), a)
    inf = prims.isinf(a)
    out = prims.where(prims.bitwise_and(inf, prims.gt(a, c(a, 0))), c(a, posinf), out)
    return prims.where(prims.bitwise_and(inf, prims.lt(a, c(a, 0))), c(a, neginf), out)


@register_decomposition(aten.log10.default)
def log10(a: torch.Tensor) -> torch.Tensor:
    return pointwise(lambda x: prims.div(prims.log(x), c(x, math.log(10))), a)


@register_decomposition(aten.frac.default)
def frac(a: torch.Tensor) -> torch.Tensor:
    return pointwise(lambda x: prims.sub(x, prims.trunc(x)), a, kind=KIND.DEFAULT)


@register_decomposition(aten.logit.default)
def logit(a: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """log(x / (1 - x)), with x first clamped to [eps, 1 - eps] when eps is given."""
    def fn(x):
        if eps is not None:
            x = prims.minimum(prims.maximum(x, c(x, eps)), c(x, 1 - eps))
        return prims.log(prims.div(x, prims.sub(c(x, 1), x)))
    return pointwise(fn, a)


@register_decomposition(aten.deg2rad.default)
def deg2rad(a: torch.Tensor) -> torch.Tensor:
    return pointwise(lambda x: prims.mul(x, c(x, math.pi / 180)), a)


@register_decomposition(aten.rad2deg.default)
def rad2deg(a: torch.Tensor) -> torch.Tensor:
    return pointwise(lambda x: prims.mul(x, c(x, 180 / math.pi)), a)

"""Decompositions of elementwise aten ops (arithmetic, math functions, comparisons,
activations) into prims.

Input: an aten op's arguments (tensors of any shapes and dtypes, Python numbers).
Output: the op's result, built from strict prims with explicit ``convert_element_type``,
``broadcast_in_dim`` and ``full`` (see ``primtorch.prims_common.elementwise_args``).

Chapter: book/docs/primtorch.md ("Elementwise ops").
"""

from __future__ import annotations

from numbers import Number

import torch

from primtorch import prims
from primtorch.prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as KIND
from primtorch.prims_common import (
    broadcast_shapes,
    broadcast_to,
    device_of,
    elementwise,
    elementwise_args,
    full,
    prepare,
    result_type,
    scalar_like,
    to_dtype,
)
from primtorch.registry import register_decomposition

aten = torch.ops.aten
TensorOrNumber = torch.Tensor | Number

# ---------------------------------------------------------------------------------------
# One prim each: the op is the prim plus promotion. The table says which promotion kind.

UNARY_DECOMPOSITIONS = {
    aten.neg.default: (prims.neg, KIND.NO_OPMATH),
    aten.abs.default: (prims.abs, KIND.NO_OPMATH),
    aten.sin.default: (prims.sin, KIND.INT_TO_FLOAT),
    aten.cos.default: (prims.cos, KIND.INT_TO_FLOAT),
    aten.tan.default: (prims.tan, KIND.INT_TO_FLOAT),
    aten.tanh.default: (prims.tanh, KIND.INT_TO_FLOAT),
    aten.exp.default: (prims.exp, KIND.INT_TO_FLOAT),
    aten.expm1.default: (prims.expm1, KIND.INT_TO_FLOAT),
    aten.log.default: (prims.log, KIND.INT_TO_FLOAT),
    aten.log1p.default: (prims.log1p, KIND.INT_TO_FLOAT),
    aten.sqrt.default: (prims.sqrt, KIND.INT_TO_FLOAT),
    aten.rsqrt.default: (prims.rsqrt, KIND.INT_TO_FLOAT),
    aten.erf.default: (prims.erf, KIND.INT_TO_FLOAT),
    aten.erfc.default: (prims.erfc, KIND.INT_TO_FLOAT),
    aten.reciprocal.default: (prims.reciprocal, KIND.INT_TO_FLOAT),
    aten.asin.default: (prims.asin, KIND.INT_TO_FLOAT),
    aten.acos.default: (prims.acos, KIND.INT_TO_FLOAT),
    aten.atan.default: (prims.atan, KIND.INT_TO_FLOAT),
    aten.sinh.default: (prims.sinh, KIND.INT_TO_FLOAT),
    aten.cosh.default: (prims.cosh, KIND.INT_TO_FLOAT),
    aten.asinh.default: (prims.asinh, KIND.INT_TO_FLOAT),
    aten.acosh.default: (prims.acosh, KIND.INT_TO_FLOAT),
    aten.atanh.default: (prims.atanh, KIND.INT_TO_FLOAT),
    aten.log2.default: (prims.log2, KIND.INT_TO_FLOAT),
    aten.exp2.default: (prims.exp2, KIND.INT_TO_FLOAT),
    aten.lgamma.default: (prims.lgamma, KIND.INT_TO_FLOAT),
    aten.erfinv.default: (prims.erfinv, KIND.INT_TO_FLOAT),
    aten.bitwise_not.default: (prims.bitwise_not, KIND.DEFAULT),
}

# Rounding is the identity on integers (eager returns a copy), so only floats reach a prim.
ROUNDING_DECOMPOSITIONS = {
    aten.floor.default: prims.floor, aten.ceil.default: prims.ceil,
    aten.trunc.default: prims.trunc, aten.round.default: prims.round,
}

BINARY_DECOMPOSITIONS = {
    aten.mul.Tensor: (prims.mul, KIND.DEFAULT),
    aten.div.Tensor: (prims.div, KIND.INT_TO_FLOAT),
    aten.maximum.default: (prims.maximum, KIND.DEFAULT),
    aten.minimum.default: (prims.minimum, KIND.DEFAULT),
    aten.pow.Tensor_Tensor: (prims.pow, KIND.BOOL_TO_LONG),
    aten.pow.Tensor_Scalar: (prims.pow, KIND.BOOL_TO_LONG),
    aten.pow.Scalar: (prims.pow, KIND.BOOL_TO_LONG),
    aten.eq.Tensor: (prims.eq, KIND.ALWAYS_BOOL),
    aten.eq.Scalar: (prims.eq, KIND.ALWAYS_BOOL),
    aten.ne.Tensor: (prims.ne, KIND.ALWAYS_BOOL),
    aten.ne.Scalar: (prims.ne, KIND.ALWAYS_BOOL),
    aten.lt.Tensor: (prims.lt, KIND.ALWAYS_BOOL),
    aten.lt.Scalar: (prims.lt, KIND.ALWAYS_BOOL),
    aten.le.Tensor: (prims.le, KIND.ALWAYS_BOOL),
    aten.le.Scalar: (prims.le, KIND.ALWAYS_BOOL),
    aten.gt.Tensor: (prims.gt, KIND.ALWAYS_BOOL),
    aten.gt.Scalar: (prims.gt, KIND.ALWAYS_BOOL),
    aten.ge.Tensor: (prims.ge, KIND.ALWAYS_BOOL),
    aten.ge.Scalar: (prims.ge, KIND.ALWAYS_BOOL),
    aten.mul.Scalar: (prims.mul, KIND.DEFAULT),
    aten.div.Scalar: (prims.div, KIND.INT_TO_FLOAT),
    aten.atan2.default: (prims.atan2, KIND.INT_TO_FLOAT),
    aten.fmod.Tensor: (prims.fmod, KIND.DEFAULT),
    aten.fmod.Scalar: (prims.fmod, KIND.DEFAULT),
    aten.bitwise_and.Tensor: (prims.bitwise_and, KIND.DEFAULT),
    aten.bitwise_and.Scalar: (prims.bitwise_and, KIND.DEFAULT),
    aten.bitwise_or.Tensor: (prims.bitwise_or, KIND.DEFAULT),
    aten.bitwise_or.Scalar: (prims.bitwise_or, KIND.DEFAULT),
    aten.bitwise_xor.Tensor: (prims.bitwise_xor, KIND.DEFAULT),
    aten.bitwise_xor.Scalar: (prims.bitwise_xor, KIND.DEFAULT),
    aten.bitwise_left_shift.Tensor: (prims.shift_left, KIND.DEFAULT),
    aten.bitwise_left_shift.Tensor_Scalar: (prims.shift_left, KIND.DEFAULT),
    aten.bitwise_right_shift.Tensor: (prims.shift_right, KIND.DEFAULT),
    aten.bitwise_right_shift.Tensor_Scalar: (prims.shift_right, KIND.DEFAULT),
}


def _register_unary(op: torch._ops.OpOverload, prim, kind: KIND) -> None:
    @register_decomposition(op)
    def unary(a: torch.Tensor) -> torch.Tensor:
        return elementwise(prim, a, kind=kind)


def _register_binary(op: torch._ops.OpOverload, prim, kind: KIND) -> None:
    @register_decomposition(op)
    def binary(a: TensorOrNumber, b: TensorOrNumber) -> torch.Tensor:
        return elementwise(prim, a, b, kind=kind)


for _op, (_prim, _kind) in UNARY_DECOMPOSITIONS.items():
    _register_unary(_op, _prim, _kind)
for _op, (_prim, _kind) in BINARY_DECOMPOSITIONS.items():
    _register_binary(_op, _prim, _kind)


def _register_rounding(op: torch._ops.OpOverload, prim) -> None:
    @register_decomposition(op)
    def rounding(a: torch.Tensor) -> torch.Tensor:
        if not a.dtype.is_floating_point:
            return a  # integers are already whole
        return elementwise(prim, a, kind=KIND.DEFAULT)


for _op, _prim in ROUNDING_DECOMPOSITIONS.items():
    _register_rounding(_op, _prim)

# ---------------------------------------------------------------------------------------
# Arithmetic with extras: alpha, rounding modes, reversed operands.


# --8<-- [start:decomp-add]
@register_decomposition(aten.add.Tensor)
def add(a: TensorOrNumber, b: TensorOrNumber, *, alpha: Number = 1) -> torch.Tensor:
    """a + alpha * b, computed in the computation dtype and rounded once."""
    (a, b), result_dtype = elementwise_args(a, b, kind=KIND.DEFAULT)
    if alpha != 1:
        b = prims.mul(b, scalar_like(b, alpha))
    return to_dtype(prims.add(a, b), result_dtype)
# --8<-- [end:decomp-add]


@register_decomposition(aten.add.Scalar)
def add_scalar(a: torch.Tensor, b: Number, alpha: Number = 1) -> torch.Tensor:
    return add(a, b, alpha=alpha)


@register_decomposition(aten.sub.Tensor)
def sub(a: TensorOrNumber, b: TensorOrNumber, *, alpha: Number = 1) -> torch.Tensor:
    (a, b), result_dtype = elementwise_args(a, b, kind=KIND.DEFAULT)
    if alpha != 1:
        b = prims.mul(b, scalar_like(b, alpha))
    return to_dtype(prims.sub(a, b), result_dtype)


@register_decomposition(aten.sub.Scalar)
def sub_scalar(a: torch.Tensor, b: Number, alpha: Number = 1) -> torch.Tensor:
    return sub(a, b, alpha=alpha)


@register_decomposition(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(a: TensorOrNumber, b: TensorOrNumber, *, alpha: Number = 1) -> torch.Tensor:
    """b - alpha * a (what ``2 - x`` calls)."""
    return sub(b, a, alpha=alpha)


@register_decomposition(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(a: TensorOrNumber, b: TensorOrNumber, *, rounding_mode: str | None = None):
    """True, truncating or flooring division; integer rounding stays a fallback."""
    if rounding_mode is None:
        return elementwise(prims.div, a, b, kind=KIND.INT_TO_FLOAT)
    if not result_type(a, b).is_floating_point:
        return NotImplemented  # exact integer division has no prim yet
    (a, b), result_dtype = elementwise_args(a, b, kind=KIND.DEFAULT)
    if rounding_mode == "trunc":
        # eager's CPU kernel rounds the quotient to bf16/fp16 before truncating; so do we
        return prims.trunc(to_dtype(prims.div(a, b), result_dtype))
    return to_dtype(_floor_divide_float(a, b), result_dtype)


def _floor_divide_float(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Python's a // b for floats, the way eager computes it: from fmod, so that
    5.0 // 0.1 is 49.0 (as in Python), not floor(5.0 / 0.1) = 50.0."""
    zero = scalar_like(a, 0)
    mod = prims.fmod(a, b)
    div = prims.div(prims.sub(a, mod), b)
    # fmod takes the sign of a; floor division rounds towards -inf, so step down one
    # when the remainder is nonzero and the signs of b and remainder differ.
    step_down = prims.bitwise_and(prims.ne(mod, zero), prims.ne(prims.lt(b, zero),
                                                                prims.lt(mod, zero)))
    div = prims.where(step_down, prims.sub(div, scalar_like(a, 1)), div)
    floored = prims.floor(div)
    round_up = prims.gt(prims.sub(div, floored), scalar_like(a, 0.5))
    floored = prims.where(round_up, prims.add(floored, scalar_like(a, 1)), floored)
    # a / 0 keeps the sign rules of true division (inf, -inf or nan).
    return prims.where(prims.eq(b, zero), prims.div(a, b), floored)


@register_decomposition(aten.logical_not.default)
def logical_not(a: torch.Tensor) -> torch.Tensor:
    return prims.logical_not(a)  # any dtype in, bool out: nothing to promote


@register_decomposition(aten.where.self)
def where(condition: torch.Tensor, a: TensorOrNumber, b: TensorOrNumber) -> torch.Tensor:
    """condition ? a : b; the result dtype is promoted from a and b alone."""
    dtype = result_type(a, b)
    shape = broadcast_shapes(*[x.shape for x in (condition, a, b) if isinstance(x, torch.Tensor)])
    device = device_of(condition, a, b)
    condition = broadcast_to(to_dtype(condition, torch.bool), shape)
    a, b = prepare(a, shape, dtype, device), prepare(b, shape, dtype, device)
    return prims.where(condition, a, b)


@register_decomposition(aten.clamp.default, aten.clamp.Tensor)
def clamp(a: torch.Tensor, min: TensorOrNumber | None = None, max: TensorOrNumber | None = None):
    """min(max(a, min), max): when min > max every element becomes max, as in eager."""
    bounds = [x for x in (min, max) if x is not None]
    args, result_dtype = elementwise_args(a, *bounds, kind=KIND.DEFAULT)
    out, rest = args[0], args[1:]
    if min is not None:
        out, rest = prims.maximum(out, rest[0]), rest[1:]
    if max is not None:
        out = prims.minimum(out, rest[0])
    return to_dtype(out, result_dtype)


@register_decomposition(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(a: torch.Tensor, min: TensorOrNumber) -> torch.Tensor:
    return clamp(a, min=min)


@register_decomposition(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(a: torch.Tensor, max: TensorOrNumber) -> torch.Tensor:
    return clamp(a, max=max)


@register_decomposition(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(a: torch.Tensor, mask: torch.Tensor, value: TensorOrNumber) -> torch.Tensor:
    """where(mask, value, a); the result keeps a's dtype (value is cast, never promotes)."""
    if isinstance(value, torch.Tensor):
        value = to_dtype(value, a.dtype)
    else:
        value = full([], value, a.dtype, a.device)
    shape = broadcast_shapes(a.shape, mask.shape)
    value = prepare(value, shape, a.dtype, a.device)
    return prims.where(broadcast_to(mask, shape), value, broadcast_to(a, shape))


# ---------------------------------------------------------------------------------------
# Logical ops: every operand is first read as bool (nonzero is true), the bool -> int
# category rule never applies. Sign, NaN and infinity tests.


def _as_bool(a: TensorOrNumber) -> TensorOrNumber:
    return to_dtype(a, torch.bool) if isinstance(a, torch.Tensor) else bool(a)


def _register_logical(op: torch._ops.OpOverload, prim) -> None:
    @register_decomposition(op)
    def logical(a: torch.Tensor, b: TensorOrNumber) -> torch.Tensor:
        return elementwise(prim, _as_bool(a), _as_bool(b), kind=KIND.DEFAULT)


for _op, _prim in {aten.logical_and.default: prims.bitwise_and,
                   aten.logical_or.default: prims.bitwise_or,
                   aten.logical_xor.default: prims.bitwise_xor}.items():
    _register_logical(_op, _prim)


@register_decomposition(aten.sign.default)
def sign(a: torch.Tensor) -> torch.Tensor:
    return a if a.dtype == torch.bool else elementwise(prims.sign, a, kind=KIND.DEFAULT)


@register_decomposition(aten.isnan.default)
def isnan(a: torch.Tensor) -> torch.Tensor:
    return prims.isnan(a)  # any dtype in, bool out


@register_decomposition(aten.isinf.default)
def isinf(a: torch.Tensor) -> torch.Tensor:
    return prims.isinf(a)


"""Shared rules for decompositions: type promotion, broadcasting, dims, and the helpers that
turn those rules into explicit prims.

Input: the arguments an aten op received (tensors, Python numbers), real or traced.
Output: dtypes and shapes (pure functions), or tensors built from prims
(``convert_element_type``, ``broadcast_in_dim``, ``full``) that are ready for a strict
elementwise prim: same shape, same dtype.

Chapter: book/docs/primtorch.md ("Type promotion" and "Broadcasting").

Everything here works on shapes whose sizes are ints or sympy expressions: no ``.item()``,
no data-dependent branches, and sizes are only compared with ``==``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from numbers import Number

import torch

from primtorch import prims
from primtorch.registry import DecompositionError

# ---------------------------------------------------------------------------------------
# Dtype categories. Promotion only ever moves "up" this ladder: bool < int < float < complex.


def dtype_category(dtype: torch.dtype) -> int:
    """0 for bool, 1 for integers, 2 for floating point, 3 for complex."""
    if dtype == torch.bool:
        return 0
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 1


def _scalar_dtype(value: Number) -> torch.dtype:
    """The dtype a Python number has when it takes part in promotion."""
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, complex):
        return torch.complex64 if torch.get_default_dtype() == torch.float32 else torch.complex128
    return torch.get_default_dtype()


# --8<-- [start:result-type]
# [Note: type promotion]
# torch.result_type sorts the operands into three priority groups: tensors with at least one
# dimension, 0-dim tensors, and Python numbers. Each group is promoted on its own
# (torch.promote_types). A lower-priority group only matters when its *category* is higher:
# float32 tensor + float64 0-dim tensor -> float32 (same category, the dimensioned tensor
# wins), but int32 tensor + 2.5 -> the default float dtype (float beats int), and
# int8 tensor + 1000 -> int8 (the number's size never counts, only its category).


_COMPLEX_OF = {torch.float16: torch.complex32, torch.float64: torch.complex128}


def _combine(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype | None:
    """Merge a lower-priority group's dtype into a higher-priority group's."""
    if higher is None:
        return lower
    if lower is None or dtype_category(lower) <= dtype_category(higher):
        return higher
    if lower.is_complex and higher.is_floating_point:
        # float64 tensor + 1j -> complex128: keep the tensor's precision.
        return _COMPLEX_OF.get(higher, torch.complex64)
    return lower  # bool/int higher, higher-category lower: promote_types gives lower


def result_type(*args: torch.Tensor | Number) -> torch.dtype:
    """The dtype torch.result_type gives for these operands; see [Note: type promotion]."""
    groups: list[torch.dtype | None] = [None, None, None]
    for arg in args:
        if isinstance(arg, torch.Tensor):
            group, dtype = (0 if arg.dim() > 0 else 1), arg.dtype
        elif isinstance(arg, Number):
            group, dtype = 2, _scalar_dtype(arg)
        else:
            continue
        current = groups[group]
        groups[group] = dtype if current is None else torch.promote_types(current, dtype)
    return _combine(_combine(groups[0], groups[1]), groups[2])
# --8<-- [end:result-type]


class ELEMENTWISE_TYPE_PROMOTION_KIND(enum.Enum):
    """How an op turns the promoted dtype into its result dtype (PyTorch's names)."""

    DEFAULT = enum.auto()  # the promoted dtype: add, mul, maximum, where
    INT_TO_FLOAT = enum.auto()  # bool/int -> default float: sin, exp, div, sigmoid
    ALWAYS_BOOL = enum.auto()  # comparisons: computed in the promoted dtype, result bool
    BOOL_TO_LONG = enum.auto()  # pow: bool ** bool is int64
    NO_OPMATH = enum.auto()  # like DEFAULT, but bf16/fp16 are not widened: abs, neg


def computation_dtype(dtype: torch.dtype) -> torch.dtype:
    """Low-precision floats are computed in float32 and rounded once at the end, as eager
    kernels do; everything else is computed in its own dtype."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def elementwise_dtypes(
    *args: torch.Tensor | Number, kind: ELEMENTWISE_TYPE_PROMOTION_KIND
) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) of an elementwise op over ``args``."""
    promoted = result_type(*args)
    K = ELEMENTWISE_TYPE_PROMOTION_KIND
    if kind == K.INT_TO_FLOAT and dtype_category(promoted) < 2:
        promoted = torch.get_default_dtype()
    if kind == K.BOOL_TO_LONG and promoted == torch.bool:
        promoted = torch.int64
    if kind == K.NO_OPMATH:
        return promoted, promoted
    if kind == K.ALWAYS_BOOL:
        return computation_dtype(promoted), torch.bool
    return computation_dtype(promoted), promoted


# ---------------------------------------------------------------------------------------
# Shapes and dims.


def canonicalize_dim(ndim: int, dim: int) -> int:
    """``dim`` as a non-negative index; a 0-dim tensor accepts 0 and -1 like torch."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise DecompositionError(f"dim {dim} out of range for a tensor with {ndim} dims")
    return dim % rank


def canonicalize_dims(ndim: int, dims: int | Sequence[int] | None) -> list[int]:
    """Sorted non-negative dims; ``None`` or ``[]`` means every dim (the reduction default)."""
    if isinstance(dims, int):
        dims = [dims]
    if dims is None or len(dims) == 0:
        return list(range(ndim))
    return sorted({canonicalize_dim(ndim, d) for d in dims if ndim > 0})


def broadcast_shapes(*shapes: Sequence) -> list:
    """The shape all ``shapes`` broadcast to (numpy rules: align right, 1 stretches)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, start=ndim - len(shape)):
            if size == 1 or size == out[i]:
                continue
            if out[i] != 1:
                raise DecompositionError(f"shapes {[list(s) for s in shapes]} do not broadcast")
            out[i] = size
    return out


def infer_size(shape: Sequence, numel) -> list:
    """Replace a single -1 in a view/reshape target by whatever makes ``numel`` fit."""
    shape = list(shape)
    if -1 not in shape:
        return shape
    known = 1
    for size in shape:
        if size != -1:
            known = known * size
    shape[shape.index(-1)] = numel // known
    return shape


def numel(shape: Sequence):
    out = 1
    for size in shape:
        out = out * size
    return out


# ---------------------------------------------------------------------------------------
# Helpers that emit prims.

# --8<-- [start:broadcast]
def broadcast_to(a: torch.Tensor, shape: Sequence) -> torch.Tensor:
    """``a`` broadcast to ``shape`` with one ``broadcast_in_dim`` (nothing if it already fits).

    Dims align from the right: input dim i becomes output dim i + (len(shape) - a.dim()).
    """
    # BEGIN EXERCISE primtorch-broadcast: place a's dims at the right end of shape, then broadcast
    if list(a.shape) == list(shape):
        return a
    offset = len(shape) - a.dim()
    if offset < 0:
        raise DecompositionError(f"cannot broadcast shape {list(a.shape)} to {list(shape)}")
    broadcast_dimensions = [offset + i for i in range(a.dim())]
    return prims.broadcast_in_dim(a, list(shape), broadcast_dimensions)
    # END EXERCISE primtorch-broadcast
# --8<-- [end:broadcast]


def to_dtype(a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``a`` converted to ``dtype``; no prim when it already has it."""
    return a if a.dtype == dtype else prims.convert_element_type(a, dtype)


def device_of(*args: object) -> torch.device:
    """The device elementwise results live on: that of the first tensor with dims, else of
    the first tensor (a 0-dim CPU tensor may join CUDA operands, as in eager)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors:
        raise DecompositionError("an elementwise op needs at least one tensor operand")
    with_dims = [t for t in tensors if t.dim() > 0]
    return (with_dims or tensors)[0].device


def full(shape: Sequence, value: Number, dtype: torch.dtype, device: torch.device):
    """A tensor of ``shape`` filled with ``value``, how a Python number enters a graph."""
    return prims.full(list(shape), value, dtype=dtype, device=device)


# --8<-- [start:type-promotion]
def elementwise_args(
    *args: torch.Tensor | Number, kind: ELEMENTWISE_TYPE_PROMOTION_KIND
) -> tuple[list[torch.Tensor], torch.dtype]:
    """Operands ready for a strict elementwise prim, and the dtype of the op's result.

    Every tensor is converted to the computation dtype and broadcast to the common shape;
    every Python number becomes a ``full`` of that shape and dtype. The caller applies the
    prim and converts the result with ``to_dtype(out, result_dtype)``.
    """
    compute_dtype, result_dtype = elementwise_dtypes(*args, kind=kind)
    shape = broadcast_shapes(*[a.shape for a in args if isinstance(a, torch.Tensor)])
    device = device_of(*args)
    return [prepare(arg, shape, compute_dtype, device) for arg in args], result_dtype


def prepare(arg: torch.Tensor | Number, shape: Sequence, dtype: torch.dtype, device):
    """One operand as a tensor of exactly ``shape`` and ``dtype``."""
    if isinstance(arg, torch.Tensor):
        if arg.device != device:
            # A 0-dim CPU tensor joining CUDA operands (eager allows it). No prim moves
            # data between devices, so the move stays an aten op (a fallback).
            arg = torch.ops.aten._to_copy.default(arg, device=device)
        return broadcast_to(to_dtype(arg, dtype), shape)
    return full(shape, arg, dtype, device)
# --8<-- [end:type-promotion]


def elementwise(prim, *args: torch.Tensor | Number, kind: ELEMENTWISE_TYPE_PROMOTION_KIND):
    """Apply an elementwise prim to ``args`` with torch's promotion and broadcasting."""
    ready, result_dtype = elementwise_args(*args, kind=kind)
    return to_dtype(prim(*ready), result_dtype)


def scalar_like(a: torch.Tensor, value: Number) -> torch.Tensor:
    """A ``full`` with ``a``'s shape, dtype and device."""
    return full(a.shape, value, a.dtype, a.device)

"""Decompositions of reductions and of the ops built from them (mean, var, softmax).

Input: an aten reduction's arguments (a tensor, dims, keepdim, dtype, ...).
Output: the reduced tensor, built from the reduction prims (which remove the reduced dims)
plus ``broadcast_in_dim`` to put size-1 dims back for ``keepdim=True``.

Chapter: book/docs/primtorch.md ("Reductions").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from primtorch import prims
from primtorch.prims_common import (
    broadcast_to,
    canonicalize_dims,
    computation_dtype,
    dtype_category,
    scalar_like,
    to_dtype,
)
from primtorch.registry import register_decomposition

aten = torch.ops.aten
Dims = int | Sequence[int] | None


def keepdim_shape(shape: Sequence, dims: Sequence[int]) -> list:
    """``shape`` with every reduced dim set to 1."""
    return [1 if i in dims else s for i, s in enumerate(shape)]


def restore_dims(out: torch.Tensor, in_shape: Sequence, dims: Sequence[int]) -> torch.Tensor:
    """Undo a reduction prim's removal of ``dims`` (the ``keepdim=True`` result)."""
    kept = [i for i in range(len(in_shape)) if i not in dims]
    return prims.broadcast_in_dim(out, keepdim_shape(in_shape, dims), kept)


def reduced_count(shape: Sequence, dims: Sequence[int]):
    """How many elements each output element summarises."""
    count = 1
    for d in dims:
        count = count * shape[d]
    return count


def _sum(a: torch.Tensor, dims: list[int], keepdim: bool, dtype: torch.dtype | None):
    """Sum with torch's accumulator rules: integers and bool sum in int64, bf16/fp16 in
    float32 (then rounded back); an explicit ``dtype`` converts first."""
    if dtype is None:
        dtype = torch.int64 if dtype_category(a.dtype) < 2 else a.dtype
    x = to_dtype(a, computation_dtype(dtype))
    out = to_dtype(prims.sum(x, dims), dtype)
    return restore_dims(out, a.shape, dims) if keepdim else out


@register_decomposition(aten.sum.dim_IntList)
def sum_dim(a: torch.Tensor, dim: Dims, keepdim: bool = False, *, dtype=None) -> torch.Tensor:
    return _sum(a, canonicalize_dims(a.dim(), dim), keepdim, dtype)


@register_decomposition(aten.sum.default)
def sum_all(a: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return _sum(a, canonicalize_dims(a.dim(), None), False, dtype)


def _mean(a: torch.Tensor, dims: list[int], keepdim: bool, dtype: torch.dtype | None):
    dtype = dtype or a.dtype
    if not dtype.is_floating_point:
        return NotImplemented  # eager raises for integer means; let it say so
    x = to_dtype(a, computation_dtype(dtype))
    total = prims.sum(x, dims)
    out = prims.div(total, scalar_like(total, reduced_count(a.shape, dims)))
    out = to_dtype(out, dtype)
    return restore_dims(out, a.shape, dims) if keepdim else out


@register_decomposition(aten.mean.dim)
def mean_dim(a: torch.Tensor, dim: Dims, keepdim: bool = False, *, dtype=None) -> torch.Tensor:
    return _mean(a, canonicalize_dims(a.dim(), dim), keepdim, dtype)


@register_decomposition(aten.mean.default)
def mean_all(a: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return _mean(a, canonicalize_dims(a.dim(), None), False, dtype)


def _minmax(prim, a: torch.Tensor, dim: Dims, keepdim: bool) -> torch.Tensor:
    dims = canonicalize_dims(a.dim(), dim)
    out = prim(a, dims)
    return restore_dims(out, a.shape, dims) if keepdim else out


@register_decomposition(aten.amax.default)
def amax(a: torch.Tensor, dim: Dims = (), keepdim: bool = False) -> torch.Tensor:
    return _minmax(prims.amax, a, dim, keepdim)


@register_decomposition(aten.amin.default)
def amin(a: torch.Tensor, dim: Dims = (), keepdim: bool = False) -> torch.Tensor:
    return _minmax(prims.amin, a, dim, keepdim)


@register_decomposition(aten.var.correction)
def var(a: torch.Tensor, dim: Dims = None, *, correction=None, keepdim: bool = False):
    """sum((a - mean(a))**2) / (N - correction), the two-pass formula."""
    dims = canonicalize_dims(a.dim(), dim)
    correction = 1 if correction is None else correction
    x = to_dtype(a, computation_dtype(a.dtype))
    total = prims.sum(x, dims)
    mean = prims.div(total, scalar_like(total, reduced_count(a.shape, dims)))
    diff = prims.sub(x, broadcast_to(restore_dims(mean, a.shape, dims), a.shape))
    total = prims.sum(prims.mul(diff, diff), dims)
    # max(.., 0): with no elements eager gives nan (0 / 0), not 0 / -1
    denominator = max(reduced_count(a.shape, dims) - correction, 0)
    out = prims.div(total, scalar_like(total, denominator))
    out = to_dtype(out, a.dtype)
    return restore_dims(out, a.shape, dims) if keepdim else out


def _shifted(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x - max(x, dim): the same softmax, without overflow in exp."""
    row_max = restore_dims(prims.amax(x, [dim]), x.shape, [dim])
    return prims.sub(x, broadcast_to(row_max, x.shape))


def _softmax_input(x: torch.Tensor, dim: int, half_to_float: bool):
    dims = canonicalize_dims(x.dim(), dim)
    result_dtype = torch.float32 if half_to_float else x.dtype
    if x.dim() == 0 or x.shape[dims[0]] == 0:
        dims = [None]  # one element per row, or no rows at all: no reduction to do
    return to_dtype(x, computation_dtype(x.dtype)), dims[0], result_dtype


@register_decomposition(aten._softmax.default)
def _softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    x, dim, result_dtype = _softmax_input(x, dim, half_to_float)
    if dim is None:  # exp(x - x) is 1 (nan for +-inf, as in eager) and keeps empty shapes
        return to_dtype(prims.exp(prims.sub(x, x)), result_dtype)
    unnormalized = prims.exp(_shifted(x, dim))
    total = restore_dims(prims.sum(unnormalized, [dim]), x.shape, [dim])
    return to_dtype(prims.div(unnormalized, broadcast_to(total, x.shape)), result_dtype)


@register_decomposition(aten._log_softmax.default)
def _log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    x, dim, result_dtype = _softmax_input(x, dim, half_to_float)
    if dim is None:  # x - x is 0 (nan for +-inf, as in eager) and keeps empty shapes
        return to_dtype(prims.sub(x, x), result_dtype)
    shifted = _shifted(x, dim)
    total = restore_dims(prims.sum(prims.exp(shifted), [dim]), x.shape, [dim])
    log_total = broadcast_to(prims.log(total), x.shape)
    return to_dtype(prims.sub(shifted, log_total), result_dtype)

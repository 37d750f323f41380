"""Decompositions of reductions and of the ops built from them (mean, var, softmax).

Input: an aten reduction's arguments (a tensor, dims, keepdim, dtype, ...).
Output: the reduced tensor, built from the reduction prims (which remove the reduced dims)
plus ``broadcast_in_dim`` to put size-1 dims back for ``keepdim=True``.

Chapter: book/docs/primtorch.md ("Reductions").
"""

from __future__ import annotations

import math
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


def _var_and_mean(a: torch.Tensor, dims: list[int], correction, keepdim: bool):
    """(m2 / (N - correction), mean) in a's dtype, from one ``mean_m2`` (which compiled
    kernels compute in one pass: Welford)."""
    correction = 1 if correction is None else correction
    mean, m2 = prims.mean_m2(to_dtype(a, computation_dtype(a.dtype)), dims)
    # max(.., 0): with no elements eager gives nan (0 / 0), not 0 / -1
    denominator = max(reduced_count(a.shape, dims) - correction, 0)
    out = to_dtype(prims.div(m2, scalar_like(m2, denominator)), a.dtype)
    mean = to_dtype(mean, a.dtype)
    if keepdim:
        return restore_dims(out, a.shape, dims), restore_dims(mean, a.shape, dims)
    return out, mean


@register_decomposition(aten.var.correction)
def var(a: torch.Tensor, dim: Dims = None, *, correction=None, keepdim: bool = False):
    """sum((a - mean(a))**2) / (N - correction)."""
    if not a.dtype.is_floating_point:
        return NotImplemented  # eager raises for integers; let it say so
    return _var_and_mean(a, canonicalize_dims(a.dim(), dim), correction, keepdim)[0]


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


@register_decomposition(aten._safe_softmax.default)
def _safe_softmax(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Softmax, except that a row that is all -inf (a query allowed to attend to nothing)
    gives zeros instead of nan. The math path of scaled_dot_product_attention uses it."""
    out = _softmax(x if dtype is None else to_dtype(x, dtype), dim, False)
    wide, dim, _ = _softmax_input(x, dim, False)
    if dim is None:  # one element per row: the row is all -inf when that element is
        masked = prims.eq(wide, scalar_like(wide, -math.inf))
    else:  # the row's maximum is -inf exactly when every element is
        row_max = restore_dims(prims.amax(wide, [dim]), x.shape, [dim])
        masked = broadcast_to(prims.eq(row_max, scalar_like(row_max, -math.inf)), x.shape)
    return prims.where(masked, scalar_like(out, 0), out)


@register_decomposition(aten._log_softmax.default)
def _log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """x - max - log(sum(exp(x - max))) along dim: the max keeps exp from overflowing."""
    # BEGIN EXERCISE primtorch-log-softmax: log_softmax in prims, stable for large inputs
    x, dim, result_dtype = _softmax_input(x, dim, half_to_float)
    if dim is None:  # x - x is 0 (nan for +-inf, as in eager) and keeps empty shapes
        return to_dtype(prims.sub(x, x), result_dtype)
    shifted = _shifted(x, dim)
    total = restore_dims(prims.sum(prims.exp(shifted), [dim]), x.shape, [dim])
    log_total = broadcast_to(prims.log(total), x.shape)
    return to_dtype(prims.sub(shifted, log_total), result_dtype)
    # END EXERCISE primtorch-log-softmax


def _softmax_backward_dims(out: torch.Tensor, dim: int) -> list[int]:
    return canonicalize_dims(out.dim(), dim) if out.dim() > 0 else []


@register_decomposition(aten._softmax_backward_data.default)
def _softmax_backward_data(grad: torch.Tensor, out: torch.Tensor, dim: int,
                           input_dtype: torch.dtype) -> torch.Tensor:
    """dx = y * (g - sum(g * y)): the Jacobian of softmax is diag(y) - y y^T."""
    dims = _softmax_backward_dims(out, dim)
    g = to_dtype(grad, computation_dtype(grad.dtype))
    y = to_dtype(out, g.dtype)
    gy = prims.mul(g, y)
    total = broadcast_to(restore_dims(prims.sum(gy, dims), y.shape, dims), y.shape)
    return to_dtype(prims.sub(gy, prims.mul(y, total)), input_dtype)


@register_decomposition(aten._log_softmax_backward_data.default)
def _log_softmax_backward_data(grad: torch.Tensor, out: torch.Tensor, dim: int,
                               input_dtype: torch.dtype) -> torch.Tensor:
    """dx = g - exp(y) * sum(g), with y = log_softmax(x) (so exp(y) is the softmax)."""
    dims = _softmax_backward_dims(out, dim)
    g = to_dtype(grad, computation_dtype(grad.dtype))
    y = to_dtype(out, g.dtype)
    total = broadcast_to(restore_dims(prims.sum(g, dims), y.shape, dims), y.shape)
    return to_dtype(prims.sub(g, prims.mul(prims.exp(y), total)), input_dtype)


# ---------------------------------------------------------------------------------------
# prod, max/min with indices, any/all, logsumexp, norms, std.


def _prod(a: torch.Tensor, dims: list[int], keepdim: bool, dtype: torch.dtype | None):
    """Like ``_sum``: integers and bool multiply in int64, an explicit dtype converts first."""
    if dtype is None:
        dtype = torch.int64 if dtype_category(a.dtype) < 2 else a.dtype
    out = to_dtype(prims.prod(to_dtype(a, computation_dtype(dtype)), dims), dtype)
    return restore_dims(out, a.shape, dims) if keepdim else out


@register_decomposition(aten.prod.default)
def prod_all(a: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return _prod(a, canonicalize_dims(a.dim(), None), False, dtype)


@register_decomposition(aten.prod.dim_int)
def prod_dim(a: torch.Tensor, dim: int, keepdim: bool = False, *, dtype=None):
    return _prod(a, canonicalize_dims(a.dim(), dim), keepdim, dtype)


def _arg(prim, a: torch.Tensor, dim: int | None, keepdim: bool) -> torch.Tensor:
    """argmax/argmin over one dim; with no dim, over the flattened tensor."""
    if dim is None or a.dim() == 0:
        flat = prims.reshape(a, [reduced_count(a.shape, range(a.dim()))])
        out = prim(flat, 0)
        return prims.reshape(out, [1] * a.dim()) if keepdim else out
    d = canonicalize_dims(a.dim(), dim)
    out = prim(a, d[0])
    return restore_dims(out, a.shape, d) if keepdim else out


@register_decomposition(aten.argmax.default)
def argmax(a: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    return _arg(prims.argmax, a, dim, keepdim)


@register_decomposition(aten.argmin.default)
def argmin(a: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    return _arg(prims.argmin, a, dim, keepdim)


@register_decomposition(aten.max.dim)
def max_dim(a: torch.Tensor, dim: int, keepdim: bool = False):
    """(values, indices): an amax and an argmax over the same dim."""
    return _minmax(prims.amax, a, dim, keepdim), _arg(prims.argmax, a, dim, keepdim)


@register_decomposition(aten.min.dim)
def min_dim(a: torch.Tensor, dim: int, keepdim: bool = False):
    return _minmax(prims.amin, a, dim, keepdim), _arg(prims.argmin, a, dim, keepdim)


@register_decomposition(aten.max.default)
def max_all(a: torch.Tensor) -> torch.Tensor:
    return _minmax(prims.amax, a, None, False)


@register_decomposition(aten.min.default)
def min_all(a: torch.Tensor) -> torch.Tensor:
    return _minmax(prims.amin, a, None, False)


def _any_all(prim, a: torch.Tensor, dim: Dims, keepdim: bool) -> torch.Tensor:
    """any is a max of bools, all a min; uint8 inputs give uint8 results, as in eager."""
    out = _minmax(prim, to_dtype(a, torch.bool), dim, keepdim)
    return to_dtype(out, torch.uint8 if a.dtype == torch.uint8 else torch.bool)


@register_decomposition(aten.any.default, aten.any.dim, aten.any.dims)
def any_(a: torch.Tensor, dim: Dims = None, keepdim: bool = False) -> torch.Tensor:
    return _any_all(prims.amax, a, dim, keepdim)


@register_decomposition(aten.all.default, aten.all.dim, aten.all.dims)
def all_(a: torch.Tensor, dim: Dims = None, keepdim: bool = False) -> torch.Tensor:
    return _any_all(prims.amin, a, dim, keepdim)


@register_decomposition(aten.logsumexp.default)
def logsumexp(a: torch.Tensor, dim: Dims, keepdim: bool = False) -> torch.Tensor:
    """m + log(sum(exp(x - m))), m the max (taken as 0 where it is infinite)."""
    dims = canonicalize_dims(a.dim(), dim)
    result_dtype = a.dtype if a.dtype.is_floating_point else torch.get_default_dtype()
    x = to_dtype(a, computation_dtype(result_dtype))
    if a.numel() == 0 or not dims:
        return NotImplemented if a.numel() == 0 else to_dtype(x, result_dtype)
    m = prims.amax(x, dims)
    m = prims.where(prims.isinf(m), scalar_like(m, 0), m)
    shifted = prims.sub(x, broadcast_to(restore_dims(m, a.shape, dims), a.shape))
    out = prims.add(prims.log(prims.sum(prims.exp(shifted), dims)), m)
    out = to_dtype(out, result_dtype)
    return restore_dims(out, a.shape, dims) if keepdim else out


@register_decomposition(aten.linalg_vector_norm.default)
def linalg_vector_norm(a: torch.Tensor, ord: float = 2, dim: Dims = None, keepdim: bool = False,
                       *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """sum(|x| ** ord) ** (1 / ord); ord 0 counts nonzeros, +-inf is max/min of |x|."""
    if not (dtype or a.dtype).is_floating_point:
        return NotImplemented
    dims = canonicalize_dims(a.dim(), dim)
    x = to_dtype(a, computation_dtype(dtype or a.dtype))
    if ord in (math.inf, -math.inf):
        if a.numel() == 0:
            return NotImplemented
        out = (prims.amax if ord > 0 else prims.amin)(prims.abs(x), dims)
    elif ord == 0:
        out = prims.sum(to_dtype(prims.ne(x, scalar_like(x, 0)), x.dtype), dims)
    elif ord == 2:
        out = prims.sqrt(prims.sum(prims.mul(x, x), dims))
    elif ord == 1:
        out = prims.sum(prims.abs(x), dims)
    else:
        powered = prims.pow(prims.abs(x), scalar_like(x, ord))
        out = prims.sum(powered, dims)
        out = prims.pow(out, scalar_like(out, 1.0 / ord))
    out = to_dtype(out, dtype or a.dtype)
    return restore_dims(out, a.shape, dims) if keepdim else out


@register_decomposition(aten.std.correction)
def std(a: torch.Tensor, dim: Dims = None, *, correction=None, keepdim: bool = False):
    out = var(a, dim, correction=correction, keepdim=keepdim)
    return to_dtype(prims.sqrt(to_dtype(out, computation_dtype(out.dtype))), out.dtype)


@register_decomposition(aten.var_mean.correction)
def var_mean(a: torch.Tensor, dim: Dims = None, *, correction=None, keepdim: bool = False):
    if not a.dtype.is_floating_point:
        return NotImplemented
    return _var_and_mean(a, canonicalize_dims(a.dim(), dim), correction, keepdim)


@register_decomposition(aten.std_mean.correction)
def std_mean(a: torch.Tensor, dim: Dims = None, *, correction=None, keepdim: bool = False):
    return std(a, dim, correction=correction, keepdim=keepdim), _mean(
        a, canonicalize_dims(a.dim(), dim), keepdim, None)

"""Decompositions of ops that cut tensors apart or put them together: slice, select,
split, unbind, cat, stack, pad, repeat, flip, tril/triu, and the backward ops of slicing.

Input: the aten op's arguments (dims may be negative, slice bounds may be None, negative
or out of range, exactly as Python indexing allows).
Output: tensors built from ``slice``, ``cat``, ``reshape``, ``broadcast_in_dim``, ``full``
and ``iota``, with every bound normalised first (prims take only in-range bounds).

Chapter: book/docs/primtorch.md ("Views are copies, semantically").
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Number

import torch

from primtorch import prims
from primtorch.prims_common import (
    broadcast_to,
    canonicalize_dim,
    full,
    result_type,
    scalar_like,
    to_dtype,
)
from primtorch.registry import DecompositionError, register_decomposition

aten = torch.ops.aten


def slice_in_dim(a: torch.Tensor, dim: int, start, end, step: int = 1) -> torch.Tensor:
    """a[..., start:end:step, ...] in ``dim``, bounds already in range."""
    starts, limits, strides = [0] * a.dim(), list(a.shape), [1] * a.dim()
    starts[dim], limits[dim], strides[dim] = start, end, step
    if starts == [0] * a.dim() and limits == list(a.shape) and step == 1:
        return a
    return prims.slice(a, starts, limits, strides)


def _clamp_bound(bound, size, default):
    """Python slice bound semantics: None is the default, negatives count from the end,
    anything outside [0, size] is clamped."""
    if bound is None:
        return default
    if bound < 0:
        bound = bound + size
    return min(max(bound, 0), size)


@register_decomposition(aten.slice.Tensor)
def slice_(a: torch.Tensor, dim: int = 0, start=None, end=None, step: int = 1):
    dim = canonicalize_dim(a.dim(), dim)
    size = a.shape[dim]
    start = _clamp_bound(start, size, 0)
    end = max(_clamp_bound(end, size, size), start)
    return slice_in_dim(a, dim, start, end, step)


def _drop_dim(a: torch.Tensor, dim: int) -> torch.Tensor:
    return prims.reshape(a, [s for i, s in enumerate(a.shape) if i != dim])


@register_decomposition(aten.select.int)
def select(a: torch.Tensor, dim: int, index: int) -> torch.Tensor:
    dim = canonicalize_dim(a.dim(), dim)
    index = index + a.shape[dim] if index < 0 else index
    if not 0 <= index < a.shape[dim]:
        raise DecompositionError(f"select: index {index} out of range in dim {dim}")
    return _drop_dim(slice_in_dim(a, dim, index, index + 1), dim)


@register_decomposition(aten.split_with_sizes.default)
def split_with_sizes(a: torch.Tensor, split_sizes: Sequence[int], dim: int = 0):
    dim = canonicalize_dim(a.dim(), dim)
    pieces, start = [], 0
    for size in split_sizes:
        pieces.append(slice_in_dim(a, dim, start, start + size))
        start = start + size
    return pieces


@register_decomposition(aten.split.Tensor)
def split(a: torch.Tensor, split_size: int, dim: int = 0):
    """Pieces of ``split_size`` along ``dim``; the last may be shorter."""
    dim = canonicalize_dim(a.dim(), dim)
    size = a.shape[dim]
    if split_size == 0:
        return [a]
    count = max((size + split_size - 1) // split_size, 1)
    sizes = [split_size] * (count - 1) + [size - split_size * (count - 1)]
    return split_with_sizes(a, sizes, dim)


@register_decomposition(aten.unbind.int)
def unbind(a: torch.Tensor, dim: int = 0):
    dim = canonicalize_dim(a.dim(), dim)
    return [select(a, dim, i) for i in range(a.shape[dim])]


@register_decomposition(aten.cat.default)
def cat(tensors: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """Operands promote to one dtype (result_type over all of them); legacy empty 1-D
    tensors (shape (0,)) are skipped, as eager does."""
    dtype = result_type(*tensors)
    kept = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    if not kept:
        return to_dtype(tensors[0], dtype)
    dim = canonicalize_dim(kept[0].dim(), dim)
    kept = [to_dtype(t, dtype) for t in kept]
    return kept[0] if len(kept) == 1 else prims.cat(kept, dim)


@register_decomposition(aten.stack.default)
def stack(tensors: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    dim = canonicalize_dim(tensors[0].dim() + 1, dim)
    expanded = []
    for t in tensors:
        shape = list(t.shape)
        shape.insert(dim, 1)
        expanded.append(prims.reshape(t, shape))
    return cat(expanded, dim)


def pad_in_dim(a: torch.Tensor, dim: int, before, after, value: Number) -> torch.Tensor:
    """``a`` with ``before``/``after`` elements of ``value`` added in ``dim`` (negative
    amounts cut elements off instead)."""
    start = -before if before < 0 else 0
    end = a.shape[dim] + after if after < 0 else a.shape[dim]
    a = slice_in_dim(a, dim, start, max(end, start))
    parts = []
    for amount in (max(before, 0), None, max(after, 0)):
        if amount is None:
            parts.append(a)
        elif amount > 0:
            shape = list(a.shape)
            shape[dim] = amount
            parts.append(full(shape, value, a.dtype, a.device))
    return parts[0] if len(parts) == 1 else prims.cat(parts, dim)


@register_decomposition(aten.constant_pad_nd.default)
def constant_pad_nd(a: torch.Tensor, pad: Sequence[int], value: Number = 0) -> torch.Tensor:
    """``pad`` lists (before, after) pairs starting from the last dim."""
    for i in range(len(pad) // 2):
        a = pad_in_dim(a, a.dim() - 1 - i, pad[2 * i], pad[2 * i + 1], value)
    return a


@register_decomposition(aten.repeat.default)
def repeat(a: torch.Tensor, repeats: Sequence[int]) -> torch.Tensor:
    """Tile: dim i of size s becomes (repeats[i], s) by broadcasting, then one reshape."""
    shape = [1] * (len(repeats) - a.dim()) + list(a.shape)
    a = prims.reshape(a, shape) if shape != list(a.shape) else a
    interleaved = []
    for r, s in zip(repeats, shape):
        interleaved += [r, s]
    tiled = prims.broadcast_in_dim(a, interleaved, list(range(1, 2 * len(shape), 2)))
    return prims.reshape(tiled, [r * s for r, s in zip(repeats, shape)])


@register_decomposition(aten.flip.default)
def flip(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    """Gather each named dim with the index size - 1, size - 2, ..., 0."""
    for d in {canonicalize_dim(a.dim(), d) for d in dims}:
        size = a.shape[d]
        index = prims.iota(size, start=size - 1, step=-1, dtype=torch.int64, device=a.device)
        a = prims.gather(a, d, prims.broadcast_in_dim(index, list(a.shape), [d]))
    return a


def _triangle(a: torch.Tensor, diagonal: int, keep_lower: bool) -> torch.Tensor:
    """Zero the elements above (tril) or below (triu) the ``diagonal``-th diagonal of the
    last two dims: the test is col - row <= diagonal, on iotas broadcast to the shape."""
    if a.dim() < 2:
        raise DecompositionError("tril/triu need at least 2 dims")
    rows, cols = a.shape[-2], a.shape[-1]
    shape = list(a.shape)
    row = prims.broadcast_in_dim(prims.iota(rows, start=0, step=1, dtype=torch.int64,
                                            device=a.device), shape, [a.dim() - 2])
    col = prims.broadcast_in_dim(prims.iota(cols, start=0, step=1, dtype=torch.int64,
                                            device=a.device), shape, [a.dim() - 1])
    offset = prims.sub(col, row)
    limit = scalar_like(offset, diagonal)
    keep = prims.le(offset, limit) if keep_lower else prims.ge(offset, limit)
    return prims.where(keep, a, scalar_like(a, 0))


@register_decomposition(aten.tril.default)
def tril(a: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    return _triangle(a, diagonal, keep_lower=True)


@register_decomposition(aten.triu.default)
def triu(a: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    return _triangle(a, diagonal, keep_lower=False)


# ---------------------------------------------------------------------------------------
# Backward ops of slicing: the gradient goes back where the slice came from; zeros
# everywhere else. Both are pads, with zeros interleaved for a strided slice.


@register_decomposition(aten.select_backward.default)
def select_backward(grad: torch.Tensor, input_sizes: Sequence, dim: int, index: int):
    dim = canonicalize_dim(len(input_sizes), dim)
    size = input_sizes[dim]
    index = index + size if index < 0 else index
    shape = list(grad.shape)
    shape.insert(dim, 1)
    return pad_in_dim(prims.reshape(grad, shape), dim, index, size - index - 1, 0)


@register_decomposition(aten.slice_backward.default)
def slice_backward(grad: torch.Tensor, input_sizes: Sequence, dim: int, start: int,
                   end: int, step: int) -> torch.Tensor:
    dim = canonicalize_dim(len(input_sizes), dim)
    size = input_sizes[dim]
    start = _clamp_bound(start, size, 0)
    end = max(_clamp_bound(end, size, size), start)
    if step > 1 and grad.shape[dim] > 0:
        # each gradient element, then step - 1 zeros: (.., k, ..) -> (.., k, step, ..)
        shape = list(grad.shape)
        spread = shape[:dim + 1] + [1] + shape[dim + 1:]
        zeros = full(shape[:dim + 1] + [step - 1] + shape[dim + 1:], 0, grad.dtype,
                     grad.device)
        grad = prims.cat([prims.reshape(grad, spread), zeros], dim + 1)
        shape[dim] = shape[dim] * step
        grad = prims.reshape(grad, shape)
        grad = slice_in_dim(grad, dim, 0, min(shape[dim], end - start))
    return pad_in_dim(grad, dim, start, size - start - grad.shape[dim], 0)


@register_decomposition(aten.copy.default)
def copy(a: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """The functional ``a.copy_(src)``: src cast to a's dtype and broadcast to a's shape."""
    if src.device != a.device:
        return NotImplemented  # device moves have no prim
    return broadcast_to(to_dtype(src, a.dtype), a.shape)


@register_decomposition(aten.fill.Scalar, aten.fill.Tensor)
def fill(a: torch.Tensor, value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return broadcast_to(to_dtype(value, a.dtype), a.shape)
    return full(a.shape, value, a.dtype, a.device)

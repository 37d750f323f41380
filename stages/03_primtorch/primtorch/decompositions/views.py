"""Decompositions of view, layout and conversion ops into ``reshape``, ``permute``,
``broadcast_in_dim`` and ``convert_element_type``.

Input: an aten view/copy/conversion op's arguments.
Output: a tensor with the op's shape, dtype and values, built from prims.

Chapter: book/docs/primtorch.md ("Views are copies, semantically").

[Note: functional views] aten's view ops share storage with their input; prims never do.
A graph we trace is functional (nothing writes to a tensor after it is made), so a copy and
a view hold the same values and the difference cannot be observed. Inductor then turns our
``reshape``/``permute``/``broadcast_in_dim`` back into index arithmetic, so no copy is made
at run time. Ops that only change identity or memory format (``clone``, ``detach``,
``alias``, ``_to_copy`` without a dtype) decompose to their input itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from primtorch import prims
from primtorch.prims_common import (
    broadcast_to,
    canonicalize_dim,
    canonicalize_dims,
    infer_size,
    numel,
    to_dtype,
)
from primtorch.registry import DecompositionError, register_decomposition

aten = torch.ops.aten


@register_decomposition(aten.view.default, aten._unsafe_view.default)
def view(a: torch.Tensor, size: Sequence) -> torch.Tensor:
    """Also ``reshape``: aten.reshape is CompositeImplicitAutograd, so a tracer only ever
    sees what it becomes, ``view`` or ``clone`` + ``_unsafe_view``."""
    shape = infer_size(size, numel(a.shape))
    if list(shape) == list(a.shape):
        return a
    return prims.reshape(a, shape)


@register_decomposition(aten.expand.default)
def expand(a: torch.Tensor, size: Sequence, *, implicit: bool = False) -> torch.Tensor:
    """Broadcast to ``size``; -1 keeps the input's size in that dim."""
    offset = len(size) - a.dim()
    shape = [a.shape[i - offset] if s == -1 else s for i, s in enumerate(size)]
    return broadcast_to(a, shape)


@register_decomposition(aten.permute.default)
def permute(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    dims = [canonicalize_dim(a.dim(), d) for d in dims]
    if dims == list(range(a.dim())):
        return a
    return prims.permute(a, dims)


@register_decomposition(aten.transpose.int)
def transpose(a: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    if a.dim() < 2:
        return a
    dims = list(range(a.dim()))
    d0, d1 = canonicalize_dim(a.dim(), dim0), canonicalize_dim(a.dim(), dim1)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(a, dims)


@register_decomposition(aten.t.default)
def t(a: torch.Tensor) -> torch.Tensor:
    if a.dim() > 2:
        raise DecompositionError(f"t() expects a tensor with <= 2 dims, got {a.dim()}")
    return transpose(a, 0, 1)


@register_decomposition(aten.unsqueeze.default)
def unsqueeze(a: torch.Tensor, dim: int) -> torch.Tensor:
    dim = canonicalize_dim(a.dim() + 1, dim)
    shape = list(a.shape)
    shape.insert(dim, 1)
    return prims.broadcast_in_dim(a, shape, [d for d in range(a.dim() + 1) if d != dim])


@register_decomposition(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def squeeze(a: torch.Tensor, dim: int | Sequence[int] | None = None) -> torch.Tensor:
    """Drop the named dims (all dims when none are named) that have size 1."""
    if dim is not None and not isinstance(dim, int) and len(dim) == 0:
        return a  # squeeze(dims=[]) names no dim
    dims = canonicalize_dims(a.dim(), dim)
    shape = [s for i, s in enumerate(a.shape) if not (i in dims and s == 1)]
    if len(shape) == a.dim():
        return a
    return prims.reshape(a, shape)


@register_decomposition(aten.clone.default)
def clone(a: torch.Tensor, *, memory_format: torch.memory_format | None = None):
    """A new tensor, not a view: a graph output made by ``clone`` (or ``contiguous`` of a
    view) must not share the input's memory, or writing to it would change the input. A
    same-dtype ``convert_element_type`` is a fresh value that costs nothing inside a kernel."""
    return prims.convert_element_type(a, a.dtype)


@register_decomposition(aten.detach.default, aten.alias.default, aten.lift_fresh.default)
def alias(a: torch.Tensor) -> torch.Tensor:
    return a  # see [Note: functional views]


@register_decomposition(aten._to_copy.default)
def _to_copy(
    a: torch.Tensor,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    non_blocking: bool = False,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    """``x.to(dtype)``: a ``convert_element_type``. Moving devices has no prim: fallback."""
    if device is not None and torch.device(device) != a.device:
        return NotImplemented
    if layout not in (None, torch.strided):
        return NotImplemented
    return a if dtype is None else to_dtype(a, dtype)

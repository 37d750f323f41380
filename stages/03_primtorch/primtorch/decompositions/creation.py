"""Decompositions of factory ops (``zeros``, ``ones``, ``full``, ``empty``, their ``_like``
and ``new_`` forms, ``scalar_tensor``) into the one creation prim, ``full``.

Input: a factory's arguments: a size (or a tensor to copy metadata from), a fill value,
and the optional ``dtype``/``device``/``layout`` keywords.
Output: ``prims.full(shape, value, dtype=, device=)``.

Chapter: book/docs/primtorch.md ("Scalars and factories").

``empty`` promises nothing about its values, so a tensor of zeros is a correct ``empty``.
Only strided layouts have a prim; sparse or other layouts stay fallbacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Number

import torch

from primtorch.prims_common import full
from primtorch.registry import register_decomposition

aten = torch.ops.aten


def _fill_dtype(value: Number) -> torch.dtype:
    """The dtype ``torch.full(size, value)`` infers when none is given."""
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.get_default_dtype()


def _create(shape: Sequence, value: Number, dtype, layout, device, like=None):
    """``full`` with torch's defaults: a ``like`` tensor's dtype and device, else the
    default dtype and device."""
    if layout not in (None, torch.strided):
        return NotImplemented
    if dtype is None:
        dtype = like.dtype if like is not None else torch.get_default_dtype()
    if device is None:
        device = like.device if like is not None else torch.get_default_device()
    return full(shape, value, dtype, torch.device(device))


@register_decomposition(aten.zeros.default, aten.empty.memory_format)
def zeros(size: Sequence, *, dtype=None, layout=None, device=None, pin_memory=None,
          memory_format=None) -> torch.Tensor:
    return _create(size, 0, dtype, layout, device)


@register_decomposition(aten.ones.default)
def ones(size: Sequence, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _create(size, 1, dtype, layout, device)


@register_decomposition(aten.full.default)
def full_default(size: Sequence, fill_value: Number, *, dtype=None, layout=None, device=None,
                 pin_memory=None) -> torch.Tensor:
    return _create(size, fill_value, dtype or _fill_dtype(fill_value), layout, device)


@register_decomposition(aten.scalar_tensor.default)
def scalar_tensor(s: Number, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _create([], s, dtype, layout, device)


@register_decomposition(aten.zeros_like.default, aten.empty_like.default)
def zeros_like(a: torch.Tensor, *, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None) -> torch.Tensor:
    return _create(a.shape, 0, dtype, layout, device, like=a)


@register_decomposition(aten.ones_like.default)
def ones_like(a: torch.Tensor, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None) -> torch.Tensor:
    return _create(a.shape, 1, dtype, layout, device, like=a)


@register_decomposition(aten.full_like.default)
def full_like(a: torch.Tensor, fill_value: Number, *, dtype=None, layout=None, device=None,
              pin_memory=None, memory_format=None) -> torch.Tensor:
    return _create(a.shape, fill_value, dtype, layout, device, like=a)


@register_decomposition(aten.new_zeros.default, aten.new_empty.default)
def new_zeros(a: torch.Tensor, size: Sequence, *, dtype=None, layout=None, device=None,
              pin_memory=None) -> torch.Tensor:
    return _create(size, 0, dtype, layout, device, like=a)


@register_decomposition(aten.new_ones.default)
def new_ones(a: torch.Tensor, size: Sequence, *, dtype=None, layout=None, device=None,
             pin_memory=None) -> torch.Tensor:
    return _create(size, 1, dtype, layout, device, like=a)


@register_decomposition(aten.new_full.default)
def new_full(a: torch.Tensor, size: Sequence, fill_value: Number, *, dtype=None, layout=None,
             device=None, pin_memory=None) -> torch.Tensor:
    return _create(size, fill_value, dtype, layout, device, like=a)

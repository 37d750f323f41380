"""Decompositions of factory ops (``zeros``, ``ones``, ``full``, ``empty``, their ``_like``
and ``new_`` forms, ``scalar_tensor``) into the one creation prim, ``full``.

Input: a factory's arguments: a size (or a tensor to copy metadata from), a fill value,
and the optional ``dtype``/``device``/``layout`` keywords.
Output: ``prims.full(shape, value, dtype=, device=)``; ranges (``arange``, ``eye``) from
``prims.iota``.

Chapter: book/docs/primtorch.md ("Scalars and factories").

``empty`` promises nothing about its values, so a tensor of zeros is a correct ``empty``.
Only strided layouts have a prim; sparse or other layouts stay fallbacks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Number

import torch

from primtorch import prims
from primtorch.prims_common import full, to_dtype
from primtorch.registry import register_decomposition

aten = torch.ops.aten
iota = prims.iota


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


@register_decomposition(aten.empty_strided.default)
def empty_strided(size: Sequence, stride: Sequence, *, dtype=None, layout=None, device=None,
                  pin_memory=None) -> torch.Tensor:
    """Values are undefined and prims are row-major, so the strides are not kept."""
    return _create(size, 0, dtype, layout, device)


@register_decomposition(aten.new_empty_strided.default)
def new_empty_strided(a: torch.Tensor, size: Sequence, stride: Sequence, *, dtype=None,
                      layout=None, device=None, pin_memory=None) -> torch.Tensor:
    return _create(size, 0, dtype, layout, device, like=a)


# --8<-- [start:arange]
@register_decomposition(aten.arange.start_step)
def arange_start_step(start: Number, end: Number, step: Number = 1, *, dtype=None,
                      layout=None, device=None, pin_memory=None) -> torch.Tensor:
    """start, start + step, ... below end: an integer ``iota`` of the right length, scaled
    in float64 when any bound is a float (as eager computes in its accumulate type)."""
    if layout not in (None, torch.strided):
        return NotImplemented
    if dtype is None:
        floats = any(isinstance(v, float) for v in (start, end, step))
        dtype = torch.get_default_dtype() if floats else torch.int64
    device = torch.device(device) if device is not None else torch.get_default_device()
    length = _length(start, end, step)
    if not dtype.is_floating_point:
        # integer results: eager truncates start and step (and, for int64 only, also end
        # before it computes the length)
        start, step = int(start), int(step)
        if dtype == torch.int64:
            length = _length(start, end if _is_int(end) else int(end), step)
    if all(isinstance(v, int) for v in (start, step)):
        return iota(length, start=start, step=step, dtype=dtype, device=device)
    wide = torch.float64 if dtype in (torch.float64, torch.float32) else torch.float32
    i = iota(length, start=0, step=1, dtype=wide, device=device)
    out = prims.add(prims.mul(i, full([length], step, wide, device)),
                    full([length], start, wide, device))
    return to_dtype(out, dtype)
# --8<-- [end:arange]


# --8<-- [start:arange-length]
def _is_int(value: object) -> bool:
    return isinstance(value, (int, torch.SymInt))


def _length(start: Number, end: Number, step: Number):
    """How many of start, start + step, ... lie before end. In integer arithmetic when the
    bounds are integers, so that a symbolic ``end`` (``arange(x.shape[1])``) gives a
    symbolic length instead of being specialised (book/docs/dynamic-shapes.md)."""
    if _is_int(start) and _is_int(end) and isinstance(step, int) and step > 0:
        return torch.sym_max((end - start + step - 1) // step, 0)
    return max(math.ceil((end - start) / step), 0)
# --8<-- [end:arange-length]


@register_decomposition(aten.arange.start)
def arange_start(start: Number, end: Number, *, dtype=None, layout=None, device=None,
                 pin_memory=None) -> torch.Tensor:
    return arange_start_step(start, end, 1, dtype=dtype, layout=layout, device=device)


@register_decomposition(aten.arange.default)
def arange(end: Number, *, dtype=None, layout=None, device=None, pin_memory=None):
    return arange_start_step(0, end, 1, dtype=dtype, layout=layout, device=device)


@register_decomposition(aten.eye.default)
def eye(n: int, *, dtype=None, layout=None, device=None, pin_memory=None) -> torch.Tensor:
    return eye_m(n, n, dtype=dtype, layout=layout, device=device)


@register_decomposition(aten.eye.m)
def eye_m(n: int, m: int, *, dtype=None, layout=None, device=None, pin_memory=None):
    """1 where row == column: two iotas compared, then converted."""
    dtype = dtype or torch.get_default_dtype()
    device = torch.device(device) if device is not None else torch.get_default_device()
    row = prims.broadcast_in_dim(iota(n, start=0, step=1, dtype=torch.int64, device=device),
                                 [n, m], [0])
    col = prims.broadcast_in_dim(iota(m, start=0, step=1, dtype=torch.int64, device=device),
                                 [n, m], [1])
    return to_dtype(prims.eq(row, col), dtype)

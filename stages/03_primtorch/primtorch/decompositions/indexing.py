"""Decompositions of indexing ops: gather/scatter, index_select, embedding and its backward,
and advanced indexing with integer tensors (``x[idx]``).

Input: the aten op's arguments; index tensors are int64 (or int32) and may be negative
(counted from the end) where eager allows it.
Output: tensors built from the ``gather``/``scatter``/``scatter_add`` prims, whose index
has the rank of the data (a lower-rank index is first placed with ``broadcast_in_dim``).

Chapter: book/docs/primtorch.md ("Indexing").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from primtorch import prims
from primtorch.prims_common import (
    broadcast_shapes,
    broadcast_to,
    canonicalize_dim,
    computation_dtype,
    full,
    numel,
    scalar_like,
    to_dtype,
)
from primtorch.registry import register_decomposition

aten = torch.ops.aten


def _as_index(index: torch.Tensor) -> torch.Tensor:
    return to_dtype(index, torch.int64)


@register_decomposition(aten.gather.default)
def gather(a: torch.Tensor, dim: int, index: torch.Tensor, *, sparse_grad: bool = False):
    if a.dim() == 0 or index.dim() != a.dim():
        return NotImplemented  # 0-dim and rank-mismatched forms: keep whole
    return prims.gather(a, canonicalize_dim(a.dim(), dim), _as_index(index))


def _scatter(prim, a, dim, index, src):
    if a.dim() == 0 or index.dim() != a.dim():
        return NotImplemented
    dim = canonicalize_dim(a.dim(), dim)
    if isinstance(src, torch.Tensor):
        if tuple(src.shape) != tuple(index.shape):  # only index's extent of src is used
            src = prims.slice(src, [0] * src.dim(), list(index.shape), [1] * src.dim())
        src = to_dtype(src, a.dtype)
    else:
        src = full(index.shape, src, a.dtype, a.device)
    return prim(a, dim, _as_index(index), src)


@register_decomposition(aten.scatter.src, aten.scatter.value)
def scatter(a: torch.Tensor, dim: int, index: torch.Tensor, src) -> torch.Tensor:
    return _scatter(prims.scatter, a, dim, index, src)


@register_decomposition(aten.scatter_add.default)
def scatter_add(a: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor):
    return _scatter(prims.scatter_add, a, dim, index, src)


@register_decomposition(aten.index_select.default)
def index_select(a: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """a gathered along ``dim`` with the 1-D ``index`` repeated across the other dims."""
    if a.dim() == 0:
        return NotImplemented
    dim = canonicalize_dim(a.dim(), dim)
    index = prims.reshape(_as_index(index), [index.numel()])
    shape = list(a.shape)
    shape[dim] = index.shape[0]
    return prims.gather(a, dim, prims.broadcast_in_dim(index, shape, [dim]))


@register_decomposition(aten.embedding.default)
def embedding(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int = -1,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> torch.Tensor:
    """Rows of ``weight``: (num_weights, C) and indices (*) give (*, C)."""
    if weight.dim() != 2:
        return NotImplemented
    rows = index_select(weight, 0, indices)  # (numel(indices), C)
    return prims.reshape(rows, list(indices.shape) + [weight.shape[1]])


@register_decomposition(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad: torch.Tensor, indices: torch.Tensor, num_weights: int,
                             padding_idx: int, scale_grad_by_freq: bool) -> torch.Tensor:
    """Each row of ``grad`` is added into the weight row its index names (``scatter_add``;
    repeated indices accumulate); the padding row gets nothing. With
    ``scale_grad_by_freq`` each contribution is divided by how often its index occurs."""
    channels = grad.shape[-1]
    k = indices.numel()
    dtype = computation_dtype(grad.dtype)
    index = prims.reshape(_as_index(indices), [k])  # (K,)
    g = prims.reshape(to_dtype(grad, dtype), [k, channels])  # (K, C)
    if padding_idx >= 0:
        keep = prims.ne(index, scalar_like(index, padding_idx))
        g = prims.where(prims.broadcast_in_dim(keep, [k, channels], [0]), g, scalar_like(g, 0))
    if scale_grad_by_freq:
        counts = prims.scatter_add(full([num_weights], 0, dtype, grad.device), 0, index,
                                   full([k], 1, dtype, grad.device))
        g = prims.div(g, prims.broadcast_in_dim(prims.gather(counts, 0, index), [k, channels],
                                                [0]))
    index = prims.broadcast_in_dim(index, [k, channels], [0])
    out = prims.scatter_add(full([num_weights, channels], 0, dtype, grad.device), 0, index, g)
    return to_dtype(out, grad.dtype)


def _linear_index(indices: Sequence[torch.Tensor], sizes: Sequence, shape: Sequence):
    """The row-major position, within the indexed dims, that each index tuple names;
    negative indices count from the end of their dim."""
    linear = None
    for index, size in zip(indices, sizes):
        index = broadcast_to(_as_index(index), shape)
        index = prims.where(prims.lt(index, scalar_like(index, 0)),
                            prims.add(index, scalar_like(index, size)), index)
        linear = index if linear is None else prims.add(
            prims.mul(linear, scalar_like(linear, size)), index)
    return linear


def _on_device_of(index: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``index`` where ``a`` lives. Eager indexes a CUDA tensor with CPU indices (it moves
    them); a gather does not. BEiT's relative-position index is such a CPU tensor, made by
    an ``lru_cache``'d function, and its graph raised on the H200 where eager ran. No prim
    moves data between devices, so the move stays an aten op (a library call)."""
    if index.device == a.device or index.device.type != "cpu":
        return index  # (a CUDA index into a CPU tensor: the gather raises, as eager does)
    return torch.ops.aten._to_copy.default(index, device=a.device)


@register_decomposition(aten.index.Tensor)
def index(a: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """Advanced indexing with integer tensors: the indexed dims are moved to the front and
    flattened into one, the index tensors become one linear index into it, and a
    ``gather`` picks rows. The result's index dims go where eager puts them: in place of
    the indexed dims if those are adjacent, else in front. Bool masks have
    data-dependent shapes: they stay whole."""
    if any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices):
        return NotImplemented
    dims = [d for d, i in enumerate(indices) if i is not None]
    tensors = [_on_device_of(indices[d], a) for d in dims]
    rest = [d for d in range(a.dim()) if d not in dims]
    index_shape = broadcast_shapes(*[t.shape for t in tensors])
    linear = prims.reshape(_linear_index(tensors, [a.shape[d] for d in dims], index_shape),
                           [numel(index_shape)])
    moved = prims.permute(a, dims + rest) if dims + rest != list(range(a.dim())) else a
    rest_shape = [a.shape[d] for d in rest]
    rows = prims.reshape(moved, [numel([a.shape[d] for d in dims])] + rest_shape)
    gather_shape = [linear.shape[0]] + rest_shape
    out = prims.gather(rows, 0, prims.broadcast_in_dim(linear, gather_shape, [0]))
    out = prims.reshape(out, list(index_shape) + rest_shape)  # (*index_shape, *rest)
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    if adjacent and dims[0] > 0:  # put the index dims where the indexed dims were
        k, front = len(index_shape), dims[0]
        order = list(range(k, k + front)) + list(range(k)) + list(range(k + front, out.dim()))
        out = prims.permute(out, order)
    return out


# --8<-- [start:cudnn-grid-sampler]
# [Note: cuDNN's grid sampler]
# ``F.grid_sample`` is a composite: on a GPU, for 4-d bilinear sampling with zero padding and
# ``align_corners=True`` (RAFT's optical flow samples its correlation pyramid so), ATen sends
# it to ``cudnn_grid_sampler``, an op with no meta kernel, which cannot be traced: RAFT's
# whole forward ran eagerly on the H200, where on the CPU it compiled. cuDNN's op is the
# general one with those three settings fixed, so it becomes ``grid_sampler_2d`` (and its
# backward ``grid_sampler_2d_backward``), library calls like the other samplers, which have
# meta kernels. Only the kernel that computes the samples changes, not what they are.
@register_decomposition(aten.cudnn_grid_sampler.default)
def cudnn_grid_sampler(self: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    return aten.grid_sampler_2d.default(self, grid, 0, 0, True)  # bilinear, zeros, aligned


@register_decomposition(aten.cudnn_grid_sampler_backward.default)
def cudnn_grid_sampler_backward(self: torch.Tensor, grid: torch.Tensor,
                                grad_output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return aten.grid_sampler_2d_backward.default(grad_output, self, grid, 0, 0, True,
                                                 [True, True])
# --8<-- [end:cudnn-grid-sampler]

"""The structured prims: ranges, slicing, concatenation, index reductions, gather/scatter and
random numbers.

Input: nothing (importing this module, which ``primtorch.prims`` does, registers the ops).
Output: more ``torch.ops.minipt2.<name>.default`` ops, registered into ``primtorch.prims``
exactly like the elementwise ones (``prims.gather``, ``prims.rand``, ``PRIMS["cat"]``).

Chapter: book/docs/primtorch.md ("The prims" and "Random numbers").

These are the prims whose output element is not a function of the input element at the same
position: they move data (``slice``, ``cat``, ``gather``, ``scatter``, ``scatter_add``), make
it (``iota``, ``rand``), reduce to a position (``argmax``), or to two statistics at once
(``mean_m2``). Their meta functions are still
plain arithmetic over sizes, so they hold for sympy sizes as well as ints.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from primtorch.prims import _empty_meta, _register, reduction_shape


def _check(condition: bool, name: str, message: str) -> None:
    if not condition:
        raise ValueError(f"prims.{name}: {message}")


# ---------------------------------------------------------------------------------------
# iota: the one source of ranges (arange, positions, index tensors).


def _iota_eager(length, *, start, step, dtype, device):
    return (torch.arange(length, dtype=torch.int64, device=device) * step + start).to(dtype)


def _iota_meta(length, *, start, step, dtype, device):
    return _empty_meta([length], dtype)


_register(
    "iota", "(SymInt length, *, SymInt start, SymInt step, ScalarType dtype, Device device) "
    "-> Tensor", "creation", _iota_eager, _iota_meta,
    "[start, start + step, ..., start + (length - 1) * step], integers converted to dtype",
)

# ---------------------------------------------------------------------------------------
# slice and cat: the data movement behind indexing, split, pad, stack and their backwards.


def slice_shape(shape: Sequence, starts: Sequence, limits: Sequence, strides: Sequence) -> list:
    """Per dim, how many of start, start + stride, ... lie below limit."""
    return [(limit - start + stride - 1) // stride if limit > start else 0
            for start, limit, stride in zip(starts, limits, strides)]


def _slice_check(a, starts, limits, strides) -> None:
    _check(len(starts) == len(limits) == len(strides) == a.dim(), "slice",
           "start_indices, limit_indices and strides need one entry per dim")
    for size, start, limit, stride in zip(a.shape, starts, limits, strides):
        _check(0 <= start <= size and start <= limit <= size and stride > 0, "slice",
               f"bad slice [{start}:{limit}:{stride}] of a dim of size {size}")


def _slice_eager(a, start_indices, limit_indices, strides):
    _slice_check(a, start_indices, limit_indices, strides)
    index = tuple(slice(s, e, st) for s, e, st in zip(start_indices, limit_indices, strides))
    return a[index].clone(memory_format=torch.contiguous_format)


def _slice_meta(a, start_indices, limit_indices, strides):
    _slice_check(a, start_indices, limit_indices, strides)
    return _empty_meta(slice_shape(a.shape, start_indices, limit_indices, strides), a.dtype)


_register(
    "slice", "(Tensor a, SymInt[] start_indices, SymInt[] limit_indices, int[] strides) "
    "-> Tensor", "shape", _slice_eager, _slice_meta,
    "the elements a[start:limit:stride] in every dim (in range, strides positive)",
)


def _cat_check(tensors, dim) -> None:
    _check(len(tensors) > 0, "cat", "needs at least one tensor")
    first = tensors[0]
    for t in tensors[1:]:
        same = t.dim() == first.dim() and all(
            t.shape[d] == first.shape[d] for d in range(first.dim()) if d != dim)
        _check(same and t.dtype == first.dtype, "cat",
               "tensors must share dtype and every size but the cat dim (no promotion)")


def _cat_eager(tensors, dim):
    _cat_check(tensors, dim)
    return torch.cat(list(tensors), dim)


def _cat_meta(tensors, dim):
    _cat_check(tensors, dim)
    shape = list(tensors[0].shape)
    shape[dim] = sum((t.shape[dim] for t in tensors[1:]), shape[dim])
    return _empty_meta(shape, tensors[0].dtype)


_register(
    "cat", "(Tensor[] tensors, int dim) -> Tensor", "shape", _cat_eager, _cat_meta,
    "the tensors one after the other along dim (same dtype, same other sizes)",
)

# ---------------------------------------------------------------------------------------
# Index reductions: the position of the max/min along one dim.


def _define_arg_reduction(name: str, fn) -> None:
    def eager(a, dim):
        return fn(a.to(torch.uint8) if a.dtype == torch.bool else a, dim)

    def meta(a, dim):
        return _empty_meta(reduction_shape(a.shape, [dim]), torch.int64)

    _register(name, "(Tensor a, int dim) -> Tensor", "index_reduction", eager, meta,
              f"int64 position of the first {name[3:]}imum along dim (NaN counts as extreme)")


_define_arg_reduction("argmax", torch.argmax)
_define_arg_reduction("argmin", torch.argmin)

# ---------------------------------------------------------------------------------------
# mean_m2: the statistics behind var, std, layer norm and batch norm. One prim for both, so
# that a compiler can compute them in one pass over the data (Welford's algorithm).


def _mean_m2_eager(a, dims):
    _check(a.dtype.is_floating_point, "mean_m2", "a must be floating point")
    if not dims:
        return a.clone(), torch.zeros_like(a)
    mean = a.mean(list(dims), keepdim=True)
    m2 = ((a - mean) * (a - mean)).sum(list(dims))
    return a.mean(list(dims)), m2


def _mean_m2_meta(a, dims):
    _check(a.dtype.is_floating_point, "mean_m2", "a must be floating point")
    shape = reduction_shape(a.shape, dims)
    return _empty_meta(shape, a.dtype), _empty_meta(shape, a.dtype)


_register(
    "mean_m2", "(Tensor a, int[] dims) -> (Tensor, Tensor)", "statistics", _mean_m2_eager,
    _mean_m2_meta, "(mean, m2) over dims: the mean and the sum of squared deviations from it "
    "(m2 / count is the biased variance); floating point only",
)

# ---------------------------------------------------------------------------------------
# gather / scatter: index is an int64 tensor of the same rank as a.


def _index_check(name: str, a, dim, index, src=None) -> None:
    _check(index.dtype == torch.int64 and index.dim() == a.dim(), name,
           "index must be int64 with as many dims as a")
    if src is not None:
        _check(src.dtype == a.dtype and tuple(src.shape) == tuple(index.shape), name,
               "src must have index's shape and a's dtype")


def _gather_eager(a, dim, index):
    _index_check("gather", a, dim, index)
    return torch.gather(a, dim, index)


def _gather_meta(a, dim, index):
    _index_check("gather", a, dim, index)
    return _empty_meta(index.shape, a.dtype)


_register(
    "gather", "(Tensor a, int dim, Tensor index) -> Tensor", "indexing",
    _gather_eager, _gather_meta,
    "out[i][j] = a[index[i][j]][j] for dim 0 (and likewise for other dims); out has "
    "index's shape",
)


def _define_scatter(name: str, fn, doc: str) -> None:
    def eager(a, dim, index, src):
        _index_check(name, a, dim, index, src)
        return fn(a, dim, index, src)

    def meta(a, dim, index, src):
        _index_check(name, a, dim, index, src)
        return _empty_meta(a.shape, a.dtype)

    _register(name, "(Tensor a, int dim, Tensor index, Tensor src) -> Tensor", "indexing",
              eager, meta, doc)


_define_scatter("scatter", torch.scatter,
                "a copy of a with out[index[i][j]][j] = src[i][j] (dim 0); with repeated "
                "indices, which src element wins is unspecified")
_define_scatter("scatter_add", torch.scatter_add,
                "a copy of a with src[i][j] added to out[index[i][j]][j] (dim 0); repeated "
                "indices accumulate")

# ---------------------------------------------------------------------------------------
# Random numbers. See [Note: random prims] in primtorch/decompositions/random.py.


def _seed_eager(device):
    # Drawn from torch's default generator, so torch.manual_seed makes a run repeatable.
    return torch.randint(0, 2**62, (), dtype=torch.int64, device=device)


def _seed_meta(device):
    return _empty_meta([], torch.int64)


_register(
    "seed", "(Device device) -> Tensor", "random", _seed_eager, _seed_meta,
    "a fresh int64 0-dim seed from torch's default generator (the only stateful prim)",
)


def _rand_eager(shape, seed, offset, *, dtype, device):
    generator = torch.Generator(device=device)
    generator.manual_seed((int(seed) * 1_000_003 + offset) % 2**63)
    return torch.rand(list(shape), generator=generator, dtype=dtype, device=device)


def _rand_meta(shape, seed, offset, *, dtype, device):
    return _empty_meta(shape, dtype)


_register(
    "rand", "(SymInt[] shape, Tensor seed, int offset, *, ScalarType dtype, Device device) "
    "-> Tensor", "random", _rand_eager, _rand_meta,
    "uniform numbers in [0, 1): a pure function of (seed, offset, shape), so recomputing "
    "it gives the same tensor",
)

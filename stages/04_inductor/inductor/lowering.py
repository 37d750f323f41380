"""Lowerings: one registration per prim, from IR values to IR values.

Input: the arguments of one prims-graph node, with tensors replaced by IR values
(``ir.IRNode``: an unrealized ``Pointwise`` or a ``Buffer``) and everything else as is.
Output: a new IR value, or ``None`` meaning "no lowering for these arguments": ``graph.py``
then runs the op as a library call (``FallbackKernel``), so every graph still works.

Chapter: book/docs/inductor.md ("Lowering prims to loops").

Lowerings are pure: they build loop bodies (``inner_fn``) by composing the loaders of their
inputs, and never allocate memory; realizing values into buffers is ``graph.py``'s job.
Views (``broadcast_in_dim``, ``permute``, ``reshape``) are index remapping: the output's
loader calls the input's loader at a rewritten index, so no copy is ever made for them.
Reductions (``sum``, ``prod``, ``amax``, ``amin``) become ``Reduction`` values, whose body
reads the input at an index assembled from the kept dims and the reduced dims.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from primtorch import prims

from inductor import sizevars
from inductor.ir import (
    Buffer,
    Expr,
    FloorDiv,
    IRNode,
    Pointwise,
    Reduction,
    Scatter,
    contiguous_strides,
    flat_index,
    sympify_all,
    sympify_size,
)
from inductor.virtualized import V, ops

lowerings: dict[Any, Callable[..., IRNode | None]] = {}


def register_lowering(op: Any) -> Callable[[Callable], Callable]:
    """Decorator: ``fn`` lowers ``op`` (an OpOverload); one registry, a plain dict."""

    def decorator(fn: Callable) -> Callable:
        lowerings[op] = fn
        return fn

    return decorator


FLOATING_ONLY = {"div", "pow", "sin", "cos", "tan", "tanh", "exp", "expm1", "log", "log1p",
                 "sqrt", "rsqrt", "erf", "erfc", "reciprocal", "floor", "ceil", "trunc",
                 "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "exp2", "round", "isinf",
                 "asin", "acos", "atan", "atan2", "lgamma", "erfinv"}
INTEGER_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}
# On bools, torch's add is "or"; Triton's 1-bit add would be "xor". Not worth a special case.
NO_BOOL = {"abs", "neg", "sign", "add", "sub", "maximum", "minimum", "fmod", "bitwise_not"}


def printable(name: str) -> bool:
    """Whether both kernel printers spell op ``name``; prims added later without a
    spelling (say, ``lgamma``) are library calls until someone adds one. A printer spells
    an op by its table, or by a method of its kernel class (Triton's ``HELPER_OPS``: sin,
    cos and erf call helpers of the kernel's module)."""
    from inductor.codegen.cpp import CPP_OPS
    from inductor.codegen.triton import TRITON_OPS, TritonKernel

    return name in CPP_OPS and (name in TRITON_OPS or name in TritonKernel.HELPER_OPS)


def supports_dtype(name: str, dtype: torch.dtype) -> bool:
    """Whether the kernels' translation of op ``name`` is right for ``dtype`` inputs.

    Everything else goes to a library call; e.g. ``pow`` on integers, whose exact overflow
    behaviour is not worth reproducing in a first cut.
    """
    if not printable(name):
        return False
    if name in FLOATING_ONLY:
        return dtype.is_floating_point
    if name in INTEGER_ONLY:
        return not dtype.is_floating_point and (name not in NO_BOOL or dtype != torch.bool)
    if name in NO_BOOL:
        return dtype != torch.bool
    return True


def result_dtype(name: str, dtype: torch.dtype) -> torch.dtype:
    return torch.bool if name in prims.BOOL_RESULT else dtype


# --8<-- [start:lowering-add]
def make_pointwise(name: str) -> Callable[..., IRNode | None]:
    """The lowering of elementwise prim ``name``: a Pointwise applying ``ops.<name>``.

    Prims are strict (equal shapes and dtypes), so the output ranges are the first input's.
    """

    def lower(*inputs: IRNode) -> IRNode | None:
        dtype = inputs[0].get_dtype()
        if not supports_dtype(name, dtype):
            return None
        loaders = [x.make_loader() for x in inputs]

        def inner_fn(index: Sequence[Expr]) -> Any:
            return getattr(ops, name)(*[load(index) for load in loaders])

        return Pointwise(inputs[0].get_device(), result_dtype(name, dtype), inner_fn,
                         list(inputs[0].get_size()))

    return lower


for _name in [*prims.UNARY, *prims.BINARY]:
    register_lowering(prims.PRIMS[_name].op)(make_pointwise(_name))
# --8<-- [end:lowering-add]


class _ConstantProbe:
    """An ops handler under which a body returns ``("constant", value)`` iff it is one."""

    def constant(self, value: Any, dtype: torch.dtype) -> tuple[str, Any]:
        return ("constant", value)

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args: None


def constant_value(x: IRNode) -> Any:
    """The value of ``x`` if it is the same constant everywhere (``prims.full``), else None."""
    if not isinstance(x, Pointwise):
        return None
    with V.set_ops_handler(_ConstantProbe()):
        result = x.inner_fn([sympy.Integer(0)] * len(x.ranges))
    return result[1] if isinstance(result, tuple) and result[0] == "constant" else None


@register_lowering(prims.pow)
def pow_(a: IRNode, b: IRNode) -> IRNode | None:
    """``a ** 2`` is ``a * a`` and ``a ** -1`` is ``1 / a`` (both exactly what a correctly
    rounded pow gives); a general pow costs a libdevice call of ~100 instructions per element,
    enough to make an RMS norm compute-bound on a GPU."""
    exponent = constant_value(b)
    if a.get_dtype().is_floating_point and exponent in (1, 2, -1):
        if exponent == 1:
            return a
        return make_pointwise("mul" if exponent == 2 else "reciprocal")(
            *([a, a] if exponent == 2 else [a]))
    return make_pointwise("pow")(a, b)


@register_lowering(prims.where)
def where(pred: IRNode, a: IRNode, b: IRNode) -> IRNode:
    loaders = [pred.make_loader(), a.make_loader(), b.make_loader()]
    return Pointwise(a.get_device(), a.get_dtype(),
                     lambda index: ops.where(*[load(index) for load in loaders]),
                     list(a.get_size()))


@register_lowering(prims.convert_element_type)
def convert_element_type(a: IRNode, dtype: torch.dtype) -> IRNode:
    load = a.make_loader()
    return Pointwise(a.get_device(), dtype, lambda index: ops.to_dtype(load(index), dtype),
                     list(a.get_size()))


def size_value(size: Any, dtype: torch.dtype = torch.int64) -> Any:
    """A size as a value in a loop body: a constant, or (a symbolic size, dynamic shapes)
    an ``index_expr`` that the kernel computes from its size arguments."""
    size = sympy.sympify(size)
    return ops.constant(int(size), dtype) if size.is_Integer else ops.index_expr(size, dtype)


@register_lowering(prims.full)
def full(shape: Sequence[int], fill_value: Any, *, dtype: torch.dtype,
         device: torch.device) -> IRNode:
    if isinstance(fill_value, sympy.Expr) and fill_value.free_symbols:  # e.g. a mean's count
        return Pointwise(torch.device(device), dtype,
                         lambda index: size_value(fill_value, dtype), sympify_all(shape))
    value = fill_value
    if dtype == torch.bool:
        value = bool(fill_value)
    elif not dtype.is_floating_point:
        value = int(fill_value)
    else:
        value = float(fill_value)
    return Pointwise(torch.device(device), dtype, lambda index: ops.constant(value, dtype),
                     sympify_all(shape))


@register_lowering(prims.broadcast_in_dim)
def broadcast_in_dim(a: IRNode, shape: Sequence[int], broadcast_dimensions: Sequence[int]):
    """Input dim i is output dim ``broadcast_dimensions[i]``; its index is 0 where size is 1."""
    # BEGIN EXERCISE inductor-broadcast: lower broadcast_in_dim as an index remapping view
    load, in_size = a.make_loader(), a.get_size()

    def inner_fn(index: Sequence[Expr]) -> Any:
        return load([sympy.Integer(0) if size == 1 else index[d]
                     for size, d in zip(in_size, broadcast_dimensions)])

    return Pointwise(a.get_device(), a.get_dtype(), inner_fn, sympify_all(shape))
    # END EXERCISE inductor-broadcast


@register_lowering(prims.permute)
def permute(a: IRNode, dims: Sequence[int]) -> IRNode:
    """Output dim i is input dim ``dims[i]``, so input index ``dims[i]`` is output index i."""
    load, in_size = a.make_loader(), a.get_size()

    def inner_fn(index: Sequence[Expr]) -> Any:
        in_index = [sympy.Integer(0)] * len(dims)
        for i, d in enumerate(dims):
            in_index[d] = index[i]
        return load(in_index)

    return Pointwise(a.get_device(), a.get_dtype(), inner_fn, [in_size[d] for d in dims])


@register_lowering(prims.reshape)
def reshape(a: IRNode, shape: Sequence[int]) -> IRNode:
    """Row-major reinterpretation. A contiguous buffer is read at the flat index directly;
    anything else is unflattened with ``//`` and ``%`` back to the input's own index."""
    out_size, in_size = sympify_all(shape), a.get_size()
    if isinstance(a, Buffer) and a.layout.is_contiguous():
        name = a.name
        return Pointwise(a.get_device(), a.get_dtype(),
                         lambda index: ops.load(name, flat_index(index, out_size)), out_size)
    load = a.make_loader()

    def inner_fn(index: Sequence[Expr]) -> Any:
        return load(list(unflatten(tuple(index), tuple(out_size), tuple(in_size))))

    return Pointwise(a.get_device(), a.get_dtype(), inner_fn, out_size)


@functools.lru_cache(maxsize=1 << 16)
def unflatten(index: tuple, out_size: tuple, in_size: tuple) -> tuple[Expr, ...]:
    """The input index of a reshape from ``in_size`` to ``out_size`` read at ``index``: the
    flat position, split back with ``//`` and ``%``. Memoized: sympy's ``//`` costs up to
    milliseconds and bodies are run many times ([Note: memoized index arithmetic] in ir.py).

    Static sizes are first cut into groups of consecutive dims whose sizes multiply to the
    same number on both sides (``[8, 1024, 768] -> [8192, 768]``: ``[8, 1024] -> [8192]``
    and ``[768] -> [768]``), and each group is split on its own: a dim that stays a dim is
    its own index, and a merge needs no division at all. Dividing the whole flat position
    by each stride was the costliest part of lowering GPT-2's training step."""
    groups = _reshape_groups(out_size, in_size)
    if groups is None:  # symbolic or empty sizes: the whole flat position
        return _split(flat_index(index, out_size), in_size)
    in_index: list[Expr] = []
    for outs, ins in groups:
        flat = flat_index([index[d] for d in outs], [out_size[d] for d in outs])
        in_index += _split(flat, [in_size[d] for d in ins])
    return tuple(in_index)


def _split(flat: Expr, in_size: Sequence[Expr]) -> tuple[Expr, ...]:
    """``flat``, a row-major position in ``in_size``, as one index per dim."""
    in_index = []
    for d, (size, stride) in enumerate(zip(in_size, contiguous_strides(in_size))):
        i = FloorDiv(flat, stride) if stride != 1 else flat
        in_index.append(sympy.Integer(0) if size == 1 else (i if d == 0 else i % size))
    return tuple(in_index)


def _reshape_groups(out_size: tuple, in_size: tuple) -> list[tuple[list, list]] | None:
    """Consecutive dims of both sides with equal products, or None if a size is symbolic or
    zero. Size-1 dims join the group before them (leading ones, the first group)."""
    if not all(isinstance(n, (int, sympy.Integer)) and int(n) > 0
               for n in (*out_size, *in_size)):
        return None
    out, inp = [int(n) for n in out_size], [int(n) for n in in_size]
    groups: list[tuple[list, list]] = []
    o = i = 0
    while o < len(out) or i < len(inp):
        outs, ins, p_out, p_in = [], [], 1, 1
        if o < len(out):
            p_out, o = out[o], o + 1
            outs.append(o - 1)
        if i < len(inp):
            p_in, i = inp[i], i + 1
            ins.append(i - 1)
        while p_out != p_in:  # take dims from the side whose product is behind
            if p_out < p_in and o < len(out):
                p_out, o = p_out * out[o], o + 1
                outs.append(o - 1)
            elif p_in < p_out and i < len(inp):
                p_in, i = p_in * inp[i], i + 1
                ins.append(i - 1)
            else:
                return None
        while o < len(out) and out[o] == 1:  # size-1 dims join the group before them
            outs.append(o)
            o += 1
        while i < len(inp) and inp[i] == 1:
            ins.append(i)
            i += 1
        groups.append((outs, ins))
    return groups


# --8<-- [start:lowering-reduction]
def make_reduction(reduction_type: str) -> Callable[..., IRNode | None]:
    """The lowering of a reduction prim: output dims are the kept dims, in order."""

    def lower(a: IRNode, dims: Sequence[int]) -> IRNode | None:
        size, dtype = a.get_size(), a.get_dtype()
        if dtype == torch.bool or any(s == 0 for s in size):
            return None  # bool and empty reductions: a library call says it best
        dims = sorted({d % len(size) for d in dims}) if size else []
        if not dims:
            return a  # nothing to reduce
        result = reduce(a, dims, reduction_type, dtype)
        if all(s == 1 for s in result.reduction_ranges):  # one element per output: a copy
            zeros = [sympy.Integer(0)] * len(dims)
            return Pointwise(a.get_device(), dtype,
                             lambda index: result.inner_fn(index, zeros), result.ranges)
        return result

    return lower


def reduce(a: IRNode, dims: Sequence[int], reduction_type: str,
           dtype: torch.dtype) -> Reduction:
    """``a`` reduced over ``dims`` (sorted): the output dims are the kept dims, in order,
    and the body reads ``a`` at an index assembled from the kept and the reduced dims."""
    size, load = a.get_size(), a.make_loader()
    kept = [d for d in range(len(size)) if d not in dims]

    def inner_fn(index: Sequence[Expr], rindex: Sequence[Expr]) -> Any:
        full: list[Expr] = [sympy.Integer(0)] * len(size)
        for d, i in zip(kept, index):
            full[d] = i
        for d, r in zip(dims, rindex):
            full[d] = r
        return load(full)

    return Reduction(a.get_device(), dtype, inner_fn, [size[d] for d in kept],
                     [size[d] for d in dims], reduction_type)


for _prim, _type in (("sum", "sum"), ("prod", "prod"), ("amax", "max"), ("amin", "min")):
    register_lowering(prims.PRIMS[_prim].op)(make_reduction(_type))
# --8<-- [end:lowering-reduction]


# --8<-- [start:lowering-arg-reduction]
def make_arg_reduction(reduction_type: str) -> Callable[..., IRNode | None]:
    """argmax/argmin over one dim: a ``Reduction`` whose printers track the position of the
    best element as well as its value (first of ties; NaN counts as the extreme)."""

    def lower(a: IRNode, dim: int) -> IRNode | None:
        size, dtype = a.get_size(), a.get_dtype()
        if dtype == torch.bool or not size or any(s == 0 for s in size):
            return None  # bool, 0-dim and empty inputs: a library call
        dim = dim % len(size)
        result = reduce(a, [dim], reduction_type, torch.int64)
        if size[dim] == 1:  # one candidate: position 0
            return Pointwise(a.get_device(), torch.int64,
                             lambda index: ops.constant(0, torch.int64), result.ranges)
        return result

    return lower


for _prim in ("argmax", "argmin"):
    register_lowering(prims.PRIMS[_prim].op)(make_arg_reduction(_prim))
# --8<-- [end:lowering-arg-reduction]


# --8<-- [start:lowering-welford]
@register_lowering(prims.PRIMS["mean_m2"].op)
def mean_m2(a: IRNode, dims: Sequence[int]) -> tuple[IRNode, IRNode] | None:
    """(mean, m2) over ``dims`` as two reductions of one body.

    [Note: welford]
    Variance needs the mean before the squared deviations from it, so the two-pass formula
    reads every row twice; a looped reduction kernel (rows longer than fit in registers)
    then loops over the row once per pass. Welford's update carries (count, mean, m2) along
    one pass: ``n += 1; d = x - mean; mean += d / n; m2 += d * (x - mean)``, with none of
    the cancellation of the textbook one-pass ``sum(x*x) - sum(x)**2 / n``. Each lane of a
    tile (Triton) or of the split accumulators (C++) runs its own Welford, on its values
    minus the first one it saw: that shift keeps the numbers near 0, so a mean of 10000
    with a spread of 1 keeps its digits (the running mean would otherwise round at 10000's
    precision every step). After the loop the lanes combine as Chan et al. showed: counts
    add, the mean is the count-weighted mean of the lanes' means, and m2 is the lanes' m2
    plus ``n_lane * (mean_lane - mean)**2`` each. Where a row holds an infinity the shift
    makes inf - inf, and the mean is the plain sum / n, as ``mean`` gives (torch.var_mean,
    a Welford too, says NaN there). A persistent Triton kernel has the whole row in
    registers and sums around the row's first value (the reduction's body evaluated at
    r = 0, which the kernel asks for through ``ops.reduction(..., first=...)``): two passes,
    each one block-wide reduction (the mean, then the squared deviations from it); or, in a
    kernel that stores only 16-bit floats, one reduction of pairs (``welford_one_pass``).
    Both reductions name the same body; the printers compute it once per kernel.
    """
    size, dtype = a.get_size(), a.get_dtype()
    if not dtype.is_floating_point or any(s == 0 for s in size):
        return None
    dims = sorted({d % len(size) for d in dims}) if size else []
    if not dims or all(size[d] == 1 for d in dims):
        return None  # nothing to reduce: a library call
    return (reduce(a, dims, "welford_mean", dtype), reduce(a, dims, "welford_m2", dtype))
# --8<-- [end:lowering-welford]


# --8<-- [start:lowering-slice-cat]
@register_lowering(prims.iota)
def iota(length: int, *, start: int, step: int, dtype: torch.dtype,
         device: torch.device) -> IRNode | None:
    """``start + step * i``: the loop index itself, as a value (``ops.index_expr``)."""
    if dtype == torch.bool or not all(isinstance(v, int) for v in (start, step)):
        return None
    if not sizevars.current().known_below(abs(start) + abs(step) * length, 2**31):
        return None  # Triton indexes in int32; such ranges are rare: a library call
    return Pointwise(torch.device(device), dtype,
                     lambda index: ops.index_expr(start + step * index[0], dtype),
                     [sympify_size(length)])


@register_lowering(prims.slice)
def slice_(a: IRNode, start_indices: Sequence[int], limit_indices: Sequence[int],
           strides: Sequence[int]) -> IRNode:
    """Element i of a dim is input element ``start + stride * i``: a view, like permute."""
    load = a.make_loader()
    starts, steps = sympify_all(start_indices), sympify_all(strides)
    decide = sizevars.current().evaluate  # symbolic bounds: the trace's guards decided it
    shape = [FloorDiv(sympify_size(limit) - start + stride - 1, stride)
             if decide(sympy.Gt(sympify_size(limit), sympify_size(start))) else 0
             for start, limit, stride in zip(start_indices, limit_indices, strides)]

    def inner_fn(index: Sequence[Expr]) -> Any:
        return load([s + st * i for s, st, i in zip(starts, steps, index)])

    return Pointwise(a.get_device(), a.get_dtype(), inner_fn, sympify_all(shape))


@register_lowering(prims.cat)
def cat(tensors: Sequence[IRNode], dim: int) -> IRNode | None:
    """Element i along ``dim`` comes from the input whose range holds i, read at i minus
    the input's offset: nested ``where``s over the inputs, each read under ``ops.masked``
    so that no input is ever read outside its own range; see [Note: masked loads]."""
    inputs = [t for t in tensors if t.get_size()[dim] != 0]
    if not inputs:
        return None
    dtype, loaders = inputs[0].get_dtype(), [t.make_loader() for t in inputs]
    sizes = [t.get_size()[dim] for t in inputs]
    starts = [sum(sizes[:k], sympy.Integer(0)) for k in range(len(inputs))]
    other = False if dtype == torch.bool else 0

    def inner_fn(index: Sequence[Expr]) -> Any:
        i = ops.index_expr(index[dim], torch.int64)

        def piece(k: int) -> Any:  # input k, read at i - start_k
            shifted = list(index)
            shifted[dim] = index[dim] - starts[k]
            return loaders[k](shifted)

        def inside(k: int) -> Any:  # start_k <= i < start_k + size_k, as far as needed
            after = ops.ge(i, size_value(starts[k])) if k > 0 else None
            if k == len(inputs) - 1:
                return after
            before = ops.lt(i, size_value(starts[k] + sizes[k]))
            return before if after is None else ops.bitwise_and(after, before)

        value = piece(0) if len(inputs) == 1 else None
        for k in reversed(range(len(inputs)) if len(inputs) > 1 else []):
            mask = inside(k)
            read = ops.masked(mask, lambda k=k: piece(k), other)
            value = read if value is None else ops.where(mask, read, value)
        return value

    size = list(inputs[0].get_size())
    size[dim] = sum(sizes, sympy.Integer(0))
    return Pointwise(inputs[0].get_device(), dtype, inner_fn, size)
# --8<-- [end:lowering-slice-cat]


# --8<-- [start:lowering-gather]
@register_lowering(prims.gather)
def gather(a: IRNode, dim: int, index: IRNode) -> IRNode | None:
    """``out[i] = a[i with dim replaced by index[i]]``: an indirect load (embeddings and
    ``x[idx]`` come here too); see [Note: indirect indexing]."""
    if index.get_dtype() != torch.int64 or not a.get_size():
        return None
    size, load_a, load_index = a.get_size()[dim], a.make_loader(), index.make_loader()

    def inner_fn(idx: Sequence[Expr]) -> Any:
        position = ops.indirect_indexing(load_index(idx), size)
        return load_a([position if d == dim else i for d, i in enumerate(idx)])

    return Pointwise(a.get_device(), a.get_dtype(), inner_fn, list(index.get_size()))


ATOMIC_ADD_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)


def make_scatter(mode: str | None) -> Callable[..., IRNode | None]:
    """``scatter`` (mode None) and ``scatter_add`` ("atomic_add"): a ``Scatter`` over the
    index tensor, storing (adding) ``src[i]`` at i with dim replaced by ``index[i]``."""

    def lower(a: IRNode, dim: int, index: IRNode, src: IRNode) -> IRNode | None:
        if index.get_dtype() != torch.int64 or not a.get_size():
            return None
        if mode == "atomic_add" and a.get_dtype() not in ATOMIC_ADD_DTYPES:
            return None  # no atomic add for them in both printers: a library call
        if any(s == 0 for s in index.get_size()):
            return None  # nothing scattered: a library call copies
        size, load_index, load_src = a.get_size()[dim], index.make_loader(), src.make_loader()

        def inner_fn(idx: Sequence[Expr]) -> tuple[list[Expr], Any]:
            position = ops.indirect_indexing(load_index(idx), size)
            return [position if d == dim else i for d, i in enumerate(idx)], load_src(idx)

        return Scatter(a.get_device(), a.get_dtype(), a, inner_fn, list(index.get_size()),
                       mode)

    return lower


register_lowering(prims.scatter)(make_scatter(None))
register_lowering(prims.scatter_add)(make_scatter("atomic_add"))
# --8<-- [end:lowering-gather]


# --8<-- [start:lowering-rand]
@register_lowering(prims.rand)
def rand(shape: Sequence[int], seed: IRNode, offset: int, *, dtype: torch.dtype,
         device: torch.device) -> IRNode | None:
    """Uniform numbers computed in the kernel from (seed, element, stream) with Philox, so
    dropout's mask costs no memory traffic; see [Note: philox] in codegen/common.py."""
    if dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        return None
    if not isinstance(seed, IRNode) or seed.get_size() or not isinstance(offset, int):
        return None
    size, load_seed = sympify_all(shape), seed.make_loader()

    def inner_fn(index: Sequence[Expr]) -> Any:
        element = ops.index_expr(flat_index(index, size), torch.int64)
        return ops.rand(load_seed([]), element, offset, dtype)

    return Pointwise(torch.device(device), dtype, inner_fn, size)
# --8<-- [end:lowering-rand]

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

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from primtorch import prims

from inductor.ir import (
    Buffer,
    Expr,
    FloorDiv,
    IRNode,
    Pointwise,
    Reduction,
    contiguous_strides,
    flat_index,
    sympify_all,
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
                 "sqrt", "rsqrt", "erf", "reciprocal", "floor", "ceil", "trunc", "sinh", "cosh",
                 "asinh", "acosh", "atanh", "log2", "exp2", "round", "isinf", "asin", "acos",
                 "atan", "atan2", "lgamma", "erfinv"}
INTEGER_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}
# On bools, torch's add is "or"; Triton's 1-bit add would be "xor". Not worth a special case.
NO_BOOL = {"abs", "neg", "sign", "add", "sub", "maximum", "minimum", "fmod", "bitwise_not"}


def printable(name: str) -> bool:
    """Whether both kernel printers spell op ``name``; prims added later without a
    spelling (say, ``lgamma``) are library calls until someone adds one."""
    from inductor.codegen.cpp import CPP_OPS
    from inductor.codegen.triton import TRITON_OPS

    return name in CPP_OPS and name in TRITON_OPS


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


@register_lowering(prims.full)
def full(shape: Sequence[int], fill_value: Any, *, dtype: torch.dtype,
         device: torch.device) -> IRNode:
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
        flat = flat_index(index, out_size)
        in_index = []
        for d, (size, stride) in enumerate(zip(in_size, contiguous_strides(in_size))):
            i = FloorDiv(flat, stride)
            in_index.append(sympy.Integer(0) if size == 1 else (i if d == 0 else i % size))
        return load(in_index)

    return Pointwise(a.get_device(), a.get_dtype(), inner_fn, out_size)


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
        kept = [d for d in range(len(size)) if d not in dims]
        load = a.make_loader()

        def inner_fn(index: Sequence[Expr], rindex: Sequence[Expr]) -> Any:
            full: list[Expr] = [sympy.Integer(0)] * len(size)
            for d, i in zip(kept, index):
                full[d] = i
            for d, r in zip(dims, rindex):
                full[d] = r
            return load(full)

        ranges, reduction_ranges = [size[d] for d in kept], [size[d] for d in dims]
        if all(s == 1 for s in reduction_ranges):  # one element per output: a copy
            zeros = [sympy.Integer(0)] * len(dims)
            return Pointwise(a.get_device(), dtype, lambda index: inner_fn(index, zeros), ranges)
        return Reduction(a.get_device(), dtype, inner_fn, ranges, reduction_ranges,
                         reduction_type)

    return lower


for _prim, _type in (("sum", "sum"), ("prod", "prod"), ("amax", "max"), ("amin", "min")):
    register_lowering(prims.PRIMS[_prim].op)(make_reduction(_type))
# --8<-- [end:lowering-reduction]

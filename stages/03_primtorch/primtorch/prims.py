"""The primitives: a small, closed set of real torch ops that everything else lowers to.

Input: nothing (importing this module registers the ops).
Output: one ``torch.ops.minipt2.<name>.default`` OpOverload per prim, re-exported here as
module attributes (``prims.sin``, ``prims.add``, ...), and ``PRIMS``: name -> ``Prim`` record.

Chapter: book/docs/primtorch.md ("The prims").

Prims are strict, so that a backend needs no knowledge of PyTorch's conveniences:

- elementwise prims take tensors of *exactly* the same shape and dtype; broadcasting is an
  explicit ``broadcast_in_dim`` and type promotion an explicit ``convert_element_type``;
- scalars enter a graph through ``full`` (a tensor of one repeated value);
- reductions name their dimensions and remove them (``keepdim`` is a later reshape).

Every prim has three parts, all declared in one ``@prim`` block below:

1. a schema (``torch.library`` syntax), which makes it a real op that FX graphs can hold;
2. an eager implementation (the oracle: plain aten calls), registered for all devices;
3. a meta implementation, registered for the ``Meta`` device. It computes output shapes with
   ordinary Python arithmetic only (no ``torch.Size`` tricks), so the same shape functions
   work on ints and on sympy expressions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

NAMESPACE = "minipt2"
# Shape prims return fresh row-major tensors, matching their meta functions' strides.
_CONTIGUOUS = torch.contiguous_format
_lib = torch.library.Library(NAMESPACE, "DEF")


@dataclass(frozen=True)
class Prim:
    """One registered primitive."""

    name: str
    kind: str  # "unary" | "binary" | "ternary" | "reduction" | "shape" | "creation"
    op: torch._ops.OpOverload
    doc: str


PRIMS: dict[str, Prim] = {}


def _register(name: str, schema: str, kind: str, eager: Callable, meta: Callable, doc: str):
    _lib.define(f"{name}{schema}")
    _lib.impl(name, eager, "CompositeExplicitAutograd")
    _lib.impl(name, meta, "Meta")
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    PRIMS[name] = Prim(name, kind, op, doc)
    globals()[name] = op
    return op


# ---------------------------------------------------------------------------------------
# Shape functions: plain Python over ints or sympy expressions.
# ---------------------------------------------------------------------------------------


def contiguous_strides(shape: Sequence) -> tuple:
    """Row-major strides of ``shape``: the last dimension moves fastest."""
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running = running * size
    return tuple(reversed(strides))


def _check_same_shape_and_dtype(name: str, *tensors: torch.Tensor) -> None:
    first = tensors[0]
    for t in tensors[1:]:
        if tuple(t.shape) != tuple(first.shape) or t.dtype != first.dtype:
            raise ValueError(
                f"prims.{name}: operands must have equal shapes and dtypes (prims never "
                f"broadcast or promote), got {tuple(first.shape)}/{first.dtype} and "
                f"{tuple(t.shape)}/{t.dtype}"
            )


def _empty_meta(shape: Sequence, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(list(shape), dtype=dtype, device="meta")


def reduction_shape(shape: Sequence, dims: Sequence[int]) -> list:
    """The shape left after removing ``dims`` (already normalised to be non-negative)."""
    return [s for i, s in enumerate(shape) if i not in set(dims)]


def broadcast_in_dim_check(in_shape: Sequence, shape: Sequence, bdims: Sequence[int]) -> None:
    """``broadcast_in_dim``: input dim i becomes output dim ``bdims[i]``; sizes match or are 1."""
    if len(bdims) != len(in_shape):
        raise ValueError(f"broadcast_in_dim: {len(in_shape)} input dims, {len(bdims)} targets")
    if list(bdims) != sorted(set(bdims)):
        raise ValueError(f"broadcast_in_dim: broadcast_dimensions {bdims} must increase")
    for size, d in zip(in_shape, bdims):
        if size != 1 and size != shape[d]:
            raise ValueError(f"broadcast_in_dim: size {size} cannot become {shape[d]}")


# ---------------------------------------------------------------------------------------
# Elementwise prims. The eager implementation is the aten op of the same meaning.
# --8<-- [start:unary-prims]
UNARY = {
    "abs": (torch.abs, "absolute value"),
    "neg": (torch.neg, "negation"),
    "sin": (torch.sin, "sine"),
    "cos": (torch.cos, "cosine"),
    "tan": (torch.tan, "tangent"),
    "tanh": (torch.tanh, "hyperbolic tangent"),
    "exp": (torch.exp, "e ** a"),
    "expm1": (torch.expm1, "e ** a - 1, accurate near 0"),
    "log": (torch.log, "natural logarithm"),
    "log1p": (torch.log1p, "log(1 + a), accurate near 0"),
    "sqrt": (torch.sqrt, "square root"),
    "rsqrt": (torch.rsqrt, "1 / sqrt(a)"),
    "erf": (torch.erf, "the error function"),
    "erfc": (torch.erfc, "1 - erf(a), without the rounding of erf near 1"),
    "floor": (torch.floor, "round towards -inf"),
    "ceil": (torch.ceil, "round towards +inf"),
    "trunc": (torch.trunc, "round towards 0"),
    "reciprocal": (torch.reciprocal, "1 / a"),
    "sign": (torch.sign, "-1, 0 or 1"),
    "isnan": (torch.isnan, "a != a, as bool"),
    "logical_not": (torch.logical_not, "a == 0, as bool"),
    "asin": (torch.asin, "arcsine"),
    "acos": (torch.acos, "arccosine"),
    "atan": (torch.atan, "arctangent"),
    "sinh": (torch.sinh, "hyperbolic sine"),
    "cosh": (torch.cosh, "hyperbolic cosine"),
    "asinh": (torch.asinh, "inverse hyperbolic sine"),
    "acosh": (torch.acosh, "inverse hyperbolic cosine"),
    "atanh": (torch.atanh, "inverse hyperbolic tangent"),
    "log2": (torch.log2, "base-2 logarithm"),
    "exp2": (torch.exp2, "2 ** a"),
    "round": (torch.round, "round half to even"),
    "lgamma": (torch.lgamma, "log |gamma(a)|"),
    "erfinv": (torch.erfinv, "the inverse of erf"),
    "bitwise_not": (torch.bitwise_not, "~a (not for bool)"),
    "isinf": (torch.isinf, "a is +inf or -inf, as bool"),
}
# --8<-- [end:unary-prims]

BINARY = {
    "add": (torch.add, "a + b"),
    "sub": (torch.sub, "a - b"),
    "mul": (torch.mul, "a * b"),
    "div": (torch.div, "a / b (true division; floating point only)"),
    "maximum": (torch.maximum, "elementwise max, NaN-propagating"),
    "minimum": (torch.minimum, "elementwise min, NaN-propagating"),
    "pow": (torch.pow, "a ** b"),
    "fmod": (torch.fmod, "C-style remainder (sign of a)"),
    "eq": (torch.eq, "a == b, as bool"),
    "ne": (torch.ne, "a != b, as bool"),
    "lt": (torch.lt, "a < b, as bool"),
    "le": (torch.le, "a <= b, as bool"),
    "gt": (torch.gt, "a > b, as bool"),
    "ge": (torch.ge, "a >= b, as bool"),
    "bitwise_and": (torch.bitwise_and, "a & b (and for bool)"),
    "bitwise_or": (torch.bitwise_or, "a | b (or for bool)"),
    "bitwise_xor": (torch.bitwise_xor, "a ^ b (xor for bool)"),
    "atan2": (torch.atan2, "the angle of the point (b, a)"),
    "shift_left": (torch.bitwise_left_shift, "a << b (integers)"),
    "shift_right": (torch.bitwise_right_shift, "a >> b, arithmetic (integers)"),
}

BOOL_RESULT = {"isnan", "isinf", "logical_not", "eq", "ne", "lt", "le", "gt", "ge"}


def _define_unary(name: str, fn: Callable, doc: str) -> None:
    out_dtype = (lambda a: torch.bool) if name in BOOL_RESULT else (lambda a: a.dtype)

    def meta(a):
        return _empty_meta(a.shape, out_dtype(a))

    _register(name, "(Tensor a) -> Tensor", "unary", lambda a: fn(a), meta, doc)


def _define_binary(name: str, fn: Callable, doc: str) -> None:
    out_dtype = (lambda a: torch.bool) if name in BOOL_RESULT else (lambda a: a.dtype)

    def eager(a, b):
        _check_same_shape_and_dtype(name, a, b)
        return fn(a, b)

    def meta(a, b):
        _check_same_shape_and_dtype(name, a, b)
        return _empty_meta(a.shape, out_dtype(a))

    _register(name, "(Tensor a, Tensor b) -> Tensor", "binary", eager, meta, doc)


for _name, (_fn, _doc) in UNARY.items():
    _define_unary(_name, _fn, _doc)
for _name, (_fn, _doc) in BINARY.items():
    _define_binary(_name, _fn, _doc)


def _where_eager(pred, a, b):
    _check_same_shape_and_dtype("where", a, b)
    return torch.where(pred, a, b)


def _where_meta(pred, a, b):
    _check_same_shape_and_dtype("where", a, b)
    return _empty_meta(a.shape, a.dtype)


_register(
    "where", "(Tensor pred, Tensor a, Tensor b) -> Tensor", "ternary", _where_eager, _where_meta,
    "pred ? a : b, elementwise; pred is bool, a and b share shape and dtype",
)

# ---------------------------------------------------------------------------------------
# Type conversion, broadcasting and creation.
# --8<-- [start:shape-prims]


def _convert_eager(a, dtype):
    # always a new tensor, as the schema promises, and row-major like the meta below says:
    # ``clone``/``contiguous`` decompose to this prim, so ``x.t().contiguous()`` run by the
    # aot_eager backend must come out contiguous (``to`` alone would keep x.t()'s strides)
    return a.to(dtype, copy=True, memory_format=_CONTIGUOUS)


def _convert_meta(a, dtype):
    return _empty_meta(a.shape, dtype)


_register(
    "convert_element_type", "(Tensor a, ScalarType dtype) -> Tensor", "shape",
    _convert_eager, _convert_meta, "a cast to dtype, elementwise (the only type change)",
)


def _broadcast_eager(a, shape, broadcast_dimensions):
    broadcast_in_dim_check(a.shape, shape, broadcast_dimensions)
    view_shape = [1] * len(shape)
    for size, d in zip(a.shape, broadcast_dimensions):
        view_shape[d] = size
    return a.reshape(view_shape).expand(list(shape)).clone(memory_format=_CONTIGUOUS)


def _broadcast_meta(a, shape, broadcast_dimensions):
    broadcast_in_dim_check(a.shape, shape, broadcast_dimensions)
    return _empty_meta(shape, a.dtype)


_register(
    "broadcast_in_dim", "(Tensor a, SymInt[] shape, int[] broadcast_dimensions) -> Tensor",
    "shape", _broadcast_eager, _broadcast_meta,
    "a placed in a tensor of `shape`: input dim i is output dim broadcast_dimensions[i]; "
    "other output dims, and input dims of size 1, repeat",
)


def _full_eager(shape, fill_value, dtype, device):
    return torch.full(list(shape), fill_value, dtype=dtype, device=device)


def _full_meta(shape, fill_value, dtype, device):
    return _empty_meta(shape, dtype)


_register(
    "full", "(SymInt[] shape, Scalar fill_value, *, ScalarType dtype, Device device) -> Tensor",
    "creation", _full_eager, _full_meta, "a tensor of `shape` holding fill_value everywhere",
)


def _reshape_meta(a, shape):
    return _empty_meta(shape, a.dtype)


_register(
    "reshape", "(Tensor a, SymInt[] shape) -> Tensor", "shape",
    lambda a, shape: a.reshape(list(shape)).clone(memory_format=_CONTIGUOUS), _reshape_meta,
    "the elements of a, in row-major order, in a tensor of `shape` (same numel)",
)


def _permute_meta(a, dims):
    return _empty_meta([a.shape[d] for d in dims], a.dtype)


_register(
    "permute", "(Tensor a, int[] dims) -> Tensor", "shape",
    lambda a, dims: a.permute(list(dims)).clone(memory_format=_CONTIGUOUS), _permute_meta,
    "a with its dims reordered: output dim i is input dim dims[i]",
)
# --8<-- [end:shape-prims]

# ---------------------------------------------------------------------------------------
# Reductions: named dims are removed from the output.

REDUCTIONS = {
    "sum": (torch.sum, "sum over dims"),
    "prod": (lambda a, dims: _prod(a, dims), "product over dims"),
    "amax": (torch.amax, "maximum over dims, NaN-propagating"),
    "amin": (torch.amin, "minimum over dims, NaN-propagating"),
}


def _prod(a, dims):
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d)
    return a


def _define_reduction(name: str, fn: Callable, doc: str) -> None:
    def eager(a, dims):
        if not dims:
            return a.clone()
        # torch.sum/prod widen integers to int64; a prim keeps its input dtype (the
        # decomposition converts first when it wants the wider accumulator).
        return fn(a, list(dims)).to(a.dtype)

    def meta(a, dims):
        return _empty_meta(reduction_shape(a.shape, dims), a.dtype)

    _register(name, "(Tensor a, int[] dims) -> Tensor", "reduction", eager, meta, doc)


for _name, (_fn, _doc) in REDUCTIONS.items():
    _define_reduction(_name, _fn, _doc)


# The structured prims (indexing, concatenation, iota, argmax, random numbers) live in their
# own module; it registers them into this one, so ``prims.gather`` works like ``prims.add``.
from primtorch import prims_structured  # noqa: E402, F401


def is_prim(target: object) -> bool:
    """True for an OpOverload of our namespace (what a prims graph may call)."""
    return isinstance(target, torch._ops.OpOverload) and target.namespace == NAMESPACE


def all_prims() -> list[Prim]:
    return list(PRIMS.values())

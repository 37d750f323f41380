"""Loop-level IR: buffers with layouts, and define-by-run loop bodies.

Input: built by ``lowering.py`` (pure functions from IR values to IR values) and by
``graph.py`` (which decides what is realized into a buffer).
Output: a list of buffers for ``scheduler.py``: ``InputBuffer`` (graph inputs, with their real
strides), ``ComputedBuffer`` (a ``Pointwise`` body stored into memory) and ``ExternBuffer``
(written by a ``FallbackKernel``: a library call on real tensors). A ``ComputedBuffer`` holds a
``Pointwise`` or a ``Reduction`` body.

Chapter: book/docs/inductor.md ("Loop-level IR").

Sizes, strides and indices are sympy expressions from day one: integers for static shapes,
expressions over size symbols (``s0``, dynamo's, via ``dynamo.shapes``) for dynamic ones;
``FloorDiv`` is that module's, so expressions from every stage print alike.

[Note: realize]
A ``Pointwise`` value is a *recipe*, not memory: reading it at index i re-runs its body at i.
Chains of pointwise ops therefore compose into one body for free (that is vertical fusion at
the IR level). Memory is only allocated when a value is *realized* into a ``ComputedBuffer``:
graph outputs, inputs to library calls, and values with several users whose bodies are not
trivially cheap (recomputing them per user would repeat work). ``graph.py`` makes these
decisions; the scheduler may still fuse a realized buffer's loop with its consumers.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from dynamo.shapes import FloorDiv as FloorDiv  # (re-exported: lowerings use it)
from dynamo.shapes import sympify as sympify_size

from inductor.virtualized import (
    INDIRECT_PREFIX,
    PrintHandler,
    V,
    indirect_symbol,
    is_indirect,
    ops,
)

Expr = sympy.Expr
Loader = Callable[[Sequence[Expr]], Any]


def sympify_all(values: Sequence[Any]) -> list[Expr]:
    """Sizes as sympy: ints become Integers, symbolic sizes (``torch.SymInt``) their
    expressions over the size symbols ``s0, s1, ...`` (book/docs/dynamic-shapes.md)."""
    return [sympify_size(v) for v in values]


def contiguous_strides(size: Sequence[Expr]) -> list[Expr]:
    strides, running = [], sympy.Integer(1)
    for s in reversed(size):
        strides.append(running)
        running = running * s
    return list(reversed(strides))


def index_vars(size: Sequence[Expr], prefix: str = "i") -> list[Expr]:
    """One non-negative integer symbol per dim; a size-1 dim's index is the constant 0."""
    return list(_index_vars(tuple(size), prefix))


# [Note: memoized index arithmetic]
# A loop body is a Python function that rebuilds its index expressions every time it runs,
# and it runs many times: to find its reads and writes, to print the loop IR, once per
# kernel space the scheduler tries, and once more to print the kernel. The same few index
# expressions come back again and again (and the twelve layers of a GPT repeat one
# another's), while sympy needs up to milliseconds to build one (``expand``, or the
# ``cancel`` and ``gcd`` inside ``FloorDiv``). So the pure functions from index expressions
# to index expressions are cached by their arguments: sympy expressions are immutable and
# compare by structure, so a cached result is exactly the one a fresh call would build.
@functools.lru_cache(maxsize=1 << 12)
def _index_vars(size: tuple, prefix: str) -> tuple[Expr, ...]:
    return tuple(
        sympy.Integer(0) if s == 1 else sympy.Symbol(f"{prefix}{d}", integer=True,
                                                     nonnegative=True)
        for d, s in enumerate(size)
    )


@functools.lru_cache(maxsize=1 << 16)
def dot_index(index: tuple, strides: tuple) -> Expr:
    """``sum(i * stride)``, expanded: the offset of element ``index`` (memoized, see
    [Note: memoized index arithmetic])."""
    return sympy.expand(sum((i * s for i, s in zip(index, strides)), sympy.Integer(0)))


def flat_index(index: Sequence[Expr], size: Sequence[Expr]) -> Expr:
    """Row-major position of ``index`` in a tensor of ``size``."""
    return dot_index(tuple(index), _contiguous_strides(tuple(size)))


@functools.lru_cache(maxsize=1 << 12)
def _contiguous_strides(size: tuple) -> tuple[Expr, ...]:
    return tuple(contiguous_strides(size))


@dataclasses.dataclass
class Layout:
    """Where a buffer's elements live: element (i0, i1, ...) is at offset sum(i_k * stride_k)."""

    device: torch.device
    dtype: torch.dtype
    size: list[Expr]
    stride: list[Expr]

    def index(self, index: Sequence[Expr]) -> Expr:
        return dot_index(tuple(index), tuple(self.stride))

    def is_contiguous(self) -> bool:
        return all(sz == 1 or st == c for sz, st, c in
                   zip(self.size, self.stride, contiguous_strides(self.size)))


class FixedLayout(Layout):
    """Strides decided outside inductor (inputs, library-call outputs): never changed."""


class FlexibleLayout(Layout):
    """Strides inductor may choose; the first cut always chooses row-major."""

    def __init__(self, device: torch.device, dtype: torch.dtype, size: Sequence[Expr]) -> None:
        super().__init__(device, dtype, list(size), contiguous_strides(size))


class IRNode:
    """Anything a lowering can consume: it has a size, a dtype and a loader."""

    def get_size(self) -> list[Expr]:
        raise NotImplementedError

    def get_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def get_device(self) -> torch.device:
        raise NotImplementedError

    def make_loader(self) -> Loader:
        raise NotImplementedError


class Loops(IRNode):
    """What Pointwise and Reduction share: a loop body over ``ranges`` of one dtype."""

    device: torch.device
    dtype: torch.dtype
    ranges: list[Expr]

    def get_size(self) -> list[Expr]:
        return self.ranges

    def get_dtype(self) -> torch.dtype:
        return self.dtype

    def get_device(self) -> torch.device:
        return self.device


# --8<-- [start:pointwise-ir]
@dataclasses.dataclass
class Pointwise(Loops):
    """An elementwise loop body over ``ranges``, not yet in memory (see [Note: realize]).

    ``inner_fn(index)`` takes one sympy index per dim of ``ranges`` and returns the value of
    that element by calling ``ops.*``; what those calls produce depends on the ops handler.
    """

    device: torch.device
    dtype: torch.dtype
    inner_fn: Loader
    ranges: list[Expr]

    def make_loader(self) -> Loader:
        return self.inner_fn

    def store_output(self, name: str, layout: Layout, index: Sequence[Expr]) -> None:
        """The loop body of a realized buffer: compute element ``index``, store it."""
        ops.store(name, layout.index(index), self.inner_fn(index))
# --8<-- [end:pointwise-ir]


@dataclasses.dataclass
class Buffer(IRNode):
    """Named memory with a layout; loading element i reads ``name[layout.index(i)]``."""

    name: str
    layout: Layout

    def get_size(self) -> list[Expr]:
        return self.layout.size

    def get_dtype(self) -> torch.dtype:
        return self.layout.dtype

    def get_device(self) -> torch.device:
        return self.layout.device

    def make_loader(self) -> Loader:
        name, layout = self.name, self.layout
        return lambda index: ops.load(name, layout.index(index))

    def numel(self) -> Expr:
        return sympy.Mul(*self.layout.size)


# --8<-- [start:reduction-ir]
# argmax/argmin: the int64 position of the first max/min along the one reduced dim, NaN
# counting as the extreme; welford_mean/welford_m2: the mean and the sum of squared
# deviations from it, computed together in one pass ([Note: welford] in lowering.py).
REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin", "welford_mean",
                   "welford_m2")


@dataclasses.dataclass
class Reduction(Loops):
    """A reduction over ``reduction_ranges`` for every output element of ``ranges``.

    ``inner_fn(index, rindex)`` is the value of the element being reduced: ``index`` runs over
    the output, ``rindex`` over the reduced dims. It is always realized (a reduction read
    twice would be computed twice), and the scheduler may fuse pointwise loops *into* its
    kernel (the producers of the reduced values) and after it (its epilogue).
    """

    device: torch.device
    dtype: torch.dtype
    inner_fn: Callable[[Sequence[Expr], Sequence[Expr]], Any]
    ranges: list[Expr]
    reduction_ranges: list[Expr]
    reduction_type: str  # one of REDUCTION_TYPES

    def store_output(self, name: str, layout: Layout, index: Sequence[Expr],
                     rindex: Sequence[Expr]) -> None:
        """Reduce ``inner_fn(index, r)`` over all r, store it at ``index``. A welford may
        also evaluate the row's first value (``first``), to shift around; [Note: welford]."""
        first = None
        if self.reduction_type.startswith("welford"):
            first = lambda: self.inner_fn(index, [sympy.Integer(0)] * len(rindex))  # noqa: E731
        value = ops.reduction(self.dtype, self.reduction_type, self.inner_fn(index, rindex),
                              first=first)
        ops.store_reduction(name, layout.index(index), value)
# --8<-- [end:reduction-ir]


# --8<-- [start:scatter-ir]
@dataclasses.dataclass
class Scatter(Loops):
    """Values written into a copy of ``base`` at positions read from memory (``scatter``,
    ``scatter_add``); see [Note: indirect indexing].

    ``ranges`` are the index tensor's; ``inner_fn(index)`` returns ``(position, value)``:
    the output index, holding an indirect symbol, and the value stored there (``mode`` None)
    or added to it (``"atomic_add"``: other iterations may add to the same element).
    ``graph.py`` realizes it as two loops writing one buffer: a copy of ``base``, then a
    ``ScatterBuffer`` of the same name, so everything that reads the buffer runs after both.
    """

    device: torch.device
    dtype: torch.dtype
    base: IRNode
    inner_fn: Callable[[Sequence[Expr]], tuple[list[Expr], Any]]
    ranges: list[Expr]
    mode: str | None = None
# --8<-- [end:scatter-ir]


@dataclasses.dataclass
class SizeArg:
    """A graph input that is a size, not a tensor (a backward graph's saved ``s0``): the
    wrapper takes it as an int argument. See [Note: sizes as kernel arguments]."""

    name: str
    expr: Expr


class InputBuffer(Buffer):
    """A graph input, described by the real strides of its example tensor."""


@dataclasses.dataclass
class ComputedBuffer(Buffer):
    """A ``Pointwise`` or ``Reduction`` body realized into memory; the scheduler turns it
    into (part of) a kernel."""

    data: Pointwise | Reduction = None  # type: ignore[assignment]
    # the partials of a split reduction: whether the chunk index is their first dim (else
    # their last); None for any other buffer ([Note: the last program finishes])
    chunk_first: bool | None = dataclasses.field(default=None, kw_only=True, repr=False)

    def is_reduction(self) -> bool:
        return isinstance(self.data, Reduction)

    def reduction_ranges(self) -> list[Expr]:
        return list(self.data.reduction_ranges) if self.is_reduction() else []

    def run_body(self, index: Sequence[Expr], rindex: Sequence[Expr] = ()) -> None:
        """Run the body (under the current ops handler) with these index expressions."""
        if self.is_reduction():
            self.data.store_output(self.name, self.layout, index, rindex)
        else:
            self.data.store_output(self.name, self.layout, index)

    def describe(self) -> str:
        """The loop body printed through ``PrintHandler`` (the ``loop_ir`` artifact)."""
        handler, idx = PrintHandler(), index_vars(self.layout.size)
        ridx = index_vars(self.reduction_ranges(), "r")
        with V.set_ops_handler(handler):
            self.run_body(idx, ridx)
        sizes = ", ".join(map(str, self.layout.size))
        body = "\n".join("    " + line for line in handler.lines)
        kind, extra = type(self.data).__name__, ""
        if self.is_reduction():
            kind = f"Reduction {self.data.reduction_type}"
            extra = (f", reduction_ranges=[{', '.join(map(str, self.reduction_ranges()))}], "
                     f"rindex=[{', '.join(map(str, ridx))}]")
        return (f"{self.name}: ComputedBuffer({kind}, {self.layout.dtype}, [{sizes}], "
                f"index=[{', '.join(map(str, idx))}]{extra})\n{body}")


@dataclasses.dataclass
class ScatterBuffer(ComputedBuffer):
    """The second loop of a ``Scatter``: it writes into the buffer of the same ``name``,
    which the copy of ``data.base`` made just before. ``layout`` describes its loop (the
    index tensor's shape), ``target`` the memory it writes."""

    target: Layout = None  # type: ignore[assignment]

    def run_body(self, index: Sequence[Expr], rindex: Sequence[Expr] = ()) -> None:
        position, value = self.data.inner_fn(index)
        ops.store(self.name, self.target.index(position), value, self.data.mode)


class ExternBuffer(Buffer):
    """Memory written by a library call (``FallbackKernel``); its strides are fixed."""


@dataclasses.dataclass
class ReinterpretView(Buffer):
    """A strided view of ``base``'s memory handed to a library call as it is, with no copy
    (``name`` is the base's). See [Note: views into library calls]."""

    base: Buffer = None  # type: ignore[assignment]
    offset: Expr = sympy.Integer(0)


class _LoadOnly:
    """An ops handler under which a body that is exactly one load returns ``(name, index)``;
    anything else (an op, a cast, a constant) returns None."""

    def load(self, name: str, index: Expr) -> tuple[str, Expr]:
        return (name, index)

    def indirect_indexing(self, value: Any, size: Any) -> Expr:
        return indirect_symbol(f"{INDIRECT_PREFIX}0")  # not a view: rejected by as_view

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def view_index(index: Any, symbols: Sequence[Any], ranges: Sequence[Expr]) -> Expr:
    """``index`` without the ``//`` and ``%`` that cannot change its value while each loop
    symbol stays in its range: a reshape's index over symbolic sizes, ``32*s0*(v0 // s0) +
    32*(v0 % s0)``, is ``32*v0``, a stride (the scheduler's ``simplify_index``)."""
    from inductor.scheduler import simplify_index  # the scheduler imports this module

    return simplify_index(sympy.sympify(index), {s: r for s, r in zip(symbols, ranges)
                                                 if isinstance(s, sympy.Symbol)})


# --8<-- [start:as-view]
def as_view(value: IRNode, buffers: dict[str, Buffer]) -> ReinterpretView | None:
    """``value`` as a strided view of a buffer, if its body is one load at an index that is
    linear in the loop indices with non-negative integer coefficients (a permute, an
    expand, a contiguous reshape); else None.

    [Note: views into library calls]
    A library call needs a tensor, so an unrealized view (say the transposed weight of a
    Linear, ``permute(w)``) would be copied into a buffer first: a whole kernel that only
    moves memory. The calls that accept any strides (mm reads a transposed operand as is:
    ``ANY_STRIDES`` in graph.py) are handed ``base.as_strided(size, stride, offset)``
    instead ([Note: library calls that read any strides]).
    """
    # BEGIN EXERCISE inductor-view-extern: recognise a view so a library call reads it as is
    if not isinstance(value, Pointwise):
        return None
    symbols = index_vars(value.ranges, "v")
    with V.set_ops_handler(_LoadOnly()):
        loaded = value.inner_fn(symbols)
    if not isinstance(loaded, tuple) or loaded[0] not in buffers:
        return None
    base, index = buffers[loaded[0]], sympy.expand(view_index(loaded[1], symbols, value.ranges))
    if base.get_dtype() != value.dtype or is_indirect(index):
        return None
    strides = [sympy.sympify(index.coeff(s)) if isinstance(s, sympy.Symbol)
               else sympy.Integer(1) for s in symbols]
    for d in reversed(range(len(symbols) - 1)):  # a size-1 dim: [Note: strides of size-1 dims]
        if not isinstance(symbols[d], sympy.Symbol):
            strides[d] = strides[d + 1] * value.ranges[d + 1]
    zero = {s: sympy.Integer(0) for s in symbols if isinstance(s, sympy.Symbol)}
    offset = sympy.sympify(index.xreplace(zero))
    linear = sympy.expand(offset + sum(st * s for st, s in zip(strides, symbols)))
    if sympy.expand(linear - index) != 0 or not all(  # sizes may be symbols: 64 * s0
            st.is_integer and st.is_nonnegative for st in [*strides, offset]):
        return None
    layout = FixedLayout(value.device, value.dtype, list(value.ranges), strides)
    return ReinterpretView(base.name, layout, base, offset)
    # END EXERCISE inductor-view-extern
# --8<-- [end:as-view]


# [Note: strides of size-1 dims]
# A dim of size 1 is never stepped along, so any stride addresses the same memory, and
# ``as_view`` had given such dims stride 1. But a library call may check strides it never
# uses: CUDA's memory-efficient attention refuses a query whose stride along the sequence
# is not a multiple of its alignment, and CaiT's class-attention query is one token long,
# (B, heads, 1, 48) with stride 1 there ("query is not correctly aligned (strideM)": timm's
# CaiT training ran eagerly on the H200). A size-1 dim now gets the stride a row-major
# layout would give it, the next dim's stride times its size, as ``contiguous_strides``
# does for a buffer.


def elements_per(align_bytes: int, dtype: torch.dtype) -> int:
    """How many elements of ``dtype`` fill ``align_bytes`` (at least one)."""
    return max(1, align_bytes // torch.empty((), dtype=dtype).element_size())


def padded_rows_layout(value: IRNode, align_bytes: int = 16) -> FixedLayout:
    """Row-major strides for ``value`` with its rows (last dim) padded to a multiple of
    ``align_bytes``: every stride but the last is then a multiple of it.

    [Note: a library call's strides]
    A library call may care about more than the values of its arguments. Memory-efficient
    attention wants every stride of its mask but the last to be a multiple of 16 bytes. Eager
    meets that by padding: ATen pads a (5, 5) mask to (5, 8) and slices it back, and expands
    it over batch and heads with stride 0. In the traced graph those are ops like any other,
    and inductor computes the mask in one loop; a row-major buffer of it, strides (75, 25, 5,
    1) for (2, 3, 5, 5), is rejected by the kernel. So where a library call names such an
    argument (``ALIGNED_ARGS`` in graph.py), a computed one is stored with padded rows:
    strides (120, 40, 8, 1).
    """
    size = [sympy.sympify(s) for s in value.get_size()]
    per_row = elements_per(align_bytes, value.get_dtype())
    stride, strides = sympy.Integer(1), []
    for i, n in enumerate(reversed(size)):
        strides.append(stride)
        stride *= FloorDiv(n + per_row - 1, per_row) * per_row if i == 0 else n
    return FixedLayout(value.get_device(), value.get_dtype(), size, strides[::-1])


@dataclasses.dataclass
class FallbackKernel:
    """A call of ``op`` on real tensors, for ops with no lowering (or extern ops like mm).

    ``args``/``kwargs`` hold ``Buffer`` objects where the op takes tensors and plain Python
    values elsewhere; ``outputs`` are the buffers it returns (several for tuple results).
    """

    name: str
    op: Any
    args: list[Any]
    kwargs: dict[str, Any]
    outputs: list[ExternBuffer | None]
    multi_output: bool = False

    def input_names(self) -> list[str]:
        flat = list(self.args) + list(self.kwargs.values())
        names = []
        for a in flat:
            for item in (a if isinstance(a, (list, tuple)) else [a]):
                if isinstance(item, Buffer):
                    names.append(item.name)
        return names

    def buffers(self) -> list[ExternBuffer]:
        """The outputs that exist (an op may return None in some slots)."""
        return [o for o in self.outputs if o is not None]

    def describe(self) -> str:
        outs = ", ".join("None" if o is None else o.name for o in self.outputs)
        return f"{outs} = FallbackKernel({self.op}, reads=[{', '.join(self.input_names())}])"

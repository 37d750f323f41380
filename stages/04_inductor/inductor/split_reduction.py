"""Split reductions: few long rows become many short ones, then a second small reduction.

Input: a ``Reduction`` that ``graph.py`` is about to realize, and a ``realize`` callback.
Output: ``None`` (keep it as it is) or an equivalent ``Reduction`` that reads a realized
buffer of partial results.

Chapter: book/docs/inductor.md ("Split reductions").

[Note: split reductions]
A GPU reduction kernel runs one program per ``XBLOCK`` output rows. BatchNorm's statistics
reduce a [128, 64, 32, 32] activation over everything but the 64 channels: 64 rows of
131,072 elements, so 64 programs at most, on a GPU with 132 multiprocessors that each want
several programs to hide memory latency. The fix is arithmetic, not a new kernel shape: view
each row's ``rnumel`` elements as ``S`` chunks of ``rnumel / S``, reduce every chunk (a
reduction with ``numel * S`` rows: plenty of programs), then reduce the ``S`` partial
results of each row (a reduction with short rows, which its epilogue fuses into). Sum, prod,
max and min combine partial results with themselves; partials of low-precision data stay in
float32, so the result is rounded once, as eager's is. ``S`` divides ``rnumel`` exactly, so
no chunk needs a mask. Only CUDA graphs split: a CPU kernel parallelises over rows with
a couple of threads, and each thread already streams its rows at full speed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from inductor.ir import Expr, FloorDiv, Reduction, contiguous_strides, index_vars
from inductor.scheduler import axis_balance
from inductor.virtualized import ReadWritesHandler, V, ops

SPLIT_TYPES = ("sum", "prod", "max", "min", "welford_mean", "welford_m2")
TARGET_ROWS = 1024  # rows (programs' work items) the first kernel should have
MAX_ROWS = 256  # reductions with at least this many rows are left alone
# a column sum's program takes 32 outputs ([Note: outer reductions]): many more rows
OUTER_TARGET_ROWS, OUTER_MAX_ROWS = 32768, 16384
MIN_CHUNK = 1024  # elements each partial reduces, at least
OUTER_MIN_CHUNK = 256  # a column sum's partial: rows of 32 outputs each
SPLIT_DEVICES = {"cuda"}  # tests add "cpu" to run split kernels on both printers
# [Note: rows that need no split]: a row sum with this many rows or more, each of at most
# this many bytes, stays one kernel
ENOUGH_ROWS, SHORT_ROW_BYTES = 32, 512 * 1024


# --8<-- [start:choose-splits]
def choose_splits(numel: int, rnumel: int, outer: bool = False, row_bytes: int = 0) -> int:
    """How many chunks to cut each row into (1: don't split). ``outer``: a column sum,
    whose kernel takes 32 outputs a program ([Note: split column sums]); ``row_bytes``:
    what one row reads ([Note: rows that need no split]; 0: not known)."""
    target, limit = (OUTER_TARGET_ROWS, OUTER_MAX_ROWS) if outer else (TARGET_ROWS, MAX_ROWS)
    smallest = OUTER_MIN_CHUNK if outer else MIN_CHUNK
    if numel >= limit or rnumel < 2 * smallest:
        return 1
    if not outer and numel >= ENOUGH_ROWS and 0 < row_bytes <= SHORT_ROW_BYTES:
        return 1
    splits = 1
    while (numel * splits * 2 <= target and rnumel // (splits * 2) >= smallest
           and rnumel % (splits * 2) == 0):
        splits *= 2
    return splits
# --8<-- [end:choose-splits]


# --8<-- [start:no-split]
# [Note: rows that need no split]
# A split costs the host a second launch and the partials' allocation, and the GPU time it
# saves is small when the rows are short: BatchNorm's statistics in the benchmark convnet,
# 64 channels of 32,768 or 131,072 elements (128 to 512 KiB a row in float32), run as 64
# programs that each stream one row. The convnet's training step is bound by its host (the
# GPU is busy 1.2 of its 2.7 ms), and its ten BatchNorm reductions were twenty launches. On
# the H200, in one process (``benchmarks/scratch/split1.py``, do_bench, median of five
# rounds), leaving rows of up to 512 KiB unsplit took the step from 0.91x to 1.05x of eager
# in bfloat16 and from 0.88x to 1.07x in float32; leaving only the 128 KiB rows unsplit gave
# 0.99x and 0.89x. A reduction with fewer than 32 rows still splits (graph_breaks' mean is
# one row of 8 M elements, one program if whole), and so does a column sum, whose programs
# take 32 outputs each ([Note: split column sums]): leaving both of graph_breaks' kinds
# whole took its step to 0.17x of eager in bfloat16.
# --8<-- [end:no-split]


# --8<-- [start:split-column-sums]
# [Note: split column sums]
# A column sum (the weight and bias gradients of GPT-2's layer norms: [8192, 768] summed over
# its 8192 rows) has plenty of rows by the count above, but its kernel takes many outputs a
# program (16 at first), so 768 outputs were 48 programs for 132 multiprocessors, each
# walking 8192 rows: 0.09 ms for 25 MiB on the H100, a fifth of copy bandwidth. It splits
# like a row sum, into partials laid out [S, numel] (the split index outermost), so that a
# program's neighbouring outputs are still neighbours in memory and the partial kernel is a
# column sum too.
# How far to split, and the tile, were measured on the H200 (GPU time of the kernels per
# call). GPT-2's bias gradients, [8192, 3072] and [8192, 2304] in bfloat16, took 36.3 and
# 16.7 us with 16 outputs a program and a target of 8,192 rows (2 chunks each), where
# torch.compile's took 15.0 and 9.8 us. A sweep of 36 tiles and two targets put 32 x 32
# tiles with 8 chunks at 12.8 and 7.8 us. The layer norms' three column sums over [8192, 768]
# ran slower with that tile (192 programs: ``MIN_CHUNK`` allowed only 8 chunks), so a column
# sum's chunk may be as short as 256 rows and the target is 32,768 rows: in a later run,
# 12.7 and 7.8 us for the bias gradients, 15.4 us for a layer norm's three sums over
# [8192, 768] (torch.compile: 14.9, 9.9, 19.8 us) and 8.1 us for a [4096, 4096] sum, which
# was not split before (13.6 us; torch.compile 9.8).
# --8<-- [end:split-column-sums]
def walks_rows(value: Reduction) -> bool:
    """Whether most loads of ``value``'s body move along the output rows rather than the
    reduced elements (the printer's test, [Note: one tile, one direction])."""
    xs, rs = index_vars(value.ranges, "i"), index_vars(value.reduction_ranges, "r")
    handler = ReadWritesHandler()
    with V.set_ops_handler(handler):
        value.inner_fn(xs, rs)
    return axis_balance([index for _, index in handler.reads], xs, rs, moving_only=True) > 0


def _int(values: Sequence[Expr]) -> list[int] | None:
    try:
        return [int(v) for v in values]
    except TypeError:  # a symbolic size: leave the reduction alone
        return None


def split_reduction(value: Reduction, realize: Callable[[Any], Any]) -> Reduction | None:
    """``value`` as a reduction over realized partial results, or None to keep it."""
    if value.device.type not in SPLIT_DEVICES or value.reduction_type not in SPLIT_TYPES:
        return None
    ranges, rranges = _int(value.ranges), _int(value.reduction_ranges)
    if ranges is None or rranges is None:
        return None
    rnumel = math.prod(rranges)
    outer = walks_rows(value)
    splits = choose_splits(math.prod(ranges), rnumel, outer, rnumel * value.dtype.itemsize)
    if splits == 1:
        return None
    chunk = rnumel // splits
    rstrides = contiguous_strides(sympy.sympify(rranges))
    partial_dtype = torch.float32 if value.dtype in (torch.float16, torch.bfloat16) \
        else value.dtype
    # a partial's row: (output row, chunk); outermost chunk for a column sum, else innermost
    where = Split(outer, splits)

    def partial_fn(index: Sequence[Expr], rindex: Sequence[Expr]) -> Any:
        row, part = where.parts(index)
        flat = part * chunk + rindex[0]  # position along the original reduced dims
        original = [FloorDiv(flat, stride) % size if d else FloorDiv(flat, stride)
                    for d, (size, stride) in enumerate(zip(rranges, rstrides))]
        original = [sympy.Integer(0) if size == 1 else i for i, size in zip(original, rranges)]
        result = value.inner_fn(row, original)
        return ops.to_dtype(result, partial_dtype) if partial_dtype != value.dtype else result

    if value.reduction_type in ("welford_mean", "welford_m2"):
        return split_welford(value, realize, partial_fn, partial_dtype, where, chunk)
    partials = where.tag(realize(Reduction(value.device, partial_dtype, partial_fn,
                                           where.rows(value.ranges), [sympy.Integer(chunk)],
                                           value.reduction_type)))
    load = partials.make_loader()
    return Reduction(value.device, value.dtype,
                     lambda index, rindex: load(where.row(index, rindex[0])),
                     list(value.ranges), [sympy.Integer(splits)], value.reduction_type)


class Split:
    """Where the chunk index goes in a partial result's row: last (a row sum's partials,
    [numel, S]) or first (a column sum's, [S, numel]; [Note: split column sums])."""

    def __init__(self, first: bool, splits: int) -> None:
        self.first, self.splits = first, splits

    def rows(self, ranges: Sequence[Expr]) -> list[Expr]:
        return self.row(list(ranges), sympy.Integer(self.splits))

    def row(self, index: Sequence[Expr], part: Expr) -> list[Expr]:
        return [part, *index] if self.first else [*index, part]

    def parts(self, index: Sequence[Expr]) -> tuple[list[Expr], Expr]:
        return (list(index[1:]), index[0]) if self.first else (list(index[:-1]), index[-1])

    def tag(self, buffer: Any) -> Any:
        """``buffer`` (the partials), marked with where its chunk index goes, for [Note: the
        last program finishes] (codegen/last_program.py)."""
        buffer.chunk_first = self.first
        return buffer



def split_welford(value: Reduction, realize: Callable[[Any], Any], partial_fn: Callable,
                  dtype: torch.dtype, where: Split, chunk: int) -> Reduction:
    """Split ``mean_m2``'s reductions ([Note: welford] in lowering.py). Every chunk has
    ``chunk`` elements, so the partial results combine exactly: the mean is the mean of the
    chunks' means, and m2 is the sum over chunks of ``m2_c + chunk * (mean_c - mean)**2``.
    The mean's and m2's partial reductions share one body, so the scheduler puts them in
    one kernel and the printers compute them once."""
    rows, chunks = where.rows(value.ranges), [sympy.Integer(chunk)]
    splits = [sympy.Integer(where.splits)]
    means = where.tag(realize(Reduction(value.device, dtype, partial_fn, rows, chunks,
                                        "welford_mean")))
    load_mean = means.make_loader()

    def chunk_mean(index: Sequence[Expr], rindex: Sequence[Expr]) -> Any:
        return load_mean(where.row(index, rindex[0]))

    mean = Reduction(value.device, value.dtype, chunk_mean, list(value.ranges), splits,
                     "welford_mean")
    if value.reduction_type == "welford_mean":
        return mean
    load_m2 = where.tag(realize(Reduction(value.device, dtype, partial_fn, rows, chunks,
                                          "welford_m2"))).make_loader()
    load_total = realize(mean).make_loader()

    def spread(index: Sequence[Expr], rindex: Sequence[Expr]) -> Any:
        deviation = ops.sub(chunk_mean(index, rindex), load_total(index))
        weight = ops.constant(float(chunk), dtype)
        return ops.add(load_m2(where.row(index, rindex[0])),
                       ops.mul(weight, ops.mul(deviation, deviation)))

    return Reduction(value.device, value.dtype, spread, list(value.ranges), splits, "sum")


__all__ = ["choose_splits", "split_reduction"]

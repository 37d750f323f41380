"""The Triton reduction printer: a fused group holding reductions -> one 2-D tiled kernel.

Input: a ``scheduler.FusedGroup`` whose space has reduced dims (see [Note: reduction
fusion]), the removed buffers and the name -> buffer map.
Output: ``KernelSource`` with ``rnumel`` and launch parameters ``XBLOCK``, ``RBLOCK``,
``num_warps``; the wrapper launches one program per ``XBLOCK`` rows.

Chapter: book/docs/inductor.md ("Reductions in Triton").

[Note: triton reductions]
A program owns ``XBLOCK`` rows (``xindex``, shape ``[XBLOCK, 1]``) and walks their reduced
elements ``RBLOCK`` at a time (``rindex``, shape ``[1, RBLOCK]``); values of a node placed
"xr" are ``[XBLOCK, RBLOCK]`` tiles, values of "x" nodes and reduction results ``[XBLOCK,
1]`` columns, and broadcasting does the rest. When a whole row fits in one tile (``RBLOCK``
>= rnumel, up to ``PERSISTENT_MAX``) the kernel is *persistent*: the row is loaded once and
stays in registers while amax, exp, sum and div run one after the other, so softmax reads
its input once. Otherwise the kernel is *looped*: each reduction accumulates a full tile
over ``for roffset in range(0, rnumel, RBLOCK)`` and reduces the tile after the loop; a
node that needs that result runs in the next loop, re-reading the row (from L2 for rows
of a few tens of KiB). Accumulation is float32 for bf16/fp16/fp32 data; lanes past the end
of a row (``rmask``) contribute the reduction's identity. ``tl.max`` ignores NaN, torch's
amax propagates it, so max and min combine with ``tl.maximum(..., propagate_nan=ALL)``.

[Note: reloading a row]
A persistent kernel could keep its row in registers from the first load to the last
store. It does not, for two reasons measured on an H200. Loads of the row carry
``eviction_policy='evict_last'``: the row stays in L2 while the rest of the input streams
past, and softmax went from 97.6% to 101% of copy bandwidth with nothing else changed.
And after the kernel's last reduction the row is loaded again (``evict_first``, the last
use): only the reductions' results live across the block-wide reductions, fewer
registers hold values across them, and the second read comes from L2, not from memory.
That took float32 rmsnorm from 97% to 101% and bfloat16 rmsnorm from 92% to 96%.
torch.compile's reductions read twice in the same way. The reload costs nothing to print:
a load's text names its policy, so the common subexpression table sees a new expression
and emits a new load.

Layer norm's float32 row is kept too: its row is already live across the first reduction
(the second one sums squared deviations from the first one's mean), and reading it a
second time cost more than it saved. 8192-wide rows on an H200, four interleaved runs of
the generated kernel each: 95.0-95.4% of copy bandwidth reloading, 95.7-96.1% keeping it
(``keeps_rows``, set for kernels with a ``welford`` reduction).

A bfloat16 row is the other exception: it is loaded once and its 16-bit values stay in registers
(half the registers of the float32 ones), widened a second time after the last reduction by
a shift (``widen_bfloat16``): no second read from L2, and the compiler, which cannot see
that the shift equals the first conversion, keeps the narrow values rather than the wide
ones across the reductions. Layer norm of 8192 x 8192 bfloat16 went from 92.9% to 94.6% of
copy bandwidth (three interleaved runs of each kernel; 52 registers against 63). A float16
has no such shortcut: its conversion is arithmetic, and a second ``.to(tl.float32)`` is the
same text, which would keep the float32 values live (84.7%); it reloads.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import sympy
import torch

from inductor import autotune, sizevars
from inductor.codegen.common import CSEVariable, Loop, Scope, identity, kernel_name
from inductor.codegen.online_softmax import online_sums
from inductor.codegen.triton import (
    TRITON_TYPES,
    KernelSource,
    TritonKernel,
    _literal,
    imports,
    interpreting,
    needs_int64_indices,
)
from inductor.scheduler import FusedGroup, axis_balance, space_symbols
from inductor.virtualized import INDIRECT_PREFIX, V

# Rows up to this many elements are reduced by persistent kernels (registers hold a row).
PERSISTENT_MAX = int(os.environ.get("MINIPT2_TRITON_PERSISTENT_MAX", "8192"))
LOOP_RBLOCK = int(os.environ.get("MINIPT2_TRITON_LOOP_RBLOCK", "2048"))
TILE_ELEMENTS = 4096  # XBLOCK * RBLOCK a program aims for in a persistent kernel
OUTER_XBLOCK, OUTER_RBLOCK = 32, 32  # a column sum's tile ([Note: outer reductions])

ANY_ROW_INTERP = '''
def any_row(flags):
    """Interpreter only: the block's largest 0/1 flag, for an ``if`` (``tl.max`` is one of
    Triton's own jit helpers, which the interpreter may be unable to call; [Note: triton
    interpreter])."""
    import numpy

    data = flags.handle.data
    return int(numpy.max(data)) if data.size else 0
'''
HELPERS = '''

@triton.jit
def max_with_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def min_with_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def add(a, b):
    return a + b


@triton.jit
def add_pairs(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def multiply(a, b):
    return a * b


@triton.jit
def max_int(a, b):
    return tl.maximum(a, b)


@triton.jit
def min_int(a, b):
    return tl.minimum(a, b)


@triton.jit
def arg_better(v, i, best, best_i, IS_MAX: tl.constexpr):
    """Whether element (v, i) beats (best, best_i) in an argmax (argmin): greater (smaller),
    or NaN where best is not, or equal and earlier."""
    if IS_MAX:
        wins = v > best
    else:
        wins = v < best
    v_nan = v != v
    best_nan = best != best
    return wins | (v_nan & ~best_nan) | (((v == best) | (v_nan & best_nan)) & (i < best_i))
'''


def accumulator_type(dtype: torch.dtype) -> str:
    if dtype.is_floating_point:
        return "tl.float64" if dtype == torch.float64 else "tl.float32"
    return "tl.int64" if dtype.itemsize == 8 else "tl.int32"


def combine(reduction_type: str, dtype: torch.dtype, a: str, b: str) -> str:
    """``a`` and ``b`` combined elementwise (the loop's accumulator update)."""
    if reduction_type == "sum":
        return f"{a} + {b}"
    if reduction_type == "prod":
        return f"{a} * {b}"
    nan = ", propagate_nan=tl.PropagateNan.ALL" if dtype.is_floating_point else ""
    return f"tl.{'maximum' if reduction_type == 'max' else 'minimum'}({a}, {b}{nan})"


def reduce_tile(reduction_type: str, dtype: torch.dtype, tile: str) -> str:
    """A ``[XBLOCK, RBLOCK]`` tile reduced along the rows, kept 2-D as ``[XBLOCK, 1]``.

    Combined by ``tl.reduce`` with the module's own helpers: ``tl.sum`` and ``tl.max`` are
    ``@jit`` functions of Triton's, which the interpreter cannot run if Triton was imported
    before ``TRITON_INTERPRET`` was set ([Note: triton interpreter]).
    """
    helper = {"sum": "add", "prod": "multiply"}.get(reduction_type)
    if helper is None:
        helper = f"{reduction_type}_{'with_nan' if dtype.is_floating_point else 'int'}"
    return f"tl.reduce({tile}, 1, {helper})[:, None]"


def widen_bfloat16(raw: CSEVariable) -> str:
    """A loaded bfloat16 value as float32, spelled with integer ops: a bfloat16 is the top
    half of a float32, so its 16 bits shifted left are the float32. The same value as
    ``.to(tl.float32)``, but a text (and an instruction) the compiler cannot merge with that
    one, so the 16-bit ``raw`` is what stays in registers. [Note: reloading a row]"""
    return f"({raw}.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)"


class _RowMax(CSEVariable):
    """``load(m)`` in a sum computed online: the row's max ([Note: online softmax])."""


@dataclasses.dataclass(frozen=True)
class _Shifted(CSEVariable):
    """``h - m`` in such a sum."""

    value: CSEVariable
    row_max: CSEVariable


class _ShiftedExp(_Shifted):
    """``exp(h - m)`` in such a sum."""


class TritonReductionKernel(TritonKernel):
    """Prints a fused group with reductions as a persistent or looped 2-D kernel."""

    BLOCK_SHAPE = "[1, 1]"

    def mask_for(self, index: sympy.Expr) -> str:
        names = {s.name[0] for s in sympy.sympify(index).free_symbols}
        return " & ".join(m for m, n in (("xmask", "x"), ("rmask", "r")) if n in names)

    # --8<-- [start:triton-reload]
    reloading: bool | None = None  # persistent kernels: False, then True after the last reduction
    keeps_rows = False  # layer norm: a float32 row stays in registers ([Note: reloading a row])

    def generate_persistent_body(self) -> None:
        """Every node in program order, the whole row one tile; the row's loads after the
        kernel's last reduction read it again. See [Note: reloading a row]."""
        self.lines = self.r_lines("")
        last = [n for n in self.group.nodes if n.is_reduction()][-1:]
        self.reloading = False
        with V.set_ops_handler(self):
            for node in self.group.nodes:
                self.run_node(node)
                self.reloading = self.reloading or node in last
        self.hoist_shared_loads(len(self.r_lines("")))

    def hoist_shared_loads(self, start: int) -> None:
        """Move the loads of vectors that every row reads (a layer norm's weight and bias)
        up, after the row's own loads and before the first reduction, so that they are in
        flight while the reductions wait at their barriers. A float32 layer norm on an H100
        ran at 98.6-99.0% of copy bandwidth with them moved, 97.7-98.0% with them loaded
        after the statistics (four interleaved runs), and at 98.5-98.7% in two suite runs.
        Only float32 vectors: a bfloat16 layer norm, whose weight and bias would then live
        widened to float32 through the statistics next to its 16-bit row, fell from 94% to
        87%. And only loads of ``rmask`` alone (no row, no masked region, no indirect
        index) of buffers the kernel does not write."""
        lines = self.lines
        written = {self.in_args[name] for name in self.in_args if name in self.out_args}
        shared = [line for line in lines[start:]
                  if self.shared_loads.get(line.partition(" = ")[2], "") not in
                  ("", *written)]
        rest = [line for line in lines[start:] if line not in shared]
        first = next((i for i, line in enumerate(rest) if " = tl.load(" not in line),
                     len(rest))
        self.lines = lines[:start] + rest[:first] + shared + rest[first:]

    @property
    def shared_loads(self) -> dict[str, str]:
        """The text of each load that every row shares -> the pointer it reads."""
        return self.__dict__.setdefault("_shared_loads", {})

    def load_expr(self, arg: str, index: str, dtype: torch.dtype, mask: str) -> str:
        expr = super().load_expr(arg, index, dtype, mask)
        if self.reloading is None or "rmask" not in mask:  # looped, or one value a row
            return expr
        if dtype == torch.bfloat16 and "xmask" in mask:  # a bfloat16 row: keep its bits
            raw = self.new_var(f"tl.load({arg} + ({index}), {mask}, "
                               "eviction_policy='evict_last')", dtype)
            return widen_bfloat16(raw) if self.reloading else f"{raw}.to(tl.float32)"
        policy = "evict_last"  # rows, and vectors every row reads (a weight): keep in L2
        keep = self.keeps_rows and dtype == torch.float32  # the same text: the same value
        if self.reloading and "xmask" in mask and not keep:  # a row's last read; a new
            policy = "evict_first"  # text, a new load
        expr = expr.replace(f", {mask})", f", {mask}, eviction_policy='{policy}')", 1)
        if mask == "rmask" and dtype == torch.float32 and INDIRECT_PREFIX not in index:
            self.shared_loads[expr] = arg  # see hoist_shared_loads
        return expr
    # --8<-- [end:triton-reload]

    def reduce_expr(self, value: CSEVariable, reduction_type: str, dtype: torch.dtype) -> str:
        if reduction_type in ("argmax", "argmin"):
            return self.arg_of_tile(value, "rindex", reduction_type)
        neutral = _literal(identity(reduction_type, dtype))
        masked = self.new_var(f"tl.where(rmask, {value}, {neutral})", value.dtype)
        return reduce_tile(reduction_type, dtype, str(masked))

    def accumulate(self, loop: Loop, result: CSEVariable, value: CSEVariable,
                   reduction_type: str, dtype: torch.dtype) -> None:
        """A looped reduction: a tile of partial results set up before the loop over r
        (``loop.prefix``), updated in the loop body (``self.lines``) where ``rmask`` holds,
        reduced to ``result`` after the loop (``loop.suffix``)."""
        if reduction_type in ("argmax", "argmin"):
            return self.accumulate_arg(loop, result, value, reduction_type)
        # BEGIN EXERCISE inductor-triton-reduction: print a looped reduction in Triton
        acc = self.fresh(dtype, "acc")
        neutral = _literal(identity(reduction_type, dtype))
        loop.prefix.append(f"{acc} = tl.full([XBLOCK, RBLOCK], {neutral}, "
                           f"{accumulator_type(dtype)})")
        updated = combine(reduction_type, dtype, str(acc), str(value))
        self.lines.append(f"{acc} = tl.where(rmask, {updated}, {acc})")
        loop.suffix.append(f"{result} = {reduce_tile(reduction_type, dtype, str(acc))}")
        # END EXERCISE inductor-triton-reduction

    # --8<-- [start:triton-argmax]
    def arg_of_tile(self, values: CSEVariable, positions: str, reduction_type: str,
                    lanes: str = "rmask") -> str:
        """The first position of a row's max (min) in a ``[XBLOCK, RBLOCK]`` tile of
        ``values`` at ``positions``: the extreme (NaN if any), then the smallest position
        holding it; only where ``lanes`` holds (after a loop: every lane, each holding its
        best so far, or the identity at position ``rnumel``)."""
        kind = reduction_type[3:]  # "max" or "min"
        neutral = _literal(identity(kind, values.dtype))
        tile = values if not lanes else self.new_var(
            f"tl.where({lanes}, {values}, {neutral})", values.dtype)
        best = self.new_var(reduce_tile(kind, values.dtype, str(tile)), values.dtype)
        hit = self.new_var(f"{lanes + ' & ' if lanes else ''}(({tile} == {best}) | "
                           f"(({tile} != {tile}) & ({best} != {best})))", torch.bool)
        return f"tl.reduce(tl.where({hit}, {positions}, rnumel), 1, min_int)[:, None]" \
               ".to(tl.int64)"

    def accumulate_arg(self, loop: Loop, result: CSEVariable, value: CSEVariable,
                       reduction_type: str) -> None:
        """argmax/argmin in a loop: each lane keeps its best (value, position), updated by
        ``arg_better``; after the loop the lanes' bests are reduced as one tile."""
        acc, at = self.fresh(value.dtype, "acc"), self.fresh(torch.int64, "acc")
        neutral = _literal(identity(reduction_type[3:], value.dtype))
        loop.prefix += [f"{acc} = tl.full([XBLOCK, RBLOCK], {neutral}, "
                        f"{accumulator_type(value.dtype)})",
                        f"{at} = tl.full([XBLOCK, RBLOCK], rnumel, tl.int64)"]
        take = self.fresh(torch.bool)
        self.lines += [f"{take} = rmask & arg_better({value}, rindex, {acc}, {at}, "
                       f"{reduction_type == 'argmax'})",
                       f"{acc} = tl.where({take}, {value}, {acc})",
                       f"{at} = tl.where({take}, rindex, {at})"]
        outer, self.lines = self.lines, loop.suffix  # reduce the lanes after the loop
        self.scopes.append(Scope())
        try:
            self.lines.append(f"{result} = {self.arg_of_tile(acc, str(at), reduction_type, '')}")
        finally:
            self.scopes.pop()
            self.lines = outer
    # --8<-- [end:triton-argmax]

    # --8<-- [start:triton-welford]
    def welford_rows(self, mean: CSEVariable, m2: CSEVariable, value: CSEVariable,
                     first: Callable[[], CSEVariable] | None = None) -> None:
        """A whole row is in registers; its mean and m2 around a shift ``f`` near the
        mean: the row's first value (``first()`` prints the node's value at r = 0, one
        element per row; ``row_start``), else the plain mean (one more reduction). An
        infinite or NaN ``f`` is no shift (0): a row holding inf has an inf or NaN mean, as
        torch's. Two passes, each one block-wide reduction: the mean ``f + sum(x - f)/n``,
        whose sum adds small numbers even when the mean is large; then the squared
        deviations from the mean. A kernel that stores only 16-bit floats makes one pass
        ([Note: welford])."""
        dtype = value.dtype
        start = self.row_start(first)
        if start is None:
            start = self.new_var(reduce_tile("sum", dtype, f"tl.where(rmask, {value}, 0.0)")
                                 + " / rnumel", dtype)
        shift = self.new_var(f"tl.where(tl.abs({start}) < float('inf'), {start}, 0.0)", dtype)
        spread = self.new_var(f"tl.where(rmask, {value} - {shift}, 0.0)", dtype)
        if self.narrow_outputs():
            return self.welford_one_pass(mean, m2, value, shift, spread)
        self.lines.append(f"{mean} = {shift} + "
                          f"{reduce_tile('sum', dtype, str(spread))} / rnumel")
        deviation = self.new_var(f"tl.where(rmask, {value} - {mean}, 0.0)", dtype)
        self.lines.append(f"{m2} = {reduce_tile('sum', dtype, f'{deviation} * {deviation}')}")

    def welford_one_pass(self, mean: CSEVariable, m2: CSEVariable, value: CSEVariable,
                         shift: CSEVariable, spread: CSEVariable) -> None:
        """One reduction of pairs: the sums of ``d = x - f`` and of ``d*d``; the mean is
        ``f + S1/n``, m2 is ``S2 - S1**2/n``. That difference cancels as ``f`` lies farther
        from the mean in units of the spread: a float32 m2 keeps about 21 of its 24 bits
        for a first value 2 sigma out, plenty for a 16-bit result (8 or 11 bits) and not
        for a float32 one. A row that lost more than 10 bits (an outlier first value)
        computes m2 again from the deviations from the mean, in a branch the block takes
        only then: [Note: welford]."""
        dtype = value.dtype
        total, squares, again = self.fresh(dtype), self.fresh(dtype), self.fresh(dtype)
        # NaN fails the test too: a sum of squares past float32's range (inf - inf) gets
        # the second pass, as does a row holding NaN (whose result is NaN either way)
        lost = f"~({m2} >= {squares} * (1.0 / 1024))"
        self.lines += [
            f"{total}, {squares} = tl.reduce(({spread}, {spread} * {spread}), 1, add_pairs)",
            f"{total} = {total}[:, None]",
            f"{squares} = {squares}[:, None]",
            f"{mean} = {shift} + {total} / rnumel",
            f"{m2} = {squares} - {total} * {total} / rnumel",
            f"if {'any_row' if interpreting() else 'tl.max'}(({lost}).to(tl.int32)) > 0:",
            f"    {again} = tl.where(rmask, {value} - {mean}, 0.0)",
            f"    {m2} = {reduce_tile('sum', dtype, f'{again} * {again}')}"]

    def welford_accumulate(self, loop: Loop, mean: CSEVariable, m2: CSEVariable,
                           value: CSEVariable) -> None:
        """Welford's update per lane of the tile (count n, mean and m2 of the values minus
        the lane's first value k), one pass over the row; after the loop the lanes combine
        as Chan et al. do, around lane 0's k. See [Note: welford]."""
        n, k, avg, sq, total = (self.fresh(value.dtype, "acc") for _ in range(5))
        kind = accumulator_type(value.dtype)
        loop.prefix += [f"{acc} = tl.full([XBLOCK, RBLOCK], 0, {kind})"
                        for acc in (n, k, avg, sq, total)]
        rel, delta = self.fresh(value.dtype), self.fresh(value.dtype)
        self.lines += [f"{k} = tl.where(rmask & ({n} == 0), {value}, {k})",
                       f"{n} = tl.where(rmask, {n} + 1, {n})",
                       f"{rel} = {value} - {k}",
                       f"{delta} = {rel} - {avg}",
                       f"{avg} = tl.where(rmask, {avg} + {delta} / {n}, {avg})",
                       f"{sq} = tl.where(rmask, {sq} + {delta} * ({rel} - {avg}), {sq})",
                       f"{total} = tl.where(rmask, {total} + {value}, {total})"]
        first, lane_rel, mean_rel = (self.fresh(value.dtype) for _ in range(3))
        spread = f"{sq} + {n} * ({lane_rel} - {mean_rel}) * ({lane_rel} - {mean_rel})"
        loop.suffix += [
            f"{first} = {reduce_tile('sum', value.dtype, f'tl.where(rbase == 0, {k}, 0.0)')}",
            f"{lane_rel} = ({k} - {first}) + {avg}",  # each lane's mean, minus lane 0's k
            f"{mean_rel} = {reduce_tile('sum', value.dtype, f'{n} * {lane_rel}')} / rnumel",
            f"{m2} = {reduce_tile('sum', value.dtype, spread)}",
            self.welford_mean(mean, first, mean_rel, reduce_tile("sum", value.dtype,
                                                                 str(total)))]

    @staticmethod
    def welford_mean(mean: CSEVariable, first: CSEVariable, mean_rel: CSEVariable,
                     plain_sum: str) -> str:
        """shift + mean of the shifted values; where that is NaN (an infinity in the row,
        which the shift turns into inf - inf), the plain sum / n, as eager computes it."""
        shifted = f"({first} + {mean_rel})"
        return f"{mean} = tl.where({shifted} != {shifted}, {plain_sum} / rnumel, {shifted})"
    # --8<-- [end:triton-welford]

    # --8<-- [start:online-softmax]
    # [Note: online softmax] (online_softmax.py): a sum of exp(h - m) computed in the loop of
    # the max m. Its body runs with load(m) standing for the row's max, and sub, exp and sum
    # recognize the stand-ins; online_sums has checked that the body is exactly that shape.
    online_shift: str | None = None  # the max's buffer, while printing such a sum

    def online_sums(self) -> dict[str, str]:
        return online_sums(self.group, self.placements)

    def run_node(self, node: Any) -> None:
        outer = self.online_shift  # a node the sum reads is printed inside the sum's
        self.online_shift = self.online.get(node.name, outer)
        try:
            super().run_node(node)
        finally:
            self.online_shift = outer

    def load(self, name: str, index: sympy.Expr) -> CSEVariable:
        value = super().load(name, index)
        return _RowMax(value.name, value.dtype) if name == self.online_shift else value

    def store(self, name: str, index: sympy.Expr, value: CSEVariable,
              mode: str | None = None) -> None:
        if isinstance(value, (_RowMax, _Shifted)):  # a stand-in: for the sum's eyes only
            self.scopes[-1].stored[(name, self.index(index))] = value
            return
        super().store(name, index, value, mode)

    def sub(self, a: CSEVariable, b: CSEVariable) -> CSEVariable:
        if isinstance(b, _RowMax):
            return _Shifted(str(a), torch.float32, a, b)
        return self.__getattr__("sub")(a, b)

    def exp(self, x: CSEVariable) -> CSEVariable:
        if isinstance(x, _Shifted):
            return _ShiftedExp(x.name, x.dtype, x.value, x.row_max)
        return self.__getattr__("exp")(x)

    def reduction(self, dtype: torch.dtype, reduction_type: str, value: CSEVariable,
                  first: Callable[[], CSEVariable] | None = None) -> CSEVariable:
        if isinstance(value, _ShiftedExp):
            self.reads_unrounded(value)
            return self.online_sum(value.value, value.row_max)
        return super().reduction(dtype, reduction_type, value, first)

    def online_sum(self, h: CSEVariable, row_max: CSEVariable) -> CSEVariable:
        """sum(exp(h - row_max)) over the row, in the loop that computes ``row_max``: the
        row keeps the largest h so far and each lane its sum of exp(h - largest), rescaled
        when the largest grows (one exp a row per tile); after the loop the lanes' sums add
        up and are scaled by exp(largest - row_max), 1 in a softmax."""
        loop, ninf = self.loop, "float('-inf')"
        big, total = self.fresh(torch.float32, "acc"), self.fresh(torch.float32, "acc")
        grown, result = self.fresh(torch.float32), self.fresh(torch.float32)
        loop.prefix += [f"{big} = tl.full([XBLOCK, 1], {ninf}, tl.float32)",
                        f"{total} = tl.full([XBLOCK, RBLOCK], 0, tl.float32)"]
        tile_max = reduce_tile("max", torch.float32, f"tl.where(rmask, {h}, {ninf})")
        self.lines += [
            f"{grown} = max_with_nan({big}, {tile_max})",
            f"{total} = tl.where({grown} == {ninf}, 0.0, {total} * tl.exp({big} - {grown}) + "
            f"tl.where(rmask, tl.exp({h} - {grown}), 0.0))",
            f"{big} = {grown}"]
        loop.suffix.append(f"{result} = {reduce_tile('sum', torch.float32, str(total))} * "
                           f"tl.exp({big} - {row_max})")
        return result
    # --8<-- [end:online-softmax]

    full_rows = False  # RBLOCK == rnumel in every launch config: rmask is all true

    def r_lines(self, offset: str) -> list[str]:
        """A tile's reduced positions. Where no tile has a tail the masks are spelled as
        constants, which Triton's compiler folds away (the loads and stores lose their
        predicates, the ``tl.where`` s become the value); see ``full_masks``."""
        rmask = "tl.full([1, RBLOCK], True, tl.int1)" if self.full_rows else "rindex < rnumel"
        return [f"rindex = {offset}rbase", f"rmask = {rmask}",
                *self.index_lines(self.rplan, "rindex")]

    def loop_lines(self, loop: Loop) -> list[str]:
        bound = "rnumel"
        if not isinstance(self.rnumel, int) and interpreting():  # [Note: triton interpreter]
            bound = "scalar(rnumel)"  # a run-time int is a 1-element array there
        header = f"for roffset in range(0, {bound}, RBLOCK):"
        return [*loop.prefix, header, *("    " + line for line in self.r_lines("roffset + ")),
                *("    " + line for line in loop.body), *loop.suffix]


def launch_config(numel: int, rnumel: int, itemsize: int = 4, outer: bool = False,
                  welford: bool = False) -> tuple[bool, int, int, int]:
    """(persistent, XBLOCK, RBLOCK, num_warps) for ``numel`` rows of ``rnumel`` elements
    whose widest input element is ``itemsize`` bytes.

    A tile gets one warp per 2 KiB of input it reads, so every thread loads 64 bytes. Rows
    of 4096 or more elements, which read twice ([Note: reloading a row]), get one warp per
    KiB, up to 16. On an H200: bfloat16 rows of 4096 (rmsnorm) ran at 94% of copy
    bandwidth with 4 warps and 96% with 8 (86% with 16); float32 ones at 97-100% with 8
    and 101% with 16; rows of 8192 (layer norm, softmax) at 92-96% with 8 and 93-97% with
    16 in bfloat16, 98-101% with 16 in float32. Layer norm (``welford``) is the exception:
    8 warps, 91% in bfloat16 and 98% in float32 against 80-83% and 96-97% with 16. (Single
    runs; neighbouring configs differ by 1-2% from run to run.)
    """
    rblock = 1 << max(0, rnumel - 1).bit_length()
    if outer:  # [Note: outer reductions]
        return False, min(OUTER_XBLOCK, 1 << max(0, numel - 1).bit_length()), \
            min(rblock, OUTER_RBLOCK), 4
    persistent = rblock <= PERSISTENT_MAX
    if not persistent:
        rblock = LOOP_RBLOCK
    xblock = max(1, min(TILE_ELEMENTS // rblock, 1 << max(0, numel - 1).bit_length(), 64))
    num_warps = max(1, min(16, xblock * rblock * itemsize // 2048))
    if persistent and rblock >= 4096:  # long rows: one warp per KiB of row
        num_warps = min(16, rblock * itemsize // 1024, 8 if welford else 16)
    return persistent, xblock, rblock, num_warps


# --8<-- [start:outer-reductions]
def is_outer_reduction(group: FusedGroup, buffers: dict[str, Any], removed: set[str]) -> bool:
    """Whether most loads walk memory along the output rows (x) rather than along the
    reduced elements (r): a column sum like a bias gradient. See [Note: outer reductions].

    [Note: outer reductions]
    ``x.sum(0)`` of a row-major [4096, 4096] matrix reduces columns: the reduced elements of
    one output are 16 KiB apart, and neighbouring outputs are neighbours in memory. With the
    usual tile (few rows, long r) every load would touch one element per 32-byte sector.
    Instead such a kernel takes 32 outputs per program and a short, looped r (32 elements a
    step): a tile row of ``XBLOCK`` neighbours is one coalesced load (Triton orders a tile's
    threads along the axis its addresses are contiguous in), and ``numel / XBLOCK`` programs,
    after [Note: split column sums], keep the GPU busy.
    """
    xsyms, rsyms = space_symbols(group.space)
    return axis_balance([index for node in group.nodes
                         for name, index in node.accesses(group.space).reads
                         if name not in removed and name in buffers], xsyms, rsyms,
                        moving_only=True) > 0
# --8<-- [end:outer-reductions]


# --8<-- [start:triton-reduction]
def generate_triton_reduction(group: FusedGroup, removed: set[str], buffers: dict[str, Any],
                              number: int) -> KernelSource:
    """Print ``group`` as a reduction kernel; see [Note: triton reductions]."""
    kernel = TritonReductionKernel(group, removed, buffers)
    itemsize = max((buffers[name].layout.dtype.itemsize for name in group.read_names()
                    if name in buffers and name not in removed), default=4)
    hint = sizevars.current().hint  # [Note: sizes as kernel arguments]
    welford = any(n.buffer.data.reduction_type.startswith("welford") for n in group.nodes
                  if n.is_reduction())
    persistent, xblock, rblock, num_warps = launch_config(
        hint(kernel.numel), hint(kernel.rnumel), itemsize,
        is_outer_reduction(group, buffers, removed), welford)
    static_rows = isinstance(kernel.rnumel, int)
    if persistent and not static_rows:  # a symbolic row may outgrow any RBLOCK: loop
        persistent, rblock = False, min(rblock, LOOP_RBLOCK)
    if persistent:
        kernel.keeps_rows = welford
        kernel.full_rows = static_rows and kernel.rnumel == rblock
        kernel.generate_persistent_body()
    else:
        kernel.generate_looped_body()
    name = kernel_name("triton_per" if persistent else "triton_red", group, number)
    wide = ".to(tl.int64)" if needs_int64_indices(kernel) else ""
    size_vars = kernel.size_params()
    params = ", ".join([*kernel.in_args.values(), *kernel.out_args.values(), "xnumel",
                        "rnumel: tl.constexpr" if static_rows else "rnumel",
                        *map(str, size_vars), "XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"])
    lines = [
        *kernel.header("#"), *imports(kernel), HELPERS.strip("\n"), "", "",
        *([ANY_ROW_INTERP.strip("\n"), "", ""] if interpreting() else []),
        "@triton.jit",
        f"def {name}({params}):",
        f"    xoffset = tl.program_id(0){wide} * XBLOCK",
        "    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]",
        "    xmask = {}",
        "    rbase = tl.arange(0, RBLOCK)[None, :]",
        *("    " + line for line in kernel.index_lines()),
        *("    " + line for line in kernel.lines),
    ]
    launch = {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": num_warps}
    configs = autotune.reduction_configs(launch, persistent, hint(kernel.numel))
    even = even_rows(kernel.numel, [launch, *configs])
    lines[lines.index("    xmask = {}")] = "    xmask = " + (
        "tl.full([XBLOCK, 1], True, tl.int1)" if even else "xindex < xnumel")
    return KernelSource(name, "\n".join(lines) + "\n", kernel.call_args(), kernel.numel,
                        launch, kernel.rnumel, size_vars=size_vars, configs=configs)
# --8<-- [end:triton-reduction]


def even_rows(numel: Any, configs: list[dict[str, int]]) -> bool:
    """Whether ``numel`` rows (static) fill the programs of every config, so that ``xmask``
    is all true. (The default mode's tuning, ``autotune.default_reduction_configs``, never
    takes more rows per program than the heuristic.)"""
    numel = sympy.sympify(numel)
    return numel.is_Integer and all(int(numel) % c["XBLOCK"] == 0 for c in configs)


__all__ = ["TRITON_TYPES", "generate_triton_reduction", "launch_config"]

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
"""

from __future__ import annotations

import os
from typing import Any

import sympy
import torch

from inductor.codegen.common import CSEVariable, Loop, identity, kernel_name
from inductor.codegen.triton import (
    TRITON_TYPES,
    KernelSource,
    TritonKernel,
    _literal,
    imports,
    needs_int64_indices,
)
from inductor.scheduler import FusedGroup

# Rows up to this many elements are reduced by persistent kernels (registers hold a row).
PERSISTENT_MAX = int(os.environ.get("MINIPT2_TRITON_PERSISTENT_MAX", "8192"))
LOOP_RBLOCK = int(os.environ.get("MINIPT2_TRITON_LOOP_RBLOCK", "2048"))
TILE_ELEMENTS = 4096  # XBLOCK * RBLOCK a program aims for in a persistent kernel

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
def multiply(a, b):
    return a * b


@triton.jit
def max_int(a, b):
    return tl.maximum(a, b)


@triton.jit
def min_int(a, b):
    return tl.minimum(a, b)
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


class TritonReductionKernel(TritonKernel):
    """Prints a fused group with reductions as a persistent or looped 2-D kernel."""

    BLOCK_SHAPE = "[1, 1]"

    def mask_for(self, index: sympy.Expr) -> str:
        names = {s.name[0] for s in sympy.sympify(index).free_symbols}
        return " & ".join(m for m, n in (("xmask", "x"), ("rmask", "r")) if n in names)

    def reduce_expr(self, value: CSEVariable, reduction_type: str, dtype: torch.dtype) -> str:
        neutral = _literal(identity(reduction_type, dtype))
        masked = self.new_var(f"tl.where(rmask, {value}, {neutral})", value.dtype)
        return reduce_tile(reduction_type, dtype, str(masked))

    def accumulate(self, loop: Loop, result: CSEVariable, value: CSEVariable,
                   reduction_type: str, dtype: torch.dtype) -> None:
        """A looped reduction: a tile of partial results set up before the loop over r
        (``loop.prefix``), updated in the loop body (``self.lines``) where ``rmask`` holds,
        reduced to ``result`` after the loop (``loop.suffix``)."""
        # BEGIN EXERCISE inductor-triton-reduction: print a looped reduction in Triton
        acc = self.fresh(dtype, "acc")
        neutral = _literal(identity(reduction_type, dtype))
        loop.prefix.append(f"{acc} = tl.full([XBLOCK, RBLOCK], {neutral}, "
                           f"{accumulator_type(dtype)})")
        updated = combine(reduction_type, dtype, str(acc), str(value))
        self.lines.append(f"{acc} = tl.where(rmask, {updated}, {acc})")
        loop.suffix.append(f"{result} = {reduce_tile(reduction_type, dtype, str(acc))}")
        # END EXERCISE inductor-triton-reduction

    def r_lines(self, offset: str) -> list[str]:
        return [f"rindex = {offset}rbase", "rmask = rindex < rnumel",
                *self.index_lines(self.rplan, "rindex")]

    def loop_lines(self, loop: Loop) -> list[str]:
        header = "for roffset in range(0, rnumel, RBLOCK):"
        return [*loop.prefix, header, *("    " + line for line in self.r_lines("roffset + ")),
                *("    " + line for line in loop.body), *loop.suffix]


def launch_config(numel: int, rnumel: int) -> tuple[bool, int, int, int]:
    """(persistent, XBLOCK, RBLOCK, num_warps) for ``numel`` rows of ``rnumel`` elements."""
    rblock = 1 << max(0, rnumel - 1).bit_length()
    persistent = rblock <= PERSISTENT_MAX
    if not persistent:
        rblock = LOOP_RBLOCK
    xblock = max(1, min(TILE_ELEMENTS // rblock, 1 << max(0, numel - 1).bit_length(), 64))
    num_warps = max(1, min(16, xblock * rblock // 512))
    return persistent, xblock, rblock, num_warps


# --8<-- [start:triton-reduction]
def generate_triton_reduction(group: FusedGroup, removed: set[str], buffers: dict[str, Any],
                              number: int) -> KernelSource:
    """Print ``group`` as a reduction kernel; see [Note: triton reductions]."""
    kernel = TritonReductionKernel(group, removed, buffers)
    persistent, xblock, rblock, num_warps = launch_config(kernel.numel, kernel.rnumel)
    if persistent:
        kernel.lines = kernel.r_lines("")  # the whole row is one tile
        kernel.generate_body()
    else:
        kernel.generate_looped_body()
    name = kernel_name("triton_per" if persistent else "triton_red", group, number)
    wide = ".to(tl.int64)" if needs_int64_indices(kernel) else ""
    params = ", ".join([*kernel.in_args.values(), *kernel.out_args.values(), "xnumel",
                        "rnumel: tl.constexpr", "XBLOCK: tl.constexpr",
                        "RBLOCK: tl.constexpr"])
    lines = [
        *kernel.header("#"), *imports(), HELPERS.strip("\n"), "", "",
        "@triton.jit",
        f"def {name}({params}):",
        f"    xoffset = tl.program_id(0){wide} * XBLOCK",
        "    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]",
        "    xmask = xindex < xnumel",
        "    rbase = tl.arange(0, RBLOCK)[None, :]",
        *("    " + line for line in kernel.index_lines()),
        *("    " + line for line in kernel.lines),
    ]
    launch = {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": num_warps}
    return KernelSource(name, "\n".join(lines) + "\n", kernel.call_args(), kernel.numel,
                        launch, kernel.rnumel)
# --8<-- [end:triton-reduction]


__all__ = ["TRITON_TYPES", "generate_triton_reduction", "launch_config"]

"""The matrix multiply as a Triton kernel of our own, with the kernel after it as epilogue.

Input: a ``mm_template.TemplateGroup``: one ``mm`` the lowering made a library call, and the
pointwise nodes that read its product, or none. Output: a ``KernelSource`` over 2-D tiles
of the product, launched like a tiled pointwise kernel (``YBLOCK`` rows by ``XBLOCK``
columns a program, ``program_id(1)`` over row tiles) with two more constexprs, ``KBLOCK``
and ``GROUP_M``. ``inductor/mm_template.py`` decides which matrix multiplies get one.
Chapter: book/docs/performance.md ("Matrix multiplies of our own").

# --8<-- [start:note]
# [Note: the matmul template]
# Each program computes one YBLOCK x XBLOCK tile of C = A @ B: it walks K in steps of
# KBLOCK, loads a YBLOCK x KBLOCK slab of A and a KBLOCK x XBLOCK slab of B, and adds their
# product (``tl.dot``, the tensor cores for 16-bit inputs) into a float32 accumulator. A
# and B are read through their own strides and offsets, which are numbers in the source:
# ``x @ w.t()``, ``a.t() @ b`` and a slice all take the same kernel, no copy. Rows and
# columns past the edge read row or column 0 instead (``tl.where``), so the loop needs no
# mask along M and N; the stores are masked. Along K the loads are masked only when K is
# not a multiple of every candidate's KBLOCK.
#
# The tiles are visited in groups of GROUP_M rows of tiles, column by column within a
# group, instead of row by row: consecutive programs then share slabs of B as well as of
# A, and more of what they read is still in L2 (the "grouped ordering" of Triton's matmul
# tutorial).
#
# After the loop the accumulator is rounded to the product's dtype, as the library's
# result would be, and the epilogue runs on it: the nodes of the pointwise kernel that
# read the product, printed by the tiled printer with y0 the product's row and x0 its
# column. Their loads of the product return the accumulator instead of reading memory, so
# a Linear's bias add and GELU cost no pass over the product, and when nothing else reads
# the product it is never stored. Float32 inputs are multiplied in full float32
# (``input_precision="ieee"``) unless ``torch.backends.cuda.matmul.allow_tf32`` says
# otherwise, as eager's library call does. Under the Triton interpreter ``tl.dot`` of
# bfloat16 operands returns garbage (checked on Triton 3.6: errors of 1e10 on a 37 x 29 by
# 29 x 45 product), so there the operands are widened to float32 first.
# --8<-- [end:note]
"""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch

from inductor.codegen.common import CSEVariable, IndexPlan, kernel_name
from inductor.codegen.triton import (
    KernelSource,
    TritonTiledKernel,
    ensure_interpreter_if_no_gpu,
    imports,
    interpreting,
)
from inductor.ir import FloorDiv, ReinterpretView, index_vars

Y0 = sympy.Symbol("y0", integer=True, nonnegative=True)
X0 = sympy.Symbol("x0", integer=True, nonnegative=True)
LOW_PRECISION = (torch.bfloat16, torch.float16)


def operand(arg: Any) -> tuple[str, int, int, int]:
    """(buffer name, offset, stride between rows, stride between columns) of an ``mm``
    argument: a buffer, or a view of one (``name`` is the base's)."""
    offset = int(arg.offset) if isinstance(arg, ReinterpretView) else 0
    rows, cols = (int(s) for s in arg.layout.stride)
    return arg.name, offset, rows, cols


def row_major(ranges: list[Any]) -> sympy.Expr:
    """The flat row-major position of element (i0, i1, ...) of a loop over ``ranges``."""
    index, stride = sympy.Integer(0), 1
    for sym, size in zip(reversed(index_vars(ranges, "i")), reversed(ranges)):
        index += sym * stride
        stride *= int(size)
    return sympy.expand(index)


def tile_plan(ranges: list[Any]) -> IndexPlan:
    """The epilogue's loop variables in the tile's: the last dim is the product's column
    x0, the others together its row y0 (``[B, T, N]`` over a ``[B*T, N]`` product)."""
    # BEGIN EXERCISE inductor-tile-plan: map an epilogue's loop variables onto the tile
    symbols = index_vars(ranges, "i")
    replacements: dict[sympy.Symbol, sympy.Expr] = {}
    if isinstance(symbols[-1], sympy.Symbol):
        replacements[symbols[-1]] = X0
    inner = 1
    for j in reversed(range(len(ranges) - 1)):
        if isinstance(symbols[j], sympy.Symbol):
            expr = Y0 if inner == 1 else FloorDiv(Y0, inner)
            replacements[symbols[j]] = sympy.Mod(expr, int(ranges[j])) if j > 0 else expr
        inner *= int(ranges[j])
    rows = math.prod(int(n) for n in ranges[:-1])
    return IndexPlan([rows, int(ranges[-1])], [Y0, X0], replacements)
    # END EXERCISE inductor-tile-plan


class EpilogueKernel(TritonTiledKernel):
    """The tiled printer, where loads of the product read the accumulator."""

    def __init__(self, group: Any, removed: set[str], buffers: dict[str, Any],
                 product: str, value: CSEVariable) -> None:
        super().__init__(group, removed, buffers)
        self.product, self.value = product, value
        self.plan = tile_plan(list(group.space[0]))

    def load(self, name: str, index: Any) -> CSEVariable:
        # mm_template.epilogue_fits checked that every such load is at the tile's element
        return self.value if name == self.product else super().load(name, index)


def wrapped(index: str, extent: str, block: str, contiguous: bool) -> str:
    """Rows (columns) past the edge read row (column) ``index % extent`` instead: no mask
    in the loop. Where the operand is contiguous along this side, Triton is told the
    indices are runs of ``block`` (they are, but for the wrap at a multiple of 16), so
    it loads them as vectors; without that, a transposed operand was read an element at
    a time (15 times slower, measured on the H200)."""
    if not contiguous:
        return f"{index} % {extent}"
    return f"tl.max_contiguous(tl.multiple_of({index} % {extent}, {block}), {block})"


def start(offset: int) -> str:
    return f"{offset} + " if offset else ""


def dot_precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s keyword for float32 inputs: what eager's library call would do."""
    if dtype in LOW_PRECISION:
        return ""
    return ", input_precision=" + ('"tf32"' if torch.backends.cuda.matmul.allow_tf32
                                   else '"ieee"')


# --8<-- [start:template]
def generate_mm_template(group: Any, removed: set[str], buffers: dict[str, Any],
                         number: int) -> KernelSource:
    """Print ``group`` (a ``TemplateGroup``) as one kernel: the tile's product, then the
    epilogue; see [Note: the matmul template]."""
    ensure_interpreter_if_no_gpu()
    mm, configs = group.mm, group.configs
    a, b = mm.args
    (product,) = mm.outputs
    (m, k), n = (int(s) for s in a.layout.size), int(b.layout.size[1])
    dtype = product.get_dtype()
    value = CSEVariable("product", dtype)
    kernel = EpilogueKernel(group, removed, buffers, product.name, value)
    (a_name, a_offset, sam, sak), (b_name, b_offset, sbk, sbn) = operand(a), operand(b)
    in_a = kernel.in_args.setdefault(a_name, f"in_ptr{len(kernel.in_args)}")
    in_b = kernel.in_args.setdefault(b_name, f"in_ptr{len(kernel.in_args)}")
    stores = []
    if product.name not in removed:  # read elsewhere too: stored as well
        out = kernel.out_args[product.name] = f"out_ptr{len(kernel.out_args)}"
        stores.append(kernel.store_line(out, f"{n}*y0 + x0", value, dtype, "ymask & xmask"))
    kernel.generate_body()
    name = (kernel_name("triton_tem_mm", group, number) if group.nodes
            else f"triton_tem_mm_{number}")
    extents = [m * n, a_offset + (m - 1) * abs(sam) + (k - 1) * abs(sak) + 1,
               b_offset + (k - 1) * abs(sbk) + (n - 1) * abs(sbn) + 1]
    wide = ".to(tl.int64)" if max(extents) >= 2**31 else ""
    even_k = all(k % c["KBLOCK"] == 0 for c in configs)
    a_mask = "" if even_k else ", mask=rk[None, :] < k_left, other=0.0"
    b_mask = "" if even_k else ", mask=rk[:, None] < k_left, other=0.0"
    widen = ".to(tl.float32)" if interpreting() else ""  # (see the note)
    rounded = kernel.narrow("acc", dtype) + ".to(tl.float32)" if dtype in LOW_PRECISION \
        else "acc"
    params = ", ".join([*kernel.in_args.values(), *kernel.out_args.values(), "ynumel",
                        "xnumel", "YBLOCK: tl.constexpr", "XBLOCK: tl.constexpr",
                        "KBLOCK: tl.constexpr", "GROUP_M: tl.constexpr"])
    header = kernel.header("#") if group.nodes else [
        "# Generated by minipt2 inductor; see book/docs/performance.md"]
    lines = [
        f"# {product.name} = {a_name} @ {b_name} ([{m}, {k}] x [{k}, {n}]) as a template"
        + (", then its epilogue" if group.nodes else ""),
        *header,
        *imports(kernel),
        "@triton.jit",
        f"def {name}({params}):",
        "    # the tile: grouped ordering over the 2-D grid",
        "    xtiles, ytiles = tl.num_programs(0), tl.num_programs(1)",
        "    pid = tl.program_id(1) * xtiles + tl.program_id(0)",
        "    width = GROUP_M * xtiles",
        "    first = (pid // width) * GROUP_M",
        "    rows = tl.minimum(ytiles - first, GROUP_M)",
        "    ytile = first + (pid % width) % rows",
        "    xtile = (pid % width) // rows",
        f"    rm = ytile{wide} * YBLOCK + tl.arange(0, YBLOCK)",
        f"    rn = xtile{wide} * XBLOCK + tl.arange(0, XBLOCK)",
        f"    ra = {wrapped('rm', 'ynumel', 'YBLOCK', sam == 1 and m % 16 == 0)}",
        f"    rb = {wrapped('rn', 'xnumel', 'XBLOCK', sbn == 1 and n % 16 == 0)}",
        "    rk = tl.arange(0, KBLOCK)",
        f"    a_ptrs = {in_a} + ({start(a_offset)}ra[:, None] * {sam} + rk[None, :] * {sak})",
        f"    b_ptrs = {in_b} + ({start(b_offset)}rk[:, None] * {sbk} + rb[None, :] * {sbn})",
        "    acc = tl.full([YBLOCK, XBLOCK], 0.0, tl.float32)",
        f"    for k_start in range(0, {k}, KBLOCK):",
        *([] if even_k else [f"        k_left = {k} - k_start"]),
        f"        a = tl.load(a_ptrs{a_mask}){widen}",
        f"        b = tl.load(b_ptrs{b_mask}){widen}",
        f"        acc += tl.dot(a, b{dot_precision(dtype)})",
        f"        a_ptrs += KBLOCK * {sak}",
        f"        b_ptrs += KBLOCK * {sbk}",
        "    # the epilogue, on the tile's elements",
        "    yindex = rm[:, None]",
        "    ymask = yindex < ynumel",
        "    xindex = rn[None, :]",
        "    xmask = xindex < xnumel",
        "    y0 = yindex",
        "    x0 = xindex",
        f"    product = {rounded}",
        *("    " + line for line in stores + kernel.lines),
    ]
    return KernelSource(name, "\n".join(lines) + "\n", kernel.call_args(), n,
                        dict(configs[0]), ynumel=m, configs=[dict(c) for c in configs])
# --8<-- [end:template]

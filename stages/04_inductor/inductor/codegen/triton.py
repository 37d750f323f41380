"""The Triton printer: one fused group -> one ``@triton.jit`` kernel's source.

Input: a ``scheduler.FusedGroup``, the buffers removed by the scheduler, and the name ->
buffer map. Output: ``TritonKernelSource`` (kernel name, source text, buffer arguments in
call order, numel, launch parameters); ``codecache.TritonCodeCache`` turns it into a callable.

Chapter: book/docs/inductor.md ("Triton kernels").

A pointwise kernel: each program instance handles ``XBLOCK`` consecutive flat positions
``xindex``; ``xmask`` guards the tail when numel is not a multiple of ``XBLOCK``. Per-dim
indices are recovered from ``xindex`` with ``//`` and ``%`` (after collapsing dims, see
[Note: collapsing dims]), loads go through each buffer's own strides, so non-contiguous
inputs need no copy. A pointwise kernel that reads (or writes) a buffer transposed relative
to the others is printed with 2-D tiles instead; see [Note: tiling]. A reduction kernel works
on 2-D tiles, ``XBLOCK`` rows by ``RBLOCK`` reduced elements; see [Note: triton reductions]
in ``triton_reduction.py``.

[Note: tiling]
A GPU reads memory fastest when the 32 threads of a warp touch 32 neighbouring elements (a
*coalesced* access): one transaction instead of 32. A flat kernel gives neighbouring threads
neighbouring flat positions, so every access whose index has stride 1 along the innermost
loop variable is coalesced, and a broadcast one (stride 0) is free. ``x.t().contiguous()``
is neither: it writes along the rows of the output but reads down the columns of ``x``,
each thread of a warp a whole row apart. A 2-D tiled kernel fixes that. The loop variables
are cut in two: the outer ones form ``y``, the inner ones ``x``, and each program owns a
``YBLOCK x XBLOCK`` tile (``program_id(1)`` over y tiles, ``program_id(0)`` over x tiles).
The store is coalesced along x, the transposed load along y, and Triton's compiler moves
the tile between the two layouts through shared memory. Where to cut is read off the index
expressions (``tiling_split``): an access whose stride along the innermost variable is
neither 0 nor 1 votes for cutting just after the variable v along which its stride is
smallest (so v becomes the innermost variable of y); the most voted cut wins. Without such
an access the kernel stays flat. The y tiles go on the grid's axis 1, which CUDA caps at
65535 programs: past that the kernel stays flat too (correct, just slower), and so it does
when y's extent is a dynamic size, which could pass the cap at run time.

[Note: the flat kernel's indices and masks]
Three details of how the flat kernel touches memory, each found by reading torch.compile's
kernel next to ours:

- **Flat addresses.** Collapsing dims ([Note: collapsing dims]) merges two dims only when
  every access allows it. gelu_bias's bias does not, so its [8192, 8192] loop keeps two
  variables, and ``x`` was read at ``8192*x0 + x1``: a division and a modulo per element
  to rebuild what ``xindex`` already is. ``flat_suffix`` rewrites each address: a run of
  innermost variables that the access walks row-major (coefficients ``s``, ``s*n``, ...,
  ``n`` the sizes inside) is ``s*xindex`` when the run is every variable, else ``s*(xindex
  % extent)``. Loop variables that no address names any more are not defined.
- **No tail mask.** When numel is static and a multiple of every block size the kernel
  can be launched with (``even_blocks``: up to 2048, max-autotune's candidates included),
  no block has a tail, and loads and stores are printed without a mask. The printer checks
  the launch configs against it and fails loudly rather than run a block past the end.
- **Broadcast reads stay in L2.** A load whose address leaves out a loop variable is
  repeated by other programs (a bias, by every row): it asks the cache to keep its line
  (``eviction_policy='evict_last'``), while the streamed tensors pass through.

Together they took float32 gelu_bias on an H200 from 95.8-96.2% of copy bandwidth to
96.3-96.7% (a hand-edited kernel, four interleaved runs each). The reduction kernel spells
its masks as constants where no tile has a tail (``full_rows``, ``even_rows``), which
Triton's compiler folds away. Each thread then loads 16 bytes of a stream in one
instruction: ``block_size`` gives float32 kernels 8 warps per 1024 elements.

[Note: triton interpreter]
Without a CUDA device, kernels run on CPU tensors through Triton's interpreter, which is
switched on by the environment variable ``TRITON_INTERPRET=1``. Triton 3.6 reads it (via
``triton.knobs.runtime.interpret``) each time ``@triton.jit`` decorates a function, not when
triton is imported: setting it before our generated module is imported is enough.
The interpreter cannot run ``libdevice`` (tanh, expm1, log1p, pow, ...), so for those ops
we print libdevice on the GPU and an equivalent ``tl`` expression under the interpreter,
decided when the kernel is printed. Those expressions use only builtins (``tl.exp``), not
Triton's own ``@jit`` helpers (``tl.sigmoid``): the helpers were decorated when triton was
imported, possibly before the variable was set, and then cannot run in the interpreter.
The interpreter also casts float32 to bfloat16 by truncating (checked on Triton 3.6, even
with ``fp_downcast_rounding="rtne"``) where the GPU rounds to nearest even; under the
interpreter we round with integer arithmetic on the float's bits first (``to_bf16``).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import re
from collections.abc import Sequence
from typing import Any

import sympy
import torch

from inductor import autotune, sizevars
from inductor.codegen.common import (
    CSEVariable,
    IndexPlan,
    Kernel,
    debug_asserts,
    kernel_name,
    numel,
)
from inductor.codegen.triton_math import (
    FAR_SLICE,
    PHILOX,
    TORCH_OP,
    far_path_in_slices,
    math_helper_sources,
)
from inductor.codegen.triton_rounding import RoundedErfc
from inductor.scheduler import FusedGroup
from inductor.virtualized import INDIRECT_PREFIX

TRITON_TYPES = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16", torch.int8: "tl.int8", torch.uint8: "tl.uint8",
    torch.int16: "tl.int16", torch.int32: "tl.int32", torch.int64: "tl.int64",
    torch.bool: "tl.int1",
}
LOW_PRECISION = {torch.float16, torch.bfloat16}  # loaded as float32, computed in float32
POINTWISE_XBLOCK = int(os.environ.get("MINIPT2_TRITON_XBLOCK", "1024"))  # for tuning runs
# sin/cos in a kernel that stores anything wider than 16 bits: libdevice's (tl.sin), not
# ours ([Note: our own sin and erf]); tests switch it off to check our float32 polynomial
LIBDEVICE_SIN_WHERE_WIDE = True
MAX_POINTWISE_XBLOCK = 2048  # the largest of block_size and autotune.pointwise_configs


def ensure_interpreter_if_no_gpu() -> None:
    """Turn on the Triton interpreter when no CUDA device exists; [Note: triton interpreter]."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def compute_type(dtype: torch.dtype) -> str:
    return "tl.float32" if dtype in LOW_PRECISION else TRITON_TYPES[dtype]


def _libdevice_or(name: str, fallback: str):
    """``libdevice.<name>(a)`` on the GPU, ``fallback`` (a tl expression) when interpreting."""

    def fmt(*args: CSEVariable, dtype: torch.dtype) -> str:
        if interpreting():
            return fallback.format(*args, t=compute_type(dtype))
        return f"libdevice.{name}({', '.join(map(str, args))})"

    return fmt


def _maximum(fn: str):
    def fmt(a: CSEVariable, b: CSEVariable, dtype: torch.dtype) -> str:
        if dtype.is_floating_point:  # NaN-propagating, like torch.maximum
            return f"tl.{fn}({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"
        return f"tl.{fn}({a}, {b})"

    return fmt


# pow under the interpreter: |a| ** b via exp2/log2, then the sign for a < 0 and odd integer
# b, NaN for a < 0 and fractional b, and 1 for b == 0 (as C's pow).
_POW_INTERP = ("tl.where({1} == 0, 1.0, tl.where({0} < 0, tl.where({1} == tl.floor({1}), "
               "tl.where(tl.floor({1} * 0.5) * 2 == {1}, 1.0, -1.0), float('nan')), 1.0) * "
               "tl.exp2({1} * tl.log2(tl.abs({0})))).to({t})")


# round half to even under the interpreter: floor, then up past .5, and at .5 to the even one.
_ROUND_INTERP = ("tl.where({0} - tl.floor({0}) > 0.5, tl.floor({0}) + 1, "
                 "tl.where({0} - tl.floor({0}) < 0.5, tl.floor({0}), "
                 "2 * tl.floor(tl.floor({0}) * 0.5 + 0.5)))")


# --8<-- [start:triton-ops]
def _fn(name: str):
    return lambda *args, dtype: f"{name}({', '.join(map(str, args))})"


def _infix(op: str):
    return lambda a, b, dtype: f"({a} {op} {b})"


TRITON_OPS = {
    "abs": _fn("tl.abs"), "neg": lambda a, dtype: f"(-{a})",
    "exp": _fn("tl.exp"), "log": _fn("tl.log"),  # sin, cos, erf: [Note: our own sin and erf]
    "sqrt": _fn("tl.sqrt"), "rsqrt": _fn("tl.rsqrt"),
    "floor": _fn("tl.floor"), "ceil": _fn("tl.ceil"),
    "tan": _libdevice_or("tan", "(tl.sin({0}) / tl.cos({0}))"),
    "tanh": _libdevice_or("tanh", "(1 - 2 / (tl.exp(2 * {0}) + 1))"),
    "expm1": _libdevice_or("expm1", "(tl.exp({0}) - 1)"),
    "log1p": _libdevice_or("log1p", "tl.log(1 + {0})"),
    "trunc": _libdevice_or("trunc", "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))"),
    "pow": _libdevice_or("pow", _POW_INTERP),
    "sinh": _libdevice_or("sinh", "((tl.exp({0}) - tl.exp(-{0})) * 0.5)"),
    "cosh": _libdevice_or("cosh", "((tl.exp({0}) + tl.exp(-{0})) * 0.5)"),
    "asinh": _libdevice_or("asinh", "(tl.where({0} < 0, -1.0, 1.0) * "
                                    "tl.log(tl.abs({0}) + tl.sqrt({0} * {0} + 1)))"),
    "acosh": _libdevice_or("acosh", "tl.log({0} + tl.sqrt({0} * {0} - 1))"),
    "atanh": _libdevice_or("atanh", "(0.5 * tl.log((1 + {0}) / (1 - {0})))"),
    "log2": _fn("tl.log2"), "exp2": _fn("tl.exp2"),
    "round": _libdevice_or("nearbyint", _ROUND_INTERP),
    "isinf": lambda a, dtype: f"(tl.abs({a}) == float('inf'))",
    "bitwise_not": lambda a, dtype: f"(~{a})",
    "asin": _libdevice_or("asin", "torch_op('asin', {0})"),
    "acos": _libdevice_or("acos", "torch_op('acos', {0})"),
    "atan": _libdevice_or("atan", "torch_op('atan', {0})"),
    "atan2": _libdevice_or("atan2", "torch_op('atan2', {0}, {1})"),
    "lgamma": _libdevice_or("lgamma", "torch_op('lgamma', {0})"),
    "erfinv": _libdevice_or("erfinv", "torch_op('erfinv', {0})"),
    "reciprocal": lambda a, dtype: f"(1 / {a})",
    "sign": lambda a, dtype: f"(({a} > 0).to({compute_type(dtype)}) - "
                             f"({a} < 0).to({compute_type(dtype)}))",
    "isnan": lambda a, dtype: f"({a} != {a})",
    "logical_not": lambda a, dtype: f"({a} == 0)",
    "add": _infix("+"), "sub": _infix("-"), "mul": _infix("*"), "div": _infix("/"),
    "fmod": _infix("%"),  # Triton's % has C semantics (sign of the dividend), like fmod
    "maximum": _maximum("maximum"), "minimum": _maximum("minimum"),
    "eq": _infix("=="), "ne": _infix("!="), "lt": _infix("<"), "le": _infix("<="),
    "gt": _infix(">"), "ge": _infix(">="),
    "bitwise_and": _infix("&"), "bitwise_or": _infix("|"), "bitwise_xor": _infix("^"),
    "where": lambda p, a, b: f"tl.where({p}, {a}, {b})",
}
# --8<-- [end:triton-ops]


def _literal(value: Any) -> str:
    if isinstance(value, float) and (value != value or value in (float("inf"), -float("inf"))):
        return f"float('{value}')"
    return repr(value)


class TritonKernel(RoundedErfc, Kernel):
    """Prints a fused group as a Triton pointwise kernel."""

    OPS = TRITON_OPS

    def assign(self, var: CSEVariable, expr: str) -> str:
        return f"{var} = {expr}"

    def index(self, index: Any) -> str:
        text = super().index(index)
        symbols = self.rewrite(index).free_symbols
        if all(sizevars.is_size_symbol(s) for s in symbols):  # the same for every lane
            return f"tl.full({self.BLOCK_SHAPE}, {text}, tl.int32)"  # (``s0 - 1``): a block
        return text

    def narrow(self, x: str, dtype: torch.dtype) -> str:
        """``x`` (float32) as ``dtype``, rounded to nearest even; [Note: triton interpreter]."""
        if dtype == torch.bfloat16 and interpreting():  # (an integer: its float32 first)
            bits = f"{x}.to(tl.float32).to(tl.uint32, bitcast=True)"
            x = (f"((({bits}) + 0x7FFF + ((({bits}) >> 16) & 1)) & 0xFFFF0000)"
                 ".to(tl.float32, bitcast=True)")
        return f"{x}.to({TRITON_TYPES[dtype]})"

    # --8<-- [start:flat-kernel]
    # The flat pointwise kernel ([Note: the flat kernel's indices and masks]) sets these:
    FLAT = False  # an index may name ``xindex``, the flat position itself
    EVEN = False  # every launch config's XBLOCK divides numel: no block has a tail
    keep_in_cache = False  # the load being printed is repeated by other programs

    def rewrite(self, index: Any) -> Any:
        index = super().rewrite(index)
        if not self.FLAT:
            return index
        return _flat_suffix_cached(index, tuple(self.plan.sizes), tuple(self.plan.symbols))

    def mask_for(self, index: Any) -> str:
        return "" if self.EVEN else "xmask"

    def load(self, name: str, index: Any) -> CSEVariable:
        loop = set(self.plan.symbols)
        self.keep_in_cache = self.FLAT and not loop <= Kernel.rewrite(self, index).free_symbols
        try:
            return super().load(name, index)
        finally:
            self.keep_in_cache = False

    def load_expr(self, arg: str, index: str, dtype: torch.dtype, mask: str) -> str:
        upcast = ".to(tl.float32)" if dtype in LOW_PRECISION else ""
        policy = ", eviction_policy='evict_last'" if self.keep_in_cache else ""
        return f"tl.load({arg} + ({index}){', ' + mask if mask else ''}{policy}){upcast}"
    # --8<-- [end:flat-kernel]

    def store_line(self, arg: str, index: str, value: CSEVariable, dtype: torch.dtype,
                   mask: str) -> str:
        mask = f", {mask}" if mask else ""
        if dtype in LOW_PRECISION:
            return f"tl.store({arg} + ({index}), {self.narrow(str(value), dtype)}{mask})"
        cast = "" if value.dtype == dtype else f".to({TRITON_TYPES[dtype]})"
        return f"tl.store({arg} + ({index}), {value}{cast}{mask})"

    BLOCK_SHAPE = "[XBLOCK]"  # the shape of a value that is the same for every element

    def constant_expr(self, value: Any, dtype: torch.dtype) -> str:
        return f"tl.full({self.BLOCK_SHAPE}, {_literal(value)}, {compute_type(dtype)})"

    def index_expr_text(self, index: str, dtype: torch.dtype) -> str:
        return f"({index}).to({compute_type(dtype)})"

    def to_dtype_expr(self, x: CSEVariable, src: torch.dtype, dst: torch.dtype) -> str:
        if dst in LOW_PRECISION:  # round to the narrow type, keep computing in float32
            return f"{self.narrow(str(x), dst)}.to(tl.float32)"
        if dst == torch.bool:
            return f"({x} != 0)"
        return f"{x}.to({TRITON_TYPES[dst]})"

    # ---- sin, cos, erf: module-level helpers ([Note: our own sin and erf]) -------------
    HELPER_OPS = frozenset({"sin", "cos", "erf", "erfc"})

    @property
    def sin_args(self) -> list[CSEVariable]:
        return self.__dict__.setdefault("_sin_args", [])

    # --8<-- [start:far-sin-check]
    # A flat pointwise kernel calls sin_fast and checks every argument once, at its end
    # (``far_sin_check``); the other kernels call sin_fp32, which checks its own argument.
    FAST_SIN = False

    def sin(self, x: CSEVariable) -> CSEVariable:
        return self._sin_or_cos("sin", x)

    def cos(self, x: CSEVariable) -> CSEVariable:
        return self._sin_or_cos("cos", x)

    def _sin_or_cos(self, op: str, x: CSEVariable) -> CSEVariable:
        cos = op == "cos"
        if LIBDEVICE_SIN_WHERE_WIDE and not self.narrow_outputs():  # [Note: our own sin
            return self.new_var(f"tl.{op}({x})", x.dtype)  # and erf]: libdevice's sinf
        if not self.FAST_SIN or x.dtype == torch.float64:
            return self._math_helper(op, "sin_cos", f"sin_fp32({{0}}, {cos})", x)
        self.sin_args.append(x)
        narrow = self.narrow_outputs()  # a shorter polynomial: [Note: our own sin and erf]
        return self._math_helper(op, "sin_cos", f"sin_fast({{0}}, {cos}, {narrow})", x)

    def far_sin_check(self, index_lines: list[str] | None = None) -> list[str]:
        """Lines that end the kernel: if any sin/cos argument of the block is beyond 2**16
        (or infinite), compute the block again with libdevice's functions and store it
        again. One block-wide max per kernel, after the stores, where no warp waits for it:
        [Note: our own sin and erf]. The block loads its inputs again, so that nothing
        loaded lives across the stores (a bfloat16 sin(x) + cos(y) ran at 85% of copy
        bandwidth keeping them, 92% loading again); unless the kernel writes a buffer it
        reads, whose first values are gone by then. A flat kernel that loads again does so
        in slices of ``FAR_SLICE`` elements, one loop: [Note: the far path in slices].
        ``index_lines``: the flat kernel's ``x0 = ...`` lines (None: no slices)."""
        if not self.sin_args:
            return []
        widest = f"tl.abs({self.sin_args[0]})"
        for arg in self.sin_args[1:]:
            widest = f"tl.maximum({widest}, tl.abs({arg}))"
        largest = f"max_abs({widest})" if interpreting() else f"tl.max({widest})"
        reload = not set(self.in_args) & set(self.out_args)
        again = [line.replace("sin_fast(", "sin_far(") for line in self.lines
                 if reload or " = tl.load(" not in line]
        if not reload or index_lines is None:
            return [f"if {largest} > 65536.0:", *("    " + line for line in again)]
        return [f"if {largest} > 65536.0:", *far_path_in_slices(
            [*used_lines(index_lines, again), *again], self.EVEN, self.BLOCK_SHAPE)]
    # --8<-- [end:far-sin-check]

    def erf(self, x: CSEVariable) -> CSEVariable:
        return self._math_helper("erf", "erf", "erf_fp32({0})", x)

    def erfc(self, x: CSEVariable) -> CSEVariable:
        """Ours where every output of the kernel is bfloat16/float16 ([Note: our own sin and
        erf]); elsewhere ``erfc_rounded``, ours or libdevice's as the kernel's uses of the
        value decide ([Note: an erfc rounded before it is read])."""
        if x.dtype == torch.float64:
            return self.new_var(_libdevice_or("erfc", "torch_op('erfc', {0})")(
                x, dtype=x.dtype), x.dtype)
        if self.narrow_outputs():
            return self._math_helper("erfc", "erfc", "erfc_narrow({0})", x)
        self.helpers["erfc_rounded"] = ""  # its text once the body is printed: imports()
        var = self.new_var(f"erfc_rounded({x})", x.dtype)
        self.unrounded.add(var.name)
        return var

    def _math_helper(self, op: str, helper: str, call: str, x: CSEVariable) -> CSEVariable:
        if x.dtype == torch.float64:  # the helpers are float32: double stays libdevice's
            return self.new_var(f"tl.{op}({x})", x.dtype)
        self.helpers.update(math_helper_sources(helper, interpreting()))
        return self.new_var(call.format(x), x.dtype)

    # ---- masked regions, indirect indices, atomics, random numbers ---------------------
    def masked_value(self, mask: CSEVariable, inner: list[str], value: CSEVariable,
                     other: Any) -> CSEVariable:
        self.lines.extend(inner)  # straight-line code: the region's loads carry the mask
        return self.new_var(f"tl.where({mask}, {value}, {_literal(other)})", value.dtype)

    def assert_line(self, var: str, cond: str, mask: str, message: str) -> str:
        if interpreting():  # tl.device_assert does nothing in the interpreter
            return f"check_index({cond}, {mask or 'None'}, {var}, {message!r})"
        ok = f"{cond} | ~({mask})" if mask else cond
        return f"tl.device_assert({ok}, {message.format(var)!r})"

    def atomic_add_line(self, arg: str, index: str, value: CSEVariable, dtype: torch.dtype,
                        mask: str) -> str:
        """[Note: an atomic add's address]: the address takes the value's shape."""
        cast = "" if value.dtype == dtype else f".to({TRITON_TYPES[dtype]})"
        address = f"{arg} + ({index}) + tl.full({value}.shape, 0, tl.int32)"
        return f"tl.atomic_add({address}, {value}{cast}{', ' + mask if mask else ''})"

    # [Note: an atomic add's address]
    # ``tl.store`` broadcasts its address and value to one shape; ``tl.atomic_add`` only
    # broadcasts the value to the address. In LayoutLM's training step on the H200 an
    # embedding's gradient row (token type 0, a constant index) was added into from a
    # LayerNorm backward reduction: address ``[1, RBLOCK]``, value ``[XBLOCK, RBLOCK]``,
    # every row of the tile adding into the same row. Triton refused to compile it and the
    # backward raised; the interpreter, which broadcasts both ways, had run it. Adding a
    # block of zeros of the value's shape (``tl.full``) gives the address at least that
    # shape (a larger address, the value of a reduced row, is still broadcast as before).

    def rand_expr(self, seed: CSEVariable, offset: CSEVariable, stream: int,
                  dtype: torch.dtype) -> str:
        self.helpers["philox"] = PHILOX
        bits = f"philox({seed}, {offset}, {stream})"
        if dtype == torch.float64:
            return f"({bits}.to(tl.float64) * {2.0 ** -32!r})"
        keep = RANDOM_BITS[dtype]  # exactly representable: never rounds up to 1.0
        return f"(({bits} >> {32 - keep}).to(tl.float32) * {2.0 ** -keep!r})"

    def index_lines(self, plan: Any = None, flat: str = "xindex") -> list[str]:
        """``x_k = (xindex // inner) % size`` for each collapsed loop variable."""
        lines, inner = [], 1
        plan = plan or self.plan
        sizes, symbols = plan.sizes, plan.symbols
        for k in reversed(range(len(sizes))):
            expr = flat if inner == 1 else f"({flat} // {self.size(inner)})"
            if k > 0:
                expr = f"{expr} % {self.size(sizes[k])}"
            lines.append(f"{symbols[k]} = {expr}")
            inner = inner * sizes[k]
        return list(reversed(lines))


RANDOM_BITS = {torch.float32: 24, torch.bfloat16: 8, torch.float16: 11}  # mantissa + 1


def imports(kernel: Kernel | None = None) -> list[str]:
    """The generated module's imports and the helpers ``kernel`` calls (``philox``); under
    the interpreter, ``torch_op`` stands in for libdevice functions that have no ``tl``
    expression ([Note: triton interpreter]) and ``check_index`` for ``tl.device_assert``."""
    if kernel is not None and "erfc_rounded" in kernel.helpers:
        kernel.helpers["erfc_rounded"] = kernel.erfc_rounded_source()
    helpers = list(kernel.helpers.values()) if kernel is not None else []
    if interpreting():
        return ["import triton", "import triton.language as tl", TORCH_OP, *helpers, ""]
    debug = ["triton.knobs.runtime.debug = True  # MINIPT2_DEBUG_ASSERTS: keep device_assert"]
    return ["import triton", "import triton.language as tl",
            "from triton.language.extra import libdevice",
            *(debug if debug_asserts() else []), *helpers, "", ""]


@dataclasses.dataclass
class KernelSource:
    """A printed kernel and how the wrapper launches it."""

    name: str
    source: str
    args: list[str]  # buffer names, in the kernel's parameter order
    numel: int
    launch: dict[str, int]  # Triton: XBLOCK (RBLOCK, YBLOCK), num_warps; C++: nothing
    rnumel: int | None = None  # reduction kernels: elements reduced per output element
    ynumel: int | None = None  # tiled pointwise kernels: the extent of y (numel is x's)
    configs: list[dict[str, int]] = dataclasses.field(default_factory=list)  # max-autotune
    # the size symbols the kernel takes after its numels ([Note: sizes as kernel arguments])
    size_vars: list[sympy.Symbol] = dataclasses.field(default_factory=list)
    # the group whose buffers this kernel writes too, in its last program ([Note: the last
    # program finishes] in last_program.py); that group has no kernel of its own
    finishes: Any = None
    counters: int = 0  # how many counters its last programs use (one per tile)
    scratch: int = 0  # int32 slots of the stream's partials it uses (the same Note)

    def size_args(self) -> list[Any]:
        """The sizes the kernel takes after its buffers, in its parameter order (ints, or
        expressions of size symbols that the wrapper evaluates)."""
        if self.ynumel is not None:
            return [self.ynumel, self.numel, *self.size_vars]
        return [self.numel] + ([self.rnumel] if self.rnumel is not None else []) + \
            list(self.size_vars)

    def grid_args(self) -> list[int]:
        """The arguments of the wrapper's ``grid(xnumel, ynumel=1)``."""
        return [self.numel] + ([self.ynumel] if self.ynumel is not None else [])


def block_size(numel: int, itemsize: int = 2) -> tuple[int, int]:
    """(XBLOCK, num_warps): 1024 elements per program for big loops, the next power of two
    for small ones. A warp is 32 threads, and each thread should load 16 bytes of every
    input, one vector instruction: 8 warps for 1024 float32 elements, 4 for 16-bit ones
    (``itemsize``, the narrowest element the kernel reads or writes; bytes count as 2, so
    at most 8 elements a thread). On an H100, float32 sin(x) + cos(y) took 268.3 us with 8
    warps and 271.0 us with 4, the slowest of six configs; gelu_bias 182.4 against 183.3.
    (A symbolic ``numel`` is judged by its hint: any block size is correct, masks do the
    rest.)"""
    numel = sizevars.current().hint(numel)
    xblock = min(POINTWISE_XBLOCK, 1 << max(0, numel - 1).bit_length())
    return xblock, max(1, min(8, xblock * max(2, itemsize) // 512))


# --8<-- [start:flat-suffix]
XINDEX = sympy.Symbol("xindex", integer=True, nonnegative=True)


def flat_suffix(index: Any, sizes: Sequence[Any], symbols: Sequence[sympy.Symbol]) -> Any:
    """``index`` with a row-major run over the innermost loop variables written with the
    flat position: over sizes ``[n, 8192]``, ``8192*x0 + x1`` is ``xindex``, and over ``[a,
    b, 64]``, ``s*(64*x1 + x2)`` is ``s*(xindex % (64*b))``. See [Note: the flat kernel's
    indices and masks]."""
    # BEGIN EXERCISE inductor-flat-address: write a row-major run of loop variables as xindex
    index = sympy.expand(index)

    def coefficient(k: int) -> Any:  # of symbols[k], if index is linear in it; else None
        sym, c = symbols[k], index.coeff(symbols[k])
        if sym in (index - c * sym).free_symbols or c.free_symbols & set(symbols):
            return None
        return c

    last = len(symbols) - 1
    stride = coefficient(last) if symbols else None
    if not stride:
        return index
    start, extent = last, sympy.sympify(sizes[last])  # the run is symbols[start:]
    while start > 0 and (c := coefficient(start - 1)) is not None \
            and sympy.expand(c - stride * extent) == 0:
        start -= 1
        extent = extent * sizes[start]
    if start == last:
        return index  # a run of one variable: nothing to gain
    rest = index - sum(coefficient(k) * symbols[k] for k in range(start, last + 1))
    return sympy.expand(rest) + stride * (XINDEX if start == 0 else sympy.Mod(XINDEX, extent))
    # END EXERCISE inductor-flat-address
# --8<-- [end:flat-suffix]


# a kernel asks for each address several times (its text, its mask, its cache policy)
_flat_suffix_cached = functools.lru_cache(maxsize=1 << 14)(flat_suffix)


def needs_int64_indices(kernel: TritonKernel) -> bool:
    """Whether a flat position or an element offset may pass 2**31 - 1. With symbolic sizes
    int32 is kept only if every extent is known to fit, by a guard if need be; see [Note:
    sizes as kernel arguments]."""
    extents = [kernel.numel * (kernel.rnumel if kernel.rnumel != 0 else 1)]
    for name in kernel.call_args():
        layout = kernel.buffers[name].layout
        extents.append(1 + sum((n - 1) * s for n, s in zip(layout.size, layout.stride)))
    return not all(sizevars.current().known_below(e, 2**31) for e in extents)


# --8<-- [start:triton-kernel]
def generate_triton_kernel(group: FusedGroup, removed: set[str], buffers: dict[str, Any],
                           number: int) -> KernelSource:
    """Print ``group`` as a Triton pointwise kernel over a flat, masked ``xindex`` (or as a
    tiled one, [Note: tiling]; or as a reduction kernel)."""
    ensure_interpreter_if_no_gpu()  # decides libdevice vs tl below
    if group.is_reduction():
        from inductor.codegen.triton_reduction import generate_triton_reduction

        return generate_triton_reduction(group, removed, buffers, number)
    kernel = TritonKernel(group, removed, buffers)
    split = tiling_split(kernel)
    if split is not None:
        return generate_tiled_kernel(group, removed, buffers, number, split)
    kernel.FAST_SIN = kernel.FLAT = True
    kernel.EVEN = even_blocks(kernel.numel)
    kernel.generate_body()
    if kernel.sin_args and any("tl.atomic" in line for line in kernel.lines):
        kernel = TritonKernel(group, removed, buffers)  # an atomic must not run twice
        kernel.FLAT, kernel.EVEN = True, even_blocks(kernel.numel)
        kernel.generate_body()
    name = kernel_name("triton_poi", group, number)
    wide = ".to(tl.int64)" if needs_int64_indices(kernel) else ""  # else int32: faster
    size_vars = kernel.size_params()  # [Note: sizes as kernel arguments]
    params = ", ".join([*kernel.in_args.values(), *kernel.out_args.values(), "xnumel",
                        *map(str, size_vars), "XBLOCK: tl.constexpr"])
    body = kernel.lines + kernel.far_sin_check(kernel.index_lines())
    lines = [
        *kernel.header("#"),
        *imports(kernel),
        "@triton.jit",
        f"def {name}({params}):",
        f"    xoffset = tl.program_id(0){wide} * XBLOCK",
        "    xindex = xoffset + tl.arange(0, XBLOCK)",
        *([] if kernel.EVEN else ["    xmask = xindex < xnumel"]),
        *("    " + line for line in used_lines(kernel.index_lines(), body)),
        *("    " + line for line in body),
    ]
    xblock, num_warps = block_size(kernel.numel, min(
        (kernel.buffers[b].layout.dtype.itemsize for b in kernel.call_args()), default=2))
    if "sin_cos" in kernel.helpers and all(
            kernel.buffers[b].layout.dtype in LOW_PRECISION for b in kernel.out_args):
        # [Note: our own sin and erf]: sin's block-wide max is a barrier across warps; one
        # warp per program makes it a few shuffles. It matters where the kernel is compute-
        # bound, 16-bit data (bfloat16 sin(x) + cos(y) on an H200: 82% of copy bandwidth
        # with 4 warps, 90% with one); float32 kernels wait for memory and keep 4 warps.
        xblock, num_warps = min(xblock, 512), 1
    elif "erfc" in kernel.helpers and xblock >= 1024:  # 16 elements a thread: bfloat16
        xblock, num_warps = 2048, 4  # gelu on an H200 ran at 85% of copy bandwidth, 81% with 8
    launch = {"XBLOCK": xblock, "num_warps": num_warps}
    configs = autotune.pointwise_configs(launch, sizevars.current().hint(kernel.numel))
    if kernel.EVEN and any(kernel.numel % c["XBLOCK"] for c in [launch, *configs]):
        raise AssertionError(f"{name}: a block size that does not divide {kernel.numel}")
    if kernel.EVEN and kernel.sin_args and min(c["XBLOCK"] for c in [launch, *configs]) \
            < FAR_SLICE:  # [Note: the far path in slices]: unmasked slices stay in the block
        raise AssertionError(f"{name}: a block smaller than the far path's slice")
    return KernelSource(name, "\n".join(lines) + "\n", kernel.call_args(), kernel.numel,
                        launch, size_vars=size_vars, configs=configs)
# --8<-- [end:triton-kernel]


def even_blocks(numel: Any) -> bool:
    """Whether every block size the flat kernel may be launched with divides ``numel``
    (static, a multiple of the largest), so that no block has a tail to mask."""
    numel = sympy.sympify(numel)
    return numel.is_Integer and int(numel) % max(MAX_POINTWISE_XBLOCK, POINTWISE_XBLOCK) == 0


def used_lines(definitions: list[str], body: list[str]) -> list[str]:
    """The ``name = ...`` lines whose name the body uses."""
    words = set(re.findall(r"\w+", "\n".join(body)))
    return [line for line in definitions if line.split(" = ", 1)[0] in words]


class TritonTiledKernel(TritonKernel):
    """Prints a pointwise group over ``YBLOCK x XBLOCK`` tiles; see [Note: tiling].

    [Note: dense stores]
    ``tl.store(ptr, value, mask)`` broadcasts the value and the mask to the shape of the
    address, never the address to theirs. In a tile an address is ``[YBLOCK, 1]``,
    ``[1, XBLOCK]`` or ``[1, 1]`` when it does not vary along y, x or either: the size-1
    and empty extents that index simplification drops (``x.t()`` of a [0, 5] tensor stores
    at ``x0``), or an index-independent one. Storing a ``[YBLOCK, XBLOCK]`` value there is a
    compile error on the GPU ("Expected pointer argument to have shape [8, 1] but got [1,
    1]"). The interpreter would raise it too, but only once a program runs, and an empty
    tensor launches none. So a store whose mask does not name both ``ymask`` and ``xmask``
    (``mask_for`` names the axes its address varies along) gets its address broadcast to
    the tile, and both masks: lanes past either edge of the tile store nothing. Loads need
    no such care: a ``[1, XBLOCK]`` load broadcasts in the arithmetic that uses it. The flat
    kernel's addresses are ``[XBLOCK]`` or ``tl.full([XBLOCK], ...)`` (``index``); the
    reduction kernel's block sizes are 1 along an extent of 0 or 1 (``launch_config``,
    ``autotune.reduction_configs``), so its addresses always cover its values.
    """

    BLOCK_SHAPE = "[1, 1]"  # broadcasting makes it a tile

    def mask_for(self, index: Any) -> str:
        names = {s.name[0] for s in sympy.sympify(index).free_symbols}
        return " & ".join(m for m, n in (("ymask", "y"), ("xmask", "x")) if n in names)

    def dense(self, index: str, mask: str) -> tuple[str, str]:
        """A store's address and mask over the whole tile; see [Note: dense stores]."""
        parts = [p for p in mask.split(self.AND) if p]
        if "ymask" in parts and "xmask" in parts and INDIRECT_PREFIX not in index:
            return index, mask  # varies along y and x: already [YBLOCK, XBLOCK]
        mask = self.AND.join(dict.fromkeys(["ymask", "xmask", *parts]))
        return f"tl.broadcast_to({index}, [YBLOCK, XBLOCK])", mask

    def store_line(self, arg: str, index: str, value: CSEVariable, dtype: torch.dtype,
                   mask: str) -> str:
        index, mask = self.dense(index, mask)
        return super().store_line(arg, index, value, dtype, mask)

    def atomic_add_line(self, arg: str, index: str, value: CSEVariable, dtype: torch.dtype,
                        mask: str) -> str:
        index, mask = self.dense(index, mask)
        return super().atomic_add_line(arg, index, value, dtype, mask)

    def tile(self, split: int) -> tuple[IndexPlan, IndexPlan]:
        """Rename the loop variables before ``split`` to ``y0, y1, ...`` and the rest to
        ``x0, x1, ...``; returns the plans that recover them from yindex and xindex."""
        plan = self.plan
        ys = [sympy.Symbol(f"y{j}", integer=True, nonnegative=True) for j in range(split)]
        xs = [sympy.Symbol(f"x{j}", integer=True, nonnegative=True)
              for j in range(len(plan.symbols) - split)]
        rename = dict(zip(plan.symbols, ys + xs))
        self.plan = IndexPlan(plan.sizes, ys + xs, {sym: expr.xreplace(rename) for sym, expr
                                                    in plan.replacements.items()})
        return IndexPlan(plan.sizes[:split], ys, {}), IndexPlan(plan.sizes[split:], xs, {})


MAX_GRID_Y = 65535  # CUDA's limit on the grid's axis 1 (and 2)
TILING = os.environ.get("MINIPT2_TRITON_TILING", "1") != "0"  # 0: flat kernels only (A/B runs)


def stride_along(index: sympy.Expr, var: sympy.Symbol) -> sympy.Expr | None:
    """How far ``index`` moves when ``var`` grows by one, if it is linear in ``var``."""
    if any(var in atom.free_symbols for atom in index.atoms(sympy.Mod, sympy.Function)):
        return None
    stride = sympy.diff(index, var)
    return stride if stride.is_Integer else None


# --8<-- [start:tiling-split]
def tiling_split(kernel: TritonKernel) -> int | None:
    """Where to cut the loop variables into y (outer) and x (inner), or None for a flat
    kernel; see [Note: tiling]."""
    symbols, votes = kernel.plan.symbols, collections.Counter()
    if len(symbols) < 2 or not TILING:
        return None
    for node in kernel.group.nodes:
        accesses = node.accesses(kernel.space)
        for _, index in accesses.reads + accesses.writes:
            strides = [stride_along(kernel.rewrite(index), var) for var in symbols]
            if None in strides or abs(strides[-1]) <= 1:
                continue  # coalesced, a broadcast, or not linear: the flat kernel it is
            moving = [(abs(st), position) for position, st in enumerate(strides) if st != 0]
            fastest = min(moving)[1]  # the variable along which this access is densest
            if fastest != len(symbols) - 1:
                votes[fastest] += 1
    if not votes:
        return None
    split = max(votes, key=lambda position: (votes[position], position)) + 1
    ynumel = sympy.sympify(numel(kernel.plan.sizes[:split]))
    if not ynumel.is_Integer or -(-int(ynumel) // autotune.MIN_YBLOCK) > MAX_GRID_Y:
        return None  # past the grid's limit, now or (a dynamic size) maybe at run time
    return split
# --8<-- [end:tiling-split]


def tile_config(ynumel: int, xnumel: int) -> tuple[int, int, int]:
    """(YBLOCK, XBLOCK, num_warps): 32 x 32 tiles, so a warp covers 32 neighbouring elements
    along either side of the tile, 1024 elements over 4 warps; smaller for small extents."""
    ynumel, xnumel = sizevars.current().hint(ynumel), sizevars.current().hint(xnumel)
    yblock = min(32, 1 << max(0, ynumel - 1).bit_length())
    xblock = min(32, 1 << max(0, xnumel - 1).bit_length())
    return yblock, xblock, max(1, min(8, yblock * xblock // 256))


# --8<-- [start:triton-tiled]
def generate_tiled_kernel(group: FusedGroup, removed: set[str], buffers: dict[str, Any],
                          number: int, split: int) -> KernelSource:
    """Print ``group`` as a pointwise kernel over 2-D tiles; see [Note: tiling]."""
    kernel = TritonTiledKernel(group, removed, buffers)
    yplan, xplan = kernel.tile(split)
    kernel.generate_body()
    name = kernel_name("triton_poi", group, number)
    wide = ".to(tl.int64)" if needs_int64_indices(kernel) else ""
    size_vars = kernel.size_params()
    params = ", ".join([*kernel.in_args.values(), *kernel.out_args.values(), "ynumel",
                        "xnumel", *map(str, size_vars), "YBLOCK: tl.constexpr",
                        "XBLOCK: tl.constexpr"])
    lines = [
        *kernel.header("#"),
        *imports(kernel),
        "@triton.jit",
        f"def {name}({params}):",
        f"    yoffset = tl.program_id(1){wide} * YBLOCK",
        "    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]",
        "    ymask = yindex < ynumel",
        f"    xoffset = tl.program_id(0){wide} * XBLOCK",
        "    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]",
        "    xmask = xindex < xnumel",
        *("    " + line for line in kernel.index_lines(yplan, "yindex")),
        *("    " + line for line in kernel.index_lines(xplan, "xindex")),
        *("    " + line for line in kernel.lines),
    ]
    ynumel, xnumel = numel(yplan.sizes), numel(xplan.sizes)
    yblock, xblock, num_warps = tile_config(ynumel, xnumel)
    launch = {"YBLOCK": yblock, "XBLOCK": xblock, "num_warps": num_warps}
    hint = sizevars.current().hint
    return KernelSource(name, "\n".join(lines) + "\n", kernel.call_args(), xnumel, launch,
                        ynumel=ynumel, size_vars=size_vars,
                        configs=autotune.tiled_configs(launch, hint(ynumel), hint(xnumel)))
# --8<-- [end:triton-tiled]

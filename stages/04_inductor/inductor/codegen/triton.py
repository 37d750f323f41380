"""The Triton printer: one fused group -> one ``@triton.jit`` kernel's source.

Input: a ``scheduler.FusedGroup``, the buffers removed by the scheduler, and the name ->
buffer map. Output: ``TritonKernelSource`` (kernel name, source text, buffer arguments in
call order, numel, launch parameters); ``codecache.TritonCodeCache`` turns it into a callable.

Chapter: book/docs/inductor.md ("Triton kernels").

A pointwise kernel: each program instance handles ``XBLOCK`` consecutive flat positions
``xindex``; ``xmask`` guards the tail when numel is not a multiple of ``XBLOCK``. Per-dim
indices are recovered from ``xindex`` with ``//`` and ``%`` (after collapsing dims, see
[Note: collapsing dims]), loads go through each buffer's own strides, so non-contiguous
inputs need no copy. A reduction kernel works on 2-D tiles, ``XBLOCK`` rows by ``RBLOCK``
reduced elements; see [Note: triton reductions] in ``triton_reduction.py``.

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

import dataclasses
import os
from typing import Any

import torch

from inductor.codegen.common import CSEVariable, Kernel, kernel_name
from inductor.scheduler import FusedGroup

TRITON_TYPES = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16", torch.int8: "tl.int8", torch.uint8: "tl.uint8",
    torch.int16: "tl.int16", torch.int32: "tl.int32", torch.int64: "tl.int64",
    torch.bool: "tl.int1",
}
LOW_PRECISION = {torch.float16, torch.bfloat16}  # loaded as float32, computed in float32
POINTWISE_XBLOCK = int(os.environ.get("MINIPT2_TRITON_XBLOCK", "1024"))  # for tuning runs


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
    "sin": _fn("tl.sin"), "cos": _fn("tl.cos"), "exp": _fn("tl.exp"), "log": _fn("tl.log"),
    "sqrt": _fn("tl.sqrt"), "rsqrt": _fn("tl.rsqrt"), "erf": _fn("tl.erf"),
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


class TritonKernel(Kernel):
    """Prints a fused group as a Triton pointwise kernel."""

    OPS = TRITON_OPS

    def assign(self, var: CSEVariable, expr: str) -> str:
        return f"{var} = {expr}"

    def index(self, index: Any) -> str:
        text = super().index(index)
        if not self.rewrite(index).free_symbols:  # a scalar address: make it a block
            return f"tl.full({self.BLOCK_SHAPE}, {text}, tl.int32)"
        return text

    def narrow(self, x: str, dtype: torch.dtype) -> str:
        """``x`` (float32) as ``dtype``, rounded to nearest even; [Note: triton interpreter]."""
        if dtype == torch.bfloat16 and interpreting():
            bits = f"{x}.to(tl.uint32, bitcast=True)"
            x = (f"((({bits}) + 0x7FFF + ((({bits}) >> 16) & 1)) & 0xFFFF0000)"
                 ".to(tl.float32, bitcast=True)")
        return f"{x}.to({TRITON_TYPES[dtype]})"

    def mask_for(self, index: Any) -> str:
        return "xmask"

    def load_expr(self, arg: str, index: str, dtype: torch.dtype, mask: str) -> str:
        upcast = ".to(tl.float32)" if dtype in LOW_PRECISION else ""
        return f"tl.load({arg} + ({index}){', ' + mask if mask else ''}){upcast}"

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

    def index_lines(self, plan: Any = None, flat: str = "xindex") -> list[str]:
        """``x_k = (xindex // inner) % size`` for each collapsed loop variable."""
        lines, inner = [], 1
        plan = plan or self.plan
        sizes, symbols = plan.sizes, plan.symbols
        for k in reversed(range(len(sizes))):
            expr = flat if inner == 1 else f"({flat} // {inner})"
            if k > 0:
                expr = f"{expr} % {sizes[k]}"
            lines.append(f"{symbols[k]} = {expr}")
            inner *= sizes[k]
        return list(reversed(lines))


TORCH_OP = '''

def torch_op(name, *xs):
    """Interpreter only: an op with no tl spelling, run by torch on the blocks' numpy data."""
    import torch
    from triton.runtime.interpreter import TensorHandle

    data = getattr(torch, name)(*[torch.from_numpy(x.handle.data) for x in xs]).numpy()
    dtype = xs[0].handle.dtype
    kind = tl.core.block_type(xs[0].dtype, list(data.shape)) if data.shape else xs[0].dtype
    return tl.core.tensor(TensorHandle(data, dtype), kind)
'''


def imports() -> list[str]:
    """The generated module's imports; under the interpreter, ``torch_op`` stands in for
    libdevice functions that have no ``tl`` expression ([Note: triton interpreter])."""
    if interpreting():
        return ["import triton", "import triton.language as tl", TORCH_OP, ""]
    return ["import triton", "import triton.language as tl",
            "from triton.language.extra import libdevice", "", ""]


@dataclasses.dataclass
class KernelSource:
    """A printed kernel and how the wrapper launches it."""

    name: str
    source: str
    args: list[str]  # buffer names, in the kernel's parameter order
    numel: int
    launch: dict[str, int]  # Triton: XBLOCK (RBLOCK), num_warps; C++: nothing
    rnumel: int | None = None  # reduction kernels: elements reduced per output element


def block_size(numel: int) -> tuple[int, int]:
    """(XBLOCK, num_warps): 1024 elements per program for big loops, the next power of two
    for small ones; a warp is 32 threads, and each thread should handle a few elements."""
    xblock = min(POINTWISE_XBLOCK, 1 << max(0, numel - 1).bit_length())
    return xblock, max(1, min(8, xblock // 256))


def needs_int64_indices(kernel: TritonKernel) -> bool:
    """Whether a flat position or an element offset may pass 2**31 - 1."""
    extents = [kernel.numel * max(1, kernel.rnumel)]
    for name in kernel.call_args():
        layout = kernel.buffers[name].layout
        extents.append(1 + sum((int(n) - 1) * int(s) for n, s in zip(layout.size, layout.stride)))
    return max(extents) >= 2**31


# --8<-- [start:triton-kernel]
def generate_triton_kernel(group: FusedGroup, removed: set[str], buffers: dict[str, Any],
                           number: int) -> KernelSource:
    """Print ``group`` as a Triton pointwise kernel over a flat, masked ``xindex``."""
    ensure_interpreter_if_no_gpu()  # decides libdevice vs tl below
    if group.is_reduction():
        from inductor.codegen.triton_reduction import generate_triton_reduction

        return generate_triton_reduction(group, removed, buffers, number)
    kernel = TritonKernel(group, removed, buffers)
    kernel.generate_body()
    name = kernel_name("triton_poi", group, number)
    wide = ".to(tl.int64)" if needs_int64_indices(kernel) else ""  # else int32: faster
    params = ", ".join([*kernel.in_args.values(), *kernel.out_args.values(), "xnumel",
                        "XBLOCK: tl.constexpr"])
    lines = [
        *kernel.header("#"),
        *imports(),
        "@triton.jit",
        f"def {name}({params}):",
        f"    xoffset = tl.program_id(0){wide} * XBLOCK",
        "    xindex = xoffset + tl.arange(0, XBLOCK)",
        "    xmask = xindex < xnumel",
        *("    " + line for line in kernel.index_lines()),
        *("    " + line for line in kernel.lines),
    ]
    xblock, num_warps = block_size(kernel.numel)
    return KernelSource(name, "\n".join(lines) + "\n", kernel.call_args(), kernel.numel,
                        {"XBLOCK": xblock, "num_warps": num_warps})
# --8<-- [end:triton-kernel]

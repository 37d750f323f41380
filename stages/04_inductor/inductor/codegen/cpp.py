"""The C++ printer: one fused pointwise group -> one ``extern "C"`` function with OpenMP.

Input: a ``scheduler.FusedGroup``, the removed buffers and the name -> buffer map.
Output: ``KernelSource`` (shared with the Triton printer); ``codecache.CppCodeCache``
compiles it with the system compiler and loads it with ctypes.

Chapter: book/docs/inductor.md ("C++ kernels").

Loop shape: all loop variables but the innermost are flattened into one outer loop, which
``#pragma omp parallel for`` splits across cores when the loop is big enough to pay for
waking the threads; the innermost dimension is a plain contiguous loop, which the compiler
vectorises at ``-O3 -march=native``. Sizes are compiled in as constants (static shapes).

bfloat16 is stored as ``uint16_t`` (its top 16 bits of a float32) and computed in float;
the conversions are bit shifts with round-to-nearest-even, so no c10 headers are needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import sympy
import torch

from inductor.codegen.common import (
    CSEVariable,
    Kernel,
    Loop,
    identity,
    kernel_name,
    numel,
    plan_loops,
    print_index,
)
from inductor.codegen.triton import KernelSource
from inductor.scheduler import FusedGroup, SchedulerNode
from inductor.virtualized import is_indirect

PARALLEL_THRESHOLD = 32768  # elements; below this OpenMP's fork/join costs more than it saves

CPP_TYPES = {
    torch.float32: "float", torch.float64: "double", torch.bfloat16: "uint16_t",
    torch.float16: "_Float16", torch.int8: "int8_t", torch.uint8: "uint8_t",
    torch.int16: "int16_t", torch.int32: "int32_t", torch.int64: "int64_t",
    torch.bool: "bool",
}

# --8<-- [start:vector-math]
# [Note: vector math]
# gcc vectorises a loop only if every call in it has a vector variant. ``std::sin`` & co. are
# scalar libm calls, so a loop over ``sin(x)`` runs one element at a time, 4-8x slower than
# eager (whose at::vec kernels use SLEEF). glibc ships vector variants in libmvec
# (``_ZGVdN8v_sinf``: AVX2, 8 floats; documented to within 4 ulp, with the same NaN and
# infinity results as the scalar functions, which the tests check against eager).
# Declaring libm's functions with ``__attribute__((simd))``, as glibc's own headers do under
# -ffast-math, lets the vectoriser call them. We do NOT use -ffast-math: it lets gcc assume no
# NaN or infinity exists (``x != x`` folds to false) and reassociate sums, so NaN would not
# propagate as in eager. We do use ``-fno-math-errno``: without it a libm call may set errno,
# a side effect the vectoriser must keep; errno is not observable through torch, so dropping
# it changes no result. ``codecache.vector_math_flags`` probes once whether the compiler and
# libc can build this; if not, ``MINIPT2_VECTOR_MATH`` stays undefined and the same source
# compiles to scalar calls.
LIBMVEC_UNARY = ("sin", "cos", "tan", "exp", "expm1", "exp2", "log", "log1p", "log2", "erf",
                 "tanh", "sinh", "cosh", "asinh", "acosh", "atanh", "asin", "acos", "atan")
LIBMVEC_BINARY = ("pow", "atan2")


def vector_math_declarations() -> str:
    """``extern "C"`` re-declarations of libm functions with vector variants (floats and
    doubles); see [Note: vector math]."""
    simd = '__attribute__((simd("notinbranch")))'
    lines = []
    for fn in LIBMVEC_UNARY:
        lines += [f"{simd} float {fn}f(float) noexcept;", f"{simd} double {fn}(double) noexcept;"]
    for fn in LIBMVEC_BINARY:
        lines += [f"{simd} float {fn}f(float, float) noexcept;",
                  f"{simd} double {fn}(double, double) noexcept;"]
    return "\n".join(['extern "C" {', *lines, "}"])
# --8<-- [end:vector-math]


PRELUDE = r"""#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>
#ifdef MINIPT2_VECTOR_MATH
""" + vector_math_declarations() + r"""
#endif

static inline float bf16_to_float(uint16_t bits) {
    uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float out;
    std::memcpy(&out, &wide, sizeof(out));
    return out;
}

static inline uint16_t float_to_bf16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    if (std::isnan(value)) return 0x7fc0;
    bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest, ties to even
    return static_cast<uint16_t>(bits >> 16);
}

// erfinv (no std:: one): Giles' single-precision guess, then Newton steps on erf.
template <typename T> static inline T erfinv(T y) {
    if (y <= -1 || y >= 1) {
        if (y == 1) return std::numeric_limits<T>::infinity();
        if (y == -1) return -std::numeric_limits<T>::infinity();
        return std::numeric_limits<T>::quiet_NaN();
    }
    double w = -std::log((1.0 - y) * (1.0 + y)), x;
    if (w < 5.0) {
        w -= 2.5;
        x = 2.81022636e-08;
        for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                         -0.00125372503, -0.00417768164, 0.246640727, 1.50140941}) x = c + x * w;
    } else {
        w = std::sqrt(w) - 3.0;
        x = -0.000200214257;
        for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                         -0.0076224613, 0.00943887047, 1.00167406, 2.83297682}) x = c + x * w;
    }
    x *= y;
    for (int i = 0; i < 3; ++i)
        x -= (std::erf(x) - y) / (1.1283791670955126 * std::exp(-x * x));
    return static_cast<T>(x);
}

// NaN-propagating max/min, like torch.maximum (std::fmax ignores NaNs).
template <typename A, typename B> static inline auto nan_max(A a, B b) {
    using T = std::common_type_t<A, B>;
    T x = a, y = b;
    return x != x ? x : (y != y ? y : (x > y ? x : y));
}
template <typename A, typename B> static inline auto nan_min(A a, B b) {
    using T = std::common_type_t<A, B>;
    T x = a, y = b;
    return x != x ? x : (y != y ? y : (x < y ? x : y));
}

// 32 random bits for element `offset` of stream `stream`: Philox-4x32-10 with key `seed` and
// counter (offset, stream); the Triton kernels compute the same bits. See [Note: philox].
static inline uint32_t philox(int64_t seed, int64_t offset, uint32_t stream) {
    uint32_t c0 = static_cast<uint32_t>(offset), c1 = static_cast<uint32_t>(
        static_cast<uint64_t>(offset) >> 32), c2 = stream, c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(
        static_cast<uint64_t>(seed) >> 32);
    for (int round = 0; round < 10; ++round) {
        uint64_t p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
        uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
        c1 = static_cast<uint32_t>(p1);
        c3 = static_cast<uint32_t>(p0);
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c0;
}

// MINIPT2_DEBUG_ASSERTS: an index out of range stops the program, as a device assert does.
[[noreturn]] static void index_error(const char* what, long long value) {
    std::fprintf(stderr, "minipt2 kernel: %s (got %lld)\n", what, value);
    std::abort();
}
"""


def compute_type(dtype: torch.dtype) -> str:
    return "float" if dtype in (torch.bfloat16, torch.float16) else CPP_TYPES[dtype]


def _fn(name: str):
    return lambda *args, dtype: f"{name}({', '.join(map(str, args))})"


def _infix(op: str):
    return lambda a, b, dtype: f"({a} {op} {b})"


def _one(a: CSEVariable, dtype: torch.dtype) -> str:
    return f"static_cast<{compute_type(dtype)}>(1)"


# --8<-- [start:cpp-ops]
CPP_OPS = {
    "abs": _fn("std::abs"), "neg": lambda a, dtype: f"(-{a})",
    "sin": _fn("std::sin"), "cos": _fn("std::cos"), "tan": _fn("std::tan"),
    "tanh": _fn("std::tanh"), "exp": _fn("std::exp"), "expm1": _fn("std::expm1"),
    "log": _fn("std::log"), "log1p": _fn("std::log1p"), "sqrt": _fn("std::sqrt"),
    "rsqrt": lambda a, dtype: f"({_one(a, dtype)} / std::sqrt({a}))",
    "erf": _fn("std::erf"), "erfc": _fn("std::erfc"),
    "floor": _fn("std::floor"), "ceil": _fn("std::ceil"),
    "trunc": _fn("std::trunc"),
    "sinh": _fn("std::sinh"), "cosh": _fn("std::cosh"), "asinh": _fn("std::asinh"),
    "acosh": _fn("std::acosh"), "atanh": _fn("std::atanh"), "log2": _fn("std::log2"),
    "exp2": _fn("std::exp2"), "round": _fn("std::nearbyint"), "isinf": _fn("std::isinf"),
    "bitwise_not": lambda a, dtype: f"(~{a})",
    "asin": _fn("std::asin"), "acos": _fn("std::acos"), "atan": _fn("std::atan"),
    "atan2": _fn("std::atan2"), "lgamma": _fn("std::lgamma"), "erfinv": _fn("erfinv"),
    "reciprocal": lambda a, dtype: f"({_one(a, dtype)} / {a})",
    "sign": lambda a, dtype: f"static_cast<{compute_type(dtype)}>(({a} > 0) - ({a} < 0))",
    "isnan": lambda a, dtype: f"({a} != {a})",
    "logical_not": lambda a, dtype: f"({a} == 0)",
    "add": _infix("+"), "sub": _infix("-"), "mul": _infix("*"), "div": _infix("/"),
    "pow": _fn("std::pow"),
    "fmod": lambda a, b, dtype: f"std::fmod({a}, {b})" if dtype.is_floating_point
    else f"({a} % {b})",
    "maximum": _fn("nan_max"), "minimum": _fn("nan_min"),
    "eq": _infix("=="), "ne": _infix("!="), "lt": _infix("<"), "le": _infix("<="),
    "gt": _infix(">"), "ge": _infix(">="),
    "bitwise_and": _infix("&"), "bitwise_or": _infix("|"), "bitwise_xor": _infix("^"),
    "where": lambda p, a, b: f"({p} ? {a} : {b})",
}
# --8<-- [end:cpp-ops]


def _literal(value: Any, dtype: torch.dtype) -> str:
    ctype = compute_type(dtype)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return f"std::numeric_limits<{ctype}>::quiet_NaN()"
        if value in (float("inf"), -float("inf")):
            sign = "-" if value < 0 else ""
            return f"{sign}std::numeric_limits<{ctype}>::infinity()"
        return f"static_cast<{ctype}>({value!r})"
    return f"static_cast<{ctype}>({int(value)}LL)"


class CppKernel(Kernel):
    """Prints a fused group as a C++ loop nest."""

    OPS = CPP_OPS
    DIV = "/"

    def assign(self, var: CSEVariable, expr: str) -> str:
        # An explicit type, not auto: C++ promotes int8 + int8 to int, torch wraps to int8.
        return f"{compute_type(var.dtype)} {var} = {expr};"

    def load_expr(self, arg: str, index: str, dtype: torch.dtype, mask: str) -> str:
        raw = f"{arg}[{index}]"
        if mask:  # [Note: masked loads]: ?: reads memory only on the branch it takes
            raw = f"({mask} ? {raw} : static_cast<{CPP_TYPES[dtype]}>(0))"
        if dtype == torch.bfloat16:
            return f"bf16_to_float({raw})"
        if dtype == torch.float16:
            return f"static_cast<float>({raw})"
        return raw

    def store_line(self, arg: str, index: str, value: CSEVariable, dtype: torch.dtype,
                   mask: str) -> str:
        if dtype == torch.bfloat16:
            line = f"{arg}[{index}] = float_to_bf16({value});"
        else:
            line = f"{arg}[{index}] = static_cast<{CPP_TYPES[dtype]}>({value});"
        return f"if ({mask}) {line}" if mask else line

    AND = " && "

    def region_masks(self) -> list[str]:
        return []  # a masked region is an if block: its loads need no mask of their own

    def masked_value(self, mask: CSEVariable, inner: list[str], value: CSEVariable,
                     other: Any) -> CSEVariable:
        result = self.fresh(value.dtype)
        self.lines += [f"{compute_type(value.dtype)} {result} = {_literal(other, value.dtype)};",
                       f"if ({mask}) {{", *("    " + line for line in inner),
                       f"    {result} = {value};", "}"]
        return result

    def assert_line(self, var: str, cond: str, mask: str, message: str) -> str:
        check = f"!({cond})" if not mask else f"({mask}) && !({cond})"
        text = message.format(var).replace("\\", "").replace('"', "")
        return f'if ({check}) index_error("{text}", static_cast<long long>({var}));'

    def atomic_add_line(self, arg: str, index: str, value: CSEVariable, dtype: torch.dtype,
                        mask: str) -> str:
        line = f'_Pragma("omp atomic") {arg}[{index}] += static_cast<{CPP_TYPES[dtype]}>({value});'
        return f"if ({mask}) {{ {line} }}" if mask else f"{{ {line} }}"

    def rand_expr(self, seed: CSEVariable, offset: CSEVariable, stream: int,
                  dtype: torch.dtype) -> str:
        bits = f"philox({seed}, {offset}, {stream}u)"
        if dtype == torch.float64:
            return f"(static_cast<double>({bits}) * {2.0 ** -32!r})"
        keep = {torch.float32: 24, torch.bfloat16: 8, torch.float16: 11}[dtype]
        return f"(static_cast<float>({bits} >> {32 - keep}) * {2.0 ** -keep!r}f)"

    def constant_expr(self, value: Any, dtype: torch.dtype) -> str:
        return _literal(value, dtype)

    def index_expr_text(self, index: str, dtype: torch.dtype) -> str:
        return f"static_cast<{compute_type(dtype)}>({index})"

    def to_dtype_expr(self, x: CSEVariable, src: torch.dtype, dst: torch.dtype) -> str:
        if dst == torch.bfloat16:  # round to bf16, keep computing in float
            return f"bf16_to_float(float_to_bf16(static_cast<float>({x})))"
        if dst == torch.float16:
            return f"static_cast<float>(static_cast<_Float16>({x}))"
        return f"static_cast<{CPP_TYPES[dst]}>({x})"

    def params(self) -> str:
        ins = [f"const {CPP_TYPES[self.buffers[b].get_dtype()]}* __restrict__ {a}"
               for b, a in self.in_args.items()]
        outs = [f"{CPP_TYPES[self.buffers[b].get_dtype()]}* __restrict__ {a}"
                for b, a in self.out_args.items()]
        sizes = [f"const int64_t {s}" for s in self.size_params()]  # [Note: sizes as kernel
        return ", ".join(ins + outs + sizes)  # arguments]

    def pointwise_loops(self) -> list[str]:
        """The loop nest around the body: a parallel outer loop, a contiguous inner loop."""
        sizes, symbols = self.plan.sizes, self.plan.symbols
        body = ["    " + line for line in self.lines]
        if not sizes:
            return body
        inner = (f"for (int64_t {symbols[-1]} = 0; {symbols[-1]} < {self.size(sizes[-1])}; "
                 f"++{symbols[-1]})")
        work = self.size(self.numel)
        pragma = [parallel_pragma(work)] if self.parallel(self.numel) else []
        simd = [] if self.no_simd() else ["#pragma omp simd"]
        if len(sizes) == 1:  # one loop: split across threads, vectorise each thread's share
            both = [parallel_pragma(work, bool(simd))] if pragma else simd
            return [*both, inner + " {", *body, "}"]
        return [*pragma, f"for (int64_t xo = 0; xo < {self.size(numel(sizes[:-1]))}; ++xo) {{",
                *unflatten("xo", sizes[:-1], symbols[:-1]), *("    " + p for p in simd),
                "    " + inner + " {", *("    " + line for line in body), "    }", "}"]

    def parallel(self, work: Any) -> bool:
        """Worth splitting across threads? A symbolic amount of work decides at run time
        (``parallel_pragma``); speed only, any answer is correct."""
        return not isinstance(work, int) or work >= PARALLEL_THRESHOLD

    def has_scatter(self) -> bool:
        """Whether the kernel stores at indirect indices: two iterations may then write the
        same element, so its loops are never ``omp simd`` (lanes would lose updates)."""
        return any(is_indirect(index) for node in self.group.nodes
                   for _, index in node.accesses(self.space).writes)

    def no_simd(self) -> bool:
        """Whether the kernel's loops go without ``omp simd``: a scatter, or an indirect
        load ([Note: no omp simd around a gather])."""
        return self.has_scatter() or any(
            is_indirect(index) for node in self.group.nodes
            for _, index in node.accesses(self.space).reads)

    def reduction_loops(self) -> list[str]:
        """One (parallel) loop over output rows; inside it, the loops over r and "x" code.
        A reduction down the columns gets the loops the other way round: see
        ``column_loops``."""
        column = self.column_loops()
        if column is not None:
            return column
        body = ["    " + line for line in self.lines]
        sizes, symbols = self.plan.sizes, self.plan.symbols
        if not sizes:
            return ["{", *body, "}"]
        work = self.numel * self.rnumel
        parallel = self.numel != 1 and self.parallel(work)
        return [*([parallel_pragma(self.size(work))] if parallel else []),
                f"for (int64_t xo = 0; xo < {self.size(self.numel)}; ++xo) {{",
                *unflatten("xo", sizes, symbols), *body, "}"]

    # --8<-- [start:column-reductions]
    # [Note: column reductions on the CPU]
    # A bias gradient sums a (batch, features) tensor over the batch: the reduced index r
    # walks down the columns, a row's length apart in memory, and each output x is one
    # column. The usual nest (one x per iteration of the outer loop, r inside it, split in
    # lanes for ``omp simd``) then reads one float per cache line, and its "vector" loads are
    # gathers: two such sums of 512 x 512 floats took 0.58 ms on the 2-core CPU machine where
    # eager's ``sum(0)`` took 0.10. Read the other way round, the same work is contiguous:
    # take ``XLANES`` neighbouring columns at a time, keep one accumulator per column in a
    # small array, and for each r add a whole row segment into it (``omp simd`` over the
    # columns: plain vector loads and adds); the stores follow, one per column. This is the
    # same lanes trick as [Note: accumulator lanes], with the lanes across x instead of r,
    # and it applies when every read moves by one element with x and none does with r
    # (one loop over r, sums, products, max or min; static sizes).
    XLANES = 32

    def column_loops(self) -> list[str] | None:
        """The loop nest of a reduction down columns, or None when it is not one."""
        if len(self.loops) != 1 or self.kept or self.no_simd():
            return None
        loop, start, count = self.loops[0]
        if start or loop.combine or not loop.accumulators or any(
                op not in COMBINE for op, _ in loop.accumulators):
            return None
        n, rn = self.numel, self.rnumel
        if not (isinstance(n, int) and isinstance(rn, int)) or n % self.XLANES or \
                len(self.plan.sizes) != 1 or len(self.rplan.sizes) != 1:
            return None
        x, r = self.plan.symbols[0], self.rplan.symbols[0]
        reads = [sympy.expand(self.rewrite(index)) for node in self.group.nodes
                 for _, index in node.accesses(self.space).reads]
        if not any(i.has(r) for i in reads) or any(
                (i.has(x) and i.coeff(x) != 1) or i.coeff(r) == 1 for i in reads):
            return None
        lanes, accs = self.XLANES, [acc for _, acc in loop.accumulators]
        at_x = f"const int64_t {x} = xb + xl;"
        work = n * rn
        return [
            *([parallel_pragma(str(work))] if n > lanes and self.parallel(work) else []),
            f"for (int64_t xb = 0; xb < {n}; xb += {lanes}) {{",
            *("    " + line for line in loop.prefix),
            *(f"    decltype({a}) {a}_lanes[{lanes}];" for a in accs),
            f"    for (int64_t xl = 0; xl < {lanes}; ++xl) {{",
            *(f"        {a}_lanes[xl] = {a};" for a in accs), "    }",
            f"    for (int64_t {r} = 0; {r} < {rn}; ++{r}) {{",
            "        #pragma omp simd",
            f"        for (int64_t xl = 0; xl < {lanes}; ++xl) {{", f"            {at_x}",
            *(f"            auto& {a} = {a}_lanes[xl];" for a in accs),
            *("            " + line for line in loop.body), "        }", "    }",
            f"    for (int64_t xl = 0; xl < {lanes}; ++xl) {{", f"        {at_x}",
            *(f"        auto {a} = {a}_lanes[xl];" for a in accs),
            *("        " + line for line in [*loop.suffix, *self.lines[start + count:]]),
            "    }", "}"]
    # --8<-- [end:column-reductions]

    @contextlib.contextmanager
    def loop_over_r(self) -> Iterator[Loop]:
        start = len(self.lines)
        with super().loop_over_r() as loop:
            yield loop
        self.loops.append((loop, start, len(self.lines) - start))

    # ---- values kept for later loops over r: see [Note: row scratch] -------------------
    def generate_looped_body(self) -> None:
        self.keep = kept_nodes(self.group.nodes, self.placements, self.rnumel)
        self.kept: dict[tuple[str, str], tuple[str, torch.dtype]] = {}
        self.loops: list[tuple[Loop, int, int]] = []  # (loop over r, its first line, lines)
        super().generate_looped_body()
        arrays = dict.fromkeys(self.kept.values())
        self.lines[:0] = [f"alignas(64) {compute_type(dtype)} {arr}[{self.rnumel}];"
                          for arr, dtype in arrays]

    def rvar(self) -> str:
        return str(self.rplan.symbols[0]) if len(self.rplan.sizes) == 1 else "ro"

    def load(self, name: str, index: Any) -> CSEVariable:
        key = (name, self.index(index))
        if self.loop is not None and key in self.kept and self.lookup("stored", key) is None:
            arr, dtype = self.kept[key]
            return self.new_var(f"{arr}[{self.rvar()}]", dtype)
        return super().load(name, index)

    def store(self, name: str, index: Any, value: CSEVariable, mode: str | None = None) -> None:
        super().store(name, index, value, mode)
        key = (name, self.index(index))
        if self.loop is not None and name in self.keep and key not in self.kept:
            self.kept[key] = (f"row_{name}_{len(self.kept)}", value.dtype)
            self.lines.append(f"{self.kept[key][0]}[{self.rvar()}] = {value};")

    # ---- reductions: accumulate in registers inside a loop over r ----------------------
    # --8<-- [start:cpp-accumulate]
    def accumulate(self, loop: Loop, result: CSEVariable, value: CSEVariable,
                   reduction_type: str, dtype: torch.dtype) -> None:
        """Declare an accumulator in ``loop.prefix``, update it in the body, and assign the
        row's ``result`` in ``loop.suffix``; ``loop.accumulators`` gets ``(op, name)`` pairs
        for the ``omp simd reduction(op:name)`` clause that lets gcc vectorise the loop."""
        if reduction_type in ("argmax", "argmin"):
            return self.accumulate_arg(loop, result, value, reduction_type)
        # BEGIN EXERCISE inductor-cpp-reduction: accumulate a reduction in a vectorisable loop
        acc = self.fresh(dtype, "acc")
        ctype = accumulator_type(dtype)
        loop.prefix.append(f"{ctype} {acc} = {_literal(identity(reduction_type, dtype), dtype)};")
        nan = reduction_type in ("max", "min") and dtype.is_floating_point
        if reduction_type in ("sum", "prod"):
            op = "+" if reduction_type == "sum" else "*"
            self.lines.append(f"{acc} = {acc} {op} {value};")
        else:
            op = reduction_type
            better = ">" if reduction_type == "max" else "<"
            self.lines.append(f"{acc} = {value} {better} {acc} ? {value} : {acc};")
        loop.accumulators.append((op, str(acc)))
        final = str(acc)
        if nan:  # max/min that propagate NaN: a flag reduced with |; int32, not bool, so
            # gcc vectorises it (a bool flag kept this loop scalar: 8x slower)
            loop.prefix.append(f"int32_t {acc}_nan = 0;")
            self.lines.append(f"{acc}_nan = {acc}_nan | ({value} != {value});")
            loop.accumulators.append(("|", f"{acc}_nan"))
            final = f"{acc}_nan ? std::numeric_limits<{ctype}>::quiet_NaN() : {acc}"
        loop.suffix.append(self.assign(result, final))
        # END EXERCISE inductor-cpp-reduction
    # --8<-- [end:cpp-accumulate]

    # --8<-- [start:cpp-argmax-welford]
    def accumulate_arg(self, loop: Loop, result: CSEVariable, value: CSEVariable,
                       reduction_type: str) -> None:
        """argmax/argmin: the best value so far and its position (-1: none yet). Elements
        come in increasing order, so a tie keeps the earlier one; lanes of the split loop
        ([Note: split accumulators]) interleave positions, so combining them compares
        positions on ties."""
        acc = self.fresh(value.dtype, "acc")
        at, take = f"{acc}_at", self.fresh(torch.bool)
        kind = reduction_type[3:]
        neutral = _literal(identity(kind, value.dtype), value.dtype)
        loop.prefix += [f"{accumulator_type(value.dtype)} {acc} = {neutral};",
                        f"int64_t {at} = -1;"]
        wins = arg_wins(kind, value.dtype.is_floating_point)
        self.lines += [f"const bool {take} = {at} < 0 || {wins(value, acc)};",
                       f"{acc} = {take} ? {value} : {acc};",
                       f"{at} = {take} ? {self.rvar()} : {at};"]
        loop.accumulators += [("lane", str(acc)), ("lane", at)]
        lane, lane_at = f"{acc}_lanes[rl]", f"{at}_lanes[rl]"
        same = (f"({lane} == {acc} || ({lane} != {lane} && {acc} != {acc}))"
                if value.dtype.is_floating_point else f"{lane} == {acc}")
        loop.combine += [f"if ({lane_at} >= 0 && ({at} < 0 || {wins(lane, acc)} || "
                         f"({same} && {lane_at} < {at}))) {{",
                         f"    {acc} = {lane};", f"    {at} = {lane_at};", "}"]
        loop.suffix.append(self.assign(result, at))

    def welford_accumulate(self, loop: Loop, mean: CSEVariable, m2: CSEVariable,
                           value: CSEVariable) -> None:
        """Welford's update (count n, mean and m2 of the values minus the first one, k) in
        one pass; the split loop's lanes are combined as Chan et al. do. A plain sum gives
        eager's mean where an infinity makes the shifted one NaN. See [Note: welford]."""
        acc, ctype = self.fresh(value.dtype, "acc"), accumulator_type(value.dtype)
        n, k, avg, sq, total = (f"{acc}_{part}" for part in ("n", "k", "mean", "m2", "sum"))
        rel, delta = self.fresh(value.dtype), self.fresh(value.dtype)
        loop.prefix += [f"{ctype} {name} = 0;" for name in (n, k, avg, sq, total)]
        self.lines += [f"{n} = {n} + 1;", f"{k} = {n} == 1 ? {value} : {k};",
                       f"const {ctype} {rel} = {value} - {k};",
                       f"const {ctype} {delta} = {rel} - {avg};",
                       f"{avg} = {avg} + {delta} / {n};",
                       f"{sq} = {sq} + {delta} * ({rel} - {avg});",
                       f"{total} = {total} + {value};"]
        loop.accumulators += [("lane", n), ("lane", k), ("lane", avg), ("lane", sq),
                              ("+", total)]
        lane = {name: f"{name}_lanes[rl]" for name in (n, k, avg, sq)}
        loop.combine += [f"if ({lane[n]} > 0 && {n} == 0) {{",
                         *(f"    {name} = {lane[name]};" for name in (n, k, avg, sq)),
                         f"}} else if ({lane[n]} > 0) {{",
                         f"    const {ctype} count = {n} + {lane[n]};",
                         f"    const {ctype} d = ({lane[k]} - {k}) + ({lane[avg]} - {avg});",
                         f"    {avg} = {avg} + d * ({lane[n]} / count);",
                         f"    {sq} = {sq} + {lane[sq]} + d * d * ({n} * {lane[n]} / count);",
                         f"    {n} = count;", "}"]
        shifted = f"({k} + {avg})"
        loop.suffix += [self.assign(mean, f"{shifted} != {shifted} ? {total} / {n} : {shifted}"),
                        self.assign(m2, sq)]
    # --8<-- [end:cpp-argmax-welford]

    def loop_lines(self, loop: Loop) -> list[str]:
        sizes, symbols = self.rplan.sizes, self.rplan.symbols
        var = str(symbols[0]) if len(sizes) == 1 else "ro"
        inner = [] if len(sizes) == 1 else unflatten("ro", sizes, symbols)
        body = [*inner, *("    " + line for line in loop.body)]
        split = 0
        lanes = all(op in COMBINE or op == "lane" for op, _ in loop.accumulators)
        if loop.accumulators and lanes and not self.no_simd():
            if not isinstance(self.rnumel, int):  # a symbolic row: split, and always a tail
                split = f"({self.size(self.rnumel)} / {LANES} * {LANES})"
            else:
                split = self.rnumel // LANES * LANES if self.rnumel >= 2 * LANES else 0
        lines = [*loop.prefix, *(split_accumulator_loop(loop, var, body, split) if split else [])]
        if not isinstance(self.rnumel, int) or split < self.rnumel:  # the whole loop, or the
            clauses = " ".join(f"reduction({op}:{acc})" for op, acc in loop.accumulators)
            simd = not loop.combine and not self.no_simd()  # tail the split loop leaves
            lines += [f"#pragma omp simd {clauses}".rstrip()] if simd else []
            lines += [f"for (int64_t {var} = {split}; {var} < {self.size(self.rnumel)}; "
                      f"++{var}) {{", *body, "}"]
        return [*lines, *loop.suffix]


def parallel_pragma(work: str, simd: bool = False) -> str:
    """``omp parallel for`` (``simd``: also vectorised); for a symbolic amount of ``work``,
    with a run-time ``if`` clause."""
    directive = "#pragma omp parallel for" + (" simd" if simd else "")
    if work.isdigit():
        return directive
    return f"{directive} if({work} >= {PARALLEL_THRESHOLD})"


def arg_wins(kind: str, floating: bool):
    """``wins(a, b)``: C++ for "a beats b" in an argmax (kind "max") or argmin: greater
    (smaller), or NaN where b is not."""
    better = ">" if kind == "max" else "<"
    if not floating:
        return lambda a, b: f"({a} {better} {b})"
    return lambda a, b: f"({a} {better} {b} || ({a} != {a} && {b} == {b}))"


# [Note: no omp simd around a gather]
# A loop that loads at computed indices (``w[target[r]]``, an embedding row) is printed
# without ``#pragma omp simd``. With the pragma, g++ 13.3 at -O3 -march=native on an
# AVX-512 host (the GPU machine's Xeon) miscompiled a weighted cross entropy's reduction:
# two ``omp simd reduction`` accumulators over a loop with two masked gathers summed to
# 4.03 where the answer is 25.26, and the compiled loss came out NaN. The same source
# without the pragma, or for AVX2, was right; g++ still vectorises such a pointwise loop
# where it can prove it safe, and a reduction over gathered values is bound by the gathers.
# (Checked on that host with a standalone copy of the kernel; no AVX-512 on the CPU
# machine, so the test there checks the printed loops.)

# [Note: split accumulators]
# ``#pragma omp simd reduction(+:acc)`` gives gcc one vector accumulator, so every iteration
# waits for the previous add (3-4 cycles of latency for 8 floats): a row that sits in L1
# reduces at a fraction of the core's add throughput, and layer norm's two reduction loops
# were slower than eager's. Without -ffast-math gcc may not reassociate into more
# accumulators itself, so the printer does it: each accumulator gets LANES partial copies
# (``acc_lanes[l]``, reached through a reference named like the accumulator so the body's text
# is unchanged); the loop runs over blocks of LANES, lane l takes elements l, l + LANES, ...,
# and the copies are combined after the loop (itself an ``omp simd`` reduction: a scalar
# chain of 32 dependent adds cost more per row than it saved). That is 4 independent AVX2
# vectors per accumulator. Only the order of a sum changes (as omp simd's already did); max,
# min and the NaN flags give the same result in any order.
LANES = 32
COMBINE = {"+": "{acc} + {lane}", "*": "{acc} * {lane}", "|": "{acc} | {lane}",
           "max": "{lane} > {acc} ? {lane} : {acc}", "min": "{lane} < {acc} ? {lane} : {acc}"}


def split_accumulator_loop(loop: Loop, var: str, body: list[str], split: int) -> list[str]:
    """Elements ``[0, split)`` of a reduction loop with LANES copies of each accumulator;
    see [Note: split accumulators]."""
    lanes = [(op, acc, f"{acc}_lanes") for op, acc in loop.accumulators]
    combine = [f"        {acc} = {COMBINE[op].format(acc=acc, lane=f'{arr}[rl]')};"
               for op, acc, arr in lanes if op in COMBINE]
    clauses = " ".join(f"reduction({op}:{acc})" for op, acc in loop.accumulators
                       if op in COMBINE)
    simple = [f"    #pragma omp simd {clauses}", f"    for (int64_t rl = 0; rl < {LANES}; ++rl) {{",
              *combine, "    }"] if combine else []
    custom = [f"    for (int64_t rl = 0; rl < {LANES}; ++rl) {{",  # argmax, welford: in order
              *("        " + line for line in loop.combine), "    }"] if loop.combine else []
    return [
        "{", *(f"    decltype({acc}) {arr}[{LANES}];" for _, acc, arr in lanes),
        f"    for (int64_t rl = 0; rl < {LANES}; ++rl) {{",
        *(f"        {arr}[rl] = {acc};" for _, acc, arr in lanes), "    }",
        f"    for (int64_t rb = 0; rb < {split}; rb += {LANES}) {{", "        #pragma omp simd",
        f"        for (int64_t rl = 0; rl < {LANES}; ++rl) {{",
        f"            const int64_t {var} = rb + rl;",
        *(f"            auto& {acc} = {arr}[rl];" for _, acc, arr in lanes),
        *("        " + line for line in body), "        }", "    }",
        *simple, *custom, "}",
    ]


# [Note: row scratch]
# A looped reduction kernel recomputes, in a later loop over r, the values an earlier loop
# computed (the scheduler keeps no per-element buffer inside a kernel). That is free for
# ``x * 0.125`` but not for softmax's ``exp``: its last loop, ``exp(x - max) / sum``,
# would evaluate exp a second time per element, which made softmax slower than eager (eager
# stores the exps in its sum pass and rescales them). So a value that costs a libm call and
# is read by a later loop is also written, in its own loop, to a per-row scratch array on the
# thread's stack (``row_<buf>_<k>[r]``, at most ROW_SCRATCH elements, so it stays in L1/L2);
# the later loop reads it back at the same r instead of recomputing. The same index text
# at the same r is the same element, so the value read is the one the recomputation gives.
ROW_SCRATCH = 8192  # elements: at most 64 KiB a row, well inside a thread's stack
EXPENSIVE = {*LIBMVEC_UNARY, *LIBMVEC_BINARY, "erfinv", "lgamma"}


def kept_nodes(nodes: list[SchedulerNode], placements: dict[str, Any], rnumel: int) -> set:
    """Names of pointwise nodes in a loop over r that a later loop reads and whose
    recomputation costs a libm call; see [Note: row scratch]."""
    if not isinstance(rnumel, int) or rnumel > ROW_SCRATCH:  # (a symbolic row: no scratch)
        return set()
    block_of = {n.name: k for k, block in enumerate(plan_loops(nodes, placements))
                if isinstance(block, list) for n in block}
    by_name = {n.name: n for n in nodes}

    def costly(name: str, seen: set) -> bool:  # the node or what it recomputes calls libm
        node = by_name[name]
        seen.add(name)
        return bool(EXPENSIVE & set(node.op_names)) or any(
            costly(r, seen) for r, _ in node.reads
            if r in by_name and r not in seen and block_of.get(r) == block_of[name]
            and not by_name[r].is_reduction())

    return {r for n in nodes if n.name in block_of for r, _ in n.reads
            if block_of.get(r, block_of[n.name]) < block_of[n.name]
            and not by_name[r].is_reduction() and costly(r, set())}


def unflatten(flat: str, sizes: list[Any], symbols: list[Any]) -> list[str]:
    """``const int64_t x_k = (flat / inner) % size_k;`` for each dim (outer to inner)."""
    if len(sizes) == 1:
        return [f"    const int64_t {symbols[0]} = {flat};"]
    lines, step = [], 1
    for k in reversed(range(len(sizes))):
        expr = flat if step == 1 else f"({flat} / {print_index(step, '/')})"
        expr = expr if k == 0 else f"{expr} % {print_index(sizes[k], '/')}"
        lines.append(f"    const int64_t {symbols[k]} = {expr};")
        step = step * sizes[k]
    return list(reversed(lines))


def accumulator_type(dtype: torch.dtype) -> str:
    if dtype.is_floating_point:
        return "double" if dtype == torch.float64 else "float"
    return "int64_t"


# --8<-- [start:cpp-kernel]
def generate_cpp_kernel(group: FusedGroup, removed: set[str], buffers: dict[str, Any],
                        number: int) -> KernelSource:
    """Print ``group`` as ``extern "C" void name(pointers...)`` running its loop nest."""
    kernel = CppKernel(group, removed, buffers)
    if group.is_reduction():
        kernel.generate_looped_body()
        loops = kernel.reduction_loops()
    else:
        kernel.generate_body()
        loops = kernel.pointwise_loops()
    name = kernel_name("cpp", group, number)
    lines = [
        *kernel.header("//"),
        PRELUDE,
        f'extern "C" void {name}({kernel.params()}) {{',
        *("    " + line for line in loops),
        "}",
    ]
    return KernelSource(name, "\n".join(lines) + "\n", kernel.call_args(), kernel.numel, {},
                        size_vars=kernel.size_params())
# --8<-- [end:cpp-kernel]

"""What the Triton and C++ printers share: index plans, index printing, CSE, kernel args.

Input: a ``scheduler.FusedGroup`` (pointwise nodes over the same ranges) and the set of
buffers that live only inside the kernel.
Output: ``Kernel``, an ops handler that turns the group's loop bodies into lines of code;
subclasses (``TritonKernel``, ``CppKernel``) say how each op is spelled.

Chapter: book/docs/inductor.md ("Code generation").

[Note: collapsing dims]
A kernel iterates over a flat position and must recover per-dim indices with ``//`` and
``%``, which cost time. Two adjacent dims (outer a, inner b, sizes n_a, n_b) can be iterated
as one of size n_a * n_b when every index expression in the kernel is linear in both with
coefficient(a) == coefficient(b) * n_b: then c_b * (n_b * a + b) is just c_b * y. A fully
contiguous elementwise kernel collapses to a single index, and the loads become ``ptr[x0]``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from primtorch import prims

from inductor.ir import FloorDiv, index_vars
from inductor.scheduler import FusedGroup
from inductor.virtualized import ReadWritesHandler, V


@dataclasses.dataclass(frozen=True)
class CSEVariable:
    """A named temporary in generated code, with the dtype of the value it holds."""

    name: str
    dtype: torch.dtype

    def __str__(self) -> str:
        return self.name


@dataclasses.dataclass
class IndexPlan:
    """The kernel's loop variables after collapsing (outer to inner), and how to rewrite
    the bodies' index symbols into them."""

    sizes: list[int]
    symbols: list[sympy.Symbol]
    replacements: dict[sympy.Symbol, sympy.Expr]

    def rewrite(self, index: sympy.Expr) -> sympy.Expr:
        return sympy.expand(sympy.sympify(index).xreplace(self.replacements))


def _mergeable(outer: sympy.Symbol, inner: sympy.Symbol, inner_size: int,
               exprs: Sequence[sympy.Expr]) -> bool:
    for e in exprs:
        for atom in e.atoms(FloorDiv, sympy.Mod):
            if atom.free_symbols & {outer, inner}:
                return False
        d_outer, d_inner = sympy.diff(e, outer), sympy.diff(e, inner)
        if d_outer.free_symbols & {outer, inner} or d_inner.free_symbols & {outer, inner}:
            return False
        if d_outer.has(sympy.Derivative) or d_inner.has(sympy.Derivative):
            return False  # nonlinear (e.g. FloorDiv of the symbol)
        if sympy.simplify(d_outer - d_inner * inner_size) != 0:
            return False
    return True


def plan_indices(ranges: Sequence[sympy.Expr], exprs: Sequence[sympy.Expr]) -> IndexPlan:
    """Collapse adjacent dims where legal; see [Note: collapsing dims]."""
    dims = [(sym, int(size)) for sym, size in zip(index_vars(ranges), ranges)
            if isinstance(sym, sympy.Symbol)]
    exprs = [sympy.expand(sympy.sympify(e)) for e in exprs]
    replacements: dict[sympy.Symbol, sympy.Expr] = {}
    k = len(dims) - 2
    while k >= 0:
        (outer, n_outer), (inner, n_inner) = dims[k], dims[k + 1]
        if _mergeable(outer, inner, n_inner, exprs):
            exprs = [sympy.expand(e.xreplace({outer: sympy.Integer(0)})) for e in exprs]
            replacements = {s: r.xreplace({outer: sympy.Integer(0)})
                            for s, r in replacements.items()}
            replacements[outer] = sympy.Integer(0)
            dims[k:k + 2] = [(inner, n_outer * n_inner)]
        k -= 1
    final = [sympy.Symbol(f"x{j}", integer=True, nonnegative=True) for j in range(len(dims))]
    rename = {sym: new for (sym, _), new in zip(dims, final)}
    for sym in index_vars(ranges):
        if isinstance(sym, sympy.Symbol):
            replacements[sym] = replacements.get(sym, sym).xreplace(rename)
    return IndexPlan([n for _, n in dims], final, replacements)


def print_index(expr: sympy.Expr, div: str = "//") -> str:
    """Print an integer index expression; ``div`` is ``//`` (Python, Triton) or ``/`` (C)."""
    expr = sympy.sympify(expr)
    if isinstance(expr, FloorDiv):
        return f"({print_index(expr.args[0], div)} {div} {print_index(expr.args[1], div)})"
    if isinstance(expr, sympy.Mod):
        return f"({print_index(expr.args[0], div)} % {print_index(expr.args[1], div)})"
    if isinstance(expr, sympy.Add):
        terms = sorted(expr.args, key=sympy.default_sort_key)
        return "(" + " + ".join(print_index(t, div) for t in terms) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + "*".join(print_index(t, div) for t in expr.args) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
        return "(" + "*".join([print_index(expr.base, div)] * int(expr.exp)) + ")"
    if expr.is_Integer or expr.is_Symbol:
        return str(expr)
    raise NotImplementedError(f"cannot print index expression {expr}")


def kernel_name(prefix: str, group: FusedGroup, number: int) -> str:
    """``<prefix>_fused_<first few op names>_<number>``: stable and meaningful."""
    names: list[str] = []
    for node in group.nodes:
        for op in node.op_names:
            if op not in names and op not in ("constant", "index_expr"):
                names.append(op)
    return f"{prefix}_fused_{'_'.join(names[:6]) or 'copy'}_{number}"


class Kernel:
    """An ops handler that prints one fused group as straight-line code.

    Subclasses provide ``OPS`` (op name -> function of argument strings and input dtype
    returning an expression) and the spelling of loads, stores, constants and casts.
    """

    OPS: dict[str, Callable[..., str]] = {}

    def __init__(self, group: FusedGroup, removed: set[str], buffers: dict[str, Any]) -> None:
        self.group, self.removed, self.buffers = group, removed, buffers
        self.body: list[str] = []
        self.cse: dict[str, CSEVariable] = {}
        self.stored: dict[tuple[str, str], CSEVariable] = {}
        self.in_args: dict[str, str] = {}  # buffer name -> kernel arg name
        self.out_args: dict[str, str] = {}
        handler = ReadWritesHandler()
        with V.set_ops_handler(handler):
            self.run_bodies()
        self.plan = plan_indices(group.ranges, handler.indices)
        self.numel = math.prod(int(s) for s in group.ranges)

    def run_bodies(self) -> None:
        for node in self.group.nodes:
            buf = node.buffer
            buf.data.store_output(buf.name, buf.layout, index_vars(buf.layout.size))

    def generate_body(self) -> None:
        with V.set_ops_handler(self):
            self.run_bodies()

    def new_var(self, expr: str, dtype: torch.dtype) -> CSEVariable:
        """Common subexpression elimination: the same text gives the same temporary."""
        if expr not in self.cse:
            var = CSEVariable(f"tmp{len(self.cse)}", dtype)
            self.body.append(self.assign(var, expr))
            self.cse[expr] = var
        return self.cse[expr]

    def index(self, index: sympy.Expr) -> str:
        return print_index(self.plan.rewrite(index), self.DIV)

    # ---- the ops handler API ------------------------------------------------------
    def load(self, name: str, index: sympy.Expr) -> CSEVariable:
        key = (name, self.index(index))
        if key in self.stored:  # written earlier in this kernel: reuse the value
            return self.stored[key]
        if name not in self.in_args:
            self.in_args[name] = f"in_ptr{len(self.in_args)}"
        dtype = self.buffers[name].get_dtype()
        return self.new_var(self.load_expr(self.in_args[name], key[1], dtype), dtype)

    def store(self, name: str, index: sympy.Expr, value: CSEVariable) -> None:
        key = (name, self.index(index))
        self.stored[key] = value
        if name in self.removed:
            return
        self.out_args[name] = f"out_ptr{len(self.out_args)}"
        self.body.append(self.store_line(self.out_args[name], key[1], value,
                                         self.buffers[name].get_dtype()))

    def constant(self, value: Any, dtype: torch.dtype) -> CSEVariable:
        return self.new_var(self.constant_expr(value, dtype), dtype)

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> CSEVariable:
        return self.new_var(self.index_expr_text(self.index(expr), dtype), dtype)

    def to_dtype(self, x: CSEVariable, dtype: torch.dtype) -> CSEVariable:
        return self.new_var(self.to_dtype_expr(x, x.dtype, dtype), dtype)

    def where(self, pred: CSEVariable, a: CSEVariable, b: CSEVariable) -> CSEVariable:
        return self.new_var(self.OPS["where"](pred, a, b), a.dtype)

    def __getattr__(self, name: str) -> Callable[..., CSEVariable]:
        if name not in self.OPS:
            raise AttributeError(name)

        def op(*args: CSEVariable) -> CSEVariable:
            dtype = torch.bool if name in prims.BOOL_RESULT else args[0].dtype
            return self.new_var(self.OPS[name](*args, dtype=args[0].dtype), dtype)

        return op

    # ---- what subclasses spell ------------------------------------------------------
    DIV = "//"

    def assign(self, var: CSEVariable, expr: str) -> str:
        raise NotImplementedError

    def load_expr(self, arg: str, index: str, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def store_line(self, arg: str, index: str, value: CSEVariable, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def constant_expr(self, value: Any, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def index_expr_text(self, index: str, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def to_dtype_expr(self, x: CSEVariable, src: torch.dtype, dst: torch.dtype) -> str:
        raise NotImplementedError

    def call_args(self) -> list[str]:
        """Buffer names in the order the kernel takes them: inputs, then outputs."""
        return list(self.in_args) + list(self.out_args)

    def header(self, comment: str) -> list[str]:
        names = ", ".join(n.name for n in self.group.nodes)
        sizes = ", ".join(str(s) for s in self.group.ranges)
        return [f"{comment} Fused kernel for {names} over [{sizes}]; ops: "
                f"{', '.join(dict.fromkeys(o for n in self.group.nodes for o in n.op_names))}",
                f"{comment} Generated by minipt2 inductor; see book/docs/inductor.md"]

"""What the Triton and C++ printers share: index plans, index printing, CSE, kernel args.

Input: a ``scheduler.FusedGroup`` (nodes placed in one kernel space) and the set of
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

import contextlib
import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sympy
import torch
from primtorch import prims

from inductor.ir import FloorDiv, index_vars
from inductor.scheduler import FusedGroup, Placement, SchedulerNode
from inductor.virtualized import V


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


def plan_indices(ranges: Sequence[sympy.Expr], exprs: Sequence[sympy.Expr],
                 prefix: str = "i", out_prefix: str = "x") -> IndexPlan:
    """Collapse adjacent dims where legal; see [Note: collapsing dims]. The dims' symbols are
    ``index_vars(ranges, prefix)``; the kernel's loop variables are ``<out_prefix>0, ...``."""
    dims = [(sym, int(size)) for sym, size in zip(index_vars(ranges, prefix), ranges)
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
    final = [sympy.Symbol(f"{out_prefix}{j}", integer=True, nonnegative=True)
             for j in range(len(dims))]
    rename = {sym: new for (sym, _), new in zip(dims, final)}
    for sym in index_vars(ranges, prefix):
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


@dataclasses.dataclass
class Scope:
    """What straight-line code can reuse: temporaries by expression text (CSE), and values
    stored earlier in the kernel by (buffer, index). A loop over r opens a new scope."""

    cse: dict[str, CSEVariable] = dataclasses.field(default_factory=dict)
    stored: dict[tuple[str, str], CSEVariable] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Loop:
    """One loop over the reduced elements: set-up lines, the body, and lines after it."""

    prefix: list[str] = dataclasses.field(default_factory=list)
    body: list[str] = dataclasses.field(default_factory=list)
    suffix: list[str] = dataclasses.field(default_factory=list)
    accumulators: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def plan_loops(nodes: list[SchedulerNode], placements: dict[str, Placement]) -> list:
    """The order a looped reduction kernel runs its nodes in: "x" nodes once per row, the
    others in loops over r (a list of nodes). A loop ends before a node that reads a
    reduction computed in it; see [Note: reduction fusion]."""
    blocks: list = []
    loop: list | None = None
    loop_at, reduced = 0, set()
    for node in nodes:
        needs = {name for name, _ in node.reads} & reduced
        if placements[node.name].kind == "x":
            if needs:
                loop, reduced = None, set()
            if loop is None:
                blocks.append(node)
            else:  # independent of the open loop: run it before the loop
                blocks.insert(loop_at, node)
                loop_at += 1
            continue
        if loop is None or needs:
            loop, reduced, loop_at = [], set(), len(blocks)
            blocks.append(loop)
        loop.append(node)
        if node.is_reduction():
            reduced.add(node.name)
    return blocks


class Kernel:
    """An ops handler that prints one fused group as code.

    Subclasses provide ``OPS`` (op name -> function of argument strings and input dtype
    returning an expression) and the spelling of loads, stores, constants, casts and
    reductions. Code goes to ``self.lines``; inside a loop over r that is the loop's body.
    """

    OPS: dict[str, Callable[..., str]] = {}

    def __init__(self, group: FusedGroup, removed: set[str], buffers: dict[str, Any]) -> None:
        self.group, self.removed, self.buffers = group, removed, buffers
        self.space = group.space
        self.placements = dict(zip((n.name for n in group.nodes), group.placements()))
        self.nodes = {n.name: n for n in group.nodes}
        self.lines: list[str] = []
        self.scopes = [Scope()]
        self.loop: Loop | None = None
        self.counter = itertools.count()
        self.in_args: dict[str, str] = {}  # buffer name -> kernel arg name
        self.out_args: dict[str, str] = {}
        indices = [e for n in group.nodes for e in n.accesses(self.space).indices]
        self.plan = plan_indices(self.space[0], indices, "i", "x")
        self.rplan = plan_indices(self.space[1], indices, "j", "r")
        self.numel = math.prod(int(s) for s in self.space[0])
        self.rnumel = math.prod(int(s) for s in self.space[1])

    def run_node(self, node: SchedulerNode) -> None:
        node.run(self.placements[node.name])

    def generate_body(self) -> None:
        """Every node in program order, in one scope (pointwise and persistent kernels)."""
        with V.set_ops_handler(self):
            for node in self.group.nodes:
                self.run_node(node)

    def generate_looped_body(self) -> None:
        """Nodes in the order ``plan_loops`` gives, each loop over r in a scope of its own."""
        with V.set_ops_handler(self):
            for block in plan_loops(self.group.nodes, self.placements):
                if isinstance(block, list):
                    with self.loop_over_r():
                        for node in block:
                            self.run_node(node)
                else:
                    self.run_node(block)

    @contextlib.contextmanager
    def loop_over_r(self) -> Iterator[Loop]:
        outer, self.loop = self.lines, Loop()
        self.lines = self.loop.body
        self.scopes.append(Scope())
        try:
            yield self.loop
        finally:
            self.scopes.pop()
            self.lines = outer
            self.lines.extend(self.loop_lines(self.loop))
            self.loop = None

    def lookup(self, table: str, key: Any) -> CSEVariable | None:
        for scope in reversed(self.scopes):
            if key in getattr(scope, table):
                return getattr(scope, table)[key]
        return None

    def new_var(self, expr: str, dtype: torch.dtype) -> CSEVariable:
        """Common subexpression elimination: the same text gives the same temporary."""
        var = self.lookup("cse", expr)
        if var is None:
            var = self.fresh(dtype)
            self.lines.append(self.assign(var, expr))
            self.scopes[-1].cse[expr] = var
        return var

    def fresh(self, dtype: torch.dtype, prefix: str = "tmp") -> CSEVariable:
        return CSEVariable(f"{prefix}{next(self.counter)}", dtype)

    def rewrite(self, index: sympy.Expr) -> sympy.Expr:
        return self.rplan.rewrite(self.plan.rewrite(index))

    def index(self, index: sympy.Expr) -> str:
        return print_index(self.rewrite(index), self.DIV)

    # ---- the ops handler API ------------------------------------------------------
    def load(self, name: str, index: sympy.Expr) -> CSEVariable:
        key = (name, self.index(index))
        var = self.lookup("stored", key)
        if var is None and name in self.nodes:  # computed in an earlier loop: recompute
            self.run_node(self.nodes[name])
            var = self.lookup("stored", key)
        if var is not None:
            return var
        if name not in self.in_args:
            self.in_args[name] = f"in_ptr{len(self.in_args)}"
        dtype = self.buffers[name].get_dtype()
        mask = self.mask_for(self.rewrite(index))
        return self.new_var(self.load_expr(self.in_args[name], key[1], dtype, mask), dtype)

    def store(self, name: str, index: sympy.Expr, value: CSEVariable) -> None:
        key = (name, self.index(index))
        self.scopes[-1].stored[key] = value
        if name in self.removed or name in self.out_args:  # never stored, or stored before
            return
        self.out_args[name] = f"out_ptr{len(self.out_args)}"
        mask = self.mask_for(self.rewrite(index))
        self.lines.append(self.store_line(self.out_args[name], key[1], value,
                                          self.buffers[name].get_dtype(), mask))

    def store_reduction(self, name: str, index: sympy.Expr, value: CSEVariable) -> None:
        """A row's result: stored once the loop over r is done, visible to later loops."""
        key = (name, self.index(index))
        self.scopes[0].stored[key] = value
        if name in self.removed:
            return
        self.out_args[name] = f"out_ptr{len(self.out_args)}"
        lines = self.loop.suffix if self.loop is not None else self.lines
        lines.append(self.store_line(self.out_args[name], key[1], value,
                                     self.buffers[name].get_dtype(), self.mask_for(
                                         self.rewrite(index))))

    def reduction(self, dtype: torch.dtype, reduction_type: str,
                  value: CSEVariable) -> CSEVariable:
        if self.loop is None:
            expr = self.reduce_expr(value, reduction_type, dtype)
            result = self.fresh(dtype)
            self.lines.append(self.assign(result, expr))
        else:
            result = self.fresh(dtype)
            self.accumulate(self.loop, result, value, reduction_type, dtype)
        return result

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

    def mask_for(self, index: sympy.Expr) -> str:
        return ""

    def load_expr(self, arg: str, index: str, dtype: torch.dtype, mask: str) -> str:
        raise NotImplementedError

    def store_line(self, arg: str, index: str, value: CSEVariable, dtype: torch.dtype,
                   mask: str) -> str:
        raise NotImplementedError

    def constant_expr(self, value: Any, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def index_expr_text(self, index: str, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def to_dtype_expr(self, x: CSEVariable, src: torch.dtype, dst: torch.dtype) -> str:
        raise NotImplementedError

    def reduce_expr(self, value: CSEVariable, reduction_type: str, dtype: torch.dtype) -> str:
        """A whole row reduced in one expression (persistent kernels)."""
        raise NotImplementedError

    def accumulate(self, loop: Loop, result: CSEVariable, value: CSEVariable,
                   reduction_type: str, dtype: torch.dtype) -> None:
        """Accumulator set-up in ``loop.prefix``, update in the body, ``result`` after."""
        raise NotImplementedError

    def loop_lines(self, loop: Loop) -> list[str]:
        raise NotImplementedError

    def call_args(self) -> list[str]:
        """Buffer names in the order the kernel takes them: inputs, then outputs."""
        return list(self.in_args) + list(self.out_args)

    def header(self, comment: str) -> list[str]:
        names = ", ".join(n.name for n in self.group.nodes)
        sizes = ", ".join(str(s) for s in self.space[0])
        rsizes = ", ".join(str(s) for s in self.space[1])
        over = f"[{sizes}]" + (f", reducing [{rsizes}]" if self.space[1] else "")
        return [f"{comment} Fused kernel for {names} over {over}; ops: "
                f"{', '.join(dict.fromkeys(o for n in self.group.nodes for o in n.op_names))}",
                f"{comment} Generated by minipt2 inductor; see book/docs/inductor.md"]


def identity(reduction_type: str, dtype: torch.dtype) -> Any:
    """The value that leaves a reduction unchanged: what a reduction starts from, and what
    masked-off lanes contribute (both printers)."""
    if reduction_type in ("sum", "prod"):
        return 0 if reduction_type == "sum" else 1
    if dtype.is_floating_point:
        return float("-inf") if reduction_type == "max" else float("inf")
    info = torch.iinfo(dtype)
    return info.min if reduction_type == "max" else info.max

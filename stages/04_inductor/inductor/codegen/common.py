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

[Note: masked loads]
Some values exist only for part of a loop: input k of a ``cat`` holds the elements whose
index along the cat dim lies in its own range, and an element of a ``gather`` exists only
if the index it loaded is in range. Computing such a value elsewhere must not read memory:
``x[i - 5]`` at i = 0 is another tensor's memory, or none. ``ops.masked(mask, body, other)``
says so: where ``mask`` is false the result is ``other`` and the body's loads do not happen.
Triton runs every lane of a block in lock step, so the body is straight-line code whose
loads carry the mask (``tl.load(ptr, xmask & tmp3)``: masked lanes touch no memory) and a
``tl.where`` picks the result. C++ runs one element at a time and may branch: the body goes
inside ``if (mask) { ... }`` (gcc still vectorises such loops with masked loads where it
can). An indirect index works the same way without a region: every access through it is
masked by its in-range condition; see [Note: indirect indexing] in virtualized.py.

[Note: one rounding, at the store]
Eager runs a bfloat16 program one op at a time, and every op rounds its result to
bfloat16 when it writes it to memory: ``sin(x) + cos(y)`` rounds three times. Inside a
fused kernel the intermediates never reach memory. In a kernel that stores only bfloat16
or float16 we hold them in float32, as torch.compile does by default: a cast to bfloat16
or float16 in the middle of the kernel changes only the dtype we record, and the store
rounds once. The answer is the exact one rounded once (up to float32's error), where
eager's can be several bfloat16 steps off after a cancellation, so it differs from
eager's by about one step of the narrow type, sometimes more; tests of such kernels
compare with float64 arithmetic. A kernel that stores a float32 (or wider) result keeps
every rounding: it may be storing ``x.bfloat16().float()``, a rounding the program asked
for, and there is no telling that cast from the ones type promotion inserts around each
bfloat16 op. Each skipped cast saves two instructions (round, widen) per element, which
a bandwidth-bound kernel with sin, cos or erf in bfloat16 cannot spare. A narrow value
that becomes an integer or a bool is still rounded first, because there rounding changes
the answer by a whole unit (2.999 is 3.0 in bfloat16, so ``int`` gives 3, not 2).
``MINIPT2_EMULATE_PRECISION_CASTS=1`` rounds at every cast, as eager does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sympy
import torch
from primtorch import prims

from inductor.ir import FloorDiv, index_vars
from inductor.scheduler import (
    FusedGroup,
    Placement,
    SchedulerNode,
    simplify_index,
    space_ranges,
)
from inductor.sizevars import size_symbols
from inductor.virtualized import INDIRECT_PREFIX, V, indirect_symbol, is_indirect

NARROW_FLOATS = (torch.bfloat16, torch.float16)  # held in float32 inside kernels
# Round at every cast to a narrow float, as eager does; [Note: one rounding, at the store].
EMULATE_PRECISION_CASTS = os.environ.get("MINIPT2_EMULATE_PRECISION_CASTS", "0") == "1"


class NotAtRowStart(Exception):
    """A row's first value needs one this kernel computes; see ``Kernel.row_start``."""


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

    sizes: list[sympy.Expr]  # ints, or expressions of size symbols (dynamic shapes)
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
    dims = [(sym, sympy.sympify(size)) for sym, size in zip(index_vars(ranges, prefix), ranges)
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


def numel(sizes: Sequence[Any]) -> int | sympy.Expr:
    """The product of ``sizes``: an int for static shapes, else a sympy expression."""
    product = sympy.Mul(*[sympy.sympify(s) for s in sizes])
    return int(product) if product.is_Integer else product


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
    # C++: lines folding lane ``rl`` of accumulators whose op is "lane" into them, for
    # reductions no ``omp simd reduction`` clause can say (argmax, welford)
    combine: list[str] = dataclasses.field(default_factory=list)


def plan_loops(nodes: list[SchedulerNode], placements: dict[str, Placement],
               online: dict[str, str] | None = None) -> list:
    """The order a looped reduction kernel runs its nodes in: "x" nodes once per row, the
    others in loops over r (a list of nodes). A loop ends before a node that reads a
    reduction computed in it (see [Note: reduction fusion]), except a sum in ``online``
    (sum -> the max it subtracts) that reads only its max ([Note: online softmax])."""
    blocks: list = []
    loop: list | None = None
    loop_at, reduced = 0, set()
    online, loop_of = online or {}, {}
    for node in nodes:
        if online.get(node.name) in loop_of:  # computed alongside its max, in its pass
            loop_of[online[node.name]].append(node)
            loop_of[node.name] = loop_of[online[node.name]]
            if loop_of[node.name] is loop:
                reduced.add(node.name)
            continue
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
            loop_of[node.name] = loop
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
        self.ranges = space_ranges(self.space)  # what simplify_index may assume
        self.plan = plan_indices(self.space[0], indices, "i", "x")
        self.rplan = plan_indices(self.space[1], indices, "j", "r")
        self.numel = numel(self.space[0])  # an int, or an expression of size symbols
        self.rnumel = numel(self.space[1])
        self.masks: list[str] = []  # conditions of the enclosing ops.masked regions
        self.indirect: dict[str, tuple[str, str, str]] = {}  # symbol -> (in range, size, lanes)
        self.indirect_sizes: list[sympy.Expr] = []
        self.helpers: dict[str, str] = {}  # module-level functions the kernel calls, by name
        self.welfords: dict[str, tuple[CSEVariable, CSEVariable]] = {}  # value -> (mean, m2)
        self.online: dict[str, str] = {}  # sums of the open loop computed online -> max

    def run_node(self, node: SchedulerNode) -> None:
        node.run(self.placements[node.name])

    def generate_body(self) -> None:
        """Every node in program order, in one scope (pointwise and persistent kernels)."""
        with V.set_ops_handler(self):
            for node in self.group.nodes:
                self.run_node(node)

    def online_sums(self) -> dict[str, str]:
        """Sums this printer computes in the loop of their max (sum -> max); Triton's:
        [Note: online softmax]."""
        return {}

    def generate_looped_body(self) -> None:
        """Nodes in the order ``plan_loops`` gives, each loop over r in a scope of its own."""
        online = self.online_sums()
        with V.set_ops_handler(self):
            for block in plan_loops(self.group.nodes, self.placements, online):
                if isinstance(block, list):
                    names = {node.name for node in block}
                    self.online = {s: m for s, m in online.items() if s in names and m in names}
                    with self.loop_over_r():
                        for node in block:
                            self.run_node(node)
                else:
                    self.online = {}  # a node once per row: no loop, no sum in one
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
        """An index of the bodies in the kernel's loop variables (after collapsing)."""
        return self.rplan.rewrite(self.plan.rewrite(simplify_index(index, self.ranges)))

    def size(self, expr: Any) -> str:
        """A size (an int, or an expression of size symbols) as kernel source."""
        return print_index(sympy.sympify(expr), self.DIV)

    def size_params(self) -> list[sympy.Symbol]:
        """The size symbols this kernel's text uses, in order: they become its scalar
        parameters; see [Note: sizes as kernel arguments]."""
        exprs = [*self.space[0], *self.space[1], *self.plan.sizes, *self.rplan.sizes]
        exprs += [e for n in self.group.nodes for e in n.accesses(self.space).indices]
        exprs += self.indirect_sizes
        return size_symbols(exprs)

    def index(self, index: sympy.Expr) -> str:
        return print_index(self.rewrite(index), self.DIV)

    # ---- the ops handler API ------------------------------------------------------
    def load(self, name: str, index: sympy.Expr) -> CSEVariable:
        key = (name, self.index(index))
        var = self.lookup("stored", key)
        if var is None and name in self.nodes and self.at_row_start:
            raise NotAtRowStart(name)  # its value exists at the row's positions only
        if var is None and name in self.nodes:  # computed in an earlier loop: recompute
            self.run_node(self.nodes[name])
            var = self.lookup("stored", key)
        if var is not None:
            return var
        if name not in self.in_args:
            self.in_args[name] = f"in_ptr{len(self.in_args)}"
        dtype = self.buffers[name].get_dtype()
        mask = self.full_mask(self.rewrite(index))
        return self.new_var(self.load_expr(self.in_args[name], key[1], dtype, mask), dtype)

    def store(self, name: str, index: sympy.Expr, value: CSEVariable,
              mode: str | None = None) -> None:
        """Store ``value`` at ``index``; ``mode="atomic_add"`` adds it instead, atomically
        (``scatter_add``: other iterations may add to the same element)."""
        key = (name, self.index(index))
        if not is_indirect(index):
            self.scopes[-1].stored[key] = value
        if name in self.removed or name in self.out_args:  # never stored, or stored before
            return
        self.out_args[name] = f"out_ptr{len(self.out_args)}"
        mask, dtype = self.full_mask(self.rewrite(index)), self.buffers[name].get_dtype()
        spell = self.atomic_add_line if mode == "atomic_add" else self.store_line
        self.lines.append(spell(self.out_args[name], key[1], value, dtype, mask))

    def store_reduction(self, name: str, index: sympy.Expr, value: CSEVariable) -> None:
        """A row's result: stored once the loop over r is done, visible to later loops."""
        key = (name, self.index(index))
        self.scopes[0].stored[key] = value
        if name in self.removed:
            return
        self.out_args[name] = f"out_ptr{len(self.out_args)}"
        lines = self.loop.suffix if self.loop is not None else self.lines
        lines.append(self.store_line(self.out_args[name], key[1], value,
                                     self.buffers[name].get_dtype(), self.full_mask(
                                         self.rewrite(index))))

    def reduction(self, dtype: torch.dtype, reduction_type: str, value: CSEVariable,
                  first: Callable[[], CSEVariable] | None = None) -> CSEVariable:
        """``first``, for a welford: prints the row's first value ([Note: welford])."""
        if reduction_type in ("welford_mean", "welford_m2"):
            mean, m2 = self.welford(value, dtype, first)
            return mean if reduction_type == "welford_mean" else m2
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

    # --8<-- [start:one-rounding]
    def narrow_outputs(self) -> bool:
        """Whether every buffer the kernel writes is bfloat16 or float16."""
        names = [n.name for n in self.group.nodes if n.name not in self.removed]
        return bool(names) and all(self.buffers[n].get_dtype() in NARROW_FLOATS
                                   for n in names)

    def to_dtype(self, x: CSEVariable, dtype: torch.dtype) -> CSEVariable:
        """``x`` as ``dtype``. In a kernel that stores only 16-bit floats, a float narrowed
        to bfloat16/float16 keeps its float32 value (only its dtype changes) and is rounded
        once, at the store; anything else made of a narrow value is rounded first. See
        [Note: one rounding, at the store]."""
        if (not EMULATE_PRECISION_CASTS and dtype in NARROW_FLOATS
                and x.dtype in (torch.float32, *NARROW_FLOATS) and self.narrow_outputs()):
            return CSEVariable(x.name, dtype)
        if x.dtype in NARROW_FLOATS and dtype == torch.float32:  # already float32 inside
            return CSEVariable(x.name, dtype)
        if x.dtype in NARROW_FLOATS and not dtype.is_floating_point:
            x = self.new_var(self.to_dtype_expr(x, torch.float32, x.dtype), x.dtype)
        return self.new_var(self.to_dtype_expr(x, x.dtype, dtype), dtype)
    # --8<-- [end:one-rounding]

    def where(self, pred: CSEVariable, a: CSEVariable, b: CSEVariable) -> CSEVariable:
        return self.new_var(self.OPS["where"](pred, a, b), a.dtype)

    # --8<-- [start:kernel-masked]
    def masked(self, mask: CSEVariable, body: Callable[[], CSEVariable],
               other: Any) -> CSEVariable:
        """``body()`` where ``mask`` holds and ``other`` elsewhere; a load inside the body
        never touches memory where ``mask`` is false. See [Note: masked loads]."""
        outer, self.lines = self.lines, []
        self.masks.append(str(mask))
        self.scopes.append(Scope())  # values computed under the mask stay under it
        try:
            value = body()
        finally:
            self.scopes.pop()
            self.masks.pop()
            inner, self.lines = self.lines, outer
        return self.masked_value(mask, inner, value, other)

    def indirect_indexing(self, value: CSEVariable, size: Any) -> sympy.Symbol:
        """A loaded index as a symbol that addresses can use; see [Note: indirect indexing].
        Its in-range condition masks every access through it; in debug mode a value out of
        range stops the kernel, as torch raises."""
        var = self.fresh(torch.int64, INDIRECT_PREFIX)
        self.lines.append(self.assign(var, str(value)))
        bound = self.new_var(self.in_range_expr(var, self.size(size)), torch.bool)
        self.indirect[var.name] = (str(bound), self.size(size), self.lanes_mask())
        self.indirect_sizes.append(sympy.sympify(size))
        return indirect_symbol(var.name)

    def lanes_mask(self) -> str:
        """The mask of every lane the code being printed runs for. An indirect index is only
        meaningful there, whatever loop variables the address shows: ``tmp + 5*y0`` still
        depends on x0 through ``tmp``."""
        symbols = [*self.plan.symbols, *(self.rplan.symbols if self.r_in_scope() else [])]
        return self.mask_for(sum(symbols, sympy.Integer(0)))

    def r_in_scope(self) -> bool:
        """Whether the reduced-dims variables exist here (in a loop over r)."""
        return self.loop is not None
    # --8<-- [end:kernel-masked]

    def rand(self, seed: CSEVariable, offset: CSEVariable, stream: int,
             dtype: torch.dtype) -> CSEVariable:
        """A uniform number in [0, 1): Philox of (seed, offset, stream); [Note: philox]."""
        return self.new_var(self.rand_expr(seed, offset, stream, dtype), dtype)

    at_row_start = False  # printing a node's value at r = 0 (``row_start``)

    def row_start(self, first: Callable[[], CSEVariable] | None) -> CSEVariable | None:
        """``first()``, a reduction body's value at r = 0; None (and nothing printed) where
        that needs a value this kernel computes, which exists at the row's positions only."""
        if first is None:
            return None
        scope = self.scopes[-1]
        saved = (len(self.lines), dict(scope.cse), dict(scope.stored), dict(self.in_args))
        self.at_row_start = True
        try:
            return first()
        except NotAtRowStart:
            del self.lines[saved[0]:]
            scope.cse, scope.stored, self.in_args = saved[1], saved[2], saved[3]
            return None
        finally:
            self.at_row_start = False

    def welford(self, value: CSEVariable, dtype: torch.dtype,
                first: Callable[[], CSEVariable] | None = None
                ) -> tuple[CSEVariable, CSEVariable]:
        """(mean, m2) of ``value`` over the reduced elements, computed once however many
        reductions ask for them ([Note: welford]); a variable name is one definition, so it
        is a good cache key."""
        if value.name not in self.welfords:
            mean, m2 = self.fresh(dtype), self.fresh(dtype)
            if self.loop is None:
                self.welford_rows(mean, m2, value, first)
            else:
                self.welford_accumulate(self.loop, mean, m2, value)
            self.welfords[value.name] = (mean, m2)
        return self.welfords[value.name]

    def full_mask(self, index: sympy.Expr) -> str:
        """The printer's mask for ``index`` (block tails), the conditions of enclosing
        ``ops.masked`` regions ([Note: masked loads]) and the in-range conditions of the
        indirect indices it uses. In debug mode, each of those indices is checked first,
        where the access would happen ([Note: indirect indexing])."""
        access = self.AND.join(p for p in [self.mask_for(index), *self.region_masks()] if p)
        symbols = [s.name for s in sorted(sympy.sympify(index).free_symbols, key=str)
                   if s.name in self.indirect]
        for name in symbols if debug_asserts() else []:
            bound, size, lanes = self.indirect[name]
            line = self.assert_line(name, bound, self.AND.join(p for p in (access, lanes) if p),
                                    f"index out of bounds: 0 <= {{}} < {size} does not hold")
            if self.lookup("cse", line) is None:  # once per scope
                self.lines.append(line)
                self.scopes[-1].cse[line] = CSEVariable(name, torch.int64)
        parts = [access, *(p for n in symbols for p in (self.indirect[n][0], self.indirect[n][2]))]
        return self.AND.join(dict.fromkeys(q for p in parts if p for q in p.split(self.AND)))

    def __getattr__(self, name: str) -> Callable[..., CSEVariable]:
        if name not in self.OPS:
            raise AttributeError(name)

        def op(*args: CSEVariable) -> CSEVariable:
            dtype = torch.bool if name in prims.BOOL_RESULT else args[0].dtype
            return self.new_var(self.OPS[name](*args, dtype=args[0].dtype), dtype)

        return op

    # ---- what subclasses spell ------------------------------------------------------
    DIV = "//"
    AND = " & "

    def region_masks(self) -> list[str]:
        """Masks a load needs from enclosing ``ops.masked`` regions (C++: none; it branches)."""
        return list(self.masks)

    def masked_value(self, mask: CSEVariable, inner: list[str], value: CSEVariable,
                     other: Any) -> CSEVariable:
        """Emit a masked region's lines ``inner``; its result is ``value`` or ``other``."""
        raise NotImplementedError

    def in_range_expr(self, var: CSEVariable, size: str) -> str:
        return f"(({var} >= 0) & ({var} < {size}))"

    def assert_line(self, var: str, cond: str, mask: str, message: str) -> str:
        """Stop with ``message`` (``{}`` is where the bad value goes) if ``cond`` is false
        for a lane where ``mask`` holds."""
        raise NotImplementedError

    def atomic_add_line(self, arg: str, index: str, value: CSEVariable, dtype: torch.dtype,
                        mask: str) -> str:
        raise NotImplementedError

    def rand_expr(self, seed: CSEVariable, offset: CSEVariable, stream: int,
                  dtype: torch.dtype) -> str:
        raise NotImplementedError

    def welford_rows(self, mean: CSEVariable, m2: CSEVariable, value: CSEVariable,
                     first: Callable[[], CSEVariable] | None = None) -> None:
        """Persistent kernels: a whole row's mean and m2 (it is in registers: two passes)."""
        raise NotImplementedError

    def welford_accumulate(self, loop: Loop, mean: CSEVariable, m2: CSEVariable,
                           value: CSEVariable) -> None:
        """Looped kernels: Welford's update in the loop, lanes combined after it."""
        raise NotImplementedError

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
        """Comment lines naming what the kernel computes: its buffers and loops, the
        prims-graph nodes it came from and, where the tracer recorded them, the aten ops
        those nodes were decomposed from."""
        names = ", ".join(n.name for n in self.group.nodes)
        sizes = ", ".join(str(s) for s in self.space[0])
        rsizes = ", ".join(str(s) for s in self.space[1])
        over = f"[{sizes}]" + (f", reducing [{rsizes}]" if self.space[1] else "")
        lines = [f"{comment} Fused kernel for {names} over {over}; ops: "
                 f"{', '.join(dict.fromkeys(o for n in self.group.nodes for o in n.op_names))}"]
        nodes = list(dict.fromkeys(o for n in self.group.nodes for o in n.origins))
        if nodes:
            lines.append(f"{comment} Source nodes: [{', '.join(o.name for o in nodes)}]")
        aten = dict.fromkeys(str(o.meta["original_aten"]) for o in nodes
                             if o.meta.get("original_aten") is not None)
        if aten:
            lines.append(f"{comment} Original ATen: [{', '.join(aten)}]")
        return [*lines, f"{comment} Generated by minipt2 inductor; see book/docs/inductor.md"]


# [Note: philox]
# ``prims.rand(shape, seed, offset)`` is a pure function of its arguments ([Note: random
# prims] in primtorch), so a kernel may compute it wherever it is needed and dropout's mask
# costs no memory traffic. Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy
# as 1, 2, 3", SC 2011; what PyTorch's CUDA generator uses) is a counter-based generator: ten
# rounds of multiplies and xors turn a 128-bit counter and a 64-bit key into 128 random bits,
# with no state carried from one element to the next. The key is the seed; the counter is
# (element's flat position, stream offset, 0); we keep the first 32 output bits. Both
# printers spell the same rounds (``philox`` in the Triton module, the C++ prelude), so a
# seed gives the same numbers on either target; a float keeps as many top bits as its
# significand holds (24 for float32), so the value is exact and below 1. They are not the
# numbers eager's ``prims.rand`` draws (that one seeds torch's CPU generator): tests compare
# distributions, and forward and backward agree because the backward reuses the saved mask.
def debug_asserts() -> bool:
    """``MINIPT2_DEBUG_ASSERTS=1``: kernels check their indirect indices and stop on a bad
    one, as torch raises; see [Note: indirect indexing]. Read when a kernel is printed."""
    return os.environ.get("MINIPT2_DEBUG_ASSERTS", "0").lower() in ("1", "true", "on", "yes")


def identity(reduction_type: str, dtype: torch.dtype) -> Any:
    """The value that leaves a reduction unchanged: what a reduction starts from, and what
    masked-off lanes contribute (both printers)."""
    if reduction_type in ("sum", "prod"):
        return 0 if reduction_type == "sum" else 1
    if dtype.is_floating_point:
        return float("-inf") if reduction_type == "max" else float("inf")
    info = torch.iinfo(dtype)
    return info.min if reduction_type == "max" else info.max

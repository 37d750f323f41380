"""The scheduler: which loops run together in one kernel, and which buffers never hit memory.

Input: ``GraphLowering.operations`` (``ComputedBuffer`` and ``FallbackKernel`` in program
order) and the names of the graph outputs.
Output: ``Scheduler.groups``, a list in program order of ``FusedGroup`` (loops that become
ONE kernel: pointwise, or reductions with the pointwise loops around them) and
``ExternNode`` (a library call); ``Scheduler.removed``, the buffers that only live inside
one kernel (never allocated, never stored); ``Scheduler.log``, one
line per fusion decision with its reason (the ``fusion`` artifact).

Chapter: book/docs/inductor.md ("Scheduling and fusion").

[Note: fusion]
Two loops may share a kernel (``can_fuse``, the legality question) when they iterate over
the same ranges and every element the second one reads from the first was computed by the
*same* iteration of the fused loop: then no thread waits for another. Whether they should
(``score_fusion``) is a cost question: each buffer both touch is memory traffic saved (a
vertical fusion); loops sharing nothing still save a kernel launch (a horizontal fusion).
We fuse greedily in program order: each new node joins the best legal group among the
last few, or starts a group of its own; see [Note: the reorder rule] for which earlier
groups it may join.

[Note: the reorder rule]
Joining an earlier group G moves a node back in time: its loop runs inside G's kernel, before
every group that comes after G. That is legal exactly when nothing the node needs is made
after G: no group after G (kernel or library call) writes a buffer the node reads. One check
per buffer is enough, transitively too: anything the node depends on reaches it through a
buffer it reads, so the last group writing one of those buffers is the earliest group the
node may join (``last_conflict``). The other hazards concern what the node writes. In a
functional graph they cannot arise (each buffer is written once, and no group made before
the node reads its output), with one exception: a scatter's loop writes into the copy made
just before it (``ir.Scatter``). So the rule also keeps a node after any group that writes
or reads a buffer the node writes. Reuse of dead buffers is planned by the wrapper *after*
scheduling, on the final order. Two independent loops over the same space, say the sums for
a LayerNorm's weight and bias gradients, or two unrelated pointwise outputs, thus become one
kernel even when other kernels run between them in program order (a horizontal fusion).

[Note: reduction fusion]
A reduction kernel loops over a 2-D space: x, the output elements (rows), and r, the reduced
elements of each row. Every node of the group must *place* into that space: a reduction with
the same output and reduced dims; a pointwise loop of the output's shape ("x": one value per
row, like a mean computed from a sum); or a pointwise loop whose outer dims are the output's
and inner dims the reduced ones ("xr": a value per reduced element, like ``exp(x - max)``).
Indices are compared in the kernel's own symbols (``i*`` for x, ``j*`` for r), so "reads the
element this iteration wrote" means the same thing for all three. A row's reduction result
is known only after its loop over r: a node that reads it in the same kernel runs in a later
loop over r (or, in a persistent kernel, after the reduction in straight-line code); the
printers arrange that, recomputing cheap "xr" values that an earlier loop computed.
softmax (amax, then exp and sum, then div), layer norm and RMS norm are each one kernel.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import sympy

from inductor.ir import ComputedBuffer, FallbackKernel, FloorDiv, index_vars
from inductor.sizevars import is_size_symbol
from inductor.virtualized import ReadWritesHandler, V, is_indirect

MAX_FUSED_NODES = 64  # past this a kernel gets hard to read and to compile; see score_fusion
Space = tuple[list[sympy.Expr], list[sympy.Expr]]  # (x sizes, r sizes) a kernel loops over


def space_symbols(space: Space) -> tuple[list[sympy.Expr], list[sympy.Expr]]:
    """The kernel-space index symbols: ``i*`` over the output rows, ``j*`` over reduced dims."""
    return index_vars(space[0], "i"), index_vars(space[1], "j")


def space_ranges(space: Space) -> dict[sympy.Symbol, sympy.Expr]:
    """Each kernel-space symbol with its loop's size (what ``simplify_index`` may assume)."""
    symbols = [*space_symbols(space)[0], *space_symbols(space)[1]]
    return {sym: size for sym, size in zip(symbols, [*space[0], *space[1]])
            if isinstance(sym, sympy.Symbol)}


def _upper_bound(expr: sympy.Expr, ranges: dict[sympy.Symbol, sympy.Expr]) -> sympy.Expr | None:
    """The largest value ``expr`` can take inside the loops (or more, never less), if it is a
    sum of non-negative terms; else None. A term is a non-negative coefficient, which may be
    an expression of size symbols (dynamic shapes: ``512*s1*i0``, and sizes are positive),
    times at most one of: a loop symbol, ``a % m`` (below ``m``), ``a // d`` (at most the
    bound of ``a`` over ``d``)."""
    total = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, rest = sympy.Integer(1), []
        for factor in sympy.Mul.make_args(term):
            if factor.is_number or (factor.free_symbols and all(
                    is_size_symbol(s) for s in factor.free_symbols)):
                coeff *= factor
            else:
                rest.append(factor)
        if coeff.is_nonnegative is not True or len(rest) > 1:
            return None
        bound = _factor_bound(rest[0], ranges) if rest else sympy.Integer(1)
        if bound is None:
            return None
        total += coeff * bound
    return total


def _factor_bound(factor: sympy.Expr, ranges: dict[sympy.Symbol, sympy.Expr]) -> sympy.Expr | None:
    """``_upper_bound`` of one loop-dependent factor of a term."""
    if factor in ranges:
        return ranges[factor] - 1
    if isinstance(factor, (sympy.Mod, FloorDiv)):
        a, m = factor.args
        if m.free_symbols - {s for s in m.free_symbols if is_size_symbol(s)} or \
                m.is_positive is not True:
            return None
        inner = _upper_bound(a, ranges)  # None also when ``a`` may be negative
        if inner is None:
            return None
        return m - 1 if isinstance(factor, sympy.Mod) else inner / m
    return None


def _below(upper: sympy.Expr, bound: sympy.Expr) -> bool:
    """``upper < bound`` for every value of the size symbols (``512*s1 - 1 < 512*s1``)."""
    if upper.is_Integer and bound.is_Integer:
        return upper < bound
    return sympy.expand(bound - upper).is_positive is True


def simplify_index(expr: sympy.Expr, ranges: dict[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """``expr`` without the ``%`` and ``//`` that cannot change a value inside the loops'
    ranges: ``i % 16`` is ``i`` and ``i // 16`` is 0 when ``0 <= i < 16`` (a reshape's
    index, say). Then "reads the element this iteration wrote" is seen for what it is.

    Memoized (see ``_simplify``): the scheduler and every kernel printer ask again for the
    same few index expressions, and each answer costs sympy a few milliseconds."""
    return _simplify(sympy.sympify(expr), tuple(ranges.items()))


@functools.lru_cache(maxsize=1 << 16)
def _simplify(expr: sympy.Expr, ranges_items: tuple) -> sympy.Expr:
    """``simplify_index`` itself, cached by (expression, ranges): sympy expressions are
    immutable and compare by structure, so a cached answer is the answer. Sub-expressions
    go through the cache too (a reshape's ``i0 // 16`` shows up in many indices)."""
    if not expr.args:
        return expr
    ranges = dict(ranges_items)
    rebuilt = expr.func(*[_simplify(arg, ranges_items) for arg in expr.args])
    if type(rebuilt) is not type(expr):  # it simplified itself: (q*d + r) // d -> q + r // d
        return _simplify(rebuilt, ranges_items)
    expr = rebuilt
    if isinstance(expr, FloorDiv):
        narrowed = _drop_small_remainder(expr, ranges)
        if narrowed is not None:
            return _simplify(narrowed, ranges_items)
    if isinstance(expr, sympy.Add):
        expr = _recombine(expr)
    if isinstance(expr, (sympy.Mod, FloorDiv)) and not (
            expr.args[1].free_symbols - {s for s in expr.args[1].free_symbols
                                         if is_size_symbol(s)}):
        upper = _upper_bound(expr.args[0], ranges)
        if upper is not None and _below(upper, expr.args[1]):
            return expr.args[0] if isinstance(expr, sympy.Mod) else sympy.Integer(0)
    return expr


def _drop_small_remainder(expr: FloorDiv, ranges: dict) -> sympy.Expr | None:
    """``(k*a + b) // (k*m)`` is ``a // m`` when ``0 <= b < k`` (k an integer): a reshape of a
    reshape, ``(512*i0 + i1) // (512*s1)`` with ``i1 < 512``, becomes ``i0 // s1``."""
    base, divisor = expr.args
    dcoeff = divisor.as_coeff_Mul()[0]
    if not (dcoeff.is_Integer and dcoeff > 1 and isinstance(base, sympy.Add)):
        return None
    coeffs = {int(t.as_coeff_Mul()[0]) for t in base.args if t.as_coeff_Mul()[0].is_Integer}
    for k in sorted({math.gcd(int(dcoeff), c) for c in coeffs} - {1}, reverse=True):
        whole = [t for t in base.args if (t / k).as_coeff_Mul()[0].is_Integer]
        rest = sympy.Add(*[t for t in base.args if t not in whole])
        upper = _upper_bound(rest, ranges)
        if whole and rest != 0 and upper is not None and _below(upper, sympy.Integer(k)):
            return FloorDiv(sympy.expand(sympy.Add(*whole) / k), sympy.expand(divisor / k))
    return None


def _recombine(expr: sympy.Add) -> sympy.Expr:
    """``m*(a // m) + a % m`` is ``a`` (times a common coefficient)."""
    terms = list(expr.args)
    for mod_term in [t for t in terms if t.has(sympy.Mod)]:
        coeff, mod = mod_term.as_coeff_Mul()
        if not isinstance(mod, sympy.Mod):
            continue
        a, m = mod.args
        partner = sympy.expand(coeff * m * FloorDiv(a, m))
        if partner in terms and mod_term in terms:
            terms.remove(partner)
            terms.remove(mod_term)
            terms.append(coeff * a)
    return sympy.Add(*terms)


def _non_one(sizes: Sequence[sympy.Expr]) -> list[sympy.Expr]:
    return [s for s in sizes if s != 1]


# --8<-- [start:map-dims]
def map_dims(sizes: Sequence[sympy.Expr], space_sizes: Sequence[sympy.Expr],
             symbols: Sequence[sympy.Expr]) -> list[sympy.Expr] | None:
    """Index expressions for a loop over ``sizes`` inside a kernel loop over ``space_sizes``,
    or None. Size-1 dims are index 0; every other dim of ``sizes`` must be one dim of the
    space or the product of consecutive ones ([Note: merged dims]).

    [Note: merged dims]
    A reshape that merges dims makes its buffer loop over ``[B*T, C]`` while the layer
    norm statistics it reads loop over ``[B, T]`` (a view would keep ``[B, T, C]``, but a
    reshape of a value not yet in memory, or of symbolic sizes, is computed). Row-major, the
    merged dim's position is ``t_b * T + t_t``: so the node's ``B*T`` dim maps onto the
    space's ``B`` and ``T`` dims with that expression, and the normalisation fuses into the
    kernel that computes the statistics. Sizes are compared as expressions (``2*s0`` is
    ``2`` times ``s0``); the other direction, a node finer than the space, would need
    divisions and is not done.
    """
    dims = [(sym, size) for sym, size in zip(symbols, space_sizes) if size != 1]
    runs: list[list[tuple[sympy.Expr, sympy.Expr]]] = []  # the space dims of each dim
    j = 0
    for size in sizes:
        start, product = j, sympy.Integer(1)
        while size != 1 and j < len(dims) and not _same_size(product, size):
            product, j = product * dims[j][1], j + 1
        if size != 1 and not _same_size(product, size):
            return None
        runs.append(dims[start:j])
    if j != len(dims):
        return None
    out: list[sympy.Expr] = []  # built once the loop is known to fit: most do not
    for run in runs:
        index = sympy.Integer(0)
        for sym, dim in run:
            index = index * dim + sym
        out.append(index)
    return out
# --8<-- [end:map-dims]


def _same_size(a: sympy.Expr, b: sympy.Expr) -> bool:
    """``a == b`` as sizes: numbers compare as numbers (the common, static case, without
    sympy's expand), expressions after expanding their difference."""
    if _is_number(a) and _is_number(b):
        return int(a) == int(b)
    return sympy.expand(a - b) == 0


def _is_number(n: object) -> bool:
    return isinstance(n, int) or getattr(n, "is_Integer", False)


@dataclasses.dataclass
class Placement:
    """Where a node sits in a kernel's space (see [Note: reduction fusion])."""

    # "reduction" | "x" (one value per output row) | "xr" (one per reduced element) | "rx"
    # (one per reduced element, the reduced dims outermost: [Note: a column sum's producer])
    kind: str
    index: list[sympy.Expr]
    rindex: list[sympy.Expr]


@dataclasses.dataclass
class SchedulerNode:
    """One ComputedBuffer with what its body reads and writes (at which indices)."""

    buffer: ComputedBuffer
    reads: list[tuple[str, sympy.Expr]]
    writes: list[tuple[str, sympy.Expr]]
    op_names: list[str]
    origins: list = dataclasses.field(default_factory=list)  # the prims-graph nodes (fx.Node)
    _accesses: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    _placements: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def analyse(cls, buffer: ComputedBuffer) -> SchedulerNode:
        handler = ReadWritesHandler()
        with V.set_ops_handler(handler):
            buffer.run_body(index_vars(buffer.layout.size),
                            index_vars(buffer.reduction_ranges(), "r"))
        return cls(buffer, handler.reads, handler.writes, handler.op_names)

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def ranges(self) -> list[sympy.Expr]:
        return self.buffer.layout.size

    @property
    def device(self):
        return self.buffer.layout.device

    def is_reduction(self) -> bool:
        return self.buffer.is_reduction()

    def own_space(self) -> Space:
        return list(self.ranges), self.buffer.reduction_ranges()

    def place(self, space: Space) -> Placement | None:
        """How this node's loop maps onto ``space``, or None if it does not fit (cached: the
        fusion search asks for every group in reach, and the printers ask again): the first
        of ``candidates``, unless ``choose`` picked another ([Note: a loop that fits two
        ways])."""
        key = (tuple(space[0]), tuple(space[1]))
        if key not in self._placements:
            found = self.candidates(space)
            self._placements[key] = found[0] if found else None
        return self._placements[key]

    def choose(self, space: Space, placement: Placement) -> None:
        """Place the node in ``space`` as ``placement`` (one of its ``candidates``)."""
        key = (tuple(space[0]), tuple(space[1]))
        self._placements[key] = placement
        self._accesses.pop(key, None)  # what the body reads and writes moves with it

    def candidates(self, space: Space) -> list[Placement]:
        """Every way this node's loop maps onto ``space``, the usual first (cached)."""
        key = ("all", tuple(space[0]), tuple(space[1]))
        if key not in self._placements:
            self._placements[key] = self._candidates(space)
        return self._placements[key]

    def _candidates(self, space: Space) -> list[Placement]:
        (xsyms, rsyms), (xs, rs) = space_symbols(space), space
        if self.is_reduction():
            index = map_dims(self.ranges, xs, xsyms)
            rindex = map_dims(self.buffer.reduction_ranges(), rs, rsyms)
            if index is None or rindex is None:
                return []
            return [Placement("reduction", index, rindex)]
        index = map_dims(self.ranges, xs, xsyms)
        if index is not None:
            return [Placement("x", index, [])]
        if not _non_one(rs):
            return []
        found = []
        for split in range(len(self.ranges) + 1):  # outer dims over x, inner over r
            outer = map_dims(self.ranges[:split], xs, xsyms)
            inner = map_dims(self.ranges[split:], rs, rsyms)
            if outer is not None and inner is not None:
                found.append(Placement("xr", outer + inner, []))
        # [Note: a column sum's producer]: the reduced dims outermost, split or not
        for sizes, syms in (([*xs[:1], *rs, *xs[1:]], [*xsyms[:1], *rsyms, *xsyms[1:]]),
                            ([*rs, *xs], [*rsyms, *xsyms])):
            index = map_dims(self.ranges, sizes, syms)
            if index is not None:
                found.append(Placement("rx", index, []))
        return found

    def run(self, placement: Placement) -> None:
        """Run the body (under the current ops handler) in kernel-space symbols."""
        self.buffer.run_body(placement.index, placement.rindex)

    def accesses(self, space: Space) -> ReadWritesHandler:
        """Reads, writes and index expressions of the body placed in ``space`` (cached)."""
        key = (tuple(space[0]), tuple(space[1]))
        if key not in self._accesses:
            handler = ReadWritesHandler()
            with V.set_ops_handler(handler):
                self.run(self.place(space))
            ranges = space_ranges(space)
            handler.reads = [(name, simplify_index(i, ranges)) for name, i in handler.reads]
            handler.writes = [(name, simplify_index(i, ranges)) for name, i in handler.writes]
            handler.indices = [simplify_index(i, ranges) for i in handler.indices]
            self._accesses[key] = handler
        return self._accesses[key]


@dataclasses.dataclass
class FusedGroup:
    """Nodes that become one kernel, looping over one ``space``: (x sizes, r sizes).

    A pointwise-only group has no r sizes; a group holding reductions loops over the first
    reduction's output (x) and reduced (r) dims. See [Note: reduction fusion].
    """

    nodes: list[SchedulerNode]
    _read_names: tuple = dataclasses.field(default=(0, frozenset()), repr=False, compare=False)

    @property
    def space(self) -> Space:
        return space_with(self.nodes, None)

    @property
    def ranges(self) -> list[sympy.Expr]:
        return self.space[0]

    @property
    def reduction_ranges(self) -> list[sympy.Expr]:
        return self.space[1]

    @property
    def device(self):
        return self.nodes[0].device

    def is_reduction(self) -> bool:
        return any(n.is_reduction() for n in self.nodes)

    def placements(self, space: Space | None = None) -> list[Placement | None]:
        return [n.place(space or self.space) for n in self.nodes]

    def written(self, space: Space | None = None) -> dict[str, sympy.Expr]:
        """Buffer name -> the index each element is written at, in ``space``'s symbols."""
        space = space or self.space
        return {name: index for node in self.nodes for name, index in
                node.accesses(space).writes}

    def read_names(self) -> set[str]:
        """The buffers the group reads. Cached, because the fusion search asks for every
        group in reach of every new node; a group only ever grows (nodes are appended), so
        its node count says whether the cache is current."""
        count, names = self._read_names
        if count != len(self.nodes):
            names = frozenset(name for node in self.nodes for name, _ in node.reads)
            self._read_names = (len(self.nodes), names)
        return set(names)


def reader_counts(groups: Sequence[Any]) -> dict[str, int]:
    """Buffer name -> how many of ``groups`` (kernels and library calls) read it."""
    readers: dict[str, int] = {}
    for group in groups:
        for name in Scheduler.reads_of(group):
            readers[name] = readers.get(name, 0) + 1
    return readers


def space_with(nodes: Sequence[SchedulerNode], node: SchedulerNode | None) -> Space:
    """The space a kernel of ``nodes`` (plus ``node``) loops over: the first reduction's."""
    members = [*nodes, node] if node is not None else list(nodes)
    for member in members:
        if member.is_reduction():
            return member.own_space()
    return list(members[0].ranges), []


@dataclasses.dataclass
class ExternNode:
    """A library call; never fused."""

    kernel: FallbackKernel


# --8<-- [start:fits-two-ways]
# [Note: a loop that fits two ways]
# Sizes alone can place a pointwise loop in a reduction's space in more than one way. The
# partials of a split column sum of [B, C] loop over x = [S, C], r = [B / S]; when a chunk
# is exactly as long as a row is wide (B / S = C, as for 256-column sums split into chunks
# of 256 rows), the gradient's loop over [B, C] fits as "xr" (a row over both x dims, a
# column over r) and as "rx" (a row over x0 and r, the column over x1), and only "rx" is
# what the partial sums read. A [A * B, R] view reduced over R is a genuine "xr" of the
# same sizes, so no order of the placements is right for both. Before a node joins a group,
# ``align_placements`` checks that every read of a buffer the kernel writes lands on the
# element the same iteration wrote; when it does not and some member's other placement
# makes it so, that member takes the other one. The first fix for the 256-column case
# split such sums in half as many chunks; with this one both the split and the fusion are
# the usual ones (``test_a_column_sum_in_chunks_as_long_as_a_row_takes_its_producer``).
def align_placements(group: FusedGroup, node: SchedulerNode) -> None:
    """Before ``can_fuse``: when the reads of ``group`` and ``node`` do not land where their
    writes did in the joined space, give one of them (``node`` first) another of its
    placements there that makes them ([Note: a loop that fits two ways])."""
    space = space_with(group.nodes, node)
    members = [*group.nodes, node]
    shifting = [m for m in reversed(members) if len(m.candidates(space)) > 1]
    if not shifting or any(m.place(space) is None for m in members) or \
            lines_up(members, space):
        return
    for member in shifting:  # the joining node first
        current = member.place(space)
        for other in member.candidates(space):
            if other is not current:
                member.choose(space, other)
                if lines_up(members, space):
                    return
        member.choose(space, current)


def lines_up(members: Sequence[SchedulerNode], space: Space) -> bool:
    """Whether each member reads what earlier members write at the element they write."""
    # BEGIN EXERCISE inductor-lines-up: do a kernel's reads land where its writes did?
    if any(m.place(space) is None for m in members):
        return False
    written: dict[str, sympy.Expr] = {}
    for member in members:
        for name, index in member.accesses(space).reads:
            if name in written and (index != written[name] or is_indirect(index)):
                return False
        written.update(member.accesses(space).writes)
    return True
    # END EXERCISE inductor-lines-up
# --8<-- [end:fits-two-ways]


# --8<-- [start:can-fuse]
def can_fuse(group: FusedGroup, node: SchedulerNode) -> tuple[bool, str]:
    """May ``node`` join ``group``'s kernel? Returns (legal, reason). See [Note: fusion]."""
    # BEGIN EXERCISE inductor-can-fuse: decide whether a node may join a fused group
    if node.device != group.device:
        return False, "different devices"
    space = space_with(group.nodes, node)  # changes when the first reduction joins
    if node.place(space) is None or None in group.placements(space):
        return False, (f"different loop ranges {[list(r) for r in node.own_space() if r]} vs "
                       f"{[list(r) for r in group.space if r]}")
    written = group.written(space)
    for name, index in node.accesses(space).reads:  # [Note: indirect indexing]: data decides
        if name in written and (index != written[name] or is_indirect(index)):
            return False, (f"reads {name} at {index} but it is written at {written[name]}: "
                           f"another iteration's element")
    return True, "same loops, same-element dependencies only"
    # END EXERCISE inductor-can-fuse


def score_fusion(group: FusedGroup, node: SchedulerNode) -> int:
    """How much fusing saves: 10 per buffer the two share (traffic), 1 for the launch; 0 for
    a launch saved at the price of uncoalesced loads ([Note: one tile, one direction])."""
    if len(group.nodes) >= MAX_FUSED_NODES:
        return 0
    if producer_refused(group, node):
        return 0
    shared = {name for name, _ in node.reads} & (set(group.written()) | group.read_names())
    if not shared and crosses_grain(group, node):
        return 0
    return 10 * len(shared) + 1
# --8<-- [end:can-fuse]


# --8<-- [start:column-producer]
# [Note: a column sum's producer]
# A bias gradient is a column sum: ``sum(g, 0)`` over the rows of a [B, C] gradient ``g``
# that a pointwise kernel has just computed (the GELU's or tanh's backward times the
# incoming gradient), and that the two matrix multiplies of the weight and input gradients
# read as well. The pointwise loop walks [B, C] with C innermost; the column sum's space is
# x = [C], r = [B]: the reduced dim outermost, so the pointwise loop fitted neither "x" nor
# "xr", and the sum was a kernel of its own that read all of ``g`` back. The placement "rx"
# maps the loop with the reduced dims first: [B, C] over (r, x), ``g[b, c]`` at ``b = r``,
# ``c = x``; or, for the partials of a split column sum ([Note: split column sums]), whose
# space is x = [S, C], r = [B / S], over (x0, r, x1): ``b = x0 * B / S + r``. Then the sum
# reads the element its own iteration wrote, and the producer and the partial sums are one
# kernel that stores ``g`` and sums it in registers: one launch and one pass over ``g``
# fewer per bias gradient, and with [Note: the last program finishes] the whole gradient
# is one launch. The kernel is a column sum's: tiles of 32 columns, the loads and stores of
# the pointwise loop coalesced along them as the sum's are. Only a split's partials take
# the producer: an unsplit column sum runs one program per 32 columns down every row, too
# few programs for a pointwise loop over all of [B, C]. And only loops joined through what
# they compute: the partial sums must read what the pointwise group wrote, and a pointwise
# loop that joins a group already holding the sums must read it too (``g * x``, next to
# ``g``'s bias gradient: one launch and one read of ``g`` fewer). Pointwise loops that
# merely fit (a GPT backward's other [B*T, C] gradients) used to join the column sums'
# kernels sideways and left their own groups: four kernels more in a two-layer GPT's
# backward, not fewer (``producer_refused``).
def producer_refused(group: FusedGroup, node: SchedulerNode) -> str | None:
    """Why the kernel must not run a pointwise loop placed "rx" ([Note: a column sum's
    producer]), or None when it may (or none is placed so)."""
    # BEGIN EXERCISE inductor-column-producer: when may a column sum's kernel run a pointwise loop?
    members = [*group.nodes, node]
    space = space_with(group.nodes, node)
    if not any(p is not None and p.kind == "rx" for p in (n.place(space) for n in members)):
        return None
    reductions = [n for n in members if n.is_reduction()]
    if not getattr(reductions[0].buffer, "chunk_first", None):
        return "an unsplit column sum: too few programs for a pointwise loop"
    if not {name for name, _ in node.reads} & set(group.written()):
        return "a column sum's kernel takes only loops that read what it computes"
    return None
    # END EXERCISE inductor-column-producer
# --8<-- [end:column-producer]


# [Note: one tile, one direction]
# A reduction kernel's tile is ``XBLOCK`` rows by ``RBLOCK`` reduced elements, and its loads
# are coalesced along one of the two axes: along r for a row sum, along x for a column sum
# ([Note: outer reductions] in codegen/triton_reduction.py picks which). A pointwise loop
# placed in that space keeps its own memory order: the gradient of a Linear layer's input
# walks [B, C] along C, which is r in a kernel whose reduction is the bias gradient's sum
# over B. Fused, one of the two reads 16 bytes per 32-byte sector at best: in mlp_train's
# backward the bias gradient's column sum, fused with the GELU backward next to it, took
# ten times as long as a column-sum kernel of its own. A horizontal fusion (no buffer
# shared) only saves a launch, so it is refused when the group's loads and the node's run
# along different axes of the kernel's space.
# --8<-- [start:one-direction]
def walk_axis(index: sympy.Expr, xsyms: Sequence[Any], rsyms: Sequence[Any]) -> str | None:
    """"r" or "x": the axis of a reduction space along which ``index`` moves one element
    at a time (r first, as the printer orders tiles); None for neither."""
    index = sympy.expand(index)
    unit = {s for s in index.free_symbols if index.coeff(s) == 1}
    if unit & {s for s in rsyms if isinstance(s, sympy.Symbol)}:
        return "r"
    if unit & {s for s in xsyms if isinstance(s, sympy.Symbol)}:
        return "x"
    return None


def axis_balance(indices: Sequence[sympy.Expr], xsyms: Sequence[Any],
                 rsyms: Sequence[Any], moving_only: bool = False) -> int:
    """How many of ``indices`` walk along x, minus how many walk along r. ``moving_only``:
    count only the indices that change with both r and x ([Note: a load that stays put])."""
    if moving_only:
        rset = {s for s in rsyms if isinstance(s, sympy.Symbol)}
        xset = {s for s in xsyms if isinstance(s, sympy.Symbol)}
        indices = [index for index in indices
                   if (free := sympy.sympify(index).free_symbols) & rset
                   and (free & xset or not xset)]
    axes = [walk_axis(index, xsyms, rsyms) for index in indices]
    return axes.count("x") - axes.count("r")


# --8<-- [start:stays-put]
# [Note: a load that stays put]
# Whether a reduction is a column sum (its loads walk along the output rows, x) or a row sum
# (along the reduced elements, r) decides its tile and how it is split. A load whose address
# does not change with r, such as the target class of each row in the loss gradient
# ``where(class == target[row], ...)`` summed over GPT-2's 50,304 classes, is the same value
# for a whole row: it says nothing about the direction of the tile. Counted, the one
# ``target[row]`` load (read in both passes of that kernel) outvoted the logits' row and made
# the kernel a column sum with 32 x 32 tiles: 1.37 ms on the H200 (0.64 ms with the column-sum
# tile before it; 0.43 ms as the row sum it is). The same holds the other way round: a load
# whose address does not change with x, such as the mean of each row read by the layer-norm
# weight gradient ``sum over rows of grad * (x - mean[row]) * rstd[row]``, is one value per
# reduced element, shared by every output, and does not vote either. Counted, the two
# statistics outvoted ``grad`` and ``x`` and made that column sum a row sum: 75 us a layer
# of GPT-2 on the H200 instead of about 20.
# --8<-- [end:stays-put]


def grain(nodes: Sequence[SchedulerNode], space: Space) -> int:
    """Loads along x minus loads along r of ``nodes`` placed in ``space``."""
    return axis_balance([index for node in nodes for _, index in node.accesses(space).reads],
                        *space_symbols(space))


def crosses_grain(group: FusedGroup, node: SchedulerNode) -> bool:
    """Whether ``node`` would join a reduction kernel against its grain (see above)."""
    space = space_with(group.nodes, node)
    if not space[1]:  # a pointwise kernel: one flat order
        return False
    return grain(group.nodes, space) * grain([node], space) < 0
# --8<-- [end:one-direction]


def same_loops(group: FusedGroup, node: SchedulerNode) -> bool:
    """Could ``node`` share ``group``'s loops at all? (A cheap first look at earlier groups;
    ``can_fuse`` has the final word.)"""
    space = space_with(group.nodes, node)
    return (node.device == group.device and node.place(space) is not None
            and None not in group.placements(space))


def _members(group: FusedGroup) -> str:
    return "[" + ", ".join(n.name for n in group.nodes) + "]"


HORIZONTAL_WINDOW = 32  # groups looked back over for a horizontal fusion (compile time)


# --8<-- [start:scheduler-add]
class Scheduler:
    """Groups operations into kernels (see the module docstring)."""

    def __init__(self, operations: list, output_names: set[str],
                 origins: dict[str, list] | None = None) -> None:
        self.groups: list[FusedGroup | ExternNode] = []
        self.log: list[str] = []
        self.origins = origins or {}  # buffer name -> the prims-graph nodes it computes
        for op in operations:
            self.add(op)
        self.removed = self.find_removed(output_names)

    def add(self, op: ComputedBuffer | FallbackKernel) -> None:
        """Put ``op`` into the best legal group in reach, or into a new one."""
        if isinstance(op, FallbackKernel):
            self.groups.append(ExternNode(op))
            self.log.append(f"{op.name} ({op.op}): library call, not fused")
            return
        node = SchedulerNode.analyse(op)
        node.origins = list(self.origins.get(node.name, []))
        barrier = self.last_conflict(node)  # [Note: the reorder rule]
        first = max(barrier, len(self.groups) - HORIZONTAL_WINDOW, 0)
        best, best_score, best_reason = None, 0, ""
        for gid in range(len(self.groups) - 1, first - 1, -1):
            group = self.groups[gid]
            last = gid == len(self.groups) - 1
            if not isinstance(group, FusedGroup) or not (last or same_loops(group, node)):
                continue
            align_placements(group, node)  # [Note: a loop that fits two ways]
            legal, reason = can_fuse(group, node)
            score = score_fusion(group, node) if legal else 0
            if score > best_score:
                best, best_score, best_reason = gid, score, reason
            elif last or not legal:
                refused = legal and producer_refused(group, node)
                why = reason if not legal else (
                    "score 0 (group full)" if len(group.nodes) >= MAX_FUSED_NODES else
                    f"score 0 ({refused})" if refused else
                    "score 0 (no buffer shared, loads along another axis)")
                self.log.append(f"{node.name} not fused with {_members(group)}"
                                f"{'' if last else ' (earlier)'}: {why}")
        if best is None:
            self.log_reorder_rule(node, barrier)
            self.groups.append(FusedGroup([node]))
            return
        self.fuse(node, best, best_score, best_reason)

    def last_conflict(self, node: SchedulerNode) -> int:
        """The last group that writes a buffer ``node`` reads or writes, or reads one it
        writes: the earliest group ``node`` may join ([Note: the reorder rule]); -1 if there
        is none within ``HORIZONTAL_WINDOW``."""
        reads = {name for name, _ in node.reads}
        writes = {name for name, _ in node.writes}
        for gid in range(len(self.groups) - 1, max(-1, len(self.groups) - HORIZONTAL_WINDOW - 1),
                         -1):
            group = self.groups[gid]
            if self.writes_of(group) & (reads | writes) or self.reads_of(group) & writes:
                return gid
        return -1

    def fuse(self, node: SchedulerNode, gid: int, score: int, reason: str) -> None:
        """Add ``node`` to group ``gid`` and log it: vertical if it reads what the group
        writes, else horizontal."""
        group = self.groups[gid]
        consumes = {name for name, _ in node.reads} & set(group.written())
        kind = "vertical" if consumes else "horizontal"
        later = len(self.groups) - 1 - gid
        moved = f", moved back past {later} later group(s)" if later else ""
        self.log.append(f"fuse {node.name} into {_members(group)}: {kind}, score {score}"
                        f"{moved}; {reason}")
        group.nodes.append(node)

    def log_reorder_rule(self, node: SchedulerNode, barrier: int) -> None:
        """Say so when a group with the same loops is out of reach because group ``barrier``,
        after it, writes what ``node`` reads (or touches what it writes): the reorder rule."""
        reads = {name for name, _ in node.reads}
        writes = {name for name, _ in node.writes}
        for gid in range(barrier - 1, max(-1, len(self.groups) - HORIZONTAL_WINDOW - 1), -1):
            group = self.groups[gid]
            if isinstance(group, FusedGroup) and same_loops(group, node):
                blocker = self.groups[barrier]
                needs = sorted(reads & self.writes_of(blocker))
                touched = sorted(writes & (self.writes_of(blocker) | self.reads_of(blocker)))
                why = (f"reads {', '.join(needs)}, written after that kernel" if needs else
                       f"writes {', '.join(touched)}, also used after that kernel")
                self.log.append(f"{node.name} not fused with {_members(group)} (earlier): it "
                                f"{why} (the reorder rule)")
                return

    @staticmethod
    def writes_of(group: FusedGroup | ExternNode) -> set[str]:
        if isinstance(group, ExternNode):
            return {out.name for out in group.kernel.buffers()}
        return {name for node in group.nodes for name, _ in node.writes}

    @staticmethod
    def reads_of(group: FusedGroup | ExternNode) -> set[str]:
        if isinstance(group, ExternNode):
            return set(group.kernel.input_names())
        return group.read_names()
# --8<-- [end:scheduler-add]

    def find_removed(self, output_names: set[str]) -> set[str]:
        """Buffers written and read only inside one kernel need no memory at all."""
        readers: dict[str, set[int]] = {}
        for gid, group in enumerate(self.groups):
            names = (group.kernel.input_names() if isinstance(group, ExternNode)
                     else group.read_names())
            for name in names:
                readers.setdefault(name, set()).add(gid)
        removed = set()
        for gid, group in enumerate(self.groups):
            if isinstance(group, FusedGroup):
                for node in group.nodes:
                    if node.name not in output_names and readers.get(node.name, {gid}) == {gid}:
                        removed.add(node.name)
        for name in sorted(removed, key=lambda n: int(n[3:])):
            self.log.append(f"{name} lives only inside its kernel: not allocated")
        return removed

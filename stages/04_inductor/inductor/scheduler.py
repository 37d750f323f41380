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
We fuse greedily in program order, which can never reorder a read before its write.

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
from collections.abc import Sequence

import sympy

from inductor.ir import ComputedBuffer, FallbackKernel, index_vars
from inductor.virtualized import ReadWritesHandler, V

MAX_FUSED_NODES = 64  # past this a kernel gets hard to read and to compile; see score_fusion
Space = tuple[list[sympy.Expr], list[sympy.Expr]]  # (x sizes, r sizes) a kernel loops over


def space_symbols(space: Space) -> tuple[list[sympy.Expr], list[sympy.Expr]]:
    """The kernel-space index symbols: ``i*`` over the output rows, ``j*`` over reduced dims."""
    return index_vars(space[0], "i"), index_vars(space[1], "j")


def _non_one(sizes: Sequence[sympy.Expr]) -> list[sympy.Expr]:
    return [s for s in sizes if s != 1]


def map_dims(sizes: Sequence[sympy.Expr], space_sizes: Sequence[sympy.Expr],
             symbols: Sequence[sympy.Expr]) -> list[sympy.Expr] | None:
    """Index expressions for a loop over ``sizes`` inside a kernel loop over ``space_sizes``:
    the same dims once size-1 dims (always index 0) are dropped, else None."""
    if _non_one(sizes) != _non_one(space_sizes):
        return None
    free = iter(sym for sym, size in zip(symbols, space_sizes) if size != 1)
    return [sympy.Integer(0) if size == 1 else next(free) for size in sizes]


@dataclasses.dataclass
class Placement:
    """Where a node sits in a kernel's space (see [Note: reduction fusion])."""

    kind: str  # "reduction" | "x" (one value per output row) | "xr" (one per reduced element)
    index: list[sympy.Expr]
    rindex: list[sympy.Expr]


@dataclasses.dataclass
class SchedulerNode:
    """One ComputedBuffer with what its body reads and writes (at which indices)."""

    buffer: ComputedBuffer
    reads: list[tuple[str, sympy.Expr]]
    writes: list[tuple[str, sympy.Expr]]
    op_names: list[str]
    _accesses: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

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
        """How this node's loop maps onto ``space``, or None if it does not fit."""
        (xsyms, rsyms), (xs, rs) = space_symbols(space), space
        if self.is_reduction():
            index = map_dims(self.ranges, xs, xsyms)
            rindex = map_dims(self.buffer.reduction_ranges(), rs, rsyms)
            if index is None or rindex is None:
                return None
            return Placement("reduction", index, rindex)
        index = map_dims(self.ranges, xs, xsyms)
        if index is not None:
            return Placement("x", index, [])
        for split in range(len(self.ranges) + 1):  # outer dims over x, inner over r
            outer = map_dims(self.ranges[:split], xs, xsyms)
            inner = map_dims(self.ranges[split:], rs, rsyms)
            if outer is not None and inner is not None and _non_one(rs):
                return Placement("xr", outer + inner, [])
        return None

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
            self._accesses[key] = handler
        return self._accesses[key]


@dataclasses.dataclass
class FusedGroup:
    """Nodes that become one kernel, looping over one ``space``: (x sizes, r sizes).

    A pointwise-only group has no r sizes; a group holding reductions loops over the first
    reduction's output (x) and reduced (r) dims. See [Note: reduction fusion].
    """

    nodes: list[SchedulerNode]

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
        return {name for node in self.nodes for name, _ in node.reads}


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
    for name, index in node.accesses(space).reads:
        if name in written and index != written[name]:
            return False, (f"reads {name} at {index} but it is written at {written[name]}: "
                           f"another iteration's element")
    return True, "same loops, same-element dependencies only"
    # END EXERCISE inductor-can-fuse


def score_fusion(group: FusedGroup, node: SchedulerNode) -> int:
    """How much fusing saves: 10 per buffer the two share (traffic), 1 for the launch."""
    if len(group.nodes) >= MAX_FUSED_NODES:
        return 0
    shared = {name for name, _ in node.reads} & (set(group.written()) | group.read_names())
    return 10 * len(shared) + 1
# --8<-- [end:can-fuse]


class Scheduler:
    """Groups operations into kernels (see the module docstring)."""

    def __init__(self, operations: list, output_names: set[str]) -> None:
        self.groups: list[FusedGroup | ExternNode] = []
        self.log: list[str] = []
        for op in operations:
            self.add(op)
        self.removed = self.find_removed(output_names)

    def add(self, op: ComputedBuffer | FallbackKernel) -> None:
        if isinstance(op, FallbackKernel):
            self.groups.append(ExternNode(op))
            self.log.append(f"{op.name} ({op.op}): library call, not fused")
            return
        node = SchedulerNode.analyse(op)
        last = self.groups[-1] if self.groups else None
        if isinstance(last, FusedGroup):
            members = ", ".join(n.name for n in last.nodes)
            legal, reason = can_fuse(last, node)
            score = score_fusion(last, node) if legal else 0
            if legal and score > 0:
                consumes = {name for name, _ in node.reads} & set(last.written())
                kind = "vertical" if consumes else "horizontal"
                last.nodes.append(node)
                self.log.append(f"fuse {node.name} into [{members}]: {kind}, score {score}; "
                                f"{reason}")
                return
            why = reason if not legal else "score 0 (group full)"
            self.log.append(f"{node.name} not fused with [{members}]: {why}")
        self.groups.append(FusedGroup([node]))

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

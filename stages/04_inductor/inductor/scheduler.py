"""The scheduler: which loops run together in one kernel, and which buffers never hit memory.

Input: ``GraphLowering.operations`` (``ComputedBuffer`` and ``FallbackKernel`` in program
order) and the names of the graph outputs.
Output: ``Scheduler.groups``, a list in program order of ``FusedGroup`` (pointwise loops that
become ONE kernel) and ``ExternNode`` (a library call); ``Scheduler.removed``, the buffers
that only live inside one kernel (never allocated, never stored); ``Scheduler.log``, one
line per fusion decision with its reason (the ``fusion`` artifact).

Chapter: book/docs/inductor.md ("Scheduling and fusion").

[Note: fusion]
Two loops may share a kernel (``can_fuse``, the legality question) when they iterate over
the same ranges and every element the second one reads from the first was computed by the
*same* iteration of the fused loop: then no thread waits for another. Whether they should
(``score_fusion``) is a cost question: each buffer both touch is memory traffic saved (a
vertical fusion); loops sharing nothing still save a kernel launch (a horizontal fusion).
We fuse greedily in program order, which can never reorder a read before its write.
"""

from __future__ import annotations

import dataclasses

import sympy

from inductor.ir import ComputedBuffer, FallbackKernel, index_vars
from inductor.virtualized import ReadWritesHandler, V

MAX_FUSED_NODES = 64  # past this a kernel gets hard to read and to compile; see score_fusion


@dataclasses.dataclass
class SchedulerNode:
    """One ComputedBuffer with what its body reads and writes (at which indices)."""

    buffer: ComputedBuffer
    reads: list[tuple[str, sympy.Expr]]
    writes: list[tuple[str, sympy.Expr]]
    op_names: list[str]

    @classmethod
    def analyse(cls, buffer: ComputedBuffer) -> SchedulerNode:
        handler = ReadWritesHandler()
        with V.set_ops_handler(handler):
            buffer.data.store_output(buffer.name, buffer.layout, index_vars(buffer.layout.size))
        return cls(buffer, handler.reads, handler.writes, handler.op_names)

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def ranges(self) -> list[sympy.Expr]:
        return self.buffer.layout.size


@dataclasses.dataclass
class FusedGroup:
    """Pointwise nodes that become one kernel; they share ``ranges``."""

    nodes: list[SchedulerNode]

    @property
    def ranges(self) -> list[sympy.Expr]:
        return self.nodes[0].ranges

    @property
    def device(self):
        return self.nodes[0].buffer.layout.device

    def written(self) -> dict[str, sympy.Expr]:
        return {name: index for node in self.nodes for name, index in node.writes}

    def read_names(self) -> set[str]:
        return {name for node in self.nodes for name, _ in node.reads}


@dataclasses.dataclass
class ExternNode:
    """A library call; never fused."""

    kernel: FallbackKernel


# --8<-- [start:can-fuse]
def can_fuse(group: FusedGroup, node: SchedulerNode) -> tuple[bool, str]:
    """May ``node`` join ``group``'s kernel? Returns (legal, reason). See [Note: fusion]."""
    # BEGIN EXERCISE inductor-can-fuse: decide whether a pointwise node may join a fused group
    if node.buffer.layout.device != group.device:
        return False, "different devices"
    if list(node.ranges) != list(group.ranges):
        return False, f"different loop ranges {list(node.ranges)} vs {list(group.ranges)}"
    written = group.written()
    for name, index in node.reads:
        if name in written and index != written[name]:
            return False, (f"reads {name} at {index} but it is written at {written[name]}: "
                           f"another iteration's element")
    return True, "same ranges, same-element dependencies only"
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

"""One launch for a split reduction: the program that finishes a tile's partials last adds them.

Input: the scheduled groups and their printed Triton kernels (scheduler step -> kernel).
Output: the same, with each pair (a split reduction's partial kernel, the kernel that
reduces those partials) printed as one kernel at the first one's step.
Chapter: book/docs/inductor.md ("The last program finishes").

# --8<-- [start:note]
# [Note: the last program finishes]
# A split reduction ([Note: split reductions]) is two launches: many programs reduce chunks
# into a buffer of partials, then a second kernel reduces the partials of each output
# (and divides by the count, casts, whatever its epilogue holds). The second kernel does
# almost nothing on the GPU, but its launch and the partials' allocation cost the host
# about 14 us on the H200 (a bfloat16 sum of 8 M elements: 31 us of host a call as two
# kernels, 17 as one), and a training step bound by its host pays that for every loss's
# mean and every bias gradient. So the pair becomes one kernel. Each program of the first
# kernel knows which of the second kernel's programs (its *tile*: the outputs whose
# partials it wrote) will read what it wrote. When its partials are stored it waits for
# its threads (``tl.debug_barrier``) and adds one to that tile's counter with an atomic
# that publishes the stores (``sem="acq_rel"``). The program that reads ``need - 1`` from
# the counter, where ``need`` is how many programs write that tile's partials, is the last
# one: every partial of the tile is visible to it, so it runs the second kernel's body as
# that tile's program, then puts the counter back to zero for the next launch. The partials
# are added in the order the second kernel added them, so the result is the same number
# whichever program came last. (CUDA's threadFenceReduction sample and ATen's reductions
# finish the same way.)
#
# Which tile a program feeds follows from the partials' layout ([Note: split column sums]):
# with the chunk index last ([rows, S], a row sum; a full reduction is one row), program
# ``p`` of ``T1`` partial rows feeds tile ``p // (T2 * S / T1)`` of ``T2`` outputs; with
# the chunk first ([S, columns], a column sum such as a bias gradient), it feeds tile
# ``(p % (columns / T1)) // (T2 / T1)``, and each tile has ``S * T2 / T1`` writers. A pair
# whose block sizes do not divide so stays two kernels.
#
# The counters and the partials live in two buffers the stream keeps
# (``launcher.last_program_scratch``): the counters, int32s that are zero when made, and
# the partials, int32 slots the kernel addresses itself, each partials buffer at a 128-byte
# boundary (``(partials + 32).to(tl.pointer_type(tl.float32))``). Launches on one stream run
# one after the other: each finds the counters at zero and leaves them so, and nothing
# outside the kernel reads the partials; two streams get two pairs. (One buffer for both,
# partials after the counters, was a wrong answer on the GPU: a kernel with 64 tiles left
# partials in the slots where the next one, with 96, expected zero counters.) So the
# wrapper allocates nothing for the pair: in graph_breaks' training step on the H200 host,
# an allocation inside the step cost 4 to 20 us, and the step has five such pairs.
# --8<-- [end:note]
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import sympy

from inductor.codegen.triton import TRITON_TYPES, KernelSource
from inductor.scheduler import FusedGroup, Scheduler, reader_counts

COUNTER, PARTIALS = "counter", "partials"  # the wrapper's locals: this stream's scratch
ALIGN = 32  # int32 slots: each partials buffer starts at a 128-byte boundary


@dataclasses.dataclass
class Tiles:
    """How the first kernel's programs feed the second's: ``tile`` (an expression of
    ``pid``), how many programs feed each tile (``need``), and how many tiles there are."""

    tile: str
    need: int
    count: int


def finished_by_last_program(groups: list, kernels: dict[int, KernelSource],
                             outputs: set[str], log: list[str]) -> dict[int, KernelSource]:
    """``kernels`` with each partial kernel whose partials only a later reduction reads
    replaced by one kernel doing both (``finishes`` names the second group, whose step is
    left out). ``log`` gets a line per pair."""
    readers = reader_counts(groups)
    result = dict(kernels)
    sources: dict[str, str] = {}  # combined kernel name -> its source
    for step in sorted(kernels):
        first = result.get(step)
        later = reader_step(groups, step)
        if first is None or later is None or later not in result or first.finishes is not None:
            continue
        second = result[later]
        found = mergeable(groups[step], groups[later], first, second, readers, outputs)
        if found is None:
            continue
        partials, tiles = found
        kernel = combined_kernel(first, second, groups[later], tiles, partials)
        # two pairs whose kernels print alike ([Note: one kernel for equal loops]) may still
        # differ in sizes, which the combined kernel writes as numbers: then it is another
        for n in itertools.count(1):
            name = kernel.name + (f"_{n}" if n > 1 else "")
            if sources.setdefault(name, kernel.source.replace(kernel.name, name)) == \
                    kernel.source.replace(kernel.name, name):
                break
        result[step] = dataclasses.replace(kernel, name=name, source=sources[name])
        del result[later]
        log.append(f"{', '.join(b.name for b in partials)}: finished by the last program of "
                   f"each of {tiles.count} tile(s) of {first.name} ({second.name} folded in); "
                   "partials in the stream's scratch")  # [Note: the last program finishes]
    return result


def reader_step(groups: list, step: int) -> int | None:
    """The step of the group that reads the partials ``groups[step]`` writes, if its work may
    run at ``step``: nothing scheduled between writes a buffer it reads. (Usually the next
    step; a column sum that took its producer ([Note: a column sum's producer]) sits where
    the producer was, before the matrix multiplies that read the gradient.)"""
    group = groups[step]
    if type(group) is not FusedGroup:
        return None
    partials = {n.name for n in group.nodes if n.buffer.chunk_first is not None}
    between: set[str] = set()
    for later in range(step + 1, len(groups)):
        reads = Scheduler.reads_of(groups[later])
        if reads & partials:
            return later if not reads & between else None
        between |= Scheduler.writes_of(groups[later])
    return None


def mergeable(group: Any, after: Any, first: KernelSource, second: KernelSource,
              readers: dict[str, int], outputs: set[str]) -> tuple[list, Tiles] | None:
    """(the partials' buffers, the tiles) when ``second`` may run inside ``first``'s last
    programs, else None: two reductions over static sizes, ``first`` writing split partials
    that ``second`` alone reads, whose block sizes divide ([Note: the last program
    finishes]), and ``second`` needing no helper that ``first`` lacks."""
    if not all(type(g) is FusedGroup and g.is_reduction() for g in (group, after)):  # (no
        return None  # library call, no matrix multiply template)
    sizes = [*first.size_args(), *second.size_args()]
    if first.size_vars or second.size_vars or second.rnumel is None or \
            not all(isinstance(s, (int, sympy.Integer)) for s in sizes):
        return None
    nodes = {n.name: n for n in group.nodes}  # (what else ``first`` writes, such as the
    # gradient a bias gradient sums ([Note: a column sum's producer]), it writes as before)
    partials = [a for a in first.args if a in nodes and nodes[a].buffer.chunk_first is not None]
    layouts = {nodes[p].buffer.chunk_first for p in partials}
    if not partials or len(layouts) != 1:
        return None  # (not the partials of a split)
    if any(p not in second.args or p in outputs or readers.get(p) != 1 for p in partials):
        return None
    if not set(prefix(second.source)) <= set(prefix(first.source)) | {""}:
        return None  # a helper only the second kernel has
    tiles = tiling(layouts.pop(), int(first.numel), first.launch["XBLOCK"], int(second.numel),
                   second.launch["XBLOCK"], int(second.rnumel))
    return ([nodes[p].buffer for p in partials], tiles) if tiles is not None else None


# --8<-- [start:tiling]
def tiling(chunk_first: bool, rows1: int, t1: int, outputs: int, t2: int, splits: int
           ) -> Tiles | None:
    """The tiles of [Note: the last program finishes]: the first kernel has ``rows1``
    partial rows, ``t1`` a program; the second ``outputs`` rows of ``splits`` partials,
    ``t2`` a program."""
    if rows1 % t1 or outputs % t2:
        return None  # programs that straddle tiles
    if not chunk_first:  # [outputs, S]: a tile's partials are t2 * S neighbours
        if (t2 * splits) % t1:
            return None
        per = t2 * splits // t1
        return Tiles(f"pid // {per}", per, outputs // t2)
    if outputs % t1 or t2 % t1:  # [S, outputs]: a program's t1 outputs of one chunk
        return None
    return Tiles(f"(pid % {outputs // t1}) // {t2 // t1}", splits * (t2 // t1), outputs // t2)
# --8<-- [end:tiling]


def prefix(source: str) -> list[str]:
    """The lines of a kernel module before its kernel, comments left out."""
    lines = source.split("\n")
    return [line for line in lines[:kernel_start(lines)] if not line.lstrip().startswith("#")]


def kernel_start(lines: list[str]) -> int:
    """Index of the ``@triton.jit`` line of the module's last function (the kernel)."""
    return max(i for i, line in enumerate(lines) if line == "@triton.jit")


def parameters(source: str) -> list[str]:
    """The kernel's parameters as written (``rnumel: tl.constexpr`` included)."""
    lines = source.split("\n")
    definition = lines[kernel_start(lines) + 1]
    inside = definition[definition.index("(") + 1:definition.rindex(")")]
    return [p.strip() for p in inside.split(",") if p.strip()]


# --8<-- [start:combined]
def scratch_layout(partials: list) -> tuple[dict[str, int], int]:
    """Where each partials buffer starts in the stream's partials (in int32 slots, at a
    128-byte boundary), and how many slots the kernel needs in all."""
    offsets, end = {}, 0
    for buffer in partials:
        offsets[buffer.name] = start = -(-end // ALIGN) * ALIGN
        numel = math.prod(int(n) for n in buffer.layout.size)
        end = start + -(-numel * buffer.get_dtype().itemsize // 4)
    return offsets, end


def combined_kernel(first: KernelSource, second: KernelSource, after: FusedGroup,
                    tiles: Tiles, partials: list) -> KernelSource:
    """One kernel: ``first``'s body in every program, then ``second``'s for a tile in the
    program that finishes its partials, which it finds in the stream's scratch."""
    lines = second.source.split("\n")
    start = kernel_start(lines)
    body = [lines[start], lines[start + 1].replace("):", ", pid):", 1)]  # its program: pid
    body += [line.replace("tl.program_id(0)", "pid") for line in lines[start + 2:]]
    params1, params2 = parameters(first.source), parameters(second.source)
    offsets, slots = scratch_layout(partials)
    dtypes = {b.name: TRITON_TYPES[b.get_dtype()] for b in partials}
    param1 = dict(zip(first.args, params1))  # buffer name -> the first kernel's parameter
    passed1 = [p.split(":")[0] for p in params1]
    passed2 = [param1[a] if a in offsets else f"last_{p}"
               for a, p in zip(second.args, params2)]  # a partial: the first's pointer
    own = [p for a, p in zip(second.args, passed2) if a not in offsets]
    buffers1 = [p for a, p in zip(first.args, params1) if a not in offsets]
    sizes1 = params1[len(first.args):]
    fixed2 = [*map(str, map(int, second.size_args())), str(second.launch["XBLOCK"]),
              str(second.launch["RBLOCK"])]
    name = f"{first.name}_then_{second.name.removeprefix('triton_')}"
    # (parameters, not buffer names: two pairs that print alike stay one kernel, compiled once)
    where = "; ".join(f"{param1[a]} at {o}" for a, o in offsets.items())
    text = [
        first.source.rstrip("\n"), "", "",
        *body, "", "",
        "@triton.jit",
        f"def {name}({', '.join([*buffers1, *own, COUNTER, PARTIALS, *sizes1])}):",
        f"    # {COUNTER}: {tiles.count} tile counter(s); {PARTIALS}: {where} (int32 slots)",
        *[f"    {param1[a]} = ({PARTIALS} + {o}).to(tl.pointer_type({dtypes[a]}))"
          for a, o in offsets.items()],
        f"    {first.name}({', '.join(passed1)})",
        "    tl.debug_barrier()  # this program's partials are stored",
        "    pid = tl.program_id(0)",
        f"    tile = {tiles.tile}  # the program of the second kernel that reads them",
        f"    done = tl.atomic_add({COUNTER} + tile, 1, sem='acq_rel')  # ... and published",
        f"    if done == {tiles.need - 1}:  # the tile's last writer: all its partials are in",
        f"        {second.name}({', '.join([*passed2, *fixed2, 'tile'])})",
        f"        tl.atomic_xchg({COUNTER} + tile, 0)  # ready for the next launch",
    ]
    args = [*(a for a in first.args if a not in offsets),
            *(a for a in second.args if a not in offsets), COUNTER, PARTIALS]
    return dataclasses.replace(first, name=name, source="\n".join(text) + "\n", args=args,
                               configs=[], finishes=after, counters=tiles.count,
                               scratch=slots)
# --8<-- [end:combined]


__all__ = ["COUNTER", "PARTIALS", "Tiles", "finished_by_last_program", "scratch_layout",
           "tiling"]

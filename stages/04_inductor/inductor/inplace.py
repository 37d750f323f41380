"""Writing the new value of a mutated input into the input's own memory.

Input: the lowered graph, the scheduler's groups, and the graph's input mutations as
aotautograd marks them (``gm.meta["input_mutations"]``: pairs of graph output position and
graph input position, the output being the input's new value).
Output: ``inplace_writes``: buffer name -> input name, for each new value that its kernel may
store straight into the input; the wrapper binds the buffer to the input instead of
allocating it, and returns the input itself as the output.

Chapter: book/docs/inductor.md ("Inputs written in place").

# --8<-- [start:inplace]
# [Note: writing an input in place]
# A graph is functional: a BatchNorm in training returns its running statistics' new values
# as outputs, and aotautograd's runtime copies each into its buffer after the call. The
# benchmark convnet has five BatchNorms, so each step allocated 15 buffers (running mean and
# variance, the batch count) for values that were copied away at once, with two
# ``_foreach_copy_`` launches to do it. Instead, the kernel that computes a new value can
# store it where the old one lies, when nothing can tell the difference:
# - the value is computed by a kernel (not a library call or a view), in the input's dtype
#   and layout (same sizes and strides), on the Triton target (the C++ kernels declare their
#   pointers ``__restrict__``: an input and an output may not share memory there);
# - no other output is the input or a view of it (in training, an input the backward needs
#   is among the forward's outputs, and must keep its old value), and no library call
#   reads the input;
# - the only loop that reads the input is the new value's own, and it reads each element at
#   the index where it stores the new one: each element is loaded before it is overwritten,
#   by the same program, whatever else the kernel does.
# aotautograd's runtime then finds the input among the outputs and skips the copy
# ([Note: inputs written in place] in its ``runtime.py``, which also bumps the input's
# autograd version, as the copy did).
# --8<-- [end:inplace]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy

from inductor.ir import ComputedBuffer, InputBuffer, ScatterBuffer
from inductor.mm_template import TemplateGroup
from inductor.scheduler import ExternNode, FusedGroup, SchedulerNode


def inplace_writes(mutations: Sequence[tuple[int, int]], graph: Any, groups: list,
                   removed: set[str], target: str) -> dict[str, str]:
    """Buffer name -> graph input name, for the new values stored into their inputs; see
    [Note: writing an input in place]."""
    if target != "triton" or not mutations:
        return {}
    nodes: dict[str, SchedulerNode] = {}
    readers: dict[str, list[tuple[SchedulerNode, sympy.Expr]]] = {}
    library_reads: set[str] = set()
    for group in groups:
        if isinstance(group, ExternNode):
            library_reads.update(group.kernel.input_names())
        elif isinstance(group, FusedGroup):
            if isinstance(group, TemplateGroup):  # its operands, read at any index
                library_reads.update(group.mm.input_names())
            for node in group.nodes:
                nodes[node.name] = node
                for name, index in node.reads:
                    readers.setdefault(name, []).append((node, index))
    returned = [getattr(o, "name", None) for o in graph.graph_outputs]
    found: dict[str, str] = {}
    for position, index in mutations:
        if position >= len(graph.graph_outputs) or index >= len(graph.graph_inputs):
            continue
        new, old = graph.graph_outputs[position], graph.graph_inputs[index]
        node = nodes.get(getattr(new, "name", None))
        if (node is None or not _same_memory_shape(new, old) or new.name in removed
                or returned.count(new.name) != 1 or old.name in returned
                or old.name in library_reads):
            continue
        writes = [i for name, i in node.writes if name == new.name]
        if len(writes) == 1 and all(reader is node and sympy.simplify(i - writes[0]) == 0
                                    for reader, i in readers.get(old.name, [])):
            found[new.name] = old.name
    return found


def _same_memory_shape(new: Any, old: Any) -> bool:
    """A pointwise kernel's buffer and a graph input of the same dtype, sizes and strides."""
    if (not isinstance(new, ComputedBuffer) or isinstance(new, ScatterBuffer)
            or new.is_reduction() or not isinstance(old, InputBuffer)):
        return False
    a, b = new.layout, old.layout
    return (a.dtype == b.dtype and len(a.size) == len(b.size)
            and all(sympy.simplify(x - y) == 0 for x, y in zip(a.size, b.size))
            and all(sympy.simplify(x - y) == 0 for x, y in zip(a.stride, b.stride))
            and sympy.simplify(getattr(b, "offset", 0)) == 0)

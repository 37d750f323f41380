"""primtorch: a small closed set of primitives, and decompositions of aten ops into them.

Public names (the contract the other stages rely on):

- ``primtorch.prims``: the primitives, real torch ops (``prims.sin`` is
  ``torch.ops.minipt2.sin.default``); ``prims.PRIMS`` maps name -> ``Prim`` record.
- ``primtorch.decomposition_table``: dict, aten OpOverload -> Python function written in prims.
- ``primtorch.register_decomposition``: the decorator that fills the table.
- ``primtorch.extern_ops``: aten ops we deliberately keep whole (inductor calls a library kernel).
- ``primtorch.coverage(graph)``: which calls of a graph are prims, extern ops or fallbacks.
- ``primtorch.DecompositionError``: raised when a decomposition gives up.

Chapter: book/docs/primtorch.md.
"""

from primtorch import decompositions, prims  # importing decompositions fills the table
from primtorch.registry import (
    DecompositionError,
    coverage,
    decomposition_table,
    extern_ops,
    op_kind,
    register_decomposition,
)

__all__ = [
    "DecompositionError",
    "coverage",
    "decomposition_table",
    "decompositions",
    "extern_ops",
    "op_kind",
    "prims",
    "register_decomposition",
]

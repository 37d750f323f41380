"""primtorch: a small closed set of primitives, and decompositions of aten ops into them.

Public names (the contract the other stages rely on):

- ``primtorch.prims``: the primitives, real torch ops (``prims.sin`` is
  ``torch.ops.minipt2.sin.default``); ``prims.PRIMS`` maps name -> ``Prim`` record.
- ``primtorch.decomposition_table``: dict, aten OpOverload -> Python function written in prims.
- ``primtorch.extern_ops``: aten ops we deliberately keep whole (inductor calls a library kernel).

Chapter: book/docs/primtorch.md.
"""

from primtorch import prims

__all__ = ["prims"]

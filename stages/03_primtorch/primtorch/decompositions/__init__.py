"""The decompositions, one module per family; importing this package fills
``primtorch.decomposition_table``.

Input: nothing (importing registers).
Output: entries in ``primtorch.registry.decomposition_table``.

Chapter: book/docs/primtorch.md ("The decomposition table").
"""

from primtorch.decompositions import creation, elementwise, normalization, reductions, views

__all__ = ["creation", "elementwise", "normalization", "reductions", "views"]

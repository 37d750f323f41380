"""The decompositions, one module per family; importing this package fills
``primtorch.decomposition_table``.

Input: nothing (importing registers).
Output: entries in ``primtorch.registry.decomposition_table``.

Chapter: book/docs/primtorch.md ("The decomposition table").

Families, roughly in the order a model's ops meet them: creation (factories, ranges),
elementwise (arithmetic, math, comparisons, logical), pointwise_math (composite math
functions), activations (and their backward ops), reductions (sum ... softmax and its
backward), normalization (layer/batch/group norm, forward and backward), losses, views,
slicing (slice/cat/split/pad and their backward ops), indexing (gather/scatter/embedding),
pooling, linalg (matmul epilogues, attention), random (dropout, rand, randn).
"""

from primtorch.decompositions import (
    activations,
    creation,
    elementwise,
    indexing,
    linalg,
    losses,
    normalization,
    pointwise_math,
    pooling,
    random,
    reductions,
    slicing,
    views,
)

__all__ = ["activations", "creation", "elementwise", "indexing", "linalg", "losses",
           "normalization", "pointwise_math", "pooling", "random", "reductions", "slicing", "views"]

"""Knobs of the dynamo stage. Plain module attributes; tests may assign to them.

Chapter: book/docs/dynamo.md ("Recompilation").
"""

from __future__ import annotations

import os

# How many compiled entries one code object may collect before further cache
# misses run eagerly. Each entry is one specialisation (dtype, shape, constant
# values...); a function that sees ever-new shapes would otherwise recompile
# forever. [Note: recompile limit] in eval_frame.py.
recompile_limit: int = 8


# True: a ``print`` whose arguments are known at trace time is replayed after the graph
# instead of breaking it ([Note: a print after the graph] in side_effects.py). False (the
# default, as in PyTorch's dynamo): every print is a graph break.
reorder_prints: bool = os.environ.get("MINIPT2_REORDER_PRINTS", "") == "1"


# [Note: ops kept out of the graph]
# Custom ops (``"ns::name"``) a backend could not trace the backward of: a call of one while
# autograd records (grad mode on, a tensor argument that requires grad) is a graph break, so
# the op runs eagerly and autograd records it as it would without us. The backend says so by
# raising an error with ``eager_ops`` (aotautograd does, [Note: an op whose backward cannot
# be traced] in its joint.py); the frame is then traced again. Filled at run time, emptied
# by ``dynamo.reset()``.
eager_ops: set[str] = set()


def strict() -> bool:
    """True when MINIPT2_STRICT=1: every fallback becomes an exception (read per call)."""
    return os.environ.get("MINIPT2_STRICT", "") == "1"

# Decompositions that run an aten op on meta tensors with symbolic sizes, where ATen's own
# C++ meta kernel wants concrete sizes ([Note: symbolic example values] in utils.py). The
# driver installs primtorch's table; dynamo alone specialises such sizes instead.
meta_decompositions: dict = {}

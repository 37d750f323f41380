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


def strict() -> bool:
    """True when MINIPT2_STRICT=1: every fallback becomes an exception (read per call)."""
    return os.environ.get("MINIPT2_STRICT", "") == "1"

# Decompositions that run an aten op on meta tensors with symbolic sizes, where ATen's own
# C++ meta kernel wants concrete sizes ([Note: symbolic example values] in utils.py). The
# driver installs primtorch's table; dynamo alone specialises such sizes instead.
meta_decompositions: dict = {}

"""Online softmax: a row's max and its sum of exponentials in one pass over the row.

Input: a fused reduction group (``scheduler.FusedGroup``) printed as a looped Triton kernel.
Output: ``online_sums(group)``, the sums that can be computed in the loop of the max they
subtract (sum node -> max node), which ``plan_loops`` then keeps in that loop and
``TritonReductionKernel`` prints with a running max ([Note: online softmax]).
Chapter: book/docs/inductor.md ("Online softmax").

# [Note: online softmax]
# A softmax (or a log-softmax, or a cross-entropy's log-sum-exp) over a row too long for
# registers is two reductions: m = max(x), then s = sum(exp(x - m)). The second reads the
# first, so a looped kernel reads the row twice: one loop for m, another for s. GPT-2's loss
# reads 8192 rows of 50257 logits, 823 MB in bfloat16; one pass instead of two took its
# forward kernel from 0.40 to 0.34 ms on the H200.
#
# Milakov and Gimelshein's online normalizer computes both in one pass. The row keeps the
# largest value it has seen, m', and each lane its sum of exponentials relative to it, s'.
# A tile that raises the largest value to m'' rescales the sums: s' * exp(m' - m'') +
# exp(h - m''), the same sums relative to the new max (one exp a row per tile for the
# rescaling, one an element for the terms). After the loop the lanes' sums add up to
# S = sum(exp(h - M)), M the row's largest h; the sum the graph asked for, sum(exp(h - m)),
# is S * exp(M - m), m the max the kernel computed alongside. In a softmax h is the very
# value whose max m is, M equals m and the factor is 1. A row that has seen only -inf (or
# nothing) keeps sums of 0 instead of computing exp(-inf - -inf); a NaN makes the sum NaN,
# as in two passes.
#
# The pattern is found on the loop bodies: a float32 ``sum`` whose body is exactly
# ``exp(h - load(m))``, ``m`` a ``max`` of the same group and ``h`` reading no reduction of
# the group (elementwise nodes of the group that the sum reads are looked through). Anything
# else keeps its second loop. Only the Triton kernels do this; the C++ kernels keep two
# loops (a row there comes back from cache, and the rescaling costs arithmetic).
"""

from __future__ import annotations

from typing import Any

import torch

from inductor.scheduler import FusedGroup
from inductor.virtualized import V, indirect_symbol


class _Trees:
    """An ops handler that returns each value as a nested tuple ``(op, *args)``: enough to
    match the shape of a loop body."""

    def __init__(self) -> None:
        self.stored: list[tuple[str, Any]] = []  # (buffer, value) of each store
        self._indirect = 0

    def load(self, name: str, index: Any) -> tuple:
        return ("load", name)

    def store(self, name: str, index: Any, value: Any, mode: str | None = None) -> None:
        self.stored.append((name, value))

    def store_reduction(self, name: str, index: Any, value: Any) -> None:
        self.stored.append((name, value))

    def reduction(self, dtype: torch.dtype, reduction_type: str, value: Any,
                  first: Any = None) -> tuple:
        return ("reduction", reduction_type, dtype, value)

    def masked(self, mask: Any, body: Any, other: Any) -> tuple:
        return ("masked", mask, body(), other)

    def indirect_indexing(self, value: Any, size: Any) -> Any:
        self._indirect += 1
        return indirect_symbol(f"online_tree_{self._indirect}")

    def __getattr__(self, name: str) -> Any:
        return lambda *args: (name, *args)


def _loads(tree: Any) -> set[str]:
    """The buffers a tree reads."""
    if not isinstance(tree, tuple):
        return set()
    if tree[:1] == ("load",):
        return {tree[1]}
    return set().union(*(_loads(arg) for arg in tree[1:]))


# --8<-- [start:online-sums]
def online_sums(group: FusedGroup, placements: dict[str, Any]) -> dict[str, str]:
    """Sum node -> max node, for each ``sum(exp(h - max))`` of ``group`` that the max's loop
    can compute too ([Note: online softmax]). Elementwise nodes of the group that the sum
    reads are looked through (a softmax's ``exp(x - max)`` is one: its division reads it
    too)."""
    trees, kinds = {}, {}
    for node in group.nodes:
        handler = _Trees()
        try:
            with V.set_ops_handler(handler):
                node.run(placements[node.name])
        except Exception:  # a body this matcher cannot follow: two loops, as before
            return {}
        if len(handler.stored) == 1:
            trees[node.name] = handler.stored[0][1]
            if node.is_reduction():
                kinds[node.name] = node.buffer.data.reduction_type
    inline = {name: tree for name, tree in trees.items() if name not in kinds}
    pairs = {}
    for name in kinds:
        match = _online_sum(_inlined(trees[name], inline, 0))
        if match is None:
            continue
        h, shift = match
        if kinds.get(shift) == "max" and not _loads(h) & set(kinds):
            pairs[name] = shift
    return pairs

# --8<-- [end:online-sums]


def _inlined(tree: Any, inline: dict[str, Any], depth: int) -> Any:
    """``tree`` with each load of an elementwise node of the group replaced by its value."""
    if not isinstance(tree, tuple) or depth > 64:
        return tree
    if tree[:1] == ("load",) and tree[1] in inline:
        return _inlined(inline[tree[1]], inline, depth + 1)
    return tuple(_inlined(arg, inline, depth + 1) for arg in tree)


def _online_sum(tree: Any) -> tuple[Any, str] | None:
    """``(h, m)`` when ``tree`` is a float32 ``sum(exp(h - load(m)))``, else None."""
    if not (isinstance(tree, tuple) and tree[:3] == ("reduction", "sum", torch.float32)):
        return None
    body = tree[3]
    if not (isinstance(body, tuple) and body[0] == "exp" and len(body) == 2):
        return None
    diff = body[1]
    if not (isinstance(diff, tuple) and diff[0] == "sub" and len(diff) == 3):
        return None
    h, shift = diff[1], diff[2]
    if not (isinstance(shift, tuple) and shift[0] == "load"):
        return None
    return h, shift[1]

"""The decomposition registry, the extern list, and a coverage report for prims graphs.

Input: decomposition functions (registered at import time by ``primtorch.decompositions``);
an FX graph of aten ops and prims (for ``coverage``).
Output: ``decomposition_table`` (aten OpOverload -> Python function written in prims),
``extern_ops`` (aten ops kept whole), ``coverage(graph)`` (which ops of a graph are prims,
extern calls, or fallbacks).

Chapter: book/docs/primtorch.md ("The decomposition table").

[Note: three kinds of ops] After tracing with ``decomposition_table`` a graph holds three
kinds of calls. Prims: the closed set a backend must generate code for. Extern ops: aten ops
we keep whole on purpose because a library kernel beats anything we would generate (matrix
multiply, convolution, attention, sort). Fallbacks: every other aten op, which nobody has
decomposed yet; the graph still runs (the backend calls the aten kernel), but a fallback
breaks fusion, so ``coverage`` names each one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch

from primtorch import prims

aten = torch.ops.aten


class DecompositionError(Exception):
    """A decomposition met an input it cannot express in prims (the stage's way to give up)."""


# --8<-- [start:register-decomposition]
decomposition_table: dict[torch._ops.OpOverload, Callable] = {}


def register_decomposition(*ops: torch._ops.OpOverload) -> Callable[[Callable], Callable]:
    """Decorator: ``fn`` is the decomposition of each of ``ops`` (aten OpOverloads).

    ``fn`` takes the op's arguments (same names, same defaults) and returns what the op
    returns, computed with prims and other aten ops (which are decomposed in turn). It may
    return ``NotImplemented`` to keep the op whole for this input (it becomes a fallback).
    """

    def decorator(fn: Callable) -> Callable:
        for op in ops:
            if not isinstance(op, torch._ops.OpOverload):
                raise TypeError(f"register_decomposition wants aten OpOverloads, got {op!r}")
            if op in decomposition_table:
                raise ValueError(f"{op} already has a decomposition")
            decomposition_table[op] = fn
        return fn

    return decorator
# --8<-- [end:register-decomposition]


def _extern_ops() -> frozenset:
    names = [
        "mm.default", "bmm.default",
        "convolution.default", "convolution_backward.default",
        "sort.default", "sort.stable", "topk.default", "cumsum.default",
    ]
    for attn in ["flash_attention", "efficient_attention", "flash_attention_for_cpu",
                 "cudnn_attention", "fused_attention_overrideable"]:
        names += [f"_scaled_dot_product_{attn}.default",
                  f"_scaled_dot_product_{attn}_backward.default"]
    ops = []
    for name in names:
        packet, overload = name.split(".")
        if hasattr(aten, packet):  # tolerate torch versions that lack a variant
            ops.append(getattr(getattr(aten, packet), overload))
    return frozenset(ops)


extern_ops: frozenset = _extern_ops()


def op_kind(target: object) -> str:
    """"prim", "extern" or "fallback" for a call_function target; "other" for Python
    functions such as operator.getitem."""
    if prims.is_prim(target):
        return "prim"
    if target in extern_ops:
        return "extern"
    if isinstance(target, torch._ops.OpOverload):
        return "fallback"
    return "other"


def coverage(graph: torch.fx.Graph | torch.fx.GraphModule) -> dict[str, Counter]:
    """Count a graph's calls by kind: ``{"prim": ..., "extern": ..., "fallback": ...}``,
    each a Counter from op name (``"minipt2.add.default"``, ``"aten.mm.default"``) to uses."""
    if isinstance(graph, torch.fx.GraphModule):
        graph = graph.graph
    report: dict[str, Counter] = {"prim": Counter(), "extern": Counter(), "fallback": Counter()}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        kind = op_kind(node.target)
        if kind != "other":
            report[kind][_op_name(node.target)] += 1
    return report


def _op_name(op: torch._ops.OpOverload) -> str:
    return f"{op.namespace}.{op._schema.name.split('::')[-1]}.{op._overloadname}"

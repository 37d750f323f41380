"""Constant folding: compute at compile time what the graph's constants alone decide.

Input: a prims graph module whose ``get_attr`` nodes read tensors made in the traced code
(``torch.tensor(d_head)``), and the device the graph's kernels run on.
Output: the same module, changed in place: each largest piece of the graph computed from
constants alone is one constant, and a 0-dim constant is a number written into the kernels
(a ``prims.full`` on the graph's device), wherever the traced code made it.

Chapter: book/docs/inductor.md ("Constant folding").
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from primtorch import prims
from primtorch.prims import PRIMS

# --8<-- [start:note]
# [Note: constant folding]
# DeBERTa scales its attention scores by ``torch.sqrt(torch.tensor(d_head, dtype=float) *
# factor)``: a tensor the traced code makes from Python numbers, which the trace keeps as a
# ``get_attr`` constant ([Note: tensor constants] in compile_fx.py), then a multiply and a
# square root of it, all on the CPU, since ``torch.tensor`` makes CPU tensors whatever device
# the model is on. Eager reads a 0-dim CPU tensor beside CUDA ones as a number, so the model
# works; a compiled graph cannot hand a Triton kernel host memory. Before lowering, then,
# every node whose inputs are all constants (tensor ``get_attr`` nodes, other such nodes and
# Python numbers) is run once, by eager torch on the real values, and each value that a
# non-constant node reads becomes one new constant; the nodes that computed it go away.
#
# A 0-dim constant then becomes ``prims.full([], value, dtype, device)`` on the graph's
# device: the lowering writes it into the kernels as a literal, as eager reads a CPU scalar.
# The value and dtype are the constant's own (a float32 square root stays a float32 number;
# Python's float holds every float32, bfloat16 and float64 value exactly), and dtypes were
# settled when the graph was decomposed: prims never promote, so the casts that eager's
# promotion makes (a 0-dim tensor beside a tensor with dims keeps the latter's dtype, as a
# Python number does) are already nodes of the graph, and folding runs those nodes too. A
# constant with dims stays a tensor, lifted to an input as before; on another device than
# the graph's it is still a compile error.
#
# What is not folded:
# - anything but a prim of the closed set (extern aten calls, in-place ops), and the prims
#   whose result is not a function of their inputs: random numbers (``seed``, ``rand``) and
#   ``scatter_add``, whose float sums a GPU adds in any order;
# - a value larger than the constants it is computed from together (one element at least):
#   ``broadcast_in_dim`` of a scalar to [B, T, C] or a ``full`` the size of the activations
#   stays a view or a literal in the kernel that reads it, rather than memory held for the
#   graph's life. So nothing folded, nor anything computed on the way, is larger than what
#   the graph module already held;
# - a value the graph returns: the caller gets a fresh tensor, on the device eager puts it.
# Parameters, buffers and tensors from outside the frame are graph inputs, read at each call,
# so no folded value can go stale; a ``get_attr`` holds only what the traced code made.
# --8<-- [end:note]

UNFOLDABLE = frozenset(p.op for p in PRIMS.values() if p.kind == "random") | {prims.scatter_add}


def foldable(node: torch.fx.Node) -> bool:
    """A prim whose result depends only on its inputs' values."""
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and node.target.namespace == prims.full.namespace
            and node.target not in UNFOLDABLE)


def numel(node: torch.fx.Node) -> int | None:
    """The number of elements of ``node``'s value, from its traced metadata, if static."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return int(val.numel())
    except TypeError:  # symbolic sizes
        return None


# --8<-- [start:constant-values]
def constant_values(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, torch.Tensor]:
    """Every node of ``gm`` whose value is decided by the constants alone, and that value
    (computed here, by eager torch): [Note: constant folding]."""
    values: dict[torch.fx.Node, torch.Tensor] = {}
    sources: dict[torch.fx.Node, frozenset[torch.fx.Node]] = {}  # the get_attrs it reads
    made: set[torch.fx.Node] = set()  # full/iota of numbers: computed when a constant reads it
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = operator.attrgetter(node.target)(gm)
            if (isinstance(value, torch.Tensor) and value.device.type != "meta"
                    and not isinstance(value, torch.nn.Parameter)):
                values[node], sources[node] = value.detach(), frozenset([node])
            continue
        inputs = node.all_input_nodes
        if not foldable(node) or not all(n in values or n in made for n in inputs):
            continue
        if not inputs:
            made.add(node)
            continue
        read = frozenset().union(*(sources.get(n, frozenset()) for n in inputs))
        allowed = max(1, sum(values[n].numel() for n in read))
        fresh = [n for n in inputs if n not in values] + [node]
        if any((numel(n) or 0) > allowed for n in fresh):  # known to be too big: not computed
            continue
        for n in fresh:
            value = evaluate(n, values)
            if value is None or value.numel() > allowed:
                break
            values[n], sources[n] = value, read if n is node else frozenset()
    return values
# --8<-- [end:constant-values]


def evaluate(node: torch.fx.Node, values: dict[torch.fx.Node, torch.Tensor]) -> Any:
    """``node``'s op run on its inputs' values, in the strides its traced value has (the
    lowering trusts those); None if the op fails or makes no tensor."""
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), values.__getitem__)
    try:
        with torch.no_grad():
            value = node.target(*args, **kwargs)
    except Exception:  # a prim these values do not suit stays in the graph, to fail there
        return None
    if not isinstance(value, torch.Tensor):
        return None
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and value.stride() != val.stride():
        value = torch.empty_strided(value.shape, val.stride(), dtype=value.dtype,
                                    device=value.device).copy_(value)
    return value


def fresh_name(gm: torch.fx.GraphModule, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(len(gm.graph.nodes) + 1)
                if not hasattr(gm, f"{prefix}{i}"))


def as_number(value: torch.Tensor, device: torch.device) -> bool:
    """Whether the constant ``value`` is written into the graph's kernels as a literal: 0-dim,
    real, and on the CPU or the graph's own device (eager mixes no other with the graph's)."""
    return (value.ndim == 0 and not value.is_complex()
            and value.device.type in ("cpu", device.type))


def worth_replacing(node: torch.fx.Node, value: torch.Tensor, device: torch.device) -> bool:
    """A computed constant is; a ``get_attr`` only to become a number; a ``full`` or ``iota``
    of Python numbers alone is a literal in the kernels already."""
    if node.op == "get_attr":
        return as_number(value, device)
    return bool(node.all_input_nodes)


# --8<-- [start:fold-constants]
def fold_constants(gm: torch.fx.GraphModule, device: torch.device) -> int:
    """Replace each constant that a non-constant node reads by one new constant (in place):
    a literal ``prims.full`` if 0-dim, else a new ``get_attr``. Returns how many nodes went
    away. ``device``: where the graph's kernels run ([Note: constant folding])."""
    graph, before = gm.graph, len(gm.graph.nodes)
    values = constant_values(gm)
    for node, value in values.items():
        readers = [u for u in node.users if u not in values and u.op != "output"]
        if not readers or not worth_replacing(node, value, device):
            continue  # read only by constants (or returned), or a constant as it stands
        with graph.inserting_before(node):
            if as_number(value, device):
                new = graph.call_function(prims.full, ([], value.item()),
                                          {"dtype": value.dtype, "device": device})
            else:
                name = fresh_name(gm, "_folded_constant")
                gm.register_buffer(name, value)
                new = graph.get_attr(name)
        new.meta.update(node.meta)  # "val": the same shape and dtype (a meta tensor)
        node.replace_all_uses_with(new, delete_user_cb=set(readers).__contains__)
    for node in list(reversed(graph.nodes)):  # what no one reads any more, last readers first
        if node in values and not node.users:
            graph.erase_node(node)
    gm.recompile()
    return before - len(graph.nodes)
# --8<-- [end:fold-constants]

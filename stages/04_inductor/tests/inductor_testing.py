"""Test helpers: build prims graphs by hand (what aotautograd will hand to inductor).

``prims_graph(fn, inputs)`` calls ``fn(p, *nodes)``; ``p.<prim>(...)`` adds a call of that
prim to the graph and fills ``node.meta["val"]`` by running the prim on meta tensors, so
shapes are known while building (``p.bcast`` and ``p.scalar`` use them).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from primtorch import prims


def meta_of(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def device_for(target: str) -> torch.device:
    """Triton kernels run on the GPU when there is one, else in the interpreter on CPU."""
    cuda = target == "triton" and torch.cuda.is_available()
    return torch.device("cuda" if cuda else "cpu")


def to_target(tensors: list[torch.Tensor], target: str) -> list[torch.Tensor]:
    """The inputs on the target's device, keeping their strides (non-contiguous stays so)."""
    device = device_for(target)
    if device.type == "cpu":
        return list(tensors)
    moved = []
    for t in tensors:  # copy the whole storage, then view it the same way (expand included)
        storage = torch.tensor([], dtype=t.dtype).set_(t.untyped_storage()).to(device)
        moved.append(storage.as_strided(t.shape, t.stride(), t.storage_offset()))
    return moved


def assert_close(got, want, **kwargs) -> None:
    """``torch.testing.assert_close`` with ``got`` brought back to the CPU first."""
    torch.testing.assert_close(got.cpu() if isinstance(got, torch.Tensor) else got, want,
                               **kwargs)


class PrimsBuilder:
    def __init__(self, device: torch.device) -> None:
        self.graph = torch.fx.Graph()
        self.device = device

    def call(self, op: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
        node = self.graph.call_function(op, args, kwargs)
        margs, mkwargs = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        node.meta["val"] = op(*margs, **mkwargs)
        return node

    def __getattr__(self, name: str) -> Callable[..., torch.fx.Node]:
        op = prims.PRIMS[name].op
        return lambda *args, **kwargs: self.call(op, *args, **kwargs)

    def bcast(self, x: torch.fx.Node, shape: list[int]) -> torch.fx.Node:
        """numpy-style broadcasting spelled with prims.broadcast_in_dim."""
        ndim = x.meta["val"].dim()
        return self.broadcast_in_dim(x, list(shape), list(range(len(shape) - ndim, len(shape))))

    def scalar(self, value: Any, like: torch.fx.Node) -> torch.fx.Node:
        val = like.meta["val"]
        return self.full(list(val.shape), value, dtype=val.dtype, device=self.device)


def prims_graph(fn: Callable, inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
    p = PrimsBuilder(inputs[0].device if inputs else torch.device("cpu"))
    nodes = []
    for i, t in enumerate(inputs):
        node = p.graph.placeholder(f"x{i}")
        node.meta["val"] = meta_of(t)
        nodes.append(node)
    out = fn(p, *nodes)
    p.graph.output(tuple(out) if isinstance(out, (list, tuple)) else (out,))
    return torch.fx.GraphModule(torch.nn.Module(), p.graph)


def results(p, node, count):
    """The getitem nodes of a prim with several results (what aotautograd's graphs hold)."""
    items = []
    for k in range(count):
        item = p.graph.call_function(operator.getitem, (node, k))
        item.meta["val"] = node.meta["val"][k]
        items.append(item)
    return items


def shape_of(node: torch.fx.Node) -> list[int]:
    return list(node.meta["val"].shape)

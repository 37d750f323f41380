"""Polyfills: plain-Python stand-ins for library functions the trace cannot step through.

Input: a call of a real function (``UserFunctionVariable.call_function``) and its argument
trackers. Output: the stand-in to inline in its place, when one is registered for the
function and applies to these arguments; else None, and the function is inlined as before.
Chapter: book/docs/dynamo.md ("Code from libraries").

# [Note: polyfills]
# Some library functions are written for a compiler that knows them by name. Falcon-Mamba's
# selective scan calls ``torch._higher_order_ops.associative_scan`` whenever it is being
# compiled: a higher-order op that flattens its pytree, wraps the combine function in
# ``vmap`` and hands both to a dispatcher key of its own. None of that can be stepped through
# here, so the call broke the graph, and every Mamba layer ran its scan eagerly between two
# graphs. PyTorch's dynamo answers such calls with "polyfills": the same semantics written
# in plain Python that it traces instead. So do we: ``SUBSTITUTES`` maps a function to
# ``(stand-in, applies)``; ``applies(args, kwargs)`` looks at the argument trackers and says
# whether the stand-in has exactly the function's semantics for them. When it has not (an
# argument eager would refuse, a structure the stand-in does not know), the real function is
# inlined as before, and whatever happened before happens.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from .variables.base import VariableTracker
from .variables.lists import BaseListVariable
from .variables.tensor import TensorVariable, constant_or_none


# --8<-- [start:associative-scan]
def associative_scan(combine_fn: Callable, xs: Any, dim: int, reverse: bool = False,
                     combine_mode: str = "pointwise") -> Any:
    """torch's ``associative_scan`` by its definition, one step at a time along ``dim``:
    ``out[0] = xs[0]``, ``out[i] = combine_fn(out[i - 1], xs[i])`` (from the end when
    ``reverse``: ``out[i] = combine_fn(out[i + 1], xs[i])``). ``combine_fn`` sees one slice
    of each leaf, the scan dimension removed, as torch's ``vmap`` hands it; ``xs`` is a
    tensor, or a tuple or list of tensors of one shape, and the result has its structure.
    An associative ``combine_fn`` gives torch's result up to rounding (torch combines in a
    tree, this in a row)."""
    tree = isinstance(xs, (tuple, list))
    leaves = list(xs) if tree else [xs]
    dim = dim + leaves[0].ndim if dim < 0 else dim
    n = leaves[0].shape[dim]
    carry, outs = None, {}
    for i in range(n - 1, -1, -1) if reverse else range(n):
        item = [x.select(dim, i) for x in leaves]  # each (*shape without dim)
        item = (tuple(item) if isinstance(xs, tuple) else item) if tree else item[0]
        if carry is None:
            carry = item
        elif tree:  # the result, read back in the structure of ``xs`` (torch's pytree)
            out = list(combine_fn(carry, item))
            carry = tuple(out) if isinstance(xs, tuple) else out
        else:
            carry = combine_fn(carry, item)
        outs[i] = carry
    if not tree:
        return torch.stack([outs[i] for i in range(n)], dim)
    stacked = [torch.stack([outs[i][k] for i in range(n)], dim) for k in range(len(leaves))]
    return tuple(stacked) if isinstance(xs, tuple) else stacked
# --8<-- [end:associative-scan]


def _scan_applies(args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> bool:
    """The arguments eager accepts and the stand-in knows: a tensor or a plain tuple or
    list of tensors of one rank, constant ``dim`` and ``reverse``, and a ``combine_mode``
    eager runs on these devices ("pointwise" is for CUDA and XPU tensors only)."""
    try:
        bound = inspect.signature(associative_scan).bind(*args, **kwargs)
    except TypeError:
        return False
    bound.apply_defaults()
    xs = bound.arguments["xs"]
    if isinstance(xs, TensorVariable):
        leaves = [xs]
    elif isinstance(xs, BaseListVariable) and xs.python_type() in (tuple, list):
        leaves = list(xs.items)
    else:
        return False
    dim, reverse, mode = (constant_or_none(bound.arguments[name])
                          for name in ("dim", "reverse", "combine_mode"))
    if not leaves or not all(isinstance(x, TensorVariable) for x in leaves) \
            or type(dim) is not int or type(reverse) is not bool:
        return False
    ndim = leaves[0].example.ndim
    if not -ndim <= dim < ndim or any(x.example.ndim != ndim for x in leaves) \
            or any(type(x.example.shape[dim]) is not int
                   or not 0 < x.example.shape[dim] <= MAX_SCAN_STEPS for x in leaves):
        return False
    return mode == "generic" or (
        mode == "pointwise" and all(x.device.type in ("cuda", "xpu") for x in leaves))


# The stand-in unrolls its loop into the graph, one combine per step: a static length up to
# this many steps (a longer scan keeps the old way, a break around torch's own tree scan,
# rather than a graph of thousands of nodes to compile).
MAX_SCAN_STEPS = 256

# Keyed by where the function is defined, so that nothing of torch's higher-order ops is
# imported unless a traced program already did.
SUBSTITUTES: dict[tuple[str, str], tuple[Callable, Callable[..., bool]]] = {
    ("torch._higher_order_ops.associative_scan", "associative_scan"):
        (associative_scan, _scan_applies),
}


def substitute(fn: Callable, args: list[VariableTracker],
               kwargs: dict[str, VariableTracker]) -> Callable | None:
    """The stand-in to inline for ``fn(*args, **kwargs)``, or None ([Note: polyfills])."""
    key = (getattr(fn, "__module__", None), getattr(fn, "__qualname__", None))
    found = SUBSTITUTES.get(key)
    if found is None or not found[1](args, kwargs):
        return None
    return found[0]

"""The one module that reaches into PyTorch's own compiler stages.

Input/output: dynamo backends (``backend(gm, example_inputs) -> callable``) built from
PyTorch's stages, so that one of ours can be swapped for the real one.

Chapter: book/docs/driver.md ("Swapping a stage"). DESIGN.md allows these imports here and
nowhere else in ``stages/`` or ``driver/``; a test enforces that.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def torch_inductor_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """Our dynamo's graph, compiled by PyTorch's Inductor (its AOTAutograd and Inductor).

    PyTorch's Inductor learns symbolic sizes from FakeTensors, which our graph does not
    carry (its symbolic sizes are our own SymInts): it compiles for the example's sizes. So
    a graph with symbolic sizes (book/docs/dynamic-shapes.md) is compiled again for each
    new input shape, which is always correct."""
    from torch._inductor.compile_fx import compile_fx

    def compile_for(args: list) -> Callable:
        return compile_fx(gm, list(args))

    if not _has_symbolic_inputs(gm):
        compiled = compile_for(example_inputs)
        by_shape = None
    else:
        by_shape = {_shape_key(example_inputs): compile_for(example_inputs)}

    def run(*args):
        if by_shape is None:
            out = compiled(*args)
        else:
            key = _shape_key(args)
            if key not in by_shape:
                by_shape[key] = compile_for(list(args))
            out = by_shape[key](*args)
        return out if isinstance(out, (tuple, list)) else (out,)

    return run


def _has_symbolic_inputs(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        if node.op == "placeholder" and isinstance(value, torch.Tensor) and any(
                isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride())):
            return True
    return False


def _shape_key(args) -> tuple:
    return tuple((tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor) else a
                 for a in args)


def torch_compile(fn: Callable, **kwargs) -> Callable:
    """PyTorch's ``torch.compile``: the peer we measure against (CLI and benchmarks)."""
    return torch.compile(fn, **kwargs)

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
    """Our dynamo's graph, compiled by PyTorch's Inductor (its AOTAutograd and Inductor)."""
    from torch._inductor.compile_fx import compile_fx

    compiled = compile_fx(gm, list(example_inputs))

    def run(*args):
        out = compiled(*args)
        return out if isinstance(out, (tuple, list)) else (out,)

    return run


def torch_compile(fn: Callable, **kwargs) -> Callable:
    """PyTorch's ``torch.compile``: the peer we measure against (CLI and benchmarks)."""
    return torch.compile(fn, **kwargs)

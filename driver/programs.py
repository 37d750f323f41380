"""The programs the CLI compiles: the built-in demo, or ``FILE[:NAME]``.

Input: a spec string ``FILE[:NAME]`` (or nothing, for the demo) and a target.
Output: ``Program(name, fn, inputs)``: a callable (function or ``nn.Module``) and its arguments.

The file convention (README, book/docs/driver.md):

- ``NAME`` (default ``model``) is a function to compile, an ``nn.Module`` instance, an
  ``nn.Module`` subclass (instantiated with no arguments), or a *factory*: a function with no
  parameters that returns the module or function to compile;
- ``example_inputs()`` returns the arguments, a tuple.

Chapter: book/docs/driver.md.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch


class ProgramError(Exception):
    """A FILE or NAME the CLI cannot use; the message says which and why."""


@dataclass
class Program:
    name: str
    fn: Callable
    inputs: tuple


def demo(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # --8<-- [start:demo]
    return (x.sin() + y.cos()) * 2 - x
    # --8<-- [end:demo]


def default_target() -> str:
    return "triton" if torch.cuda.is_available() else "cpp"


def demo_inputs(target: str, numel: int | None) -> tuple:
    device = "cuda" if torch.cuda.is_available() and target == "triton" else "cpu"
    if numel is None:
        # The Triton interpreter runs kernels in numpy: keep it small on the CPU.
        numel = {"cuda": 1 << 26}.get(device, 1 << 20 if target != "triton" else 1 << 14)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(numel, generator=gen).to(device)
    y = torch.randn(numel, generator=gen).to(device)
    return x, y


def _is_factory(obj: object) -> bool:
    if not inspect.isfunction(obj):
        return False
    params = inspect.signature(obj).parameters.values()
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in params)


def _materialise(obj: object, where: str) -> Callable:
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        return obj()
    if _is_factory(obj):
        obj = obj()
    if not callable(obj):
        raise ProgramError(f"{where} is a {type(obj).__name__}, not a function or nn.Module")
    return obj


def load(spec: str | None, target: str, numel: int | None = None) -> Program:
    """The demo (``spec`` None) or ``FILE[:NAME]`` with the file's ``example_inputs()``."""
    if spec is None:
        return Program("demo", demo, demo_inputs(target, numel))
    path, _, name = spec.partition(":")
    name = name or "model"
    if not Path(path).is_file():
        raise ProgramError(f"FILE {path!r} does not exist")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise ProgramError(f"{path} has no NAME {name!r} (use FILE:NAME)")
    if not callable(getattr(module, "example_inputs", None)):
        raise ProgramError(f"{path} needs an example_inputs() function returning the arguments")
    fn = _materialise(getattr(module, name), f"{path}:{name}")
    inputs = module.example_inputs()
    return Program(name, fn, tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,))


def compare(expected, actual) -> tuple[bool, float]:
    """Eager is the oracle: same structure, values within the dtype's tolerance."""
    flat_e, _ = torch.utils._pytree.tree_flatten(expected)
    flat_a, _ = torch.utils._pytree.tree_flatten(actual)
    worst = 0.0
    for e, a in zip(flat_e, flat_a):
        if isinstance(e, torch.Tensor):
            try:
                torch.testing.assert_close(a, e, equal_nan=True)
            except AssertionError:
                return False, float("inf")
            diff = (a.double() - e.double()).abs().max().item() if e.numel() else 0.0
            worst = max(worst, diff)
        elif e != a:
            return False, float("inf")
    return len(flat_e) == len(flat_a), worst

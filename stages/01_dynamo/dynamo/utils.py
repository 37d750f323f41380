"""Helpers shared by the interpreter and the cache: example values and sources.

Input: an operation about to enter the graph (kind, target, tracker args),
or a source expression and a frame. Output: the operation's example value
computed on meta tensors plus the device the real result will live on; or
the value a source names at run time.
Chapter: book/docs/dynamo.md ("Tensors and example values").
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from .exc import UserErrorInTrace, unimplemented
from .guards import GUARD_GLOBALS
from .variables.base import VariableTracker
from .variables.tensor import TensorVariable


def get_example_value(
    kind: str, target: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker],
) -> tuple[Any, torch.device]:
    """Run one operation on meta tensors: its example result and the real result's device.

    See [Note: example values]. A NotImplementedError means "no meta kernel",
    which is our limitation (unimplemented); any other exception is the
    user's own error ([Note: user errors]).
    """
    device = _result_device(kind, target, args, kwargs)
    ex_args = [a.as_example() for a in args]
    ex_kwargs = {k: v.as_example() for k, v in kwargs.items()}
    if "device" in ex_kwargs:
        ex_kwargs["device"] = "meta"
    name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
    try:
        with torch.device("meta"):  # factories without device= build meta tensors too
            if kind == "call_method":
                return _run_method(target, ex_args, ex_kwargs), device
            return target(*ex_args, **ex_kwargs), device
    except NotImplementedError as e:
        unimplemented(f"{name}() has no meta kernel, so its result cannot be predicted ({e})")
    except Exception as e:
        raise UserErrorInTrace(e) from e


def _run_method(name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    self, rest = args[0], args[1:]
    if name in ("cuda", "cpu"):
        return self  # device moves change no metadata; ``device`` tracks them
    if name == "to":
        rest = ["meta" if _as_device(a) is not None else a for a in rest]
    return getattr(self, name)(*rest, **kwargs)


def _as_device(value: Any) -> torch.device | None:
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        try:
            return torch.device(value)
        except RuntimeError:
            return None
    return None


def _result_device(
    kind: str, target: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker],
) -> torch.device:
    """Meta examples have no real device, so devices are tracked beside them.

    An explicit device (``device=``, ``.to(dev)``, ``.cuda()``) wins; else the
    result lives where the first tensor argument lives; else on the default
    device (a factory like ``torch.ones(3)``).
    """
    if "device" in kwargs and kwargs["device"].is_python_constant():
        value = kwargs["device"].as_python_constant()
        if value is not None:
            return _with_index(torch.device(value))
    if kind == "call_method" and target in ("cuda", "cpu"):
        return _with_index(torch.device(target))
    if kind == "call_method" and target == "to":
        for a in args[1:]:
            if isinstance(a, TensorVariable):
                return a.device
            found = _as_device(a.as_python_constant()) if a.is_python_constant() else None
            if found is not None:
                return _with_index(found)
    for a in _flatten(args):
        if isinstance(a, TensorVariable):
            return a.device
    return torch.get_default_device()


def _with_index(device: torch.device) -> torch.device:
    """"cuda" means the current CUDA device; a real tensor reports it as "cuda:0"."""
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _flatten(items: list[VariableTracker]) -> list[VariableTracker]:
    out: list[VariableTracker] = []
    for item in items:
        nested = getattr(item, "items", None)
        out.extend(_flatten(list(nested)) if isinstance(nested, tuple) else [item])
    return out


@functools.lru_cache(maxsize=256)
def _compiled_source(source: str) -> Any:
    return compile(source, "<dynamo source>", "eval")


def eval_source(source: str, frame: dict[str, Any]) -> Any:
    """The run-time value of a source expression (``self``, ``xs[1]``, ``G['W']``)."""
    return eval(_compiled_source(source), dict(GUARD_GLOBALS), frame)

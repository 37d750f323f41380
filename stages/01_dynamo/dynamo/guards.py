"""Guards: the conditions under which a compiled graph may be reused.

Input: the real values a frame was called with (tensors, Python constants,
globals), each named by its *source* (a Python expression such as ``x``,
``xs[0]``, ``G['W']``, ``C['scale']``). Output: ``Guard`` objects that print
as readable Python expressions, and one compiled check function per cache
entry that returns True when every guard holds for a new call.
Chapter: book/docs/dynamo.md ("Guards").

# [Note: guards]
# A captured graph bakes in everything the trace learned about its inputs:
# tensor dtype, device, sizes and strides (they decided every meta kernel's
# output), whether autograd is recording, and the value of every Python
# number that steered the trace. A guard restates one such assumption as a
# Python expression over the frame's sources. Before reusing a graph, the
# cache evaluates all of its guards; if one is False, the call is a cache
# miss and dynamo traces again ("recompiles") for the new situation.
#
# Names in guard expressions: function arguments by their own name, globals
# as G['name'], closure variables as C['name'], plus the modules torch, math
# and sys. A guard is therefore an ordinary expression a reader can eval.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

# Names every guard expression may use besides the frame's own sources.
GUARD_GLOBALS: dict[str, Any] = {"torch": torch, "math": math, "sys": sys}
RESERVED_NAMES = frozenset({"G", "C", *GUARD_GLOBALS})


@dataclasses.dataclass(frozen=True)
class Guard:
    """One assumption: ``expr`` is a Python expression that must evaluate to True."""

    source: str  # the value this guard is about, e.g. "x"
    kind: str  # TYPE, DTYPE, DEVICE, SIZE, STRIDE, REQUIRES_GRAD, NDIM, VALUE, ID, ...
    expr: str  # e.g. "x.size() == (8, 8)"

    def __str__(self) -> str:
        return self.expr


def literal(value: Any) -> str:
    """A Python expression that evaluates to ``value`` (only for trusted constant kinds).

    Strings go through repr(), so a user-controlled string can never escape
    the literal it is embedded in.
    """
    if isinstance(value, torch.dtype):
        return str(value)  # "torch.float32"
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"  # inf, -inf (nan is guarded by math.isnan)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(literal(v) for v in value)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if value is None or isinstance(value, (bool, int, float, complex, str)):
        return repr(value)
    raise TypeError(f"no literal form for {type(value).__name__}")


# --8<-- [start:tensor-guards]
def make_tensor_guards(source: str, tensor: torch.Tensor) -> list[Guard]:
    """Guards that pin down everything a trace may have learned from a tensor input.

    The trace ran on a meta tensor with the same type, dtype, device, sizes,
    strides and requires_grad as ``tensor``; a new input may reuse the graph
    only if it agrees on all of them. The type guard comes first so that the
    compiled check short-circuits before asking a non-tensor for ``.dtype``.
    """
    # BEGIN EXERCISE dynamo-tensor-guards: return the guards that pin a tensor input's metadata
    def guard(kind: str, expr: str) -> Guard:
        return Guard(source, kind, expr)

    type_path = "torch.nn.Parameter" if type(tensor) is torch.nn.Parameter else "torch.Tensor"
    return [
        guard("TYPE", f"type({source}) is {type_path}"),
        guard("DTYPE", f"{source}.dtype == {literal(tensor.dtype)}"),
        guard("DEVICE", f"{source}.device == {literal(tensor.device)}"),
        guard("NDIM", f"{source}.ndim == {tensor.ndim}"),
        guard("SIZE", f"{source}.size() == {literal(tuple(tensor.size()))}"),
        guard("STRIDE", f"{source}.stride() == {literal(tuple(tensor.stride()))}"),
        guard("REQUIRES_GRAD", f"{source}.requires_grad == {tensor.requires_grad}"),
    ]
    # END EXERCISE dynamo-tensor-guards
# --8<-- [end:tensor-guards]


def make_dynamic_tensor_guards(source: str, tensor: torch.Tensor,
                               example: torch.Tensor) -> list[Guard]:
    """The guards of a tensor input with symbolic dims (``example`` has SymInt sizes):
    as ``make_tensor_guards``, but only the static sizes are pinned, one by one. What the
    trace assumed about the symbolic ones (their lower bound, equal sizes, symbolic strides,
    relations) is printed by the ShapeEnv after the backend compiled
    (book/docs/dynamic-shapes.md)."""
    type_path = "torch.nn.Parameter" if type(tensor) is torch.nn.Parameter else "torch.Tensor"
    guards = [
        Guard(source, "TYPE", f"type({source}) is {type_path}"),
        Guard(source, "DTYPE", f"{source}.dtype == {literal(tensor.dtype)}"),
        Guard(source, "DEVICE", f"{source}.device == {literal(tensor.device)}"),
        Guard(source, "NDIM", f"{source}.ndim == {tensor.ndim}"),
    ]
    guards += [Guard(source, "SIZE", f"{source}.size()[{d}] == {n}")
               for d, n in enumerate(example.shape) if isinstance(n, int)]
    if all(isinstance(s, int) for s in example.stride()):
        guards.append(Guard(source, "STRIDE",
                            f"{source}.stride() == {literal(tuple(tensor.stride()))}"))
    guards.append(Guard(source, "REQUIRES_GRAD",
                        f"{source}.requires_grad == {tensor.requires_grad}"))
    return guards


def make_constant_guards(source: str, value: Any) -> list[Guard]:
    """A Python constant was specialised into the graph: guard its type and value.

    The type guard matters because ``1 == 1.0 == True`` in Python, yet
    ``x * 1`` and ``x * 1.0`` give different dtypes for an integer tensor.
    """
    if value is None:
        return [Guard(source, "VALUE", f"{source} is None")]
    guards = [Guard(source, "TYPE", f"type({source}) is {_type_expr(value)}")]
    if isinstance(value, float) and math.isnan(value):
        return guards + [Guard(source, "VALUE", f"math.isnan({source})")]
    return guards + [Guard(source, "VALUE", f"{source} == {literal(value)}")]


def _type_expr(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return "torch.dtype"
    if isinstance(value, torch.device):
        return "torch.device"
    if isinstance(value, torch.Size):
        return "torch.Size"
    return type(value).__name__  # a builtin: int, float, bool, str, complex, tuple


def python_path(obj: Any) -> str | None:
    """An expression naming ``obj`` through its module (``torch.nn.functional.relu``), if any."""
    if isinstance(obj, type(sys)):
        is_torch = obj.__name__ == "torch" or obj.__name__.startswith("torch.")
        return obj.__name__ if is_torch else f"sys.modules[{obj.__name__!r}]"
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str) or "<" in name:
        return None
    found = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    if found is not obj:
        return None
    if module == "torch" or module.startswith("torch."):
        return f"{module}.{name}"  # torch is in the guard namespace; reads naturally
    return f"sys.modules[{module!r}].{name}"


def make_identity_guard(source: str, obj: Any) -> Guard:
    """``source`` must still be this very object (a module, a function, a class)."""
    path = python_path(obj)
    if path is not None:
        return Guard(source, "ID", f"{source} is {path}")
    return Guard(source, "ID", f"id({source}) == {id(obj)}")





def make_type_guard(source: str, obj: Any) -> Guard:
    """``source`` must still be an instance of exactly ``type(obj)``."""
    cls = type(obj)
    path = python_path(cls)
    if cls.__module__ == "builtins" and getattr(builtins, cls.__name__, None) is cls:
        path = cls.__name__
    if path is not None:
        return Guard(source, "TYPE", f"type({source}) is {path}")
    return Guard(source, "TYPE", f"id(type({source})) == {id(cls)}")


def make_grad_mode_guard() -> Guard:
    """Whether autograd records decided the example values' requires_grad."""
    enabled = torch.is_grad_enabled()
    return Guard("torch", "GRAD_MODE", f"{'' if enabled else 'not '}torch.is_grad_enabled()")


def make_autocast_guard() -> Guard:
    """Whether autocast was on when tracing began, and with which dtype, for each device
    type that can run here: it decided the example values' dtypes and, for a backend
    that traces further (aotautograd), the casts written into its graph."""
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    terms = []
    for device in devices:
        enabled = f"torch.is_autocast_enabled({device!r})"
        if torch.is_autocast_enabled(device):
            dtype = torch.get_autocast_dtype(device)
            terms.append(f"{enabled} and torch.get_autocast_dtype({device!r}) == {dtype}")
        else:
            terms.append(f"not {enabled}")
    return Guard("torch", "AUTOCAST", " and ".join(terms))


def make_frame_function(name: str, params: Sequence[str], expr: str) -> Callable[..., Any]:
    """Compile ``def name(G, C, *params): return expr`` in the guard namespace.

    Used for the guard check and for fetching graph inputs from a frame; the
    expressions are built only from identifiers, integers and repr()'d
    literals (see ``literal``), never from unescaped user text.
    """
    signature = ", ".join(["G", "C", *params])
    text = f"def {name}({signature}):\n    return {expr}\n"
    namespace = dict(GUARD_GLOBALS)
    exec(compile(text, f"<dynamo {name}>", "exec"), namespace)
    fn = namespace[name]
    fn.source_text = text  # kept for debugging and the book
    return fn


def compile_guards(guards: Sequence[Guard], params: Sequence[str]) -> Callable[..., bool]:
    """One check function: the ``and`` of all guard expressions, in order."""
    body = "(\n        " + "\n        and ".join(g.expr for g in guards) + "\n    )"
    return make_frame_function("___check_guards", params, body if guards else "True")


def first_failing_guard(guards: Sequence[Guard], namespace: dict[str, Any]) -> Guard | None:
    """The first guard that is False (or raises) for ``namespace``; used in messages only."""
    for guard in guards:
        try:
            if not eval(guard.expr, dict(GUARD_GLOBALS), dict(namespace)):
                return guard
        except Exception:
            return guard
    return None

"""VariableBuilder: turn real Python values into trackers, recording their guards.

Input: a value the frame reads from outside (an argument, a global, a
closure cell) together with its source expression; or a value found by
attribute lookup on a module (no source, no guard); or the proxy and
example value of a new graph node. Output: the matching VariableTracker;
tensors become graph placeholders, constants are specialised and guarded
by value.
Chapter: book/docs/dynamo.md ("Wrapping inputs").
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ..exc import unimplemented
from ..guards import (
    Guard,
    make_constant_guards,
    make_identity_guard,
    make_tensor_guards,
)
from .base import VariableTracker
from .builtin import BuiltinVariable, is_pure
from .constant import ConstantVariable, is_literal
from .lists import ListVariable, TupleVariable
from .misc import PythonModuleVariable, TypeVariable, UserFunctionVariable, UserObjectVariable
from .tensor import TensorVariable
from .torch import TorchFunctionVariable

if TYPE_CHECKING:
    from ..output_graph import OutputGraph


def wrap(output: OutputGraph, value: Any, source: str) -> VariableTracker:
    """Wrap a value that came from outside the frame, adding the guards it needs."""
    if isinstance(value, torch.Tensor):
        return wrap_tensor(output, value, source)
    if is_literal(value):
        try:
            output.add_guards(make_constant_guards(source, value))
        except TypeError:
            unimplemented(f"cannot guard on the value of {source} ({type(value).__name__})")
        return ConstantVariable(value, source=source)
    if type(value) in (tuple, list):
        kind = type(value).__name__
        output.add_guards([
            Guard(source, "TYPE", f"type({source}) is {kind}"),
            Guard(source, "LEN", f"len({source}) == {len(value)}"),
        ])
        items = tuple(wrap(output, v, f"{source}[{i}]") for i, v in enumerate(value))
        cls = TupleVariable if kind == "tuple" else ListVariable
        return cls(items, source=source)
    if isinstance(value, dict):
        unimplemented(f"dict argument {source} (dicts are not supported yet)")
    static = wrap_static(value, strict=False)
    if static is not None:
        output.add_guards([make_identity_guard(source, value)])
        return static
    return UserObjectVariable(value, source=source)  # carried along, never opened


# --8<-- [start:wrap-tensor]
def wrap_tensor(output: OutputGraph, value: torch.Tensor, source: str) -> VariableTracker:
    """A tensor input: guard its metadata and make it a placeholder of the graph."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter):
        unimplemented(f"tensor subclass {type(value).__qualname__} for {source}")
    if value.layout != torch.strided:
        unimplemented(f"{value.layout} tensor {source} (only strided tensors)")
    same = output.input_tensors.get(id(value))
    if same is not None:  # the caller passed one tensor twice: one placeholder
        output.add_guards([Guard(source, "ALIAS", f"{source} is {same.source}")])
        return same
    output.add_guards(make_tensor_guards(source, value))
    proxy = output.add_graph_input(source, value)
    example = meta_copy(value)
    proxy.node.meta["example_value"] = example
    tensor_vt = TensorVariable(proxy, example, value.device, source=source)
    output.input_tensors[id(value)] = tensor_vt
    return tensor_vt
# --8<-- [end:wrap-tensor]


def meta_copy(value: torch.Tensor) -> torch.Tensor:
    """A tensor on the meta device with ``value``'s sizes, strides, dtype and requires_grad.

    # [Note: example values]
    # Meta tensors carry metadata but no storage: running an op on them runs
    # only its shape/dtype/stride rule. That tells the trace what each node
    # will produce (so ``x.shape[0]`` is a constant and a bad broadcast is
    # found) at no compute cost, and without touching the user's data.
    """
    meta = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device="meta")
    return meta.requires_grad_(value.requires_grad)


def wrap_static(value: Any, strict: bool = True) -> VariableTracker | None:
    """Wrap a value found by attribute lookup (``torch.sin``, ``torch.float32``, ``math.pi``)."""
    if isinstance(value, types.ModuleType):
        return PythonModuleVariable(value)
    if is_literal(value):
        return ConstantVariable(value)
    if is_pure(value) or isinstance(value, types.BuiltinFunctionType) and _is_builtin(value):
        return BuiltinVariable(value)
    if isinstance(value, type):
        return TypeVariable(value)
    if callable(value) and _is_torch(value) and not isinstance(value, torch.nn.Module):
        return TorchFunctionVariable(value)
    if isinstance(value, types.FunctionType):
        return UserFunctionVariable(value)
    if strict:
        unimplemented(f"a {type(value).__qualname__} value from a module")
    return None


def _is_builtin(fn: Any) -> bool:
    return getattr(fn, "__module__", None) in ("builtins", "_operator", "math")


def _is_torch(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")


def wrap_fx_proxy(
    output: OutputGraph, proxy: torch.fx.Proxy, example: Any, device: torch.device,
) -> VariableTracker:
    """Wrap the result of a new graph node according to its example value."""
    if isinstance(example, torch.Tensor):
        proxy.node.meta["example_value"] = example
        return TensorVariable(proxy, example, device)
    if isinstance(example, (tuple, list)) and any(isinstance(e, torch.Tensor) for e in example):
        items = tuple(wrap_fx_proxy(output, proxy[i], e, device) for i, e in enumerate(example))
        return TupleVariable(items) if isinstance(example, tuple) else ListVariable(items)
    if example is None:
        return ConstantVariable(None)  # keep the node: an op returning None acts by side effect
    if is_literal(example):
        # Metadata queries (x.size(), x.dim(), len(x)) are answered exactly by
        # the meta example; the node would compute the same constant again.
        output.graph.erase_node(proxy.node)
        return ConstantVariable(example)
    output.graph.erase_node(proxy.node)
    unimplemented(f"{proxy.node.target} returned a {type(example).__qualname__}")

"""Torch callables: functions of the torch namespace.

Input: a callable found through LOAD_GLOBAL / LOAD_ATTR on a torch module
(``torch.sin``, ``F.linear``, ``torch.Tensor.add``), or ``torch.no_grad()`` /
``torch.enable_grad()`` / ``torch.set_grad_enabled(b)`` / ``torch.autocast(...)``.
Output: a ``call_function`` node whose example value comes from running the
same function on meta tensors (OutputGraph.create_op); for the context
managers, their trackers (ctx_manager.py).
Chapter: book/docs/dynamo.md ("Calling torch").
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from .. import config
from ..exc import unimplemented
from .base import VariableTracker, children
from .constant import ConstantVariable
from .ctx_manager import AutocastVariable, GradModeVariable

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator

# Calls whose effect is not a tensor result but a change of global state; a
# graph would replay them at the wrong time or not at all.
_GLOBAL_STATE_FUNCTIONS = frozenset({
    torch.manual_seed, torch.seed, torch.set_default_dtype,
    torch.set_default_device, torch.set_printoptions, torch.save, torch.load,
    torch.autograd.grad, torch.autograd.backward,
})
_GRAD_MODE_CLASSES = {torch.no_grad: False, torch.enable_grad: True}


# [Note: is_compiling]
# Libraries ask ``torch.compiler.is_compiling()`` to take a path a compiler can trace:
# HuggingFace's models skip data-dependent checks (``if mask.all(): ...``) and hooks that
# record outputs through a ContextVar when it says True. A frame we trace is being
# compiled, so inside the trace the answer is True (a constant, not a graph node), as under
# PyTorch's Dynamo; run eagerly, the same call says False. ``is_exporting`` stays False.
COMPILING_QUESTIONS = {
    getattr(torch.compiler, name): answer
    for name, answer in (("is_compiling", True), ("is_dynamo_compiling", True),
                         ("is_exporting", False))
    if hasattr(torch.compiler, name)
}


def op_name(fn: Any) -> str | None:
    """``"ns::name"`` for an op of ``torch.ops`` (an overload or its packet), else None."""
    if isinstance(fn, torch._ops.OpOverloadPacket):
        return fn._qualified_op_name
    if isinstance(fn, torch._ops.OpOverload):
        return fn._schema.name
    return None


def _requires_grad(value: VariableTracker) -> bool:
    """Whether a tensor in ``value`` (or among its items) requires grad."""
    example = getattr(value, "example", None)
    if isinstance(example, torch.Tensor):
        return example.requires_grad
    return any(map(_requires_grad, children(value)))


@dataclasses.dataclass(frozen=True, eq=False)
class TorchFunctionVariable(VariableTracker):
    value: Any

    def is_python_constant(self) -> bool:
        return True  # the function object itself, e.g. as an argument to isinstance

    def as_python_constant(self) -> Any:
        return self.value

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        fn = self.value
        if fn in _GRAD_MODE_CLASSES and not args and not kwargs:
            return GradModeVariable(_GRAD_MODE_CLASSES[fn])
        if fn is torch.set_grad_enabled and len(args) == 1:
            mode, previous = bool(args[0].as_python_constant()), torch.is_grad_enabled()
            tx.enter_grad_mode(mode)  # takes effect now, like the real call
            return GradModeVariable(mode, entered=True, previous=previous)
        if fn is torch.is_grad_enabled and not args:
            return ConstantVariable(torch.is_grad_enabled())
        if fn in COMPILING_QUESTIONS:  # [Note: is_compiling]
            return ConstantVariable(COMPILING_QUESTIONS[fn])
        if fn in _GLOBAL_STATE_FUNCTIONS:
            unimplemented(f"torch.{fn.__name__}() changes global state")
        if isinstance(fn, type) and issubclass(fn, torch.amp.autocast):
            return AutocastVariable.create(fn, args, kwargs)  # [Note: autocast in the graph]
        if hasattr(fn, "__wrapped__"):
            unimplemented(f"{getattr(fn, '__qualname__', fn)} is a decorated torch function")
        name = op_name(fn)
        if name in config.eager_ops and torch.is_grad_enabled() \
                and any(map(_requires_grad, [*args, *kwargs.values()])):
            unimplemented(f"{name}: a backend could not trace its backward, so it runs "
                          "outside the graph ([Note: ops kept out of the graph])")
        return tx.output.create_op("call_function", fn, args, kwargs)

    def reconstruct(self, rt: Any) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"TorchFunctionVariable({getattr(self.value, '__name__', self.value)})"

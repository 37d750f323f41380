"""TorchFunctionVariable: a callable from the torch namespace (torch.*, torch.nn.functional.*).

Input: the function object, found through LOAD_GLOBAL / LOAD_ATTR on a torch
module. Output: a ``call_function`` node in the graph whose example value
comes from running the same function on meta tensors (see
OutputGraph.create_op); functions that change global state are refused.
Chapter: book/docs/dynamo.md ("Calling torch").
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from ..exc import unimplemented
from .base import VariableTracker

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslator

# Calls whose effect is not a tensor result but a change of global state; a
# graph would replay them at the wrong time or not at all.
_GLOBAL_STATE_FUNCTIONS = frozenset({
    torch.set_grad_enabled, torch.manual_seed, torch.seed, torch.set_default_dtype,
    torch.set_default_device, torch.set_printoptions, torch.save, torch.load,
    torch.autograd.grad, torch.autograd.backward, torch.no_grad, torch.enable_grad,
})


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
        if self.value in _GLOBAL_STATE_FUNCTIONS:
            unimplemented(f"torch.{self.value.__name__}() changes global state")
        return tx.output.create_op("call_function", self.value, args, kwargs)

    def __repr__(self) -> str:
        return f"TorchFunctionVariable({getattr(self.value, '__name__', self.value)})"

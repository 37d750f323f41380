"""ConstantVariable: Python values known at trace time (numbers, None, str, dtypes...).

Input: a constant value (from LOAD_CONST, a guarded argument, a tensor's
shape, or constant folding). Output: folding of operations on constants
into new constants; the value itself as a graph argument.
Chapter: book/docs/dynamo.md ("Variables").
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from ..exc import UserErrorInTrace, unimplemented
from .base import VariableTracker
from .misc import MethodVariable

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslator

_SCALAR_TYPES = (
    type(None), bool, int, float, complex, str, bytes, types.EllipsisType,
    torch.dtype, torch.device, torch.layout, torch.memory_format,
)


def is_literal(value: Any) -> bool:
    """True for immutable values whose every operation can be folded at trace time."""
    if isinstance(value, _SCALAR_TYPES):
        return True
    if isinstance(value, (tuple, frozenset)):  # torch.Size is a tuple
        return all(is_literal(v) for v in value)
    if isinstance(value, slice):
        return all(is_literal(v) for v in (value.start, value.stop, value.step))
    return False


def fold(fn: Any, *args: Any, **kwargs: Any) -> VariableTracker:
    """Run ``fn`` now on constant arguments; the result becomes a ConstantVariable.

    An exception here is the user's own (``1 / 0``) and is reported as such.
    """
    try:
        result = fn(*args, **kwargs)
    except Exception as e:
        raise UserErrorInTrace(e) from e
    if not is_literal(result):
        unimplemented(f"{getattr(fn, '__name__', fn)}() returned a {type(result).__name__}")
    return ConstantVariable(result)


@dataclasses.dataclass(frozen=True, eq=False)
class ConstantVariable(VariableTracker):
    value: Any

    def python_type(self) -> type:
        return type(self.value)

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def as_proxy(self) -> Any:
        return self.value

    def as_example(self) -> Any:
        return self.value

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        if callable(getattr(self.value, name, None)):
            return MethodVariable(self, name)  # e.g. x.shape.numel, called next
        return fold(getattr, self.value, name)

    def call_method(
        self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            unimplemented(f"method .{name}() of a {type(self.value).__name__} with traced args")
        method = getattr(self.value, name, None)
        if method is None:
            return fold(getattr, self.value, name)  # raises the user's AttributeError
        values = [a.as_python_constant() for a in args]
        return fold(method, *values, **{k: v.as_python_constant() for k, v in kwargs.items()})

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        if not isinstance(self.value, (tuple, str)):
            unimplemented(f"unpacking a {type(self.value).__name__}")
        return [ConstantVariable(v) for v in self.value]

    def reconstruct(self, outputs: Iterator[Any], frame: dict[str, Any]) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"ConstantVariable({self.value!r})"

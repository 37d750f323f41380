"""Trackers for the odds and ends a frame touches: bound methods, modules, classes,
user functions and opaque user objects.

Input: values met through LOAD_ATTR / LOAD_GLOBAL / arguments. Output:
attribute lookups resolved at trace time (``torch.nn.functional.relu``),
method calls forwarded to their receiver, and clear ``unimplemented``
reasons for what the first cut does not capture (user functions, attributes
of user objects and nn.Modules).
Chapter: book/docs/dynamo.md ("Variables").
"""

from __future__ import annotations

import dataclasses
import types
from typing import TYPE_CHECKING, Any

import torch

from ..exc import UserErrorInTrace, unimplemented
from .base import VariableTracker

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslator


@dataclasses.dataclass(frozen=True, eq=False)
class MethodVariable(VariableTracker):
    """``obj.name`` where the attribute is a method; calling it is ``obj.call_method``.

    LOAD_ATTR with the method bit (3.12+) and LOAD_METHOD (3.11) produce this.
    """

    obj: VariableTracker
    name: str

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)

    def __repr__(self) -> str:
        return f"MethodVariable({self.obj!r}.{self.name})"


@dataclasses.dataclass(frozen=True, eq=False)
class PythonModuleVariable(VariableTracker):
    """A module such as ``torch`` or ``torch.nn.functional``: attributes resolve now."""

    value: types.ModuleType

    def python_type(self) -> type:
        return types.ModuleType

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .builder import wrap_static

        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            raise UserErrorInTrace(e) from e
        return wrap_static(attr)

    def __repr__(self) -> str:
        return f"PythonModuleVariable({self.value.__name__})"


# Classes whose construction from constants can be folded (torch.Size((2, 3))).
_FOLDABLE_CLASSES = (torch.Size, torch.device)


@dataclasses.dataclass(frozen=True, eq=False)
class TypeVariable(VariableTracker):
    """A class used as a value: ``isinstance(x, torch.Tensor)``, ``torch.Size(...)``."""

    value: type

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def as_proxy(self) -> Any:
        return self.value

    def as_example(self) -> Any:
        return self.value

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        from .constant import fold

        constant_args = all(a.is_python_constant() for a in [*args, *kwargs.values()])
        if self.value in _FOLDABLE_CLASSES and constant_args:
            values = [a.as_python_constant() for a in args]
            named = {k: v.as_python_constant() for k, v in kwargs.items()}
            return fold(self.value, *values, **named)
        unimplemented(f"constructing a {self.value.__qualname__} object")

    def __repr__(self) -> str:
        return f"TypeVariable({self.value.__qualname__})"


@dataclasses.dataclass(frozen=True, eq=False)
class UserFunctionVariable(VariableTracker):
    """A plain Python function. Calling it needs inlining, which is not in this cut."""

    value: types.FunctionType

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        unimplemented(
            f"calling the Python function {self.value.__qualname__}() "
            "(inlining user functions is not supported yet)"
        )

    def __repr__(self) -> str:
        return f"UserFunctionVariable({self.value.__qualname__})"


@dataclasses.dataclass(frozen=True, eq=False)
class UserObjectVariable(VariableTracker):
    """Any other object (``self`` of a method, an nn.Module): carried along, never opened.

    Returning it is fine (``reconstruct`` fetches it again through its source);
    reading its attributes is not supported in this first cut.
    """

    value: Any

    def python_type(self) -> type:
        return type(self.value)

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        kind = "nn.Module" if isinstance(self.value, torch.nn.Module) else "user object"
        unimplemented(
            f"reading attribute .{name} of a {kind} ({type(self.value).__qualname__}) "
            "is not supported yet"
        )

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        kind = "an nn.Module" if isinstance(self.value, torch.nn.Module) else "a user object"
        unimplemented(f"calling {kind} ({type(self.value).__qualname__}) is not supported yet")

    def __repr__(self) -> str:
        return f"UserObjectVariable({type(self.value).__qualname__})"

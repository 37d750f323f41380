"""TupleVariable and ListVariable: Python sequences of trackers.

Input: BUILD_TUPLE / BUILD_LIST / LIST_EXTEND, tuple and list arguments,
multi-output tensor ops (``torch.split``). Output: indexing, slicing,
unpacking, concatenation and ``len`` resolved at trace time; the sequence
itself as an fx argument (``torch.cat([a, b])``).
Chapter: book/docs/dynamo.md ("Variables").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from ..exc import UserErrorInTrace, unimplemented
from .base import VariableTracker
from .constant import ConstantVariable, fold

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslator


@dataclasses.dataclass(frozen=True, eq=False)
class BaseListVariable(VariableTracker):
    items: tuple[VariableTracker, ...]

    python_class: ClassVar[type] = tuple  # overridden per subclass

    def python_type(self) -> type:
        return self.python_class

    def is_python_constant(self) -> bool:
        return all(item.is_python_constant() for item in self.items)

    def as_python_constant(self) -> Any:
        return self.python_class(item.as_python_constant() for item in self.items)

    def as_proxy(self) -> Any:
        return self.python_class(item.as_proxy() for item in self.items)

    def as_example(self) -> Any:
        return self.python_class(item.as_example() for item in self.items)

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        return list(self.items)

    def getitem(self, index: VariableTracker) -> VariableTracker:
        """``seq[i]`` or ``seq[a:b]`` with a constant index, resolved now."""
        if not index.is_python_constant():
            unimplemented(f"indexing a {self.python_class.__name__} with {index}")
        key = index.as_python_constant()
        try:
            picked = self.items[key]
        except (IndexError, TypeError) as e:
            raise UserErrorInTrace(e) from e
        if isinstance(key, slice):
            return type(self)(tuple(picked))
        return picked

    def call_method(
        self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self.getitem(args[0])
        if name == "__len__" and not args and not kwargs:
            return ConstantVariable(len(self.items))
        if name in ("index", "count") and self.is_python_constant():
            values = [a.as_python_constant() for a in args]
            return fold(getattr(self.as_python_constant(), name), *values)
        unimplemented(f"method .{name}() of a {self.python_class.__name__}")

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .misc import MethodVariable

        if not callable(getattr(self.python_class, name, None)):
            unimplemented(f"attribute .{name} of a {self.python_class.__name__}")
        return MethodVariable(self, name)

    def reconstruct(self, outputs: Iterator[Any], frame: dict[str, Any]) -> Any:
        if self.source is not None:
            return super().reconstruct(outputs, frame)  # the caller's own object
        return self.python_class([item.reconstruct(outputs, frame) for item in self.items])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.items)!r})"


@dataclasses.dataclass(frozen=True, eq=False)
class TupleVariable(BaseListVariable):
    python_class: ClassVar[type] = tuple


@dataclasses.dataclass(frozen=True, eq=False)
class ListVariable(BaseListVariable):
    python_class: ClassVar[type] = list

    def call_method(
        self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name in ("append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"):
            unimplemented(f"mutating a list with .{name}() is not supported yet")
        return super().call_method(tx, name, args, kwargs)

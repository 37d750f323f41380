"""VariableTracker: what the symbolic interpreter keeps on its stack and in its locals.

Input: nothing (base class). Output: the protocol every tracker family
implements: attribute access, calls, method calls, conversion to fx-graph
arguments (``as_proxy``) and to example values (``as_example``), and
``reconstruct`` (rebuild the Python value a frame returns).
Chapter: book/docs/dynamo.md ("Variables").

# [Note: immutable trackers]
# Trackers are frozen dataclasses. An operation never edits a tracker; it
# returns a new one. Locals and the stack therefore never share mutable
# state, so a half-finished trace can be abandoned at any instruction
# (unimplemented) without undoing anything. Mutation of user containers is
# unsupported in this first cut; a later issue adds side-effect tracking.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..exc import unimplemented

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslator


@dataclasses.dataclass(frozen=True, eq=False)
class VariableTracker:
    """Symbolic stand-in for one Python value during tracing.

    ``source`` is set when the value came from outside the frame (an
    argument, a global, a closure cell): a Python expression that fetches it
    again at run time, and the name its guards speak about.
    """

    source: str | None = dataclasses.field(default=None, kw_only=True)

    def python_type(self) -> type:
        unimplemented(f"type() of {self}")

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        unimplemented(f"{self} is not a Python constant")

    def as_proxy(self) -> Any:
        """This value as an fx-graph argument (a Proxy, or a plain constant)."""
        unimplemented(f"{self} cannot be an argument of a graph operation")

    def as_example(self) -> Any:
        """This value as an argument of a meta-tensor example computation."""
        unimplemented(f"{self} cannot be an argument of a tensor operation")

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        unimplemented(f"attribute .{name} of {self}")

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        unimplemented(f"calling {self}")

    def call_method(
        self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        unimplemented(f"method .{name}() of {self}")

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        """The items, for UNPACK_SEQUENCE and tuple(...)."""
        unimplemented(f"unpacking {self}")

    def reconstruct(self, outputs: Iterator[Any], frame: dict[str, Any]) -> Any:
        """Rebuild the run-time value: tensors come from ``outputs`` (graph results in
        order); values with a source are fetched again from ``frame``."""
        if self.source is not None:
            from ..utils import eval_source

            return eval_source(self.source, frame)
        unimplemented(f"returning {self} from a compiled frame")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclasses.dataclass(frozen=True, eq=False)
class NullVariable(VariableTracker):
    """The NULL that CPython pushes below (3.11/3.12) or above (3.13) a callable."""

    def __repr__(self) -> str:
        return "NULL"

"""VariableTracker: what the symbolic interpreter keeps on its stack and in its locals.

Input: nothing (base class). Output: the protocol every tracker family
implements: attribute access, calls, method calls, truth value, iteration
(``unpack``), conversion to fx-graph arguments (``as_proxy``) and to example
values (``as_example``), and ``reconstruct`` (rebuild the real Python value
after the graph has run). Chapter: book/docs/dynamo.md ("Variables").

# [Note: immutable trackers]
# Trackers are frozen dataclasses. An operation never edits a tracker; it
# returns a new one. A half-finished instruction can therefore be abandoned
# (unimplemented, or a graph break) by restoring the stack and locals saved
# before it, without undoing anything.
#
# Python containers *are* mutable, and aliasing is visible (``b = a;
# b.append(x)`` changes ``a``). A mutable tracker carries a
# ``mutable_local`` token that is shared by every version of "the same"
# object. Mutating makes a new version and ``tx.replace_all(old, new)``
# swaps every tracker with that token, in every frame's stack and locals and
# inside other containers, for the new version. Objects that came from
# outside the frame are also written back after the graph runs: see
# side_effects.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..exc import unimplemented

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator


class MutableLocal:
    """Identity token shared by all versions of one mutable Python object."""

    def __repr__(self) -> str:
        return f"MutableLocal({id(self):#x})"


@dataclasses.dataclass(frozen=True, eq=False)
class VariableTracker:
    """Symbolic stand-in for one Python value during tracing.

    ``source`` is set when the value came from outside the frame (an
    argument, a global, an attribute of ``self``): a Python expression that
    fetches it again at run time, and the name its guards speak about.
    """

    source: str | None = dataclasses.field(default=None, kw_only=True)
    mutable_local: MutableLocal | None = dataclasses.field(default=None, kw_only=True)

    def clone(self, **changes: Any) -> VariableTracker:
        return dataclasses.replace(self, **changes)

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

    def truth(self, tx: InstructionTranslator) -> bool:
        """``bool(value)`` at trace time; a traced value has none (a graph break)."""
        if self.is_python_constant():
            return bool(self.as_python_constant())
        unimplemented(f"truth value of {self} (data-dependent control flow)")

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
        """The items, for iteration, UNPACK_SEQUENCE, ``*args`` and tuple(...)."""
        unimplemented(f"iterating over {self}")

    def reconstruct(self, rt: Residual) -> Any:
        """The real value after the graph ran: graph outputs come from ``rt``; a value
        with a source is fetched again from the frame."""
        if self.source is not None:
            return rt.eval(self.source)
        unimplemented(f"{self} cannot be rebuilt outside the graph")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclasses.dataclass(frozen=True, eq=False)
class NullVariable(VariableTracker):
    """The NULL that CPython pushes below (3.11/3.12) or above (3.13) a callable."""

    def __repr__(self) -> str:
        return "NULL"


def children(value: VariableTracker) -> Iterator[VariableTracker]:
    """The trackers directly inside ``value`` (items of a list, values of a dict...)."""
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        if field.metadata.get("opaque"):
            continue
        if isinstance(item, VariableTracker):
            yield item
        elif type(item) is tuple:  # (exactly: a user's object may subclass tuple or dict)
            yield from (i for i in item if isinstance(i, VariableTracker))
        elif type(item) is dict:
            yield from (i for i in item.values() if isinstance(i, VariableTracker))


def transform(value: Any, fn: Callable[[VariableTracker], VariableTracker]) -> Any:
    """Rebuild ``value`` bottom-up, applying ``fn`` to every tracker inside it. Only plain
    tuples and dicts are containers of trackers: a tracker's ``value`` may be the user's own
    object of a dict subclass (a HuggingFace ``ModelOutput``), which must stay what it is.
    A container in which nothing changed comes back as itself ([Note: a container that did
    not change]), and a field marked ``opaque`` is never entered."""
    if type(value) is tuple:
        items = tuple(transform(v, fn) for v in value)
        return value if _same(items, value) else items
    if type(value) is dict:
        entries = {k: transform(v, fn) for k, v in value.items()}
        return value if _same(entries, value) else entries
    if not isinstance(value, VariableTracker):
        return value
    changes = {}
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        if field.metadata.get("opaque"):
            continue
        if isinstance(item, VariableTracker) or type(item) in (tuple, dict):
            new = transform(item, fn)
            if new is not item:
                changes[field.name] = new
    value = dataclasses.replace(value, **changes) if changes else value
    return fn(value)


# [Note: a container that did not change]
# ``transform`` rebuilds the plain dicts and tuples it meets, to swap the trackers inside.
# Some of those are not containers of trackers but the user's own values: a module's globals
# (held by a function made during the trace), a constant dict, a tuple of strings. Rebuilt,
# a module's globals became a copy, which no longer named the module, so a global read from a
# comprehension inside transformers' ``DynamicCache.__init__`` could not be guarded: a graph
# break in every decoder with sliding-window layers. So a container whose items all came back
# as themselves is returned as itself, at any depth, and a function's globals (``opaque``:
# they hold no trackers) are not walked at all.
OPAQUE = {"opaque": True}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(a[k] is b[k] for k in a)
    return a is b


@dataclasses.dataclass(frozen=True, eq=False)
class KnownValueVariable(VariableTracker):
    """A value known at trace time (a number, a string, a class): it is its own graph
    argument and its own example, and can steer Python control flow."""

    value: Any

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def as_proxy(self) -> Any:
        return self.value

    def as_example(self) -> Any:
        return self.value

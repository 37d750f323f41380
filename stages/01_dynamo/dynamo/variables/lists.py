"""Sequences of trackers: TupleVariable, ListVariable (mutable), NamedTupleVariable.

Input: BUILD_TUPLE / BUILD_LIST / LIST_EXTEND / LIST_APPEND, tuple and list
arguments, multi-output tensor ops (``torch.split``). Output: indexing,
slicing, unpacking, concatenation and ``len`` resolved at trace time; list
mutation (``append``, ``xs[i] = v``...) as new versions swapped in by
``tx.replace_all`` ([Note: immutable trackers]); the sequence itself as an
fx argument (``torch.cat([a, b])``).
Chapter: book/docs/dynamo.md ("Variables").
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from ..exc import UserErrorInTrace, unimplemented
from .base import MutableLocal, VariableTracker
from .constant import ConstantVariable, fold

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator


def constant_index(index: VariableTracker, what: str) -> Any:
    if not index.is_python_constant():
        unimplemented(f"indexing a {what} with {index}")
    return index.as_python_constant()


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

    def truth(self, tx: InstructionTranslator) -> bool:
        return bool(self.items)

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        return list(self.items)

    def getitem(self, index: VariableTracker) -> VariableTracker:
        """``seq[i]`` or ``seq[a:b]`` with a constant index, resolved now."""
        key = constant_index(index, self.python_class.__name__)
        try:
            picked = self.items[key]
        except (IndexError, TypeError) as e:
            raise UserErrorInTrace(e) from e
        if isinstance(key, slice):
            return self.new_sequence(tuple(picked))
        return picked

    def new_sequence(self, items: tuple[VariableTracker, ...]) -> VariableTracker:
        """A fresh sequence of the same kind (a new list is a new object)."""
        return type(self)(items)

    def call_method(
        self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self.getitem(args[0])
        if name == "__len__" and not args and not kwargs:
            return ConstantVariable(len(self.items))
        if name == "__contains__" and len(args) == 1:
            return contains(self.items, args[0])
        if name in ("index", "count") and all(a.is_python_constant() for a in args):
            if self.is_python_constant():
                values = [a.as_python_constant() for a in args]
                return fold(getattr(self.as_python_constant(), name), *values)
        unimplemented(f"method .{name}() of a {self.python_class.__name__}")

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .misc import MethodVariable

        if not callable(getattr(self.python_type(), name, None)):
            unimplemented(f"attribute .{name} of a {self.python_type().__name__}")
        return MethodVariable(self, name)

    def reconstruct(self, rt: Residual) -> Any:
        if self.source is not None:
            return rt.eval(self.source)  # the caller's own object, updated by side effects
        return rt.memo(self, lambda: self.python_class(i.reconstruct(rt) for i in self.items))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.items)!r})"


def contains(items: tuple[VariableTracker, ...], needle: VariableTracker) -> VariableTracker:
    """``needle in items`` when it can be decided now (constants, or the same tracker)."""
    for item in items:
        if item is needle:
            return ConstantVariable(True)
        if not (item.is_python_constant() and needle.is_python_constant()):
            unimplemented("`in` over traced values")
        if item.as_python_constant() == needle.as_python_constant():
            return ConstantVariable(True)
    return ConstantVariable(False)


@dataclasses.dataclass(frozen=True, eq=False)
class TupleVariable(BaseListVariable):
    python_class: ClassVar[type] = tuple


@dataclasses.dataclass(frozen=True, eq=False)
class ListVariable(BaseListVariable):
    """A list. Every version of one list shares its ``mutable_local``."""

    python_class: ClassVar[type] = list

    def __post_init__(self) -> None:
        if self.mutable_local is None:
            object.__setattr__(self, "mutable_local", MutableLocal())

    def call_method(
        self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        mutate = _LIST_MUTATIONS.get(name)
        if mutate is None:
            if name == "copy" and not args:
                return ListVariable(self.items)
            return super().call_method(tx, name, args, kwargs)
        if kwargs and name != "sort":
            unimplemented(f"list.{name}() with keyword arguments")
        items = list(self.items)
        result = mutate(tx, items, *args, **kwargs)
        tx.replace_all(self, self.clone(items=tuple(items)))
        return result if result is not None else ConstantVariable(None)


def _append(tx, items, value):
    items.append(value)


def _extend(tx, items, values):
    items.extend(values.unpack(tx))


def _insert(tx, items, index, value):
    items.insert(constant_index(index, "list"), value)


def _pop(tx, items, index=None):
    if not items:
        raise UserErrorInTrace(IndexError("pop from empty list"))
    return items.pop(-1 if index is None else constant_index(index, "list"))


def _remove(tx, items, value):
    for i, item in enumerate(items):
        if contains((item,), value).as_python_constant():
            del items[i]
            return
    raise UserErrorInTrace(ValueError("list.remove(x): x not in list"))


def _sort(tx, items, key=None, reverse=None):
    if key is not None or not all(i.is_python_constant() for i in items):
        unimplemented("sorting a list of traced values")
    flip = bool(reverse.as_python_constant()) if reverse is not None else False
    items.sort(key=lambda v: v.as_python_constant(), reverse=flip)


def setitem(tx, items, index, value):
    key = constant_index(index, "list")
    if isinstance(key, slice):
        items[key] = value.unpack(tx)
    else:
        items[key] = value


def delitem(tx, items, index):
    del items[constant_index(index, "list")]


_LIST_MUTATIONS = {
    "append": _append, "extend": _extend, "insert": _insert, "pop": _pop,
    "remove": _remove, "clear": lambda tx, items: items.clear(),
    "reverse": lambda tx, items: items.reverse(), "sort": _sort,
    "__setitem__": setitem, "__delitem__": delitem,
}


# [Note: struct sequences]
# Ops with several results return a *struct sequence*: ``torch.sort(x)`` is a
# ``torch.return_types.sort``, a tuple whose items are also fields (``.values``,
# ``.indices``), like ``os.stat_result``. It is not a namedtuple: no ``_fields`` (the names,
# in order, are ``__match_args__``), and it is built from one sequence, ``cls((v, i))``, not
# from the items. Traced as a plain tuple, ``torch.sort(x).values`` would break the graph
# and then fail on the rebuilt tuple; traced as a NamedTupleVariable, it is an item.
def tuple_fields(cls: type) -> tuple[str, ...] | None:
    """The field names of a namedtuple or struct sequence class, else None."""
    if not issubclass(cls, tuple):
        return None
    if hasattr(cls, "_fields"):
        return tuple(cls._fields)
    if hasattr(cls, "n_sequence_fields") and hasattr(cls, "__match_args__"):
        return tuple(cls.__match_args__)
    return None


def build_tuple(cls: type, items: Any) -> tuple:
    """An instance of the namedtuple or struct sequence ``cls`` holding ``items``."""
    items = tuple(items)
    return cls(items) if hasattr(cls, "n_sequence_fields") else cls(*items)


@dataclasses.dataclass(frozen=True, eq=False)
class NamedTupleVariable(TupleVariable):
    """An instance of a ``collections.namedtuple`` / ``typing.NamedTuple`` class, or of a
    struct sequence such as ``torch.return_types.sort`` ([Note: struct sequences])."""

    cls: type = tuple

    def python_type(self) -> type:
        return self.cls

    def as_python_constant(self) -> Any:
        return build_tuple(self.cls, (item.as_python_constant() for item in self.items))

    def as_proxy(self) -> Any:
        return tuple(item.as_proxy() for item in self.items)

    def new_sequence(self, items: tuple[VariableTracker, ...]) -> VariableTracker:
        return TupleVariable(items)  # a slice of a namedtuple is a plain tuple

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        fields = tuple_fields(self.cls) or ()
        if name in fields:
            return self.items[fields.index(name)]
        return super().var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "_replace" and not args and hasattr(self.cls, "_fields"):
            items = list(self.items)
            for key, value in kwargs.items():
                items[self.cls._fields.index(key)] = value
            return NamedTupleVariable(tuple(items), cls=self.cls)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, rt: Residual) -> Any:
        if self.source is not None:
            return rt.eval(self.source)
        return build_tuple(self.cls, (item.reconstruct(rt) for item in self.items))

    def __repr__(self) -> str:
        return f"NamedTupleVariable({self.cls.__name__}, {list(self.items)!r})"

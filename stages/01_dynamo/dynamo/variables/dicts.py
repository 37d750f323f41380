"""ConstDictVariable and SetVariable: dicts and sets whose keys are Python constants.

Input: BUILD_MAP / BUILD_CONST_KEY_MAP / DICT_UPDATE / MAP_ADD, ``dict(...)``,
``**kwargs``, dict arguments (``{"x": tensor}``) and set displays. Output:
lookups, membership, ``keys()/values()/items()`` and mutation resolved at
trace time; mutation makes new versions ([Note: immutable trackers]).
Chapter: book/docs/dynamo.md ("Variables").
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..exc import UserErrorInTrace, unimplemented
from .base import MutableLocal, VariableTracker
from .constant import ConstantVariable
from .lists import ListVariable, TupleVariable

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator


def dict_key(key: VariableTracker) -> Any:
    """The real key: dict keys must be known at trace time (strings, ints, enums...)."""
    if not key.is_python_constant():
        unimplemented(f"a dict key that is not a constant: {key}")
    value = key.as_python_constant()
    try:
        hash(value)
    except TypeError as e:
        raise UserErrorInTrace(e) from e
    return value


@dataclasses.dataclass(frozen=True, eq=False)
class ConstDictVariable(VariableTracker):
    """A dict; ``items`` maps real keys to trackers (treated as read-only)."""

    items: dict[Any, VariableTracker]
    cls: type = dict  # or collections.OrderedDict, read from an input

    def __post_init__(self) -> None:
        if self.mutable_local is None:
            object.__setattr__(self, "mutable_local", MutableLocal())

    def python_type(self) -> type:
        return self.cls

    def truth(self, tx: InstructionTranslator) -> bool:
        return bool(self.items)

    def is_python_constant(self) -> bool:
        return all(v.is_python_constant() for v in self.items.values())

    def as_python_constant(self) -> Any:
        return {k: v.as_python_constant() for k, v in self.items.items()}

    def as_proxy(self) -> Any:
        return {k: v.as_proxy() for k, v in self.items.items()}

    def as_example(self) -> Any:
        return {k: v.as_example() for k, v in self.items.items()}

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        return [ConstantVariable(k) for k in self.items]

    def getitem(self, key: VariableTracker) -> VariableTracker:
        real = dict_key(key)
        if real not in self.items:
            raise UserErrorInTrace(KeyError(real))
        return self.items[real]

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .misc import MethodVariable

        if not callable(getattr(dict, name, None)):
            unimplemented(f"attribute .{name} of a dict")
        return MethodVariable(self, name)

    def call_method(
        self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        items = dict(self.items)
        if name in _DICT_READS:
            return _DICT_READS[name](self, *args)
        if name == "update":
            for arg in args:
                items.update(as_dict_items(tx, arg))
            items.update(kwargs)
        elif name in ("__setitem__", "setdefault"):
            key = dict_key(args[0])
            if name == "setdefault" and key in items:
                return items[key]
            value = args[1] if len(args) > 1 else ConstantVariable(None)
            items[key] = value
            tx.replace_all(self, self.clone(items=items))
            return value
        elif name in ("pop", "__delitem__"):
            key = dict_key(args[0])
            if key not in items and len(args) > 1:
                return args[1]
            if key not in items:
                raise UserErrorInTrace(KeyError(key))
            result = items.pop(key)
            tx.replace_all(self, self.clone(items=items))
            return result
        elif name == "clear":
            items.clear()
        else:
            unimplemented(f"method .{name}() of a dict")
        tx.replace_all(self, self.clone(items=items))
        return ConstantVariable(None)

    def reconstruct(self, rt: Residual) -> Any:
        if self.source is not None:
            return rt.eval(self.source)
        return rt.memo(self, lambda: self.cls({k: v.reconstruct(rt)
                                              for k, v in self.items.items()}))

    def __repr__(self) -> str:
        return f"ConstDictVariable({list(self.items)!r})"


def _get(d: ConstDictVariable, key: VariableTracker, default: VariableTracker | None = None):
    return d.items.get(dict_key(key), default or ConstantVariable(None))


_DICT_READS = {
    "__getitem__": ConstDictVariable.getitem,
    "get": _get,
    "__contains__": lambda d, key: ConstantVariable(dict_key(key) in d.items),
    "__len__": lambda d: ConstantVariable(len(d.items)),
    "keys": lambda d: TupleVariable(tuple(ConstantVariable(k) for k in d.items)),
    "values": lambda d: TupleVariable(tuple(d.items.values())),
    "items": lambda d: TupleVariable(
        tuple(TupleVariable((ConstantVariable(k), v)) for k, v in d.items.items())),
    "copy": lambda d: ConstDictVariable(dict(d.items)),
}


def as_dict_items(tx: InstructionTranslator, value: VariableTracker) -> dict[Any, VariableTracker]:
    """The (key -> tracker) pairs of a dict-like tracker (for ``{**d}`` and ``update``)."""
    if isinstance(value, ConstDictVariable):
        return dict(value.items)
    if value.is_python_constant() and isinstance(value.as_python_constant(), dict):
        return {k: ConstantVariable(v) for k, v in value.as_python_constant().items()}
    pairs = value.unpack(tx)
    result = {}
    for pair in pairs:
        key, item = pair.unpack(tx)
        result[dict_key(key)] = item
    return result


@dataclasses.dataclass(frozen=True, eq=False)
class SetVariable(VariableTracker):
    """A set of constants (``{"relu", "gelu"}``, ``set(names)``)."""

    items: tuple[VariableTracker, ...]

    def __post_init__(self) -> None:
        if self.mutable_local is None:
            object.__setattr__(self, "mutable_local", MutableLocal())

    def python_type(self) -> type:
        return set

    def values(self) -> set:
        return {dict_key(i) for i in self.items}

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.values()

    def truth(self, tx: InstructionTranslator) -> bool:
        return bool(self.items)

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        return [ConstantVariable(v) for v in self.values()]

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .misc import MethodVariable

        return MethodVariable(self, name)

    def call_method(self, tx, name, args, kwargs):
        values = self.values()
        if name in ("add", "discard", "remove", "update"):
            arg = args[0]
            new = {dict_key(a) for a in arg.unpack(tx)} if name == "update" else {dict_key(arg)}
            values = values | new if name in ("add", "update") else values - new
            tx.replace_all(self, self.clone(items=tuple(ConstantVariable(v) for v in values)))
            return ConstantVariable(None)
        if name == "__contains__":
            return ConstantVariable(dict_key(args[0]) in values)
        if name == "__len__":
            return ConstantVariable(len(values))
        unimplemented(f"method .{name}() of a set")

    def reconstruct(self, rt: Residual) -> Any:
        return rt.memo(self, self.values)

    def __repr__(self) -> str:
        return f"SetVariable({self.values()!r})"


def to_list(value: VariableTracker, tx: InstructionTranslator) -> ListVariable:
    return ListVariable(tuple(value.unpack(tx)))

"""Iteration: ListIteratorVariable, and the builtins that make iterators.

Input: GET_ITER / FOR_ITER, ``iter``/``next``, and ``range``, ``enumerate``,
``zip``, ``reversed``, ``map``, ``filter`` over anything whose items are
known at trace time (lists, tuples, dict keys, ranges, nn.ModuleList, the
first dimension of a tensor). Output: an iterator tracker over those items.
A ``for`` loop is unrolled: each FOR_ITER hands out the next item, and the
loop body is traced once per item.
Chapter: book/docs/dynamo.md ("Control flow").
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import TYPE_CHECKING, Any

from ..exc import unimplemented
from .base import MutableLocal, VariableTracker
from .constant import ConstantVariable
from .lists import TupleVariable

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator


@dataclasses.dataclass(frozen=True, eq=False)
class ListIteratorVariable(VariableTracker):
    """An iterator over known items; ``index`` is how many were handed out."""

    items: tuple[VariableTracker, ...]
    index: int = 0

    def __post_init__(self) -> None:
        if self.mutable_local is None:
            object.__setattr__(self, "mutable_local", MutableLocal())

    def remaining(self) -> tuple[VariableTracker, ...]:
        return self.items[self.index:]

    def next_item(self, tx: InstructionTranslator) -> VariableTracker | None:
        """The next item (advancing every alias of this iterator), or None when exhausted."""
        if self.index >= len(self.items):
            return None
        tx.replace_all(self, self.clone(index=self.index + 1))
        return self.items[self.index]

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        tx.replace_all(self, self.clone(index=len(self.items)))
        return list(self.remaining())

    def reconstruct(self, rt: Residual) -> Any:
        return iter(tuple(item.reconstruct(rt) for item in self.remaining()))

    def __repr__(self) -> str:
        return f"ListIteratorVariable({len(self.remaining())} left)"


def get_iter(tx: InstructionTranslator, value: VariableTracker) -> ListIteratorVariable:
    """``iter(value)``: an iterator is its own iterator; anything else lists its items."""
    if isinstance(value, ListIteratorVariable):
        return value
    return ListIteratorVariable(tuple(value.unpack(tx)))


def _items(tx: InstructionTranslator, value: VariableTracker) -> list[VariableTracker]:
    return get_iter(tx, value).unpack(tx)


def make_enumerate(tx, iterable, start=None):
    first = 0 if start is None else start.as_python_constant()
    items = _items(tx, iterable)
    return ListIteratorVariable(tuple(
        TupleVariable((ConstantVariable(first + i), item)) for i, item in enumerate(items)))


def make_zip(tx, *iterables, strict=None):
    columns = [_items(tx, it) for it in iterables]
    if strict is not None and strict.as_python_constant():
        if len({len(c) for c in columns}) > 1:
            from ..exc import UserErrorInTrace

            raise UserErrorInTrace(ValueError("zip() arguments have different lengths"))
    return ListIteratorVariable(tuple(TupleVariable(tuple(row)) for row in zip(*columns)))


def make_reversed(tx, sequence):
    return ListIteratorVariable(tuple(reversed(sequence.unpack(tx))))


def make_map(tx, fn, *iterables):
    columns = [_items(tx, it) for it in iterables]
    return ListIteratorVariable(tuple(fn.call_function(tx, list(row), {}) for row in zip(*columns)))


def make_filter(tx, fn, iterable):
    kept = []
    for item in _items(tx, iterable):
        keep = item if fn.is_python_constant() and fn.as_python_constant() is None else \
            fn.call_function(tx, [item], {})
        if keep.truth(tx):
            kept.append(item)
    return ListIteratorVariable(tuple(kept))


def make_next(tx, iterator, default=None):
    if not isinstance(iterator, ListIteratorVariable):
        unimplemented(f"next() on {iterator}")
    item = iterator.next_item(tx)
    if item is not None:
        return item
    if default is not None:
        return default
    from ..exc import UserErrorInTrace

    raise UserErrorInTrace(StopIteration())


def make_repeat(tx, item, times=None):
    """``itertools.repeat(x, n)``, as ``torch.nn.modules.utils._pair`` calls it."""
    if times is None or not times.is_python_constant():
        unimplemented("itertools.repeat() without a constant count")
    return ListIteratorVariable((item,) * times.as_python_constant())


def make_chain(tx, *iterables):
    return ListIteratorVariable(tuple(item for it in iterables for item in _items(tx, it)))


def make_product(tx, *iterables, repeat=None):
    pools = [tuple(_items(tx, it)) for it in iterables]
    pools *= 1 if repeat is None else repeat.as_python_constant()
    return ListIteratorVariable(tuple(TupleVariable(row) for row in itertools.product(*pools)))


ITERATOR_BUILTINS = {
    enumerate: make_enumerate, zip: make_zip, reversed: make_reversed, map: make_map,
    filter: make_filter, next: make_next, iter: lambda tx, value: get_iter(tx, value),
    itertools.repeat: make_repeat, itertools.chain: make_chain, itertools.product: make_product,
}

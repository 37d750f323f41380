"""A deep copy made while tracing: ``copy.deepcopy(self.config)`` in a forward.

Input: ``copy.deepcopy(obj)`` in traced code, ``obj`` an object from outside the frame that
holds no tensors (a configuration). Output: a ``CopiedObjectVariable`` over a real copy, made
now, and a guard that ``obj`` still has the state it was copied in.
Chapter: book/docs/dynamo.md ("Modules").
"""

from __future__ import annotations

import copy
import dataclasses
import types
from typing import TYPE_CHECKING, Any

import torch

from ..exc import UserErrorInTrace, unimplemented
from ..guards import SNAPSHOTS, Guard, is_plain
from .base import VariableTracker
from .constant import ConstantVariable, is_literal

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..symbolic_convert import InstructionTranslator


# --8<-- [start:deep-copy]
# [Note: a deep copy made while tracing]
# transformers 5.24 builds the decoder's cache from a copy of the model's config in every
# encoder-decoder forward (BART, Marian, Pegasus, T5, Whisper...): ``copy.deepcopy(config)``,
# then ``to_dict()``, ``setattr`` for each decoder key, and the cache reads the copy. Traced
# line by line, ``copy.deepcopy`` stops at its first ``id(x)``: a graph break, four graphs
# where there was one. Yet the copy is private to the call. Nothing outside it can see it,
# and what it holds is a function of the original's state. So the copy is made now, for real,
# and so is everything the trace then does with it, reads, writes and method calls alike (a
# ``CopiedObjectVariable``); answers that are constants enter the trace as constants, other
# objects as more of the copy. What keeps the graph right at a later call is one guard: the
# original still has the state it had when copied, compared field by field with a second
# copy kept for that (``same_state`` in guards.py; when the state is plain data, as a
# configuration's is, one dict comparison in C: about 1 us a call; the kept copies live in
# ``guards.SNAPSHOTS`` until ``dynamo.reset()`` forgets the entries). An object holding tensors
# or modules is not copied this way (a graph break as before). If the copy outlives the graph
# (returned, or live at a break), each call gets a fresh deep copy of the traced one, as eager
# makes a fresh copy of its own. Assumed: what is reached from the copy belongs to it, so a
# method of the copy that changed something shared (a class attribute, a global) would do so
# once, while tracing.


def holds_tensors(value: Any, seen: set[int] | None = None) -> bool:
    """True when a tensor or a module is reachable from ``value``'s state, or when some of
    that state is out of this walk's sight."""
    seen = set() if seen is None else seen
    if id(value) in seen or is_literal(value) or isinstance(value, (type, types.ModuleType,
                                                                     types.FunctionType)):
        return False
    seen.add(id(value))
    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        return True
    if isinstance(value, dict):
        return any(holds_tensors(k, seen) or holds_tensors(v, seen) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(holds_tensors(v, seen) for v in value)
    state = getattr(value, "__dict__", None)
    if not isinstance(state, dict) or hasattr(type(value), "__slots__"):
        return True  # a state this walk cannot see (slots, a C object): not copied here
    return holds_tensors(state, seen)


def deepcopy_while_tracing(tx: InstructionTranslator, value: VariableTracker,
                           memo: VariableTracker | None = None) -> VariableTracker | None:
    """``copy.deepcopy(value)`` made now ([Note: a deep copy made while tracing]); None when
    it cannot be (the call then breaks the graph)."""
    from .user_defined import UserObjectVariable

    if memo is not None:
        return None
    if isinstance(value, CopiedObjectVariable):
        return CopiedObjectVariable(copy.deepcopy(value.value))
    if not isinstance(value, UserObjectVariable) or value.source is None \
            or holds_tensors(value.value):
        return None
    snapshot = copy.deepcopy(value.value)
    state = getattr(snapshot, "__dict__", None)
    if isinstance(state, dict) and is_plain(state):
        SNAPSHOTS.append((type(snapshot), state))
        check = f"___same_plain_state({value.source}, ___snapshots[{len(SNAPSHOTS) - 1}])"
    else:
        SNAPSHOTS.append(snapshot)
        check = f"___same_state({value.source}, ___snapshots[{len(SNAPSHOTS) - 1}])"
    tx.output.add_guards([Guard(value.source, "STATE", check)])
    return CopiedObjectVariable(copy.deepcopy(value.value))


def real(value: VariableTracker) -> Any:
    """The Python value a tracker stands for, to hand to the copy's own code."""
    if isinstance(value, CopiedObjectVariable):
        return value.value
    if value.is_python_constant():
        return value.as_python_constant()
    unimplemented(f"passing {value} to the code of a copy made while tracing")


def answer(value: Any) -> VariableTracker:
    """What the copy's code gave back, as a tracker: a constant, or more of the copy."""
    from .builder import wrap_static

    if is_literal(value) and type(value) not in (tuple, frozenset):
        return ConstantVariable(value)
    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        unimplemented(f"a {type(value).__name__} reached from a copy made while tracing")
    if isinstance(value, (type, types.ModuleType, types.FunctionType)):
        static = wrap_static(value, strict=False)
        if static is not None:
            return static
    return CopiedObjectVariable(value)


def _attempt(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as e:
        raise UserErrorInTrace(e) from e


@dataclasses.dataclass(frozen=True, eq=False)
class CopiedObjectVariable(VariableTracker):
    """An object made while tracing from a deep copy, operated on for real."""

    value: Any

    def python_type(self) -> type:
        return type(self.value)

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        return answer(_attempt(getattr, self.value, name))

    def store_attr(self, tx: InstructionTranslator, name: str, value: VariableTracker) -> None:
        _attempt(setattr, self.value, name, real(value))

    def delete_attr(self, tx: InstructionTranslator, name: str) -> None:
        _attempt(delattr, self.value, name)

    def call_method(self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
                    kwargs: dict[str, VariableTracker]) -> VariableTracker:
        method = _attempt(getattr, self.value, name)
        return answer(_attempt(method, *map(real, args),
                               **{k: real(v) for k, v in kwargs.items()}))

    def call_function(self, tx: InstructionTranslator, args: list[VariableTracker],
                      kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return answer(_attempt(self.value, *map(real, args),
                               **{k: real(v) for k, v in kwargs.items()}))

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        return [answer(item) for item in _attempt(list, self.value)]

    def truth(self, tx: InstructionTranslator) -> bool:
        return bool(self.value)

    def reconstruct(self, rt: Residual) -> Any:
        return rt.memo(self, lambda: copy.deepcopy(self.value))

    def __repr__(self) -> str:
        return f"CopiedObjectVariable({type(self.value).__qualname__})"
# --8<-- [end:deep-copy]

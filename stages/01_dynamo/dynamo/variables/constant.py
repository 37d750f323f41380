"""ConstantVariable: Python values known at trace time (numbers, None, str, dtypes...),
and SymNumberVariable: a number whose value is known but guarded only as far as used.

Input: a constant value (from LOAD_CONST, a guarded argument, a tensor's
shape, or constant folding). Output: folding of operations on constants
into new constants; the value itself as a graph argument.
Chapter: book/docs/dynamo.md ("Variables", "Graph breaks").

# [Note: numbers across a graph break]
# ``if x.sum().item() > 0:`` breaks the graph at ``.item()``; the float is
# handed to the resume function. Specialising on its value (a guard
# ``___stack0 == 0.4137``) would recompile on every call. Instead the resume
# function receives it as a SymNumberVariable: it remembers the value *and*
# an expression over the frame (``___stack0``). Comparisons and arithmetic
# build bigger expressions (``(___stack0 > 0)``) without guarding; only a
# use that bakes the value in (a branch, a tensor argument, a shape) adds a
# guard, and a branch guards only the outcome: ``bool(___stack0 > 0) is True``.
"""

from __future__ import annotations

import dataclasses
import operator
import sys
import types
from typing import TYPE_CHECKING, Any

import torch

from ..exc import UserErrorInTrace, unimplemented
from ..guards import Guard
from .base import KnownValueVariable, VariableTracker

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..output_graph import OutputGraph
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator

_SCALAR_TYPES = (
    type(None), bool, int, float, complex, str, bytes, types.EllipsisType, range,
    torch.dtype, torch.device, torch.layout, torch.memory_format,
)


def is_literal(value: Any) -> bool:
    """True for immutable values whose every operation can be folded at trace time."""
    if isinstance(value, _SCALAR_TYPES) or _numpy_scalar(value):
        return True
    if type(value) in (tuple, frozenset, torch.Size):
        return all(is_literal(v) for v in value)
    if isinstance(value, slice):
        return all(is_literal(v) for v in (value.start, value.stop, value.step))
    return False


# --8<-- [start:numpy-scalars]
# [Note: numpy scalars are constants]
# ``np.lcm(8, 8)`` is a ``numpy.int64``, not an ``int``. As an object of a class the trace did
# not know, it used to become a ``UserObjectVariable``, and ``==`` between such objects fell
# back to identity: Reformer's ``seq_len % np.lcm(...) != 0`` came out True under compile and
# False in eager, silently. A numpy scalar is as immutable as an ``int``, so it is a constant
# like one: operations on it are folded at trace time with numpy's own semantics, and one
# read from a global or an attribute is guarded like any constant found there.
def numpy_scalar_type(cls: type) -> bool:
    """Whether ``cls`` is a numpy scalar type (``numpy.int64``, ``numpy.bool_``...)."""
    numpy = sys.modules.get("numpy")  # (never imported here: a value of it means it is loaded)
    return numpy is not None and issubclass(cls, (numpy.bool_, numpy.number))


def _numpy_scalar(value: Any) -> bool:
    return numpy_scalar_type(type(value))
# --8<-- [end:numpy-scalars]


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it is when it is an argument of a tensor op (as
    PyTorch reads it); any other value as it is."""
    return value.item() if _numpy_scalar(value) else value


def fold(fn: Any, *args: Any, **kwargs: Any) -> VariableTracker:
    """Run ``fn`` now on constant arguments; the result becomes a ConstantVariable.

    An exception here is the user's own (``1 / 0``) and is reported as such.
    """
    try:
        result = fn(*args, **kwargs)
    except Exception as e:
        raise UserErrorInTrace(e) from e
    if not is_literal(result):
        from .builder import wrap_static

        return wrap_static(result, strict=True)
    return ConstantVariable(result)


@dataclasses.dataclass(frozen=True, eq=False)
class ConstantVariable(KnownValueVariable):
    value: Any

    def python_type(self) -> type:
        return type(self.value)

    def as_proxy(self) -> Any:
        return _plain(self.value)

    def as_example(self) -> Any:
        return _plain(self.value)

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .misc import MethodVariable

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
        if not isinstance(self.value, (tuple, str, range, frozenset, bytes)):
            unimplemented(f"iterating over a {type(self.value).__name__}")
        return [ConstantVariable(v) for v in self.value]

    def reconstruct(self, rt: Residual) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"ConstantVariable({self.value!r})"


# Operators a SymNumberVariable keeps symbolic, with their spelling in an expression.
SYM_OPERATORS: dict[Any, str] = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
    operator.floordiv: "//", operator.mod: "%", operator.pow: "**",
    operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=",
    operator.eq: "==", operator.ne: "!=",
}


@dataclasses.dataclass(frozen=True, eq=False)
class SymNumberVariable(VariableTracker):
    """A number known now, guarded lazily. See [Note: numbers across a graph break]."""

    value: Any
    expr: str  # evaluates to ``value`` in the frame's namespace
    output: OutputGraph

    def python_type(self) -> type:
        return type(self.value)

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        self.output.add_guards([Guard(self.expr, "VALUE", f"{self.expr} == {self.value!r}")])
        return self.value

    def as_proxy(self) -> Any:
        return self.as_python_constant()

    def as_example(self) -> Any:
        return self.as_python_constant()

    def truth(self, tx: InstructionTranslator) -> bool:
        outcome = bool(self.value)
        guard = f"bool({self.expr}) is {outcome}"
        self.output.add_guards([Guard(self.expr, "TRUTH", guard)])
        return outcome

    def reconstruct(self, rt: Residual) -> Any:
        return rt.eval(self.expr)

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        return ConstantVariable(self.as_python_constant()).var_getattr(tx, name)

    def __repr__(self) -> str:
        return f"SymNumberVariable({self.expr} = {self.value!r})"


def sym_operator(fn: Any, args: list[VariableTracker]) -> VariableTracker | None:
    """``a <op> b`` where one side is a SymNumberVariable and the other a number."""
    symbol = SYM_OPERATORS.get(fn)
    if symbol is None or len(args) != 2:
        return None
    exprs, values, output = [], [], None
    for a in args:
        if isinstance(a, SymNumberVariable):
            exprs.append(a.expr)
            values.append(a.value)
            output = a.output
        elif isinstance(a, ConstantVariable) and type(a.value) in (int, float, bool):
            exprs.append(repr(a.value))
            values.append(a.value)
        else:
            return None
    if output is None:
        return None  # two plain constants: folded as usual
    try:
        value = fn(*values)
    except Exception as e:
        raise UserErrorInTrace(e) from e
    return SymNumberVariable(value, f"({exprs[0]} {symbol} {exprs[1]})", output)

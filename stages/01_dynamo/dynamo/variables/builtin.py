"""BuiltinVariable: Python builtins and the functions of ``operator`` and ``math``.

Input: a builtin callable; the interpreter also routes every operator
bytecode (BINARY_OP, COMPARE_OP, UNARY_*, BINARY_SUBSCR) through here as
the matching ``operator`` function. Output: a graph node when a tensor is
involved (``operator.add(x, 1)``), a folded constant when every argument is
a constant (``2 * 3``), sequence operations on tuples and lists, or a reason
to give up (``print`` is a side effect).
Chapter: book/docs/dynamo.md ("Operators").
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING, Any

from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable, fold
from .lists import BaseListVariable, ListVariable, TupleVariable
from .tensor import TensorVariable

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslator

# Builtins that are pure functions of their arguments: safe to fold on constants.
_PURE_BUILTINS = frozenset({
    abs, all, any, bool, complex, divmod, float, int, isinstance, issubclass, len,
    max, min, pow, round, str, sum, tuple, list,
})
# Callables that may take tensors and then become graph nodes. Absent on
# purpose: operator.not_/truth/contains/index, which ask a tensor for a
# Python bool or int, i.e. for its data.
_TENSOR_CALLABLES = frozenset({
    abs, len, operator.abs, operator.neg, operator.pos, operator.invert,
    operator.getitem, operator.setitem,
    operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge,
    *(getattr(operator, f"{prefix}{name}") for prefix in ("", "i") for name in (
        "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
        "xor", "lshift", "rshift",
    )),
    operator.and_, operator.or_, operator.iand, operator.ior,
})


def is_pure(fn: Any) -> bool:
    """A builtin, ``operator`` or ``math`` function without side effects."""
    try:
        if fn in _PURE_BUILTINS:
            return True
    except TypeError:  # unhashable values are never functions
        return False
    return callable(fn) and getattr(fn, "__module__", None) in ("math", "_operator")


@dataclasses.dataclass(frozen=True, eq=False)
class BuiltinVariable(VariableTracker):
    value: Any

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        fn = self.value
        special = _SPECIAL_CASES.get(fn)
        if special is not None and not kwargs:
            result = special(tx, *args)
            if result is not None:
                return result
        if any(isinstance(a, TensorVariable) for a in args):
            if fn not in _TENSOR_CALLABLES:
                unimplemented(f"{_name(fn)}() on a tensor needs its data")
            return tx.output.create_op("call_function", fn, args, kwargs)
        if is_pure(fn) and all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            values = [a.as_python_constant() for a in args]
            return fold(fn, *values, **{k: v.as_python_constant() for k, v in kwargs.items()})
        if fn is print:
            unimplemented("print() is a side effect a graph cannot replay")
        unimplemented(f"calling builtin {_name(fn)}() with {args}")

    def __repr__(self) -> str:
        return f"BuiltinVariable({_name(self.value)})"


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", repr(fn))


# Special cases return a tracker, or None to continue with the general rule.
def _getitem(tx: InstructionTranslator, obj: VariableTracker, index: VariableTracker):
    if isinstance(obj, BaseListVariable):
        return obj.getitem(index)
    return None


def _concat(tx: InstructionTranslator, a: VariableTracker, b: VariableTracker):
    # tuple + tuple and list + list build a new sequence; tensors fall through.
    if isinstance(a, BaseListVariable) and type(a) is type(b):
        return type(a)(a.items + b.items)
    if isinstance(a, BaseListVariable) and b.is_python_constant():
        if isinstance(b.as_python_constant(), a.python_class):
            return type(a)(a.items + tuple(ConstantVariable(v) for v in b.as_python_constant()))
    return None


def _is(tx: InstructionTranslator, a: VariableTracker, b: VariableTracker, negate=False):
    if a.is_python_constant() and b.is_python_constant():
        return None  # fold
    if a is b:
        return ConstantVariable(not negate)
    if isinstance(a, TensorVariable) != isinstance(b, TensorVariable):
        return ConstantVariable(negate)  # a tensor is never None, a dtype, ...
    unimplemented("`is` between two traced values")


def _len(tx: InstructionTranslator, obj: VariableTracker):
    if isinstance(obj, BaseListVariable):
        return ConstantVariable(len(obj.items))
    return None


def _sequence(cls: type):
    def convert(tx: InstructionTranslator, obj: VariableTracker | None = None):
        if obj is None or obj.is_python_constant():
            return None  # fold
        return cls(tuple(obj.unpack(tx)))

    return convert


def _isinstance(tx: InstructionTranslator, obj: VariableTracker, classes: VariableTracker):
    if obj.is_python_constant() or not classes.is_python_constant():
        return None
    return ConstantVariable(issubclass(obj.python_type(), classes.as_python_constant()))


def _getattr(tx: InstructionTranslator, obj: VariableTracker, name: VariableTracker, *default):
    if default or not name.is_python_constant():
        unimplemented("getattr() with a default or a traced name")
    return obj.var_getattr(tx, name.as_python_constant())


_SPECIAL_CASES = {
    operator.getitem: _getitem,
    operator.add: _concat,
    operator.iadd: _concat,
    operator.is_: _is,
    operator.is_not: lambda tx, a, b: _is(tx, a, b, negate=True),
    len: _len,
    tuple: _sequence(TupleVariable),
    list: _sequence(ListVariable),
    isinstance: _isinstance,
    getattr: _getattr,
}

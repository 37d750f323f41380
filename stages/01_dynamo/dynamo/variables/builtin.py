"""BuiltinVariable: Python builtins and the functions of ``operator`` and ``math``.

Input: a builtin callable; the interpreter also routes every operator
bytecode (BINARY_OP, COMPARE_OP, CONTAINS_OP, UNARY_*, BINARY_SUBSCR,
STORE_SUBSCR) through here as the matching ``operator`` function. Output: a
graph node when a tensor is involved (``operator.add(x, 1)``), a folded
constant when every argument is a constant (``2 * 3``), container and
iterator operations resolved at trace time (``len``, ``zip``, ``sorted``,
``isinstance``, ``getattr``...), or a reason to give up (``print`` is a
side effect, so it breaks the graph).
Chapter: book/docs/dynamo.md ("Operators", "Builtins").
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import inspect
import math
import operator
from typing import TYPE_CHECKING, Any

import torch

from ..exc import UserErrorInTrace, unimplemented
from ..guards import Guard
from .base import VariableTracker
from .constant import ConstantVariable, SymNumberVariable, fold, is_literal, sym_operator
from .copies import deepcopy_while_tracing
from .dicts import ConstDictVariable, SetVariable, as_dict_items
from .functions import FunctoolsPartialVariable
from .iter import ITERATOR_BUILTINS, get_iter
from .lists import BaseListVariable, ListVariable, TupleVariable, contains
from .sym_node import is_sym
from .tensor import TensorVariable, known_index_or_self

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator

# Builtins that are pure functions of their arguments: safe to fold on constants.
_PURE_BUILTINS = frozenset({
    abs, all, any, bool, complex, divmod, float, int, isinstance, issubclass, len,
    max, min, pow, round, str, sum, tuple, list, range, sorted, repr, hash, chr, ord,
    callable, slice, type, format, frozenset,
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

# Builtins that ask a tensor for a number (``__index__``, ``__int__``), which a 0-d integer
# tensor of known value answers at trace time.
_INDEX_BUILTINS = frozenset({int, float, operator.index, range})


def has_special_case(fn: Any) -> bool:
    """A builtin this module knows how to trace (``enumerate``, ``dict``, ``print``...)."""
    try:
        return fn in _SPECIAL_CASES
    except TypeError:
        return False


def is_pure(fn: Any) -> bool:
    """A builtin, ``operator`` or ``math`` function without side effects."""
    try:
        if fn in _PURE_BUILTINS:
            return True
    except TypeError:  # unhashable values are never functions
        return False
    if type(fn).__name__ == "ufunc" and type(fn).__module__ == "numpy":
        return True  # np.lcm(8, 8) on constants: [Note: numpy scalars are constants]
    return callable(fn) and getattr(fn, "__module__", None) in ("math", "_operator")


PYTHON_TYPE_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool,
                      complex: torch.complex128}  # [Note: a Python type as a dtype]


@dataclasses.dataclass(frozen=True, eq=False)
class BuiltinVariable(VariableTracker):
    value: Any

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    # [Note: a Python type as a dtype]
    # ``torch.zeros(n, dtype=int)`` (transformers' chunked-attention masks) is valid PyTorch:
    # where an op wants a dtype, its argument parser reads ``int``, ``float``, ``bool`` and
    # ``complex`` as int64, float64, bool and complex128. A Python type is no other tensor
    # op's argument, so as one it is that dtype, which graphs and examples both take.
    def as_proxy(self) -> Any:
        if self.value in PYTHON_TYPE_DTYPES:
            return PYTHON_TYPE_DTYPES[self.value]
        return super().as_proxy()

    def as_example(self) -> Any:
        if self.value in PYTHON_TYPE_DTYPES:
            return PYTHON_TYPE_DTYPES[self.value]
        return super().as_example()

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        if self.value is dict and name == "fromkeys":  # (transformers' Mamba cache)
            return BuiltinVariable(dict.fromkeys)
        return super().var_getattr(tx, name)

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        fn = self.value
        if fn in _INDEX_BUILTINS:  # ``range(t)`` of a known ``t``: [Note: constant tensors]
            args = [known_index_or_self(a) for a in args]
        if any(is_sym(a) for a in [*args, *kwargs.values()]):
            result = _sym_call(tx, fn, args, kwargs)
            if result is not None:
                return result
        special = _SPECIAL_CASES.get(fn)
        if special is not None:
            result = special(tx, *args, **kwargs)
            if result is not None:
                return result
        symbolic = sym_operator(fn, args) if not kwargs else None
        if symbolic is not None:
            return symbolic
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

    def reconstruct(self, rt: Any) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"BuiltinVariable({_name(self.value)})"


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", repr(fn))


# Callables that stay symbolic on sizes: a graph node computes them from the inputs' sizes
# at run time (book/docs/dynamic-shapes.md, "Sizes in the graph").
_SYM_CALLABLES = frozenset({
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
    operator.truediv, operator.pow, operator.neg, operator.pos, operator.abs, abs,
    operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge,
    operator.iadd, operator.isub, operator.imul, operator.ifloordiv, operator.imod,
})
_SYM_MAX_MIN = {max: torch.sym_max, min: torch.sym_min}


def _sym_call(tx: InstructionTranslator, fn: Any, args: list[VariableTracker],
              kwargs: dict[str, VariableTracker]) -> VariableTracker | None:
    """A builtin applied to a symbolic size; None continues with the general rules
    (which specialise the size if they need its value)."""
    if any(isinstance(a, TensorVariable) for a in args) or kwargs:
        return None
    if fn in _SYM_CALLABLES and all(is_sym(a) or _is_number(a) for a in args):
        return tx.output.create_op("call_function", fn, args, {})
    if fn is int and len(args) == 1 and args[0].python_type() is int:
        return args[0]
    if fn in _SYM_MAX_MIN and len(args) == 2 and all(
            is_sym(a) and a.python_type() is int or _is_number(a) for a in args):
        return tx.output.create_op("call_function", _SYM_MAX_MIN[fn], args, {})
    if is_pure(fn) and all(a.is_python_constant() or is_sym(a) for a in args):
        # round(n / 3), range(n), ...: the value is needed now, so the size is specialised
        return fold(fn, *[a.as_python_constant() for a in args])
    return None


def _is_number(value: VariableTracker) -> bool:
    return isinstance(value, ConstantVariable) and type(value.value) in (int, float, bool)


# Special cases return a tracker, or None to continue with the general rule.
def _getitem(tx: InstructionTranslator, obj: VariableTracker, index: VariableTracker):
    if isinstance(obj, BaseListVariable):
        return obj.getitem(index)
    if isinstance(obj, ConstDictVariable):
        return obj.getitem(index)
    if isinstance(obj, TensorVariable) or obj.is_python_constant():
        return None
    return obj.call_method(tx, "__getitem__", [index], {})


def _setitem(tx, obj, index, value):
    if isinstance(obj, TensorVariable):
        return _masked_write(tx, obj, index, value)
    return obj.call_method(tx, "__setitem__", [index, value], {})


# --8<-- [start:masked-write]
# [Note: a masked write with a gradient]
# ``h[mask] = emb`` with a boolean ``mask`` is ``index_put``, and when ``emb`` requires grad,
# autograd's backward for it gathers ``grad[mask]``: a tensor with one row per true element,
# a size no trace can know. wav2vec2, Hubert and their kin write their learned mask embedding
# into the masked time steps that way in training, and that frame ran eagerly. When ``emb``
# is one row for every masked position (it broadcasts to ``h.shape[mask.ndim:]``), the write
# is ``h.copy_(torch.where(mask[..., None], emb, h))``: the same values, and the same
# gradients (``grad`` where the mask is false for ``h``; the masked rows of ``grad``, summed,
# for ``emb``), with no data-dependent size anywhere.
def _masked_write(tx, obj, index, value):
    """``obj[mask] = value`` as a ``where``, when ``value`` requires grad and is one row for
    every masked position; None (the general rule) otherwise."""
    if not (isinstance(index, TensorVariable) and isinstance(value, TensorVariable)):
        return None
    mask, target, row = index.example, obj.example, value.example
    if mask.dtype is not torch.bool or not row.requires_grad or mask.ndim > target.ndim \
            or row.ndim > target.ndim - mask.ndim:
        return None
    sizes = [*mask.shape, *target.shape[:mask.ndim]]
    if not all(type(n) is int for n in sizes) or tuple(mask.shape) != \
            tuple(target.shape[:mask.ndim]):
        return None  # (a mask of another shape is eager's IndexError: the general rule)
    create = tx.output.create_op
    expanded = create("call_function", operator.getitem,
                      [index, ConstantVariable((Ellipsis, *[None] * (target.ndim - mask.ndim)))],
                      {})
    if row.dtype != target.dtype:
        value = create("call_method", "to", [value, ConstantVariable(target.dtype)], {})
    new = create("call_function", torch.where, [expanded, value, obj], {})
    create("call_method", "copy_", [obj, new], {})
    return ConstantVariable(None)
# --8<-- [end:masked-write]


def _delitem(tx, obj, index):
    return obj.call_method(tx, "__delitem__", [index], {})


def _dict_union(tx: InstructionTranslator, a: VariableTracker, b: VariableTracker):
    """``kwargs | {"dt_limit": ...}`` (Mamba2): a new dict of both items, the right one's
    winning. Anything else (sets, tensors, ints) takes the general rule."""
    from .dicts import ConstDictVariable

    if not (isinstance(a, ConstDictVariable) and isinstance(b, ConstDictVariable)):
        return None
    # Python asks the right operand first when its class subclasses the left's
    cls = b.cls if b.cls is not a.cls and issubclass(b.cls, a.cls) else a.cls
    return ConstDictVariable({**a.items, **b.items}, cls=cls)


def _concat(tx: InstructionTranslator, a: VariableTracker, b: VariableTracker, inplace=False):
    # tuple + tuple and list + list build a new sequence; tensors fall through.
    if not isinstance(a, BaseListVariable):
        # ``mems = (); mems = mems + (h,)`` (XLNet): a constant sequence, then a traced one
        if isinstance(b, BaseListVariable) and a.is_python_constant() and \
                type(a.as_python_constant()) is b.python_class and not inplace:
            return b.new_sequence(tuple(ConstantVariable(v) for v in a.as_python_constant())
                                  + b.items)
        return None
    if inplace and isinstance(a, ListVariable):  # xs += ys extends xs itself
        new = a.clone(items=a.items + tuple(get_iter(tx, b).unpack(tx)))
        tx.replace_all(a, new)
        return new
    if isinstance(b, BaseListVariable) and a.python_class is b.python_class:
        return a.new_sequence(a.items + b.items)
    if b.is_python_constant() and isinstance(b.as_python_constant(), a.python_class):
        return a.new_sequence(a.items + tuple(ConstantVariable(v) for v in b.as_python_constant()))
    return None


def _repeat(tx, a, b):
    if isinstance(a, BaseListVariable) and b.is_python_constant():
        return a.new_sequence(a.items * b.as_python_constant())
    return None


# [Note: `is` between tensors]
# ``nn.MultiheadAttention.forward`` asks ``query is key`` and ``key is value`` to choose
# its fast path; SigLIP's pooling head calls it with a probe and the hidden states, and the
# whole forward ran eagerly ("`is` between two traced values"). Every traced tensor has an
# example tensor, which went through the same code as the real one: an op that returns its
# own input in eager (an in-place op, ``x.contiguous()`` of a contiguous ``x``, ``.to`` of
# the same dtype, dropout in eval mode) returns its example in the trace. So two trackers
# are one tensor exactly when their examples are one object. Inputs are the exception to
# "the same code": each has its own example, one per object (the same input reached twice
# is one tracker, ``wrap_tensor``), and two inputs that were two objects at this call are
# guarded to stay two (``a is not b``), so passing one tensor twice later recompiles.
def _rebuilt(tracker: VariableTracker) -> bool:
    """A container tracker, whose Python value is built anew each time it is asked for (a
    constant keeps the very object it was given)."""
    return not isinstance(tracker, ConstantVariable) and isinstance(
        tracker.as_python_constant(), (list, dict, set, tuple))


def _is(tx: InstructionTranslator, a: VariableTracker, b: VariableTracker, negate=False):
    if isinstance(a, SymNumberVariable) or isinstance(b, SymNumberVariable):
        return None
    if a is b or (a.mutable_local is not None and a.mutable_local is b.mutable_local):
        return ConstantVariable(not negate)
    if a.is_python_constant() and b.is_python_constant():
        if not _rebuilt(a) and not _rebuilt(b):
            return ConstantVariable((a.as_python_constant() is b.as_python_constant()) != negate)
        # two trackers of containers are two objects ([Note: one container, two names])
        if a.source is not None and b.source is not None:
            tx.output.add_guards([Guard(a.source, "ALIAS", f"{a.source} is not {b.source}")])
        return ConstantVariable(negate)
    real_a, real_b = getattr(a, "value", a), getattr(b, "value", b)
    if not isinstance(a, TensorVariable) and not isinstance(b, TensorVariable) and \
            hasattr(a, "value") and hasattr(b, "value"):
        if isinstance(real_a, torch.nn.Module) and isinstance(real_b, torch.nn.Module) and \
                a.source is not None and b.source is not None:
            # modules are guarded by class, not identity ([Note: module guards]): whether
            # these two are one is a fact about this call, guarded like one
            op = "is" if real_a is real_b else "is not"
            tx.output.add_guards([Guard(a.source, "ALIAS", f"{a.source} {op} {b.source}")])
        return ConstantVariable((real_a is real_b) != negate)
    if isinstance(a, TensorVariable) != isinstance(b, TensorVariable):
        return ConstantVariable(negate)  # a tensor is never None, a dtype, ...
    if a.is_python_constant() != b.is_python_constant():
        return ConstantVariable(negate)  # e.g. a list is not None
    if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
        # [Note: `is` between tensors]: the example tensors ran the same code as eager
        same = a.example is b.example
        if not same and a.source is not None and b.source is not None:
            # two inputs are one tracker when they are one tensor (``wrap_tensor``): these
            # were two at this call, which a guard keeps true for the entry's later calls
            tx.output.add_guards([Guard(a.source, "ALIAS", f"{a.source} is not {b.source}")])
        return ConstantVariable(same != negate)
    unimplemented("`is` between two traced values")


def _eq(tx, a, b, negate=False):
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable) or is_sym(a) or is_sym(b):
        return None
    if a.is_python_constant() and b.is_python_constant():
        return None
    for v in (a, b):  # `==` is `is` only for objects that compare by identity
        if hasattr(v, "value") and type(v.value).__eq__ is not object.__eq__:
            unimplemented(f"`==` on a {type(v.value).__qualname__}, which defines its own "
                          "__eq__")
    return _is(tx, a, b, negate)


def _contains(tx, container, item):
    if isinstance(container, (BaseListVariable,)):
        return contains(container.items, item)
    if isinstance(container, TensorVariable) or container.is_python_constant() and \
            not isinstance(container, SetVariable):
        return None
    return container.call_method(tx, "__contains__", [item], {})


def _not(tx, value):
    return ConstantVariable(not value.truth(tx))


def _bool(tx, value=None):
    return ConstantVariable(False if value is None else value.truth(tx))


# --8<-- [start:builtin-len]
def _len_or_size(tx: InstructionTranslator, obj: VariableTracker):
    """``len(x)`` of a tensor whose first dim is symbolic is ``x.size(0)``, symbolic too."""
    if isinstance(obj, TensorVariable) and obj.has_symbolic_dim(0):
        return obj.call_method(tx, "size", [ConstantVariable(0)], {})
    return _len(tx, obj)


def _len(tx: InstructionTranslator, obj: VariableTracker):
    """``len(obj)``: a container asks itself; a tensor or a constant takes the general rule."""
    # BEGIN EXERCISE dynamo-builtin-len: answer len() for containers, defer for tensors/constants
    if isinstance(obj, (BaseListVariable, ConstDictVariable, SetVariable)):
        return obj.call_method(tx, "__len__", [], {})
    if isinstance(obj, TensorVariable) or obj.is_python_constant():
        return None
    return obj.call_method(tx, "__len__", [], {})
    # END EXERCISE dynamo-builtin-len
# --8<-- [end:builtin-len]


def _sequence(cls: type):
    def convert(tx: InstructionTranslator, obj: VariableTracker | None = None):
        if obj is None:
            return cls(())
        return cls(tuple(get_iter(tx, obj).unpack(tx)))

    return convert


def _dict(tx, arg=None, **kwargs):
    items = as_dict_items(tx, arg) if arg is not None else {}
    return ConstDictVariable({**items, **kwargs})


def _dict_fromkeys(tx, keys, value=None):
    value = value if value is not None else ConstantVariable(None)
    return ConstDictVariable({k.as_python_constant(): value
                              for k in get_iter(tx, keys).unpack(tx)})


def _ordered_dict(tx, arg=None, **kwargs):
    """``OrderedDict(...)`` (torchvision's backbones and segmentation heads build one per
    call): a dict that keeps its class, so it leaves the graph as an ``OrderedDict``. Its
    own methods (``move_to_end``) still break the graph."""
    return dataclasses.replace(_dict(tx, arg, **kwargs), cls=collections.OrderedDict)


def _set(tx, arg=None):
    return SetVariable(tuple(get_iter(tx, arg).unpack(tx)) if arg is not None else ())


def _isinstance(tx: InstructionTranslator, obj: VariableTracker, classes: VariableTracker):
    if not classes.is_python_constant():
        return None
    if isinstance(obj, TensorVariable):
        return ConstantVariable(issubclass(obj.python_type(), classes.as_python_constant()))
    if obj.is_python_constant() and not isinstance(obj, SymNumberVariable):
        return None
    return ConstantVariable(issubclass(obj.python_type(), classes.as_python_constant()))


def _type(tx, obj, *rest):
    from .builder import wrap_static

    if rest:
        unimplemented("creating a class with type(name, bases, dict)")
    return wrap_static(obj.python_type(), strict=True)


def _attr_name(name: VariableTracker) -> str:
    if not name.is_python_constant():
        unimplemented("getattr() with a traced name")
    return name.as_python_constant()


def _getattr(tx: InstructionTranslator, obj: VariableTracker, name: VariableTracker, *default):
    try:
        return obj.var_getattr(tx, _attr_name(name))
    except UserErrorInTrace as e:
        if default and isinstance(e.error, AttributeError):
            return default[0]
        raise


def _hasattr(tx, obj, name):
    try:
        obj.var_getattr(tx, _attr_name(name))
    except UserErrorInTrace as e:
        if isinstance(e.error, AttributeError):
            return ConstantVariable(False)
        raise
    return ConstantVariable(True)


def _callable(tx, obj):
    """``callable(fn)`` on a function, method or module the trace knows: True."""
    from .functions import (
        FunctoolsPartialVariable,
        NestedUserFunctionVariable,
        UserFunctionVariable,
        UserMethodVariable,
    )
    from .misc import MethodVariable
    from .nn_module import NNModuleVariable
    from .torch import TorchFunctionVariable

    if isinstance(obj, (UserFunctionVariable, UserMethodVariable, NNModuleVariable,
                        BuiltinVariable, NestedUserFunctionVariable, FunctoolsPartialVariable,
                        MethodVariable, TorchFunctionVariable)):
        return ConstantVariable(True)
    if isinstance(obj, (TensorVariable, BaseListVariable)):
        return ConstantVariable(False)
    return None


def _signature(tx, fn, *rest, **kwargs):
    """``inspect.signature(fn)`` of a function the trace knows: what the signature says
    depends on the code only, so it is worked out now (HuggingFace counts a callback's
    parameters before calling it)."""
    import inspect

    from .functions import UserFunctionVariable, UserMethodVariable

    if rest or kwargs:
        return None
    if isinstance(fn, UserFunctionVariable):
        return KnownObjectVariable(inspect.signature(fn.value))
    if isinstance(fn, UserMethodVariable):
        sig = inspect.signature(fn.fn)
        return KnownObjectVariable(sig.replace(parameters=list(sig.parameters.values())[1:]))
    return None


@dataclasses.dataclass(frozen=True, eq=False)
class KnownObjectVariable(ConstantVariable):
    """An immutable object worked out at trace time that is not a literal (a signature):
    its attributes and methods fold like a constant's."""

    def var_getattr(self, tx, name):
        if callable(getattr(self.value, name, None)):
            return super().var_getattr(tx, name)
        try:
            return _known(getattr(self.value, name))
        except AttributeError as e:
            raise UserErrorInTrace(e) from e

    def call_method(self, tx, name, args, kwargs):
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            unimplemented(f"method .{name}() of a {type(self.value).__name__} with traced args")
        values = [a.as_python_constant() for a in args]
        named = {k: v.as_python_constant() for k, v in kwargs.items()}
        try:
            return _known(getattr(self.value, name)(*values, **named))
        except Exception as e:
            raise UserErrorInTrace(e) from e

    def unpack(self, tx):
        return [_known(v) for v in self.value]


def _known(value):
    from .builder import wrap_static

    if is_literal(value):
        return ConstantVariable(value)
    return wrap_static(value, strict=False) or KnownObjectVariable(value)


def _setattr(tx, obj, name, value):
    tx.store_attr(obj, _attr_name(name), value)
    return ConstantVariable(None)


def _delattr(tx, obj, name):
    delete = getattr(obj, "delete_attr", None)  # (a copy made while tracing has one)
    if delete is None:
        return None
    delete(tx, _attr_name(name))
    return ConstantVariable(None)


def _items(tx, args) -> list[VariableTracker]:
    return get_iter(tx, args[0]).unpack(tx) if len(args) == 1 else list(args)


def _min_max(fn):
    def handler(tx, *args, **kwargs):
        items = _items(tx, args)
        if any(isinstance(i, TensorVariable) for i in items) or kwargs:
            unimplemented(f"{fn.__name__}() over tensors compares their data")
        return fold(fn, [i.as_python_constant() for i in items])

    return handler


def _sum(tx, iterable, start=None):
    total = start if start is not None else ConstantVariable(0)
    for item in get_iter(tx, iterable).unpack(tx):
        total = BuiltinVariable(operator.add).call_function(tx, [total, item], {})
    return total


def _any_all(fn):
    def handler(tx, iterable):
        truths = [item.truth(tx) for item in get_iter(tx, iterable).unpack(tx)]
        return ConstantVariable(fn(truths))

    return handler


def _sorted(tx, iterable, key=None, reverse=None):
    items = ListVariable(tuple(get_iter(tx, iterable).unpack(tx)))
    tx.push(items)
    kwargs = {"reverse": reverse} if reverse is not None else {}
    items.call_method(tx, "sort", [], {**kwargs, **({"key": key} if key else {})})
    return tx.pop()


# --8<-- [start:deferred-print]
def _print(tx, *args, **kwargs):
    """``print`` with arguments known now is replayed after the graph ([Note: a print after
    the graph] in side_effects.py); any other print breaks the graph."""
    from .. import config

    kwargs = dict(kwargs)
    stream = kwargs.pop("file", None)
    if stream is not None and stream.is_python_constant() and \
            stream.as_python_constant() is None:
        stream = None  # file=None: sys.stdout at the time of the call, as at replay
    known = all(a.is_python_constant() for a in [*args, *kwargs.values()])
    if config.reorder_prints and known and set(kwargs) <= {"sep", "end", "flush"} and (
            stream is None or stream.source is not None):
        values = tuple(a.as_python_constant() for a in args)
        options = {k: v.as_python_constant() for k, v in kwargs.items()}
        if tx.output.side_effects.defer_print(stream, values, options):
            return ConstantVariable(None)
    unimplemented("print() is a side effect a graph cannot replay")
# --8<-- [end:deferred-print]


def _super(tx, *args):
    if args:
        cls, obj = args[0].as_python_constant(), args[1]
    else:
        cls = tx.read_cell("__class__").as_python_constant()
        obj = tx.symbolic_locals[tx.code.co_varnames[0]]
    from .misc import SuperVariable

    return SuperVariable(cls, obj)


def _number(fn):
    def handler(tx, value=None, *rest):
        if isinstance(value, TensorVariable):
            unimplemented(f"{fn.__name__}() of a tensor needs its data")
        return None

    return handler


_SPECIAL_CASES = {
    operator.getitem: _getitem,
    operator.setitem: _setitem,
    operator.delitem: _delitem,
    operator.add: _concat,
    operator.iadd: lambda tx, a, b: _concat(tx, a, b, inplace=True),
    operator.mul: _repeat,
    operator.or_: _dict_union,
    operator.is_: _is,
    operator.is_not: lambda tx, a, b: _is(tx, a, b, negate=True),
    operator.eq: _eq,
    operator.ne: lambda tx, a, b: _eq(tx, a, b, negate=True),
    operator.contains: _contains,
    operator.not_: _not,
    operator.truth: _bool,
    bool: _bool,
    len: _len_or_size,
    tuple: _sequence(TupleVariable),
    list: _sequence(ListVariable),
    dict: _dict,
    dict.fromkeys: _dict_fromkeys,
    copy.deepcopy: deepcopy_while_tracing,
    delattr: _delattr,  # [Note: a deep copy made while tracing]
    collections.OrderedDict: _ordered_dict,
    set: _set,
    isinstance: _isinstance,
    type: _type,
    getattr: _getattr,
    hasattr: _hasattr,
    callable: _callable,
    inspect.signature: _signature,
    setattr: _setattr,
    min: _min_max(min),
    max: _min_max(max),
    sum: _sum,
    any: _any_all(any),
    all: _any_all(all),
    sorted: _sorted,
    print: _print,
    super: _super,
    int: _number(int),
    float: _number(float),
    math.floor: _number(math.floor),
    functools.partial: lambda tx, fn, *args, **kw: FunctoolsPartialVariable(fn, args, kw),
    **ITERATOR_BUILTINS,
}

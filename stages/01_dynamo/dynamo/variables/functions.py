"""Python functions: user functions, closures, lambdas, bound methods, functools.partial.

Input: a function met as a global, an attribute (a method of ``self``), or
made by MAKE_FUNCTION during the trace (a lambda, a nested ``def``, a 3.11
comprehension). Output: calling it *inlines* it: its bytecode runs in a
nested InliningInstructionTranslator on the same graph, so a helper called
from ``forward`` adds its tensor operations to the caller's graph.
Chapter: book/docs/dynamo.md ("Inlining").

# [Note: closures]
# A nested function reads the variables of its enclosing frame through
# cells. During tracing there are no real cells, so a CellVariable names the
# frame (translator) and variable it refers to; LOAD_DEREF in the inner
# function reads that frame's current tracker, STORE_DEREF (``nonlocal``)
# writes it. A function object that is already real (a global helper that is
# itself a closure) has real cells: their contents are read once and guarded
# through the function's source, like any other value from outside.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import TYPE_CHECKING, Any

from ..exc import unimplemented
from .base import OPAQUE, VariableTracker
from .dicts import ConstDictVariable
from .lists import TupleVariable

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator



class _Default:
    """Placeholder for the i-th default while binding arguments."""

    def __init__(self, key: Any) -> None:
        self.key = key


def bind_args(
    code: types.CodeType, defaults: tuple[VariableTracker, ...],
    kwdefaults: dict[str, VariableTracker], args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
) -> dict[str, VariableTracker]:
    """Python's argument binding, on trackers: parameter name -> tracker."""
    from ..exc import UserErrorInTrace

    cells = tuple(types.CellType() for _ in code.co_freevars)
    dummy = types.FunctionType(code, {}, code.co_name, None, cells)
    dummy.__defaults__ = tuple(_Default(i) for i in range(len(defaults))) or None
    dummy.__kwdefaults__ = {k: _Default(k) for k in kwdefaults} or None
    try:
        bound = inspect.signature(dummy).bind(*args, **kwargs)
    except TypeError as e:
        raise UserErrorInTrace(e) from e
    bound.apply_defaults()
    result = {}
    for name, value in bound.arguments.items():
        kind = inspect.signature(dummy).parameters[name].kind
        if isinstance(value, _Default):
            value = defaults[value.key] if isinstance(value.key, int) else kwdefaults[value.key]
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            value = TupleVariable(tuple(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            value = ConstDictVariable(dict(value))
        if name.startswith("implicit") and f".{name[8:]}" in code.co_varnames:
            name = f".{name[8:]}"  # inspect renames a comprehension's ".0" argument
        result[name] = value
    return result


def inline_call(
    tx: InstructionTranslator, code: types.CodeType, f_globals: dict[str, Any],
    bound: dict[str, VariableTracker], cells: dict[str, Any], fn_source: str | None,
) -> VariableTracker:
    """Run ``code`` on trackers inside ``tx``'s graph; its return value's tracker."""
    from ..symbolic_convert import InliningInstructionTranslator

    if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        unimplemented(f"inlining the coroutine {code.co_name}()")
    inliner = InliningInstructionTranslator(tx, code, f_globals, bound, cells, fn_source)
    result = inliner.run()
    if code.co_flags & inspect.CO_GENERATOR:
        # A generator runs to completion now; its values are iterated later.
        # Fine for ``sum(x * 2 for x in xs)``; a generator driven by send() is not.
        from .iter import ListIteratorVariable

        return ListIteratorVariable(tuple(inliner.generated))
    return result


@dataclasses.dataclass(frozen=True, eq=False)
class UserFunctionVariable(VariableTracker):
    """A real Python function (a global helper, a method found on a class)."""

    value: types.FunctionType

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def python_type(self) -> type:
        return types.FunctionType

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .builder import wrap_attribute

        return wrap_attribute(tx, self, self.value, name)

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        from ..polyfills import substitute
        from .builder import wrap_attribute

        fn = self.value
        stand_in = substitute(fn, args, kwargs)  # [Note: polyfills]
        if stand_in is not None:
            return UserFunctionVariable(stand_in).call_function(tx, args, kwargs)
        defaults = tuple(
            wrap_attribute(tx, self, fn.__defaults__, i, path=f".__defaults__[{i}]")
            for i in range(len(fn.__defaults__ or ())))
        kwdefaults = {
            k: wrap_attribute(tx, self, fn.__kwdefaults__, k, path=f".__kwdefaults__[{k!r}]")
            for k in fn.__kwdefaults__ or {}}
        bound = bind_args(fn.__code__, defaults, kwdefaults, args, kwargs)
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        return inline_call(tx, fn.__code__, fn.__globals__, bound, cells, self.source)

    def reconstruct(self, rt: Residual) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"UserFunctionVariable({self.value.__qualname__})"


@dataclasses.dataclass(frozen=True, eq=False)
class CellVariable(VariableTracker):
    """A cell of a frame being traced: (translator, variable name). See [Note: closures]."""

    tx: Any
    name: str

    def reconstruct(self, rt: Residual) -> Any:
        return types.CellType(self.tx.read_cell(self.name).reconstruct(rt))


@dataclasses.dataclass(frozen=True, eq=False)
class NestedUserFunctionVariable(VariableTracker):
    """A function made during the trace by MAKE_FUNCTION (lambda, nested def, comprehension)."""

    code: types.CodeType
    f_globals: dict[str, Any] = dataclasses.field(metadata=OPAQUE)  # (no trackers inside)
    defaults: tuple[VariableTracker, ...] = ()
    kwdefaults: dict[str, VariableTracker] = dataclasses.field(default_factory=dict)
    closure: tuple[VariableTracker, ...] = ()

    def python_type(self) -> type:
        return types.FunctionType

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        bound = bind_args(self.code, self.defaults, self.kwdefaults, args, kwargs)
        cells = dict(zip(self.code.co_freevars, self.closure))
        return inline_call(tx, self.code, self.f_globals, bound, cells, None)

    def reconstruct(self, rt: Residual) -> Any:
        def build() -> Any:
            cells = tuple(c.reconstruct(rt) for c in self.closure)
            fn = types.FunctionType(self.code, self.f_globals, self.code.co_name, None, cells)
            fn.__defaults__ = tuple(d.reconstruct(rt) for d in self.defaults) or None
            fn.__kwdefaults__ = {k: v.reconstruct(rt) for k, v in self.kwdefaults.items()} or None
            return fn

        return rt.memo(self, build)

    def __repr__(self) -> str:
        return f"NestedUserFunctionVariable({self.code.co_name})"


@dataclasses.dataclass(frozen=True, eq=False)
class UserMethodVariable(VariableTracker):
    """``obj.method`` for a method defined in Python: calling it inlines ``fn(obj, ...)``."""

    fn: types.FunctionType
    obj: VariableTracker

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        fn_vt = UserFunctionVariable(self.fn, source=_method_source(self.fn))
        return fn_vt.call_function(tx, [self.obj, *args], kwargs)

    def reconstruct(self, rt: Residual) -> Any:
        return types.MethodType(self.fn, self.obj.reconstruct(rt))

    def __repr__(self) -> str:
        return f"UserMethodVariable({self.fn.__qualname__})"


def _method_source(fn: types.FunctionType) -> str | None:
    from ..guards import python_path

    return python_path(fn)


@dataclasses.dataclass(frozen=True, eq=False)
class FunctoolsPartialVariable(VariableTracker):
    """``functools.partial(fn, *args, **kwargs)``: calling it prepends the stored arguments."""

    fn: VariableTracker
    args: tuple[VariableTracker, ...]
    keywords: dict[str, VariableTracker]

    def call_function(self, tx, args, kwargs):
        return self.fn.call_function(tx, [*self.args, *args], {**self.keywords, **kwargs})

    def var_getattr(self, tx, name):
        if name == "func":
            return self.fn
        if name == "args":
            return TupleVariable(self.args)
        if name == "keywords":
            return ConstDictVariable(dict(self.keywords))
        return super().var_getattr(tx, name)

    def reconstruct(self, rt: Residual) -> Any:
        import functools

        return functools.partial(self.fn.reconstruct(rt), *(a.reconstruct(rt) for a in self.args),
                                 **{k: v.reconstruct(rt) for k, v in self.keywords.items()})

    def __repr__(self) -> str:
        return f"FunctoolsPartialVariable({self.fn!r})"

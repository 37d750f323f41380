"""Trackers for the odds and ends a frame touches: bound methods, Python modules,
builtin and torch classes, ``super()``.

Input: values met through LOAD_ATTR / LOAD_GLOBAL / arguments. Output:
attribute lookups resolved at trace time (``torch.nn.functional.relu``,
``math.pi``), method calls forwarded to their receiver, classes used as
values (``isinstance(x, torch.Tensor)``, ``torch.Size((2, 3))``).
Chapter: book/docs/dynamo.md ("Variables").
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from ..exc import UserErrorInTrace, unimplemented
from ..guards import python_path
from .base import KnownValueVariable, VariableTracker

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslator


@dataclasses.dataclass(frozen=True, eq=False)
class MethodVariable(VariableTracker):
    """``obj.name`` where the attribute is a method; calling it is ``obj.call_method``.

    LOAD_ATTR with the method bit (3.12+) and LOAD_METHOD (3.11) produce this.
    """

    obj: VariableTracker
    name: str

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)

    def reconstruct(self, rt: Any) -> Any:
        return getattr(self.obj.reconstruct(rt), self.name)

    def __repr__(self) -> str:
        return f"MethodVariable({self.obj!r}.{self.name})"


@dataclasses.dataclass(frozen=True, eq=False)
class PythonModuleVariable(VariableTracker):
    """A module such as ``torch`` or ``torch.nn.functional``: attributes resolve now."""

    value: types.ModuleType

    def python_type(self) -> type:
        return types.ModuleType

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .builder import wrap_static

        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            raise UserErrorInTrace(e) from e
        return wrap_static(attr)

    def reconstruct(self, rt: Any) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"PythonModuleVariable({self.value.__name__})"


# Classes whose construction from constants can be folded (torch.Size((2, 3))); the numeric
# limits of a dtype (``torch.finfo(x.dtype).min``, which attention masks are built from) too:
# a tensor's dtype is guarded, so the limits are constants of the graph.
_FOLDABLE_CLASSES = (torch.Size, torch.device, torch.finfo, torch.iinfo)


# [Note: a method called through its class]
# ``nn.LayerNorm.forward(self, x)`` calls a method through its class: SqueezeBERT's
# LayerNorm subclass does, to reach the parent's forward, in every block. The class is a
# torch class, a ``TypeVariable``, which knew only its names, so each call broke the graph
# (13 graphs for a two-layer SqueezeBERT). A plain Python function defined on the class, or a
# static method, is now the function itself, inlined with whatever arguments the call passes,
# as eager calls it. A method written in C (``torch.Tensor.add``) is not a Python function and
# still breaks.
def _python_function_of(cls: type, name: str) -> types.FunctionType | None:
    """The Python function ``cls.name`` is (found along the MRO, unbound), or None."""
    try:
        attr = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    if isinstance(attr, staticmethod):
        attr = attr.__func__
    return attr if isinstance(attr, types.FunctionType) else None


@dataclasses.dataclass(frozen=True, eq=False)
class TypeVariable(KnownValueVariable):
    """A class used as a value: ``isinstance(x, torch.Tensor)``, ``torch.Size(...)``."""

    value: type

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        """A builtin or torch class's names (``obj.__class__.__name__``, which torchvision's
        ``_log_api_usage_once`` asks of a function): fixed for the class the trace saw."""
        from .constant import ConstantVariable

        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(self.value, name))
        function = _python_function_of(self.value, name)
        if function is not None:  # [Note: a method called through its class]
            from .functions import UserFunctionVariable

            return UserFunctionVariable(function)
        return super().var_getattr(tx, name)

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        from .constant import fold

        constant_args = all(a.is_python_constant() for a in [*args, *kwargs.values()])
        if self.value in _FOLDABLE_CLASSES and constant_args:
            values = [a.as_python_constant() for a in args]
            named = {k: v.as_python_constant() for k, v in kwargs.items()}
            return fold(self.value, *values, **named)
        if isinstance(self.value, type) and issubclass(self.value, torch.nn.Module):
            # torch's own modules too (CANINE's nn.MaxPool1d(4, 4) in its forward)
            from .user_defined import _module_made_in_forward  # [Note: a module made ...]

            return _module_made_in_forward(self.value, args, kwargs)
        unimplemented(f"constructing a {self.value.__qualname__} object")

    def reconstruct(self, rt: Any) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"TypeVariable({self.value.__qualname__})"


@dataclasses.dataclass(frozen=True, eq=False)
class SuperVariable(VariableTracker):
    """``super()`` inside a method: attribute lookup starts after ``cls`` in the MRO."""

    cls: type
    obj: VariableTracker

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .functions import UserMethodVariable

        mro = self.obj.python_type().__mro__
        if self.cls not in mro:
            unimplemented("super() outside a traced object's method")
        for klass in mro[mro.index(self.cls) + 1:]:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                if attr is torch.nn.Module.__call__ and hasattr(self.obj, "call_forward"):
                    # [Note: a module that overrides __call__]: nn.Module's own call
                    return ModuleCallVariable(self.obj)
                if isinstance(attr, types.FunctionType):
                    return UserMethodVariable(attr, self.obj)
                if attr is object.__init__:
                    return NoOpVariable()
                if klass.__module__ == "builtins" and name in READING_METHODS and \
                        self.obj.source is not None:
                    return ReadingMethodVariable(klass, name, self.obj)
                break
        unimplemented(f"super().{name}")


# [Note: a builtin base's reading methods]
# A subclass of dict that overrides ``get`` and calls ``super().get(key)`` (HuggingFace
# keeps a registry that way) reaches ``dict.get``, a C method we cannot trace into. When
# the object exists outside the frame and the method only reads (``get``, ``[key]``,
# ``in``, ``len``, ``keys``, ``values``, ``items``) with constant arguments, we call it for
# real at trace time and treat the answer as read from the source ``dict.get(obj, key)``: a
# guard re-reads it at every call (a constant by value, a dict by its keys), so a registry
# changed later recompiles. ``keys()`` and the others answer a list, read from
# ``list(dict.keys(obj))``: ``ModelOutput.to_tuple`` is ``tuple(self[k] for k in
# self.keys())``, which ``outputs[1]`` calls on a model's output handed across a graph break
# (ProphetNet, Hubert, SpeechT5: a break each).
READING_METHODS = frozenset(
    {"get", "__getitem__", "__contains__", "__len__", "keys", "values", "items"})
_LISTED = frozenset({"keys", "values", "items"})  # views, answered as lists


@dataclasses.dataclass(frozen=True, eq=False)
class ReadingMethodVariable(VariableTracker):
    """``super().get`` and friends on an object of a builtin base class: see [Note: a
    builtin base's reading methods]."""

    cls: type
    name: str
    obj: VariableTracker

    def call_function(self, tx, args, kwargs):
        from .builder import wrap

        if kwargs or not all(a.is_python_constant() for a in args):
            unimplemented(f"super().{self.name}() with arguments that are not constants")
        values = [a.as_python_constant() for a in args]
        real = getattr(self.obj, "value", None)
        if not isinstance(real, self.cls):
            unimplemented(f"super().{self.name}() on {self.obj}")
        try:
            result = getattr(self.cls, self.name)(real, *values)
        except (KeyError, TypeError) as e:
            raise UserErrorInTrace(e) from e
        owner = self.cls.__name__ if self.cls.__module__ == "builtins" else python_path(self.cls)
        source = f"{owner}.{self.name}({self.obj.source}, {', '.join(map(repr, values))})"
        if self.name in _LISTED:
            result, source = list(result), f"list({owner}.{self.name}({self.obj.source}))"
        return wrap(tx.output, result, source)

    def call_method(self, tx, name, args, kwargs):
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)


@dataclasses.dataclass(frozen=True, eq=False)
class ModuleCallVariable(VariableTracker):
    """``super().__call__`` in a module class that overrides ``__call__``."""

    module: VariableTracker

    def call_function(self, tx, args, kwargs):
        return self.module.call_forward(tx, args, kwargs)


@dataclasses.dataclass(frozen=True, eq=False)
class NoOpVariable(VariableTracker):
    """A call that does nothing (``super().__init__()`` reaching ``object.__init__``)."""

    def call_function(self, tx, args, kwargs):
        from .constant import ConstantVariable

        return ConstantVariable(None)


# [Note: environment variables]
# Libraries read switches from the environment inside a forward: HuggingFace's attention asks
# ``os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA", "0")`` in every layer. ``os.environ`` is a
# mapping whose values can change between calls, so a read is done now, with a constant key,
# and guarded: ``___environ.get('KEY', '0') == '0'`` (``___environ`` is ``os.environ``, bound
# in the guard check's namespace). Setting a variable between calls fails the guard and
# recompiles, as any other value the trace relied on would. A write to the environment still
# breaks the graph.
@dataclasses.dataclass(frozen=True, eq=False)
class EnvironVariable(VariableTracker):
    """``os.environ``: reads with constant keys, done at trace time and guarded."""

    value: Any

    def python_type(self) -> type:
        return type(self.value)

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        if name in ("get", "__getitem__", "__contains__"):
            return MethodVariable(self, name)
        unimplemented(f"os.environ.{name}")

    def call_method(self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
                    kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from ..guards import Guard, literal
        from .constant import ConstantVariable

        if kwargs or not args or not all(a.is_python_constant() for a in args):
            unimplemented(f"os.environ.{name}() with arguments not known at trace time")
        values = [a.as_python_constant() for a in args]
        key = literal(values[0])
        if name == "__contains__" and len(values) == 1:
            found = values[0] in self.value
            tx.output.add_guards([Guard("os.environ", "ENV",
                                        f"({key} in ___environ) == {found}")])
            return ConstantVariable(found)
        if name in ("get", "__getitem__") and len(values) <= (2 if name == "get" else 1):
            if name == "__getitem__" and values[0] not in self.value:  # (an except may go on)
                tx.output.add_guards([Guard("os.environ", "ENV", f"{key} not in ___environ")])
                raise UserErrorInTrace(KeyError(values[0]))
            value = self.value.get(*values)
            read = f"___environ.get({', '.join(literal(v) for v in values)})"
            tx.output.add_guards([Guard("os.environ", "ENV", f"{read} == {literal(value)}")])
            return ConstantVariable(value)
        unimplemented(f"os.environ.{name}()")

    def reconstruct(self, rt: Any) -> Any:
        return self.value

    def __repr__(self) -> str:
        return "EnvironVariable()"

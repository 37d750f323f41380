"""User-defined classes and objects: attribute reads and writes, methods, construction.

Input: an object or class that is not a tensor, a container, a module or a
function (a config dataclass, a helper object, a namedtuple class). Output:
attributes resolved at trace time like Python does (instance ``__dict__``
first, then the class: methods become bound methods that inline,
properties inline their getter), each guarded through its source; attribute
writes recorded as side effects (side_effects.py); instances of plain
classes created during the trace, rebuilt after the graph if they escape.
Chapter: book/docs/dynamo.md ("Variables", "Side effects").
"""

from __future__ import annotations

import abc
import collections
import collections.abc
import contextlib
import dataclasses
import functools
import inspect
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..exc import UserErrorInTrace, unimplemented
from .base import MutableLocal, VariableTracker
from .constant import ConstantVariable, fold, numpy_scalar_type

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator


def class_attribute_or_error(tx: InstructionTranslator, obj_vt: VariableTracker, cls: type,
                             name: str) -> VariableTracker:
    """``class_attribute``, or the AttributeError eager raises for an object the trace made
    (its attributes are known, so their absence needs no guard)."""
    found = class_attribute(tx, obj_vt, cls, name)
    if found is None:
        msg = f"{cls.__name__!r} object has no attribute {name!r}"
        raise UserErrorInTrace(AttributeError(msg))
    return found


def class_attribute(tx: InstructionTranslator, obj_vt: VariableTracker, cls: type,
                    name: str) -> VariableTracker | None:
    """``obj.name`` found on the class: a bound method, a property, or a plain value."""
    from .builder import wrap_static
    from .functions import UserFunctionVariable, UserMethodVariable, inline_call

    if name == "__class__" and not isinstance(obj_vt, UserDefinedClassVariable):  # guarded type
        return wrap_static(cls, strict=False) or UserDefinedClassVariable(cls)
    try:
        attr = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    if isinstance(attr, types.FunctionType):
        return UserMethodVariable(attr, obj_vt)
    if isinstance(attr, staticmethod):
        return UserFunctionVariable(attr.__func__)
    if isinstance(attr, classmethod):
        return UserMethodVariable(attr.__func__, UserDefinedClassVariable(cls))
    if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
        code = attr.fget.__code__  # a getter may be a closure (``torch.nn.utils.parametrize``
        cells = dict(zip(code.co_freevars, attr.fget.__closure__ or ()))  # makes one per name)
        return inline_call(tx, code, attr.fget.__globals__,
                           {code.co_varnames[0]: obj_vt}, cells, None)
    if hasattr(attr, "__get__") and not isinstance(attr, (int, float, str, tuple)):
        unimplemented(f"the descriptor {cls.__qualname__}.{name} ({type(attr).__name__})")
    static = wrap_static(attr, strict=obj_vt.source is None)
    if static is None:  # a class-level dict or object: read through the instance, guarded
        from .builder import wrap

        return wrap(tx.output, attr, f"{obj_vt.source}.{name}")
    return static


@dataclasses.dataclass(frozen=True, eq=False)
class UserDefinedClassVariable(VariableTracker):
    """A user class as a value: ``isinstance(x, MyConfig)``, ``Point(1, 2)``."""

    value: type

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def python_type(self) -> type:
        return type(self.value)

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .builder import wrap_static

        if name == "apply" and issubclass(self.value, torch.autograd.Function):
            from .torch import TorchFunctionVariable

            return TorchFunctionVariable(function_apply(self.value))
        try:
            attr = inspect.getattr_static(self.value, name)
        except AttributeError as e:
            raise UserErrorInTrace(e) from e
        if isinstance(attr, (staticmethod, classmethod)):
            return class_attribute(tx, self, self.value, name)
        return wrap_static(getattr(self.value, name), strict=True)

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        from .lists import NamedTupleVariable

        cls = self.value
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            fields = cls._fields
            defaults = getattr(cls, "_field_defaults", {})
            items = _bind_fields(fields, defaults, args, kwargs)
            return NamedTupleVariable(tuple(items), cls=cls)
        if is_model_output(cls):  # [Note: model outputs]
            return ModelOutputVariable.build(cls, args, kwargs)
        if cls is contextlib.nullcontext:  # a `with` that does nothing (its metaclass: ABCMeta)
            from .ctx_manager import NullContextVariable

            values = [*args, *kwargs.values()]
            if len(values) > 1 or set(kwargs) - {"enter_result"}:
                raise UserErrorInTrace(TypeError("nullcontext() takes one optional argument"))
            return NullContextVariable(values[0] if values else ConstantVariable(None))
        if numpy_scalar_type(cls) and all(a.is_python_constant() for a in args) \
                and not kwargs:  # np.int64(3): [Note: numpy scalars are constants]
            return fold(cls, *[a.as_python_constant() for a in args])
        if issubclass(cls, torch.nn.Module):
            return _module_made_in_forward(cls, args, kwargs)
        if cls.__new__ is not object.__new__ or type(cls) not in (type, abc.ABCMeta):
            unimplemented(f"constructing a {cls.__qualname__} (custom __new__ or metaclass)")
        if getattr(cls, "__abstractmethods__", None):  # as Python refuses it (ABCMeta)
            raise UserErrorInTrace(TypeError(
                f"Can't instantiate abstract class {cls.__name__} with abstract methods "
                f"{', '.join(sorted(cls.__abstractmethods__))}"))
        if inspect.getattr_static(cls, "__setattr__") is not object.__setattr__:
            unimplemented(f"constructing a {cls.__qualname__} (custom __setattr__)")
        obj = NewObjectVariable(cls, {})
        init = inspect.getattr_static(cls, "__init__")
        if init is not object.__init__:
            from .functions import UserMethodVariable

            tx.push(obj)  # keep it reachable so replace_all updates it
            UserMethodVariable(init, obj).call_function(tx, args, kwargs)
            obj = tx.pop()
        elif args or kwargs:
            raise UserErrorInTrace(TypeError(f"{cls.__name__}() takes no arguments"))
        return obj

    def reconstruct(self, rt: Residual) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"UserDefinedClassVariable({self.value.__qualname__})"


# --8<-- [start:custom-function]
# [Note: a custom autograd.Function]
# ``GeLUFunction.apply(x)`` (BLOOM's GELU, with a hand-written backward) reached
# ``Function.apply``'s Python and then autograd's C ``apply``, which no trace can enter: a
# graph break in every block (six graphs for two layers). The call is one op of the graph
# instead, calling the class's ``apply`` as eager does. Dynamo learns its result by running it
# on the example values; aotautograd traces *through* it, since it runs the graph on its own
# tensors under autograd: the forward's ops are recorded, autograd keeps the Function's node,
# and when the joint graph asks for gradients the engine calls the user's ``backward``, whose
# ops are recorded in turn. So the compiled backward is the user's, fused like any other.
# The target is a small function per class: FX prints a call to anything whose module is
# torch's (``Function.apply`` is defined there) as an import path, which a bound class method
# is not.
@functools.cache
def function_apply(cls: type) -> Callable[..., Any]:
    """A graph target that calls ``cls.apply`` ([Note: a custom autograd.Function])."""
    def apply(*args: Any, **kwargs: Any) -> Any:
        return cls.apply(*args, **kwargs)
    apply.__name__ = apply.__qualname__ = f"{cls.__name__}_apply"
    apply.__module__ = cls.__module__
    return apply
# --8<-- [end:custom-function]


# --8<-- [start:model-outputs]
# [Note: model outputs]
# HuggingFace models return a ``ModelOutput``: a dataclass that is also an ordered dict, whose
# ``__post_init__`` files every field that is not None as a dict entry, so that ``out.logits``,
# ``out["logits"]`` and ``out[0]`` (the first field that is not None) all work. Tracing its
# construction line by line meets a metaclass, ``dataclasses.fields``, a ``__setattr__``
# override and ``super().__setitem__``; every model returns one from every submodule that
# has outputs, so each was a graph break. Instead, constructing a class of that shape (a
# dataclass, a dict, with a ``to_tuple`` method) makes a ``ModelOutputVariable``: the field
# values as traced, read by attribute, by key, by position, as keys/values/items. The object
# itself is built only when it leaves the graph (returned, or live at a break), by calling
# the class with the real values: its own constructor runs, as in eager. The reads assume
# the entries are the fields that are not None, in field order; ModelOutput makes an
# exception when the first field is the only one set and is not a tensor (it may be an
# iterator of key/value pairs), and that case is left to eager (a graph break).
def is_model_output(cls: type) -> bool:
    """A dataclass that is a dict and has ``to_tuple``: the shape of a ``ModelOutput``."""
    return (dataclasses.is_dataclass(cls) and issubclass(cls, dict)
            and callable(getattr(cls, "to_tuple", None)))


@dataclasses.dataclass(frozen=True, eq=False)
class ModelOutputVariable(VariableTracker):
    """A ``ModelOutput`` made during the trace: ``fields`` maps every field to its value
    (None included); see [Note: model outputs]."""

    cls: type
    fields: dict[str, VariableTracker]

    def __post_init__(self) -> None:
        if self.mutable_local is None:  # a new object: writes to it replace the tracker
            object.__setattr__(self, "mutable_local", MutableLocal())

    @staticmethod
    def build(cls: type, args: list[VariableTracker],
              kwargs: dict[str, VariableTracker]) -> ModelOutputVariable:
        declared = [f for f in dataclasses.fields(cls) if f.init]
        names = [f.name for f in declared]
        defaults = {f.name: f.default for f in declared
                    if f.default is not dataclasses.MISSING}
        if any(f.default_factory is not dataclasses.MISSING for f in declared):
            unimplemented(f"constructing a {cls.__qualname__} (a field with a default factory)")
        unknown = set(kwargs) - set(names)
        if unknown or len(args) > len(names):
            raise UserErrorInTrace(TypeError(f"{cls.__name__}() got unexpected arguments"))
        values = dict(zip(names, _bind_fields(names, defaults, args, kwargs)))
        first, *rest = values.values()
        if not _is_none(first) and all(_is_none(v) for v in rest) and \
                not issubclass(first.python_type(), torch.Tensor):
            unimplemented(f"constructing a {cls.__qualname__} from one non-tensor field")
        return ModelOutputVariable(cls, values)

    def python_type(self) -> type:
        return self.cls

    def entries(self) -> dict[str, VariableTracker]:
        return {k: v for k, v in self.fields.items() if not _is_none(v)}

    def as_tuple(self) -> VariableTracker:
        from .lists import TupleVariable

        return TupleVariable(tuple(self.entries().values()))

    def truth(self, tx: InstructionTranslator) -> bool:
        return bool(self.entries())

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        return [ConstantVariable(k) for k in self.entries()]  # iterating a dict: its keys

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .misc import MethodVariable

        if name in self.fields:
            return self.fields[name]
        if name in _MODEL_OUTPUT_METHODS:
            return MethodVariable(self, name)
        return class_attribute_or_error(tx, self, self.cls, name)

    def store_attr(self, tx: InstructionTranslator, name: str, value: VariableTracker) -> None:
        """``out.pooler_output = proj(...)`` (CLIP): a field's new value, which is also its
        entry (``ModelOutput.__setattr__`` writes both). Only a field that is set already:
        a new entry would go after the others, out of the field order ``entries`` assumes."""
        if name not in self.fields:
            unimplemented(f"setting attribute .{name} of a {self.cls.__qualname__}, "
                          "which is not one of its fields")
        if _is_none(value) or _is_none(self.fields[name]):
            # None keeps a stale entry; a new entry goes last, out of field order
            unimplemented(f"setting field .{name} of a {self.cls.__qualname__} that is None "
                          "or to None")
        tx.replace_all(self, self.clone(fields={**self.fields, name: value}))

    def call_method(self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
                    kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from .dicts import ConstDictVariable

        if name == "__setitem__" and len(args) == 2 and args[0].is_python_constant() and \
                args[0].as_python_constant() in self.fields:
            self.store_attr(tx, args[0].as_python_constant(), args[1])
            return ConstantVariable(None)
        if name == "to_tuple" and not args and not kwargs:
            return self.as_tuple()
        if name == "__getitem__" and len(args) == 1 and args[0].is_python_constant():
            key = args[0].as_python_constant()
            if isinstance(key, str):
                if key not in self.entries():
                    raise UserErrorInTrace(KeyError(key))
                return self.entries()[key]
            return self.as_tuple().call_method(tx, name, args, kwargs)
        if name in _DICT_METHODS:
            return ConstDictVariable(self.entries()).call_method(tx, name, args, kwargs)
        unimplemented(f"method .{name}() of a {self.cls.__qualname__}")

    def reconstruct(self, rt: Residual) -> Any:
        return rt.memo(self, lambda: self.cls(**{k: v.reconstruct(rt)
                                                 for k, v in self.fields.items()}))

    def __repr__(self) -> str:
        return f"ModelOutputVariable({self.cls.__qualname__}, {list(self.entries())})"


_DICT_METHODS = ("keys", "values", "items", "get", "__contains__", "__len__")
_MODEL_OUTPUT_METHODS = frozenset({*_DICT_METHODS, "to_tuple", "__getitem__"})


def _is_none(value: VariableTracker) -> bool:
    return isinstance(value, ConstantVariable) and value.value is None
# --8<-- [end:model-outputs]


def _bind_fields(fields, defaults, args, kwargs):
    items = list(args)
    for name in fields[len(args):]:
        if name in kwargs:
            items.append(kwargs[name])
        elif name in defaults:
            items.append(ConstantVariable(defaults[name]))
        else:
            raise UserErrorInTrace(TypeError(f"missing argument {name!r}"))
    return items


def _dict_reading_method(obj: UserObjectVariable, cls: type, name: str) -> Any:
    """``self.keys()`` in a dict subclass's own Python method (HuggingFace's ``ModelOutput``
    builds ``to_tuple`` from it): the C method of ``dict`` or ``OrderedDict``, read for real
    and guarded ([Note: a builtin base's reading methods]); None for anything else."""
    from .misc import READING_METHODS, ReadingMethodVariable

    owner = getattr(inspect.getattr_static(cls, name, None), "__objclass__", None)
    if obj.source is None or name not in READING_METHODS or \
            owner not in (dict, collections.OrderedDict):
        return None
    return ReadingMethodVariable(owner, name, obj)


# --8<-- [start:module-in-forward]
# [Note: a module made inside a forward]
# transformers looks activations up in a table that builds a new module at every lookup
# (``ACT2FN["silu"]`` is ``SiLUActivation()``), and Mamba does the lookup inside its forward:
# a graph break each time, 13 in a small model. A module whose constructor takes only
# constants and which ends up with no parameters, buffers or submodules holding them is
# stateless: the object can be made now, once, by running its constructor for real, and
# each call traces its forward as for any module. (Every call of eager's makes a new one;
# only the objects' identities differ.) A module with parameters draws them at random and
# holds state, so making one inside a forward still breaks the graph. torch's own module
# classes (CANINE's ``nn.MaxPool1d(4, 4)``) are made the same way (``TypeVariable``).
def _module_made_in_forward(cls: type, args: list, kwargs: dict) -> VariableTracker:
    """``cls(*args, **kwargs)`` made at trace time when stateless ([Note: a module made
    inside a forward]); a graph break otherwise."""
    from .nn_module import NNModuleVariable

    values = [*args, *kwargs.values()]
    if not all(v.is_python_constant() for v in values):
        unimplemented(f"constructing a {cls.__qualname__} from traced values")
    try:
        with torch.random.fork_rng(devices=[]):  # (a stateless module draws nothing; be sure)
            module = cls(*[a.as_python_constant() for a in args],
                         **{k: v.as_python_constant() for k, v in kwargs.items()})
    except Exception as e:  # noqa: BLE001 - the user's own constructor error
        raise UserErrorInTrace(e) from e
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        unimplemented(f"constructing a {cls.__qualname__}, which holds parameters or buffers")
    return NNModuleVariable(module)
# --8<-- [end:module-in-forward]


# [Note: the truth of an object]
# ``if past_key_values:`` on transformers' cache object (Whisper's decoder layers ask it) was
# a graph break: a user's object has no constant truth. Python's rule is short: the class's
# ``__bool__``, else its ``__len__`` compared with 0, else true. The class is fixed (guarded
# for an object from outside the frame, known for one made in it), so which rule applies is
# too, and the method is traced like any other; only an answer the trace cannot know (a
# tensor's) still breaks the graph.
def object_truth(tx: InstructionTranslator, obj: VariableTracker, cls: type) -> bool:
    """``bool(obj)`` for an instance of the plain class ``cls`` ([Note: the truth of an
    object])."""
    for name in ("__bool__", "__len__"):
        if inspect.getattr_static(cls, name, None) is None:
            continue
        answer = inline_class_method(tx, obj, cls, name, [], {})
        if answer is None:
            unimplemented(f"truth value of a {cls.__qualname__} ({name} is not Python)")
        if not answer.is_python_constant():
            unimplemented(f"truth value of a {cls.__qualname__} ({name} gave {answer})")
        return bool(answer.as_python_constant())
    return True


def inline_class_method(tx: InstructionTranslator, obj: VariableTracker, cls: type, name: str,
                        args: list, kwargs: dict) -> VariableTracker | None:
    """``obj.name(*args)`` traced through the class's own Python method; None when the class
    has no such Python function."""
    from .functions import UserMethodVariable

    method = inspect.getattr_static(cls, name, None)
    if not isinstance(method, types.FunctionType):
        return None
    return UserMethodVariable(method, obj).call_function(tx, args, kwargs)


@dataclasses.dataclass(frozen=True, eq=False)
class UserObjectVariable(VariableTracker):
    """An object that exists outside the frame (``self.config``, a helper object)."""

    value: Any

    def python_type(self) -> type:
        return type(self.value)

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .builder import wrap_attribute

        pending = tx.output.side_effects.pending_attr(self.value, name)
        if pending is not None:
            return pending
        cls = type(self.value)
        reading = _dict_reading_method(self, cls, name)  # [Note: a builtin base's ...]
        if reading is not None:
            return reading
        if inspect.getattr_static(cls, "__getattribute__") is not object.__getattribute__:
            return self._custom_getattr(tx, name)
        instance_dict = getattr(self.value, "__dict__", {})
        if name in instance_dict:
            return wrap_attribute(tx, self, self.value, name)
        found = class_attribute(tx, self, cls, name)
        if found is not None:
            return found
        if hasattr(cls, "__getattr__"):
            return self._custom_getattr(tx, name)
        self.guard_missing(tx, name)
        raise UserErrorInTrace(AttributeError(f"{cls.__name__!r} object has no attribute {name!r}"))

    def guard_missing(self, tx: InstructionTranslator, name: str) -> None:
        """The trace goes on without ``obj.name`` (``hasattr``, ``getattr`` with a default,
        an ``except AttributeError``): a later call that finds it must not reuse the graph."""
        from ..guards import Guard

        if self.source is not None:
            tx.output.add_guards([Guard(self.source, "HASATTR",
                                        f"not hasattr({self.source}, {name!r})")])

    # [Note: custom attribute access]
    # A class may customise attribute lookup: ``__getattribute__`` (HuggingFace's configs map
    # ``config.hidden_size`` to ``n_embd`` that way) or ``__getattr__`` for names not found
    # the usual way. The object exists outside the frame, so we ask it, as the guard will:
    # the real ``getattr`` at trace time, its result wrapped under the source
    # ``obj.name``, which guards it (a constant by value, an object by identity, a tensor by
    # its metadata) through the same customised lookup at every call. A method the lookup
    # hands back unchanged (a function of the class bound to this object) is still traced
    # as the class's method. A lookup with side effects would run once per guard check
    # instead of once per call; configs and namespaces do not have any.
    def _custom_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .builder import wrap_attribute

        cls = type(self.value)
        try:
            value = getattr(self.value, name)
        except AttributeError as e:
            self.guard_missing(tx, name)
            raise UserErrorInTrace(e) from e
        if isinstance(value, types.MethodType) and value.__self__ is self.value:
            found = class_attribute(tx, self, cls, name)
            if found is not None:
                return found
        return wrap_attribute(tx, self, self.value, name)

    def store_attr(self, tx: InstructionTranslator, name: str, value: VariableTracker) -> None:
        tx.output.side_effects.store_attr(self, name, value)

    def truth(self, tx: InstructionTranslator) -> bool:
        return object_truth(tx, self, type(self.value))

    # [Note: iterating a Sequence]
    # A class that subclasses ``collections.abc.Sequence`` and writes only ``__len__`` and
    # ``__getitem__`` is iterated by the mixin's ``__iter__``, a generator that indexes
    # ``self[0]``, ``self[1]``, ... until ``IndexError``; the Sequence contract says that is
    # ``len(self)`` items. So the loop is unrolled over ``self[i]`` for ``i`` below
    # ``len(self)``, both methods traced (their reads are guarded as any). transformers 5.24
    # builds its ``DynamicCache`` by iterating such a per-layer view of the config (Gemma-2,
    # Phi-3, Qwen2-MoE, GPT-Neo); the cache's layer objects it then constructs still break
    # the graph there.
    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        cls = type(self.value)
        if (getattr(cls, "__iter__", None) is not collections.abc.Sequence.__iter__
                or not all(isinstance(inspect.getattr_static(cls, m, None), types.FunctionType)
                           for m in ("__len__", "__getitem__"))):
            return super().unpack(tx)
        length = self.call_method(tx, "__len__", [], {})
        if not (length.is_python_constant() and type(length.as_python_constant()) is int):
            unimplemented(f"iterating over a {cls.__qualname__} of unknown length")
        return [self.call_method(tx, "__getitem__", [ConstantVariable(i)], {})
                for i in range(length.as_python_constant())]

    def call_method(self, tx, name, args, kwargs):
        """``obj[key]``, ``len(obj)``, ``key in obj``...: the class's own Python method,
        inlined (a mapping class written in Python, like HuggingFace's interfaces)."""
        inlined = inline_class_method(tx, self, type(self.value), name, args, kwargs)
        if inlined is not None:
            return inlined
        reading = _dict_reading_method(self, type(self.value), name)  # ``self[k]``
        if reading is not None:
            return reading.call_function(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    # [Note: a function behind functools.lru_cache]
    # Libraries memoize their feature checks (transformers' ``is_torch_flex_attn_available``
    # and friends) with ``functools.lru_cache``, whose wrapper is a C object the trace cannot
    # look into: every call of one broke the graph, 13 times in SpeechT5's forward. Called
    # with constants, from a function the frame can name, the wrapper is simply asked, now,
    # and a constant answer becomes a constant of the trace, guarded by asking again at
    # every call (a cache hit: ``G['is_torch_fx_available']() == False``), so a cache
    # cleared and answering otherwise recompiles. Otherwise the wrapper's plain function,
    # ``__wrapped__``, is traced, with the guards its own reads need; the cache is then
    # neither read nor filled by the compiled code, which only changes a result's identity
    # or side effects the function has at its first call (PyTorch's dynamo traces through
    # it too).
    def _cached_answer(self, tx, args, kwargs) -> VariableTracker | None:
        """The memoized function's constant answer for constant arguments, guarded; None
        when it has to be traced ([Note: a function behind functools.lru_cache])."""
        from ..guards import make_constant_guards
        from .constant import is_literal

        if self.source is None or kwargs or not all(
                a.is_python_constant() and type(a.as_python_constant()) in (int, str, bool,
                                                                          float, type(None))
                for a in args):
            return None
        values = [a.as_python_constant() for a in args]
        try:
            answer = self.value(*values)
        except Exception:  # noqa: BLE001 - trace it instead, and let the trace say what
            return None
        if not is_literal(answer) or type(answer) in (tuple, frozenset):
            return None
        call = f"{self.source}({', '.join(map(repr, values))})"
        tx.output.add_guards(make_constant_guards(call, answer))
        return ConstantVariable(answer)

    def call_function(self, tx, args, kwargs):
        if isinstance(self.value, functools._lru_cache_wrapper) and isinstance(
                getattr(self.value, "__wrapped__", None), types.FunctionType):
            # [Note: a function behind functools.lru_cache]: traced through, as PyTorch's
            # dynamo does; the cache only saves time, which a compiled graph does not need
            from .builder import wrap
            from .functions import UserFunctionVariable

            answered = self._cached_answer(tx, args, kwargs)
            if answered is not None:
                return answered
            wrapped = self.value.__wrapped__
            fn = (wrap(tx.output, wrapped, f"{self.source}.__wrapped__")
                  if self.source is not None else UserFunctionVariable(wrapped))
            return fn.call_function(tx, args, kwargs)
        call = inspect.getattr_static(type(self.value), "__call__", None)
        if not isinstance(call, types.FunctionType):
            unimplemented(f"calling a {type(self.value).__qualname__} object")
        from .functions import UserMethodVariable

        return UserMethodVariable(call, self).call_function(tx, args, kwargs)

    def reconstruct(self, rt: Residual) -> Any:
        if self.source is not None:
            return rt.eval(self.source)
        return self.value

    def __repr__(self) -> str:
        return f"UserObjectVariable({type(self.value).__qualname__})"


@dataclasses.dataclass(frozen=True, eq=False)
class NewObjectVariable(VariableTracker):
    """An instance of a plain class created during the trace; ``attrs`` is its __dict__."""

    cls: type
    attrs: dict[str, VariableTracker]

    def __post_init__(self) -> None:
        if self.mutable_local is None:
            object.__setattr__(self, "mutable_local", MutableLocal())

    def python_type(self) -> type:
        return self.cls

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        if name in self.attrs:
            return self.attrs[name]
        return class_attribute_or_error(tx, self, self.cls, name)

    def store_attr(self, tx: InstructionTranslator, name: str, value: VariableTracker) -> None:
        tx.replace_all(self, self.clone(attrs={**self.attrs, name: value}))

    def truth(self, tx: InstructionTranslator) -> bool:
        return object_truth(tx, self, self.cls)

    def call_method(self, tx, name, args, kwargs):
        """``len(obj)``, ``obj[k]``, ``k in obj``: the class's own Python method, inlined."""
        inlined = inline_class_method(tx, self, self.cls, name, args, kwargs)
        if inlined is not None:
            return inlined
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, rt: Residual) -> Any:
        def build() -> Any:
            obj = object.__new__(self.cls)
            for name, value in self.attrs.items():
                object.__setattr__(obj, name, value.reconstruct(rt))
            return obj

        return rt.memo(self, build)

    def __repr__(self) -> str:
        return f"NewObjectVariable({self.cls.__qualname__})"

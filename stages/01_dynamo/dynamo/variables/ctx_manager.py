"""Context managers a ``with`` statement may enter inside a graph: grad mode and autocast
(and ``contextlib.nullcontext``, which does nothing).

Input: ``torch.no_grad()`` / ``torch.enable_grad()`` / ``torch.set_grad_enabled(b)`` (or
the no_grad object ``@torch.no_grad()`` holds), ``contextlib.nullcontext(value)``,
``torch.autocast(device_type, dtype=..., enabled=...)`` (also ``torch.amp.autocast`` and
``torch.cpu.amp.autocast``, or an autocast object made outside the frame, as the
``@torch.autocast(...)`` decorator holds one), met by BEFORE_WITH. Output: graph nodes
that switch the state at entry and switch it back at exit
(``torch._C._set_grad_enabled``; ``torch.amp._enter_autocast`` /
``torch.amp._exit_autocast``), with the real state switched while tracing so that the
example values inside the block come out as they will at run time.
Chapter: book/docs/dynamo.md ("Autocast").

# [Note: autocast in the graph]
# Autocast is a mode, not an op: inside ``with torch.autocast("cpu", torch.bfloat16)``
# a matmul first casts its float32 inputs to bfloat16, so its result is bfloat16. The
# casts happen at dispatch time, below anything a bytecode tracer sees. So, as
# PyTorch's Dynamo does, we do not try to spell the casts out: we record *entering*
# autocast as a node, ``_enter_autocast('cpu', torch.bfloat16, True, None)``, which
# returns the mode object, and *leaving* it as ``_exit_autocast(that object)``. The
# ops in between are recorded as written. Whoever runs the graph (``gm.forward``) or
# traces it further (aotautograd, under its dispatch mode) executes the enter node for
# real and therefore meets the same casts eager PyTorch would; aotautograd writes
# them into its graph as explicit dtype conversions. Both functions are plain
# callables of ``torch.amp``, so a printed graph reads like the user's ``with``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import TYPE_CHECKING, Any

import torch

from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator


@dataclasses.dataclass(frozen=True, eq=False)
class GradModeVariable(VariableTracker):
    """``torch.no_grad()`` & co. as a context manager: ``enter`` / ``exit`` switch grad mode."""

    mode: bool
    entered: bool = False  # set_grad_enabled(b) switches on the call, not on __enter__
    previous: bool = True  # the mode before the call, when ``entered``

    def enter(self, tx: InstructionTranslator) -> VariableTracker:
        if self.entered:
            return WithExitVariable(self.previous)
        previous = torch.is_grad_enabled()
        tx.enter_grad_mode(self.mode)
        return WithExitVariable(previous)

    def target(self) -> VariableTracker:
        """What ``with ... as name`` binds: grad mode's ``__enter__`` returns None."""
        return ConstantVariable(None)

    def var_getattr(self, tx, name):
        if name == "__class__" and not self.entered:
            # ``@torch.no_grad()`` keeps one no_grad object and, at every call of the
            # function it decorates, enters a fresh one: ``self.__class__()``
            # (torch.utils._contextlib); HuggingFace's rotary embeddings are decorated so
            from .torch import TorchFunctionVariable

            return TorchFunctionVariable(torch.enable_grad if self.mode else torch.no_grad)
        unimplemented(f"attribute .{name} of a grad-mode context manager")


@dataclasses.dataclass(frozen=True, eq=False)
class WithExitVariable(VariableTracker):
    """The ``__exit__`` that BEFORE_WITH leaves on the stack: restores the previous mode."""

    previous: bool

    def call_function(self, tx, args, kwargs):
        tx.enter_grad_mode(self.previous)
        return ConstantVariable(None)


@dataclasses.dataclass(frozen=True, eq=False)
class NullContextVariable(VariableTracker):
    """``contextlib.nullcontext(value)``: entering and leaving do nothing; ``as`` binds
    ``value``. Libraries return one where a real context manager is not needed (HuggingFace's
    ``maybe_autocast(enabled=False)`` around the rotary embeddings' matmul)."""

    value: VariableTracker

    def enter(self, tx: InstructionTranslator) -> VariableTracker:
        return NullExitVariable()

    def target(self) -> VariableTracker:
        return self.value

    def reconstruct(self, rt: Any) -> Any:
        return contextlib.nullcontext(self.value.reconstruct(rt))


@dataclasses.dataclass(frozen=True, eq=False)
class NullExitVariable(VariableTracker):
    """The ``__exit__`` of a nullcontext: nothing to undo."""

    def call_function(self, tx, args, kwargs):
        return ConstantVariable(None)


@dataclasses.dataclass(frozen=True, eq=False)
class AutocastVariable(VariableTracker):
    """An autocast context manager, not yet entered. See [Note: autocast in the graph].

    The fields are the real ``torch.autocast`` object's, after its constructor has
    filled in defaults (``dtype=None`` means the device's autocast dtype) and
    checked them, so the graph's enter node states them all explicitly.
    """

    device_type: str
    dtype: torch.dtype
    enabled: bool
    cache_enabled: bool

    @staticmethod
    def from_object(manager: torch.amp.autocast, source: str | None = None
                    ) -> AutocastVariable:
        return AutocastVariable(manager.device, manager.fast_dtype, manager._enabled,
                                manager._cache_enabled, source=source)

    @staticmethod
    def create(cls: type, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
               ) -> AutocastVariable:
        """``torch.autocast(...)`` called in the traced code: build the real object now."""
        values = [*args, *kwargs.values()]
        if not all(v.is_python_constant() for v in values):
            unimplemented(f"{cls.__qualname__}() with arguments that are not constants")
        with warnings.catch_warnings():  # torch.cpu.amp.autocast's deprecation notice
            warnings.simplefilter("ignore", FutureWarning)
            manager = cls(*[a.as_python_constant() for a in args],
                          **{k: v.as_python_constant() for k, v in kwargs.items()})
        return AutocastVariable.from_object(manager)

    def enter(self, tx: InstructionTranslator) -> VariableTracker:
        """Record ``_enter_autocast(...)`` and enter the same mode for the example values."""
        state = (self.device_type, self.dtype, self.enabled, self.cache_enabled)
        proxy = tx.output.tracer.create_proxy("call_function", torch.amp._enter_autocast,
                                              state, {})
        tx.output.autocast_modes.append(torch.amp._enter_autocast(*state))
        return AutocastExitVariable(proxy)

    def target(self) -> VariableTracker:
        return self  # autocast's ``__enter__`` returns the manager

    def var_getattr(self, tx, name):
        unimplemented(f"attribute .{name} of an autocast context manager")

    def reconstruct(self, rt: Any) -> Any:
        if self.source is not None:
            return rt.eval(self.source)
        return torch.autocast(self.device_type, self.dtype, self.enabled, self.cache_enabled)

    def __repr__(self) -> str:
        return f"AutocastVariable({self.device_type!r}, {self.dtype}, enabled={self.enabled})"


@dataclasses.dataclass(frozen=True, eq=False)
class AutocastExitVariable(VariableTracker):
    """The ``__exit__`` of an entered autocast block: records ``_exit_autocast(mode)``."""

    enter_proxy: torch.fx.Proxy  # the enter node; its result is the mode to leave

    def call_function(self, tx, args, kwargs):
        tx.output.tracer.create_proxy("call_function", torch.amp._exit_autocast,
                                      (self.enter_proxy,), {})
        torch.amp._exit_autocast(tx.output.autocast_modes.pop())
        return ConstantVariable(None)

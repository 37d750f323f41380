"""SymNodeVariable: a size (or a number computed from sizes) that is symbolic in the graph,
and SliceVariable: a slice whose bounds are such sizes.

Input: the proxy and example value of a graph node whose example is a ``torch.SymInt`` (or
``SymBool``/``SymFloat``): ``x.size(0)``, ``x.numel()``, ``n // 2``, ``n > 4`` on a tensor
with dynamic dims. Output: graph nodes for arithmetic on it (``operator.floordiv(size, 2)``),
so the graph computes the size from its inputs at run time; a Python value where the trace
must have one (a branch, ``range(n)``), decided by the hint and recorded as a guard.
Chapter: book/docs/dynamic-shapes.md ("Sizes in the graph").
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ..sym_node import SymNode
from .base import VariableTracker

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator


@dataclasses.dataclass(frozen=True, eq=False)
class SymNodeVariable(VariableTracker):
    """A symbolic number: ``example`` is a SymInt/SymBool/SymFloat over the trace's
    ShapeEnv, ``proxy`` the node that computes it at run time."""

    proxy: torch.fx.Proxy
    example: Any

    @property
    def node(self) -> SymNode:
        return self.example.node

    def python_type(self) -> type:
        return self.node.pytype

    def as_proxy(self) -> Any:
        return self.proxy

    def as_example(self) -> Any:
        return self.example

    def as_python_constant(self) -> Any:
        """The trace needs a plain number here (``range(n)``, a list index): take the hint
        and guard that the size stays exactly that (it is specialised)."""
        if self.node.pytype is bool:
            return self.node.guard_bool()
        return self.node.pytype(self.node.env.specialize(self.node.expr))

    def truth(self, tx: InstructionTranslator) -> bool:
        """``if n > 4:``: the hint's answer; the relation becomes a guard."""
        return bool(self.example)

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .constant import ConstantVariable

        return ConstantVariable(self.as_python_constant()).var_getattr(tx, name)

    def reconstruct(self, rt: Residual) -> Any:
        """The real number after the graph: its expression over the frame's sizes."""
        return rt.eval(self.node.env.to_python(self.node.expr))

    def __repr__(self) -> str:
        return f"SymNodeVariable({self.proxy.node.name} = {self.node.expr})"


@dataclasses.dataclass(frozen=True, eq=False)
class SliceVariable(VariableTracker):
    """``start:stop:step`` where a bound is symbolic (``x[:, :n]``); fx graphs hold slices
    of nodes, and meta tensors take slices of SymInts."""

    parts: tuple[VariableTracker, ...]

    def python_type(self) -> type:
        return slice

    def as_proxy(self) -> Any:
        return slice(*(p.as_proxy() for p in self.parts))

    def as_example(self) -> Any:
        return slice(*(p.as_example() for p in self.parts))

    def as_python_constant(self) -> Any:
        return slice(*(p.as_python_constant() for p in self.parts))

    def reconstruct(self, rt: Residual) -> Any:
        return slice(*(p.reconstruct(rt) for p in self.parts))

    def __repr__(self) -> str:
        return f"SliceVariable({self.parts})"


def is_sym(value: VariableTracker) -> bool:
    return isinstance(value, SymNodeVariable)

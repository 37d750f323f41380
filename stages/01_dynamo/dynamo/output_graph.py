"""OutputGraph: the fx graph a frame's trace writes into, with its inputs and guards.

Input: calls from the interpreter (``create_op`` for every tensor operation,
``add_graph_input`` for every tensor that enters from outside, guards from
the builder) and finally the tracker the frame returns. Output: a
``torch.fx.GraphModule`` whose placeholders are the input tensors in order
and whose single output is a tuple of every returned tensor; the list of
placeholder sources; the ordered, de-duplicated guards.
Chapter: book/docs/dynamo.md ("The output graph").
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.fx

from .exc import unimplemented
from .guards import Guard, make_grad_mode_guard
from .utils import get_example_value
from .variables.base import VariableTracker
from .variables.builder import wrap_fx_proxy
from .variables.constant import ConstantVariable
from .variables.lists import BaseListVariable
from .variables.tensor import TensorVariable


class OutputGraph:
    """Accumulates one frame's graph. One instance per trace; discarded on failure."""

    def __init__(self, code_name: str) -> None:
        self.code_name = code_name
        self.graph = torch.fx.Graph()
        self.tracer = torch.fx.proxy.GraphAppendingTracer(self.graph)
        self.guards: dict[str, Guard] = {}
        self.input_sources: list[str] = []  # placeholder i is fetched by input_sources[i]
        self.example_inputs: list[torch.Tensor] = []  # the real tensors of this call
        self.input_tensors: dict[int, TensorVariable] = {}  # id(real tensor) -> tracker
        self.location: str | None = None  # user source line, for node.meta["stack_trace"]
        self.add_guards([make_grad_mode_guard()])

    def add_guards(self, guards: list[Guard]) -> None:
        for guard in guards:
            self.guards.setdefault(guard.expr, guard)

    def add_graph_input(self, source: str, tensor: torch.Tensor) -> torch.fx.Proxy:
        """A new placeholder, placed after the existing ones (placeholders come first)."""
        name = re.sub(r"\W+", "_", source).strip("_") or "input"
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        if placeholders:
            anchor = self.graph.inserting_after(placeholders[-1])
        else:
            anchor = self.graph.inserting_before(next(iter(self.graph.nodes), None))
        with anchor:
            proxy = self.tracer.create_proxy("placeholder", name, (), {})
        proxy.node.meta["source"] = source
        self.input_sources.append(source)
        self.example_inputs.append(tensor)
        return proxy

    def create_op(
        self, kind: str, target: Any, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        """Record ``target(*args, **kwargs)`` as a graph node and track its result.

        The example value is computed first, so an operation that fails (a
        user error, a missing meta kernel) never leaves a node behind.
        """
        example, device = get_example_value(kind, target, args, kwargs)
        proxy_args = tuple(a.as_proxy() for a in args)
        proxy_kwargs = {k: v.as_proxy() for k, v in kwargs.items()}
        proxy = self.tracer.create_proxy(kind, target, proxy_args, proxy_kwargs)
        if self.location is not None:
            proxy.node.meta["stack_trace"] = self.location
        return wrap_fx_proxy(self, proxy, example, device)

    def compile_subgraph(self, return_value: VariableTracker) -> torch.fx.GraphModule:
        """Close the graph: output every returned tensor, as one tuple, in order."""
        tensors: list[TensorVariable] = []
        _collect_outputs(return_value, tensors)
        self.graph.output(tuple(t.proxy.node for t in tensors))
        self.graph.lint()
        return torch.fx.GraphModule(torch.nn.Module(), self.graph, class_name=self.code_name)

    def guard_list(self) -> list[Guard]:
        return list(self.guards.values())


def _collect_outputs(value: VariableTracker, tensors: list[TensorVariable]) -> None:
    """Walk the returned structure in the order ``reconstruct`` will consume outputs.

    # [Note: output structure]
    # The graph returns a flat tuple of tensors; the user's return structure
    # (a tensor, a tuple, a list with constants mixed in) is rebuilt around it
    # by ``VariableTracker.reconstruct``. A value with a source (an argument
    # returned unchanged) is fetched again from the frame, not from the graph.
    """
    if isinstance(value, TensorVariable):
        tensors.append(value)
    elif isinstance(value, BaseListVariable) and value.source is None:
        for item in value.items:
            _collect_outputs(item, tensors)
    elif not isinstance(value, ConstantVariable) and value.source is None:
        unimplemented(f"returning {value} from a compiled frame")

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
import sys
from typing import Any

import torch
import torch.fx

from .exc import ReadsTensorData
from .guards import Guard, make_autocast_guard, make_grad_mode_guard
from .shapes import ShapeEnv, SymTypes
from .side_effects import SideEffects
from .utils import get_example_value
from .variables.base import VariableTracker, children
from .variables.builder import wrap_fx_proxy
from .variables.functions import CellVariable
from .variables.tensor import TensorVariable, known_scalars, value_bounds, with_bounds


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
        self.input_modules: dict[int, VariableTracker] = {}  # id(real module) -> tracker
        self.location: str | None = None  # user source line, for node.meta["stack_trace"]
        self.side_effects = SideEffects()
        self.wrap_cache: dict[str, VariableTracker] = {}  # source -> its tracker
        # id(an outside list, dict or set) -> (it, its tracker): [Note: one container, two names]
        self.input_containers: dict[int, tuple[Any, VariableTracker]] = {}
        self.root_globals: dict[str, Any] | None = None
        # node of a tensor made a leaf -> the break that keeps it out of the graph, should it
        # escape the frame ([Note: a tensor made a leaf])
        self.new_leaves: dict[torch.fx.Node, Any] = {}
        self.autocast_modes: list[Any] = []  # entered for real while tracing, innermost last
        # dynamic shapes (book/docs/dynamic-shapes.md): the symbols of this trace, the
        # ``dynamic=`` setting, and the sizes earlier compiles of this code saw
        self.shape_env = ShapeEnv()
        self.dynamic: bool | None = None
        self.frame_state: dict[str, tuple] = {}
        self.add_guards([make_grad_mode_guard(), make_autocast_guard()])

    def add_guards(self, guards: list[Guard]) -> None:
        for guard in guards:
            self.guards.setdefault(guard.expr, guard)

    def add_graph_input(self, source: str, tensor: torch.Tensor) -> torch.fx.Proxy:
        """A new placeholder, placed after the existing ones (placeholders come first)."""
        name = re.sub(r"\W+", "_", source).strip("_") or "input"
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        taken = {n.target for n in placeholders}  # ``layer[1]`` and ``layer[-1]`` both
        base, count = name, 1                      # print as ``layer_1``: the code's
        while name in taken:                       # parameters must differ
            name, count = f"{base}_{count}", count + 1
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
        try:
            example, device = get_example_value(kind, target, args, kwargs)
        except ReadsTensorData:
            # ``torch.clamp(pos, 0, span * 2 - 1)``: a Scalar given as a 0-d tensor, whose
            # ``.item()`` eager reads; when its value is known, that number is the argument
            scalars = known_scalars(args, kwargs)  # [Note: constant tensors]
            if scalars is None:
                raise
            args, kwargs = scalars
            example, device = get_example_value(kind, target, args, kwargs)
        proxy_args = tuple(a.as_proxy() for a in args)
        proxy_kwargs = {k: v.as_proxy() for k, v in kwargs.items()}
        proxy = self.tracer.create_proxy(kind, target, proxy_args, proxy_kwargs)
        if self.location is not None:
            proxy.node.meta["stack_trace"] = self.location
        result = wrap_fx_proxy(self, proxy, example, device)
        return with_bounds(result, value_bounds(target, args, example))  # [Note: value bounds]

    def global_source(self, f_globals: dict[str, Any], name: str) -> str | None:
        """How guards and inputs name a global of ``f_globals`` (None: do not guard it)."""
        if f_globals is self.root_globals:
            return f"G[{name!r}]"
        module = f_globals.get("__name__", "")
        if module == "torch" or module.startswith("torch."):
            return None  # torch's own globals (F, math...) are trusted, like builtins
        found = sys.modules.get(module)
        if found is not None and found.__dict__ is f_globals:
            return f"sys.modules[{module!r}].__dict__[{name!r}]"
        return None

    def erase_nodes_after(self, last: torch.fx.Node | None) -> None:
        """Undo the nodes an abandoned instruction added (placeholders stay)."""
        nodes = list(self.graph.nodes)
        start = nodes.index(last) + 1 if last is not None else 0
        for node in reversed(nodes[start:]):
            if node.op != "placeholder":
                self.graph.erase_node(node)

    def escaping_leaf(self, values: list[VariableTracker]) -> tuple[str, Any] | None:
        """(why, the planned break or None) if a tensor made a leaf in the graph would leave
        it among ``values`` ([Note: a tensor made a leaf]); None if none would."""
        if not self.new_leaves:
            return None
        if torch.is_grad_enabled() and not any(
                isinstance(t, torch.Tensor) and t.requires_grad for t in self.example_inputs):
            # no input needs a gradient, so aotautograd compiles the graph for inference and
            # what the leaf computes would come out not requiring grad, unlike eager's
            return "a tensor made a leaf in a graph none of whose inputs requires grad", \
                next(iter(self.new_leaves.values()))
        nodes: dict[torch.fx.Node, None] = {}
        seen: set[int] = set()
        for value in values:
            _collect_outputs(value, nodes, seen)
        for node in nodes:
            if node in self.new_leaves:
                return "a tensor made a leaf (.requires_grad = True) leaves the frame", \
                    self.new_leaves[node]
        return None

    def compile_subgraph(
        self, values: list[VariableTracker],
    ) -> tuple[torch.fx.GraphModule | None, list[torch.fx.Node]]:
        """Close the graph: output every tensor the residual code needs, once, in order.

        Returns the GraphModule (None when it would contain no operation, so no
        backend is called for it) and the output nodes in order.
        """
        nodes: dict[torch.fx.Node, None] = {}
        seen: set[int] = set()
        for value in values:
            _collect_outputs(value, nodes, seen)
        outputs = list(nodes)
        self.remove_unused_sizes()
        if not any(n.op.startswith("call_") for n in self.graph.nodes):
            return None, outputs
        self.graph.output(tuple(outputs))
        self.graph.lint()
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph, class_name=self.code_name)
        # the guards pin grad mode and each tensor input's requires_grad (make_grad_mode_guard,
        # make_tensor_guards): a backend may pick its autograd variant once
        gm.meta["signature_guarded"] = True
        return gm, outputs

    def remove_unused_sizes(self) -> None:
        """Size reads (``x.size()``, ``n // 2``) nothing used: the Python code only
        branched on them, and the guards remember that."""
        for node in reversed(list(self.graph.nodes)):
            value = node.meta.get("example_value")
            is_size = isinstance(value, SymTypes) or (
                isinstance(value, (tuple, list)) and any(isinstance(v, SymTypes) for v in value))
            if is_size and not node.users and node.op.startswith("call_"):
                self.graph.erase_node(node)

    def guard_list(self) -> list[Guard]:
        """Every guard; the shape guards last, since they read sizes of inputs whose type
        the earlier guards checked (call this after the backend compiled: it may add
        relations of its own)."""
        shape_guards = [Guard("shapes", kind, expr)
                        for kind, expr in self.shape_env.produce_guards()]
        return list(self.guards.values()) + [g for g in shape_guards
                                             if g.expr not in self.guards]


def _collect_outputs(value: VariableTracker, nodes: dict, seen: set[int]) -> None:
    """Every computed tensor inside ``value`` (a graph output), in walk order.

    # [Note: output structure]
    # The graph returns a flat tuple of tensors; the user's return structure
    # (a tensor, a tuple, a list with constants mixed in) is rebuilt around it
    # by ``VariableTracker.reconstruct``. A value with a source (an argument
    # returned unchanged) is fetched again from the frame, not from the graph.
    """
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, TensorVariable):
        if value.source is None:
            nodes[value.proxy.node] = None
        return
    if value.source is not None:
        return
    if isinstance(value, CellVariable):
        _collect_outputs(value.tx.read_cell(value.name), nodes, seen)
    for child in children(value):
        _collect_outputs(child, nodes, seen)

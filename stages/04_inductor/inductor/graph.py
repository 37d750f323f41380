"""GraphLowering: run the prims graph with IR values instead of tensors.

Input: an FX GraphModule of prims (and extern/fallback aten ops), and example inputs.
Output: ``graph_inputs`` (``InputBuffer`` per placeholder, with the example's real strides),
``operations`` (``ComputedBuffer`` and ``FallbackKernel`` objects in program order) and
``graph_outputs`` (buffers, or ``None`` for non-tensor outputs).

Chapter: book/docs/inductor.md ("GraphLowering").

This is an ``fx.Interpreter``: each node's lowering runs on the IR values of its inputs, so
the graph is "executed" once, symbolically, and what it leaves behind is the loop-level IR.
It is also where values are realized into buffers; see [Note: realize].
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from inductor.exc import CompileError
from inductor.ir import (
    Buffer,
    ComputedBuffer,
    ExternBuffer,
    FallbackKernel,
    FixedLayout,
    FlexibleLayout,
    InputBuffer,
    IRNode,
    Pointwise,
    Reduction,
    as_view,
    index_vars,
    sympify_all,
)
from inductor.lowering import lowerings
from inductor.virtualized import ReadWritesHandler, V


def is_cheap(value: Pointwise) -> bool:
    """A body worth recomputing per user rather than storing: at most one load and one op
    (constants are free)."""
    handler = ReadWritesHandler()
    with V.set_ops_handler(handler):
        value.inner_fn(index_vars(value.ranges))
    return len(handler.reads) <= 1 and handler.op_count <= 1


class GraphLowering(torch.fx.Interpreter):
    """Lowers a prims graph to loop-level IR (see the module docstring)."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.example_inputs = list(example_inputs)
        self.graph_inputs: list[InputBuffer] = []
        self.operations: list[ComputedBuffer | FallbackKernel] = []
        self.graph_outputs: list[Any] = []
        self.buffer_count = 0
        self.fallback_count = 0
        self.current_node: torch.fx.Node | None = None
        self.buffer_by_name: dict[str, Buffer] = {}

    def register(self, buffer: Buffer) -> Buffer:
        self.buffer_by_name[buffer.name] = buffer
        return buffer

    def new_name(self) -> str:
        self.buffer_count += 1
        return f"buf{self.buffer_count - 1}"

    def realize(self, value: Any) -> Any:
        """Give a Pointwise or Reduction value memory of its own; buffers and non-IR values
        pass through."""
        if not isinstance(value, (Pointwise, Reduction)):
            return value
        layout = FlexibleLayout(value.device, value.dtype, value.ranges)
        buffer = self.register(ComputedBuffer(self.new_name(), layout, value))
        self.operations.append(buffer)
        return buffer

    def realize_or_view(self, value: Any) -> Any:
        """A library call's argument: a strided view of an existing buffer if ``value`` is
        one (no copy; [Note: views into library calls]), else realized."""
        view = as_view(value, self.buffer_by_name) if isinstance(value, Pointwise) else None
        return view if view is not None else self.realize(value)

    def run_node(self, n: torch.fx.Node) -> Any:
        self.current_node = n
        result = super().run_node(n)
        many_users = len(n.users) > 1
        if isinstance(result, Reduction):
            result = self.realize(result)  # always: see Reduction's docstring
        elif isinstance(result, Pointwise) and many_users and not is_cheap(result):
            result = self.realize(result)  # [Note: realize]
        return result

    def placeholder(self, target: str, args: Any, kwargs: Any) -> Any:
        example = self.example_inputs[len(self.graph_inputs)]
        if not isinstance(example, torch.Tensor):
            raise CompileError(f"graph input {target!r} is not a tensor ({type(example)})")
        layout = FixedLayout(example.device, example.dtype, sympify_all(example.shape),
                             sympify_all(example.stride()))
        buffer = self.register(InputBuffer(f"arg{len(self.graph_inputs)}", layout))
        self.graph_inputs.append(buffer)
        return buffer

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target is operator.getitem and isinstance(args[0], (list, tuple)):
            return args[0][args[1]]
        lowering = lowerings.get(target)
        if lowering is not None:
            result = lowering(*args, **kwargs)
            if result is not None:
                return result
        return self.fallback(target, args, kwargs)

    def fallback(self, target: Any, args: Any, kwargs: Any) -> Any:
        """Run ``target`` as a library call on realized inputs: correct for any op."""
        args = torch.utils._pytree.tree_map(self.realize_or_view, args)
        kwargs = torch.utils._pytree.tree_map(self.realize_or_view, kwargs)
        val = self.current_node.meta.get("val") if self.current_node is not None else None
        if val is None:
            val = target(*to_meta(args), **to_meta(kwargs))
        many = isinstance(val, (list, tuple))
        # An op may return None in a slot (convolution_backward without the bias gradient).
        outputs = [
            None if v is None else
            ExternBuffer(self.new_name(), FixedLayout(v.device if v.device.type != "meta"
                                                      else self.device(), v.dtype,
                                                      sympify_all(v.shape),
                                                      sympify_all(v.stride())))
            for v in (val if many else [val])
        ]
        for out in outputs:
            if out is not None:
                self.register(out)
        name = f"fallback_{self.fallback_count}"
        self.fallback_count += 1
        self.operations.append(FallbackKernel(name, target, list(args), dict(kwargs), outputs,
                                              multi_output=many))
        return outputs if many else outputs[0]

    def device(self) -> torch.device:
        tensors = [t for t in self.example_inputs if isinstance(t, torch.Tensor)]
        return tensors[0].device if tensors else torch.device("cpu")

    def output(self, target: str, args: Any, kwargs: Any) -> Any:
        outs = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
        self.graph_outputs = [self.realize(o) if isinstance(o, IRNode) else o for o in outs]
        return self.graph_outputs


def to_meta(tree: Any) -> Any:
    """Buffers as meta tensors of their layout, for running an op to learn its output."""

    def convert(x: Any) -> Any:
        if isinstance(x, Buffer):
            return torch.empty_strided([int(s) for s in x.layout.size],
                                       [int(s) for s in x.layout.stride],
                                       dtype=x.layout.dtype, device="meta")
        return x

    return torch.utils._pytree.tree_map(convert, tree)

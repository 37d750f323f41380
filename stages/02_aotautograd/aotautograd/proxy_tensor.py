"""Our make_fx: run a Python function on stand-in tensors and record every aten op it
performs into an FX graph, applying decompositions on the way.

Input: a callable on tensors (a GraphModule from dynamo, or any function returning a tensor
or a tuple of tensors), example inputs, and optionally a decomposition table
(``primtorch.decomposition_table``).
Output: ``trace(...)`` returns a ``torch.fx.GraphModule`` whose placeholders are the flat
inputs, whose calls are aten ops and prims (``node.meta["val"]`` holds a meta tensor with
each value's shape, strides and dtype), and which returns a tuple.

Chapter: book/docs/aotautograd.md ("Tracing with __torch_dispatch__").

[Note: how the tracer works] Every input is replaced by a ``TracerTensor``: a tensor
subclass with no storage (``_make_wrapper_subclass``) that reports the input's real shape,
dtype and device, and carries two things: ``meta``, a meta tensor that stands in for the
data (PyTorch's FakeTensor idea, small), and ``proxy``, the FX node that computes it. A
``TracingMode`` (a TorchDispatchMode) is active while the function runs, so every aten op,
including factories like ``torch.ones`` that take no tensor, reaches its
``__torch_dispatch__`` *below* autograd and the Python-level conveniences, as a plain
OpOverload with plain arguments. There the op is either decomposed (the decomposition runs
on the TracerTensors, and its own ops come back through the mode) or recorded: one
``call_function`` node, and the op run on the meta tensors to learn the output's metadata.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from aotautograd.exc import AOTUnsupported

DecompositionTable = dict[torch._ops.OpOverload, Callable]


def to_meta(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with ``t``'s shape, strides and dtype (no data)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


class TracerTensor(torch.Tensor):
    """A stand-in for a real tensor during tracing: metadata of the real device, data of a
    meta tensor, and the FX proxy whose node computes it. See [Note: how the tracer works].
    """

    meta: torch.Tensor
    proxy: fx.Proxy
    aliased: bool  # may share storage with another tensor (input, constant, view)

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device, proxy: fx.Proxy):
        self = torch.Tensor._make_wrapper_subclass(
            cls, meta.shape, strides=meta.stride(), storage_offset=meta.storage_offset(),
            dtype=meta.dtype, device=device, requires_grad=False,
        )
        self.meta, self.proxy, self.aliased = meta, proxy, False
        return self

    def __repr__(self) -> str:
        return (f"TracerTensor({self.proxy.node.name}, shape={tuple(self.shape)}, "
                f"dtype={self.dtype}, device={self.device})")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # During trace() the TracingMode sees every op first; getting here means a
        # TracerTensor escaped (was stored somewhere and used after tracing ended).
        raise AOTUnsupported(f"{func} on a TracerTensor outside trace(); a traced value "
                             "escaped the traced function")


class Tracer:
    """The state of one trace: the graph, the decompositions, the lifted constants."""

    def __init__(self, decompositions: DecompositionTable, names: dict[int, str]):
        self.graph = fx.Graph()
        self.decompositions = decompositions
        self.constant_names = names  # id(tensor) -> preferred attribute name
        self.constants: dict[str, torch.Tensor] = {}
        self.lifted: dict[int, TracerTensor] = {}

    def placeholder(self, index: int, value: object) -> object:
        node = self.graph.placeholder(f"arg{index}")
        if not isinstance(value, torch.Tensor):
            node.meta["val"] = value  # a non-tensor input is baked in as a constant
            return value
        out = self.wrap(to_meta(value), node, value.device)
        out.aliased = True  # the caller owns it; see [Note: in-place ops]
        return out

    def lift(self, tensor: torch.Tensor) -> TracerTensor:
        """A real tensor met during tracing (closed over, or a module parameter) becomes
        an attribute of the GraphModule, read by a ``get_attr`` node."""
        if id(tensor) not in self.lifted:
            name = self.constant_names.get(id(tensor), f"_tensor_constant{len(self.constants)}")
            self.constants[name] = tensor
            node = self.graph.get_attr(name)
            self.lifted[id(tensor)] = self.wrap(to_meta(tensor), node, tensor.device)
            self.lifted[id(tensor)].aliased = True
        return self.lifted[id(tensor)]

    def wrap(self, meta_out: object, node: fx.Node, device: torch.device) -> object:
        """Outputs of ``node`` as TracerTensors; tuples and lists become getitem nodes."""
        if isinstance(meta_out, torch.Tensor):
            node.meta["val"] = meta_out
            return TracerTensor(meta_out, device, fx.Proxy(node))
        if isinstance(meta_out, (tuple, list)):
            node.meta["val"] = meta_out
            items = []
            for i, item in enumerate(meta_out):
                getitem = self.graph.call_function(operator.getitem, (node, i))
                items.append(self.wrap(item, getitem, device))
            return type(meta_out)(items)
        node.meta["val"] = meta_out
        return meta_out

    # --8<-- [start:torch-dispatch]
    def record(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
        """Append ``func(*args, **kwargs)`` to the graph; return its outputs as TracerTensors
        whose metadata comes from running ``func`` on the inputs' meta tensors."""
        # BEGIN EXERCISE aotautograd-record-op: run func on meta tensors, add a node, wrap outputs
        flat, spec = pytree.tree_flatten((args, kwargs))
        flat = [self.lift(x) if _is_real_tensor(x) else x for x in flat]
        device = output_device(func, flat, kwargs)
        meta_args, meta_kwargs = pytree.tree_unflatten(
            [x.meta if isinstance(x, TracerTensor) else x for x in flat], spec)
        node_args, node_kwargs = pytree.tree_unflatten(
            [x.proxy.node if isinstance(x, TracerTensor) else x for x in flat], spec)
        if _takes_device(func):
            # a factory (or a device move) runs on "meta"; the node keeps the real device
            meta_kwargs["device"], node_kwargs["device"] = torch.device("meta"), device
        try:
            meta_out = func(*meta_args, **meta_kwargs)
        except (NotImplementedError, RuntimeError) as e:
            raise AOTUnsupported(f"{func} cannot be traced with meta tensors "
                                 f"(data-dependent or no meta kernel): {e}") from e
        node = self.graph.call_function(func, tuple(node_args), node_kwargs)
        return self.wrap(meta_out, node, device)
        # END EXERCISE aotautograd-record-op


class TracingMode(TorchDispatchMode):
    """While active, every aten op is decomposed or recorded by ``tracer``."""

    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _is_metadata_arithmetic(func, args, kwargs):
            return func(*args, **kwargs)  # e.g. torch.promote_types inside a decomposition
        if func._schema.is_mutable:
            return self.functionalize(func, args, kwargs)
        out = NotImplemented
        decomposition = self.tracer.decompositions.get(func)
        if decomposition is not None:
            with self:  # the decomposition's own ops (prims, aten ops, factories) come back
                out = decomposition(*args, **kwargs)
        if out is NotImplemented:
            out = self.tracer.record(func, args, kwargs)
        return track_aliases(func, args, out)
    # --8<-- [end:torch-dispatch]

    # [Note: in-place ops] Our graphs are functional: a node's value never changes. An
    # in-place op ``x.add_(y)`` on a tensor nobody else can see (an intermediate that is not
    # an input, a constant, or a view or base of a view) is traced as ``add(x, y)`` and the
    # TracerTensor ``x`` is re-pointed at the new node; later reads of ``x`` see the new
    # value, which is exactly eager's behaviour. Mutating an aliased tensor would have to
    # update its aliases and the caller's tensor (full functionalization, a later chapter),
    # so for now it is unsupported.
    def functionalize(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
        """Trace an in-place aten op ``foo_`` as its functional twin ``foo``."""
        schema = func._schema
        functional = _functional_variant(func)
        target = args[0] if args else None
        written = [a for a in schema.arguments if a.alias_info and a.alias_info.is_write]
        if functional is None or len(written) != 1 or written[0].name != "self":
            raise AOTUnsupported(f"mutating op {func} is not supported yet (only in-place "
                                 "ops like add_ on intermediate tensors)")
        if not isinstance(target, TracerTensor) or target.aliased:
            raise AOTUnsupported(f"{func} mutates an input, a constant or a view; "
                                 "functionalization is not implemented yet")
        with self:  # the functional op comes back to us: decomposed or recorded
            out = functional(*args, **kwargs)
            if out.dtype != target.dtype:  # x_float32.add_(y_float64) stays float32
                out = torch.ops.aten._to_copy.default(out, dtype=target.dtype)
        if out.shape != target.shape:
            raise AOTUnsupported(f"{func} changed the shape of its input")
        target.meta, target.proxy = out.meta, out.proxy
        return target


def track_aliases(func: torch._ops.OpOverload, args: tuple, out: object) -> object:
    """Keep the ``aliased`` flags of [Note: in-place ops] true to eager's storage sharing.

    A view op's input and output share storage in eager: mark both. Any other op returns
    fresh storage in eager, even when its decomposition returned an input unchanged
    (``clone`` is the identity in a functional graph): give it a fresh TracerTensor on the
    same node, so that mutating the copy in place leaves the original alone.
    """
    inputs = [t for t in pytree.tree_leaves(args) if isinstance(t, TracerTensor)]
    if func.is_view:
        for t in inputs + pytree.tree_leaves(out):
            if isinstance(t, TracerTensor):
                t.aliased = True
        return out

    def fresh(t: object) -> object:
        if any(t is i for i in inputs):
            return TracerTensor(t.meta, t.device, t.proxy)
        return t

    return pytree.tree_map(fresh, out)


def _functional_variant(func: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    name = func._schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, func._overloadname, None) if packet is not None else None


def _is_metadata_arithmetic(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """An op with no tensor in or out (``aten.promote_types``): nothing to record."""
    if any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves((args, kwargs))):
        return False
    return not any("Tensor" in str(r.type) for r in func._schema.returns)


def _is_real_tensor(x: object) -> bool:
    return isinstance(x, torch.Tensor) and not isinstance(x, TracerTensor)


def _takes_device(func: torch._ops.OpOverload) -> bool:
    return any(a.name == "device" for a in func._schema.arguments)


def output_device(func: torch._ops.OpOverload, flat_args: list, kwargs: dict) -> torch.device:
    """Where ``func``'s real result would live: the ``device`` argument if it has one, else
    the device of its first tensor with dims (0-dim CPU tensors may join CUDA ones)."""
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    tensors = [x for x in flat_args if isinstance(x, torch.Tensor)]
    if not tensors:
        return torch.get_default_device()
    return ([t for t in tensors if t.dim() > 0] or tensors)[0].device


# --8<-- [start:trace]
def trace(
    fn: Callable,
    example_inputs: Sequence[object],
    decompositions: DecompositionTable | None = None,
) -> fx.GraphModule:
    """Record ``fn(*example_inputs)`` as an FX graph of aten ops (and, with
    ``decompositions``, of what they decompose into). The GraphModule takes the same flat
    inputs and returns a tuple."""
    if not callable(fn):
        raise TypeError(f"trace: fn must be callable, got {type(fn).__name__}")
    tracer = Tracer(dict(decompositions or {}), _attribute_names(fn))
    inputs = [tracer.placeholder(i, x) for i, x in enumerate(example_inputs)]
    with TracingMode(tracer):
        outputs = fn(*inputs)
    results = []
    for leaf in pytree.tree_leaves(outputs):
        if _is_real_tensor(leaf):
            leaf = tracer.lift(leaf)  # fn returned a closed-over tensor untouched
        results.append(leaf.proxy.node if isinstance(leaf, TracerTensor) else leaf)
    tracer.graph.output(tuple(results))
    root = torch.nn.Module()
    for name, tensor in tracer.constants.items():
        setattr(root, name, tensor)
    return fx.GraphModule(root, tracer.graph)
# --8<-- [end:trace]


def _attribute_names(fn: Callable) -> dict[int, str]:
    """Parameters and buffers of a module keep their names (``layer1_weight``) when they
    are lifted into the traced graph."""
    if not isinstance(fn, torch.nn.Module):
        return {}
    tensors = list(fn.named_parameters()) + list(fn.named_buffers())
    # "0.weight" -> "_0_weight": a flat attribute name that is also a Python identifier
    return {id(t): ("_" + name).replace(".", "_") if name[0].isdigit() else
            name.replace(".", "_") for name, t in tensors}

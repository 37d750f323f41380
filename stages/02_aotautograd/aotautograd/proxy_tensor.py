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

import contextlib
import operator
from collections.abc import Callable, Iterator, Sequence

import sympy
import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from dynamo.composites import STATIC_OVERRIDES, SymbolicComposites
from dynamo.shapes import FloorDiv, ShapeEnv
from dynamo.sym_node import SymNode, has_symbolic_sizes
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from aotautograd.exc import AOTUnsupported
from aotautograd.functionalize import ViewStep, functionalize, is_mutation, sync_view

DecompositionTable = dict[torch._ops.OpOverload, Callable]
aten = torch.ops.aten
# How a size expression is computed by graph nodes ([Note: sizes in the graph]).
SIZE_OPS = {sympy.Add: operator.add, sympy.Mul: operator.mul, FloorDiv: operator.floordiv,
            sympy.Mod: operator.mod, sympy.Pow: operator.pow, sympy.Max: torch.sym_max,
            sympy.Min: torch.sym_min}


def to_meta(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with ``t``'s shape, strides and dtype (no data)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


class TracerTensor(torch.Tensor):
    """A stand-in for a real tensor during tracing: metadata of the real device, data of a
    meta tensor, and the FX proxy whose node computes it. See [Note: how the tracer works].

    Storage is modelled just enough for [Note: functionalization]: a tensor made by a view
    op has a ``base`` (the tensor that owns the storage); an owner counts its in-place
    mutations in ``version``; ``role`` says whether an owner is a graph "input", a lifted
    "constant" or an "intermediate".
    """

    meta: torch.Tensor
    proxy: fx.Proxy
    base: TracerTensor | None  # the owner of the storage this view looks into
    base_version: int  # base.version when this view was taken
    view_meta: torch.Tensor | None  # a view of an input: eager's geometry, on "meta"
    view_steps: tuple  # the view ops that made this view from its base (functionalize.py)
    version: int  # how many in-place ops wrote to this tensor (owners only)
    role: str  # "input" | "constant" | "intermediate" | "tangent"
    input_index: int | None  # position among the graph's inputs, for role "input"

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device, proxy: fx.Proxy,
                layout: torch.Tensor | None = None):
        # The strides the program sees are ``layout``'s when given: eager's geometry of a
        # view of an input, see [Note: eager strides of input views]; else ``meta``'s.
        layout = meta if layout is None else layout
        self = torch.Tensor._make_wrapper_subclass(
            cls, layout.shape, strides=layout.stride(), storage_offset=layout.storage_offset(),
            dtype=meta.dtype, device=device, requires_grad=False,
        )
        self.meta, self.proxy = meta, proxy
        self.base, self.base_version, self.version = None, 0, 0
        self.view_meta = None  # for a view of an input: eager's size/stride/offset
        self.view_steps = ()
        self.views = 0  # how many views were taken of this tensor (owners only)
        self.role, self.input_index = "intermediate", None
        return self

    def owner(self) -> TracerTensor:
        """The tensor that owns this one's storage (itself unless it is a view)."""
        return self if self.base is None else self.base

    def is_stale(self) -> bool:
        """A view whose base was written in place after the view was taken."""
        return self.base is not None and self.base.version != self.base_version

    def __repr__(self) -> str:
        return (f"TracerTensor({self.proxy.node.name}, shape={tuple(self.shape)}, "
                f"dtype={self.dtype}, device={self.device})")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # During trace() the TracingMode sees every op first; getting here means a
        # TracerTensor escaped (was stored somewhere and used after tracing ended).
        raise AOTUnsupported(f"{func} on a TracerTensor outside trace(); a traced value "
                             "escaped the traced function")


class SizedGraph(fx.Graph):
    """An FX graph that turns every SymInt argument of a new node into the size node that
    computes it, created just before ([Note: sizes in the graph])."""

    def __init__(self, tracer: Tracer) -> None:
        super().__init__()
        self.tracer = tracer
        tracer.mode = self  # for what runs after the program: sync_views of its outputs

    def create_node(self, op, target, args=None, kwargs=None, *rest, **options) -> fx.Node:
        def convert(a: object) -> object:
            return self.tracer.size_node(a.node.expr) if isinstance(a, torch.SymInt) else a

        if any(isinstance(a, torch.SymInt) for a in pytree.tree_leaves((args, kwargs))):
            args, kwargs = pytree.tree_map(convert, (args, kwargs))
        return super().create_node(op, target, args, kwargs, *rest, **options)


class Tracer:
    """The state of one trace: the graph, the decompositions, the lifted constants, and
    what [Note: functionalization] learns (which inputs were written in place)."""

    def __init__(self, decompositions: DecompositionTable, names: dict[int, str],
                 allow_input_mutation: bool = False):
        self.graph = SizedGraph(self)
        self.decompositions = decompositions
        self.constant_names = names  # id(tensor) -> preferred attribute name
        self.constants: dict[str, torch.Tensor] = {}
        self.lifted: dict[int, TracerTensor] = {}
        self.allow_input_mutation = allow_input_mutation
        self.mutated_inputs: dict[int, TracerTensor] = {}  # input index -> its tensor
        self.phase = "forward"  # "backward" while the autograd engine runs; see joint.py
        self.forbid_grad_constants = False  # training: a closed-over leaf would lose its grad
        self.decomposing: list[torch._ops.OpOverload] = []  # aten ops being decomposed, outer first
        # symbolic sizes ([Note: sizes in the graph]): where each symbol can be read
        self.symbol_sources: dict[sympy.Symbol, tuple[fx.Node, int]] = {}
        self.size_nodes: dict[sympy.Expr, fx.Node] = {}

    def placeholder(self, index: int, value: object, name: str | None = None,
                    requires_grad: bool = False, meta: torch.Tensor | None = None) -> object:
        """A graph input; ``meta`` (a meta tensor with symbolic sizes, from dynamo) replaces
        the value's own metadata when the graph must serve many sizes."""
        node = self.graph.placeholder(name or f"arg{index}")
        if not isinstance(value, torch.Tensor):
            node.meta["val"] = value  # a non-tensor input is baked in as a constant
            return value
        out = self.wrap(meta if meta is not None else to_meta(value), node, value.device)
        for d, size in enumerate(out.meta.shape):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                self.symbol_sources.setdefault(size.node.expr, (node, d))
        out.role, out.input_index = "input", index  # the caller owns it
        if requires_grad:
            out.requires_grad_(True)  # a leaf of the autograd graph the tracer builds
        return out

    def tangent(self, name: str, output: TracerTensor) -> TracerTensor:
        """A placeholder for the gradient flowing into ``output``: same shape and dtype,
        contiguous (the runtime makes the real one contiguous too)."""
        node = self.graph.placeholder(name)
        with _disable_current_modes():  # a tensor of our own, not an op of the program
            meta = torch.empty(output.shape, dtype=output.dtype, device="meta")
        out = self.wrap(meta, node, output.device)
        out.role = "tangent"
        return out

    def lift(self, tensor: torch.Tensor) -> TracerTensor:
        """A real tensor met during tracing (closed over, or a module parameter) becomes
        an attribute of the GraphModule, read by a ``get_attr`` node."""
        if self.forbid_grad_constants and tensor.requires_grad:
            raise AOTUnsupported("a closed-over tensor that requires grad would get no "
                                 "gradient; pass it as an input (or make it a parameter)")
        if id(tensor) not in self.lifted:
            name = self.constant_names.get(id(tensor), f"_tensor_constant{len(self.constants)}")
            self.constants[name] = tensor
            node = self.graph.get_attr(name)
            self.lifted[id(tensor)] = self.wrap(to_meta(tensor), node, tensor.device)
            self.lifted[id(tensor)].role = "constant"
        return self.lifted[id(tensor)]

    # --8<-- [start:size-nodes]
    def size_node(self, expr: sympy.Expr) -> fx.Node | int:
        """The node that computes a symbolic size from the graph's inputs.

        [Note: sizes in the graph]
        An op traced with symbolic sizes takes them as arguments (``view(x, [s0, 12])``),
        but a graph node cannot hold a SymInt: at run time the size must be *computed*.
        Each symbol is read from an input that has it as a dim (``sym_size(primal_0, 0)``,
        placed with the inputs, in the forward); an expression of symbols becomes the
        arithmetic nodes that compute it (``operator.mul``, ``operator.floordiv``).
        """
        if expr.is_Integer:
            return int(expr)
        if expr in self.size_nodes:
            return self.size_nodes[expr]
        if isinstance(expr, sympy.Symbol):
            if expr not in self.symbol_sources:
                raise AOTUnsupported(f"size {expr} is not the size of any graph input")
            source, dim = self.symbol_sources[expr]
            inputs = [n for n in self.graph.nodes if n.op == "placeholder"
                      or n in self.size_nodes.values() and n.target is aten.sym_size.int]
            with self.graph.inserting_after(inputs[-1]):
                node = self.graph.call_function(aten.sym_size.int, (source, dim))
            node.meta["phase"] = "forward"
        else:
            op = SIZE_OPS.get(type(expr))
            if op is None:
                raise AOTUnsupported(f"cannot compute the size {expr} in a graph")
            args = [self.size_node(a) for a in expr.args]
            node = args[0]
            for arg in args[1:]:
                node = self.graph.call_function(op, (node, arg))
                node.meta["phase"] = self.phase
        node.meta["val"] = torch.SymInt(SymNode(expr, self.shape_env(), int))
        self.size_nodes[expr] = node
        return node
    # --8<-- [end:size-nodes]

    def shape_env(self) -> ShapeEnv:
        source, dim = next(iter(self.symbol_sources.values()))
        return source.meta["val"].shape[dim].node.env

    def wrap(self, meta_out: object, node: fx.Node, device: torch.device) -> object:
        """Outputs of ``node`` as TracerTensors; tuples and lists become getitem nodes."""
        node.meta.setdefault("phase", self.phase)
        if node.op == "call_function" and node.target is not operator.getitem:
            # the user-level aten op this node came from (inductor's kernel headers name it)
            node.meta.setdefault("original_aten", (self.decomposing or [node.target])[0])
        node.meta["device"] = device
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
            meta_args, meta_kwargs = set_device(func, meta_args, meta_kwargs, "meta")
            node_args, node_kwargs = set_device(func, node_args, node_kwargs, device)
        try:
            meta_out = func(*meta_args, **meta_kwargs)
        except (NotImplementedError, RuntimeError) as e:
            raise AOTUnsupported(f"{func} cannot be traced with meta tensors "
                                 f"(data-dependent or no meta kernel): {e}") from e
        meta_out = on_device(func, meta_out, device, meta_args, meta_kwargs)
        node = self.graph.call_function(func, tuple(node_args), node_kwargs)
        return self.wrap(meta_out, node, device)
        # END EXERCISE aotautograd-record-op


class TracingMode(TorchDispatchMode):
    """While active, every aten op is functionalized, decomposed or recorded by ``tracer``."""

    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer
        tracer.mode = self  # for what runs after the program: sync_views of its outputs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _is_metadata_arithmetic(func, args, kwargs):
            return func(*args, **kwargs)  # e.g. torch.promote_types inside a decomposition
        sync_views(self, args, kwargs)
        if is_mutation(func):
            out = functionalize(self, func, args, kwargs)
            if out is not NotImplemented:
                return out
        out = NotImplemented
        decomposition = self.tracer.decompositions.get(func)
        if decomposition is not None:
            self.tracer.decomposing.append(func)
            try:
                with self:  # the decomposition's own ops (prims, aten ops, factories) come back
                    out = decomposition(*args, **kwargs)
            finally:
                self.tracer.decomposing.pop()
        if out is NotImplemented:
            out = self.tracer.record(func, args, kwargs)
        return track_aliases(func, args, kwargs, out)
    # --8<-- [end:torch-dispatch]


def sync_views(mode: TracingMode, args: tuple, kwargs: dict) -> None:
    """Bring every stale view among the arguments up to date before the op reads it (a
    view taken before its base was written in place): [Note: mutation through views]."""
    for t in pytree.tree_leaves((args, kwargs)):
        if isinstance(t, TracerTensor) and t.is_stale():
            sync_view(mode, t)


def track_aliases(func: torch._ops.OpOverload, args: tuple, kwargs: dict,
                  out: object) -> object:
    """Keep the storage model of TracerTensor true to eager's storage sharing.

    A view op's output shares its input's storage in eager: it gets the input's owner as
    ``base``. Any other op returns fresh storage in eager, even when its decomposition
    returned an input unchanged (``clone`` is the identity in a functional graph): give it a
    fresh TracerTensor on the same node, so that mutating the copy leaves the original alone.
    """
    inputs = [t for t in pytree.tree_leaves(args) if isinstance(t, TracerTensor)]

    def fresh(t: object) -> object:
        if any(t is i for i in inputs):
            return TracerTensor(t.meta, t.device, t.proxy)
        return t

    out = pytree.tree_map(fresh, out)
    if func.is_view and inputs:
        owner = inputs[0].owner()
        # eager's view geometry (a decomposition's meta may be laid out differently):
        # needed to rebuild an output that is a view of an input (runtime.py)
        geometry = _eager_view(func, args, kwargs) if owner.role == "input" else None
        leaves, spec = pytree.tree_flatten(out)
        shapes = pytree.tree_leaves(geometry) if geometry is not None else [None] * len(leaves)
        parent = inputs[0]
        rest = tuple(args[1:])
        single = isinstance(out, TracerTensor)
        leaves = [_as_view(t, owner, g, (*parent.view_steps, ViewStep(
                      func, rest, dict(kwargs), None if single else i)))
                  if isinstance(t, TracerTensor) else t
                  for i, (t, g) in enumerate(zip(leaves, shapes))]
        out = pytree.tree_unflatten(leaves, spec)
    return out


def _as_view(t: TracerTensor, owner: TracerTensor, geometry: torch.Tensor | None,
             steps: tuple) -> TracerTensor:
    """``t`` marked as a view of ``owner``'s storage.

    [Note: eager strides of input views] Prims lay their results out row-major, so the meta
    tensor of ``x.t()`` says "contiguous" although eager's ``x.t()`` is not. The program
    reads strides too: ``x.t().contiguous()`` is a no-op in C++ when ``is_contiguous()``
    holds, and ``reshape`` chooses between a view and a copy by them. Had the TracerTensor
    of a view of an input reported the meta's strides, ``contiguous()`` would have returned
    the view itself, which the runtime rebuilds as an alias of the input (runtime.py): an
    output sharing memory that eager copies. So a view of an input reports eager's
    geometry (``geometry``), while its ``meta`` keeps the graph's layout.
    """
    if geometry is not None and (geometry.stride() != t.stride()
                                 or geometry.storage_offset() != t.storage_offset()):
        t = TracerTensor(t.meta, t.device, t.proxy, layout=geometry)
    t.base, t.base_version, t.view_meta = owner, owner.version, geometry
    t.view_steps = steps  # how to make it again from ``owner``: [Note: mutation through views]
    owner.views += 1  # ([Note: a view op in place])
    return t


def _eager_view(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    def geometry(x: object) -> object:
        if isinstance(x, TracerTensor):
            return x.view_meta if x.view_meta is not None else x.meta
        return x

    try:
        return func(*pytree.tree_map(geometry, args), **pytree.tree_map(geometry, kwargs))
    except RuntimeError:
        # ATen's C++ view kernels want concrete sizes: with symbolic sizes the geometry is
        # unknown. Once (Longformer, a slice of an input in a resumed frame) PyTorch's
        # argument parser raised an internal assert on plain meta tensors, which we did not
        # explain. Either way the view stays a view of the input (its base and steps are
        # kept); only eager's strides are unknown, so an output that is this view becomes a
        # copy instead of an alias
        return None


def _is_metadata_arithmetic(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """An op with no tensor in or out (``aten.promote_types``): nothing to record."""
    if any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves((args, kwargs))):
        return False
    return not any("Tensor" in str(r.type) for r in func._schema.returns)


def _is_real_tensor(x: object) -> bool:
    return isinstance(x, torch.Tensor) and not isinstance(x, TracerTensor)


# --8<-- [start:device-metas]
# [Note: metas that depend on the device]
# A meta kernel answers for a device it does not know: a tensor on "meta" is on no device.
# Nearly every op's result shapes are the same on all devices, but a few ops return
# bookkeeping tensors whose sizes the CPU and CUDA kernels choose differently, and PyTorch's
# meta kernel describes the CUDA ones. ``_embedding_bag``'s CPU kernel returns an empty
# ``offset2bag`` on its fast path (sum of 16- or 32-bit float rows, no padding index), a
# ``max_indices`` of one entry per bag when the mode is not "max"; CUDA's returns one
# ``offset2bag`` entry per index and an empty ``max_indices``. Those tensors only travel
# to the backward's library call, but the wrapper checks each library result against the
# layout it planned for (``as_layout``) and cannot copy a 0-element tensor into 20 elements:
# an EmbeddingBag model crashed on the CPU. ``DEVICE_METAS`` corrects such results for CPU
# inputs; its entries take the meta result and the op's meta arguments.
def _cpu_embedding_bag(meta_out: tuple, weight: torch.Tensor, indices: torch.Tensor,
                       offsets: torch.Tensor, scale_grad_by_freq: bool = False, mode: int = 0,
                       sparse: bool = False, per_sample_weights: torch.Tensor | None = None,
                       include_last_offset: bool = False, padding_idx: int = -1) -> tuple:
    output = meta_out[0]
    fast_sum = (mode == 0 and weight.dtype in (torch.float32, torch.float16, torch.bfloat16)
                and weight.stride(1) == 1 and padding_idx < 0
                and (per_sample_weights is None or per_sample_weights.stride(0) == 1))
    offset2bag = offsets.new_empty(0 if fast_sum else indices.shape[0])
    bag_size = offsets.new_empty(output.shape[0])
    if mode == 2:  # "max": the index of each output element's row
        max_indices = offsets.new_empty(offsets.shape[0] - int(include_last_offset),
                                        weight.shape[1])
    else:
        max_indices = offsets.new_empty(output.shape[0])
    return output, offset2bag, bag_size, max_indices


DEVICE_METAS: dict[torch._ops.OpOverload, Callable[..., object]] = {
    torch.ops.aten._embedding_bag.default: _cpu_embedding_bag,
    torch.ops.aten._embedding_bag_forward_only.default: _cpu_embedding_bag,
}


def on_device(func: object, meta_out: object, device: torch.device, meta_args: tuple,
              meta_kwargs: dict) -> object:
    """``meta_out``, the result of ``func`` on meta tensors, as ``func`` would shape it on
    ``device`` ([Note: metas that depend on the device])."""
    fix = DEVICE_METAS.get(func)
    if fix is None or torch.device(device).type != "cpu":
        return meta_out
    return fix(meta_out, *meta_args, **meta_kwargs)
# --8<-- [end:device-metas]


def _takes_device(func: torch._ops.OpOverload) -> bool:
    return any(a.name == "device" for a in func._schema.arguments)


def set_device(func: torch._ops.OpOverload, args: tuple, kwargs: dict,
               device: torch.device | str) -> tuple[tuple, dict]:
    """``func``'s arguments with ``device`` replaced, whether given by position or name."""
    position = [a.name for a in func._schema.arguments].index("device")
    if position < len(args):
        args = (*args[:position], torch.device(device), *args[position + 1:])
    else:
        kwargs = {**kwargs, "device": torch.device(device)}
    return args, kwargs


def output_device(func: torch._ops.OpOverload, flat_args: list, kwargs: dict) -> torch.device:
    """Where ``func``'s real result would live: the ``device`` argument if it has one, else
    the device of its first tensor with dims (0-dim CPU tensors may join CUDA ones)."""
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    devices = [x for x in flat_args if isinstance(x, torch.device)]  # given by position
    if devices:
        return devices[0]
    tensors = [x for x in flat_args if isinstance(x, torch.Tensor)]
    if not tensors:
        return torch.get_default_device()
    return ([t for t in tensors if t.dim() > 0] or tensors)[0].device


@contextlib.contextmanager
def tracing(tracer: Tracer, inputs: Sequence[object]) -> Iterator[None]:
    """``TracingMode``; with symbolic sizes among ``inputs``, also the Python versions of
    the composite ops that ATen's C++ would run above the mode ([Note: composite ops and
    symbolic sizes] in dynamo/composites.py)."""
    symbolic = any(isinstance(x, torch.Tensor) and has_symbolic_sizes(x) for x in inputs)
    # static sizes: only short attention ([Note: short attention] in dynamo/composites.py)
    composites = SymbolicComposites() if symbolic else SymbolicComposites(STATIC_OVERRIDES)
    with TracingMode(tracer), composites:
        yield


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
    with tracing(tracer, inputs):
        outputs = fn(*inputs)
        sync_views(tracer.mode, outputs, {})
    results = []
    for leaf in pytree.tree_leaves(outputs):
        if _is_real_tensor(leaf):
            leaf = tracer.lift(leaf)  # fn returned a closed-over tensor untouched
        results.append(leaf.proxy.node if isinstance(leaf, TracerTensor) else leaf)
    tracer.graph.output(tuple(results))
    root = torch.nn.Module()
    for name, tensor in tracer.constants.items():
        setattr(root, name, tensor)
    # [Note: graph modules that write their code when asked]
    # An fx.GraphModule writes its graph out as Python source and compiles it as it is
    # made. Inductor never runs that code (it reads the nodes), and for a 12-layer GPT's
    # traced, joint, forward and backward graphs the writing took 0.27 s of a 2.8 s first
    # call with warm caches on the 2-core CPU machine. torch.fx's _LazyGraphModule is the
    # same module, writing its code at the first call or print.
    return _LazyGraphModule(root, tracer.graph)
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

"""The joint graph: trace a program's forward *and* its backward, as autograd would run it,
into one functional FX graph.

Input: a callable (dynamo's GraphModule, an ``nn.Module``, a function), its flat example
inputs, its parameters and buffers (``module_state``), a decomposition table, and whether
to trace the backward (``train``).
Output: a ``Program``: the joint ``GraphModule`` with placeholders ``(*primals, *tangents)``
and outputs ``(*new values of mutated inputs, *forward outputs, *gradients)``, and the
bookkeeping the partitioner and the runtime need (which inputs were written, which outputs
alias an input, which outputs get a tangent, which primals get a gradient).

Chapter: book/docs/aotautograd.md ("The joint graph").

[Note: the joint graph] We do not write backward formulas: the autograd engine already
knows them. TracerTensors are real tensors as far as autograd is concerned, so running the
forward on TracerTensors that ``requires_grad`` makes autograd record its usual graph of
``*Backward`` nodes, and calling ``torch.autograd.grad(outputs, primals, tangents)`` while
the tracing mode is still active makes the engine run every backward formula on
TracerTensors too. Those formulas are ordinary aten ops (``mul``, ``gelu_backward``,
``native_batch_norm_backward``), so they reach ``__torch_dispatch__`` and land in the same
graph, after the forward, tagged ``node.meta["phase"] = "backward"``. The tangents (the
gradients flowing into the outputs) are placeholders like the primals, so the graph computes
gradients for any upstream gradient, not just for ``loss.backward()``'s ``1.0``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.fx._lazy_graph_module import _LazyGraphModule

from aotautograd.exc import AOTUnsupported
from aotautograd.proxy_tensor import DecompositionTable, Tracer, TracerTensor, sync_views, tracing


@dataclass
class OutputSpec:
    """Where one of the program's flat outputs comes from at run time."""

    kind: str  # "graph": a graph output; "input": a primal itself; "alias": a view of one;
    # "constant": a non-tensor value
    index: int = 0  # graph output position, or primal position
    view: tuple = ()  # (size, stride, storage offset relative to the primal's) for "alias"
    value: object = None  # for "constant"


@dataclass
class Program:
    """A traced program, before partitioning. See [Note: the joint graph]."""

    graph_module: fx.GraphModule
    num_primals: int  # user inputs, then parameters and buffers
    num_user_inputs: int
    state_names: list[str]  # names of the parameters/buffers lifted to primals, in order
    mutated_inputs: list[int]  # primals written in place; the graph's first outputs
    outputs: list[OutputSpec]
    num_graph_outputs: int  # mutated-input values + forward outputs computed by the graph
    differentiable: list[int] = field(default_factory=list)  # graph outputs with a tangent
    grad_primals: list[int] = field(default_factory=list)  # primals with a gradient output
    # symbolic sizes: symbol -> (primal index, dim) that holds it at run time
    size_sources: dict = field(default_factory=dict)

    @property
    def is_joint(self) -> bool:
        return bool(self.differentiable)

    def sizes(self, primals: Sequence[object], exprs: Sequence[object]) -> list[int]:
        """Evaluate size expressions (ints or SymInts of this trace) for a call's primals."""
        if not any(isinstance(e, torch.SymInt) for e in exprs):
            return list(exprs)
        values = {s: primals[i].size(d) for s, (i, d) in self.size_sources.items()}
        return [int(e.node.expr.xreplace(values)) if isinstance(e, torch.SymInt) else e
                for e in exprs]


def module_state(fn: Callable) -> dict[str, torch.Tensor]:
    """Parameters and buffers of ``fn`` (if a module), by every name that reaches them."""
    if not isinstance(fn, torch.nn.Module):
        return {}
    tensors = dict(fn.named_parameters(remove_duplicate=False))
    tensors.update(fn.named_buffers(remove_duplicate=False))
    return tensors


@contextlib.contextmanager
def swapped_state(module: object, replacements: dict[str, torch.Tensor]) -> Iterator[None]:
    """Temporarily replace the module's parameters/buffers by TracerTensors, by name, so
    that ``self.weight`` inside ``forward`` (or a ``get_attr`` node) reads the primal."""
    saved = []
    try:
        for name, value in replacements.items():
            owner_name, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_name)
            table = owner._parameters if attr in owner._parameters else owner._buffers
            saved.append((table, attr, table[attr]))
            table[attr] = value  # bypasses Module.__setattr__'s Parameter type check
        yield
    finally:
        for table, attr, original in reversed(saved):
            table[attr] = original


def _placeholder_name(name: str, tensor: torch.Tensor) -> str:
    kind = "param" if isinstance(tensor, torch.nn.Parameter) else "buffer"
    return f"{kind}_{name.replace('.', '_')}"


# --8<-- [start:trace-joint]
def trace_program(fn: Callable, example_inputs: Sequence[object],
                  decompositions: DecompositionTable | None, train: bool,
                  metas: Sequence[object] | None = None) -> Program:
    """Trace ``fn``'s forward (and, if ``train``, its backward through the autograd engine)
    into one functional graph; see [Note: the joint graph]. ``metas``: per input, a meta
    tensor with symbolic sizes (or None), when the graph must serve many sizes."""
    state = module_state(fn)
    tracer = Tracer(dict(decompositions or {}), {}, allow_input_mutation=True)
    tracer.forbid_grad_constants = train
    metas = list(metas) if metas is not None else [None] * len(example_inputs)
    primals = [tracer.placeholder(i, x, f"primal_{i}", train and _requires_grad(x), meta)
               for i, (x, meta) in enumerate(zip(example_inputs, metas))]
    leaves = list(primals)  # what gradients are taken with respect to
    for i, x in enumerate(example_inputs):  # [Note: an input that is not a leaf]
        if train and _requires_grad(x) and not x.is_leaf:
            primals[i] = not_a_leaf(primals[i])
    by_id: dict[int, TracerTensor] = {}  # a tied weight is one primal under two names
    state_names = []
    for name, tensor in state.items():
        if id(tensor) not in by_id:
            by_id[id(tensor)] = tracer.placeholder(len(primals), tensor, _placeholder_name(
                name, tensor), train and tensor.requires_grad)
            primals.append(by_id[id(tensor)])
            leaves.append(by_id[id(tensor)])
            state_names.append(name)
    # each primal's placeholder, taken now: a primal written in place is traced on as its
    # new value (another node), but its sizes still come from the input
    index = {p.proxy.node: i for i, p in enumerate(primals) if isinstance(p, TracerTensor)}
    with swapped_state(fn, {n: by_id[id(t)] for n, t in state.items()}), tracing(tracer, primals):
        outputs = pytree.tree_leaves(fn(*primals[:len(example_inputs)]))
        sync_views(tracer.mode, outputs, {})  # [Note: mutation through views]
        program_outputs, graph_values = classify_outputs(tracer, primals, outputs)
        differentiable = [i for i, v in enumerate(graph_values)
                          if isinstance(v, TracerTensor) and v.requires_grad]
        mutated = sorted(tracer.mutated_inputs)
        graph_values = [primals[i] for i in mutated] + graph_values
        # an input's new value has a gradient when the write made it require one
        # ([Note: an input that is not a leaf]); a running statistic's has none, and nor
        # has a parameter's ([Note: a leaf written under no_grad])
        differentiable = [j for j in range(len(mutated)) if graph_values[j].requires_grad
                          and not graph_values[j].is_leaf] \
            + [i + len(mutated) for i in differentiable]
        grad_primals = [i for i, p in enumerate(leaves)
                        if isinstance(p, TracerTensor) and p.requires_grad]
        grads = []
        if train and differentiable and grad_primals:
            grads = trace_backward(tracer, [graph_values[i] for i in differentiable],
                                   [leaves[i] for i in grad_primals])
        else:
            differentiable, grad_primals = [], []
    tracer.graph.output(tuple(_as_node(v) for v in graph_values + grads))
    size_sources = {s: (index[node], d) for s, (node, d) in tracer.symbol_sources.items()}
    return Program(_graph_module(tracer), len(primals), len(example_inputs), state_names,
                   mutated, program_outputs, len(graph_values), differentiable, grad_primals,
                   size_sources)
# --8<-- [end:trace-joint]


# --8<-- [start:trace-backward]
def trace_backward(tracer: Tracer, outputs: list[TracerTensor],
                   primals: list[TracerTensor]) -> list[object]:
    """Run the autograd engine on the traced outputs, with a tangent placeholder for each:
    every backward formula's aten ops land in the graph (phase "backward")."""
    tracer.phase = "backward"
    with _after_placeholders(tracer.graph):  # keep (*primals, *tangents) together
        tangents = [tracer.tangent(f"tangent_{i}", out) for i, out in enumerate(outputs)]
    with torch._C._DisableAutocast():  # eager runs loss.backward() outside autocast
        try:
            grads = torch.autograd.grad(outputs, primals, tangents, allow_unused=True)
        except Exception as error:  # [Note: an op whose backward cannot be traced]
            op = custom_op_whose_backward_failed(error, tracer.graph)
            if op is None:
                raise
            raise AOTUnsupported(
                f"the backward formula registered for the custom op {op} cannot be traced "
                f"({type(error).__name__}: {error}); the op is best kept out of the graph",
                eager_ops=frozenset({op})) from error
    tracer.phase = "forward"
    return list(grads)
# --8<-- [end:trace-backward]


# --8<-- [start:op-backward]
# [Note: an op whose backward cannot be traced]
# A custom op (``torch.library.custom_op``) reaches the trace as one node, and its backward
# is whatever Python ``torch.library.register_autograd`` was given. Tracing runs that Python
# on TracerTensors, which is fine while it only calls tensor ops. transformers 5.17's
# grouped matrix multiply for mixture-of-experts layers (GPT-OSS) loops over
# ``offs.tolist()`` in its backward: the number of tokens each expert got, which a tracer
# does not know, so the whole training frame fell back to eager. The op itself is not the
# trouble: run eagerly, autograd records it and its backward runs on real tensors. So when
# the backward fails inside such a formula, the error names the op (``eager_ops``); dynamo
# then traces the frame again with a graph break at each call of that op while autograd
# records ([Note: ops kept out of the graph] in its ``config.py``), and the rest compiles.
# The op is found from the failing frame's ``ctx``: the autograd node torch.library made for
# the op, whose Function class is named after it (``GeneratedBackwardFor_{ns}_{op}_{overload}``),
# matched against the custom ops the forward recorded.
def custom_op_whose_backward_failed(error: BaseException, graph: fx.Graph) -> str | None:
    """The qualified name (``"ns::name"``) of the custom op (one of ``graph``'s) whose
    registered backward raised ``error``, or None when the error came from elsewhere."""
    custom_ops = {n.target for n in graph.nodes if isinstance(n.target, torch._ops.OpOverload)
                  and n.target.namespace not in ("aten", "prims")}
    names = {f"GeneratedBackwardFor_{op._namespace}_{op._opname}_{op._overloadname}":
             op._schema.name for op in custom_ops}
    tb = error.__traceback__
    while tb is not None:
        ctx = tb.tb_frame.f_locals.get("ctx") if tb.tb_frame.f_code.co_name == "backward" \
            else None
        forward_cls = getattr(type(ctx), "_forward_cls", None)
        if getattr(forward_cls, "__name__", None) in names:
            return names[forward_cls.__name__]
        tb = tb.tb_next
    return None
# --8<-- [end:op-backward]


def classify_outputs(tracer: Tracer, primals: list, outputs: list) -> tuple[list, list]:
    """Split the program's outputs: values the graph computes, and aliases of inputs, which
    the runtime rebuilds from the real inputs so that they stay aliases (as in eager)."""
    specs, graph_values = [], []
    for out in outputs:
        if isinstance(out, torch.Tensor) and not isinstance(out, TracerTensor):
            out = tracer.lift(out)  # fn returned a closed-over tensor untouched
        if not isinstance(out, TracerTensor):
            specs.append(OutputSpec("constant", value=out))
            continue
        owner = out.owner()
        if owner.role == "input" and out is owner:
            specs.append(OutputSpec("input", owner.input_index))
        elif owner.role == "input" and out.view_meta is not None:
            view = out.view_meta  # eager's geometry; the placeholder's offset is 0
            specs.append(OutputSpec("alias", owner.input_index,
                                    (tuple(view.shape), view.stride(), view.storage_offset())))
        else:
            specs.append(OutputSpec("graph", len(graph_values)))
            graph_values.append(out)
    return specs, graph_values


# --8<-- [start:not-a-leaf]
# [Note: an input that is not a leaf]
# A placeholder that requires grad is a leaf of the autograd graph the tracer builds, and
# autograd refuses an in-place write into a leaf that requires grad. The real input often is
# no leaf: a frame resumed after a graph break receives activations, and eager lets the
# program write into them (wav2vec2 writes its masked time steps into the feature
# projection's output: ``hidden_states[mask] = self.masked_spec_embed``). So an input that is
# not a leaf in the call being compiled is handed to the program as the output of a
# one-step autograd.Function whose backward passes the gradient through: the same graph
# input (node, role, position), but with a ``grad_fn``. The write is then functionalized as
# for any input, and gradients are still taken with respect to the placeholder itself, so
# they reach the input's old value through the write, as in eager. The input's new value
# leaves the graph with a gradient of its own, and the runtime copies it into the real
# input with autograd recording (``make_write_back``), as eager's write did.
class _SameInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: TracerTensor) -> TracerTensor:
        out = TracerTensor(x.meta, x.device, x.proxy)
        out.role, out.input_index = x.role, x.input_index
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def not_a_leaf(placeholder: TracerTensor) -> TracerTensor:
    """``placeholder`` with a ``grad_fn``: the same graph input, no longer a leaf."""
    return _SameInput.apply(placeholder)
# --8<-- [end:not-a-leaf]


# --8<-- [start:leaf-under-no-grad]
# [Note: a leaf written under no_grad]
# The other way round: a parameter (a leaf that requires grad) can be written in place only
# under ``torch.no_grad()``, and ``nn.Embedding(max_norm=...)`` does so at every call, scaling
# down in place the rows it is about to read (``embedding_renorm_``). The placeholder is
# still a leaf that requires grad after such a write, but the new value has no gradient of
# its own: the gradient of what later reads it goes to the parameter, as in eager. So a
# mutated input's new value counts as differentiable only when the write left it no leaf,
# and the runtime copies a parameter's new value in without recording, as it does a running
# statistic's; with recording, autograd refused the copy, and the frame ran eagerly.
# --8<-- [end:leaf-under-no-grad]


def _requires_grad(x: object) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad


def _as_node(value: object) -> object:
    return value.proxy.node if isinstance(value, TracerTensor) else value


def _after_placeholders(graph: fx.Graph) -> contextlib.AbstractContextManager:
    others = [n for n in graph.nodes if n.op != "placeholder"]
    return graph.inserting_before(others[0]) if others else contextlib.nullcontext()


def _graph_module(tracer: Tracer) -> fx.GraphModule:
    root = torch.nn.Module()
    for name, tensor in tracer.constants.items():
        setattr(root, name, tensor)
    # [Note: graph modules that write their code when asked] (proxy_tensor.py)
    return _LazyGraphModule(root, tracer.graph)

"""Partitioners: split a joint forward/backward graph into a forward graph and a backward
graph, deciding which values the forward saves for the backward.

Input: a joint ``Program`` (``joint.py``): placeholders ``(*primals, *tangents)``, outputs
``(*forward outputs, *gradients)``, nodes tagged ``meta["phase"]``.
Output: a ``Partition``: ``forward`` (primals -> ``(*forward outputs, *saved)``),
``backward`` (``(*saved, *tangents)`` -> the gradients that are not None), and a report of
what was saved (names, bytes) and what the backward recomputes.

Chapter: book/docs/aotautograd.md ("Partitioning as a minimum cut").

[Note: what to save] Everything the backward uses must either be saved by the forward (it
costs memory from the forward until the backward runs) or recomputed by the backward (it
costs time). ``default_partition`` saves every forward value a backward node reads, which is
what eager autograd does. ``min_cut_rematerialization_partition`` asks instead for the
cheapest set of values, in bytes, from which the backward can recompute everything else it
needs, allowing only cheap ops (pointwise, views) to be recomputed. That is a minimum cut:

- every forward node ``n`` becomes two vertices ``n_in -> n_out`` joined by an edge whose
  capacity is the bytes of ``n``'s value (cutting it means saving ``n``);
- each use of ``n`` by a node ``m`` is an edge ``n_out -> m_in`` of infinite capacity;
- the source feeds every primal and every node we refuse to recompute (matrix multiplies,
  reductions, random ops: the last would draw a different mask), so those are always
  computed in the forward; every backward node drains into the sink.

A finite cut separates the primals from the backward, so the backward can run from the
saved values alone; the minimum one saves the fewest bytes. The default partition is one of
the cuts, so the minimum never saves more. On recomputed nodes the backward spends time;
that is the trade PyTorch's partitioner makes too (with more heuristics than ours).
"""

from __future__ import annotations

import logging
import math
import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx
from dynamo.sym_node import hint_int
from torch.fx._lazy_graph_module import _LazyGraphModule

from aotautograd.joint import Program
from aotautograd.maxflow import FlowNetwork, min_cut

log = logging.getLogger("minipt2.aotautograd.partitioners")
aten = torch.ops.aten


@dataclass
class Partition:
    """A forward graph, a backward graph, and what passes between them."""

    forward: fx.GraphModule  # primals -> (*forward outputs, *saved)
    backward: fx.GraphModule  # (*saved, *tangents) -> gradients that are not None
    saved: list[str]  # names of the saved values, in the forward's output order
    saved_bytes: int  # bytes of all saved values
    saved_input_bytes: int  # ... of which are primals (alive anyway: parameters, inputs)
    recomputed: list[str] = field(default_factory=list)  # forward nodes the backward redoes
    has_grad: list[bool] = field(default_factory=list)  # per grad primal: gradient not None

    def describe(self) -> str:
        return (f"saved {len(self.saved)} values, {self.saved_bytes} bytes "
                f"({self.saved_bytes - self.saved_input_bytes} bytes of activations); "
                f"backward recomputes {len(self.recomputed)} forward nodes")


def is_backward(node: fx.Node) -> bool:
    return node.meta.get("phase") == "backward"


def is_primal(node: fx.Node) -> bool:
    return node.op == "placeholder" and not is_backward(node)


def node_bytes(node: fx.Node) -> float:
    """Bytes of the node's value; a tuple (a multi-output op) cannot be saved whole. With
    symbolic sizes, the bytes at the traced sizes: a heuristic needs no guard."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return hint_int(val.numel()) * val.element_size()
    return math.inf if isinstance(val, (tuple, list)) else 0


# --8<-- [start:default-partition]
def default_partition(program: Program) -> Partition:
    """Save every forward value that a backward node reads (what eager autograd saves)."""
    graph = program.graph_module.graph
    saved = [n for n in graph.nodes if not is_backward(n) and n.op != "output"
             and any(is_backward(user) for user in n.users)]
    return build_partition(program, saved)
# --8<-- [end:default-partition]


# --8<-- [start:min-cut]
def min_cut_rematerialization_partition(program: Program) -> Partition:
    """Save the fewest bytes from which the backward can recompute what it needs, using only
    cheap ops; see [Note: what to save]."""
    network, source, sink = FlowNetwork(), "source", "sink"
    reduced = only_reduced(program.graph_module.graph)
    for node in program.graph_module.graph.nodes:
        if node.op == "output":
            continue
        if is_backward(node):
            network.add_edge((node, "in"), sink, math.inf)
            continue
        if is_primal(node) or not can_recompute(node):
            network.add_edge(source, (node, "in"), math.inf)
        network.add_edge((node, "in"), (node, "out"), save_cost(node, reduced))
        for user in node.users:
            if user.op != "output":
                network.add_edge((node, "out"), (user, "in"), math.inf)
    value, source_side = min_cut(network, source, sink)
    saved = [n for n in program.graph_module.graph.nodes
             if (n, "in") in source_side and (n, "out") not in source_side]
    log.debug("min cut: %s bytes, saving %s", value, [n.name for n in saved])
    return build_partition(program, saved)
# --8<-- [end:min-cut]


# [Note: saving a value the forward only reduces]
# Bytes alone make two cuts of GPT-2's loss tie: the log-softmax (batch x vocab), or the
# logits it came from plus two numbers a row (the max and the sum of exponentials). The
# minimum picked the log-softmax, the smaller by those numbers, yet it is the dearer
# choice. The logits are a matrix multiply's output, in memory anyway; the forward reads
# the log-softmax only through a gather of each row's target entry, and the values before
# it (the logits in float32, minus the max) only through the reductions of the same kernel.
# Unsaved, none of them is ever written; saved, the forward writes batch x vocab elements
# (823 MB for GPT-2 in bfloat16), which the loss kernel spent half its time on, and holds a
# second such tensor. So a value that the forward reads only through reductions and
# gathers (directly, or through elementwise ops of its own size) costs twice its bytes to
# save: once to hold it, once to write it.
#
# Why not every value the forward would fuse away? A GELU's input is one too, and doubling
# its cost made the cut save the projection's output without its bias: the bias could no
# longer ride in the matrix multiply's epilogue ([Note: linear] in inductor), and GPT-2's
# step lost 0.6 ms of GPU time. A value some matrix multiply reads, even through other
# elementwise ops, is computed in full for it, and costs its plain bytes as before.
# --8<-- [start:only-reduced]
def only_reduced(graph: fx.Graph) -> set[fx.Node]:
    """The forward values the forward reads only through reductions and gathers, directly
    or through elementwise ops of the same size ([Note: saving a value the forward only
    reduces])."""
    found: set[fx.Node] = set()
    for node in reversed(graph.nodes):  # users before the values they read
        if is_backward(node) or not can_recompute(node):  # a kernel's output: written
            continue
        readers = [u for u in node.users if not is_backward(u)]
        if readers and all(_reduces(reader, node, found) for reader in readers):
            found.add(node)
    return found


def _reduces(reader: fx.Node, value: fx.Node, found: set[fx.Node]) -> bool:
    """Does ``reader`` read ``value`` only to reduce it, or to pick a few entries, in
    the kernel that computes it (not a matrix multiply's operand, not an output)?"""
    if reader.op != "call_function" or _op_name(reader).lstrip("_") in EXPENSIVE:
        return False
    if can_recompute(reader):  # elementwise (a broadcast would grow it: not that)
        return reader in found and _numel(reader) == _numel(value)
    if _op_name(reader) == "gather":
        return reader.args[0] is value  # not the index
    return _numel(reader) < _numel(value)  # a reduction


def save_cost(node: fx.Node, reduced: set[fx.Node] = frozenset()) -> float:
    """What saving ``node`` for the backward costs, in bytes: its size, twice that for a
    value the forward only reduces ([Note: saving a value the forward only reduces]),
    and one byte more for a slice ([Note: saving a slice])."""
    return node_bytes(node) * (2 if node in reduced else 1) + is_slice(node)
# --8<-- [end:only-reduced]


# --8<-- [start:can-recompute]
EXPENSIVE = {"mm", "bmm", "addmm", "baddbmm", "matmul", "convolution", "convolution_backward",
             "sort", "topk", "native_batch_norm", "_native_batch_norm_legit_functional"}
RANDOM_NAMES = ("rand", "bernoulli", "dropout", "philox", "normal", "uniform", "multinomial")
# aten ops that reduce a window of their input and that primtorch decomposes into slices and
# elementwise ops ([Note: a decomposed window op]); a pooling op added to primtorch joins it
READS_A_WINDOW = {"max_pool2d_with_indices"}


def can_recompute(node: fx.Node) -> bool:
    """Cheap and deterministic: views, getitem, and ops no input of which is bigger than
    their output (pointwise ops, broadcasts, concatenation). Not: matrix multiplies and
    convolutions (expensive), reductions (read more than they write), random ops."""
    if node.op == "get_attr" or node.target is operator.getitem:
        return True
    if node.op != "call_function" or not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
    tags = getattr(node.target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags or any(r in name for r in RANDOM_NAMES):
        return False
    if name.lstrip("_") in EXPENSIVE or name.startswith("_scaled_dot_product"):
        return False
    if _decomposed_from(node) in READS_A_WINDOW:  # [Note: a decomposed window op]
        return False
    if getattr(node.target, "is_view", False) or torch.Tag.pointwise in tags or is_slice(node):
        return True
    out = hint_int(node.meta["val"].numel())
    return all(_numel(i) <= out for i in node.all_input_nodes)



# [Note: a decomposed window op]
# The size rule above keeps reductions in the forward: they read more than they write. A max
# pool reads more than it writes too, but primtorch decomposes it before the partitioner
# sees it, into one strided slice of the padded input per kernel offset and a chain of
# comparisons and ``where``s, each of which, alone, is a view or elementwise. So the cut
# could recompute the whole pool in the backward to save its index, from the BatchNorm and
# ReLU before it: in the benchmark convnet the backward redid the stem's normalisation, its
# padding and all nine window comparisons (145 recomputed nodes, writing eight masks), 2.5 ms
# of a 10 ms step on the CPU machine and the largest Triton kernel of the H200's backward,
# to save 512 KB. A node that a window op's decomposition made (``original_aten``, recorded
# by the tracer) is not recomputed: the forward computes the pool once and the cut saves
# its index, as eager autograd does.


def _decomposed_from(node: fx.Node) -> str:
    """The name of the aten op whose decomposition made ``node`` ("" if none is recorded)."""
    op = node.meta.get("original_aten")
    return getattr(op, "__name__", "").split(".")[0] if op is not None else ""


# [Note: saving a slice]
# A slice reads less than its input, so the size rule above would refuse to recompute it,
# yet it computes nothing: the compiler turns it into an index into its input. Attention
# slices q, k and v out of one projection, and all three are saved for the backward. Saved,
# each is a copy the forward writes (a compiled graph's outputs are fresh buffers); their
# base, saved instead, is the projection's output, which the forward has in memory anyway.
# The bytes are equal (three thirds of the base), so the tie is broken by one byte per
# saved slice: the minimum cut saves the base and the backward slices it again. A slice
# much smaller than its base (the last token's logits) is still saved as the slice. GPT-2
# saved 36 slices per step (12 layers x q, k, v), copied by one forward kernel.
def is_slice(node: fx.Node) -> bool:
    """A slice (of any stage's op set): recomputable, and one byte dearer to save than its
    bytes ([Note: saving a slice])."""
    return _op_name(node) == "slice"
# --8<-- [end:can-recompute]


def _op_name(node: fx.Node) -> str:
    """``slice`` for ``minipt2.slice.default`` (any stage's op set); "" for non-calls."""
    name = getattr(node.target, "__name__", "") if node.op == "call_function" else ""
    return name.split(".")[0]


def _numel(node: fx.Node) -> float:
    val = node.meta.get("val")
    return hint_int(val.numel()) if isinstance(val, torch.Tensor) else math.inf


def ancestors(outputs: list[fx.Node], stop: set[fx.Node]) -> set[fx.Node]:
    """``outputs`` and every node they depend on, not looking past the ``stop`` nodes."""
    seen, stack = set(), list(outputs)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(node.all_input_nodes)
    return seen


# --8<-- [start:old-values]
# [Note: a written input the backward reads]
# The program is functional: an input written in place (``running.mul_(0.5)``) is read in
# the graph with its old value everywhere, and gets its new one after the graph ran, when
# the runtime copies it back. A partition may save that input for the backward, and the
# minimum cut likes to (an input costs nothing to keep: its memory is alive anyway). But by
# the time the backward runs, the input's memory holds the new value: the backward of
# ``(x * running).sum()`` would read the new ``running``, or, if it recomputes
# ``running * 0.5`` from it, multiply twice. Autograd's version counter caught it (the
# copy-back moved the saved tensor's version), so the program crashed instead of answering
# wrong, where eager runs. So a written input that a partition would save is cloned at the
# top of the forward, every node of the joint graph reads the clone instead, and the clone
# is saved: one copy of that input per call, only in programs that write an input the
# backward reads (a BatchNorm's running statistics are written, never read backward).
def keep_old_values(program: Program, saved: list[fx.Node]) -> list[fx.Node]:
    """``saved``, with each input the program writes replaced by a clone of its old value
    that the joint graph reads instead ([Note: a written input the backward reads])."""
    graph = program.graph_module.graph
    primals = [n for n in graph.nodes if is_primal(n)]
    written = {primals[i] for i in program.mutated_inputs if i < len(primals)}
    if not written.intersection(saved):
        return saved
    first = next(n for n in graph.nodes if n.op != "placeholder")
    clones: dict[fx.Node, fx.Node] = {}
    for node in saved:
        if node in written and node not in clones:
            with graph.inserting_before(first):
                clone = graph.call_function(aten.clone.default, (node,))
            clone.meta = dict(node.meta)
            node.replace_all_uses_with(
                clone, delete_user_cb=lambda user, c=clone: user is not c and user.op != "output")
            clones[node] = clone
    program.graph_module.recompile()
    return [clones.get(n, n) for n in saved]
# --8<-- [end:old-values]


def build_partition(program: Program, saved: list[fx.Node]) -> Partition:
    """Build the forward and backward graphs for a choice of ``saved`` values."""
    saved = keep_old_values(program, saved)  # [Note: a written input the backward reads]
    joint = program.graph_module
    nodes = list(joint.graph.nodes)
    outputs = list(nodes[-1].args[0])
    fw_outputs, grads = outputs[:program.num_graph_outputs], outputs[program.num_graph_outputs:]
    tangents = [n for n in nodes if n.op == "placeholder" and is_backward(n)]
    primals = [n for n in nodes if is_primal(n)]
    forward = _copy_graph(joint, primals, fw_outputs + saved, set(primals))
    live_grads = [g for g in grads if isinstance(g, fx.Node)]
    backward = _copy_graph(joint, saved + tangents, live_grads, set(saved + tangents))
    in_forward = ancestors([n for n in fw_outputs if isinstance(n, fx.Node)], set(primals))
    in_backward = ancestors(live_grads, set(saved + tangents))
    recomputed = [n.name for n in nodes if n in in_forward and n in in_backward
                  and n.op == "call_function" and n not in saved]
    saved_bytes = [node_bytes(n) for n in saved]
    return Partition(
        forward, backward, [n.name for n in saved], int(sum(saved_bytes)),
        int(sum(b for n, b in zip(saved, saved_bytes) if is_primal(n))), recomputed,
        [isinstance(g, fx.Node) for g in grads])


def _copy_graph(joint: fx.GraphModule, inputs: list[fx.Node], outputs: list,
                stop: set[fx.Node]) -> fx.GraphModule:
    """A graph with placeholders ``inputs`` computing ``outputs`` (nodes of ``joint``)."""
    needed = ancestors([o for o in outputs if isinstance(o, fx.Node)], stop)
    graph, env = fx.Graph(), {}
    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node in joint.graph.nodes:
        if node in needed and node not in env:
            if node.op == "placeholder":
                raise AssertionError(f"partition bug: {node.name} is needed but not an input")
            env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[o] if isinstance(o, fx.Node) else o for o in outputs))
    # [Note: graph modules that write their code when asked] (proxy_tensor.py)
    return _LazyGraphModule(joint, graph)


PARTITIONERS = {"default": default_partition, "min_cut": min_cut_rematerialization_partition}

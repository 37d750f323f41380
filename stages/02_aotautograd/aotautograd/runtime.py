"""The runtime: what a call of the compiled program does.

Input: a traced ``Program`` (``joint.py``), the compiled forward (and, for training, the
compiled backward and the ``Partition`` between them).
Output: a callable on the program's primals (the flat inputs, then the parameters and
buffers, as ``aot_module_simplified`` collects them) returning a tuple of outputs. For training
it runs the forward through an ``autograd.Function``, so that ``loss.backward()`` calls the
compiled backward; it then copies the new values of mutated inputs back into them and
rebuilds the outputs that alias inputs.

Chapter: book/docs/aotautograd.md ("The runtime wrapper").

[Note: runtime epilogues] The compiled graphs are functional, so three things eager does
happen here, around them: (1) an input the program wrote in place (BatchNorm's running
statistics) receives its new value with ``copy_`` after the forward graph returned it;
(2) an output that is an input, or a view of one (``x.t()``), is rebuilt from the real
input with ``as_strided``, so that it shares storage with the input as in eager, and
autograd sees the view; (3) compiled graphs run with autocast off, because the casts an
autocast region made are already in the graph.

[Note: per-call cost] The wrapper runs at every call, around graphs that may take only
microseconds, so it does per call only what depends on the call: reading the current
parameters (once, by paths found at compile time: aot_autograd.py), choosing the entry,
running the graphs. What the trace fixed (which outputs are plain graph outputs, the
geometry of a static alias, where each gradient goes) is worked out once, when the runtime
is made; a program with no epilogue returns the graph's outputs as they are.

[Note: one copy for all running statistics] The copy-backs of (1) are one
``torch._foreach_copy_`` per dtype and device rather than one ``copy_`` per input: the
benchmark convnet has five BatchNorms, whose three buffers each (running mean, running
variance, batch count) made 15 copies and 15 kernel launches a step; grouped, they are two
calls, each one multi-tensor kernel, and the runtime's own host time per convnet step on
the H200 went from about 200 to about 105 us.

[Note: the Function's fixed cost] Every training call goes through the Function's
``forward`` and later its ``backward``, so their own bookkeeping is paid per call, next to
graphs that may take microseconds. What the trace fixes is not asked again: whether the
forward saves sizes (ints, which cannot go through ``save_for_backward``) is seen at the first
call; the outputs needing no gradient are marked only if there are any; and for a static
program (no symbolic sizes) the shape, dtype and device of each differentiable output, from
which a missing gradient's zeros are made, are taken at the first call instead of at each.
With symbolic sizes the shapes change between calls, so they are still taken per call. The
Function's own cost around a small graph's wrapper (two outputs, three inputs) went from
about 14 to 10 us a call on the CPU machine.

[Note: applying the Function] ``CompiledFunction.apply`` is Python: it checks whether the
class defines ``setup_context``, asks whether a functorch transform (vmap, grad) is active,
and if none is, rebuilds the argument tuple to unwrap functorch's dead wrappers, one
``isinstance`` per argument, before it calls autograd's C ``apply``. A compiled frame's
arguments are every input and parameter, 60 of them for the benchmark convnet. The
runtime asks the one question that matters itself and, with no transform active, calls
the C ``apply`` directly: no wrapper can be dead then, and the class has no
``setup_context``. With 60 arguments (a Function of one multiply, on the CPU machine)
``apply`` took 34 us the Python way and 19 us the direct way.

[Note: no zeros for gradients nobody sent] By default autograd hands a Function's backward
a tensor of zeros for every output that got no gradient, including the outputs marked
non-differentiable. Ours has one such output per mutated input (the new running statistics
of every BatchNorm: 15 in the benchmark convnet), so each backward allocated and filled 15
zero tensors, and launched a kernel for each, that nothing read. The Function turns that off
(``set_materialize_grads(False)``) and makes zeros itself only for a differentiable output
whose gradient is missing (an output the loss does not use), which the backward graph needs.

[Note: no gradient where nothing was sent] A gradient the backward graph computes from those
zeros alone is zero, where eager has none: a parameter that only an unused output reads
(a second head the loss leaves out) keeps ``grad is None`` in eager, and an optimizer skips
such a parameter, weight decay and momentum included. Ours got a tensor of zeros, so AdamW
decayed the weights eager left alone. So the runtime knows, per gradient the backward graph
returns, which tangents it is computed from (``tangents_read``, found once in the graph), and
when every one of them was missing it hands autograd None for that gradient.

[Note: new values outside the Function] The new values of mutated inputs are graph outputs
that no gradient reaches, yet every output of an ``autograd.Function`` gets autograd's
per-output bookkeeping, and one that is an input ([Note: inputs written in place]) even a
view of itself made for it. So when none of them has a gradient the Function's forward hands
them out through a list passed in for that (``new_values``) and returns only the rest;
``finish`` sees the graph's outputs in their usual order. They are still written back
after the Function returned, as before: a write inside ``forward`` would come before
autograd records the versions of the saved tensors, and a saved input overwritten there
would go unnoticed instead of raising at backward.

[Note: what backward cannot do] The backward graph is not itself differentiable, so a
backward asked to build a graph of its own (``create_graph=True``, the first step of a
double backward) raises a RuntimeError instead of returning gradients that silently have no
``grad_fn``. A second ``backward`` through the same forward needs
``retain_graph=True``, exactly as in eager, because the saved values are kept with
``ctx.save_for_backward``, which frees them after the first backward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from aotautograd.joint import Program
from aotautograd.partitioners import Partition

DOUBLE_BACKWARD = (
    "aotautograd: double backward (create_graph=True) through a compiled graph is not "
    "supported: the compiled backward is not differentiable; compute higher-order gradients "
    "eagerly (see [Note: what backward cannot do])")


def make_epilogue(program: Program) -> Callable[[Sequence, tuple], tuple]:
    """``finish(primals, graph_outputs)``: the epilogues of [Note: runtime epilogues], write
    back mutated inputs and assemble the program's outputs from graph outputs, inputs and
    views of inputs. What is fixed by the trace is looked at once, here
    ([Note: per-call cost])."""
    mutated = len(program.mutated_inputs)
    specs = program.outputs
    if not mutated and [(s.kind, s.index) for s in specs] == [("graph", i)
                                                              for i in range(len(specs))]:
        # the common case: nothing is written back, and the graph's outputs, in order, are
        # the program's outputs
        return lambda primals, graph_outputs: graph_outputs
    builders = [_output_builder(program, spec, mutated) for spec in specs]
    write_back = make_write_back(program)

    def finish(primals: Sequence, graph_outputs: tuple) -> tuple:
        if write_back is not None:
            write_back(primals, graph_outputs)
        return tuple(build(primals, graph_outputs) for build in builders)

    return finish


# --8<-- [start:write-back]
# [Note: inputs written in place]
# A compiled graph may write the new value of a mutated input straight into that input's
# memory (inductor does, for BatchNorm's running statistics: [Note: writing an input in
# place] in its ``inplace.py``) and then returns the input itself as that output. Such a
# value needs no copy; but the autograd engine counts in-place writes in a tensor's version,
# to refuse a backward that would read a value overwritten since it was saved, and a
# kernel's write is invisible to it, so the version is bumped here
# (``torch.autograd.graph.increment_version``), where the ``copy_`` would have bumped it.
# Which outputs are the inputs themselves is asked at every call (``is``: a CUDA graph's
# replay returns its static buffers, its fallback the inputs).
def make_write_back(program: Program) -> Callable[[Sequence, Sequence], None] | None:
    """``write_back(primals, graph_outputs)``: give every mutated input its new value (the
    graph's first outputs); None when the program mutates nothing."""
    writes = list(enumerate(program.mutated_inputs))
    if not writes:
        return None
    # a new value with a gradient is copied with autograd recording, as eager's write was
    # ([Note: an input that is not a leaf] in joint.py); the graph never writes it in place
    recorded = [(p, i) for p, i in writes if p in program.differentiable]
    writes = [(p, i) for p, i in writes if p not in program.differentiable]
    groups: list[tuple[list[int], list[int]]] = []  # found at the first call

    def write_back(primals: Sequence, graph_outputs: Sequence) -> None:
        for p, i in recorded:
            primals[i].copy_(graph_outputs[p])
        if not writes:
            return
        in_place = [primals[i] for p, i in writes if graph_outputs[p] is primals[i]]
        if in_place:
            torch.autograd.graph.increment_version(in_place)
            if len(in_place) == len(writes):
                return
        if not groups:
            groups.extend(_copy_groups(writes, primals))
        with torch.no_grad():  # [Note: one copy for all running statistics]
            for positions, indices in groups:
                pairs = [(primals[i], graph_outputs[p]) for p, i in zip(positions, indices)
                         if graph_outputs[p] is not primals[i]]
                if pairs:
                    torch._foreach_copy_([a for a, _ in pairs], [v for _, v in pairs])

    return write_back
# --8<-- [end:write-back]


def _copy_groups(writes: list[tuple[int, int]], primals: Sequence
                 ) -> list[tuple[list[int], list[int]]]:
    """The copy-backs ``(graph output position, primal index)`` grouped by the primal's
    dtype and device, each group as (positions, indices). The guards fix both for the
    entry, so the grouping found at the first call holds for every later one."""
    found: dict[tuple, tuple[list[int], list[int]]] = {}
    for position, index in writes:
        key = (primals[index].dtype, primals[index].device)
        positions, indices = found.setdefault(key, ([], []))
        positions.append(position)
        indices.append(index)
    return list(found.values())


def _output_builder(program: Program, spec, mutated: int) -> Callable[[Sequence, tuple], object]:
    """How one program output is made from a call's primals and graph outputs."""
    if spec.kind == "graph":
        position = mutated + spec.index  # the new values of mutated inputs come first
        return lambda primals, outs: outs[position]
    if spec.kind == "input":
        return lambda primals, outs: primals[spec.index]
    if spec.kind == "alias":
        size, stride, offset = spec.view
        if not any(isinstance(e, torch.SymInt) for e in (*size, *stride, offset)):
            def alias(primals, outs):  # a static view: its geometry is known now
                base = primals[spec.index]
                return base.as_strided(size, stride, base.storage_offset() + offset)
            return alias

        def symbolic_alias(primals, outs):  # sizes come from this call's inputs
            base = primals[spec.index]
            shape, strides = program.sizes(primals, size), program.sizes(primals, stride)
            start = program.sizes(primals, [offset])[0]
            return base.as_strided(shape, strides, base.storage_offset() + start)
        return symbolic_alias
    return lambda primals, outs: spec.value


# [Note: graphs run outside autocast]
# The traced graphs already hold the casts autocast made while tracing, so they run with
# autocast off: a library call inside (a matrix multiply) must not cast again. Entering and
# leaving ``torch._C._DisableAutocast`` costs about 0.5 us on the CPU machine and more on a GPU
# host, around graphs that may take microseconds; when no autocast is on (one C call to ask)
# there is nothing to turn off, and the graph is called directly.
autocast_on = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def outside_autocast(graph: Callable, args: Sequence) -> Any:
    """``graph(*args)`` with autocast off ([Note: graphs run outside autocast])."""
    if autocast_on():
        with torch._C._DisableAutocast():
            return graph(*args)
    return graph(*args)


def make_inference_runtime(program: Program, compiled_fw: Callable) -> Callable[..., tuple]:
    """Run the forward graph on the primals; nothing is recorded for autograd."""
    finish = make_epilogue(program)

    def run(*primals: object) -> tuple:
        return finish(primals, tuple(outside_autocast(compiled_fw, primals)))

    return run


# [Note: outputs that are views]
# A compiled forward may return a view of one of its own buffers: a Linear over a 3-d input
# is a 2-d matrix multiply viewed back to 3-d. Returned from an ``autograd.Function``, such
# a view is one autograd will not let the program write in place ("a function that returns
# multiple views"), where eager's output was an ordinary tensor: wav2vec2's training step
# writes its masked time steps into the feature projection's output and crashed. So a view
# leaves the Function as a tensor of its own over the same memory (``set_``: no copy, no
# view record); if another output or an input shares that memory, as a copy, since a write
# into one must not reach the other behind autograd's back.
def fresh_outputs(outputs: Sequence, primals: Sequence) -> tuple:
    """``outputs`` with every view replaced by a tensor that is not one."""
    for o in outputs:  # (a loop, not ``any`` over a generator: this runs at every call)
        if isinstance(o, torch.Tensor) and o._is_view():
            break
    else:
        return tuple(outputs)
    memory = [o.untyped_storage().data_ptr() if isinstance(o, torch.Tensor) else None
              for o in outputs]
    inputs = {p.untyped_storage().data_ptr() for p in primals if isinstance(p, torch.Tensor)}
    fresh = []
    for o, address in zip(outputs, memory):
        if isinstance(o, torch.Tensor) and o._is_view():
            if memory.count(address) > 1 or address in inputs:
                o = o.clone()
            else:
                o = o.new_empty(0).set_(o.untyped_storage(), o.storage_offset(), o.size(),
                                        o.stride())
        fresh.append(o)
    return tuple(fresh)


def tangents_read(backward: torch.fx.GraphModule, count: int) -> list[frozenset[int]]:
    """Per output of ``backward`` (whose last ``count`` placeholders are the tangents), the
    tangents it is computed from ([Note: no gradient where nothing was sent])."""
    placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
    tangent = {n: k for k, n in enumerate(placeholders[len(placeholders) - count:])}
    read: dict[torch.fx.Node, frozenset[int]] = {}
    for node in backward.graph.nodes:
        if node.op == "output":
            return [read.get(a, frozenset()) for a in node.args[0]]
        read[node] = frozenset([tangent[node]]) if node in tangent else frozenset().union(
            *(read[i] for i in node.all_input_nodes))
    return []


@dataclasses.dataclass
class FunctionLayout:
    """Where things are among a training call's graph outputs and gradients, fixed by the
    trace ([Note: the Function's fixed cost])."""

    num_outputs: int  # graph outputs before the saved values
    # [Note: new values outside the Function]: the first graph outputs, the new values of
    # mutated inputs, leave the Function by a list when none of them has a gradient
    first: int
    differentiable: list[int]  # among the Function's outputs
    no_tangent: list[int]  # the other outputs: marked non-differentiable
    grad_slots: list[int]  # where each gradient the backward returns goes among the primals'
    reads: list[frozenset[int]]  # the tangents each gradient reads ([Note: no gradient ...])
    num_primals: int

    @classmethod
    def of(cls, program: Program, partition: Partition) -> FunctionLayout:
        num_outputs = program.num_graph_outputs
        first = len(program.mutated_inputs)
        if any(i < first for i in program.differentiable):
            first = 0
        differentiable = [i - first for i in program.differentiable]
        return cls(num_outputs, first, differentiable,
                   [i for i in range(num_outputs - first) if i not in differentiable],
                   [i for i, has in zip(program.grad_primals, partition.has_grad) if has],
                   tangents_read(partition.backward, len(differentiable)), program.num_primals)

    def gradients(self, grads: Sequence, grad_outputs: tuple) -> tuple:
        """The backward's result: ``grads`` in their primals' slots (none for the list of
        new values), less those computed only from tangents nobody sent."""
        result = [None] * (1 + self.num_primals)
        missing = {k for k, i in enumerate(self.differentiable) if grad_outputs[i] is None}
        for index, grad, read in zip(self.grad_slots, grads, self.reads):
            if not (missing and read and read <= missing):  # [Note: no gradient where ...]
                result[1 + index] = grad
        return tuple(result)


def save_values(ctx: Any, saved: Sequence, memo: dict[str, object]) -> None:
    """Save the forward's values for backward: tensors through autograd's bookkeeping, sizes
    (ints, from [Note: sizes in the graph]) as they are, None where a tensor is."""
    if "sizes" not in memo:
        memo["sizes"] = any(isinstance(v, int) for v in saved)
    if memo["sizes"]:
        ctx.save_for_backward(*[v for v in saved if not isinstance(v, int)])
        ctx.saved_sizes = [v if isinstance(v, int) else None for v in saved]
    else:
        ctx.save_for_backward(*saved)


def saved_values(ctx: Any, memo: dict[str, object]) -> Sequence:
    """What ``save_values`` saved, in order."""
    saved = ctx.saved_tensors
    if memo["sizes"]:
        tensors = iter(saved)
        saved = [next(tensors) if v is None else v for v in ctx.saved_sizes]
    return saved


# --8<-- [start:runtime]
def make_training_runtime(program: Program, partition: Partition, compiled_fw: Callable,
                          compiled_bw: Callable) -> Callable:
    """An ``autograd.Function`` whose forward runs the compiled forward graph and whose
    backward runs the compiled backward graph on the saved values and the tangents."""
    layout, finish = FunctionLayout.of(program, partition), make_epilogue(program)
    static = not program.size_sources  # no symbolic sizes: every call has the same shapes
    memo: dict[str, object] = {}  # found at the first call: "sizes" saved?, "tangents"

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, new_values, *primals):
            outputs = outside_autocast(compiled_fw, primals)
            save_values(ctx, outputs[layout.num_outputs:], memo)
            new_values.extend(outputs[:layout.first])  # [Note: new values outside ...]
            results = fresh_outputs(outputs[layout.first:layout.num_outputs], primals)  # views
            if layout.no_tangent:
                ctx.mark_non_differentiable(*[results[i] for i in layout.no_tangent])
            ctx.set_materialize_grads(False)  # [Note: no zeros for gradients nobody sent]
            if not static or "tangents" not in memo:
                memo["tangents"] = ctx.tangent_like = [
                    (results[i].shape, results[i].dtype, results[i].device)
                    for i in layout.differentiable]
            return results

        @staticmethod
        def backward(ctx, *grad_outputs):
            if torch.is_grad_enabled():  # create_graph=True; see [Note: what backward cannot do]
                raise RuntimeError(DOUBLE_BACKWARD)
            like = memo["tangents"] if static else ctx.tangent_like
            tangents = [grad_outputs[i].contiguous() if grad_outputs[i] is not None else
                        torch.zeros(shape, dtype=dtype, device=device)
                        for i, (shape, dtype, device) in zip(layout.differentiable, like)]
            grads = outside_autocast(compiled_bw, (*saved_values(ctx, memo), *tangents))
            return layout.gradients(grads, grad_outputs)

    # [Note: applying the Function]: autograd's C ``apply`` itself, unless functorch needs
    # ``Function.apply``'s Python
    apply = super(torch.autograd.Function, CompiledFunction).apply

    def run(*primals: object) -> tuple:
        new_values: list = []
        if torch._C._are_functorch_transforms_active():
            outputs = CompiledFunction.apply(new_values, *primals)
        else:
            outputs = apply(new_values, *primals)
        return finish(primals, (*new_values, *outputs) if new_values else outputs)

    run.autograd_function = CompiledFunction
    return run
# --8<-- [end:runtime]

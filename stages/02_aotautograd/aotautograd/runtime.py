"""The runtime: what a call of the compiled program does.

Input: a traced ``Program`` (``joint.py``), the compiled forward (and, for training, the
compiled backward and the ``Partition`` between them), and a function returning the
program's current parameters and buffers.
Output: a callable on the program's flat inputs returning a tuple of outputs. For training
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

[Note: what backward cannot do] The backward graph is not itself differentiable, so a
backward asked to build a graph of its own (``create_graph=True``, the first step of a
double backward) raises a RuntimeError instead of returning gradients that silently have no
``grad_fn``. A second ``backward`` through the same forward needs
``retain_graph=True``, exactly as in eager, because the saved values are kept with
``ctx.save_for_backward``, which frees them after the first backward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from aotautograd.joint import Program
from aotautograd.partitioners import Partition

DOUBLE_BACKWARD = (
    "aotautograd: double backward (create_graph=True) through a compiled graph is not "
    "supported: the compiled backward is not differentiable; compute higher-order gradients "
    "eagerly (see [Note: what backward cannot do])")


def finish(program: Program, primals: list, graph_outputs: tuple) -> tuple:
    """The epilogues of [Note: runtime epilogues]: copy back mutated inputs, then assemble
    the program's outputs from graph outputs, inputs and views of inputs."""
    mutated = len(program.mutated_inputs)
    with torch.no_grad():
        for index, new_value in zip(program.mutated_inputs, graph_outputs[:mutated]):
            primals[index].copy_(new_value)
    computed = graph_outputs[mutated:]
    results = []
    for spec in program.outputs:
        if spec.kind == "graph":
            results.append(computed[spec.index])
        elif spec.kind == "input":
            results.append(primals[spec.index])
        elif spec.kind == "alias":
            base, (size, stride, offset) = primals[spec.index], spec.view
            size, stride = program.sizes(primals, size), program.sizes(primals, stride)
            offset = program.sizes(primals, [offset])[0]
            results.append(base.as_strided(size, stride, base.storage_offset() + offset))
        else:
            results.append(spec.value)
    return tuple(results)


def make_inference_runtime(program: Program, compiled_fw: Callable,
                           state: Callable[[], list]) -> Callable[..., tuple]:
    """Run the forward graph; nothing is recorded for autograd."""

    def run(*args: object) -> tuple:
        primals = [*args, *state()]
        with torch._C._DisableAutocast():
            outputs = tuple(compiled_fw(*primals))
        return finish(program, primals, outputs)

    return run


# --8<-- [start:runtime]
def make_training_runtime(program: Program, partition: Partition, compiled_fw: Callable,
                          compiled_bw: Callable, state: Callable[[], list]) -> Callable:
    """An ``autograd.Function`` whose forward runs the compiled forward graph and whose
    backward runs the compiled backward graph on the saved values and the tangents."""
    num_outputs = program.num_graph_outputs
    no_tangent = [i for i in range(num_outputs) if i not in program.differentiable]

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *primals):
            with torch._C._DisableAutocast():
                outputs = tuple(compiled_fw(*primals))
            saved = outputs[num_outputs:]
            # saved tensors go through autograd's bookkeeping; saved sizes (ints, from
            # [Note: sizes in the graph]) are kept as they are, None where a tensor is
            ctx.save_for_backward(*[v for v in saved if not isinstance(v, int)])
            ctx.saved_sizes = [v if isinstance(v, int) else None for v in saved]
            results = outputs[:num_outputs]
            ctx.mark_non_differentiable(*[results[i] for i in no_tangent])
            return results

        @staticmethod
        def backward(ctx, *grad_outputs):
            if torch.is_grad_enabled():  # create_graph=True; see [Note: what backward cannot do]
                raise RuntimeError(DOUBLE_BACKWARD)
            tangents = [grad_outputs[i].contiguous() for i in program.differentiable]
            tensors = iter(ctx.saved_tensors)
            saved = [next(tensors) if v is None else v for v in ctx.saved_sizes]
            with torch._C._DisableAutocast():
                grads = iter(compiled_bw(*saved, *tangents))
            result = [None] * program.num_primals
            for index, has_grad in zip(program.grad_primals, partition.has_grad):
                result[index] = next(grads) if has_grad else None
            return tuple(result)

    def run(*args: object) -> tuple:
        primals = [*args, *state()]
        return finish(program, primals, CompiledFunction.apply(*primals))

    run.autograd_function = CompiledFunction
    return run
# --8<-- [end:runtime]

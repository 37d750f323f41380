"""AOTAutograd's entry point with dynamo's backend contract: trace the captured graph down
to aten ops and prims, hand the result to a compiler, and return something to call.

Input: ``gm`` (a GraphModule from dynamo, or any callable on tensors), its example inputs,
``fw_compiler(gm, example_inputs) -> callable``, and a decomposition table.
Output: a callable taking the same flat inputs and returning a tuple of outputs.

Chapter: book/docs/aotautograd.md ("aot_module_simplified").

First cut: inference only. When autograd would need to record the program (grad mode on and
an input or parameter that requires grad), we raise ``AOTUnsupported`` rather than return
outputs that silently lack gradients; the joint forward/backward trace comes later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.fx as fx

from aotautograd.exc import AOTUnsupported
from aotautograd.proxy_tensor import DecompositionTable, trace


def needs_autograd(params_require_grad: bool, inputs: Sequence[object]) -> bool:
    """Would eager autograd record this call? (grad mode on and something requires grad)."""
    if not torch.is_grad_enabled():
        return False
    return params_require_grad or any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)


# --8<-- [start:aot-inference]
def aot_module_simplified(
    gm: Callable,
    example_inputs: Sequence[object],
    fw_compiler: Callable[[fx.GraphModule, list], Callable],
    bw_compiler: Callable[[fx.GraphModule, list], Callable] | None = None,
    decompositions: DecompositionTable | None = None,
) -> Callable[..., tuple]:
    """Trace ``gm`` (with ``decompositions`` applied), compile the forward graph once with
    ``fw_compiler``, and return a function of the same flat inputs returning a tuple."""
    params = list(gm.parameters()) if isinstance(gm, torch.nn.Module) else []
    params_require_grad = any(p.requires_grad for p in params)
    if needs_autograd(params_require_grad, example_inputs):
        raise AOTUnsupported("training graphs (autograd) are not supported yet")
    with torch.no_grad():
        fw_gm = trace(gm, example_inputs, decompositions)
    fw_gm.graph.eliminate_dead_code()  # decompositions leave unused pieces behind
    fw_gm.recompile()
    compiled = fw_compiler(fw_gm, list(example_inputs))

    def forward(*args: object) -> tuple:
        if needs_autograd(params_require_grad, args):  # e.g. compiled under no_grad
            raise AOTUnsupported("training graphs (autograd) are not supported yet")
        return tuple(compiled(*args))

    forward.fw_graph = fw_gm  # for printing and tests: what the compiler was given
    return forward
# --8<-- [end:aot-inference]

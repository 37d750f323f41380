"""The benchmark workloads, traced for training by *our* tracer: ``aot_module_simplified``
with ``primtorch.decomposition_table``, inputs and parameters requiring grad. Every call in
the forward and backward graphs must be a prim or an extern op (no fallback aten op), and
the compiled run must equal eager: outputs, gradients, and BatchNorm's running statistics.

Dropout draws other numbers than eager ([Note: random prims]), so values are compared with
p = 0; with p > 0 the test checks that the backward uses the forward's masks: with the seed
fixed, the compiled forward is a smooth function of the weights, and the compiled gradient
must equal its finite-difference derivative (in float64).

stages/03_primtorch/tests/test_workloads.py runs the same models through an eager dispatch
mode instead of the tracer; the models are defined once, in ``workload_models.py``.
"""

import operator

import pytest
import torch
from aot_testing import assert_same_training, compile_module, twin
from primtorch import op_kind
from workload_models import GPT, MICRO, GeluMLP, ResNet, micro_inputs


def not_prim_or_extern(gm) -> list[str]:
    """The call_function targets of ``gm`` that are neither prims nor extern ops."""
    return sorted({str(n.target) for n in gm.graph.nodes if n.op == "call_function"
                   and op_kind(n.target) not in ("prim", "extern")
                   and n.target is not operator.getitem})


def compile_for_training(fn, inputs):
    """Trace forward and backward; every op of both graphs is a prim or an extern op."""
    compiled = compile_module(fn, inputs)
    assert compiled.fw_graph is not None and compiled.bw_graph is not None
    for phase, gm in (("forward", compiled.fw_graph), ("backward", compiled.bw_graph)):
        fallbacks = not_prim_or_extern(gm)
        assert not fallbacks, f"{phase} graph: not prims and not extern: {fallbacks}"
    return compiled


BF16 = dict(rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(MICRO))
def test_micro_workloads(name, dtype):
    torch.manual_seed(0)
    inputs = micro_inputs(name, dtype)
    compiled = compile_for_training(MICRO[name], inputs)
    tol = BF16 if dtype == torch.bfloat16 else {}
    assert_same_training(MICRO[name], None, compiled, inputs, **tol)


def test_mlp_train():
    torch.manual_seed(0)
    eager, model = twin(GeluMLP(16))
    inputs = [torch.randn(8, 16, requires_grad=True)]
    compiled = compile_for_training(model, inputs)
    assert_same_training(eager, model, compiled, inputs)


def _gpt(dropout: float, dtype=torch.float32):
    torch.manual_seed(0)
    model = GPT(dropout=dropout, flash=True).to(dtype).train()
    idx = torch.randint(0, 64, (2, 16))
    return model, [idx, torch.roll(idx, -1, 1)]


def test_gpt_train_matches_eager():
    """Dropout layers present but p = 0: the values must be eager's."""
    eager, model = twin(_gpt(0.0)[0])
    inputs = _gpt(0.0)[1]
    compiled = compile_for_training(model, inputs)
    assert_same_training(eager, model, compiled, inputs)


def test_gpt_dropout_masks_agree_between_forward_and_backward():
    model, inputs = _gpt(0.2, torch.float64)
    compiled = compile_for_training(model, inputs)

    def loss(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)  # the same seed draws the same masks
        return compiled(*inputs)[0]

    loss(1).backward()
    params = list(model.parameters())
    torch.manual_seed(2)
    direction = [torch.randn_like(p) for p in params]
    slope = sum((p.grad * d).sum() for p, d in zip(params, direction)).item()
    eps = 1e-6
    values = []
    for step in (eps, -2 * eps, eps):  # to theta + eps d, theta - eps d, and back
        with torch.no_grad():
            for p, d in zip(params, direction):
                p.add_(d, alpha=step)
        values.append(loss(1).item())
    assert values[2] == loss(1).item() != loss(3).item()  # deterministic per seed, not fixed
    finite_difference = (values[0] - values[1]) / (2 * eps)
    assert finite_difference == pytest.approx(slope, rel=1e-5, abs=1e-7)
    eager_no_dropout = GPT(dropout=0.0, flash=True).double()
    eager_no_dropout.load_state_dict(model.state_dict())
    assert abs(eager_no_dropout(*inputs).item() - values[2]) > 1e-3  # dropout did something


def test_convnet_train_updates_running_statistics_like_eager():
    torch.manual_seed(0)
    eager, model = twin(ResNet().train())
    inputs = [torch.randn(4, 3, 8, 8, requires_grad=True), torch.randint(0, 5, (4,))]
    compiled = compile_for_training(model, inputs)
    program = compiled.program
    mutated = {program.state_names[i - program.num_user_inputs]
               for i in program.mutated_inputs}
    assert {"stem.1.running_mean", "bn2.running_var", "bn1.num_batches_tracked"} <= mutated
    for _ in range(2):  # the second call starts from the statistics the first wrote back
        for m in (model, eager):
            m.zero_grad()
        assert_same_training(eager, model, compiled, inputs)
    assert model.bn1.num_batches_tracked.item() == 2
    assert not torch.equal(model.bn1.running_var, torch.ones(8))

"""Exercise aotautograd-functionalize-inplace: ``functionalize_inplace`` in
aotautograd/functionalize.py."""

import torch
import torch.fx as fx
from aotautograd import aot_module_simplified, trace

aten = torch.ops.aten


def mutable_targets(gm):
    return [n.target for n in gm.graph.nodes
            if isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable]


def test_in_place_op_on_an_intermediate_becomes_functional():
    def fn(x):
        h = x * 2
        h.add_(1)
        h.mul_(x)
        return h

    x = torch.randn(5)
    gm = trace(fn, [x])
    assert not mutable_targets(gm)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.add.Tensor in targets and targets.count(aten.mul.Tensor) == 2
    torch.testing.assert_close(gm(x)[0], fn(x))


def test_dtype_is_kept_and_defaults_are_filled():
    def fn(x):
        h = x.clone()
        h.add_(torch.ones(3, dtype=torch.float64))  # stays float32, as in eager
        m = torch.empty_like(x).bernoulli_()  # bernoulli_(p=0.5) -> bernoulli.p(x, 0.5)
        return h, m

    gm = trace(fn, [torch.randn(3)])
    h, m = gm(torch.zeros(3))
    assert h.dtype == torch.float32 and h.tolist() == [1.0, 1.0, 1.0]
    assert set(m.tolist()) <= {0.0, 1.0}


def test_mutated_input_is_copied_back():
    def fn(x, counter):
        counter.add_(1)
        return (x + counter,)

    compiled = aot_module_simplified(fx.symbolic_trace(fn), [torch.ones(2), torch.zeros(2)],
                                     lambda gm, _: gm.forward)
    counter = torch.zeros(2)
    (out,) = compiled(torch.ones(2), counter)
    assert counter.tolist() == [1.0, 1.0] and out.tolist() == [2.0, 2.0]


def test_training_through_in_place_ops():
    def fn(x):
        h = x.sin()  # sin saves its input, so writing its output is fine (as in eager)
        h.mul_(3)
        return (h.sum(),)

    x = torch.randn(4, requires_grad=True)
    compiled = aot_module_simplified(fx.symbolic_trace(fn), [x], lambda gm, _: gm.forward)
    compiled(x)[0].backward()
    torch.testing.assert_close(x.grad, 3 * x.detach().cos())


def test_a_parameter_rescaled_under_no_grad_is_written_back():
    """``nn.Embedding(max_norm=...)`` rescales the rows it reads in place, under no_grad: the
    rows are written back, and the lookup's gradient still reaches the weight
    ([Note: a leaf written under no_grad] in joint.py)."""
    def make():
        torch.manual_seed(0)
        return torch.nn.Embedding(6, 4, max_norm=0.5)
    eager, model = make(), make()
    ids = torch.tensor([[0, 2, 2], [5, 1, 0]])
    compiled = aot_module_simplified(fx.symbolic_trace(model), [ids], lambda gm, _: gm.forward)
    want, got = eager(ids), compiled(ids)
    got = got[0] if isinstance(got, (tuple, list)) else got
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(model.weight, eager.weight)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(model.weight.grad, eager.weight.grad)


def test_a_fill_in_place_becomes_its_functional_twin():
    """``torch.empty(n).normal_()`` (how ``torch.distributions`` samples): ``normal`` has no
    overload that takes a tensor to fill, so the twin is aten's ``normal_functional``."""
    def fn(x):
        return (x + torch.empty(x.shape).normal_(),)

    gm = trace(fn, [torch.zeros(1000)])
    assert not mutable_targets(gm)
    (out,) = gm(torch.full((1000,), 5.0))
    assert abs(out.mean().item() - 5) < 0.2 and 0.8 < out.std().item() < 1.2

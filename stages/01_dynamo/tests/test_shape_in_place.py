"""[Note: a shape changed in place] (variables/tensor.py): ``t.unsqueeze_(1)`` on a tensor the
frame computed is recorded as the view ``unsqueeze`` that takes the tensor's place."""

from __future__ import annotations

import dynamo
import pytest
import torch


def reshaped(x, w):
    a = x @ w
    b = a  # a second name for the same object
    v = a[:, :2]  # a view taken before the shape changes
    a.unsqueeze_(1)
    c = a.transpose_(0, 1).squeeze_(0)
    v.mul_(2)  # writes through the old view, seen by a, b and c
    kept = [a]
    a.t_()
    return torch.cat([b, c], 0).sin(), b.shape, c is b, kept[0].shape


def test_every_name_sees_the_new_shape(backend, no_fallback):
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    got = dynamo.optimize(backend, fullgraph=True)(reshaped)(x, w)
    want = reshaped(x, w)
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:] == (torch.Size([5, 4]), True, torch.Size([5, 4]))
    assert backend.calls == 1
    methods = {n.target for n in backend.graphs[0].graph.nodes if n.op == "call_method"}
    assert methods & {"unsqueeze", "transpose", "squeeze", "t"} == {
        "unsqueeze", "transpose", "squeeze", "t"}
    assert not any(m.endswith("_") and m != "mul_" for m in methods), methods


@pytest.mark.parametrize("target", ["aot_eager", "inductor"])
def test_gradients_flow_through_the_new_view(target, no_fallback):
    import driver

    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    want = reshaped(x, w)[0]
    want.sum().backward()
    want_grads = x.grad, w.grad
    x.grad = w.grad = None
    got = driver.compile(reshaped, backend=target, fullgraph=True)(x, w)[0]
    got.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close((x.grad, w.grad), want_grads)


def test_an_input_keeps_its_in_place_op(backend):
    """The caller owns an input's shape: the op stays what it was."""
    def f(x):
        x.unsqueeze_(0)
        return x + 1

    x = torch.randn(3)
    got = dynamo.optimize(backend)(f)(x.clone())
    torch.testing.assert_close(got, f(x.clone()))
    assert any(n.target == "unsqueeze_" for g in backend.graphs for n in g.graph.nodes)

"""[Note: linear]: ``mm(x, w.t())`` over a whole row-major weight is printed as
``linear(x, w)``; any other view of a matrix keeps ``reinterpret``. Eager is the oracle for
values and gradients."""

from __future__ import annotations

import pytest
import torch
from inductor_testing import device_for

import driver


def wrapper_text(compiled) -> str:
    return "\n".join(g.artifacts["wrapper"] for g in compiled.graphs)


@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_layer_calls_linear_without_a_view(target, dtype):
    torch.manual_seed(0)
    dev = device_for(target)
    layer = torch.nn.Linear(48, 24, bias=False).to(dev, dtype)
    x = torch.randn(5, 48, device=dev, dtype=dtype)
    compiled = driver.compile(lambda a: torch.relu(layer(a)), options={"target": target})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), torch.relu(layer(x)))
    text = wrapper_text(compiled)
    assert "= linear(" in text and "reinterpret(" not in text.split("def call")[1]


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_other_views_of_a_weight_keep_reinterpret(target):
    """A slice of a weight's rows, transposed, is not a whole matrix: no linear."""
    torch.manual_seed(1)
    dev = device_for(target)
    w = torch.randn(32, 16, device=dev)
    x = torch.randn(4, 16, device=dev)
    fn = lambda a, m: a @ m[8:24].t()  # noqa: E731
    compiled = driver.compile(fn, options={"target": target})
    torch.testing.assert_close(compiled(x, w), fn(x, w))
    text = wrapper_text(compiled).split("def call")[1]
    assert "linear(" not in text and "reinterpret(" in text


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_gradients_through_linear_calls(target):
    torch.manual_seed(2)
    dev = device_for(target)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8)).to(dev)
    ref = [p.detach().clone().requires_grad_() for p in model.parameters()]
    x = torch.randn(6, 16, device=dev)
    compiled = driver.compile(model, options={"target": target})
    compiled(x).square().sum().backward()
    w1, b1, w2, b2 = ref
    eager = torch.nn.functional.linear(torch.nn.functional.gelu(
        torch.nn.functional.linear(x, w1, b1)), w2, b2)
    eager.square().sum().backward()
    for p, r in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5)
    assert "= linear(" in wrapper_text(compiled)

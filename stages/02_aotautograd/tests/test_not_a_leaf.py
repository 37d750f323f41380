"""[Note: an input that is not a leaf] (joint.py): a compiled function may write in place
into an input that requires grad and is not a leaf, as eager allows; the write's gradient
reaches the input's old value and the values written. Eager PyTorch is the oracle."""

from __future__ import annotations

import warnings

import pytest
import torch
from dynamo.exc import FallbackWarning

import driver

TARGETS = ["cpp", "triton"]  # (triton runs under the interpreter without a GPU)


def device_for(target: str) -> str:
    return "cuda" if target == "triton" and torch.cuda.is_available() else "cpu"


emb = torch.nn.Parameter(torch.randn(8, generator=torch.Generator().manual_seed(0)))
rows = torch.tensor([0, 2])
mask = torch.tensor([True, False, True, False])

WRITES = {  # (each reads emb, rows and mask from the arguments: they follow the device)
    "slice set to zero": lambda h, e, r, m: h.__setitem__((slice(None), 0), 0.0),
    "mul_": lambda h, e, r, m: h.mul_(2),
    "rows set to a parameter": lambda h, e, r, m: h.__setitem__(r, e),
    "masked rows set to a constant": lambda h, e, r, m: h.__setitem__(m, e.detach()),
}


def run(write, compile_with, device="cpu"):
    e = emb if device == "cpu" else torch.nn.Parameter(emb.detach().to(device))
    r, m = rows.to(device), mask.to(device)

    def helper(h):  # compiled on its own: ``h`` reaches it with the grad_fn of ``+``
        write(h, e, r, m)
        return h
    inner = compile_with(helper) if compile_with else helper
    torch.manual_seed(1)
    x, w = torch.randn(4, 8, device=device), torch.randn(8, 8, device=device, requires_grad=True)
    h = x @ w + 0.5
    out = inner(h)
    loss = (out * out).sum()
    grads = torch.autograd.grad(loss, [w, e], allow_unused=True)
    return out is h, loss, grads


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_into_a_non_leaf_input_compiles_and_matches_eager(name, target):
    compiled = []

    def compile_with(fn):
        compiled.append(driver.compile(fn, options={"target": target}))
        return compiled[-1]
    device = device_for(target)
    same_eager, want, want_grads = run(WRITES[name], None, device)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        same, got, got_grads = run(WRITES[name], compile_with, device)
    assert len(compiled[0].graphs) == 1
    assert same and same_eager  # the helper returns the very tensor it wrote
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        if w is None:
            assert g is None
        else:
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("target", TARGETS)
def test_masked_rows_set_to_a_parameter_compile(target):
    """``h[mask] = emb`` (wav2vec2's masked time steps): emb's gradient is ``grad[mask]``
    summed, whose intermediate size depends on the mask's values; dynamo writes it as a
    ``where`` instead ([Note: a masked write with a gradient]), and it compiles."""
    def write(h, e, r, m):
        h[m] = e

    def method_write(h, e, r, m):
        h.__setitem__(m, e)
    device = device_for(target)
    for fn in (write, method_write):
        _, want, want_grads = run(fn, None, device)
        compiled = []

        def compile_with(f, compiled=compiled):
            compiled.append(driver.compile(f, options={"target": target}))
            return compiled[-1]
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            _, got, got_grads = run(fn, compile_with, device)
        assert len(compiled[0].graphs) == 1
        torch.testing.assert_close(got, want)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("target", TARGETS)
def test_copying_a_value_with_a_gradient_into_an_input_records_it(target):
    """``buf.copy_(y * 2)``: in eager ``buf`` then requires grad and its gradient reaches
    ``y``; the compiled copy-back records the same."""
    def f(buf, y):
        buf.copy_(y * 2)
        return buf.sum() * 3

    device = device_for(target)
    y = torch.randn(5, device=device, requires_grad=True)
    buf_e, buf_c = torch.zeros(5, device=device), torch.zeros(5, device=device)
    want = f(buf_e, y)
    (want_grad,) = torch.autograd.grad(want, [y])
    got = driver.compile(f, options={"target": target})(buf_c, y)
    (got_grad,) = torch.autograd.grad(got, [y])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)
    torch.testing.assert_close(buf_c, buf_e.detach())
    assert buf_c.requires_grad and buf_e.requires_grad


@pytest.mark.parametrize("target", TARGETS)
def test_a_parameter_written_under_no_grad_compiles_and_matches_eager(target):
    """[Note: a leaf written under no_grad]: ``nn.Embedding(max_norm=...)`` rescales the rows
    it reads in place at every call; the compiled module writes the same rows, gives the same
    outputs and gradients, and runs no frame eagerly."""
    device = device_for(target)

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Embedding(20, 8, max_norm=1.0),
                                   torch.nn.Linear(8, 3)).to(device)
    eager, model = make(), make()
    compiled = driver.compile(model, options={"target": target})
    for step in range(2):
        ids = torch.randint(20, (4, 5), generator=torch.Generator().manual_seed(step))
        ids = ids.to(device)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = compiled(ids)
        want = eager(ids)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(model[0].weight, eager[0].weight)  # the rows renormed
        got.square().sum().backward()
        want.square().sum().backward()
        for mine, theirs in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(mine.grad, theirs.grad)
    assert len(compiled.graphs) == 1

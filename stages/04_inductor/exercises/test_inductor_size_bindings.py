"""Exercise inductor-size-bindings: tests that pass on the reference ``size_bindings`` and fail
on the stub. Run with ``python -m driver exercise check inductor-size-bindings``."""

from __future__ import annotations

import dynamo
import inductor
import primtorch
import pytest
import torch


@pytest.fixture(autouse=True)
def _dynamo(monkeypatch):
    monkeypatch.setattr(dynamo.config, "meta_decompositions", primtorch.decomposition_table)
    dynamo.reset()
    yield
    dynamo.reset()


def compiled_for(fn, target, sizes, make):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(inductor.compile_fx(gm, example_inputs, options={"target": target}))
        return graphs[-1]

    opt = dynamo.optimize(backend, dynamic=True)(fn)
    for size in sizes:
        args = make(size)
        torch.testing.assert_close(opt(*args), fn(*args), rtol=1e-4, atol=1e-5)
    return graphs


def scale(x, y):
    return (x * 2 + y.t()).softmax(-1)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_one_wrapper_reads_every_size_from_its_inputs(target):
    graphs = compiled_for(scale, target, (3, 6, 11),
                          lambda n: [torch.randn(n, 5), torch.randn(5, n)])
    assert len(graphs) == 1
    wrapper = graphs[0].artifacts["wrapper"]
    assert "    s0 = arg0.size(0)" in wrapper
    assert "    s1 = arg0.size(1)" in wrapper  # (dynamic=True: 5 is a symbol too)
    assert wrapper.count(".size(") == 2  # each symbol read once, from the first input


def test_a_backward_reads_a_saved_size():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(inductor.compile_fx(gm, example_inputs, options={"target": "cpp"}))
        return graphs[-1]

    opt = dynamo.optimize(backend, dynamic=True)(model.forward)
    for n in (3, 9):
        x = torch.randn(n, 4)
        opt(x).sum().backward()
        got = model[0].weight.grad.clone()
        model.zero_grad()
        model(x).sum().backward()
        torch.testing.assert_close(got, model[0].weight.grad)
        model.zero_grad()
    assert len(graphs) == 1
    assert "s0 = arg" in graphs[0].artifacts["backward/wrapper"]

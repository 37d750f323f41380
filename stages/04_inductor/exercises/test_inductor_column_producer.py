"""Exercise inductor-column-producer: tests that pass on the reference ``producer_refused``
and fail on the stub. Run with ``python -m driver exercise check inductor-column-producer``."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import inductor  # noqa: E402
from inductor import split_reduction as sr  # noqa: E402
from inductor_testing import assert_close, prims_graph  # noqa: E402


def gradient_and_sum(third=None):
    """tanh's backward times the incoming gradient, its column sum (a bias gradient), and
    optionally a third loop over the same [B, C]: ``"consumer"`` reads the gradient,
    ``"sideways"`` only the inputs."""
    def fn(p, g, a, b):
        t = p.tanh(a)
        grad = p.mul(g, p.sub(p.scalar(1.0, t), p.mul(t, t)))
        outputs = [grad, p.sum(grad, [0])]
        if third == "consumer":
            outputs.append(p.mul(grad, b))
        elif third == "sideways":
            outputs.append(p.mul(p.exp(a), b))
        return tuple(outputs)
    return fn


def compile_and_run(fn, split, monkeypatch):
    monkeypatch.setattr(sr, "SPLIT_DEVICES", {"cuda", "cpu"} if split else set())
    torch.manual_seed(0)
    inputs = [torch.randn(4096, 96) for _ in range(3)]
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target="cpp")
    return compiled, compiled(*inputs), inputs


def kernel_lines(compiled):
    return [line for line in compiled.artifacts["fusion"].splitlines()
            if line.startswith("kernel over")]


def expected(inputs):
    g, a, b = inputs
    t = torch.tanh(a)
    return g * (1 - t * t)


def test_a_split_column_sum_takes_its_producer(monkeypatch):
    compiled, (grad, bias), inputs = compile_and_run(gradient_and_sum(), True, monkeypatch)
    assert any("buf0, buf1" in line for line in kernel_lines(compiled)), \
        compiled.artifacts["fusion"]
    assert_close(grad, expected(inputs))
    assert_close(bias, expected(inputs).sum(0), rtol=1e-4, atol=1e-3)


def test_an_unsplit_column_sum_refuses_with_a_reason(monkeypatch):
    compiled, (grad, bias), inputs = compile_and_run(gradient_and_sum(), False, monkeypatch)
    assert compiled.kernel_count == 2
    assert "score 0 (an unsplit column sum" in compiled.artifacts["fusion"]
    assert_close(bias, expected(inputs).sum(0), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("third, kernels", [("consumer", 2), ("sideways", 3)])
def test_only_loops_that_read_the_gradient_join(third, kernels, monkeypatch):
    compiled, outs, inputs = compile_and_run(gradient_and_sum(third), True, monkeypatch)
    assert compiled.kernel_count == kernels, compiled.artifacts["fusion"]
    g, a, b = inputs
    want = expected(inputs)
    assert_close(outs[2], want * b if third == "consumer" else torch.exp(a) * b)
    assert_close(outs[1], want.sum(0), rtol=1e-4, atol=1e-3)

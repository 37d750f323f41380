"""Exercise inductor-lines-up: tests that pass on the reference ``lines_up`` and fail on the
stub. Run with ``python -m driver exercise check inductor-lines-up``."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import inductor  # noqa: E402
from inductor import split_reduction as sr  # noqa: E402
from inductor_testing import assert_close, prims_graph  # noqa: E402


def gradient_and_sum(p, g, a):
    """tanh's backward times the incoming gradient, and its column sum (a bias gradient)."""
    t = p.tanh(a)
    grad = p.mul(g, p.sub(p.scalar(1.0, t), p.mul(t, t)))
    return grad, p.sum(grad, [0])


@pytest.mark.parametrize("rows", [512, 1024])
def test_a_gradient_in_chunks_as_long_as_a_row_joins_its_sum(rows, monkeypatch):
    """[rows, 256] splits into chunks of 256 rows: the gradient fits "xr" first, "rx" is
    where the partial sums read it; with ``lines_up`` the two are one kernel, and right."""
    monkeypatch.setattr(sr, "SPLIT_DEVICES", {"cuda", "cpu"})
    assert sr.choose_splits(256, rows, outer=True) * 256 == rows
    torch.manual_seed(0)
    inputs = [torch.randn(rows, 256), torch.randn(rows, 256)]
    compiled = inductor.compile_fx_inner(prims_graph(gradient_and_sum, inputs), inputs,
                                         target="cpp")
    grad, bias = compiled(*inputs)
    kernels = [line for line in compiled.artifacts["fusion"].splitlines()
               if line.startswith("kernel over")]
    assert any("buf0" in line and "buf1" in line for line in kernels), \
        compiled.artifacts["fusion"]
    g, a = inputs
    want = g * (1 - torch.tanh(a) ** 2)
    assert_close(grad, want)
    assert_close(bias, want.sum(0), rtol=1e-4, atol=1e-3)


def test_a_row_sum_of_the_same_sizes_stays_right():
    """[512, 256] viewed as [2, 256, 256] and summed over the last dim: "xr" is right there,
    and the kernel's values are eager's."""
    torch.manual_seed(0)
    x = torch.randn(512, 256)

    def fn(p, a):
        e = p.exp(a)
        return e, p.sum(p.reshape(e, [2, 256, 256]), [2])

    compiled = inductor.compile_fx_inner(prims_graph(fn, [x]), [x], target="cpp")
    e, total = compiled(x)
    assert_close(e, torch.exp(x))
    assert_close(total, torch.exp(x).reshape(2, 256, 256).sum(2), rtol=1e-5, atol=1e-4)

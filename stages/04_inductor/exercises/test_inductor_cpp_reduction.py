"""Exercise inductor-cpp-reduction: tests that pass on the reference ``CppKernel.accumulate``
and fail on the stub. Run with ``python -m driver exercise check inductor-cpp-reduction``."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import inductor  # noqa: E402
from inductor_testing import prims_graph  # noqa: E402


def run(name, x, dim=1):
    gm = prims_graph(lambda p, a: getattr(p, name)(a, [dim]), [x])
    compiled = inductor.compile_fx_inner(gm, [x], target="cpp")
    return compiled, compiled(x)[0]


@pytest.mark.parametrize("name", ["sum", "prod", "amax", "amin"])
def test_matches_eager(name):
    x = torch.randn(7, 45)
    compiled, out = run(name, x)
    torch.testing.assert_close(out, getattr(torch, name)(x, 1))
    assert compiled.kernel_count == 1


@pytest.mark.parametrize("name", ["amax", "amin"])
def test_nan_wins_like_eager(name):
    x = torch.randn(4, 45)
    x[1, 3], x[2, 44] = float("nan"), float("nan")
    _, out = run(name, x)
    torch.testing.assert_close(out, getattr(torch, name)(x, 1), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float64])
def test_other_dtypes(dtype):
    x = (torch.randn(5, 20) * 10).to(dtype)
    _, out = run("amax", x)
    assert torch.equal(out, x.amax(1))


def test_the_loop_is_marked_vectorisable():
    x = torch.randn(6, 300)
    compiled, out = run("sum", x)
    source = next(v for k, v in compiled.artifacts.items() if k.startswith("kernels/"))
    assert "#pragma omp simd reduction(+:" in source
    torch.testing.assert_close(out, x.sum(1))

"""Exercise inductor-triton-reduction: tests that pass on the reference looped reduction
printer and fail on the stub. Run with
``python -m driver exercise check inductor-triton-reduction``."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import inductor  # noqa: E402
from inductor.codegen import triton_reduction  # noqa: E402
from inductor_testing import assert_close, prims_graph, to_target  # noqa: E402


@pytest.fixture(autouse=True)
def looped(monkeypatch):
    """Rows longer than 16 elements are reduced by loops over r (not persistent tiles)."""
    monkeypatch.setattr(triton_reduction, "PERSISTENT_MAX", 16)
    monkeypatch.setattr(triton_reduction, "LOOP_RBLOCK", 16)


@pytest.mark.parametrize("name", ["sum", "amax", "amin", "prod"])
def test_looped_reductions_match_eager(name):
    x = torch.rand(5, 40) + 0.5
    x[2, 7] = 3.0
    (gx,) = to_target([x], "triton")
    compiled = inductor.compile_fx_inner(prims_graph(lambda p, a: getattr(p, name)(a, [1]),
                                                     [gx]), [gx], target="triton")
    (out,) = compiled(gx)
    want = {"sum": x.sum(1), "amax": x.amax(1), "amin": x.amin(1), "prod": x.prod(1)}[name]
    assert_close(out, want, rtol=1e-4, atol=1e-5)
    (source,) = [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]
    assert "for roffset in range(0, rnumel, RBLOCK):" in source


def test_nan_propagates_through_a_looped_max():
    x = torch.randn(3, 50)
    x[1, 45] = float("nan")
    (gx,) = to_target([x], "triton")
    compiled = inductor.compile_fx_inner(prims_graph(lambda p, a: p.amax(a, [1]), [gx]), [gx],
                                         target="triton")
    assert_close(compiled(gx)[0], x.amax(1), equal_nan=True)

"""Exercise inductor-broadcast: tests that pass on the reference ``broadcast_in_dim`` lowering
and fail on the stub. Run with ``python -m driver exercise check inductor-broadcast``."""

from __future__ import annotations

import os
import re
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import inductor  # noqa: E402
from inductor_testing import assert_close, prims_graph, to_target  # noqa: E402


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_bias_row_and_column_broadcasts(target):
    x, row, col = torch.randn(5, 7), torch.randn(7), torch.randn(5, 1)
    inputs = to_target([x, row, col], target)

    def fn(p, a, r, c):
        r2 = p.broadcast_in_dim(r, [5, 7], [1])  # (7,) -> (5, 7): dim 0 is new
        c2 = p.broadcast_in_dim(c, [5, 7], [0, 1])  # (5, 1) -> (5, 7): size-1 dim repeats
        return p.add(p.mul(a, r2), c2)

    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    (out,) = compiled(*inputs)
    assert_close(out, x * row + col)
    assert compiled.kernel_count == 1  # a view, not a copy: fused into the one kernel


def test_broadcast_is_not_materialized():
    x = torch.randn(3)
    compiled = inductor.compile_fx_inner(
        prims_graph(lambda p, a: p.sin(p.broadcast_in_dim(a, [4, 3], [1])), [x]), [x],
        target="cpp")
    (out,) = compiled(x)
    assert_close(out, x.sin().expand(4, 3))
    assert len(re.findall(r"buf\d+ = empty_strided\(", compiled.artifacts["wrapper"])) == 1

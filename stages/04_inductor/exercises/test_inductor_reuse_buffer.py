"""Exercise inductor-reuse-buffer: tests that pass on the reference ``allocate`` and fail on
the stub. Run with ``python -m driver exercise check inductor-reuse-buffer``."""

from __future__ import annotations

import os
import re
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import inductor  # noqa: E402
from inductor_testing import assert_close, prims_graph  # noqa: E402


def chain(p, a):
    """Three kernels (each reads a transpose of the last), so buf0 dies before buf2 is born."""
    s = p.sin(p.exp(a))
    b = p.mul(p.add(s, p.permute(s, [1, 0])), p.scalar(0.5, s))
    return p.sub(b, p.exp(p.permute(b, [1, 0])))


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_dead_buffer_is_reused_and_result_is_right(target):
    x = torch.randn(4, 4)
    compiled = inductor.compile_fx_inner(prims_graph(chain, [x]), [x], target=target)
    (out,) = compiled(x)
    s = x.exp().sin()
    b = (s + s.t()) * 0.5
    assert_close(out, b - b.t().exp())
    wrapper = compiled.artifacts["wrapper"]
    assert re.search(r"buf2 = buf0; del buf0  # reuse", wrapper)
    assert len(re.findall(r"buf\d+ = empty_strided\(", wrapper)) == 2  # buf2 reuses buf0


def test_no_reuse_across_layouts():
    x = torch.randn(4, 6)

    def fn(p, a):
        s = p.sin(p.exp(a))
        t = p.permute(s, [1, 0])  # (6, 4): a different layout, so no reuse
        return p.add(p.exp(t), p.permute(p.exp(p.permute(t, [1, 0])), [1, 0]))

    compiled = inductor.compile_fx_inner(prims_graph(fn, [x]), [x], target="cpp")
    (out,) = compiled(x)
    t = x.exp().sin().t()
    assert_close(out, t.exp() + t.t().exp().t())
    assert "# reuse" not in compiled.artifacts["wrapper"]

"""Exercise inductor-view-extern: tests that pass on the reference ``ir.as_view`` and fail on
the stub. Run with ``python -m driver exercise check inductor-view-extern``."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import inductor  # noqa: E402
from inductor.graph import GraphLowering  # noqa: E402
from inductor.ir import ReinterpretView, as_view  # noqa: E402
from inductor.lowering import lowerings  # noqa: E402
from inductor_testing import prims_graph  # noqa: E402
from primtorch import prims  # noqa: E402


def lowered_inputs(*tensors):
    graph = GraphLowering(prims_graph(lambda p, *xs: xs[0], list(tensors)), list(tensors))
    graph.run(*tensors)
    return graph


def test_a_transpose_is_a_view_with_swapped_strides():
    graph = lowered_inputs(torch.randn(3, 5))
    t = lowerings[prims.PRIMS["permute"].op](graph.graph_inputs[0], [1, 0])
    view = as_view(t, graph.buffer_by_name)
    assert isinstance(view, ReinterpretView)
    assert view.name == "arg0" and [int(s) for s in view.layout.size] == [5, 3]
    assert [int(s) for s in view.layout.stride] == [1, 5] and int(view.offset) == 0


def test_computation_is_not_a_view():
    graph = lowered_inputs(torch.randn(3, 5))
    s = lowerings[prims.PRIMS["sin"].op](graph.graph_inputs[0])
    assert as_view(s, graph.buffer_by_name) is None


def test_unflattening_reshape_is_not_a_view():
    x = torch.randn(4, 6).t()  # (6, 4), not contiguous: reshaping it needs // and %
    graph = lowered_inputs(x)
    r = lowerings[prims.PRIMS["reshape"].op](graph.graph_inputs[0], [24])
    assert as_view(r, graph.buffer_by_name) is None


def test_linear_runs_without_copying_its_weight():
    model = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.no_grad():
        fn = inductor.compile_fx(torch.fx.symbolic_trace(model), [x], options={"target": "cpp"})
        (out,) = fn(x)
        want = model(x)
    torch.testing.assert_close(out, want)
    assert not any("copy" in k for k in fn.artifacts if k.startswith("kernels/"))

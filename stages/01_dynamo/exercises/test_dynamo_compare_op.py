"""Tests for the exercise dynamo-compare-op (InstructionTranslatorBase.COMPARE_OP).

They pass on the reference implementation and fail when the exercise region is replaced
by ``raise NotImplementedError``.
"""

from __future__ import annotations

import dynamo
import pytest
import torch


class Count:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def test_tensor_comparisons_become_graph_nodes():
    def fn(x, y):
        return x > y, x <= y, x == y, x != y, x >= 0.5, x < y

    backend = Count()
    x, y = torch.randn(5), torch.randn(5)
    got = dynamo.optimize(backend, fullgraph=True)(fn)(x, y)
    for a, b in zip(got, fn(x, y)):
        assert torch.equal(a, b)
    targets = [n.target for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    assert len(targets) == 6


def test_constant_comparisons_fold_and_pick_a_branch():
    def fn(x, n):
        if n >= 3 and n != 4 and x.shape[0] < 10:
            return x + 1
        return x - 1

    backend = Count()
    opt = dynamo.optimize(backend, fullgraph=True)(fn)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x, 3), x + 1)
    torch.testing.assert_close(opt(x, 4), x - 1)
    nodes = [n for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    assert len(nodes) == 1  # only the add: the comparisons were decided while tracing

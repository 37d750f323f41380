"""Exercise inductor-can-fuse: tests that pass on the reference ``can_fuse`` and fail on the
stub. Run with ``python -m driver exercise check inductor-can-fuse``."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import inductor  # noqa: E402
from inductor.graph import GraphLowering  # noqa: E402
from inductor.scheduler import FusedGroup, SchedulerNode, can_fuse  # noqa: E402
from inductor_testing import assert_close, prims_graph, to_target  # noqa: E402


def lower(fn, inputs):
    graph = GraphLowering(prims_graph(fn, inputs), inputs)
    graph.run(*inputs)
    return [SchedulerNode.analyse(op) for op in graph.operations]


def test_same_element_dependency_is_legal():
    x = torch.randn(4, 4)
    a, b = lower(lambda p, t: (p.sin(t), p.add(p.sin(t), p.sin(t))), [x])
    legal, reason = can_fuse(FusedGroup([a]), b)
    assert legal and isinstance(reason, str)


def test_reading_another_element_is_illegal():
    x = torch.randn(4, 4)

    def fn(p, t):
        s = p.sin(p.exp(t))  # two users: realized
        return p.add(s, p.permute(s, [1, 0]))

    producer, consumer = lower(fn, [x])
    legal, reason = can_fuse(FusedGroup([producer]), consumer)
    assert not legal and "buf0" in reason


def test_different_ranges_are_illegal():
    x, y = torch.randn(3, 5), torch.randn(4, 5)
    a, b = lower(lambda p, s, t: (p.sin(s), p.cos(t)), [x, y])
    legal, reason = can_fuse(FusedGroup([a]), b)
    assert not legal and "range" in reason


def test_merged_dims_share_the_loop():
    """A loop over 15 elements fits a [3, 5] kernel: its dim is the product of the kernel's
    two ([Note: merged dims]), so the two loops are the same 15 iterations."""
    x, y = torch.randn(3, 5), torch.randn(15)
    a, b = lower(lambda p, s, t: (p.sin(s), p.cos(t)), [x, y])
    legal, reason = can_fuse(FusedGroup([a]), b)
    assert legal, reason


def test_a_chain_compiles_to_one_kernel():
    x, y = torch.randn(6, 7), torch.randn(6, 7)
    gx, gy = to_target([x, y], "triton")

    def fn(p, a, b):
        s = p.mul(p.sin(a), p.cos(b))
        return p.add(s, a), p.sub(s, b)

    compiled = inductor.compile_fx_inner(prims_graph(fn, [gx, gy]), [gx, gy], target="triton")
    assert compiled.kernel_count == 1
    s = x.sin() * y.cos()
    for got, want in zip(compiled(gx, gy), (s + x, s - y)):
        assert_close(got, want)

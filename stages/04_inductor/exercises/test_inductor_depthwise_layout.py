"""Exercise inductor-depthwise-layout: tests that pass on the reference
``graph.depthwise_inputs`` and fail on the stub. Run with
``python -m driver exercise check inductor-depthwise-layout``."""

from __future__ import annotations

import importlib
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
graph_module = importlib.import_module("inductor.graph")

aten = torch.ops.aten


def graph_with(weight_shape, transposed=False, backward=False):
    """An FX graph of one convolution (or its backward) over placeholders with meta values;
    returns (graph module, the nodes a depthwise convolution would read)."""
    g = torch.fx.Graph()
    x, w, dy = g.placeholder("x"), g.placeholder("w"), g.placeholder("dy")
    x.meta["val"] = torch.empty(2, 8, 5, 5, device="meta")
    w.meta["val"] = torch.empty(*weight_shape, device="meta")
    dy.meta["val"] = torch.empty(2, 8, 5, 5, device="meta")
    groups = 8 // weight_shape[1]
    if backward:
        node = g.call_function(aten.convolution_backward.default,
                               (dy, x, w, [8], [1, 1], [1, 1], [1, 1], transposed, [0, 0],
                                groups, [True, True, True]))
        reads = {dy, x}
    else:
        node = g.call_function(aten.convolution.default,
                               (x, w, None, [1, 1], [1, 1], [1, 1], transposed, [0, 0], groups))
        reads = {x}
    g.output(node)
    return torch.fx.GraphModule(torch.nn.Module(), g), reads


def test_depthwise_forward_reads_its_input():
    gm, reads = graph_with((8, 1, 3, 3))
    assert graph_module.depthwise_inputs(gm) == reads


def test_depthwise_backward_reads_the_gradient_and_the_input():
    gm, reads = graph_with((8, 1, 7, 7), backward=True)
    assert graph_module.depthwise_inputs(gm) == reads


def test_grouped_and_dense_convolutions_are_not_depthwise():
    for shape in [(8, 4, 3, 3), (8, 8, 3, 3)]:
        for backward in (False, True):
            gm, _ = graph_with(shape, backward=backward)
            assert graph_module.depthwise_inputs(gm) == set()


def test_transposed_convolution_is_left_alone():
    gm, _ = graph_with((8, 1, 3, 3), transposed=True)
    assert graph_module.depthwise_inputs(gm) == set()

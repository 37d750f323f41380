"""Exercise aotautograd-maxflow: ``max_flow`` in aotautograd/maxflow.py."""

import math

import pytest
import torch
from aotautograd.maxflow import FlowNetwork, max_flow, min_cut
from aotautograd.partitioners import default_partition, min_cut_rematerialization_partition


def network(edges):
    net = FlowNetwork()
    for u, v, c in edges:
        net.add_edge(u, v, c)
    return net


def test_textbook_network():
    # CLRS figure 26.1: the maximum flow is 23
    edges = [("s", "v1", 16), ("s", "v2", 13), ("v1", "v3", 12), ("v2", "v1", 4),
             ("v2", "v4", 14), ("v3", "v2", 9), ("v3", "t", 20), ("v4", "v3", 7),
             ("v4", "t", 4)]
    assert max_flow(network(edges), "s", "t") == 23
    value, side = min_cut(network(edges), "s", "t")
    assert value == 23 and side == {"s", "v1", "v2", "v4"}


def test_reverse_edges_cancel_flow():
    edges = [("s", "a", 1), ("s", "b", 1), ("a", "b", 1), ("a", "t", 1), ("b", "t", 1)]
    assert max_flow(network(edges), "s", "t") == 2


def test_unreachable_sink_and_infinite_paths():
    assert max_flow(network([("s", "a", 3), ("t", "a", 1)]), "s", "t") == 0
    assert max_flow(network([("s", "a", math.inf), ("a", "t", 5)]), "s", "t") == 5
    with pytest.raises(ValueError):
        max_flow(network([("s", "a", math.inf), ("a", "t", math.inf)]), "s", "t")


def test_min_cut_partitioner_saves_less():
    import torch.fx as fx
    from aotautograd.joint import trace_program

    def fn(x):
        return (x.sin().cos().exp(),)

    x = torch.randn(64, requires_grad=True)
    program = trace_program(fx.symbolic_trace(fn), [x], None, train=True)
    assert min_cut_rematerialization_partition(program).saved_bytes < \
        default_partition(program).saved_bytes

"""max_flow / min_cut against brute force on small random networks."""

import itertools
import math
import random

import pytest
from aotautograd.maxflow import FlowNetwork, max_flow, min_cut


def random_edges(seed, vertices=6, density=0.4):
    rng = random.Random(seed)
    edges = []
    for u, v in itertools.permutations(range(vertices), 2):
        if rng.random() < density:
            edges.append((u, v, rng.choice([0, 1, 2, 3, 5, 8, math.inf])))
    return edges


def brute_force_min_cut(edges, vertices, source, sink):
    """The cheapest cut over every set S with source in S and sink not in S."""
    others = [v for v in range(vertices) if v not in (source, sink)]
    best = math.inf
    for r in range(len(others) + 1):
        for chosen in itertools.combinations(others, r):
            side = {source, *chosen}
            best = min(best, sum(c for u, v, c in edges if u in side and v not in side))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_max_flow_equals_brute_force_min_cut(seed):
    edges = random_edges(seed)
    expected = brute_force_min_cut(edges, 6, 0, 5)
    network = FlowNetwork()
    for u, v, c in edges:
        network.add_edge(u, v, c)
    if expected == math.inf:
        with pytest.raises(ValueError, match="infinite"):
            max_flow(network, 0, 5)
        return
    value, side = min_cut(network, 0, 5)
    assert value == expected
    assert 0 in side and 5 not in side
    assert sum(c for u, v, c in edges if u in side and v not in side) == expected


def test_flow_can_be_cancelled():
    """The classic case where a greedy path must be undone through a reverse edge."""
    network = FlowNetwork()
    for u, v in [("s", "a"), ("s", "b"), ("a", "t"), ("b", "t"), ("a", "b")]:
        network.add_edge(u, v, 1)
    assert max_flow(network, "s", "t") == 2


def test_negative_capacity_is_rejected():
    with pytest.raises(ValueError, match="capacity"):
        FlowNetwork().add_edge(0, 1, -1)

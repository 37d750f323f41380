"""Maximum flow and minimum cut, for the min-cut partitioner.

Input: a ``FlowNetwork`` (directed edges with capacities, ``math.inf`` allowed), a source
and a sink.
Output: ``max_flow`` returns the value of a maximum flow (the network is left holding the
residual capacities); ``min_cut`` returns the cut's value and the set of vertices on the
source side.

Chapter: book/docs/aotautograd.md ("Partitioning as a minimum cut").

[Note: max-flow min-cut] Push flow from source to sink along *augmenting paths*: paths
whose every edge still has spare (residual) capacity. Pushing ``b`` units along an edge
``u -> v`` lowers its residual capacity by ``b`` and raises that of ``v -> u`` by ``b`` (a
later path may cancel the flow). Edmonds-Karp picks the shortest augmenting path (breadth
first), which bounds the number of rounds by O(V E) whatever the capacities are. When no
augmenting path is left the flow is maximal, and the vertices still reachable from the
source through edges with spare capacity form the source side of a *minimum* cut: the edges
leaving that set are exactly saturated, and their capacities sum to the flow's value.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable


class FlowNetwork:
    """Directed edges with capacities, stored as residual capacities ``u -> {v: c}``."""

    def __init__(self) -> None:
        self.residual: dict[Hashable, dict[Hashable, float]] = {}

    def add_edge(self, u: Hashable, v: Hashable, capacity: float) -> None:
        if capacity < 0:
            raise ValueError(f"capacity of {u!r} -> {v!r} must be >= 0, got {capacity}")
        self.residual.setdefault(u, {})
        self.residual.setdefault(v, {})
        self.residual[u][v] = self.residual[u].get(v, 0) + capacity
        self.residual[v].setdefault(u, 0)  # the reverse edge, for cancelling flow

    def reachable(self, source: Hashable) -> set:
        """Vertices reachable from ``source`` through edges with residual capacity left."""
        seen, queue = {source}, deque([source])
        while queue:
            u = queue.popleft()
            for v, capacity in self.residual.get(u, {}).items():
                if capacity > 0 and v not in seen:
                    seen.add(v)
                    queue.append(v)
        return seen


# --8<-- [start:max-flow]
def max_flow(network: FlowNetwork, source: Hashable, sink: Hashable) -> float:
    """Edmonds-Karp: augment along shortest residual paths until none is left."""
    # BEGIN EXERCISE aotautograd-maxflow: push flow along shortest augmenting paths
    residual, flow = network.residual, 0
    while True:
        parent = {source: None}  # breadth-first search for a shortest augmenting path
        queue = deque([source])
        while queue and sink not in parent:
            u = queue.popleft()
            for v, capacity in residual.get(u, {}).items():
                if capacity > 0 and v not in parent:
                    parent[v] = u
                    queue.append(v)
        if sink not in parent:
            return flow
        path, v = [], sink
        while parent[v] is not None:
            path.append((parent[v], v))
            v = parent[v]
        bottleneck = min(residual[u][v] for u, v in path)
        if bottleneck == math.inf:
            raise ValueError("the network has a path of infinite capacity: no finite cut")
        for u, v in path:
            residual[u][v] -= bottleneck
            residual[v][u] += bottleneck
        flow += bottleneck
    # END EXERCISE aotautograd-maxflow
# --8<-- [end:max-flow]


def min_cut(network: FlowNetwork, source: Hashable, sink: Hashable) -> tuple[float, set]:
    """The value of a minimum ``source``/``sink`` cut and its source side (which contains
    ``source`` and not ``sink``). See [Note: max-flow min-cut]."""
    value = max_flow(network, source, sink)
    return value, network.reachable(source)

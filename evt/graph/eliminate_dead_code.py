"""Dead-code elimination: drop the views and GEMMs a lowering left without users."""

from __future__ import annotations

from torch.fx import Graph


def eliminate_dead_code(graph: Graph) -> Graph:
    graph.eliminate_dead_code()
    return graph

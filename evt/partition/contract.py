"""The graph with each region contracted to one vertex (networkx), for acyclicity checks."""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx
from torch.fx import Graph, Node


def contracted(graph: Graph, regions: Iterable[Iterable[Node]]) -> nx.DiGraph:
    owner: dict[Node, object] = {}
    for i, nodes in enumerate(regions):
        for n in nodes:
            owner[n] = ("region", i)
    g = nx.DiGraph()
    for node in graph.nodes:
        dst = owner.get(node, node)
        g.add_node(dst)
        for a in node.all_input_nodes:
            src = owner.get(a, a)
            if src != dst:
                g.add_edge(src, dst)
    return g


def is_acyclic(graph: Graph, regions: Iterable[Iterable[Node]]) -> bool:
    return nx.is_directed_acyclic_graph(contracted(graph, regions))

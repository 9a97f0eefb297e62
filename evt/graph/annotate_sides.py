"""Mark every node of the joint graph as forward or backward (`node.meta["evt_side"]`).

A node is backward when it depends on a tangent (an incoming gradient); everything else, and every
node of an inference graph, is forward. Regions never mix the two.
"""

from __future__ import annotations

from torch.fx import Graph, Node

SIDE = "evt_side"


def is_tangent(node: Node) -> bool:
    return node.op == "placeholder" and str(node.target).startswith("tangents")


def annotate_sides(graph: Graph) -> Graph:
    for node in graph.nodes:
        backward = is_tangent(node) or any(
            a.meta.get(SIDE) == "backward" for a in node.all_input_nodes
        )
        node.meta[SIDE] = "backward" if backward else "forward"
    return graph


def side(node: Node) -> str:
    return node.meta.get(SIDE, "forward")

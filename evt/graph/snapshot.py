"""A copy of an FX graph to put back where a rewrite fails half-way (evt's passes rewrite in
place, and the graph's owner keeps the object): the joint pass (`evt.backend.fuse_graph`) and the
Dynamo passes (`evt.pipeline.before_aot`) leave the graph as it came, with one warning."""

from __future__ import annotations

from torch.fx import Graph, Node


class Snapshot:
    def __init__(self, graph: Graph):
        self.saved, self.copies = Graph(), {}
        self.saved.output(self.saved.graph_copy(graph, self.copies))

    def restore(self, graph: Graph) -> None:
        """Make `graph` the copy again. Its input nodes (placeholders, get_attr) stay the same
        objects where none is gone (Dynamo's carry attributes of their own, `_dynamo_source`);
        else every node is made again."""
        inputs: list[Node] = [n for n in self.copies if n.op in ("placeholder", "get_attr")]
        alive = set(graph.nodes)
        kept = set(inputs) if all(n in alive for n in inputs) else set()
        gone = [n for n in graph.nodes if n not in kept]
        # A pass that failed half-way may have left a node before one it reads: drop every use
        # first, so that no erase finds a user left, whatever the nodes' order
        for node in gone:
            node.args, node.kwargs = (), {}
        for node in gone:
            graph.erase_node(node)
        graph.output(graph.graph_copy(self.saved, {self.copies[n]: n for n in kept}))

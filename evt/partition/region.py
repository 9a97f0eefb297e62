"""A region: one GEMM anchor plus the epilogue nodes fused into its kernel."""

from __future__ import annotations

from dataclasses import dataclass

from torch.fx import Node


@dataclass(frozen=True)
class Region:
    anchor: Node
    nodes: tuple[Node, ...]  # anchor first, then the epilogue nodes in graph order
    side: str  # "forward" | "backward"

    @property
    def epilogue(self) -> tuple[Node, ...]:
        return self.nodes[1:]

    def outputs(self) -> list[Node]:
        """Region nodes read outside the region, in graph order."""
        inside = set(self.nodes)
        return [n for n in self.nodes if any(u not in inside for u in n.users)]

    def inputs(self) -> list[Node]:
        """Nodes outside the region read by it, in first-use order."""
        inside, out = set(self.nodes), []
        for n in self.nodes:
            out += [a for a in n.all_input_nodes if a not in inside and a not in out]
        return out

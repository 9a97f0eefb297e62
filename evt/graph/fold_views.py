"""Fold chains of views: `view(view(x, s1), s2)` reads `x` itself when `s2` is `x`'s shape.

`sink_views` leaves `view(op(x), (B, S, N))` behind each epilogue op it flattens; a consumer that
flattens the result again (a Linear's backward: `view(grad, (B*S, N))`, then `sum(..., [0])` for
the bias gradient, or the next GEMM) then reads `view(view(op(x)))`, an alias of `op(x)` that no
epilogue recognizes as its own value. Pointing such consumers at `x` lets the region that computes
`op(x)` absorb them. Views are free, so the graph computes the same values.
"""

from __future__ import annotations

from typing import TypeGuard

from torch.fx import Graph, Node

from evt.graph.sink_views import VIEWS


def fold_views(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        source = _source(node)
        if source is not None:
            node.replace_all_uses_with(source)
            graph.erase_node(node)
    return graph


def _source(node: Node) -> Node | None:
    """The tensor a view chain ending at `node` re-reads unchanged, else None."""
    if not _is_view(node) or any(u.op == "output" for u in node.users):
        return None  # graph outputs keep their own tensors (no new aliasing between them)
    out = node.meta.get("val")
    x = node.args[0]
    while _is_view(x):
        x = x.args[0]
    val = x.meta.get("val") if isinstance(x, Node) else None
    if out is None or val is None or not isinstance(x, Node):
        return None
    same = tuple(val.shape) == tuple(out.shape) and val.stride() == out.stride()
    return x if same and val.dtype == out.dtype else None


def _is_view(node) -> TypeGuard[Node]:
    return isinstance(node, Node) and node.op == "call_function" and node.target in VIEWS

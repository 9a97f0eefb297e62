"""Fold chains of views: `view(view(x, s1), s2)` reads `x` itself when `s2` is `x`'s shape.

`sink_views` leaves `view(op(x), (B, S, N))` behind each epilogue op it flattens; a consumer that
flattens the result again (a Linear's backward: `view(grad, (B*S, N))`, then `sum(..., [0])` for
the bias gradient, or the next GEMM) then reads `view(view(op(x)))`, an alias of `op(x)` that no
epilogue recognizes as its own value. Pointing such consumers at `x` lets the region that computes
`op(x)` absorb them. Views are free, so the graph computes the same values.

Permutes join the chains: a pointwise convolution run as a GEMM (`pointwise_convs_as_mm`) reads
`view(permute(permute(view(h, (N, H, W, C)), (0, 3, 1, 2)), (0, 2, 3, 1)), (P, C))`, which is
`h` itself. Where a chain re-reads one of the tensors it passes through unchanged (the same
shape, strides and dtype), the consumer reads that tensor instead. (`alias` nodes stay: folding
them changed which ops attention's backward leaves to Inductor.)
"""

from __future__ import annotations

from typing import TypeGuard

import torch
from torch.fx import Graph, Node

from evt.graph.sink_views import VIEWS
from evt.graph.sizes import same_shape

CHAIN = (*VIEWS, torch.ops.aten.permute.default)


def fold_views(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        source = _source(node)
        if source is not None:
            node.replace_all_uses_with(source)
            graph.erase_node(node)
    return graph


def _source(node: Node) -> Node | None:
    """The deepest tensor a chain of views ending at `node` re-reads unchanged, else None."""
    if not _is_view(node) or any(u.op == "output" for u in node.users):
        return None  # graph outputs keep their own tensors (no new aliasing between them)
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor):
        return None
    found, x = None, node.args[0]
    while isinstance(x, Node):
        if _same(x.meta.get("val"), out):
            found = x
        if not _is_view(x):
            break
        x = x.args[0]
    return found


def _same(val, out: torch.Tensor) -> bool:
    """The same shape, strides and dtype; symbolic sizes where the shape environment proves them
    equal (`same_shape`: comparing SymInts with `==` would add a guard, and `B * S == 32` one
    that compiles the graph again at every other B * S)."""
    if not isinstance(val, torch.Tensor):
        return False
    return (
        val.dtype == out.dtype
        and same_shape(val.shape, out.shape)
        and same_shape(val.stride(), out.stride())
    )


def _is_view(node) -> TypeGuard[Node]:
    return isinstance(node, Node) and node.op == "call_function" and node.target in CHAIN

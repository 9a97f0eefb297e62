"""Sum a one-hot row without a reduction: for S = scatter(zeros([M, N]), 1, index, c), the one-hot
of cross-entropy's backward, and w the same along the row ([M, 1], or a scalar),

    sum(S * w, [1])  ->  in_range(index) * c * w        in_range = 0 <= index < N

Cross-entropy's backward is `log_softmax`'s: `g - exp(log_p) * sum(g, 1)` with
`g = one_hot(t) * -(grad / n)`. The sum of that one-hot row is the row's single nonzero term, so
this is the same number (one term, the same product), and the backward becomes pointwise: no row
reduction over the whole vocabulary, which Inductor runs as a looped reduction (GPT-2's dynamic
step: 646 us, where Inductor's own graph took 518; session 59), and which no epilogue can
compute before the subtraction that reads it. The two differ only where w is infinite (the sum
adds the other columns' `0 * inf`, NaN). An index outside [0, N), which torch's scatter rejects,
gives 0, as Inductor's lowering of the scatter (a compare with the column index) sums to.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from evt.graph.fake import make_node

aten, prims = torch.ops.aten, torch.ops.prims


def fold_one_hot_sums(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.sum.dim_IntList:
            match = _one_hot_sum(node)
            if match is not None:
                _fold(graph, node, *match)
    return graph


def _one_hot_sum(node: Node) -> tuple[Node, Node | None] | None:
    """(the scatter, the row-constant factor or None) where `node` sums a one-hot row."""
    if node.kwargs or len(node.args) < 2 or not isinstance(node.args[0], Node):
        return None
    x, dims = node.args[0], node.args[1]
    val = x.meta.get("val")
    if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point or val.ndim != 2:
        return None
    if not isinstance(dims, (list, tuple)) or len(dims) != 1 or dims[0] not in (1, -1):
        return None  # over the rows' columns only
    if x.target is aten.scatter.value:
        return (x, None) if _one_hot(x) else None
    if x.target is not aten.mul.Tensor:
        return None
    for s, w in (x.args, x.args[::-1]):
        if isinstance(s, Node) and s.target is aten.scatter.value and _one_hot(s) and _per_row(w, val):
            return s, w
    return None


def _one_hot(s: Node) -> bool:
    """scatter(zeros([M, N]), 1, index [M, 1] integers, number c): one c per row."""
    base, dim, index, c = s.args
    if s.kwargs or not isinstance(base, Node) or not isinstance(index, Node):
        return False
    if base.target is not aten.full.default or base.args[1] != 0 or dim not in (1, -1):
        return False
    if not isinstance(c, (int, float)) or isinstance(c, bool):
        return False
    idx = index.meta.get("val")
    return (isinstance(idx, torch.Tensor) and idx.ndim == 2 and idx.dtype in (torch.int64, torch.int32)
            and isinstance(idx.shape[1], int) and idx.shape[1] == 1)  # fmt: skip


def _per_row(w, x: torch.Tensor) -> bool:
    """Whether `w`, a factor of the [M, N] product `x`, is the same along each row: a number, a
    0-d tensor, or [M, 1] / [1] of `x`'s dtype (a wider dtype would change the product's)."""
    if isinstance(w, (int, float)) and not isinstance(w, bool):
        return True
    val = w.meta.get("val") if isinstance(w, Node) else None
    if not isinstance(val, torch.Tensor) or val.dtype != x.dtype:
        return False
    return val.ndim == 0 or (val.ndim <= 2 and isinstance(val.shape[-1], int) and val.shape[-1] == 1)


def _fold(graph: Graph, node: Node, scatter: Node, w) -> None:
    base, _, index, c = scatter.args
    dtype = node.meta["val"].dtype
    width = scatter.meta["val"].shape[1]
    with graph.inserting_before(node):
        if not isinstance(width, int):  # a symbolic N: its size node
            width = make_node(graph, aten.sym_size.int, (base, 1), {}, like=node)
        low = make_node(graph, aten.ge.Scalar, (index, 0), {}, like=node)
        high = make_node(graph, aten.lt.Scalar, (index, width), {}, like=node)
        hit = make_node(graph, aten.logical_and.default, (low, high), {}, like=node)
        one = make_node(graph, prims.convert_element_type.default, (hit, dtype), {}, like=node)
        term = make_node(graph, aten.mul.Tensor, (one, c), {}, like=node)
        if w is not None:
            term = make_node(graph, aten.mul.Tensor, (term, w), {}, like=node)
        keep = node.args[2] if len(node.args) > 2 else False
        if not keep:
            term = make_node(graph, aten.squeeze.dim, (term, 1), {}, like=node)
    node.replace_all_uses_with(term)
    graph.erase_node(node)

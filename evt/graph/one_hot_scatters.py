"""Rewrite a scatter-add of one value per row into a compare with the column index:

    scatter_add(x, 1, index, src)  ->  add(x, where(eq(iota(N), float(index)), src, 0))

for x an [M, N] float value, index [M, 1] integers and src [M, 1]: the one-hot of cross-entropy's
backward, `softmax(logits) - onehot(target)`, as a loss written by hand computes it from logits
a GEMM makes (`p.scatter_add(1, t[:, None], -1)`). A scatter is no op an epilogue can run; a
compare of the column index (a row broadcast of the N-vector `iota(N)`) with the row's target
(a column broadcast) is, so the GEMM's epilogue computes the whole gradient and stores it once in
bf16 instead of storing fp32 probabilities for Inductor's scatter to read.

The index is compared as float32: exact for N <= 2**24 (wider rows are left alone), and an
index outside [0, N) matches no column. torch's scatter_add raises for such an index where this
adds nothing: only an invalid target differs. Only scatters whose x comes from a GEMM on the same
side through epilogue ops are rewritten (elsewhere Inductor's own scatter stays); `src` that is a
constant `full` becomes a number.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import epilogue_expr
from evt.graph.fake import make_node, value
from evt.graph.fold_gemm_operands import GEMM

aten, prims = torch.ops.aten, torch.ops.prims
EXACT = 2**24  # float32 holds every integer up to here
INTEGERS = (torch.int64, torch.int32)


def rewrite_one_hot_scatters(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.scatter_add.default:
            if _one_hot(node):
                _rewrite(graph, node)
    return graph


def _one_hot(node: Node) -> bool:
    x, dim, index, src = node.args
    xv, iv, sv = vals = [value(a) for a in (x, index, src)]
    if any(not isinstance(v, torch.Tensor) for v in vals):
        return False
    if xv.dim() != 2 or dim not in (1, -1) or not xv.dtype.is_floating_point:
        return False
    M, N = xv.shape
    if not isinstance(N, int) or N > EXACT or iv.dtype not in INTEGERS:
        return False
    if tuple(iv.shape) != (M, 1) or tuple(sv.shape) != (M, 1) or sv.dtype != xv.dtype:
        return False
    return _from_gemm(x, side(node))


def _from_gemm(x: Node, where: str) -> bool:
    """Whether `x` is a same-side GEMM's output through ops an epilogue computes."""
    todo, seen = [x], set()
    while todo:
        n = todo.pop()
        if n in seen or not isinstance(n, Node) or side(n) != where:
            continue
        seen.add(n)
        if GEMM in n.meta:
            return True
        if epilogue_expr(n) is not None:
            todo += n.all_input_nodes
    return False


def _rewrite(graph: Graph, node: Node) -> None:
    x, _, index, src = node.args
    N = x.meta["val"].shape[1]
    constant = _constant(src)
    device = x.meta["val"].device
    with graph.inserting_before(node):
        iota = make_node(graph, prims.iota.default, (N,), dict(
            start=0, step=1, dtype=torch.int64, device=device, requires_grad=False), node, "columns")  # fmt: skip
        cast, f32 = prims.convert_element_type.default, torch.float32
        iota = make_node(graph, cast, (iota, f32), {}, node, "column_index")
        target = make_node(graph, cast, (index, f32), {}, node, "target_index")
        hit = make_node(graph, aten.eq.Tensor, (iota, target), {}, node, "one_hot")
        if constant is not None:
            picked = make_node(graph, aten.where.Scalar, (hit, constant, 0.0), {}, node, "one_hot_value")
        else:
            picked = make_node(graph, aten.where.ScalarOther, (hit, src, 0.0), {}, node, "one_hot_value")
        if picked.meta["val"].dtype != x.meta["val"].dtype:
            picked = make_node(graph, cast, (picked, x.meta["val"].dtype), {}, node, "one_hot_value")
        out = make_node(graph, aten.add.Tensor, (x, picked), {}, node, "plus_one_hot")
    node.replace_all_uses_with(out)
    graph.erase_node(node)
    if isinstance(src, Node) and not src.users:
        graph.erase_node(src)


def _constant(src) -> float | None:
    """The fill value of `full(shape, v)`, else None."""
    if isinstance(src, Node) and src.target is aten.full.default and len(src.args) == 2:
        v = src.args[1]
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return None


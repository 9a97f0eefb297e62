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

import contextlib

import torch
from torch._guards import detect_fake_mode
from torch.fx import Graph, Node

from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import epilogue_expr
from evt.graph.fold_gemm_operands import GEMM

aten, prims = torch.ops.aten, torch.ops.prims
EXACT = 2**24  # float32 holds every integer up to here


def rewrite_one_hot_scatters(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.scatter_add.default:
            if _one_hot(node):
                _rewrite(graph, node)
    return graph


def _one_hot(node: Node) -> bool:
    x, dim, index, src = node.args
    vals = [a.meta.get("val") if isinstance(a, Node) else None for a in (x, index, src)]
    if any(not isinstance(v, torch.Tensor) for v in vals):
        return False
    xv, iv, sv = vals
    if xv.dim() != 2 or dim not in (1, -1) or not xv.dtype.is_floating_point:
        return False
    M, N = xv.shape
    if not isinstance(N, int) or N > EXACT or iv.dtype not in (torch.int64, torch.int32):
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
    value = _constant(src)
    device = x.meta["val"].device
    with graph.inserting_before(node):
        iota = new_node(graph, node, "columns", prims.iota.default, (N,), dict(
            start=0, step=1, dtype=torch.int64, device=device, requires_grad=False))  # fmt: skip
        f32 = torch.float32
        iota = new_node(graph, node, "column_index", prims.convert_element_type.default, (iota, f32))
        target = new_node(graph, node, "target_index", prims.convert_element_type.default, (index, f32))
        hit = new_node(graph, node, "one_hot", aten.eq.Tensor, (iota, target))
        if value is not None:
            picked = new_node(graph, node, "one_hot_value", aten.where.Scalar, (hit, value, 0.0))
        else:
            picked = new_node(graph, node, "one_hot_value", aten.where.ScalarOther, (hit, src, 0.0))
        if picked.meta["val"].dtype != x.meta["val"].dtype:
            picked = new_node(graph, node, "one_hot_value", prims.convert_element_type.default,
                          (picked, x.meta["val"].dtype))  # fmt: skip
        out = new_node(graph, node, "plus_one_hot", aten.add.Tensor, (x, picked))
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


def new_node(graph: Graph, like: Node, name: str, target, args: tuple, kwargs: dict | None = None) -> Node:
    """A new node beside `like` (its side and stack), named for the generated code, with its
    fake value."""
    n = graph.create_node("call_function", target, args, kwargs or {}, name=name)
    n.meta.update({k: v for k, v in like.meta.items() if k != "val"})
    n.meta["val"] = fake_result(n, like)
    return n


def fake_result(n: Node, like: Node | None = None):
    """`n`'s value computed on its inputs' fake values (in their fake mode, or `like`'s)."""
    vals = [a.meta["val"] if isinstance(a, Node) else a for a in n.args]
    seen = [(like or n).meta.get("val"), *(v for v in vals if isinstance(v, torch.Tensor))]
    with detect_fake_mode(seen) or contextlib.nullcontext():
        return n.target(*vals, **n.kwargs)

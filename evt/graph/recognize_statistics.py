"""Rewrite the row statistics of a GEMM's output into ops an epilogue can compute (over N).

    sum(exp(x - amax(x, [-1], True)), [-1], k)  ->  evt::softmax_sum(x, k, False)
        (softmax, log_softmax, cross-entropy; `amax` stays: a max over N of its own; also
        `amax(x, [-1]).unsqueeze(-1)`, the `x - m[:, None]` of hand-written code)
    sum(exp(x - where(|m| == inf, 0, m)), [-1], k), m = amax(x, [-1], True)
                                                ->  evt::softmax_sum(x, k, True)   (logsumexp)
    var_mean(x, [-1], correction=c, keepdim=k)  ->  var(x, ...), mean(x, ...)   (LayerNorm)
    var_mean(x, [0], ...) of an [M, N] x        ->  the same over M            (BatchNorm1d)

`x - m`, `exp` and the rest of softmax stay where they are (they need the finished row); the sum
no longer reads them, so a region can hold `amax` and the sum next to the GEMM. Only values an
epilogue of a GEMM could compute are rewritten (`near_gemm`); `restore_statistics` undoes the
softmax rewrite where no region took the op. Rules are keyed on the aten target of the root.
"""

from __future__ import annotations

import math
import operator

import torch
from torch.fx import Graph, Node

from evt.graph.epilogue_rules import epilogue_expr, is_reduction, tensor_args
from evt.graph.fold_gemm_operands import GEMM
from evt.graph.sizes import same_shape
from evt.graph.statistics_ops import SOFTMAX_SUM

aten = torch.ops.aten


def recognize_statistics(graph: Graph) -> Graph:
    near: dict[Node, bool] = {}
    for node in list(graph.nodes):
        rule = RULES.get(node.target) if node.op == "call_function" else None
        if rule is not None:
            rule(graph, node, near)
    return graph


def near_gemm(x: Node, memo: dict[Node, bool]) -> bool:
    """Whether some GEMM's epilogue could compute `x`: a GEMM, or an epilogue op (not a
    reduction) of something near a GEMM of the same shape."""
    if x not in memo:
        expr = epilogue_expr(x)
        shape = getattr(x.meta.get("val"), "shape", None)
        memo[x] = GEMM in x.meta or (
            expr is not None and not is_reduction(x)
            and any(_same_shape(getattr(a.meta.get("val"), "shape", None), shape) and near_gemm(a, memo)
                    for a in tensor_args(expr))
        )  # fmt: skip
    return memo[x]


def _same_shape(a, b) -> bool:
    return a is not None and b is not None and same_shape(a, b)


def _last_dim(x: Node, dims) -> bool:
    rank = x.meta["val"].dim()
    return rank in (2, 3) and [d % rank for d in dims or ()] == [rank - 1]


def _first_of_two(x: Node, dims) -> bool:
    """Whether `dims` is M of a 2-D `x` (a batch's rows: BatchNorm1d's statistics)."""
    return x.meta["val"].dim() == 2 and [d % 2 for d in dims or ()] == [0]


def _call(node, target) -> Node | None:
    """`node` if it is a call of `target`, else None."""
    ok = isinstance(node, Node) and node.op == "call_function" and node.target is target
    return node if ok else None


def _shift(sub: Node) -> tuple[Node, Node, bool] | None:
    """(x, amax(x), zero_inf_max) of `sub = x - shift` when the shift is softmax's or logsumexp's."""
    if _call(sub, aten.sub.Tensor) is None or sub.kwargs.get("alpha", 1) != 1:
        return None
    x, shift = sub.args[0], sub.args[1]
    masked = _call(shift, aten.where.ScalarSelf)
    if masked is not None:  # where(abs(m) == inf, 0, m)
        cond, zero, shift = masked.args
        eq = _call(cond, aten.eq.Scalar)
        abs_ = _call(eq.args[0], aten.abs.default) if eq is not None else None
        if zero != 0 or abs_ is None or eq.args[1] != math.inf or abs_.args[0] is not shift:
            return None
    amax = _call(shift, aten.amax.default)
    keepdim = amax is not None and len(amax.args) > 2 and bool(amax.args[2])
    if amax is None:  # amax(x, [-1]) without keepdim, then unsqueezed back: m[:, None]
        amax = _unsqueezed_amax(shift)
        keepdim = amax is not None
    dims = amax.args[1] if amax is not None and len(amax.args) > 1 else None
    if amax is None or amax.args[0] is not x or not _last_dim(x, dims):
        return None
    return (x, amax, masked is not None) if keepdim else None


def _unsqueezed_amax(node) -> Node | None:
    """`amax(x, [-1])` (no keepdim) if `node` is it unsqueezed at the last dim, else None."""
    unsqueeze = _call(node, aten.unsqueeze.default)
    amax = _call(unsqueeze.args[0], aten.amax.default) if unsqueeze is not None else None
    if amax is None or (len(amax.args) > 2 and amax.args[2]):
        return None
    rank = unsqueeze.meta["val"].dim()
    return amax if unsqueeze.args[1] % rank == rank - 1 else None


def _softmax_sum(graph: Graph, node: Node, near: dict[Node, bool]) -> None:
    exp = _call(node.args[0], aten.exp.default)
    found = _shift(exp.args[0]) if exp is not None else None
    if found is None or not _last_dim(exp, node.args[1]) or set(node.kwargs) - {"keepdim"}:
        return
    x, _, zero_inf_max = found
    if not near_gemm(x, near):
        return
    keepdim = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
    with graph.inserting_before(node):
        new = graph.call_function(SOFTMAX_SUM, (x, keepdim, zero_inf_max))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    _erase_dead(graph, node)


def _split_var_mean(graph: Graph, node: Node, near: dict[Node, bool]) -> None:
    x, dims = node.args[0], node.args[1] if len(node.args) > 1 else None
    items = list(node.users)
    ok = all(u.target is operator.getitem and u.args[1] in (0, 1) for u in items)
    over = isinstance(x, Node) and (_last_dim(x, dims) or _first_of_two(x, dims))
    if not (over and ok and near_gemm(x, near)):
        return
    keepdim = node.kwargs.get("keepdim", False)
    for item in items:
        with graph.inserting_before(item):
            if item.args[1] == 0:
                kwargs = {"correction": node.kwargs.get("correction"), "keepdim": keepdim}
                new = graph.call_function(aten.var.correction, (x, dims), kwargs)
            else:
                new = graph.call_function(aten.mean.dim, (x, dims, keepdim))
        new.meta.update(item.meta)
        item.replace_all_uses_with(new)
        graph.erase_node(item)
    graph.erase_node(node)


def _erase_dead(graph: Graph, node: Node) -> None:
    """Erase `node` and then whichever of its inputs it leaves without users (not placeholders)."""
    todo = [node]
    while todo:
        n = todo.pop()
        if n.users or n.op != "call_function":
            continue
        inputs = n.all_input_nodes
        graph.erase_node(n)
        todo += inputs


RULES = {
    aten.sum.dim_IntList: _softmax_sum,
    aten.var_mean.correction: _split_var_mean,
}

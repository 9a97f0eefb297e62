"""Reduce a Linear's output over its rows where the graph reduces a transposed view of it.

BatchNorm1d normalizes the channels of a [B, C, L] value. A model whose Linear gives [B, L, C]
transposes it first (PatchTST's and other time-series transformers' `Transpose(1, 2),
BatchNorm1d(C), Transpose(1, 2)`), so its batch statistics reduce over dims 0 and 2 of

    permute(view(h, (B, L, C)), (0, 2, 1))          h: the Linear's [M = B*L, C] output

which are all of h's rows: they are the statistics over M that a BatchNorm1d of the 2-D h takes,
and the epilogue computes those (`ColumnWelfordStats`). Its backward sums the gradient, and the
gradient times the centred input, over the same dims. This pass rewrites such reductions

    var_mean(t, dims, keepdim=k)  ->  view(var_mean(h, [0], keepdim=True)[i], shape)   (both items)
    sum / mean / amax / var(t, dims, keepdim=k)  ->  view(that of h over [0], shape)

where `t` is views and permutes of a 2-D `h` (a GEMM's result through epilogue ops:
`sink_views.from_gemm`) that keep h's columns whole in one dimension of size N (its last
dimension in h, moved anywhere by the permutes), and `dims` are all the others: each output
element reduces exactly one of h's columns. The result has one dimension larger than 1, so a
view gives it its shape. The same elements are reduced; only their order can differ, as it does
in any kernel.

`sink_views` runs first: it moves the elementwise ops between the permute and the reduction
(the centring of the backward's `sum(dY * (x - mean))`) above the permute.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Graph, Node

from evt.graph.fake import make_node
from evt.graph.sink_views import VIEWS, from_gemm
from evt.graph.sizes import is_static, same_size

aten = torch.ops.aten
KEEPDIM_ARG = (aten.sum.dim_IntList, aten.mean.dim, aten.amax.default)  # keepdim is args[2]
KEEPDIM_KWARG = (aten.var.correction, aten.var_mean.correction)  # keepdim is a keyword


def unpermute_reductions(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in (*KEEPDIM_ARG, *KEEPDIM_KWARG):
            source = _column_source(node)
            if source is not None:
                _rewrite(node, source)
    return graph


def _column_source(node: Node) -> Node | None:
    """h where `node` reduces each of h's columns whole through views and permutes, else None."""
    x = node.args[0]
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if not isinstance(x, Node) or not dims or set(node.kwargs) - {"dtype", "keepdim", "correction", "dim"}:
        return None
    if node.target is aten.var_mean.correction and not all(u.target is operator.getitem for u in node.users):
        return None
    val, out = x.meta.get("val"), node.meta.get("val")
    out = out[0] if isinstance(out, tuple) else out
    if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor) or not is_static(out.shape):
        return None
    found = _column_dim(x)
    if found is None:
        return None
    column, source = found
    if sorted({d % val.dim() for d in dims}) != [d for d in range(val.dim()) if d != column]:
        return None
    if source is x or not from_gemm(source):
        return None  # h over [0] as it is: the epilogue rules see it already
    return source


def _column_dim(x: Node) -> tuple[int, Node] | None:
    """(d, h): `x` is views and permutes of a 2-D `h` whose dimension d holds h's columns whole
    (h's last dimension, of size N; every other dimension splits or merges h's rows)."""
    chain = []
    while x.op == "call_function" and (x.target in VIEWS or x.target is aten.permute.default):
        chain.append(x)
        x = x.args[0]
        if not isinstance(x, Node):
            return None
    val = x.meta.get("val")
    if not chain or not isinstance(val, torch.Tensor) or val.dim() != 2:
        return None
    where = 1  # the dimension of the value so far that holds the columns
    for step in reversed(chain):
        before, out = step.args[0].meta["val"], step.meta.get("val")
        if not isinstance(out, torch.Tensor):
            return None
        if step.target is aten.permute.default:
            where = [p % out.dim() for p in step.args[1]].index(where)
        elif where == before.dim() - 1 and same_size(out.shape[-1], val.shape[1]):
            where = out.dim() - 1  # a view keeps the columns as its last dimension, unsplit
        else:
            return None
    return where, x


def _rewrite(node: Node, source: Node) -> None:
    graph, x = node.graph, node.args[0]
    kwargs = {k: v for k, v in node.kwargs.items() if k in ("dtype", "correction")}
    out = node.meta["val"][0] if node.target is aten.var_mean.correction else node.meta["val"]
    keepdim = out.dim() != 1  # [N] as it is; any other shape a view of [1, N]
    with graph.inserting_before(node):
        if node.target in KEEPDIM_KWARG:
            flat = make_node(graph, node.target, (source, [0]), {**kwargs, "keepdim": keepdim}, node)
        else:
            flat = make_node(graph, node.target, (source, [0], keepdim), kwargs, node)
    if node.target is not aten.var_mean.correction:
        _replace(node, flat)
    else:
        for item in list(node.users):  # var_mean's items: var, mean
            with graph.inserting_before(item):
                part = make_node(graph, operator.getitem, (flat, item.args[1]), {}, item)
            _replace(item, part)
        graph.erase_node(node)
    while x is not source and not x.users:  # views and permutes only the reduction read: a
        x, dead = x.args[0], x  # reader of the value outside a region makes the region store it
        graph.erase_node(dead)


def _replace(node: Node, value: Node) -> None:
    """Point `node`'s users at `value` (a reduction to [1, N] or [N]) viewed to `node`'s shape
    (one dimension of N, the rest ones), and erase `node`."""
    graph = node.graph
    shape = list(node.meta["val"].shape)
    with graph.inserting_after(value):
        back = value if shape == list(value.meta["val"].shape) else make_node(
            graph, aten.view.default, (value, shape), {}, node)  # fmt: skip
    node.replace_all_uses_with(back)
    graph.erase_node(node)

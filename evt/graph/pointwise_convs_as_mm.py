"""Run pointwise (1x1) convolutions on channels-last activations as matrix multiplies.

A convolution whose kernel is 1 wide in every spatial dimension, with stride 1, no padding, no
dilation and one group, is a GEMM over the pixels: on a channels-last [N, C, *S] activation
(`permute(x, (0, 2, ..., 1))` contiguous, the layout of `x.to(memory_format=channels_last)`)
the pixels are the rows of a [N*prod(S), C] matrix, and

    convolution(x, w, b)  ->  permute(view(addmm(b, view(permute(x), (P, Cin)), wᵀ),
                                           (N, *S, Cout)), (0, d+1, 1, ..., d))

with wᵀ = permute(view(w, (Cout, Cin)), (1, 0)): the result is a view laid out as the
convolution's own channels-last result. Its backward, for a channels-last gradient g viewed as
the [P, Cout] matrix G, is two GEMMs and a sum:

    grad_input = permute(view(mm(G, view(w, (Cout, Cin))), (N, *S, Cin)), ...)
    grad_weight = view(mm(permute(G, (1, 0)), X), w.shape)      grad_bias = sum(G, [0])

so the ops after them (BatchNorm2d's batch statistics, which `unpermute_reductions` turns into
statistics over the GEMM's rows; ReLU and its backward; a residual add) can join their epilogues,
as they do after a Linear. Every view is free; nothing is copied. A convolution is left as it is
where any condition fails: another kernel size, stride, padding, dilation or group count, a
transposed convolution, an activation (or gradient) not laid out channels-last (proven so, for
symbolic sizes), a symbolic size not computed from the graph's SymInt inputs, or a result whose
strides would differ from the convolution's own. cuDNN runs those, as before, and all of them
under `EVT_POINTWISE_CONVS=0`. Under `dynamic=True` the views' sizes are nodes computing them
from the graph's SymInt inputs (`sink_views.size_args`).
"""

from __future__ import annotations

import operator
import os

import torch
from torch.fx import Graph, Node

from evt import debug
from evt.graph.fake import make_node
from evt.graph.sink_views import inverse, laid_out_as, size_args
from evt.graph.sizes import is_static, same_shape, same_size

aten = torch.ops.aten


# the convolutions' positional arguments, and where their geometry (stride .. groups) starts
ARGS = {aten.convolution.default: (9, 3), aten.convolution_backward.default: (11, 4)}


def pointwise_convs_as_mm(graph: Graph) -> Graph:
    if os.environ.get("EVT_POINTWISE_CONVS", "1") == "0":
        return graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in ARGS or node.kwargs:
            continue
        count, at = ARGS[node.target]
        if len(node.args) != count or not _pointwise(node, node.args[at : at + 6]):
            continue
        start = node.prev  # the rewrite inserts its nodes between start and node
        try:
            done = (_forward if node.target is aten.convolution.default else _backward)(node)
        except Exception as e:  # noqa: BLE001 - a weight no view reshapes, say: cuDNN runs it
            done = False
            debug.log(
                1,
                f"pointwise_convs_as_mm: {node.name} stays a convolution ({type(e).__name__}: {e})",
            )
        if not done:
            _erase_between(start, node)
    return graph


def _pointwise(node: Node, geometry) -> bool:
    """Whether `node`'s weight (args[1] forward, args[2] backward) is 1 wide in every spatial
    dimension and its (stride, padding, dilation, transposed, output_padding, groups) are
    those of a GEMM over the pixels, for a weight of static sizes."""
    weight = node.args[1] if node.target is aten.convolution.default else node.args[2]
    w = weight.meta.get("val") if isinstance(weight, Node) else None
    if not isinstance(w, torch.Tensor) or w.dim() < 3 or not is_static(w.shape):
        return False
    stride, padding, dilation, transposed, output_padding, groups = geometry
    spatial = w.dim() - 2
    return (tuple(w.shape[2:]) == (1,) * spatial and transposed is False and groups == 1
            and _all(stride, 1, spatial) and _all(padding, 0, spatial)
            and _all(dilation, 1, spatial) and _all(output_padding, 0, spatial))  # fmt: skip


def _all(values, want: int, count: int) -> bool:
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    return all(v == want for v in values) and len(values) in (1, count)


def _to_map(rank: int) -> list[int]:
    """The permute that takes a dense [N, *S, C] value to the [N, C, *S] map of `rank` dims it
    is laid out as channels-last (its inverse takes such a map to its pixel rows)."""
    return [0, rank - 1, *range(1, rank - 1)]


def _channels_last(a) -> bool:
    """Whether `a` is a node whose static value is laid out channels-last: its channels the
    innermost dimension, its pixels the rows of a dense [P, C] matrix."""
    val = a.meta.get("val") if isinstance(a, Node) else None
    return isinstance(val, torch.Tensor) and val.dim() >= 3 and laid_out_as(a, _to_map(val.dim()))


def _rows(graph: Graph, x: Node, like: Node) -> Node:
    """The [P, C] matrix of channels-last `x` [N, C, *S]: a view of its permute."""
    val = x.meta["val"]
    moved = make_node(graph, aten.permute.default, (x, inverse(_to_map(val.dim()))), {}, like)
    sizes = size_args(graph, [val.numel() // val.shape[1], val.shape[1]], like)
    return make_node(graph, aten.view.default, (moved, sizes), {}, like)


def _pixels(graph: Graph, rows: Node, like_val: torch.Tensor, like: Node) -> Node:
    """[P, C'] `rows` viewed as the [N, C', *S] channels-last value whose other sizes are
    `like_val`'s."""
    n, spatial = like_val.shape[0], list(like_val.shape[2:])
    channels = rows.meta["val"].shape[1]
    sizes = size_args(graph, [n, *spatial, channels], like)
    viewed = make_node(graph, aten.view.default, (rows, sizes), {}, like)
    return make_node(graph, aten.permute.default, (viewed, _to_map(len(spatial) + 2)), {}, like)


def _matrix(graph: Graph, w: Node, like: Node) -> Node:
    """The [Cout, Cin] matrix of a pointwise weight."""
    shape = w.meta["val"].shape
    return make_node(graph, aten.view.default, (w, [shape[0], shape[1]]), {}, like)


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same sizes and dtype, and the same strides wherever a size is above 1 (symbolic ones as
    `sizes.same_size` proves them: no guard)."""
    strides = zip(a.stride(), b.stride(), a.shape)
    return (a.dtype == b.dtype and same_shape(a.shape, b.shape)
            and all(same_size(x, y) for x, y, n in strides if not same_size(n, 1)))  # fmt: skip


def _forward(node: Node) -> bool:
    """The convolution's result from a GEMM (True), or False where it stays as it is."""
    x, w, bias = node.args[:3]
    if not _channels_last(x) or not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    graph = node.graph
    with graph.inserting_before(node):
        rows = _rows(graph, x, node)
        weight = make_node(graph, aten.permute.default, (_matrix(graph, w, node), [1, 0]), {}, node)
        if bias is None:
            out = make_node(graph, aten.mm.default, (rows, weight), {}, node)
        else:
            out = make_node(graph, aten.addmm.default, (bias, rows, weight), {}, node)
        result = _pixels(graph, out, node.meta["val"], node)
    if not _same_layout(result.meta["val"], node.meta["val"]):
        return False  # laid out otherwise than cuDNN's result
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    return True


def _backward(node: Node) -> bool:
    """The gradients from GEMMs and a sum (True), or False where the node stays as it is."""
    grad, x, w = node.args[:3]
    mask = node.args[10]
    vals = node.meta.get("val")
    if not _channels_last(grad) or (mask[1] and not _channels_last(x)):
        return False  # (the input's layout matters only to the weight's gradient)
    if not isinstance(vals, (tuple, list)) or not isinstance(x.meta.get("val"), torch.Tensor):
        return False
    if not all(u.target is operator.getitem for u in node.users):
        return False
    graph = node.graph
    made: dict[int, Node] = {}
    with graph.inserting_before(node):
        g = _rows(graph, grad, node)
        if mask[0]:
            dgrad = make_node(graph, aten.mm.default, (g, _matrix(graph, w, node)), {}, node)
            made[0] = _pixels(graph, dgrad, x.meta["val"], node)
        if mask[1]:
            gt = make_node(graph, aten.permute.default, (g, [1, 0]), {}, node)
            wgrad = make_node(graph, aten.mm.default, (gt, _rows(graph, x, node)), {}, node)
            made[1] = make_node(
                graph, aten.view.default, (wgrad, list(w.meta["val"].shape)), {}, node
            )
        if mask[2]:
            made[2] = make_node(graph, aten.sum.dim_IntList, (g, [0]), {}, node)
    if any(not _same_layout(made[i].meta["val"], vals[i]) for i in made):
        return False
    for item in list(node.users):
        item.replace_all_uses_with(made[item.args[1]])
        graph.erase_node(item)
    graph.erase_node(node)
    return True


def _erase_between(start: Node, end: Node) -> None:
    """Erase the nodes inserted between `start` and `end` (a rewrite given up), last first."""
    while end.prev is not start:
        end.graph.erase_node(end.prev)

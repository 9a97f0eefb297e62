"""Index by one constant position as a slice: for `c`, a one-element integer constant (a list
index in the program, `x[..., [-2], :]`), and n the size of dimension d,

    index(x, [.., c at d])                   ->  slice(x, d, p, p + 1)           p = c mod n
    index_put(b, [.., c at d], v, add)       ->  slice_scatter(b, slice(b, d, p, p + 1) + v, d, p, p + 1)
    index_put(b, [.., c at d], v, replace)   ->  slice_scatter(b, v, d, p, p + 1)

Falcon's multi-query attention takes its one key and value head from the fused QKV projection so
(`fused_qkv[..., [-2], :]`, `[..., [-1], :]`). Through Inductor on the CPU its gradients came out
wrong: the joint graph's constant folding (`constant_fold_uniform_value`) turns those index
constants into `full` tensors, and with SDPA after them the query, key and value gradients were
off by more than 100% (session 61; `torch._inductor.config.joint_graph_constant_folding = False`
or slices give eager's; torch.compile alone is as wrong). A slice is the same value without a
gather (a view), and its backward a slice scatter, which Inductor lowers as it does any slice.

The constant's value is read from the graph's module (its `get_attr`); a graph without one, an
index of more than one position, a position outside [-n, n), a symbolic n, or values whose shape
is not the slice's are left alone.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.fx import Graph, Node

from evt.graph.fake import make_node
from evt.graph.sizes import same_shape

aten = torch.ops.aten


def constant_indices_as_slices(graph: Graph) -> Graph:
    module = graph.owning_module
    if module is None:
        return graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (aten.index.Tensor, aten.index_put.default):
            continue
        found = _position(module, node)
        if found is not None:
            _rewrite(graph, node, *found)
    return graph


def _position(module, node: Node) -> tuple[int, int] | None:
    """(d, p): `node` indexes dimension d of its first argument at the one position p alone."""
    x, indices = node.args[0], node.args[1]
    if node.kwargs or not isinstance(indices, (list, tuple)):
        return None
    used = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(used) != 1 or not isinstance(x, Node) or not isinstance(x.meta.get("val"), torch.Tensor):
        return None
    d, index = used[0]
    value = _constant(module, index)
    size = x.meta["val"].shape[d] if d < x.meta["val"].ndim else None
    if value is None or not isinstance(size, int) or not -size <= value < size:
        return None
    return d, value % size


def _constant(module, index) -> int | None:
    """The value of a one-element integer constant (`lift_fresh_copy` of a module attribute)."""
    if isinstance(index, Node) and index.target is aten.lift_fresh_copy.default:
        index = index.args[0]
    if not isinstance(index, Node) or index.op != "get_attr":
        return None
    try:
        tensor = getattr(module, index.target)
    except AttributeError:
        return None
    if not isinstance(tensor, torch.Tensor) or isinstance(tensor, FakeTensor):  # no value to read
        return None
    if tensor.dtype not in (torch.int64, torch.int32):
        return None
    if tensor.ndim != 1 or tensor.numel() != 1 or tensor.is_meta:
        return None
    with unset_fake_temporarily():  # the passes run in the graph's fake mode: read the real value
        return int(tensor.item())


def _rewrite(graph: Graph, node: Node, d: int, p: int) -> None:
    x = node.args[0]
    with graph.inserting_before(node):
        if node.target is aten.index.Tensor:
            new = make_node(graph, aten.slice.Tensor, (x, d, p, p + 1), {}, like=node)
        else:
            values, accumulate = node.args[2], node.args[3] if len(node.args) > 3 else False
            if not isinstance(values, Node) or not isinstance(values.meta.get("val"), torch.Tensor):
                return
            position = list(x.meta["val"].shape)
            position[d] = 1  # the slice's shape
            if not same_shape(values.meta["val"].shape, position):
                return
            if accumulate:
                part = make_node(graph, aten.slice.Tensor, (x, d, p, p + 1), {}, like=node)
                values = make_node(graph, aten.add.Tensor, (part, values), {}, like=node)
            new = make_node(graph, aten.slice_scatter.default, (x, values, d, p, p + 1), {}, like=node)
    node.replace_all_uses_with(new)
    graph.erase_node(node)

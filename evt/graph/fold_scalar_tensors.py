"""Fold constant 0-d tensors into the `where` calls that read them.

Inductor's decompositions write a constant branch of `where` as a `scalar_tensor` node, e.g. ReLU-
like backwards: `where(mask, scalar_tensor(0), grad)`. A 0-d tensor is no value an epilogue can
load, so the partitioner would have to keep the `where` out of every region. This rewrites

    where.self(c, scalar_tensor(v), x)  ->  where.ScalarSelf(c, v, x)

(`ScalarOther` for the other branch, `Scalar` for both) whenever the result keeps its dtype, and
drops `scalar_tensor` nodes left without users. Inductor lowers the Scalar overloads directly.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from evt.graph.fake import fake_value

aten = torch.ops.aten
# which of where's value branches are numbers -> the overload
WHERE = {
    (False, False): aten.where.self,
    (True, False): aten.where.ScalarSelf,
    (False, True): aten.where.ScalarOther,
    (True, True): aten.where.Scalar,
}


def fold_scalar_tensors(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.where.self:
            _fold(node)
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.scalar_tensor.default:
            if not node.users:
                graph.erase_node(node)
    return graph


def constant(a) -> float | int | None:
    """The value of `scalar_tensor(v)` (a literal), else None."""
    if not isinstance(a, Node) or a.op != "call_function":
        return None
    if a.target is not aten.scalar_tensor.default or not isinstance(a.args[0], (int, float)):
        return None
    return None if isinstance(a.args[0], bool) else a.args[0]


def _fold(node: Node) -> None:
    cond, a, b = node.args
    values = [constant(a), constant(b)]
    target = WHERE[(values[0] is not None, values[1] is not None)]
    if target is aten.where.self:
        return
    args = (cond, *(v if v is not None else x for v, x in zip(values, (a, b))))
    val = node.meta.get("val")
    if val is None or fake_value(target, args).dtype != val.dtype:
        return
    node.target, node.args = target, args


"""Turn each `evt::softmax_sum` no region took back into the aten ops it stands for.

    evt::softmax_sum(x, k, z)  ->  sum(exp(x - c), [-1], k),  c = amax(x, [-1], True),
                                   or where(abs(c) == inf, 0, c) with z (logsumexp)

so that Inductor compiles softmax as it would have without evt (the op has no lowering of its
own). Runs after `lower_regions`; `recognize_statistics` wrote the op.
"""

from __future__ import annotations

import math

import torch
from torch._guards import detect_fake_mode
from torch.fx import Graph, Node

from evt.graph.statistics_ops import SOFTMAX_SUM

aten = torch.ops.aten


def restore_statistics(graph: Graph) -> Graph:
    for node in list(graph.find_nodes(op="call_function", target=SOFTMAX_SUM)):
        _restore(graph, node)
    return graph


def _restore(graph: Graph, node: Node) -> None:
    x, keepdim, zero_inf_max = node.args
    with graph.inserting_before(node):
        call = _Caller(graph, node)
        shift = amax = call(aten.amax.default, x, [-1], True)
        if zero_inf_max:
            is_inf = call(aten.eq.Scalar, call(aten.abs.default, amax), math.inf)
            shift = call(aten.where.ScalarSelf, is_inf, 0.0, amax)
        exp = call(aten.exp.default, call(aten.sub.Tensor, x, shift))
        total = call(aten.sum.dim_IntList, exp, [-1], keepdim)
    node.replace_all_uses_with(total)
    graph.erase_node(node)


class _Caller:
    """Add calls before a node, each with its fake value and the node's other metadata."""

    def __init__(self, graph: Graph, like: Node):
        self.graph, self.like = graph, like
        self.mode = detect_fake_mode([like.meta["val"]])

    def __call__(self, target, *args) -> Node:
        node = self.graph.call_function(target, args)
        node.meta.update({k: v for k, v in self.like.meta.items() if k != "val"})
        vals = [a.meta["val"] if isinstance(a, Node) else a for a in args]
        with self.mode if self.mode is not None else torch._subclasses.FakeTensorMode():
            node.meta["val"] = target(*vals)
        return node

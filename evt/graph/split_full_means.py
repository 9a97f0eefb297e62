"""Split a float32 mean over every element into a sum and a division: `mean(x)` ->
`div(sum(x), numel)`.

An MSE loss ends in `mean(pow(y - target, 2))`. An epilogue can reduce over everything (a scalar
reduction) but not divide the result afterwards (a reduced value exists only after the kernel),
so the whole mean stayed outside and the region stored the [M, N] squares in float32 for it. With
the sum apart, the GEMM's epilogue computes it and only the division of one number is left
outside. torch's mean is that same sum and division for float32; other dtypes are left alone (a
bf16 sum would round before the division). It runs after `sink_views`, and sums the value a view
was taken of (the GEMM's own [M, N] rather than a [B, S, N] view of it).
"""

from __future__ import annotations

import torch
from torch.fx import Graph

from evt.graph.sink_views import VIEWS

aten = torch.ops.aten


def split_full_means(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.mean.default or node.kwargs:
            continue
        x = viewed = node.args[0]
        while isinstance(x, torch.fx.Node) and x.target in VIEWS:
            x = x.args[0]  # a sum over everything does not see the shape: sum the viewed value
        val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if val is None or val.dtype != torch.float32 or not isinstance(val.numel(), int):
            continue
        if val.numel() == 0:
            continue
        with graph.inserting_before(node):
            total = graph.call_function(aten.sum.default, (x,))
            total.meta.update(node.meta)
            mean = graph.call_function(aten.div.Tensor, (total, val.numel()))
            mean.meta.update(node.meta)
        node.replace_all_uses_with(mean)
        graph.erase_node(node)
        while viewed is not x and not viewed.users:  # views only the mean read: a reader of
            source = viewed.args[0]  # the value outside a region would make the region store it
            graph.erase_node(viewed)
            viewed = source
    return graph

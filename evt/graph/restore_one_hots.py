"""Turn each `where` with a number for a branch that no region took into the form Inductor lowers.

    where.Scalar(c, a, b)       ->  where.self(c, scalar_tensor(a), scalar_tensor(b))
    where.ScalarOther(c, x, b)  ->  where.self(c, x, scalar_tensor(b, x.dtype))

`rewrite_one_hot_scatters` writes these (the one-hot of cross-entropy's backward) after
AOTAutograd's decompositions ran, for a GEMM's epilogue to compute; where the region is not
lowered (the profitability check, max-autotune's veto, a shape its kernel cannot take) they stay
in the graph, and Inductor has no lowering for them: on an H100 the cross-entropy backward under
max-autotune failed to compile ("'float' object has no attribute 'get_dtype'", session 18).
Runs after `lower_regions`.
"""

from __future__ import annotations

import torch
from torch.fx import Graph

from evt.graph.fake import make_node

aten = torch.ops.aten


def restore_one_hots(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (aten.where.Scalar, aten.where.ScalarOther):
            continue
        cond, a, b = node.args
        out = node.meta["val"]
        with graph.inserting_before(node):
            branches = [
                v if isinstance(v, torch.fx.Node) else make_node(
                    graph, aten.scalar_tensor.default, (v,),
                    dict(dtype=out.dtype, device=out.device), node, "one_hot_scalar")
                for v in (a, b)
            ]  # fmt: skip
            new = make_node(graph, aten.where.self, (cond, *branches), {}, node, node.name)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
    return graph

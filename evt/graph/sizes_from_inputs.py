"""Sizes from the graph's inputs: `sym_size(x, i)` of a value the graph computes becomes the same
size computed from the graph's SymInt placeholders.

Under `dynamic=True` AOTAutograd reads a size it needs for a view (Hugging Face ConvNeXt's
`x.view(B, H, W, C)` after a Linear) from an intermediate tensor: `sym_size(addmm, 0)`. Such a
read is a user of the GEMM's result, or of an epilogue op's, that needs no element of it, but
the partitioner and `trim_for_inductor`'s traffic model counted it as one: the value had to be
stored for it (ConvNeXt's GELU left its Linear's epilogue under `dynamic=True` only). The size is
the same expression of the input symbols (`sink_views.size_from_inputs` builds it); where it is
not one, the read stays.
"""

from __future__ import annotations

import torch
from torch.fx import Graph

from evt.graph.sink_views import size_from_inputs

aten = torch.ops.aten


def sizes_from_inputs(graph: Graph) -> Graph:
    for node in list(graph.find_nodes(op="call_function", target=aten.sym_size.int)):
        size = node.meta.get("val")
        if node.args[0].op == "placeholder" or not isinstance(size, torch.SymInt):
            continue  # an input's size reads no computed value
        with graph.inserting_before(node):
            built = size_from_inputs(graph, size.node.expr, node)
        if built is not None:
            node.replace_all_uses_with(built)
            graph.erase_node(node)
    return graph

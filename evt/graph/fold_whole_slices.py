"""Whole slices: a `slice` that keeps every element is its input, a `slice_scatter` of a whole
source is that source.

Hugging Face's causal LMs slice the hidden states before the LM head, `h[:, -logits_to_keep:]`,
with `logits_to_keep = 0` (keep all). With static shapes the slice is whole at trace time and
gone; under `dynamic=True` Dynamo makes the int a symbol s, so the graph keeps a slice of s + S
rows and its backward a `slice_scatter` of the LM head's dgrad into zeros, which no epilogue
writes: the final norm's backward left the dgrad's epilogue (GPT-2's, Phi's and OPT's LM-head
region, session 57). The loss's shape check already made Dynamo guard that s + S = S; a slice is
folded only where the guards Dynamo holds prove its size its input's, and no guard is added
(`sink_views` then flattens the views of s + S rows by the same proofs).
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from evt.graph.sizes import same_shape

aten = torch.ops.aten


def fold_whole_slices(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _WHOLE:
            continue
        if any(u.op == "output" for u in node.users):  # (a graph output keeps its own tensor)
            continue
        keep = _WHOLE[node.target](node)
        if keep is not None:
            node.replace_all_uses_with(keep)
            graph.erase_node(node)
    return graph


def _slice(node: Node) -> Node | None:
    """slice(x, dim, start, end[, 1]) keeping all of x's elements along dim: x."""
    x = node.args[0]
    step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
    if step != 1 or not isinstance(x, Node):
        return None
    return x if _same_shape(x, node) else None


def _slice_scatter(node: Node) -> Node | None:
    """slice_scatter(base, src, dim, start, end[, 1]) where src is as large as base: src."""
    base, src = node.args[:2]
    step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
    if step != 1 or not isinstance(src, Node) or not isinstance(base, Node):
        return None
    if not _same_shape(base, src) or _val(src).dtype != _val(base).dtype:
        return None
    strides = zip(_val(src).stride(), _val(node).stride())
    return src if all(statically_known_true(x == y) for x, y in strides) else None


def _val(node: Node):
    return node.meta.get("val")


def _same_shape(a: Node, b: Node) -> bool:
    va, vb = _val(a), _val(b)
    return isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and same_shape(va.shape, vb.shape)


_WHOLE = {aten.slice.Tensor: _slice, aten.slice_scatter.default: _slice_scatter}


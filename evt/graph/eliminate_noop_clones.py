"""No-op elimination: drop a `clone` of a contiguous value that only other ops read.

The joint graph is functional (nothing is mutated in place), so a copy whose layout is its
source's layout computes nothing. The decompositions leave some behind, e.g. LayerNorm's backward
clones the incoming gradient (`clone(view(convert(dgrad)))`), and a clone is no epilogue op: the
GEMM producing that gradient could not reach the reductions after it. A clone stays where it
changes the layout (a non-contiguous source), feeds the graph's output (where aliasing an input
or another output would matter) or copies a value an op later mutates in place.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

aten = torch.ops.aten
_FORMATS = (None, torch.contiguous_format, torch.preserve_format)


def eliminate_noop_clones(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if _noop_clone(node):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    return graph


def _noop_clone(node: Node) -> bool:
    if node.op != "call_function" or node.target is not aten.clone.default:
        return False
    if set(node.kwargs) - {"memory_format"} or node.kwargs.get("memory_format") not in _FORMATS:
        return False
    source = node.args[0]
    val = source.meta.get("val") if isinstance(source, Node) else None
    if not isinstance(val, torch.Tensor):
        return False
    try:
        if not bool(val.is_contiguous()):
            return False
    except Exception:  # noqa: BLE001 - a data-dependent symbolic layout: keep the copy
        return False
    if any(_mutates(u) for u in source.users):  # e.g. copy_ of a new value into an input buffer:
        return False  # the clone holds the value from before
    return all(u.op != "output" for u in node.users)


def _mutates(node: Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable

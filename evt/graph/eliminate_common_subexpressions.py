"""Common-subexpression elimination: one node for each pure computation the graph spells twice.

AOTAutograd's joint graph repeats work between the forward and the loss's backward (an MSE loss
computes `y - target` once for the loss and again for its gradient), and `sink_views` gives every
reader of a tensor its own `view` of it. A region holding both copies would load the same tensor
twice and compute the same values twice. This pass keeps the first of identical nodes, in graph
order, so later duplicates (whose arguments are then the same nodes) collapse in the same walk.

Identical means the same target, arguments and keyword arguments, on the same side (forward and
backward are never merged: the partitioner keeps them apart). Only pure ops merge: no mutating op,
no random op (`nondeterministic_seeded`: dropout masks are drawn per call), no placeholders,
outputs or attribute reads, nothing reading a value some op writes in place (an input buffer's
copy_), and nothing whose arguments cannot be compared (symbolic sizes).
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Graph, Node

from evt.graph.annotate_sides import side
from evt.graph.fake import draws_random


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    mutated = {n.args[0] for n in graph.nodes if n.op == "call_function" and _mutating(n.target)}
    seen: dict[tuple, Node] = {}
    for node in list(graph.nodes):
        key = _key(node)
        if key is None or any(a in mutated for a in node.all_input_nodes):
            continue  # a value written in place may differ between the two reads
        first = seen.setdefault(key, node)
        if first is not node:
            node.replace_all_uses_with(first)
            graph.erase_node(node)
    return graph


def _key(node: Node) -> tuple | None:
    if node.op != "call_function" or not _pure(node.target):
        return None
    try:
        key = (node.target, _norm(node.args), _norm(tuple(sorted(node.kwargs.items()))), side(node))
        hash(key)
    except TypeError:  # a symbolic size or another unhashable argument: leave the node be
        return None
    return key


def _pure(target) -> bool:
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if draws_random(target):
        return False
    return not target._schema.is_mutable


def _mutating(target) -> bool:
    return isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable


def _norm(value):
    """Arguments as a hashable value: nodes stay nodes (already deduplicated), lists become
    tuples, numbers keep their type and sign."""
    if isinstance(value, (list, tuple)):
        return tuple(_norm(v) for v in value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, torch.Tensor)):
        raise TypeError("not comparable")
    if isinstance(value, (bool, int, float)):  # 1, 1.0 and True promote differently; -0.0
        return (type(value), repr(value))  # is not 0.0
    return value

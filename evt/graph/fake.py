"""Nodes that graph passes add: each with its fake value (computed in its inputs' fake mode) and
the provenance of the node it stands beside (side, stack)."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch._guards import detect_fake_mode
from torch.fx import Graph, Node

# activation checkpointing's tags (`torch.utils.checkpoint`): a node added beside a checkpointed
# one is recomputed in the backward as it is, not saved
CHECKPOINT_TAGS = ("partitioner_tag", "recompute", "ac_graph_id")
KEPT = ("evt_side", "stack_trace", "nn_module_stack", *CHECKPOINT_TAGS)  # what a new node takes from `like`


def value(a):
    """An argument with its nodes replaced by their values (a size list may hold sym_size nodes)."""
    if isinstance(a, Node):
        return a.meta["val"]
    if isinstance(a, (list, tuple)):
        return type(a)(value(v) for v in a)
    return a


def fake_value(target, args, kwargs=None, like: Node | None = None):
    """`target(*args, **kwargs)` on the arguments' fake values, in their fake mode (or `like`'s,
    for a call with no tensor argument such as an iota)."""
    vals = [value(a) for a in args]
    seen = [v for v in vals if isinstance(v, torch.Tensor)]
    if like is not None and isinstance(like.meta.get("val"), torch.Tensor):
        seen.append(like.meta["val"])
    with detect_fake_mode(seen) or nullcontext():
        return target(*vals, **(kwargs or {}))


def make_node(graph: Graph, target, args, kwargs, like: Node, name: str | None = None) -> Node:
    """A call of `target` at the graph's insertion point, with its fake value and `like`'s
    provenance; `name` (made unique) names it for the generated code."""
    new = graph.create_node("call_function", target, tuple(args), dict(kwargs or {}), name=name)
    new.meta["val"] = fake_value(target, args, kwargs, like)
    for key in KEPT:
        if key in like.meta:
            new.meta[key] = like.meta[key]
    return new

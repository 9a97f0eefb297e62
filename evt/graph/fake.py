"""Nodes that graph passes add: each with its fake value (computed in its inputs' fake mode) and
the provenance of the node it stands beside (side, stack)."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch._guards import detect_fake_mode
from torch.fx import Graph, Node
from torch.utils.checkpoint import CheckpointPolicy

from evt.graph.annotate_sides import SIDE

# activation checkpointing's tags (`torch.utils.checkpoint`): a node added beside a checkpointed
# one is recomputed in the backward as it is, not saved
CHECKPOINT_TAGS = ("partitioner_tag", "recompute", "ac_graph_id")
KEPT = (SIDE, "stack_trace", "nn_module_stack", *CHECKPOINT_TAGS)  # what a new node takes from `like`


def recompute_tagged(node: Node) -> bool:
    """Whether activation checkpointing asks AOTAutograd's partitioner to recompute `node` in
    the backward (its policy MUST_ or PREFER_RECOMPUTE, as the partitioner's `must_recompute`)."""
    return node.meta.get("recompute") in (CheckpointPolicy.MUST_RECOMPUTE,
                                          CheckpointPolicy.PREFER_RECOMPUTE)  # fmt: skip


def draws_random(target) -> bool:
    """Whether a call of `target` draws random numbers (`nondeterministic_seeded`: dropout's
    masks, rand): a copy of such a node, or two merged, would not give the graph's values."""
    return torch.Tag.nondeterministic_seeded in getattr(target, "tags", ())


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


def copy_nodes(graph: Graph, nodes, side: str | None = None, inputs: dict | None = None) -> dict[Node, Node]:
    """Copies of `nodes` (in graph order) at the graph's insertion point, each reading the copies
    of the others and the originals of everything else, with their metadata (fake values,
    provenance, checkpoint tags); `side` overrides the copies' side. `inputs` (outside node ->
    node to read instead) substitutes some of what they read; their fake values are then computed
    again. Original -> copy."""
    inputs = inputs or {}
    copies: dict[Node, Node] = {}
    for n in nodes:
        copies[n] = graph.node_copy(n, lambda a: copies.get(a, inputs.get(a, a)))
        copies[n].meta.update(n.meta)
        if inputs:
            c = copies[n]
            c.meta["val"] = fake_value(c.target, c.args, c.kwargs, like=n)
        if side is not None:
            copies[n].meta[SIDE] = side
    return copies

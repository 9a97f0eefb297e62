"""Store the narrow value, not the wide one computed from it: a region output `u` in fp32 that is
a short pointwise chain from the region's bf16/fp16 GEMM result `w` and broadcast operands
(vectors, scalars) is recomputed from `w` by its outside readers, and the region stores `w`
(2 bytes an element) instead of `u` (4). Under dynamic shapes too since session 58.

LayerNorm's backward in the dgrad GEMM is the case: the region computes the statistics from
`dY * gamma` in fp32, and the input gradient, which Inductor finishes outside, read that
product as a stored fp32 tensor; now it reads the bf16 dY and multiplies by gamma itself
(Inductor folds the chain into the kernel that reads it). Only where every outside reader is one
Inductor folds the chain into (not a GEMM, not the graph's output); inside readers keep `u`.

Where no such chain reaches the GEMM, the chain may start at another bf16/fp16 value of the
region instead, one the graph rounds to that dtype (its only full-size input: the rest
broadcasts). RMSNorm's backward in the dgrad GEMM is that case: LLaMA's layer computes
`dY * gamma` in bf16 (the sum of three dgrads times the weight) and widens it to fp32 for the
input gradient, `f32(dY * gamma) * rstd`; the region now stores the bf16 product and the outside
multiplies by `rstd`. Its inside readers then read it rounded to bf16 as well, as eager does, so
the statistics the kernel sums agree with the stored copy the outside reads.

On by default since session 32 (`EVT_RECOMPUTE_OUTSIDE=0` turns it off). Timed on an H100 in
turn with torch.compile, each setting in its own process (evt's time over compile's under CUDA
graphs, on / off): GPT-2 0.880 / 0.893, BERT 0.923 / 0.931, LLaMA 0.982 / 0.985, GPT-2 with
math attention 0.894 / 0.902, ViT 0.862 / 0.880: 0.3-2% a step, never slower. The GPT-2, BERT and
LLaMA steps matched fp32 with it, every launch checked, and all five models' training-step tests
passed with it on (`tests/test_gpu_models.py`); `benchmarks/results/2026-11-27-H100-session32/`.
"""

from __future__ import annotations

import math
import os

import torch
from torch.fx import Graph, Node

from evt.graph.epilogue_rules import epilogue_expr, is_reduction
from evt.graph.fake import copy_nodes
from evt.graph.sizes import same_size
from evt.partition.narrow_outputs import NARROW, VIEWS, foldable, is_rounding, rounding
from evt.partition.region import Region

MAX_CHAIN = 4  # pointwise ops copied per output


def enabled() -> bool:
    return os.environ.get("EVT_RECOMPUTE_OUTSIDE", "1") not in ("", "0")


def recompute_outside(graph: Graph, regions: list[Region]) -> list[Region]:
    return [_recompute(graph, r) for r in regions] if enabled() else regions


def _recompute(graph: Graph, region: Region) -> Region:
    nodes = list(region.nodes)
    for u in region.outputs():
        inside = set(nodes)
        found = _chain(u, inside, {region.anchor}) or _chain(u, inside, _narrow_values(u, inside))
        if found is None:
            continue
        chain = [n for n in nodes if n in found[0]]  # region nodes are in graph order
        root = found[1]
        external = [x for x in u.users if x not in nodes]
        # right after u, in graph order (every copy's inputs are copied or outside); not
        # `inserting_after(u)`, which puts each new node right after u: the copies in reverse
        with graph.inserting_before(u.next):
            copies = copy_nodes(graph, chain)
        for x in external:
            x.replace_input_with(u, copies[u])
        if root is not region.anchor:  # after the copies, which read the stored (rounded) root
            _round_inside(graph, root, nodes)
        if not u.users:  # only the outside read it: it leaves the region and the graph
            nodes.remove(u)
            graph.erase_node(u)
    return Region(region.anchor, tuple(nodes), region.side)


def _narrow_values(u: Node, inside: set[Node]) -> set[Node]:
    """The region's narrow full-size values other than `u` itself: where a chain may start."""
    shape = u.meta["val"].shape
    return {n for n in inside - {u} if isinstance(v := n.meta.get("val"), torch.Tensor)
            and v.dtype in NARROW and full_size(n, shape)}  # fmt: skip


def _round_inside(graph: Graph, root: Node, nodes: list[Node]) -> None:
    """`root`'s readers inside the region read it rounded to its dtype (the kernel holds it in
    fp32 unrounded), as the stored copy the outside reads is."""
    readers = [x for x in root.users if x in nodes]
    if not readers or is_rounding(root):
        return  # nothing inside reads it, or it is already a rounding (an earlier output's)
    with graph.inserting_after(root):
        rounded = rounding(graph, root)
    for x in readers:
        x.replace_input_with(root, rounded)
    nodes.insert(nodes.index(root) + 1, rounded)


def _chain(u: Node, inside: set[Node], starts: set[Node]) -> tuple[list[Node], Node] | None:
    """The region's pointwise nodes from one narrow value of `starts` (the GEMM's result, or a
    value the graph rounds: `_narrow_values`) to `u`, and that value; None when `u` is not worth
    recomputing outside."""
    val = u.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float32 or is_reduction(u):
        return None
    readers = [x for x in u.users if x not in inside]
    if not readers or not foldable(readers):
        return None
    chain, roots, todo = [], set(), [u]
    while todo:
        n = todo.pop()
        if n in chain:
            continue
        if n in starts:
            roots.add(n)
            continue
        expr = epilogue_expr(n)
        if expr is None or is_reduction(n) or n.target in VIEWS or len(chain) == MAX_CHAIN:
            return None
        chain.append(n)
        for a in n.all_input_nodes:
            if a in inside:
                todo.append(a)
            elif full_size(a, val.shape):
                return None  # an aux load the outside would read again: no gain
    if len(roots) != 1 or not chain:
        return None
    (root,) = roots
    ok = full_size(root, val.shape) and root.meta["val"].dtype in NARROW
    return (chain, root) if ok else None


def full_size(n: Node, shape) -> bool:
    """Whether `n` is a tensor of as many elements as `shape`; symbolic sizes as Dynamo's guards
    prove them (`sizes.same_size`: no guard added)."""
    v = n.meta.get("val")
    if not isinstance(v, torch.Tensor):
        return False
    return same_size(v.numel(), math.prod(shape))


"""Store the narrow value, not the wide one computed from it: a region output `u` in fp32 that is
a short pointwise chain from the region's bf16/fp16 GEMM result `w` and broadcast operands
(vectors, scalars) is recomputed from `w` by its outside readers, and the region stores `w`
(2 bytes an element) instead of `u` (4). Static shapes only.

LayerNorm's backward in the dgrad GEMM is the case: the region computes the statistics from
`dY * gamma` in fp32, and the input gradient, which Inductor finishes outside, read that
product as a stored fp32 tensor; now it reads the bf16 dY and multiplies by gamma itself
(Inductor folds the chain into the kernel that reads it). Only where every outside reader is one
Inductor folds the chain into (not a GEMM, not the graph's output); inside readers keep `u`.

Opt-in (`EVT_RECOMPUTE_OUTSIDE=1`) until it is timed on a GPU. Its kernels ran in session 27: the
GPT-2 and BERT steps matched fp32, with fewer fp32 outputs launched
(`tests/test_gpu_models.py`). Earlier timings most likely replayed a graph compiled without the
pass (Inductor's caches before session 26).
"""

from __future__ import annotations

import os

import torch
from torch.fx import Graph, Node

from evt.graph.epilogue_rules import epilogue_expr, is_reduction
from evt.graph.fake import copy_nodes
from evt.partition.narrow_outputs import NARROW, VIEWS, foldable
from evt.partition.region import Region

MAX_CHAIN = 4  # pointwise ops copied per output


def enabled() -> bool:
    return os.environ.get("EVT_RECOMPUTE_OUTSIDE", "0") not in ("", "0")


def recompute_outside(graph: Graph, regions: list[Region]) -> list[Region]:
    return [_recompute(graph, r) for r in regions] if enabled() else regions


def _recompute(graph: Graph, region: Region) -> Region:
    nodes = list(region.nodes)
    for u in region.outputs():
        found = _chain(u, set(nodes), region.anchor)
        if found is None:
            continue
        chain = [n for n in nodes if n in found]  # region nodes are in graph order
        external = [x for x in u.users if x not in nodes]
        with graph.inserting_after(u):  # in graph order: every copy's inputs are copied or outside
            copies = copy_nodes(graph, chain)
        for x in external:
            x.replace_input_with(u, copies[u])
        if not u.users:  # only the outside read it: it leaves the region and the graph
            nodes.remove(u)
            graph.erase_node(u)
    return Region(region.anchor, tuple(nodes), region.side)


def _chain(u: Node, inside: set[Node], anchor: Node) -> list[Node] | None:
    """The region's pointwise nodes from the narrow GEMM result to `u`, or None when `u` is not
    worth recomputing outside."""
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
        if n is anchor:
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
    ok = roots == {anchor} and full_size(anchor, val.shape) and anchor.meta["val"].dtype in NARROW
    return chain if ok else None


def full_size(n: Node, shape) -> bool:
    """Whether `n` is a tensor of as many elements as `shape` (static shapes only)."""
    v = n.meta.get("val")
    if not isinstance(v, torch.Tensor) or not all(isinstance(d, int) for d in (*v.shape, *shape)):
        return False
    return v.numel() == torch.Size(shape).numel()


"""A greedy partitioner: grow each GEMM's region downstream through epilogue-able nodes.

GEMMs are visited in graph order; each absorbs, to a fixed point, the users of its region that an
epilogue can compute (same side, same [M, N] or [L, M, N] shape, every other input loadable as an aux tensor or
a row/column vector) as long as the graph of contracted regions stays acyclic. A reduction joins
but is not grown through (its sum is complete only after the kernel). The ILP partitioner
replaces it behind the same `partition(graph) -> list[Region]` interface.
"""

from __future__ import annotations

from collections import deque

import networkx as nx
from torch.fx import Graph, Node

from evt import debug
from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import epilogue_expr, is_reduction, tensor_args
from evt.graph.layouts import gemm_shape, load_kind
from evt.partition.candidates import MAX_AUX_TENSORS, value_shape
from evt.partition.contract import contracted
from evt.partition.region import Region


def partition(graph: Graph) -> list[Region]:
    g = contracted(graph, [])
    order = {n: i for i, n in enumerate(graph.nodes)}
    taken: set[Node] = set()
    regions = []
    for anchor in graph.nodes:
        shape = gemm_shape(anchor)
        if shape is None or anchor in taken:
            continue
        members = _grow(g, anchor, shape, taken, order.__getitem__)
        members = _trim(members)
        if len(members) > 1:
            for m in members[1:]:
                nx.contracted_nodes(g, anchor, m, self_loops=False, copy=False)
            regions.append(Region(anchor, tuple(members), side(anchor)))
            taken.update(members)
    debug.log(1, f"greedy partition: {len(regions)} regions")
    return regions


def _grow(g: nx.DiGraph, anchor: Node, shape: tuple[int, ...], taken: set[Node], order) -> list[Node]:
    g = g.copy()  # trial contractions; the caller contracts the final members
    members = [anchor]
    changed = True
    while changed:
        changed = False
        grown = [n for n in members if not is_reduction(n)]  # reductions are terminal
        frontier = {u for n in grown for u in n.users if u not in taken and u not in members}
        for cand in sorted(frontier, key=order):
            if _fusible(cand, members, shape) and not _closes_cycle(g, anchor, cand):
                nx.contracted_nodes(g, anchor, cand, self_loops=False, copy=False)
                members.append(cand)
                changed = True
    return sorted(members, key=order)


def _fusible(cand: Node, members: list[Node], shape: tuple[int, ...]) -> bool:
    expr = epilogue_expr(cand)
    if expr is None or value_shape(cand) != shape or side(cand) != side(members[0]):
        return False
    if _reads_reduction(cand, members) or (is_reduction(cand) and set(cand.users) & set(members)):
        return False  # a reduction's sum exists only after the kernel: no reader in its region
    for a in tensor_args(expr):
        if a not in members and load_kind(a.meta.get("val"), *shape) is None:
            return False
    return _aux_loads(members + [cand], shape) <= MAX_AUX_TENSORS


def _reads_reduction(cand: Node, members: list[Node]) -> bool:
    return any(a in members and is_reduction(a) for a in cand.all_input_nodes)


def _aux_loads(members: list[Node], shape: tuple[int, ...]) -> int:
    inside = set(members)
    ext = {a for n in members[1:] for a in n.all_input_nodes if a not in inside}
    return sum(load_kind(a.meta.get("val"), *shape) == "aux_load" for a in ext)


def _closes_cycle(g: nx.DiGraph, vertex: Node, cand: Node) -> bool:
    """Would merging `cand` into the region vertex create a path that leaves and re-enters it?"""
    targets = {vertex, cand}
    queue = deque(s for t in targets for s in g.successors(t) if s not in targets)
    seen = set(queue)
    while queue:
        v = queue.popleft()
        for s in g.successors(v):
            if s in targets:
                return True
            if s not in seen:
                seen.add(s)
                queue.append(s)
    return False


def _trim(members: list[Node]) -> list[Node]:
    """Drop trailing nodes until aux loads + aux stores fit the epilogue's budget."""
    shape = tuple(members[0].meta["val"].shape)
    while len(members) > 1 and _aux_tensors(members, shape) > MAX_AUX_TENSORS:
        members = members[:-1]
    return members


def _aux_tensors(members: list[Node], shape) -> int:
    inside = set(members)
    writes = [n for n in members if not is_reduction(n)]  # a reduction needs no shared memory
    stores = sum(any(u not in inside for u in n.users) for n in writes) - 1  # D is not aux
    return _aux_loads(members, shape) + max(stores, 0)

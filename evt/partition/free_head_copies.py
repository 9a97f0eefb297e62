"""A batched GEMM that can read its heads in place (`read_heads_in_place`) but anchors no region
gets a region of its own, the GEMM alone, where that frees the graph's copy of the heads.

Inductor's decomposition copies attention's heads (`clone`, then `view(..., [B·H, S, D])`) before
every `bmm`, and one copy often feeds several: q's feeds the scores and, saved for the backward,
dK = dSᵀ·Q. Reading q in place in the scores' region alone leaves the copy to the backward's
cuBLAS `bmm`. A copy all of whose readers are GEMMs reading it in place is dead once they are
lowered: those GEMMs without a region get one (their kernel replaces cuBLAS's `bmm` plus the
copy kernel, and the copy no longer takes memory between forward and backward). A GEMM that would
free no copy stays with cuBLAS, and so do all of them with `EVT_FREE_HEAD_COPIES=0` (to time
both: whether evt's GEMM alone beats cuBLAS's plus the copy has not been measured yet).
"""

from __future__ import annotations

import os

import torch
from torch.fx import Graph, Node

from evt.graph.annotate_sides import side
from evt.graph.fold_gemm_operands import GEMM, strip_transposes
from evt.graph.layouts import gemm_shape
from evt.graph.read_heads_in_place import VIEWS
from evt.partition.region import Region

aten = torch.ops.aten
# what may lie between a copy and the GEMM that reads it
PASS_THROUGH = (*VIEWS, aten.permute.default, aten.transpose.int, aten.t.default)


def free_head_copies(graph: Graph, regions: list[Region]) -> list[Region]:
    if os.environ.get("EVT_FREE_HEAD_COPIES", "1") == "0":
        return regions
    anchored = {r.anchor for r in regions}
    alone = [n for n in graph.nodes if _reads_in_place(n) and n not in anchored
             and gemm_shape(n) is not None]  # fmt: skip
    readers = anchored | set(alone)
    freeing = [g for g in alone if any(_dies(c, readers) for c in copies_skipped(g))]
    return regions + [Region(g, (g,), side(g)) for g in freeing]


def _reads_in_place(node: Node) -> bool:
    g = node.meta.get(GEMM)
    return g is not None and g.nested


def copies_skipped(gemm: Node) -> list[Node]:
    """The clones `gemm` no longer reads: operands `view(clone(x))` it reads as `x` in place."""
    g = gemm.meta.get(GEMM)
    if g is None or not g.nested:
        return []
    out = []
    for arg in gemm.args[-2:]:  # bmm's (a, b), baddbmm's (self, a, b)
        view, _ = strip_transposes(arg, 3)
        if view not in (g.a, g.b) and view.target in VIEWS:  # replaced: `view` reads the copy
            out += [c for c in view.args[:1] if c.target == aten.clone.default]
    return out


def _dies(copy: Node, readers: set[Node]) -> bool:
    """Whether nothing but GEMMs in `readers` that skip it reads `copy` (through views)."""
    todo = list(copy.users)
    while todo:
        user = todo.pop()
        if user in readers and copy in copies_skipped(user):
            continue
        if user.op != "call_function" or user.target not in PASS_THROUGH:
            return False
        todo.extend(user.users)
    return True

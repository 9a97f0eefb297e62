"""Keep widening casts out of a region's stores: a region node `convert_element_type(u, float32)`
of a bf16/fp16 region value `u`, read only outside the region, leaves the region, which then
stores `u` (2 bytes an element instead of 4).

The partitioner counts every fused edge as bytes kept on chip, as if the ops left outside wrote
their results; but Inductor, which compiles what is outside, folds a cast into the kernels that
read it for free. Fused, the cast doubles the bytes the kernel writes and its readers read (the
LM head's fp32 logits: 1.6 GB instead of 0.8 at GPT-2's vocabulary and 8192 tokens). Not
where a reader (through views) is the graph's output or a GEMM: there, outside, the cast would
be a kernel of its own.
A region left with its GEMM alone is dropped (cuBLAS runs the GEMM).

A widening cast read both inside (e.g. by statistics) and outside stays, but the region stores
the narrow value and the outside readers get a cast of their own (`_store_narrow`).
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from evt.graph.fold_gemm_operands import GEMM
from evt.partition.region import Region
from evt.partition.validate import GEMM_TARGETS

WIDEN = torch.ops.prims.convert_element_type.default
NARROW = (torch.bfloat16, torch.float16)


def narrow_outputs(graph: Graph, regions: list[Region]) -> list[Region]:
    out = []
    for r in regions:
        r = _store_narrow(graph, _trim(r))
        if r.epilogue:
            out.append(r)
    return out


def _store_narrow(graph: Graph, region: Region) -> Region:
    """A cast read both inside (e.g. by statistics) and outside: the outside readers get a cast
    of their own reading the narrow value, which the region stores instead. Inside, the value
    is rounded to its narrow dtype before widening (the kernel holds it unrounded in fp32), as
    eager has it, so the statistics agree with the stored copy the loss reads (unrounded, the
    LM head's gradients came out 3% off where eager's are 0.5%)."""
    inside = set(region.nodes)
    nodes = list(region.nodes)
    for c in region.outputs():
        if not _widens(c, inside) or not any(u in inside for u in c.users):
            continue
        external = [u for u in c.users if u not in inside]
        if not foldable(external):
            continue
        narrow = c.args[0]
        with graph.inserting_before(c):
            rounded = rounding(graph, narrow)
        c.replace_input_with(narrow, rounded)
        nodes.insert(nodes.index(c), rounded)
        with graph.inserting_after(c):
            wide = graph.call_function(WIDEN, (narrow, *c.args[1:]), c.kwargs)
        wide.meta.update({k: v for k, v in c.meta.items() if k != GEMM})
        for user in external:
            user.replace_input_with(c, wide)
    return Region(region.anchor, tuple(nodes), region.side)


def rounding(graph: Graph, narrow: Node) -> Node:
    """`narrow` rounded to its own dtype, at the graph's insertion point: a region holds its
    values in fp32 unrounded, and a cast to the dtype a value already has rounds it there."""
    rounded = graph.call_function(WIDEN, (narrow, narrow.meta["val"].dtype))
    rounded.meta.update({k: v for k, v in narrow.meta.items() if k != GEMM})
    return rounded


def is_rounding(n: Node) -> bool:
    """Whether `n` is a `rounding`: a cast to the dtype its input already has."""
    return n.op == "call_function" and n.target is WIDEN and n.args[1] == n.args[0].meta["val"].dtype


def _trim(region: Region) -> Region:
    """Drop the widening casts read only outside. One pass: a dropped cast has no reader inside,
    so dropping it changes no other node's readers."""
    inside = set(region.nodes)
    keep = [n for n in region.epilogue if not (_widens(n, inside) and _only_outside(n, inside))]
    return Region(region.anchor, (region.anchor, *keep), region.side)


aten = torch.ops.aten
VIEWS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
    aten.transpose.int, aten.t.default, aten.expand.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.default, aten.alias.default, aten.slice.Tensor,
    aten.select.int,
}  # fmt: skip


def _only_outside(c: Node, inside: set[Node]) -> bool:
    """Every reader of `c` is outside the region and folds the cast (`foldable`)."""
    return not any(u in inside for u in c.users) and foldable(list(c.users))


def foldable(readers: list[Node]) -> bool:
    """Each reader (seen through views) is an op Inductor folds a cast into: not the graph's
    output, not a GEMM."""
    todo, seen = list(readers), set()
    while todo:
        u = todo.pop()
        if u in seen:
            continue
        seen.add(u)
        if u.op == "output" or u.target in GEMM_TARGETS:  # cuBLAS reads a materialized fp32 copy
            return False
        if u.target in VIEWS:
            todo += list(u.users)
    return True


def _widens(c: Node, inside: set[Node]) -> bool:
    if c.op != "call_function" or c.target is not WIDEN or c.args[1] != torch.float32:
        return False
    u = c.args[0]
    val = getattr(u, "meta", {}).get("val")
    return u in inside and isinstance(val, torch.Tensor) and val.dtype in NARROW

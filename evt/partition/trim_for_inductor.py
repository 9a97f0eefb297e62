"""Give back to Inductor the epilogue ops that Inductor runs with less memory traffic.

The partitioner counts bytes as eager would move them: every op outside a region writes its
result and every reader reads it. But Inductor, which runs what is outside, fuses the pointwise
and reduction ops that follow a GEMM into one kernel that reads each input once. So an epilogue
that takes only the first op of such a chain can cost more than it saves: attention's backward
`dP * P` fused into the dP GEMM makes the kernel read P and write the product, and Inductor's
softmax-backward kernel still reads P and the product (four passes over a [B, H, S, S] tensor
where cuBLAS + Inductor make three; measured on an H100: the step's softmax backward went from
one 201 us kernel to 331 + 201 us, and the dP GEMM from 86 to 311 us).

For each region this pass compares the traffic of the region as chosen with the traffic when
epilogue sinks (members no other member reads) go back outside, modelling Inductor as one kernel
over the ops given back plus the region's same-side non-GEMM readers (each distinct input read
once, each value read beyond that group written once; views are free). Sinks go back one at a
time, cheapest result first, while each step saves at least a quarter pass over the GEMM's
output (the model is rough); the whole epilogue at once is tried too. A region left with its GEMM alone is dropped (cuBLAS runs the GEMM). Regions with a
reduction are left alone: reductions are what only an epilogue fuses, and Inductor's kernels
for them are the part of this model least like the real ones. `EVT_TRIM=0` turns the pass off.
"""

from __future__ import annotations

import os

from torch.fx import Graph, Node

from evt import debug
from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import epilogue_expr, is_reduction
from evt.partition.narrow_outputs import VIEWS
from evt.partition.region import Region
from evt.partition.validate import GEMM_TARGETS, aux_tensors
from evt.report import nbytes

OVER_M = ("row_sum", "row_max", "scalar_sum", "scalar_max")  # CUTLASS's naming: N-vectors, scalars


def enabled() -> bool:
    return os.environ.get("EVT_TRIM", "1") != "0"


def trim_for_inductor(graph: Graph, regions: list[Region], max_aux: int = 4) -> list[Region]:
    if not enabled():
        return regions
    out, taken = [], {n for r in regions for n in r.nodes}
    for r in regions:
        trimmed = _trim(r, max_aux, taken)
        if trimmed is not r:
            given = [n.name for n in r.epilogue if n not in trimmed.nodes]
            taken -= set(r.nodes) - set(trimmed.nodes)  # Inductor's now, for later regions
            debug.log(1, f"trim_for_inductor: region of {r.anchor.name} gives {given} back to "
                         "Inductor (less memory traffic there)")  # fmt: skip
        if trimmed.epilogue:
            out.append(trimmed)
    return out


def inductor_savings(region: Region, taken: set[Node]) -> int:
    """Bytes the region's epilogue saves against Inductor running it (with the region's
    same-side readers, as `traffic` models them); `taken`: every region's nodes."""
    epilogue = set(region.epilogue)
    readers = _group_readers(region, taken)
    unfused = traffic(region.anchor, set(), epilogue, readers, taken)
    return max(unfused - traffic(region.anchor, epilogue, epilogue, readers, taken), 0)


def _trim(region: Region, max_aux: int, taken: set[Node]) -> Region:
    epilogue = set(region.epilogue)
    if not epilogue or any(is_reduction(n) for n in epilogue):
        return region  # reductions are what only an epilogue can fuse: they stay (see the doc)
    readers = _group_readers(region, taken)
    best, best_cost = epilogue, traffic(region.anchor, epilogue, epilogue, readers, taken)
    # the model is rough: only a gain of a quarter pass over the GEMM's output counts
    threshold = nbytes(region.anchor) // 4
    while best:
        options = [best - {s} for s in _sinks(region, best)] + [set()]
        costed = [
            (traffic(region.anchor, o, epilogue, readers, taken), len(o), o) for o in options
        ]
        costed = [c for c in costed if _fits(region, c[2], max_aux)]
        if not costed:
            break
        cost, _, option = min(costed, key=lambda c: (c[0], -c[1]))
        if cost > best_cost - threshold:
            break
        best, best_cost = option, cost
    if best == epilogue:
        return region
    return Region(region.anchor, tuple(n for n in region.nodes if n is region.anchor or n in best),
                  region.side)  # fmt: skip


def traffic(
    anchor: Node, kept: set[Node], epilogue: set[Node], readers: set[Node], taken: set[Node]
) -> int:
    """Bytes moved by the kernel (anchor + `kept`) and by Inductor's kernels over the rest of
    the epilogue plus `readers`, besides what both choices move alike (the GEMM's operands, the
    readers' other outputs' readers beyond the group). `taken`: the regions' nodes, which an
    Inductor kernel cannot inline (evt computes them)."""
    group = (epilogue - kept) | readers
    return _moved({anchor, *kept}, skip=anchor) + _inductor(group, taken - group)


def _inductor(group: set[Node], fused: set[Node]) -> int:
    """Inductor's traffic over `group`: one kernel for the pointwise ops and the reductions over
    N (a persistent reduction per row fuses with the pointwise ops after it), one more for the
    reductions over M or over everything (a bias gradient, a LayerNorm weight gradient), which
    recomputes the pointwise ops it reduces from their materialized inputs, each read once."""
    over_m = {n for n in group if _reduces_over_m(n)}
    main = group - over_m
    cost = _moved(main, transparent=over_m, fused=fused) if main else 0
    if over_m:
        leaves = {leaf for c in over_m for leaf in _leaves(c, main)}
        cost += sum(map(nbytes, leaves)) + _moved(over_m, reads=False, fused=fused)
    return cost


def _moved(nodes: set[Node], skip: Node | None = None, transparent=frozenset(), reads=True,
           fused=None) -> int:  # fmt: skip
    """Distinct values `nodes` read from outside (`skip`'s own reads aside) plus the values they
    make that something outside them (and outside `transparent`) reads. Views are free: a read
    through views reads their base; a view writes nothing. `fused` (region nodes) is given for an
    Inductor kernel, which may inline a private pointwise producer that is not one of them."""
    read, written = set(), set()
    for n in nodes:
        if n.target in VIEWS:
            continue
        for a in () if n is skip else n.all_input_nodes:
            read |= _reads(a, nodes, fused)
        if any(_escapes(u, nodes | transparent) for u in n.users):
            written.add(n)
    return (sum(map(nbytes, read)) if reads else 0) + sum(map(nbytes, written))


def _escapes(user: Node, nodes: set[Node]) -> bool:
    """Whether `user` (through views) is a reader outside `nodes`."""
    if user.target in VIEWS:
        return any(_escapes(u, nodes) for u in user.users)
    return user not in nodes


def _reads(a: Node, nodes: set[Node], fused: set[Node] | None) -> set[Node]:
    """What reading `a` from `nodes` reads: nothing if `a` is theirs, else its base; for an
    Inductor kernel (`fused` given), a same-side pointwise op outside `fused` is inlined, one
    level deep (Inductor recomputes a cheap producer in its reader, e.g. the `-P` of softmax's
    backward), so its inputs are read instead."""
    b = _base(a)
    if b in nodes:
        return set()
    if fused is not None and b not in fused and _inlinable(b, nodes):
        return {_base(x) for x in b.all_input_nodes} - nodes
    return {b}


def _inlinable(b: Node, nodes: set[Node]) -> bool:
    if b.op != "call_function" or b.target in GEMM_TARGETS or b.target in VIEWS:
        return False
    if is_reduction(b) or epilogue_expr(b) is None:
        return False
    sides = {side(n) for n in nodes}
    if sides == {side(b)}:
        return True
    # a forward op only the backward reads: AOTAutograd's partitioner recomputes it there
    return sides == {"backward"} and all(side(u) == "backward" for u in b.users)


def _base(n: Node) -> Node:
    while n.target in VIEWS and n.args and isinstance(n.args[0], Node):
        n = n.args[0]
    return n


def _leaves(reduction: Node, main: set[Node]) -> set[Node]:
    """The materialized values a reduction's pointwise producers in `main` start from."""
    out, todo, seen = set(), [a for a in reduction.all_input_nodes], set()
    while todo:
        b = _base(todo.pop())
        if b in seen:
            continue
        seen.add(b)
        if b in main and not is_reduction(b):
            todo += b.all_input_nodes
        else:
            out.add(b)
    return out


def _reduces_over_m(n: Node) -> bool:
    expr = epilogue_expr(n)
    return expr is not None and expr.op in OVER_M


def _group_readers(region: Region, taken: set[Node]) -> set[Node]:
    """Same-side, non-GEMM readers of the region's values outside any region (through views):
    the ops Inductor would fuse with whatever epilogue ops go back to it."""
    inside, found = set(region.nodes), set()
    todo = [u for n in region.nodes for u in n.users if u not in inside]
    while todo:
        u = todo.pop()
        if u in found or u in taken or u.op != "call_function" or u.target in GEMM_TARGETS:
            continue
        if side(u) != region.side:
            continue
        found.add(u)
        if u.target in VIEWS:
            todo += list(u.users)
    return found


def _sinks(region: Region, kept: set[Node]) -> list[Node]:
    """Members no other kept member reads, in graph order (ties go to the earliest)."""
    return [n for n in region.epilogue if n in kept and not any(u in kept for u in n.users)]


def _fits(region: Region, kept: set[Node], max_aux: int) -> bool:
    nodes = tuple(n for n in region.nodes if n is region.anchor or n in kept)
    return aux_tensors(Region(region.anchor, nodes, region.side)) <= max_aux

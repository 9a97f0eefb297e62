"""Split the partitioning problem into independent components, each a small labelled DiGraph that
holds everything the ILP reads (and nothing that differs between repeated layers, like names).

Vertices: the component's GEMMs (`role="anchor"`), their candidate nodes (`role="node"`) and the
outside tensors those read (`role="ext"`). Edge flags: `fx` (a data edge), `load` (the consumer can
read that input from memory; without it both must share a region), `cand` (GEMM -> a node it may
absorb) and `path` (u -> v when a path leaves the component at u and re-enters at v: what lets the
ILP's acyclicity constraints see every cycle a fusion could close).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from torch.fx import Node

from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import is_reduction
from evt.graph.layouts import load_kind
from evt.partition.candidates import Candidates
from evt.report import nbytes


@dataclass
class Component:
    graph: nx.DiGraph
    anchors: list[Node]
    cands: list[Candidates]


WINDOW = 8  # GEMMs a window of a long chain of overlapping candidate sets holds
SPLIT_ABOVE = 16  # a part with more GEMMs than this is split into windows


def components(cands: list[Candidates], order: dict[Node, int]) -> list[Component]:
    """GEMMs whose candidate sets overlap compete for nodes and are solved together; the rest
    are independent up to cycles through other regions, which the caller repairs by merging.

    A residual stream links every layer's residual GEMMs into one part (each may absorb the next
    layers' residual adds), whose ILP grows faster than the depth (GPT-2 at 48 layers: 96 GEMMs,
    ~10 s). Such a part is split into windows of `WINDOW` GEMMs in graph order, each node left to
    the window of the last GEMM that may absorb it (a residual add to its own layer's GEMM): the
    windows are separate components, and the solve cache answers the repeated ones. A window's
    first GEMMs lose only what the earlier window's last GEMMs could have taken across the cut."""
    out = []
    for part in _parts(cands):
        if len(part) <= SPLIT_ABOVE:
            out.append(component(part, order))
        else:
            out += [component(p, order) for p in _parts(_windowed(part, order))]
    return out


def _parts(cands: list[Candidates]) -> list[list[Candidates]]:
    owners: dict[Node, list[int]] = {}
    for i, c in enumerate(cands):
        for n in c.members():
            owners.setdefault(n, []).append(i)
    link = nx.Graph()
    link.add_nodes_from(range(len(cands)))
    for own in owners.values():
        nx.add_path(link, own)
    parts = sorted(sorted(p) for p in nx.connected_components(link))
    return [[cands[i] for i in part] for part in parts]


def _windowed(part: list[Candidates], order: dict[Node, int]) -> list[Candidates]:
    """`part`'s candidate sets, each node kept only by the GEMMs of its window (see
    `components`); a node whose must-join input left its set leaves too."""
    ranked = sorted(part, key=lambda c: order[c.anchor])
    window = {c.anchor: i // WINDOW for i, c in enumerate(ranked)}
    last: dict[Node, Node] = {}
    for c in ranked:
        for n in c.nodes:
            last[n] = c.anchor  # ranked: the last GEMM that may absorb n wins
    out = []
    for c in ranked:
        keep = {n for n in c.nodes if window[last[n]] == window[c.anchor]}
        changed = True
        while changed:
            drop = {n for n in keep if any(m is not c.anchor and m not in keep for m in c.must_join[n])}
            keep -= drop
            changed = bool(drop)
        out.append(Candidates(
            c.anchor, c.shape, [n for n in c.nodes if n in keep],
            {n: m for n, m in c.must_join.items() if n in keep}, {n for n in c.free if n in keep},
        ))  # fmt: skip
    return [c for c in out if c.nodes]


def component(cands: list[Candidates], order: dict[Node, int]) -> Component:
    inside = {n for c in cands for n in c.members()}
    g = nx.DiGraph()
    for c in cands:
        g.add_node(c.anchor, role="anchor", **_attrs(c.anchor, inside))
        for n in c.nodes:
            g.add_node(n, role="node", **_attrs(n, inside))
            # free: this anchor's region would compute n from what it loads (a load tree), where
            # another's may hold n as its own epilogue node (relu(mm) is mm's, and free for a
            # GEMM reading mm): the rule that n joins only beside a reader of it is per anchor
            _flag(g, c.anchor, n, cand=True, free=n in c.free)
    for c in cands:
        for n in c.nodes:
            _add_inputs(g, n, c.shape, inside)
        # a GEMM reading a value another GEMM's region may fuse (its operand): without the edge the
        # model let one region hold both a node before that GEMM and one after it, a cycle only
        # the repair loop saw, which merging the (one) component could not break (session 49)
        for a in c.anchor.all_input_nodes:
            if a in inside:
                _flag(g, a, c.anchor, fx=True)
    last = max(order[n] for n in inside)
    by_order = order.__getitem__  # sets of nodes iterate in id order: sort, so that the model
    for n in sorted(inside, key=by_order):  # (and the solver's tie-breaks) never vary by run
        for v in sorted(_reentries(n, inside, order, last), key=by_order):
            _flag(g, n, v, path=True)
    for n, data in g.nodes(data=True):
        data["pos"] = order[n]  # graph order: lets the cache try the obvious mapping first
        data["label"] = ":".join(
            str(data.get(k, ""))
            for k in ("role", "target", "bytes", "escapes", "aux", "saved", "reduction")
        )
    for _, _, data in g.edges(data=True):
        data["label"] = ":".join(k for k in ("fx", "load", "cand", "path", "free") if data.get(k))
    return Component(g, [c.anchor for c in cands], cands)


def _flag(g: nx.DiGraph, u: Node, v: Node, **flags: bool) -> None:
    if not g.has_edge(u, v):
        g.add_edge(u, v)
    g.edges[u, v].update(flags)


def _attrs(n: Node, inside: set[Node]) -> dict:
    escapes = any(u not in inside for u in n.users)
    saved = nbytes(n) if side(n) == "forward" and any(side(u) == "backward" for u in n.users) else 0
    return {"bytes": nbytes(n), "escapes": escapes, "target": str(n.target), "saved": saved,
            "reduction": is_reduction(n)}


def _add_inputs(g: nx.DiGraph, n: Node, shape: tuple[int, int], inside: set[Node]) -> None:
    for a in n.all_input_nodes:
        kind = load_kind(a.meta.get("val"), *shape)
        if a not in inside:
            g.add_node(a, role="ext", bytes=nbytes(a), escapes=True, aux=kind == "aux_load", saved=0)
        _flag(g, a, n, fx=True, load=kind is not None)


def _reentries(start: Node, inside: set[Node], order: dict[Node, int], last: int) -> set[Node]:
    """Component nodes reached from `start` through at least one node outside the component.
    Nodes after the component's last node (in topological order) cannot lead back: pruned."""
    found: set[Node] = set()
    stack = [u for u in start.users if u not in inside and order[u] < last]
    seen = set(stack)
    while stack:
        for u in stack.pop().users:
            if u in inside:
                found.add(u)
            elif u not in seen and order[u] < last:
                seen.add(u)
                stack.append(u)
    return found

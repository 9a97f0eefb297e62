"""The ILP of one component (the EVT paper's formulation, made practical), built from the
component's labelled graph alone (see `components.py`), so isomorphic components get isomorphic
models.

Variables: x[a,n] node n joins GEMM a's region (only for candidates: reachability pruning);
s[a,u,v] both ends of data edge (u,v) in region a; w[u] u's output never reaches global memory;
l[a,p] region a loads aux tensor p; o[a,u] region a stores u; P[n] ordering potential.
Constraints: one region per node; a member reads at least one value of its region (downstream of
the GEMM; a member computed from broadcasts alone is read by one instead) and shares the region
of every input it cannot load; no reduction shares its region with a reader of it (reductions
are terminal); MTZ-style potentials (equal inside
a region, +1 along every edge that crosses regions or leaves the component) keep the graph of
regions acyclic; aux loads + aux stores <= capacity; optionally, the activation memory fused
forward values add for the backward <= a budget. Objective: maximize the global-memory bytes
kept on chip (reads of fused edges, writes of values no one outside reads), then fused nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import pulp

MIB = float(1 << 20)


@dataclass
class Model:
    problem: pulp.LpProblem
    x: dict[tuple, pulp.LpVariable] = field(default_factory=dict)
    s: dict[tuple, pulp.LpVariable] = field(default_factory=dict)
    pairs: dict[tuple, list[pulp.LpVariable]] = field(default_factory=dict)  # (u, v) -> s[*, u, v]


def build(g: nx.DiGraph, max_aux: int, saved_budget: int | None = None) -> Model:
    ids = {n: i for i, n in enumerate(g.nodes)}
    anchors = [n for n, d in g.nodes(data=True) if d["role"] == "anchor"]
    cands = {a: [v for v in g.successors(a) if g.edges[a, v].get("cand")] for a in anchors}
    m = Model(pulp.LpProblem("evt_partition", pulp.LpMaximize))
    for a in anchors:
        for n in cands[a]:
            m.x[a, n] = _var(m, f"x_{ids[a]}_{ids[n]}")
    _co_membership(m, g, anchors, cands, ids)
    _one_region_each(m, g, anchors)
    _downstream_and_must_join(m, g, anchors, cands)
    _reductions_terminal(m, g, anchors, cands)
    _acyclic(m, g, anchors, cands, ids)
    _capacity(m, g, anchors, cands, ids, max_aux)
    _objective(m, g, ids)
    if saved_budget is not None:
        _saved_budget(m, g, saved_budget)
    return m


def saved_bytes(g: nx.DiGraph, members) -> int:
    """Activation memory a fusion adds: fused forward values the backward reads. Unfused, the
    min-cut partitioner could recompute them from their inputs; out of a kernel, it must save them."""
    return sum(g.nodes[n]["saved"] for n in members)


def _saved_budget(m: Model, g: nx.DiGraph, budget: int) -> None:
    terms = [g.nodes[n]["saved"] / MIB * var for (_, n), var in m.x.items() if g.nodes[n]["saved"]]
    if terms:
        m.problem += pulp.lpSum(terms) <= budget / MIB


def _var(m: Model, name: str, low=0, up=1, cat="Binary") -> pulp.LpVariable:
    add = getattr(m.problem, "add_variable", None)  # PuLP >= 3.3 attaches variables to the model
    return add(name, low, up, cat=cat) if add else pulp.LpVariable(name, low, up, cat=cat)


def member(m: Model, a, n):
    """1 if n is a's GEMM itself, x[a,n] if n may join a, else 0."""
    return 1 if n is a else m.x.get((a, n), 0)


def _co_membership(m, g, anchors, cands, ids) -> None:
    for a in anchors:
        inside = {a, *cands[a]}
        for u, v, d in g.edges(data=True):
            if d.get("fx") and u in inside and v in inside:
                s = m.s[a, u, v] = _var(m, f"s_{ids[a]}_{ids[u]}_{ids[v]}")
                m.pairs.setdefault((u, v), []).append(s)
                m.problem += s <= member(m, a, u)
                m.problem += s <= member(m, a, v)


def together(m: Model, u, v):
    return pulp.lpSum(m.pairs.get((u, v), []))


def _one_region_each(m, g, anchors) -> None:
    for n, d in g.nodes(data=True):
        if d["role"] == "node":
            m.problem += pulp.lpSum(m.x[a, n] for a in anchors if (a, n) in m.x) <= 1


def _downstream_and_must_join(m, g, anchors, cands) -> None:
    for a in anchors:
        for n in cands[a]:
            preds = [p for p in g.predecessors(n) if g.edges[p, n].get("fx")]
            if g.edges[a, n].get("free"):  # a's load tree computes it: only beside a reader of it
                readers = [v for v in g.successors(n) if g.edges[n, v].get("fx")]
                m.problem += m.x[a, n] <= pulp.lpSum(member(m, a, v) for v in readers)
            else:
                m.problem += m.x[a, n] <= pulp.lpSum(member(m, a, p) for p in preds)
            for p in preds:
                if not g.edges[p, n].get("load"):
                    m.problem += m.x[a, n] <= member(m, a, p)


def _reductions_terminal(m, g, anchors, cands) -> None:
    """A reduction (or statistic) exists only after its kernel: none of its readers shares its
    region."""
    for a in anchors:
        for r in cands[a]:
            if not g.nodes[r].get("reduction"):
                continue
            for v in g.successors(r):
                if g.edges[r, v].get("fx") and (a, v) in m.x:
                    m.problem += m.x[a, r] + m.x[a, v] <= 1


def _acyclic(m, g, anchors, cands, ids) -> None:
    inner = [n for n, d in g.nodes(data=True) if d["role"] != "ext"]
    big = len(inner) + 1
    pot = {n: _var(m, f"P_{ids[n]}", 0, big, "Continuous") for n in inner}
    for u, v, d in g.edges(data=True):
        if u in pot and v in pot and (d.get("fx") or d.get("path")):
            fused = 0 if d.get("path") else together(m, u, v)
            m.problem += pot[v] >= pot[u] + 1 - fused
    for a in anchors:
        for n in cands[a]:
            m.problem += pot[n] - pot[a] <= big * (1 - m.x[a, n])
            m.problem += pot[a] - pot[n] <= big * (1 - m.x[a, n])


def _capacity(m, g, anchors, cands, ids, max_aux: int) -> None:
    for a in anchors:
        inside = {a, *cands[a]}
        loads, stores = {}, {}
        for n in cands[a]:
            for p in g.predecessors(n):
                if p is a or not g.edges[p, n].get("fx") or not _is_aux(g, p):
                    continue
                if p not in loads:
                    loads[p] = _var(m, f"l_{ids[a]}_{ids[p]}")
                var = loads[p]
                m.problem += var >= m.x[a, n] - (member(m, a, p) if p in inside else 0)
        for u in (a, *cands[a]):  # a list, not the set: constraint order never varies by run
            if g.nodes[u].get("reduction"):
                continue  # reductions and statistics write from registers: no epilogue smem
            var = stores[u] = _var(m, f"o_{ids[a]}_{ids[u]}")
            if g.nodes[u]["escapes"]:
                m.problem += var >= member(m, a, u)
            for v in g.successors(u):
                if g.edges[u, v].get("fx"):
                    m.problem += var >= member(m, a, u) - m.s.get((a, u, v), 0)
        m.problem += pulp.lpSum(loads.values()) + pulp.lpSum(stores.values()) <= max_aux + 1


def _is_aux(g: nx.DiGraph, p) -> bool:
    """Whether reading `p` costs an aux load (epilogue shared memory): an [M, N] tensor does; a
    row/column vector, e.g. a reduction's result, is a broadcast (as greedy.py counts it)."""
    d = g.nodes[p]
    return d["aux"] if d["role"] == "ext" else not d.get("reduction")


def _objective(m, g, ids) -> None:
    terms = []
    for u, d in g.nodes(data=True):
        if d["role"] == "ext":
            continue
        outs = [v for v in g.successors(u) if g.edges[u, v].get("fx")]
        weight = d["bytes"] / MIB
        terms += [weight * together(m, u, v) for v in outs]
        if outs and not d["escapes"]:
            w = _var(m, f"w_{ids[u]}")
            for v in outs:
                m.problem += w <= together(m, u, v)
            terms.append(weight * w)
    tie = 1e-6 / (1 + len(m.x))  # fewer kernels breaks ties, never outweighs a byte
    m.problem += pulp.lpSum(terms) + tie * pulp.lpSum(m.x.values())

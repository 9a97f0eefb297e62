"""Reuse ILP solutions across isomorphic components (the same layer, repeated).

Keyed by a Weisfeiler-Lehman hash of the labelled component graph; a hit is confirmed by an
isomorphism check (VF2, labels must match) before its solution is mapped onto the new nodes.
"""

from __future__ import annotations

import warnings

import networkx as nx
from networkx.algorithms.isomorphism import DiGraphMatcher

Solution = dict  # anchor -> list of members (nodes of the component graph)

_CACHE: dict[str, list[tuple[nx.DiGraph, Solution]]] = {}


def _key(g: nx.DiGraph, salt: str) -> str:
    with warnings.catch_warnings():  # "hashes for directed graphs changed in networkx 3.5"
        warnings.simplefilter("ignore", UserWarning)
        h = nx.weisfeiler_lehman_graph_hash(g, node_attr="label", edge_attr="label", iterations=2)  # a prefilter: a hit is confirmed by isomorphism
    return f"{salt}:{h}"


def _same(a: dict, b: dict) -> bool:
    return a["label"] == b["label"]


def lookup(g: nx.DiGraph, salt: str) -> Solution | None:
    for cached, solution in _CACHE.get(_key(g, salt), []):
        f = _isomorphism(cached, g)  # cached node -> node of g
        if f is not None:
            return {f[a]: [f[n] for n in members] for a, members in solution.items()}
    return None


def _isomorphism(a: nx.DiGraph, b: nx.DiGraph) -> dict | None:
    """A label-preserving isomorphism a -> b. Repeated layers keep their nodes in the same graph
    order, so pairing nodes by order is tried first and verified exactly; VF2 otherwise."""
    if a.number_of_nodes() != b.number_of_nodes() or a.number_of_edges() != b.number_of_edges():
        return None
    f = dict(zip(_by_pos(a), _by_pos(b)))
    if all(_same(a.nodes[u], b.nodes[f[u]]) for u in a) and all(
        b.has_edge(f[u], f[v]) and _same(d, b.edges[f[u], f[v]]) for u, v, d in a.edges(data=True)
    ):
        return f
    matcher = DiGraphMatcher(a, b, node_match=_same, edge_match=_same)
    return matcher.mapping if matcher.is_isomorphic() else None


def _by_pos(g: nx.DiGraph) -> list:
    return sorted(g.nodes, key=lambda n: g.nodes[n]["pos"])


def store(g: nx.DiGraph, salt: str, solution: Solution) -> None:
    _CACHE.setdefault(_key(g, salt), []).append((g, solution))


def clear() -> None:
    _CACHE.clear()

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
        h = nx.weisfeiler_lehman_graph_hash(g, node_attr="label", edge_attr="label", iterations=3)
    return f"{salt}:{h}"


def _same(a: dict, b: dict) -> bool:
    return a["label"] == b["label"]


def lookup(g: nx.DiGraph, salt: str) -> Solution | None:
    for cached, solution in _CACHE.get(_key(g, salt), []):
        matcher = DiGraphMatcher(cached, g, node_match=_same, edge_match=_same)
        if matcher.is_isomorphic():
            f = matcher.mapping  # cached node -> node of g
            return {f[a]: [f[n] for n in members] for a, members in solution.items()}
    return None


def store(g: nx.DiGraph, salt: str, solution: Solution) -> None:
    _CACHE.setdefault(_key(g, salt), []).append((g, solution))


def clear() -> None:
    _CACHE.clear()

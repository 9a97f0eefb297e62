"""The ILP partitioner: candidates -> independent components -> one ILP each (cached across
isomorphic components) -> regions. HiGHS (highspy) by default, CBC as fallback; a component whose
solve fails or runs out of time takes the greedy partitioner's regions, with a warning.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pulp
from torch.fx import Graph, Node

from evt import debug
from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import memoized
from evt.partition import greedy, ilp_model, solve_cache
from evt.partition.candidates import find_candidates
from evt.partition.components import Component, component, components
from evt.partition.contract import contracted
from evt.partition.region import Region

TIME_LIMIT_S = float(os.environ.get("EVT_ILP_TIME_LIMIT", "10"))
LAST_STATS: deque = deque(maxlen=64)  # statistics of recent solves (benchmarks read them)


@dataclass
class Stats:
    components: int = 0
    cache_hits: int = 0
    variables: int = 0
    constraints: int = 0
    solve_s: float = 0.0
    objective_mib: float = 0.0
    fallbacks: int = 0
    repairs: int = 0
    largest: int = 0  # GEMMs in the largest component solved (a residual stream links every layer's)

    def __str__(self) -> str:
        return (
            f"{self.components} components ({self.cache_hits} from the cache, the largest "
            f"{self.largest} GEMMs), "
            f"{self.variables} variables, {self.constraints} constraints, solved in "
            f"{self.solve_s:.3f} s; keeps {self.objective_mib:.3f} MiB on chip versus unfused"
            + (f"; {self.fallbacks} fell back to greedy" if self.fallbacks else "")
            + (f"; {self.repairs} cycle repairs" if self.repairs else "")
        )


MAX_REPAIRS = 8


def saved_budget_from_env() -> int | None:
    mb = os.environ.get("EVT_SAVED_BUDGET_MB")
    return None if not mb else int(float(mb) * (1 << 20))


def partition(
    graph: Graph, max_aux: int = greedy.MAX_AUX_TENSORS, saved_budget: int | None = -1
) -> list[Region]:
    """`saved_budget`: bytes of forward activations that fusion may add for the backward (None:
    unbounded; -1: `EVT_SAVED_BUDGET_MB` from the environment, else unbounded)."""
    with memoized():
        return _partition(graph, max_aux, saved_budget)


def _partition(graph: Graph, max_aux: int, saved_budget: int | None) -> list[Region]:
    budget = Budget(saved_budget_from_env() if saved_budget == -1 else saved_budget)
    order = {n: i for i, n in enumerate(graph.nodes)}
    comps = components(find_candidates(graph, max_aux), order)
    stats = Stats(components=len(comps))
    chosen = [_solve(c, max_aux, stats, graph, budget) for c in comps]
    for _ in range(MAX_REPAIRS):
        regions = _regions([m for sol in chosen for m in sol.items()], order)
        cycle = _cycle(graph, regions)
        if cycle is None:
            break
        if sum(1 for c in comps if cycle & set(c.anchors)) < 2:  # merging cannot change the solve
            names = sorted(a.name for a in cycle)
            warnings.warn(f"evt: the ILP regions of {names} close a cycle within one component (a "
                          "gap in the model: please report it); using the greedy partition",
                          stacklevel=2)  # fmt: skip
            regions = greedy.partition(graph)
            break
        comps, chosen = _merge(comps, chosen, cycle, order, max_aux, stats, graph, budget)
    else:
        warnings.warn("evt: ILP regions kept closing cycles; using the greedy partition", stacklevel=2)
        regions = greedy.partition(graph)
    debug.log(1, f"ILP partition: {stats}; {len(regions)} regions")
    LAST_STATS.append(stats)
    return regions


def _cycle(graph: Graph, regions: list[Region]) -> set[Node] | None:
    """The anchors of the regions on a cycle of the contracted graph, or None."""
    g = contracted(graph, [r.nodes for r in regions])
    if nx.is_directed_acyclic_graph(g):  # fast; find_cycle on a large DAG is not
        return None
    edges = nx.find_cycle(g)
    on_cycle = {v for e in edges for v in e[:2] if isinstance(v, tuple) and v[0] == "region"}
    return {regions[v[1]].anchor for v in on_cycle}


def _merge(comps, chosen, anchors, order, max_aux, stats, graph, budget):
    """Solve the components of the regions on a cycle again, as one component."""
    hit = [i for i, c in enumerate(comps) if anchors & set(c.anchors)]
    merged = component([c for i in hit for c in comps[i].cands], order)
    stats.repairs += 1
    keep = [i for i in range(len(comps)) if i not in hit]
    return ([comps[i] for i in keep] + [merged],
            [chosen[i] for i in keep] + [_solve(merged, max_aux, stats, graph, budget)])


@dataclass
class Budget:
    """What is left of the saved-activation budget, spent component by component."""

    left: int | None

    def spend(self, comp: Component, solution: dict) -> None:
        if self.left is not None:
            used = ilp_model.saved_bytes(comp.graph, [n for ms in solution.values() for n in ms])
            self.left = max(self.left - used, 0)


def _solve(comp: Component, max_aux: int, stats: Stats, graph: Graph, budget: Budget) -> dict:
    stats.largest = max(stats.largest, len(comp.anchors))
    salt = f"aux{max_aux}:budget{budget.left}"
    solution = solve_cache.lookup(comp.graph, salt)
    if solution is not None:
        stats.cache_hits += 1
    else:
        solution = _run_ilp(comp, max_aux, stats, budget.left)
        if solution is None:
            stats.fallbacks += 1
            solution = _greedy(comp, graph) if budget.left is None else {a: [] for a in comp.anchors}
        else:
            solve_cache.store(comp.graph, salt, solution)
    budget.spend(comp, solution)
    return solution


def _greedy(comp: Component, graph: Graph) -> dict:
    anchors = set(comp.anchors)
    return {r.anchor: list(r.epilogue) for r in greedy.partition(graph) if r.anchor in anchors}


def _run_ilp(comp: Component, max_aux: int, stats: Stats, budget: int | None) -> dict | None:
    model = ilp_model.build(comp.graph, max_aux, budget)
    stats.variables += len(model.problem.variables())
    stats.constraints += model.problem.numConstraints()
    if debug.level() >= 3:
        _write_lp(model, comp)
    start = time.perf_counter()
    status = model.problem.solve(_solver())
    stats.solve_s += time.perf_counter() - start
    if pulp.LpStatus[status] != "Optimal":
        warnings.warn(
            f"evt: ILP for the component of {[a.name for a in comp.anchors]} ended "
            f"'{pulp.LpStatus[status]}' (time limit {TIME_LIMIT_S:g} s, EVT_ILP_TIME_LIMIT); "
            "using the greedy partition there",
            stacklevel=2,
        )
        return None
    stats.objective_mib += pulp.value(model.problem.objective) or 0.0
    return {
        a: [n for (aa, n), var in model.x.items() if aa is a and var.value() > 0.5]
        for a in comp.anchors
    }


def _solver() -> pulp.LpSolver:
    if "HiGHS" in pulp.listSolvers(onlyAvailable=True):
        _quiet_banner()
        return pulp.HiGHS(msg=False, timeLimit=TIME_LIMIT_S, gapRel=0.0)
    return pulp.PULP_CBC_CMD(msg=False, timeLimit=TIME_LIMIT_S, gapRel=0.0)


_bannered = False


def _quiet_banner() -> None:
    """highspy prints a banner on stdout ("Running HiGHS 1.16.0 ... Copyright ...") when the
    process makes its first `Highs` object, whatever pulp's `msg=False` sets after: a line in
    every training log from evt's partitioner. Make that first object here with the process's
    stdout (fd 1, where the C++ writes) pointed at /dev/null."""
    global _bannered
    if _bannered:
        return
    _bannered = True
    try:
        import highspy
    except ImportError:
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _write_lp(model: ilp_model.Model, comp: Component) -> None:
    folder = Path(os.environ.get("EVT_DEBUG_DIR", "evt-debug"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"partition_{comp.anchors[0].name}.lp"
    model.problem.writeLP(str(path))
    debug.log(3, f"wrote ILP model {path}")


def _regions(solution: list[tuple[Node, list[Node]]], order: dict[Node, int]) -> list[Region]:
    regions = [
        Region(a, (a, *sorted(members, key=order.__getitem__)), side(a))
        for a, members in solution
        if members
    ]
    return sorted(regions, key=lambda r: order[r.anchor])

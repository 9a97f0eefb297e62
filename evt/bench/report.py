"""The numbers a report is made of, computed from the records only (never from a constant).

`speedup(results, a, b)` per case is time(b) / time(a): how many times faster `a` ran than `b`,
equal to the ratio of their TFLOP/s (same FLOPs). Ratios exist only where both were measured and
checked right; their geometric mean over cases is the summary figure.
"""

from __future__ import annotations

import math

from evt.bench import plan
from evt.bench.baselines import BASELINES

SUITE_ORDER = {c.name: n for n, c in enumerate(plan.all_cases())}


def index(results: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["case"], r["baseline"]): r for r in results}


def times(results: list[dict], field: str = "time_ms") -> dict[tuple[str, str], float]:
    """(case, baseline) -> its time in `field` (`time_ms`, or `graph_ms`: under CUDA graphs)."""
    return {
        (r["case"], r["baseline"]): r[field]
        for r in results
        if r["status"] == "ok" and r.get(field) is not None
    }


def speedup(
    results: list[dict], a: str, b: str, kind: str | None = None, field: str = "time_ms"
) -> dict[str, float]:
    """case -> time(b) / time(a), for the cases (of `kind`) where both are measured and right."""
    t = times(results, field)
    cases = dict.fromkeys(r["case"] for r in results if kind in (None, r["kind"]))
    return {c: t[c, b] / t[c, a] for c in cases if (c, a) in t and (c, b) in t}


def geomean(values) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def baselines_in(results: list[dict], kind: str | None = None) -> list[str]:
    """Baselines with timed records (of `kind`), in the registry's order (not in-turn's
    comparisons: `markdown.in_turn_table`)."""
    seen = {r["baseline"] for r in results if kind in (None, r["kind"])}
    timed = [b for b in BASELINES if b in seen and BASELINES[b].timed]
    return timed + sorted(seen - set(BASELINES))


def cases_in(results: list[dict], kind: str) -> list[dict]:
    """One record per case of `kind` (for the case's name and dims), in the suite's order."""
    first = {r["case"]: r for r in reversed(results) if r["kind"] == kind}
    return sorted(first.values(), key=lambda r: SUITE_ORDER.get(r["case"], len(SUITE_ORDER)))


def planned(config: dict) -> set[tuple[str, str]]:
    """Every (case, baseline) the full suite measures on this file's device and sizes."""
    the_plan = plan.make_plan(device=config.get("device", "cuda"), small=config.get("small"))
    return {i.key for i in the_plan.items}


def not_timed(record: dict) -> str:
    """Why a record has no time, as a table cell says it."""
    status = record["status"]
    if status == "skipped":
        return f"not measured ({record.get('skip_reason') or 'stage cut short'})"
    return str(status)


def fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "—"
    return f"{x:.{digits}f}" if abs(x) >= 10**-digits else f"{x:.2g}"


def cell(
    record: dict | None, field: str, digits: int = 1, scale: float = 1.0, run: bool = False
) -> str:
    """A table cell: the field's value when measured, else why not: '—' when not planned,
    'not run' when planned (`run`) but no session has tried it."""
    if record is None:
        return "not run" if run else "—"
    if record["status"] != "ok":
        return not_timed(record)
    value = record.get(field)
    return fmt(value * scale if value is not None else None, digits)


def dims(record: dict) -> str:
    """M×N×K (B×H×S×D for attention); a training step's named sizes."""
    return record["shape"] if record["kind"] == "step" else "×".join(map(str, record["dims"]))


def summary(results: list[dict], target: str = "evt") -> list[tuple[str, dict]]:
    """For each other baseline: geomean speedup of `target` over it (ops, steps) with case
    counts, and the baseline's own geomean fraction of the bare GEMM (`mm`) on the ops."""
    rows = []
    for b in baselines_in(results):
        row = {}
        for kind in ("op", "step"):
            s = speedup(results, target, b, kind) if b != target else {}
            row[kind] = (geomean(s.values()), len(s))
        sol = speedup(results, b, "mm", "op") if b != "mm" else {}
        row["vs_mm"] = (geomean(sol.values()), len(sol))
        for kind in ("op", "step"):
            s = speedup(results, target, b, kind, "graph_ms") if b != target else {}
            row[f"{kind}_graph"] = (geomean(s.values()), len(s))
        sol = speedup(results, b, "mm", "op", "graph_ms") if b != "mm" else {}
        row["vs_mm_graph"] = (geomean(sol.values()), len(sol))
        rows.append((b, row))
    return rows


def problems(results: list[dict]) -> list[dict]:
    return [r for r in results if r["status"] != "ok"]


def coverage(results: list[dict], wanted: set[tuple[str, str]]) -> list[tuple[str, dict]]:
    """Per baseline: how many items the full suite plans, and what became of them."""
    idx = index(results)
    rows = []
    for b in BASELINES:
        keys = {k for k in wanted if k[1] == b} | {k for k in idx if k[1] == b}
        counts = {"planned": len({k for k in keys if k in wanted})}
        for k in keys:
            r = idx.get(k)
            status = "not run" if r is None else not_timed(r) if r["status"] != "ok" else "ok"
            counts[status] = counts.get(status, 0) + 1
        rows.append((b, counts))
    return rows
